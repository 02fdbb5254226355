//! Settings a running pipeline takes without a restart: the checkpoint
//! interval, the size of the state cache, the sinks' flush interval and
//! the sources' batch size. The tuner applies its choice through them
//! (`daemon/tune_apply.rs`); the committer reads the interval before every
//! wait, the window operators their budget before every eviction, the sink
//! writers their interval before every wait and the sources their batch
//! size before every batch, so a change takes effect within one checkpoint
//! or one batch and no state is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

pub(crate) struct LiveSettings {
    checkpoint_interval_ms: AtomicU64,
    cache_bytes: AtomicU64,
    /// Shared with the sink writer threads.
    pub(crate) flush_interval_ms: Arc<AtomicU64>,
    /// Shared with the sources.
    pub(crate) batch_size: BatchSize,
}

impl LiveSettings {
    pub(crate) fn new(
        checkpoint_interval_ms: u64,
        cache_bytes: u64,
        flush_interval_ms: u64,
        batch_size: usize,
    ) -> LiveSettings {
        LiveSettings {
            checkpoint_interval_ms: AtomicU64::new(checkpoint_interval_ms),
            cache_bytes: AtomicU64::new(cache_bytes),
            flush_interval_ms: Arc::new(AtomicU64::new(flush_interval_ms)),
            batch_size: BatchSize::from(batch_size),
        }
    }

    pub(crate) fn checkpoint_interval_ms(&self) -> u64 {
        self.checkpoint_interval_ms.load(Relaxed)
    }

    pub(crate) fn cache_bytes(&self) -> u64 {
        self.cache_bytes.load(Relaxed)
    }

    pub(crate) fn set_checkpoint_interval_ms(&self, ms: u64) {
        self.checkpoint_interval_ms.store(ms.max(1), Relaxed);
    }

    pub(crate) fn set_cache_bytes(&self, bytes: u64) {
        self.cache_bytes.store(bytes, Relaxed);
    }

    pub(crate) fn set_flush_interval_ms(&self, ms: u64) {
        self.flush_interval_ms.store(ms, Relaxed);
    }
}

/// The most records a source puts in one batch (`[node] batch_size`),
/// following the live value: the generator and HTTP sources read it as they
/// start a batch, the file, stdin and TCP readers once per 64 KiB read, the
/// UDP and MQTT readers with every message; so a smaller value can close
/// the batch a reader is filling early.
#[derive(Clone, Debug)]
pub(crate) struct BatchSize(Arc<AtomicUsize>);

impl BatchSize {
    pub(crate) fn get(&self) -> usize {
        self.0.load(Relaxed)
    }

    pub(crate) fn set(&self, records: usize) {
        self.0.store(records.max(1), Relaxed);
    }
}

/// A batch size of its own (tests, benchmarks, replays).
impl From<usize> for BatchSize {
    fn from(records: usize) -> BatchSize {
        BatchSize(Arc::new(AtomicUsize::new(records.max(1))))
    }
}

/// One stateful operator instance's share of `[state] cache_bytes` (per
/// worker, split evenly between its stateful operators), following the
/// live value.
#[derive(Clone)]
pub(crate) struct CacheBudget {
    live: Arc<LiveSettings>,
    parts: u64,
}

impl CacheBudget {
    pub(crate) fn new(live: Arc<LiveSettings>, parts: u64) -> CacheBudget {
        CacheBudget {
            live,
            parts: parts.max(1),
        }
    }

    /// A budget that never changes (tests of one operator).
    #[cfg(test)]
    pub(crate) fn fixed(bytes: u64) -> CacheBudget {
        CacheBudget::new(Arc::new(LiveSettings::new(0, bytes, 0, 1)), 1)
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.live.cache_bytes() / self.parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_follows_the_live_cache_size() {
        let live = Arc::new(LiveSettings::new(10_000, 64 << 20, 0, 1024));
        let share = CacheBudget::new(live.clone(), 2);
        assert_eq!(share.bytes(), 32 << 20);
        live.set_cache_bytes(16 << 20);
        assert_eq!(share.bytes(), 8 << 20);
        live.set_checkpoint_interval_ms(0);
        assert_eq!(live.checkpoint_interval_ms(), 1);
    }
}
