//! `eddy bench trace`: what tracing costs and how fast its analysis is.
//!
//! 1. Overhead: the same two-worker pipeline with a keyed exchange
//!    (generator → map → keyed window → blackhole) runs with tracing off
//!    and on, alternating, seven times each; the medians of throughput
//!    (as fast as it goes) and of the sink's p99 latency (at a fixed
//!    rate) are compared. "On" includes the collector thread analysing
//!    every window, as in a daemon.
//! 2. Analysis throughput: one synthetic 1 s window of a 2-node, 4-worker
//!    pipeline (with exchange streams between the nodes) holding about a
//!    million events, analysed on one thread (median of five analyses).
//! 3. The time to analyse a 1 s window of that shape at the event density
//!    the traced run logged per worker (`--density`: at that density,
//!    and nothing else is run).

use std::process::ExitCode;
use std::time::Instant;

use super::api;
use crate::trace;

/// Runs of each kind, tracing off and on alternating: the p99 of one
/// 2 s run varies by tens of percent on a shared machine.
const REPS: usize = 7;
/// The fixed rate of the latency runs, events per second.
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

/// `(events/s, p99 µs)` of one run.
fn run(events: u64, rate: Option<u64>) -> Result<(f64, u64), String> {
    let r = api::run_pipeline_str(&pipeline(events, rate))?;
    let p99 = r
        .component("rows")
        .and_then(|c| c.latency_us)
        .map_or(0, |l| l.p99);
    Ok((events as f64 / r.seconds.max(1e-9), p99))
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
    pub(crate) overhead_throughput_pct: f64,
    pub(crate) overhead_p99_pct: f64,
    /// Events per worker-second the engine logged: the busiest window of
    /// the runs at a fixed rate, and of those as fast as they go.
    pub(crate) traced_events_per_worker_s: f64,
    pub(crate) saturated_events_per_worker_s: f64,
    /// The slowest analysis of a real window during the runs.
    pub(crate) real_window_ms: f64,
    pub(crate) dropped: u64,
}

pub(crate) struct Figures {
    pub(crate) overhead: Option<Overhead>,
    pub(crate) analysis_events_per_s: f64,
    pub(crate) big_window_events: usize,
    pub(crate) window_analysis_ms: f64,
    pub(crate) window_events: usize,
    pub(crate) saturated_window_events: usize,
    pub(crate) saturated_window_ms: f64,
}

fn overhead(events: u64) -> Result<Overhead, String> {
    let (mut thr_off, mut thr_on, mut p99_off, mut p99_on) = (vec![], vec![], vec![], vec![]);
    let latency_events = LATENCY_RATE * 2;
    let (mut saturated, mut steady) = (Vec::new(), Vec::new());
    for _ in 0..REPS {
        for on in [false, true] {
            trace::set_enabled(on);
            trace::take_windows();
            let (thr, _) = run(events, None)?;
            saturated.extend(trace::take_windows());
            let (_, p99) = run(latency_events, Some(LATENCY_RATE))?;
            steady.extend(trace::take_windows());
            if on {
                thr_on.push(thr);
                p99_on.push(p99 as f64);
            } else {
                thr_off.push(thr);
                p99_off.push(p99 as f64);
            }
        }
    }
    trace::set_enabled(false);
    // The density the engine logged: the busiest window per lane.
    let density = |windows: &[trace::WindowReport]| {
        windows
            .iter()
            .filter(|w| w.lanes > 0)
            .map(|w| w.events as f64 / w.lanes as f64 * 1000.0 / w.window_ms.max(1) as f64)
            .fold(0.0, f64::max)
    };
    let (off_t, on_t) = (median(thr_off), median(thr_on));
    let (off_p, on_p) = (median(p99_off), median(p99_on));
    Ok(Overhead {
        off_events_per_s: off_t,
        on_events_per_s: on_t,
        off_p99_us: off_p,
        on_p99_us: on_p,
        overhead_throughput_pct: (off_t - on_t) / off_t * 100.0,
        overhead_p99_pct: if off_p > 0.0 {
            (on_p - off_p) / off_p * 100.0
        } else {
            0.0
        },
        traced_events_per_worker_s: density(&steady),
        saturated_events_per_worker_s: density(&saturated),
        real_window_ms: steady
            .iter()
            .chain(&saturated)
            .map(|w| w.analysis_ms)
            .fold(0.0, f64::max),
        dropped: steady.iter().chain(&saturated).map(|w| w.dropped).sum(),
    })
}

/// Analyses of each synthetic window, the median taken: the collector
/// analyses a window every second in the memory of the one before, and
/// only the first analysis pays the kernel for fresh pages.
const ANALYSES: usize = 5;

/// Analyses a synthetic 1 s window of 2 nodes × 2 workers with about
/// `per_worker` events per worker: `(events, median ms)`.
fn analyse(per_worker: f64, seed: u64) -> (usize, f64) {
    const SECOND: u64 = 1_000_000_000;
    let lanes = trace::synth::pipeline(2, 2, SECOND, per_worker.max(1000.0) as usize, seed);
    let events: usize = lanes.iter().map(|l| l.events.len()).sum();
    // One memory for all, as the collector keeps one for its windows.
    let mut a = trace::report::Analysis::default();
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
fn measure(events: u64, density: Option<u64>) -> Result<Figures, String> {
    let overhead = match density {
        Some(_) => None,
        None => Some(overhead(events)?),
    };
    let (per_worker, per_worker_saturated) = match (&overhead, density) {
        (Some(o), _) => (
            o.traced_events_per_worker_s,
            o.saturated_events_per_worker_s,
        ),
        (None, d) => (d.unwrap_or(0) as f64, d.unwrap_or(0) as f64),
    };
    let (big_events, big_ms) = analyse(250_000.0, 1);
    let (window_events, window_ms) = analyse(per_worker, 2);
    let (dense_events, dense_ms) = analyse(per_worker_saturated, 3);
    Ok(Figures {
        overhead,
        analysis_events_per_s: big_events as f64 / (big_ms / 1e3).max(1e-9),
        big_window_events: big_events,
        window_analysis_ms: window_ms,
        window_events,
        saturated_window_events: dense_events,
        saturated_window_ms: dense_ms,
    })
}

pub(crate) fn bench(events: u64, density: Option<u64>, json: bool) -> ExitCode {
    let f = match measure(events, density) {
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
                "analysis_events_per_s": f.analysis_events_per_s,
                "window_analysis_ms": f.window_analysis_ms,
            })
        );
        return ExitCode::SUCCESS;
    }
    if let Some(o) = &f.overhead {
        println!(
            "tracing overhead (median of {REPS}, 2 workers, generator -> map -> keyed window -> blackhole):"
        );
        println!(
            "  throughput  off {:.2} M ev/s   on {:.2} M ev/s   overhead {:.1}% (goal <= 5%)",
            o.off_events_per_s / 1e6,
            o.on_events_per_s / 1e6,
            o.overhead_throughput_pct
        );
        println!(
            "  p99 at {} k ev/s  off {:.0} us   on {:.0} us   overhead {:.1}% (goal <= 5%)",
            LATENCY_RATE / 1000,
            o.off_p99_us,
            o.on_p99_us,
            o.overhead_p99_pct
        );
        println!(
            "  traced: {:.0} events per worker-second at {} k ev/s, {:.0} when saturated; {} dropped; slowest real window analysed in {:.1} ms",
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
        "one 1 s window of 2 nodes x 2 workers at {at} ({} events): {:.2} ms (goal <= 50 ms)",
        f.window_events, f.window_analysis_ms
    );
    if f.overhead.is_some() {
        println!(
            "  at the saturated density ({} events): {:.2} ms",
            f.saturated_window_events, f.saturated_window_ms
        );
    }
    ExitCode::SUCCESS
}
