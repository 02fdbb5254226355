//! The portable core: no_std, no allocation in hot paths, no IO.
//!
//! Everything here is shared by the daemon's engine and the firmware build:
//! key→bin hashing, window assignment, numeric aggregation, watermarks and
//! the intrinsic counters that scaling decisions are made from.

pub mod agg;
pub mod counters;
pub mod fixed;
pub mod hash;
pub mod watermark;
pub mod window;
