//! The tuner's measures of the running pipeline itself, at the settings
//! it applied: what a choice really costs once it has run for a while.
//!
//! Why: a profiling run lasts seconds and misses what only builds up over
//! many windows. In `eddy bench tune` the runs measured 68-73 MiB for the
//! settings chosen at the peak and the daemon then reached 153 MiB; with
//! only the runs to go by, the models kept that choice day after day. A
//! measure in place is told to the optimiser like a run's, marked as such
//! (`optimizer::Observation::in_place`): near it, it stands in for the
//! runs' objectives.
//!
//! Sans-IO: [`InPlace::read`] takes a reading of the process and its
//! pipeline with the time, and returns a measure when a span closes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::tune_store::Measured;

/// One look at the running pipeline, every tuner step.
pub(crate) struct Reading {
    /// The pipeline generation (a reload starts another).
    pub(crate) generation: u64,
    /// The settings the tuner applied to this generation, if it did. Not
    /// when: the tuner applies its choice again each time the forecast
    /// peak moves, often the same settings at low rates, which change
    /// nothing and must not start the settling over (in `eddy bench
    /// tune` no measure was made below a fifth of the peak).
    pub(crate) applied: Option<BTreeMap<String, u64>>,
    /// The process's own CPU seconds so far (its profiling runs, children,
    /// not counted).
    pub(crate) cpu_s: f64,
    /// Records out of every source so far.
    pub(crate) records: u64,
    pub(crate) rss_bytes: u64,
    /// End-to-end latency of every sink's records so far, in microseconds.
    pub(crate) latency_us: Option<Histogram<u64>>,
}

/// Spans of `span` each: the first after the settings change lets them
/// settle (bins move, state grows into the new cache) and is not told.
pub(crate) struct InPlace {
    span: Duration,
    current: Option<Span>,
}

struct Span {
    generation: u64,
    applied: BTreeMap<String, u64>,
    /// The first span after a change: it is not measured.
    settling: bool,
    started: Instant,
    cpu_s: f64,
    records: u64,
    latency_us: Option<Histogram<u64>>,
    peak_rss: u64,
}

impl InPlace {
    pub(crate) fn new(span: Duration) -> InPlace {
        InPlace {
            span: span.max(Duration::from_millis(1)),
            current: None,
        }
    }

    /// Takes `reading` at `now`: the measure of the span it closes, if it
    /// closes one that counts.
    pub(crate) fn read(&mut self, now: Instant, reading: Reading) -> Option<Measured> {
        let Some(applied) = reading.applied.clone() else {
            self.current = None;
            return None;
        };
        let same = self
            .current
            .as_ref()
            .is_some_and(|s| s.generation == reading.generation && s.applied == applied);
        if !same {
            self.current = Some(Span::start(now, reading, applied, true));
            return None;
        }
        let span = self.current.as_mut()?;
        span.peak_rss = span.peak_rss.max(reading.rss_bytes);
        let elapsed = now.duration_since(span.started);
        if elapsed < self.span {
            return None;
        }
        let measured = (!span.settling)
            .then(|| span.measure(elapsed, self.span, &reading))
            .flatten();
        self.current = Some(Span::start(now, reading, applied, false));
        measured
    }
}

impl Span {
    fn start(now: Instant, r: Reading, applied: BTreeMap<String, u64>, settling: bool) -> Span {
        Span {
            generation: r.generation,
            applied,
            settling,
            started: now,
            cpu_s: r.cpu_s,
            records: r.records,
            latency_us: r.latency_us,
            peak_rss: r.rss_bytes,
        }
    }

    /// What the span measured, scaled to a run of `span` (the length of a
    /// profiling run, whose CPU seconds the models compare it with); none
    /// when no record reached a sink in it, or the counters went back.
    fn measure(&self, elapsed: Duration, span: Duration, now: &Reading) -> Option<Measured> {
        let secs = elapsed.as_secs_f64();
        let records = now.records.checked_sub(self.records)?;
        let cpu_s = now.cpu_s - self.cpu_s;
        if records == 0 || cpu_s <= 0.0 {
            return None;
        }
        let mut latency = now.latency_us.clone()?;
        if let Some(before) = &self.latency_us {
            latency.subtract(before).ok()?;
        }
        if latency.is_empty() {
            return None;
        }
        Some(Measured {
            settings: self.applied.clone(),
            rate: records as f64 / secs,
            cpu_s: cpu_s * span.as_secs_f64() / secs,
            peak_memory_bytes: self.peak_rss.max(now.rss_bytes) as f64,
            latency_p99_ms: latency.value_at_quantile(0.99) as f64 / 1000.0,
            recovery_s: None,
            fell_behind: false,
            in_place: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(latencies_us: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new(3).unwrap();
        for &l in latencies_us {
            h.record(l).unwrap();
        }
        h
    }

    fn reading(applied: Option<u64>, cpu_s: f64, records: u64, rss: u64, lat: &[u64]) -> Reading {
        Reading {
            generation: 1,
            applied: applied.map(|cache| [("cache_bytes".to_string(), cache)].into()),
            cpu_s,
            records,
            rss_bytes: rss,
            latency_us: Some(histogram(lat)),
        }
    }

    #[test]
    fn a_span_after_the_settling_one_measures_cpu_memory_and_latency() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut m = InPlace::new(s(10));
        assert!(m.read(t0, reading(None, 0.0, 0, 1, &[])).is_none());
        // Applied: the first span settles.
        assert!(
            m.read(t0, reading(Some(64), 1.0, 100, 10, &[5_000]))
                .is_none()
        );
        assert!(
            m.read(t0 + s(5), reading(Some(64), 2.0, 600, 50, &[5_000]))
                .is_none()
        );
        assert!(
            m.read(t0 + s(10), reading(Some(64), 3.0, 1100, 20, &[5_000]))
                .is_none()
        );
        // The measured span: 20 s (readings come every step, not exactly
        // at its end), 4000 records, 8 CPU s, RSS up to 90 bytes, and the
        // latencies of its records only.
        let mid = reading(Some(64), 7.0, 3100, 90, &[5_000, 20_000]);
        assert!(m.read(t0 + s(15), mid).is_none());
        let mut lat = vec![5_000, 20_000];
        lat.extend(std::iter::repeat_n(100_000, 50));
        let end = reading(Some(64), 11.0, 5100, 30, &lat);
        let got = m.read(t0 + s(30), end).expect("a measure");
        assert_eq!(got.settings["cache_bytes"], 64);
        assert!((got.rate - 200.0).abs() < 1e-9, "{}", got.rate);
        // CPU per 10 s, the span a profiling run lasts.
        assert!((got.cpu_s - 4.0).abs() < 1e-9, "{}", got.cpu_s);
        assert_eq!(got.peak_memory_bytes, 90.0);
        assert!(
            (got.latency_p99_ms - 100.0).abs() < 0.1,
            "{}",
            got.latency_p99_ms
        );
        assert!(got.in_place && got.recovery_s.is_none() && !got.fell_behind);
    }

    #[test]
    fn new_settings_or_a_reload_settle_again_and_a_span_without_output_tells_nothing() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut m = InPlace::new(s(10));
        m.read(t0, reading(Some(64), 0.0, 0, 10, &[]));
        m.read(t0 + s(10), reading(Some(64), 1.0, 100, 10, &[1]));
        // Settings change just as the span would close: settle again.
        assert!(
            m.read(t0 + s(20), reading(Some(32), 2.0, 200, 10, &[1, 2]))
                .is_none()
        );
        assert!(
            m.read(t0 + s(30), reading(Some(32), 3.0, 300, 10, &[1, 2]))
                .is_none()
        );
        // Records came in, none reached a sink: no latency to tell.
        assert!(
            m.read(t0 + s(40), reading(Some(32), 4.0, 400, 10, &[1, 2]))
                .is_none()
        );
        let mut reload = reading(Some(32), 5.0, 10, 10, &[]);
        reload.generation = 2;
        assert!(m.read(t0 + s(50), reload).is_none());
        // Untouched settings are not the tuner's to measure.
        assert!(
            m.read(t0 + s(60), reading(None, 6.0, 20, 10, &[3]))
                .is_none()
        );
        assert!(m.current.is_none());
    }
}
