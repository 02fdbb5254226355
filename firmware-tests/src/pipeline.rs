//! The pipeline both sides run: `temp > 20.0`, then `count(*)`,
//! `sum(temp)`, `min(temp)`, `max(temp)` and `avg(temp)` per sensor in
//! 1 s tumbling windows, with the watermark `DISORDER_MS` behind.

use eddy::kernel::agg::NumAgg;
use eddy::kernel::fixed::{FilterWindow, FixedError, frame_capacity, row_words};

use crate::input::{DISORDER_MS, Reading, SENSORS};

/// The filter threshold, degrees.
pub const THRESHOLD: f64 = 20.0;
pub const WINDOW_MS: i64 = 1_000;

/// The aggregates, in output order, with the names the daemon's pipeline
/// gives them and the calls it computes them with.
pub const AGGS: [NumAgg; 5] = [
    NumAgg::Count,
    NumAgg::SumFloat,
    NumAgg::MinFloat,
    NumAgg::MaxFloat,
    NumAgg::AvgFloat,
];
pub const AGG_NAMES: [(&str, &str); 5] = [
    ("n", "count(*)"),
    ("total", "sum(temp)"),
    ("lo", "min(temp)"),
    ("hi", "max(temp)"),
    ("mean", "avg(temp)"),
];
pub const AGG_COUNT: usize = AGGS.len();

/// Keys a window holds: every sensor.
pub const KEYS: usize = SENSORS as usize;
/// Open windows: with the watermark advanced after every record, the
/// windows a record can still go to start within `DISORDER_MS + WINDOW_MS`
/// of the newest event time, so `1 + ceil(DISORDER_MS / WINDOW_MS)`.
pub const WINDOWS: usize = 1 + (DISORDER_MS as u64).div_ceil(WINDOW_MS as u64) as usize;
pub const WORDS: usize = row_words(&AGGS);
/// Bytes of the largest frame.
pub const FRAME_CAPACITY: usize = frame_capacity(AGG_COUNT);

/// The filter: a plain comparison on the device.
pub fn warm(r: &Reading) -> bool {
    r.temp() > THRESHOLD
}

pub type Pipeline = FilterWindow<Reading, fn(&Reading) -> bool, KEYS, WINDOWS, WORDS>;

pub fn new() -> Result<Pipeline, FixedError> {
    FilterWindow::new(
        warm as fn(&Reading) -> bool,
        WINDOW_MS,
        DISORDER_MS,
        0,
        &AGGS,
    )
}
