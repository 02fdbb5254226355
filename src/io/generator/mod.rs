//! The deterministic `generator` source: every event is a pure function of
//! `(seed, event index)`, so any worker can produce any slice of the stream
//! and the output never depends on how many workers there are.

use crate::data::{BatchBuilder, SchemaRef};

/// The built-in schemas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GeneratorKind {
    /// `sensor` (string `"s0".."s{keys-1}"`), `temp` (float), `humidity`
    /// (float), `ts` (int epoch ms).
    Readings,
    /// The `wcount` workload of WORKLOADS.md: `key`, `value`, `ts`.
    Wcount,
    /// NEXMark bids, auctions or persons.
    Nexmark(NexmarkEvents),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NexmarkEvents {
    Person,
    Auction,
    Bid,
}

/// Everything a generator needs, validated by the config.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GeneratorSpec {
    pub(crate) kind: GeneratorKind,
    pub(crate) seed: u64,
    /// Number of distinct keys (`sensor`s for readings, `key`s for wcount).
    pub(crate) keys: u64,
    /// Event time of event 0, epoch ms.
    pub(crate) start_ms: i64,
    /// Events per second of event time: event `i` is at
    /// `start_ms + i * 1000 / events_per_second` (before `disorder_ms`).
    pub(crate) events_per_second: u64,
    /// Readings only: each event's time is moved back by a pseudo-random
    /// amount in `[0, disorder_ms]`.
    pub(crate) disorder_ms: i64,
    /// Index of the field whose value is the record's event time.
    pub(crate) event_time_field: usize,
}

impl GeneratorSpec {
    /// The default spec of a kind (the values the config uses when the user
    /// gives none).
    pub(crate) fn defaults(kind: GeneratorKind) -> GeneratorSpec {
        let _ = kind;
        todo!("generator")
    }
}

/// Produces events into batches.
pub(crate) trait Generator: Send {
    /// Appends events `first, first + step, ..` (`n` of them) to `out`,
    /// finishing one row per event with its event time and `ingest_ns`.
    fn fill(&mut self, first: u64, step: u64, n: usize, out: &mut BatchBuilder, ingest_ns: u64);
}

/// The schema a generator of `kind` produces.
pub(crate) fn schema(kind: GeneratorKind) -> SchemaRef {
    let _ = kind;
    todo!("generator")
}

pub(crate) fn new_generator(spec: &GeneratorSpec) -> Box<dyn Generator> {
    let _ = spec;
    todo!("generator")
}
