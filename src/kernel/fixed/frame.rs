//! [`Frame`]: window results and pipeline counts as postcard frames.

use super::pipeline::PipelineCounts;
use super::window::{Fired, FixedError};
use crate::kernel::agg::AggValue;

/// One result row: the key, the window and the aggregates in the order
/// they were configured, as the daemon's `window` transform outputs them
/// (its records also carry `window_start` and `window_end`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WindowRow<const A: usize> {
    pub key: i64,
    pub window_start: i64,
    pub window_end: i64,
    pub values: heapless::Vec<AggValue, A>,
}

impl<const A: usize> WindowRow<A> {
    /// The row of a fired window; fails if it has more than `A` aggregates.
    pub fn from_fired(fired: &Fired<'_>) -> Result<Self, FixedError> {
        let mut values = heapless::Vec::new();
        for v in fired.values() {
            values.push(v).map_err(|_| FixedError::TooManyAggregates {
                aggregates: fired.len(),
                max: A,
            })?;
        }
        Ok(WindowRow {
            key: fired.key,
            window_start: fired.window.start,
            window_end: fired.window.end,
            values,
        })
    }
}

/// What a device sends: result rows, then, when its input has ended, the
/// pipeline's counts.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Frame<const A: usize> {
    Row(WindowRow<A>),
    End(PipelineCounts),
}

impl<const A: usize> Frame<A> {
    /// Encodes the frame into `buf` (postcard, no allocation) and returns
    /// the bytes written. A buffer of [`frame_capacity`]`(A)` bytes is
    /// always enough.
    pub fn encode<'b>(&self, buf: &'b mut [u8]) -> Result<&'b mut [u8], postcard::Error> {
        postcard::to_slice(self, buf)
    }

    /// Decodes one frame from exactly its bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}

/// The most bytes a [`Frame`] with `aggregates` aggregates takes: a
/// variant tag, then either three varint `i64`s, a length and a tagged
/// value per aggregate, or five varint `u64`s.
pub const fn frame_capacity(aggregates: usize) -> usize {
    const VARINT64: usize = 10;
    const TAG: usize = 1;
    let row = TAG + 3 * VARINT64 + VARINT64 + aggregates * (TAG + VARINT64);
    let end = TAG + 5 * VARINT64;
    if row > end { row } else { end }
}
