//! The small public API that benchmarks and tools use to drive the real
//! engine in-process.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use super::load::{load, load_str};
use crate::exec;
use crate::io::Tap;
use crate::plan::NodeKind;

/// What a pipeline run did, per component.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub seconds: f64,
    pub components: Vec<ComponentStats>,
    pub dead_letters: u64,
}

#[derive(Clone, Debug)]
pub struct ComponentStats {
    pub id: String,
    pub records_in: u64,
    pub records_out: u64,
    /// Records per second of useful time (DS2's true processing rate).
    pub true_rate: Option<f64>,
    pub errors: u64,
    pub late: u64,
    /// Bins evicted to the store and loaded back (state over the cache).
    pub state_evictions: u64,
    pub state_loads: u64,
    /// Sinks only: end-to-end latency percentiles in microseconds.
    pub latency_us: Option<LatencyPercentiles>,
}

#[derive(Clone, Copy, Debug)]
pub struct LatencyPercentiles {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl RunReport {
    pub fn component(&self, id: &str) -> Option<&ComponentStats> {
        self.components.iter().find(|c| c.id == id)
    }
}

/// Runs the pipeline in `path` to its end.
pub fn run_pipeline_file(path: &Path) -> Result<RunReport, String> {
    let (plan, _) = load(path).map_err(|d| d.render())?;
    run_plan(plan, HashMap::new())
}

/// Runs a pipeline given as TOML text to its end.
pub fn run_pipeline_str(toml: &str) -> Result<RunReport, String> {
    let (plan, _) = load_str("<pipeline>", toml).map_err(|d| d.render())?;
    run_plan(plan, HashMap::new())
}

fn run_plan(plan: crate::plan::Plan, taps: HashMap<String, Tap>) -> Result<RunReport, String> {
    let running = exec::start(Arc::new(plan), Arc::new(AtomicBool::new(false)), taps)?;
    let report = running.wait();
    if let Some(f) = report.failure {
        return Err(f);
    }
    Ok(RunReport {
        seconds: report.elapsed.as_secs_f64(),
        dead_letters: report.dead_letters,
        components: report
            .components
            .iter()
            .map(|c| ComponentStats {
                id: c.id.clone(),
                records_in: c.counters.records_in,
                records_out: c.counters.records_out,
                true_rate: if c.kind == NodeKind::Source {
                    c.counters.true_output_rate()
                } else {
                    c.counters.true_processing_rate()
                },
                errors: c.errors,
                late: c.late,
                state_evictions: c.state_evictions,
                state_loads: c.state_loads,
                latency_us: c.latency_us.as_ref().filter(|h| !h.is_empty()).map(|h| {
                    LatencyPercentiles {
                        p50: h.value_at_quantile(0.5),
                        p99: h.value_at_quantile(0.99),
                        p999: h.value_at_quantile(0.999),
                        max: h.max(),
                    }
                }),
            })
            .collect(),
    })
}

/// The result of the `wcount` workload.
#[derive(Clone, Debug, PartialEq)]
pub struct WcountReport {
    pub events: u64,
    pub workers: usize,
    pub seconds: f64,
    pub events_per_s: f64,
    pub rows: u64,
    pub count_total: u64,
    pub sum_total: u64,
}

impl WcountReport {
    /// Whether the totals are exactly what `events` events must give.
    pub fn verify(&self) -> Result<(), String> {
        let expected = wcount_expected(self.events);
        let got = (self.rows, self.count_total, self.sum_total);
        if got == expected {
            Ok(())
        } else {
            Err(format!(
                "wcount totals (rows, count, sum) = {got:?}, expected {expected:?}"
            ))
        }
    }
}

/// `(rows, count_total, sum_total)` of `wcount` over `n` events: 10 000
/// keys, 100 000 events per 1 s window, and every 10 000 consecutive events
/// hold every key once (2654435761 is coprime with 10 000).
pub fn wcount_expected(n: u64) -> (u64, u64, u64) {
    const KEYS: u64 = 10_000;
    const PER_WINDOW: u64 = 100_000;
    let full = n / PER_WINDOW;
    let rows = full * KEYS + (n % PER_WINDOW).min(KEYS);
    let sum = (n / 100) * 4950 + (0..n % 100).sum::<u64>();
    (rows, n, sum)
}

/// wcount's source, `events`: `count` records of the `wcount` generator
/// (with `extra` lines, such as a rate), checkpoints off so the engine runs
/// alone, state in memory as the timely baseline keeps it.
pub(crate) fn wcount_source_toml(count: u64, extra: &str) -> String {
    format!(
        "[checkpoint]\nenabled = false\n[sources.events]\ntype = \"generator\"\n\
         schema = \"wcount\"\ncount = {count}\n{extra}\n"
    )
}

/// wcount's window `counts` (count and sum of `value` per `key` in
/// tumbling windows of `size`) over `input`, into the blackhole `rows`.
pub(crate) fn wcount_window_toml(input: &str, size: &str) -> String {
    format!(
        "[transforms.counts]\ntype = \"window\"\ninputs = [\"{input}\"]\nkey = [\"key\"]\n\
         window = {{ kind = \"tumbling\", size = \"{size}\" }}\n\
         aggregates = {{ count = \"count(*)\", sum = \"sum(value)\" }}\n\
         [sinks.rows]\ntype = \"blackhole\"\ninputs = [\"counts\"]\n"
    )
}

/// Runs `wcount` (generator → keyed 1 s tumbling count and sum → counting
/// sink) through the real engine.
pub fn wcount(events: u64, workers: usize) -> Result<WcountReport, String> {
    let toml = format!(
        "[node]\nworkers = {workers}\n{}{}",
        wcount_source_toml(events, ""),
        wcount_window_toml("events", "1s")
    );
    let (plan, _) = load_str("<wcount>", &toml).map_err(|d| d.render())?;
    let schema = plan
        .nodes
        .iter()
        .find(|n| n.id == "counts")
        .map(|n| n.outputs[0].schema.clone())
        .ok_or("no window")?;
    let (count_col, sum_col) = (
        schema.index_of("count").ok_or("no count")?,
        schema.index_of("sum").ok_or("no sum")?,
    );
    let totals = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let t = totals.clone();
    let tap: Tap = Arc::new(move |b| {
        let count: i64 = b.column(count_col).ints().iter().sum();
        let sum: i64 = b.column(sum_col).ints().iter().sum();
        t[0].fetch_add(b.len() as u64, Relaxed);
        t[1].fetch_add(count as u64, Relaxed);
        t[2].fetch_add(sum as u64, Relaxed);
    });
    let report = run_plan(plan, HashMap::from([("rows".to_string(), tap)]))?;
    Ok(WcountReport {
        events,
        workers,
        seconds: report.seconds,
        events_per_s: events as f64 / report.seconds.max(1e-9),
        rows: totals[0].load(Relaxed),
        count_total: totals[1].load(Relaxed),
        sum_total: totals[2].load(Relaxed),
    })
}
