//! Intrinsic metrics of every operator instance, and sink latency.
//!
//! Counters are atomics written once per batch by the owning worker and read
//! by whoever reports them; `Relaxed` is enough because each counter is read
//! on its own.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use hdrhistogram::Histogram;

use crate::kernel::counters::Counters;

/// Whether workers measure useful time and count records (on by default).
/// Off only to measure what the instrumentation costs (`eddy bench
/// instrumentation`): rates, `/metrics` and the controller then see zeros.
static INSTRUMENTED: AtomicBool = AtomicBool::new(true);

/// Turns the intrinsic counters on or off for every run of this process
/// from now on.
pub(crate) fn set_instrumented(on: bool) {
    INSTRUMENTED.store(on, Relaxed);
}

/// Read once per operator call: one relaxed load of a cached line.
#[inline]
pub(crate) fn instrumented() -> bool {
    INSTRUMENTED.load(Relaxed)
}

/// The counters of one operator instance (one component on one worker).
#[derive(Default, Debug)]
pub(crate) struct OpMetrics {
    pub(crate) records_in: AtomicU64,
    pub(crate) records_out: AtomicU64,
    /// Time inside operator code.
    pub(crate) useful_ns: AtomicU64,
    /// Time the worker had nothing to do while this instance was running.
    pub(crate) waiting_ns: AtomicU64,
    /// Time spent waiting for space downstream.
    pub(crate) blocked_ns: AtomicU64,
    /// Records that went to the dead-letter output.
    pub(crate) errors: AtomicU64,
    /// Records behind the watermark, dropped or sent to `late_output`.
    pub(crate) late: AtomicU64,
    /// Bins of state that left memory for the store (over the cache budget).
    pub(crate) state_evictions: AtomicU64,
    /// Bins of state read back from the store for new records.
    pub(crate) state_loads: AtomicU64,
    /// Keyed operators only (empty for the others): records received per
    /// key bin, counted where the exchange delivers them to the bin's
    /// owner. One writer (the owning worker), so a relaxed load and store
    /// count without a locked instruction.
    pub(crate) bin_records: Box<[AtomicU64]>,
    /// Keyed operators that keep per-bin state (windows): about how many
    /// bytes each bin's state takes, as the operator last counted it.
    pub(crate) bin_state_bytes: Box<[AtomicU64]>,
    /// The instance's watermark, for `/metrics`.
    pub(crate) watermark: WatermarkGauge,
}

/// An operator instance's watermark: the event time (epoch ms) up to
/// which its input is complete. A user whose windows do not fire looks
/// here first; a source's shares that drift apart show here too.
#[derive(Debug)]
pub(crate) struct WatermarkGauge(std::sync::atomic::AtomicI64);

impl Default for WatermarkGauge {
    fn default() -> Self {
        WatermarkGauge(std::sync::atomic::AtomicI64::new(
            crate::kernel::watermark::WATERMARK_START,
        ))
    }
}

impl WatermarkGauge {
    pub(crate) fn set(&self, watermark: i64) {
        self.0.store(watermark, Relaxed);
    }

    /// `None` before the first watermark and after the final one.
    pub(crate) fn get(&self) -> Option<i64> {
        use crate::kernel::watermark::{WATERMARK_END, WATERMARK_START};
        let v = self.0.load(Relaxed);
        (v != WATERMARK_START && v != WATERMARK_END).then_some(v)
    }
}

impl OpMetrics {
    #[inline]
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// The counters of a keyed operator's instance, with one per-bin slot
    /// for each of `bins`.
    pub(crate) fn keyed(bins: u32) -> OpMetrics {
        let slots = || (0..bins).map(|_| AtomicU64::new(0)).collect();
        OpMetrics {
            bin_records: slots(),
            bin_state_bytes: slots(),
            ..OpMetrics::default()
        }
    }

    /// Counts the rows of a batch arriving at a keyed operator in their
    /// bins (`hashes` are the rows' key hashes).
    #[inline]
    pub(crate) fn count_bins(&self, hashes: &[u64], bins: u32) {
        let slots = &self.bin_records[..];
        if slots.is_empty() || !instrumented() {
            return;
        }
        for &h in hashes {
            if let Some(c) = slots.get(crate::kernel::hash::bin_of(h, bins) as usize) {
                c.store(c.load(Relaxed) + 1, Relaxed);
            }
        }
    }

    /// Per bin: records received so far, and state bytes.
    pub(crate) fn bins(&self) -> (Vec<u64>, Vec<u64>) {
        let read = |v: &[AtomicU64]| v.iter().map(|c| c.load(Relaxed)).collect();
        (read(&self.bin_records), read(&self.bin_state_bytes))
    }

    pub(crate) fn counters(&self) -> Counters {
        Counters {
            records_in: self.records_in.load(Relaxed),
            records_out: self.records_out.load(Relaxed),
            useful_ns: self.useful_ns.load(Relaxed),
            waiting_ns: self.waiting_ns.load(Relaxed),
            blocked_ns: self.blocked_ns.load(Relaxed),
        }
    }
}

/// End-to-end latency (ingestion to sink) in microseconds.
pub(crate) struct Latency {
    histogram: Mutex<Histogram<u64>>,
}

/// Latencies above an hour are clamped into the top bucket.
const LATENCY_MAX_US: u64 = 3_600_000_000;

impl Default for Latency {
    fn default() -> Self {
        let h = Histogram::new_with_bounds(1, LATENCY_MAX_US, 3)
            .expect("static histogram bounds are valid");
        Latency {
            histogram: Mutex::new(h),
        }
    }
}

impl Latency {
    /// Records the latency of every row whose ingestion time is in
    /// `ingest_ns`, as of `now_ns`. Runs of equal stamps (a source batch)
    /// are recorded at once.
    pub(crate) fn record_batch(&self, ingest_ns: &[u64], now_ns: u64) {
        let mut h = self.histogram.lock().unwrap_or_else(|e| e.into_inner());
        let mut i = 0;
        while i < ingest_ns.len() {
            let stamp = ingest_ns[i];
            let mut j = i + 1;
            while j < ingest_ns.len() && ingest_ns[j] == stamp {
                j += 1;
            }
            let us = (now_ns.saturating_sub(stamp) / 1_000).clamp(1, LATENCY_MAX_US);
            let _ = h.record_n(us, (j - i) as u64);
            i = j;
        }
    }

    pub(crate) fn snapshot(&self) -> Histogram<u64> {
        self.histogram
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_records_runs_of_equal_stamps() {
        let l = Latency::default();
        l.record_batch(&[0, 0, 0, 1_000_000], 2_000_000);
        let h = l.snapshot();
        assert_eq!(h.len(), 4);
        assert_eq!(h.value_at_quantile(0.5), 2_000);
        assert_eq!(h.min(), 1_000);
    }
}
