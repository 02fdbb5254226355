//! One monotonic clock for the whole process, in nanoseconds, so that
//! ingestion times stamped by one thread can be compared by another.

use std::sync::OnceLock;
use std::time::Instant;

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Nanoseconds since the process clock started.
#[inline]
pub(crate) fn now_ns() -> u64 {
    origin().elapsed().as_nanos() as u64
}
