//! `eddy bench trace`: what tracing costs and how fast its analysis is.
//!
//! 1. Overhead: the same two-worker pipeline with a keyed exchange
//!    (generator → map → keyed window → blackhole) runs twice, as fast as
//!    it goes and at a fixed rate, and within each run tracing is switched
//!    on and off every [`PERIOD`]. Throughput (records out of the source)
//!    and the sink's latency histogram are read at every switch, so each
//!    period's records and latencies are its own; the on periods are
//!    compared with the off periods. Whole runs alternated (as this bench
//!    did first) could not tell 5 %: on this shared machine the p99 of one
//!    run differed from the next by up to 2×, the noise changing over
//!    seconds, while periods of 1 s alternating in one run see the same
//!    machine. Each on period is compared with the off periods beside it
//!    and the median of these ratios taken, so that drift over the run
//!    cancels. "On" includes the collector analysing windows (of 200 ms
//!    here, so that several complete within a period), as in a daemon.
//! 2. Analysis throughput: one synthetic 1 s window of a 2-node, 4-worker
//!    pipeline (with exchange streams between the nodes) holding about a
//!    million events, analysed on one thread (median of five analyses).
//! 3. The time to analyse a 1 s window of that shape at the event density
//!    the traced run logged per worker (`--density`: at that density,
//!    and nothing else is run).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::api;
use super::load::load_str;
use crate::exec;
use crate::trace;
use crate::trace::cores::Cores;

/// How long tracing stays on, then off, within a run.
const PERIOD: Duration = Duration::from_secs(1);
/// The collector's window during the runs: at 1 s, a window completes
/// only about once per on period.
const RUN_WINDOW_MS: u64 = 200;
/// The fixed rate of the latency run, events per second.
const LATENCY_RATE: u64 = 200_000;

fn pipeline(events: u64, rate: Option<u64>) -> String {
    // A rate also makes event time advance in step with it.
    let rate = rate.map_or(String::new(), |r| format!("rate = {r}"));
    format!(
        "[node]\nworkers = 2\n{}\
         [transforms.scaled]\ntype = \"map\"\ninputs = [\"events\"]\n\
         fields = {{ value = \"value * 2\" }}\n{}",
        api::wcount_source_toml(events, &rate),
        api::wcount_window_toml("scaled", "100ms")
    )
}

/// Each on or each off period of one run, in order: its records per
/// second and the p99 of its latencies (none if it saw no record out).
/// One burst of the machine moves the p99 of all periods pooled by tens
/// of percent, so periods are compared one by one.
#[derive(Default)]
struct Periods {
    rates: Vec<f64>,
    p99s_us: Vec<Option<f64>>,
}

impl Periods {
    fn add(&mut self, records: u64, seconds: f64, latency_us: &Histogram<u64>) {
        self.rates.push(records as f64 / seconds.max(1e-9));
        self.p99s_us
            .push((!latency_us.is_empty()).then(|| latency_us.value_at_quantile(0.99) as f64));
    }

    fn rate(&self) -> f64 {
        median(self.rates.clone())
    }

    fn p99_us(&self) -> f64 {
        let known: Vec<f64> = self.p99s_us.iter().flatten().copied().collect();
        if known.is_empty() { 0.0 } else { median(known) }
    }
}

/// On against off, period by period: each on period divided by the mean
/// of the off period before it and the one after (the last on period
/// has only the one before), so that the machine's drift over seconds,
/// which moved the medians of whole runs by up to 30 % here, cancels.
/// The median of these ratios, and its 95 % confidence interval (from
/// order statistics, so no distribution is assumed): how finely one run
/// can tell. A period's p99 here varies by ±15 % from the next, so 30
/// pairs resolve about ±8 %, and four times as many half that.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Ratio {
    pub(crate) median: f64,
    pub(crate) lo: f64,
    pub(crate) hi: f64,
}

/// `off[k]` precedes `on[k]`, which precedes `off[k + 1]` (off first).
fn paired(off: &[Option<f64>], on: &[Option<f64>]) -> Option<Ratio> {
    let mut ratios: Vec<f64> = on
        .iter()
        .enumerate()
        .filter_map(|(k, &on)| {
            let beside: Vec<f64> = [off.get(k), off.get(k + 1)]
                .into_iter()
                .flatten()
                .flatten()
                .copied()
                .collect();
            let base = beside.iter().sum::<f64>() / beside.len() as f64;
            (base > 0.0).then(|| on.map(|on| on / base)).flatten()
        })
        .collect();
    if ratios.is_empty() {
        return None;
    }
    crate::cold_sort::sort_by(&mut ratios, f64::total_cmp);
    let n = ratios.len();
    // The ranks (from 1) between which the median lies with 95 %
    // probability: n/2 ± 1.96·√n/2, the normal approximation of the
    // binomial count of ratios below it.
    let half = 1.96 * (n as f64).sqrt() / 2.0;
    let lo = ((n as f64 / 2.0 - half).floor() as usize).max(1);
    let hi = ((n as f64 / 2.0 + 1.0 + half).ceil() as usize).min(n);
    Some(Ratio {
        median: ratios[(n - 1) / 2],
        lo: ratios[lo - 1],
        hi: ratios[hi - 1],
    })
}

/// One run of `periods` periods, tracing on in every other one (the
/// first off); `(off, on)`.
fn run(periods: usize, rate: Option<u64>) -> Result<(Periods, Periods), String> {
    // Enough events to outlast the periods; the run is stopped after them.
    let events = rate.map_or(u64::MAX / 4, |r| {
        r * (periods as u64 + 3) * PERIOD.as_secs()
    });
    let (plan, _) = load_str("<bench trace>", &pipeline(events, rate)).map_err(|d| d.render())?;
    let stop = Arc::new(AtomicBool::new(false));
    let running = exec::start(Arc::new(plan), stop.clone(), Default::default())?;
    let reporter = running.reporter();
    // Records out of the source, and the sink's latencies, so far.
    let read = || {
        let r = reporter.report();
        let records = r
            .components
            .iter()
            .find(|c| c.id == "events")
            .map_or(0, |c| c.counters.records_out);
        let latency = r
            .components
            .into_iter()
            .find(|c| c.id == "rows")
            .and_then(|c| c.latency_us);
        (records, latency)
    };
    // Whatever the periods meet, the run is stopped and tracing left off.
    let measured = measure_periods(periods, &read);
    trace::set_enabled(false);
    stop.store(true, Relaxed);
    let report = running.wait();
    if let Some(f) = report.failure {
        return Err(f);
    }
    measured
}

/// Switches tracing every [`PERIOD`] (off first) and splits what `read`
/// says (records so far, latencies so far) into the on and off periods.
fn measure_periods(
    periods: usize,
    read: &dyn Fn() -> (u64, Option<Histogram<u64>>),
) -> Result<(Periods, Periods), String> {
    let (mut off, mut on) = (Periods::default(), Periods::default());
    // The first second is warm-up (threads, tables, the first windows).
    std::thread::sleep(Duration::from_secs(1));
    let (mut records, mut latency) = read();
    let mut since = Instant::now();
    for p in 0..periods {
        let tracing = p % 2 == 1;
        trace::set_enabled(tracing);
        std::thread::sleep(PERIOD);
        let (now_records, now_latency) = read();
        let seconds = since.elapsed().as_secs_f64();
        since = Instant::now();
        let mut delta = now_latency.clone().ok_or("the sink measured no latency")?;
        if let Some(before) = &latency {
            delta
                .subtract(before)
                .map_err(|e| format!("latency histogram: {e}"))?;
        }
        let side = if tracing { &mut on } else { &mut off };
        side.add(now_records - records, seconds, &delta);
        (records, latency) = (now_records, now_latency);
    }
    Ok((off, on))
}

fn median(mut v: Vec<f64>) -> f64 {
    crate::cold_sort::sort_by(&mut v, f64::total_cmp);
    v[v.len() / 2]
}

/// What the traced runs measured.
pub(crate) struct Overhead {
    pub(crate) off_events_per_s: f64,
    pub(crate) on_events_per_s: f64,
    pub(crate) off_p99_us: f64,
    pub(crate) on_p99_us: f64,
    /// From the ratios of [`paired`] periods, in percent worse (lower
    /// throughput, higher p99), and their 95 % confidence intervals.
    pub(crate) overhead_throughput_pct: f64,
    pub(crate) overhead_throughput_ci_pct: (f64, f64),
    pub(crate) overhead_p99_pct: f64,
    pub(crate) overhead_p99_ci_pct: (f64, f64),
    /// Events per worker-second the engine logged: the busiest window of
    /// the run at a fixed rate, and of the one as fast as it goes.
    pub(crate) traced_events_per_worker_s: f64,
    pub(crate) saturated_events_per_worker_s: f64,
    /// The slowest analysis of a real (200 ms) window during the runs.
    pub(crate) real_window_ms: f64,
    pub(crate) dropped: u64,
    /// On periods (and as many off) of each run.
    pub(crate) periods: usize,
}

pub(crate) struct Figures {
    pub(crate) overhead: Option<Overhead>,
    pub(crate) analysis_events_per_s: f64,
    pub(crate) big_window_events: usize,
    /// On the cores the collector uses (two where there are), and on one.
    pub(crate) window_analysis_ms: f64,
    pub(crate) window_one_core_ms: f64,
    pub(crate) window_events: usize,
    pub(crate) saturated_window_events: usize,
    pub(crate) saturated_window_ms: f64,
}

fn overhead(seconds: u64) -> Result<Overhead, String> {
    let periods = ((seconds / PERIOD.as_secs()) as usize).max(4) & !1;
    trace::set_window_ms(RUN_WINDOW_MS);
    trace::take_windows();
    let saturated_run = run(periods, None);
    let saturated = trace::take_windows();
    let steady_run = run(periods, Some(LATENCY_RATE));
    let steady = trace::take_windows();
    trace::set_window_ms(trace::DEFAULT_WINDOW_MS);
    let ((thr_off, thr_on), (lat_off, lat_on)) = (saturated_run?, steady_run?);
    // The density the engine logged: the busiest window per lane.
    let density = |windows: &[trace::WindowReport]| {
        windows
            .iter()
            .filter(|w| w.lanes > 0)
            .map(|w| w.events as f64 / w.lanes as f64 * 1000.0 / w.window_ms.max(1) as f64)
            .fold(0.0, f64::max)
    };
    let (off_t, on_t) = (thr_off.rate(), thr_on.rate());
    let (off_p, on_p) = (lat_off.p99_us(), lat_on.p99_us());
    let some = |v: &[f64]| v.iter().map(|&r| Some(r)).collect::<Vec<_>>();
    let thr = paired(&some(&thr_off.rates), &some(&thr_on.rates))
        .ok_or("no throughput measured in the saturated run")?;
    let lat = paired(&lat_off.p99s_us, &lat_on.p99s_us)
        .ok_or("no latency measured in the run at a fixed rate")?;
    // Lower throughput is worse: the low end of its ratios is the high
    // end of the overhead.
    let worse_rate = |r: f64| (1.0 - r) * 100.0;
    let worse_p99 = |r: f64| (r - 1.0) * 100.0;
    Ok(Overhead {
        off_events_per_s: off_t,
        on_events_per_s: on_t,
        off_p99_us: off_p,
        on_p99_us: on_p,
        overhead_throughput_pct: worse_rate(thr.median),
        overhead_throughput_ci_pct: (worse_rate(thr.hi), worse_rate(thr.lo)),
        overhead_p99_pct: worse_p99(lat.median),
        overhead_p99_ci_pct: (worse_p99(lat.lo), worse_p99(lat.hi)),
        traced_events_per_worker_s: density(&steady),
        saturated_events_per_worker_s: density(&saturated),
        real_window_ms: steady
            .iter()
            .chain(&saturated)
            .map(|w| w.analysis_ms)
            .fold(0.0, f64::max),
        dropped: steady.iter().chain(&saturated).map(|w| w.dropped).sum(),
        periods: periods / 2,
    })
}

/// Analyses of each synthetic window, the median taken: the collector
/// analyses a window every second in the memory of the one before, and
/// only the first analysis pays the kernel for fresh pages.
const ANALYSES: usize = 5;

/// Analyses a synthetic 1 s window of 2 nodes × 2 workers with about
/// `per_worker` events per worker on `cores`: `(events, median ms)`.
fn analyse(per_worker: f64, seed: u64, cores: Cores) -> (usize, f64) {
    const SECOND: u64 = 1_000_000_000;
    let lanes = trace::synth::pipeline(2, 2, SECOND, per_worker.max(1000.0) as usize, seed);
    let events: usize = lanes.iter().map(|l| l.events.len()).sum();
    // One memory for all, as the collector keeps one for its windows.
    let mut a = trace::report::Analysis::default();
    a.cores = cores;
    let times = (0..ANALYSES)
        .map(|_| {
            let started = Instant::now();
            let r = trace::synth::analyze_lanes(&mut a, &lanes, 0, SECOND);
            let ms = started.elapsed().as_secs_f64() * 1e3;
            std::hint::black_box(r);
            ms
        })
        .collect();
    (events, median(times))
}

/// `density`: analysis only, at that many events per worker-second.
fn measure(seconds: u64, density: Option<u64>) -> Result<Figures, String> {
    let overhead = match density {
        Some(_) => None,
        None => Some(overhead(seconds)?),
    };
    let (per_worker, per_worker_saturated) = match (&overhead, density) {
        (Some(o), _) => (
            o.traced_events_per_worker_s,
            o.saturated_events_per_worker_s,
        ),
        (None, d) => (d.unwrap_or(0) as f64, d.unwrap_or(0) as f64),
    };
    let (big_events, big_ms) = analyse(250_000.0, 1, Cores::ONE);
    let (window_events, window_ms) = analyse(per_worker, 2, Cores::here());
    let (_, window_one_core_ms) = analyse(per_worker, 2, Cores::ONE);
    let (dense_events, dense_ms) = analyse(per_worker_saturated, 3, Cores::here());
    Ok(Figures {
        overhead,
        analysis_events_per_s: big_events as f64 / (big_ms / 1e3).max(1e-9),
        big_window_events: big_events,
        window_analysis_ms: window_ms,
        window_one_core_ms,
        window_events,
        saturated_window_events: dense_events,
        saturated_window_ms: dense_ms,
    })
}

pub(crate) fn bench(seconds: u64, density: Option<u64>, json: bool) -> ExitCode {
    let f = match measure(seconds, density) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("eddy bench trace: {e}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        let o = f.overhead.as_ref();
        println!(
            "{}",
            serde_json::json!({
                "overhead_throughput_pct": o.map(|o| o.overhead_throughput_pct),
                "overhead_p99_pct": o.map(|o| o.overhead_p99_pct),
                "overhead_throughput_ci_pct": o.map(|o| o.overhead_throughput_ci_pct),
                "overhead_p99_ci_pct": o.map(|o| o.overhead_p99_ci_pct),
                "analysis_events_per_s": f.analysis_events_per_s,
                "window_analysis_ms": f.window_analysis_ms,
                "window_analysis_one_core_ms": f.window_one_core_ms,
            })
        );
        return ExitCode::SUCCESS;
    }
    if let Some(o) = &f.overhead {
        println!(
            "tracing overhead (2 workers, generator -> map -> keyed window -> blackhole; on and off alternating every {} s within each run, {} periods each; overhead: median of each on period against the off periods beside it, [95% confidence interval]):",
            PERIOD.as_secs(),
            o.periods
        );
        println!(
            "  throughput  off {:.2} M ev/s   on {:.2} M ev/s (medians)   overhead {:.1}% [{:.1} .. {:.1}] (goal <= 5%)",
            o.off_events_per_s / 1e6,
            o.on_events_per_s / 1e6,
            o.overhead_throughput_pct,
            o.overhead_throughput_ci_pct.0,
            o.overhead_throughput_ci_pct.1
        );
        println!(
            "  p99 at {} k ev/s  off {:.0} us   on {:.0} us (medians)   overhead {:.1}% [{:.1} .. {:.1}] (goal <= 5%)",
            LATENCY_RATE / 1000,
            o.off_p99_us,
            o.on_p99_us,
            o.overhead_p99_pct,
            o.overhead_p99_ci_pct.0,
            o.overhead_p99_ci_pct.1
        );
        println!(
            "  traced: {:.0} events per worker-second at {} k ev/s, {:.0} when saturated; {} dropped; slowest real {RUN_WINDOW_MS} ms window analysed in {:.1} ms",
            o.traced_events_per_worker_s,
            LATENCY_RATE / 1000,
            o.saturated_events_per_worker_s,
            o.dropped,
            o.real_window_ms
        );
    }
    println!(
        "analysis: {:.2} M events/s on one core ({} events in one 1 s window of 2 nodes x 2 workers; goal >= 2 M)",
        f.analysis_events_per_s / 1e6,
        f.big_window_events
    );
    let at = match density {
        Some(d) => format!("{d} events per worker-second"),
        None => format!("the density traced at {} k ev/s", LATENCY_RATE / 1000),
    };
    println!(
        "one 1 s window of 2 nodes x 2 workers at {at} ({} events): {:.2} ms on {} (goal <= 50 ms); {:.2} ms on one core",
        f.window_events,
        f.window_analysis_ms,
        if Cores::here().two() {
            "two cores"
        } else {
            "one core (this machine has no second)"
        },
        f.window_one_core_ms
    );
    if f.overhead.is_some() {
        println!(
            "  at the saturated density ({} events): {:.2} ms",
            f.saturated_window_events, f.saturated_window_ms
        );
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A machine that slows down steadily over the run makes every
    /// later period slower: on periods that cost nothing compare even
    /// with the off periods beside them, where the medians of the two
    /// sides would differ by the drift.
    #[test]
    fn paired_periods_cancel_drift() {
        // p99 grows 10 µs a period; on periods (odd) cost nothing.
        let p99 = |p: usize| Some(100.0 + 10.0 * p as f64);
        let off: Vec<_> = (0..20).step_by(2).map(p99).collect();
        let on: Vec<_> = (1..20).step_by(2).map(p99).collect();
        let r = paired(&off, &on).unwrap();
        // The last on period has only the off period before it.
        assert!((r.median - 1.0).abs() < 1e-9, "{r:?}");
        assert!((r.lo - 1.0).abs() < 1e-9, "{r:?}");
        // A cost of 5 % on every on period is found exactly.
        let costly: Vec<_> = on.iter().map(|p| p.map(|p| p * 1.05)).collect();
        let r = paired(&off, &costly).unwrap();
        assert!((r.median - 1.05).abs() < 1e-9, "{r:?}");
        // Of 30 distinct ratios the median's 95 % interval runs from the
        // 9th to the 22nd (the exact binomial ranks are 10 and 21).
        let base = vec![Some(1.0); 31];
        let ranked: Vec<_> = (1..=30).map(|r| Some(r as f64)).collect();
        let r = paired(&base, &ranked).unwrap();
        assert_eq!((r.lo, r.median, r.hi), (9.0, 15.0, 22.0));
        // Periods without latencies are left out, not paired with others.
        let mut gaps = on.clone();
        gaps[3] = None;
        let r = paired(&[None; 10], &gaps);
        assert_eq!(r, None);
        let r = paired(&off, &gaps).unwrap();
        assert!((r.median - 1.0).abs() < 1e-9, "{r:?}");
    }

    /// Each period counts its own records and latencies: at a fixed rate
    /// every period, on or off, carries about that rate, and the on
    /// periods log events the collector analyses.
    #[test]
    fn periods_split_one_run_into_on_and_off() {
        const RATE: u64 = 20_000;
        trace::set_window_ms(RUN_WINDOW_MS);
        let (off, on) = run(4, Some(RATE)).expect("run");
        trace::set_window_ms(trace::DEFAULT_WINDOW_MS);
        // A period may lag and the next catch up on a busy machine (the
        // generator keeps to its rate overall), so the mean is checked.
        let rates: Vec<f64> = off.rates.iter().chain(&on.rates).copied().collect();
        assert_eq!(rates.len(), 4);
        assert!(rates.iter().all(|&r| r > 0.0), "{rates:?}");
        let mean = rates.iter().sum::<f64>() / 4.0;
        assert!(
            (RATE as f64 * 0.7..RATE as f64 * 1.3).contains(&mean),
            "{rates:?}"
        );
        for side in [&off, &on] {
            assert_eq!(side.p99s_us.iter().flatten().count(), 2);
            assert!(side.p99_us() > 0.0);
        }
        assert!(
            trace::take_windows().iter().any(|w| w.events > 0),
            "no window analysed while tracing was on"
        );
    }
}
