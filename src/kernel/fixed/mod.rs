//! A filter and a keyed tumbling-window aggregation on fixed-capacity
//! storage: what a microcontroller runs, with no heap.
//!
//! [`KeyedTumbling`] holds up to `WINDOWS` open windows of up to `KEYS` keys
//! each, every key's numeric accumulators being one [`NumLayout`] row of
//! `WORDS` words, exactly as the daemon's `window` transform keeps them. It
//! follows the daemon's semantics: a window `[start, end)` fires when the
//! watermark reaches `end - 1`; within `allowed_lateness` a late record
//! updates its window and the key's row is emitted again; later records are
//! late (counted, dropped). Because the accumulators and the order of the
//! folds are the daemon's, results are bit-identical to the daemon's when
//! records arrive in the same order per key.
//!
//! [`FilterWindow`] puts a predicate and a bounded-out-of-orderness
//! watermark in front of it: a whole `filter` → `window` pipeline.
//! [`Frame`] is what results travel as: postcard, encoded into a caller's
//! buffer with [`Frame::encode`].
//!
//! Capacities are const generics, so all state has a size known at compile
//! time and can live in a `static`. A full window or a full set of windows
//! is a [`FixedError`] for that record, never a panic, and leaves the state
//! as it was.
//!
//! [`NumLayout`]: super::agg::NumLayout

mod frame;
mod pipeline;
mod window;

#[cfg(test)]
mod tests;

pub use frame::{Frame, WindowRow, frame_capacity};
pub use pipeline::{Event, FilterWindow, Outcome, PipelineCounts, Record};
pub use window::{Accepted, Fired, FixedError, KeyedTumbling, Num, row_words};
