//! Per-bin state size for the controller (`eddy_bin_state_bytes`, the
//! gossiped bin summary): an operator sums its per-bin key counts at most
//! once a second, off the per-record path, and publishes the bytes in its
//! metrics.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::exec::metrics::{OpMetrics, instrumented};

/// How often the keys are recounted: the controller reads once a second.
#[cfg(not(test))]
const RECOUNT_INTERVAL: Duration = Duration::from_secs(1);
/// Tests read the count right after what changes it.
#[cfg(test)]
const RECOUNT_INTERVAL: Duration = Duration::ZERO;

pub(super) struct BinBytes {
    /// Bytes one key takes in memory (the operator's estimate).
    entry_bytes: u64,
    counted_at: Option<Instant>,
    counts: Vec<u64>,
}

impl BinBytes {
    pub(super) fn new(entry_bytes: u64) -> BinBytes {
        BinBytes {
            entry_bytes,
            counted_at: None,
            counts: Vec::new(),
        }
    }

    /// Whether a recount is due (and the metrics have per-bin slots).
    pub(super) fn due(&self, metrics: &OpMetrics) -> bool {
        !metrics.bin_state_bytes.is_empty()
            && instrumented()
            && self
                .counted_at
                .is_none_or(|t| t.elapsed() >= RECOUNT_INTERVAL)
    }

    /// Sums the keys in memory per bin (one slice of per-bin counts per
    /// part of the state, each as long as the metrics' slots) and the
    /// entries of each bin in the store (`stored(bin)`; a key in several
    /// pieces counts in each, so this bounds the bin from above), and
    /// publishes their bytes.
    pub(super) fn publish<'a>(
        &mut self,
        metrics: &OpMetrics,
        parts: impl Iterator<Item = &'a [u32]>,
        stored: impl Fn(u32) -> u64,
    ) {
        self.counted_at = Some(Instant::now());
        let slots = &metrics.bin_state_bytes;
        self.counts.clear();
        self.counts.resize(slots.len(), 0);
        for part in parts {
            for (sum, &keys) in self.counts.iter_mut().zip(part) {
                *sum += u64::from(keys);
            }
        }
        for (bin, (slot, &keys)) in slots.iter().zip(&self.counts).enumerate() {
            slot.store((keys + stored(bin as u32)) * self.entry_bytes, Relaxed);
        }
    }
}
