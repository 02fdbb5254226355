//! [`FilterWindow`]: a filter, a watermark and keyed tumbling windows.

use super::window::{Accepted, Fired, FixedError, KeyedTumbling, Num};
use crate::kernel::agg::NumAgg;
use crate::kernel::watermark::{BoundedOutOfOrderness, WATERMARK_END};

/// A record the pipeline can window: an integer key, an event time in epoch
/// milliseconds and the value its aggregates fold.
pub trait Event {
    fn key(&self) -> i64;
    fn event_time(&self) -> i64;
    fn value(&self) -> Num;
}

/// A plain record, for callers without a record type of their own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Record {
    pub key: i64,
    pub ts: i64,
    pub value: Num,
}

impl Event for Record {
    fn key(&self) -> i64 {
        self.key
    }
    fn event_time(&self) -> i64 {
        self.ts
    }
    fn value(&self) -> Num {
        self.value
    }
}

/// Counts of one pipeline since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PipelineCounts {
    pub records_in: u64,
    /// Records the filter dropped.
    pub filtered_out: u64,
    /// Records behind their window's allowed lateness.
    pub late: u64,
    /// Records refused for lack of room ([`FixedError::KeysFull`],
    /// [`FixedError::WindowsFull`]) or of the wrong type.
    pub refused: u64,
    /// Result rows emitted (updates included).
    pub rows_out: u64,
}

/// What became of one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Filtered,
    Folded,
    Late,
}

/// `filter` → keyed tumbling `window`, with the watermark of a source with
/// bounded out-of-orderness: the daemon's `source → filter → window`
/// pipeline on fixed-capacity storage.
///
/// Each record is filtered and windowed first; then its event time moves
/// the watermark (filtered records included, as at the daemon's source),
/// which fires the windows it has passed. That is the daemon's order for a
/// batch of one record.
pub struct FilterWindow<E, F, const KEYS: usize, const WINDOWS: usize, const WORDS: usize>
where
    F: Fn(&E) -> bool,
{
    keep: F,
    watermarks: BoundedOutOfOrderness,
    window: KeyedTumbling<KEYS, WINDOWS, WORDS>,
    counts: PipelineCounts,
    _event: core::marker::PhantomData<fn(&E)>,
}

impl<E, F, const KEYS: usize, const WINDOWS: usize, const WORDS: usize>
    FilterWindow<E, F, KEYS, WINDOWS, WORDS>
where
    E: Event,
    F: Fn(&E) -> bool,
{
    /// Keeps the records for which `keep` is true, and aggregates them with
    /// `aggs` per key in tumbling windows of `size_ms`; the watermark lags
    /// the newest event time by `max_out_of_orderness_ms` (and 1 ms).
    pub fn new(
        keep: F,
        size_ms: i64,
        max_out_of_orderness_ms: i64,
        allowed_lateness_ms: i64,
        aggs: &[NumAgg],
    ) -> Result<Self, FixedError> {
        if max_out_of_orderness_ms < 0 {
            return Err(FixedError::BadDuration);
        }
        Ok(FilterWindow {
            keep,
            watermarks: BoundedOutOfOrderness::new(max_out_of_orderness_ms),
            window: KeyedTumbling::new(size_ms, allowed_lateness_ms, aggs)?,
            counts: PipelineCounts::default(),
            _event: core::marker::PhantomData,
        })
    }

    /// Runs one record through the pipeline; rows of the windows it fires
    /// (or updates) go to `emit`. A refused record (an error) still moves
    /// the watermark: its time was seen.
    #[inline]
    pub fn handle_record(
        &mut self,
        event: &E,
        emit: &mut impl FnMut(Fired<'_>),
    ) -> Result<Outcome, FixedError> {
        self.counts.records_in += 1;
        let ts = event.event_time();
        let rows_out = &mut self.counts.rows_out;
        let mut counted = |f: Fired<'_>| {
            *rows_out += 1;
            emit(f)
        };
        let outcome = if (self.keep)(event) {
            match self
                .window
                .handle_record(event.key(), ts, event.value(), &mut counted)
            {
                Ok(Accepted::Folded) => Ok(Outcome::Folded),
                Ok(Accepted::Late) => {
                    self.counts.late += 1;
                    Ok(Outcome::Late)
                }
                Err(e) => {
                    self.counts.refused += 1;
                    Err(e)
                }
            }
        } else {
            self.counts.filtered_out += 1;
            Ok(Outcome::Filtered)
        };
        self.watermarks.observe(ts);
        self.window
            .handle_watermark(self.watermarks.watermark(), &mut counted);
        outcome
    }

    /// The input has ended: the final watermark fires every open window.
    pub fn handle_end(&mut self, emit: &mut impl FnMut(Fired<'_>)) {
        let rows_out = &mut self.counts.rows_out;
        self.window.handle_watermark(WATERMARK_END, &mut |f| {
            *rows_out += 1;
            emit(f)
        });
    }

    pub fn counts(&self) -> PipelineCounts {
        self.counts
    }

    pub fn window(&self) -> &KeyedTumbling<KEYS, WINDOWS, WORDS> {
        &self.window
    }
}
