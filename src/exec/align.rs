//! Watermark alignment (Flink's FLIP-182) between the workers of one node
//! that share a source: a worker whose share of the source is more than
//! `max_drift` of event time ahead of the slowest share waits before it
//! polls again.
//!
//! Without it, an unpaced generator on two workers that run at slightly
//! different speeds spreads event time without bound: a keyed window
//! downstream fires only as far as the slower share's watermark, so it
//! keeps every window between the two open, and memory grows for as long
//! as the run lasts (100–400 MB a second here with 100 ms windows). A share
//! that is idle (nothing to give at this poll) or has ended holds no one
//! back, as Flink excludes idle splits; one that has not produced yet
//! holds no one back either, so a run never waits for a share to start.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// A share that holds no one back: idle, ended or not started.
const FREE: i64 = i64::MAX;

/// The watermark of each worker's share of one source on this node.
pub(crate) struct Alignment {
    shares: Vec<AtomicI64>,
    max_drift_ms: i64,
}

impl Alignment {
    pub(crate) fn new(workers: usize, max_drift_ms: i64) -> Alignment {
        Alignment {
            shares: (0..workers).map(|_| AtomicI64::new(FREE)).collect(),
            max_drift_ms,
        }
    }

    /// `worker`'s share produced up to this watermark.
    pub(crate) fn advanced(&self, worker: usize, watermark: i64) {
        // A watermark at `FREE` would make the share free; one below it
        // is as far ahead as anything can be.
        self.shares[worker].store(watermark.min(FREE - 1), Relaxed);
    }

    /// `worker`'s share had nothing to give, or ended.
    pub(crate) fn free(&self, worker: usize) {
        self.shares[worker].store(FREE, Relaxed);
    }

    /// Whether `worker` should wait: its share is more than `max_drift`
    /// ahead of the slowest share that holds others back.
    pub(crate) fn ahead(&self, worker: usize) -> bool {
        let mine = self.shares[worker].load(Relaxed);
        if mine == FREE {
            return false;
        }
        let slowest = self
            .shares
            .iter()
            .map(|s| s.load(Relaxed))
            .min()
            .unwrap_or(FREE);
        mine > slowest.saturating_add(self.max_drift_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_waits_only_beyond_the_drift_of_the_slowest_busy_share() {
        let a = Alignment::new(3, 1000);
        // Nobody has produced: nobody waits.
        assert!(!(0..3).any(|w| a.ahead(w)));
        a.advanced(0, 5_000);
        a.advanced(1, 4_000);
        // Worker 2 has not started: it holds no one back.
        assert!(!a.ahead(0), "exactly the drift ahead may go on");
        a.advanced(0, 5_001);
        assert!(a.ahead(0));
        assert!(!a.ahead(1), "the slowest never waits");
        // The slowest catches up: the leader goes on.
        a.advanced(1, 4_500);
        assert!(!a.ahead(0));
        // A share far behind holds the others until it is idle or ends.
        a.advanced(2, 0);
        assert!(a.ahead(0) && a.ahead(1) && !a.ahead(2));
        a.free(2);
        assert!(!a.ahead(0) && !a.ahead(1));
        // A free share never waits, whatever the others.
        a.free(0);
        assert!(!a.ahead(0));
    }

    #[test]
    fn watermarks_at_the_extremes_neither_overflow_nor_free_a_share() {
        let a = Alignment::new(2, i64::MAX);
        a.advanced(0, 0);
        a.advanced(1, i64::MAX);
        // Drift without bound: no one waits, and the add saturates.
        assert!(!a.ahead(1));
        let b = Alignment::new(2, 10);
        b.advanced(0, i64::MIN);
        b.advanced(1, i64::MAX);
        assert!(b.ahead(1), "the end of time is still a watermark");
    }
}
