//! The deterministic `generator` source: every event is a pure function of
//! `(seed, event index)`, so any worker can produce any slice of the stream
//! and the output never depends on how many workers there are.
//!
//! Which [`GeneratorSpec`] fields each kind reads:
//!
//! | field               | readings | wcount | nexmark |
//! |---------------------|----------|--------|---------|
//! | `seed`              | yes      | no (the workload has no randomness) | yes |
//! | `keys`              | sensors  | keys   | no (ids follow Beam's model) |
//! | `start_ms`          | yes      | yes    | yes     |
//! | `events_per_second` | yes      | yes    | yes (of the global person+auction+bid stream) |
//! | `rate_steps`        | yes      | no     | yes     |
//! | `disorder_ms`       | yes      | no     | no      |
//! | `hot_key_percent`   | yes (`s0`) | yes (key 0) | no |
//! | `event_time_field`  | yes      | yes    | yes     |
//!
//! For wcount the defaults (`start_ms` 0, 100 000 events/s) make
//! `start_ms + i * 1000 / events_per_second` exactly WORKLOADS.md's `i / 100`.

mod mix;
mod nexmark;
mod readings;
mod timeline;
mod wcount;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::data::{BatchBuilder, DataType, Field, Schema, SchemaRef};

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
    /// Unused by NEXMark (0 in its defaults).
    pub(crate) keys: u64,
    /// Event time of event 0, epoch ms.
    pub(crate) start_ms: i64,
    /// Events per second of event time: event `i` is at
    /// `start_ms + i * 1000 / events_per_second` (before `disorder_ms`).
    /// For NEXMark `i` is the global event number over persons, auctions
    /// and bids together.
    pub(crate) events_per_second: u64,
    /// From each step's `at` on, event time advances at its rate instead
    /// (see [`timeline`]); empty for one rate.
    pub(crate) rate_steps: Vec<crate::config::RateStep>,
    /// Readings only: each event's time is moved back by a pseudo-random
    /// amount in `[0, disorder_ms]`.
    pub(crate) disorder_ms: i64,
    /// Skew: this percentage of the events (picked by a hash of the event
    /// index, so still a pure function of it) carry the first key (`s0`,
    /// key 0) instead of their own. 0 is no skew.
    pub(crate) hot_key_percent: u8,
    /// Index of the field whose value is the record's event time.
    pub(crate) event_time_field: usize,
}

/// 2026-01-01T00:00:00Z: a fixed, recognisable start for generated time.
const START_2026_MS: i64 = 1_767_225_600_000;

impl GeneratorSpec {
    /// The default spec of a kind (the values the config uses when the user
    /// gives none).
    pub(crate) fn defaults(kind: GeneratorKind) -> GeneratorSpec {
        let (keys, start_ms, events_per_second) = match kind {
            GeneratorKind::Readings => (100, START_2026_MS, 1000),
            GeneratorKind::Wcount => (wcount::KEYS, 0, wcount::EVENTS_PER_SECOND),
            GeneratorKind::Nexmark(_) => (0, START_2026_MS, nexmark::EVENTS_PER_SECOND),
        };
        let event_time_field = time_field(kind);
        GeneratorSpec {
            kind,
            seed: 0,
            keys,
            start_ms,
            events_per_second,
            rate_steps: Vec::new(),
            disorder_ms: 0,
            hot_key_percent: 0,
            event_time_field,
        }
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
    use DataType::{Float, Int, Str};
    let fields: &[(&str, DataType)] = match kind {
        GeneratorKind::Readings => &[
            ("sensor", Str),
            ("temp", Float),
            ("humidity", Float),
            ("ts", Int),
        ],
        GeneratorKind::Wcount => &[("key", Int), ("value", Int), ("ts", Int)],
        GeneratorKind::Nexmark(NexmarkEvents::Bid) => &[
            ("auction", Int),
            ("bidder", Int),
            ("price", Int),
            ("channel", Str),
            ("url", Str),
            ("date_time", Int),
            ("extra", Str),
        ],
        GeneratorKind::Nexmark(NexmarkEvents::Auction) => &[
            ("id", Int),
            ("item_name", Str),
            ("description", Str),
            ("initial_bid", Int),
            ("reserve", Int),
            ("date_time", Int),
            ("expires", Int),
            ("seller", Int),
            ("category", Int),
            ("extra", Str),
        ],
        GeneratorKind::Nexmark(NexmarkEvents::Person) => &[
            ("id", Int),
            ("name", Str),
            ("email_address", Str),
            ("credit_card", Str),
            ("city", Str),
            ("state", Str),
            ("date_time", Int),
            ("extra", Str),
        ],
    };
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|&(name, ty)| Field::new(name, ty))
            .collect(),
    ))
}

/// Index of the natural event-time field (`ts` or `date_time`) of a kind.
fn time_field(kind: GeneratorKind) -> usize {
    let name = match kind {
        GeneratorKind::Readings | GeneratorKind::Wcount => "ts",
        GeneratorKind::Nexmark(_) => "date_time",
    };
    schema(kind)
        .index_of(name)
        .expect("every built-in schema has a time field")
}

/// Builds the generator of `spec`. The config validates specs; a spec that
/// breaks the rules below is a bug, so it panics.
pub(crate) fn new_generator(spec: &GeneratorSpec) -> Box<dyn Generator> {
    let schema = schema(spec.kind);
    let time = schema.fields().get(spec.event_time_field);
    assert!(
        time.is_some_and(|f| f.ty == DataType::Int),
        "generator event_time_field {} is not an int field of {}",
        spec.event_time_field,
        schema.describe()
    );
    assert!(
        spec.events_per_second > 0,
        "generator events_per_second must be positive"
    );
    match spec.kind {
        GeneratorKind::Readings => {
            assert!(
                spec.keys > 0 && spec.disorder_ms >= 0,
                "generator readings needs keys > 0, disorder_ms >= 0"
            );
            Box::new(readings::Readings::new(spec))
        }
        GeneratorKind::Wcount => {
            assert!(spec.keys > 0, "generator wcount needs keys > 0");
            Box::new(wcount::Wcount::new(spec))
        }
        GeneratorKind::Nexmark(NexmarkEvents::Bid) => Box::new(nexmark::bid::Bids::new(spec)),
        GeneratorKind::Nexmark(NexmarkEvents::Auction) => {
            Box::new(nexmark::auction::Auctions::new(spec))
        }
        GeneratorKind::Nexmark(NexmarkEvents::Person) => {
            Box::new(nexmark::person::Persons::new(spec))
        }
    }
}
