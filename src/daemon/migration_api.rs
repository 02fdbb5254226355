//! Live bin migration driven in-process: a keyed window count over the
//! deterministic generator, with migrations triggered while it runs (the
//! integration test and `eddy bench migration` use it).

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::load::load_str;
use crate::exec;
use crate::io::Tap;
use crate::migrate::Strategy;

/// Where a migration moves the bins.
#[derive(Clone, Debug)]
pub enum Target {
    /// Evenly over these workers (contiguous runs of bins).
    Over(Vec<usize>),
    /// Evenly over every worker.
    Even,
}

/// One migration of a run: `pause` after the previous one ended (or the
/// run started), to `target`, with `strategy` (`all_at_once`, `fluid`,
/// `batched`).
#[derive(Clone, Debug)]
pub struct Move {
    pub pause: Duration,
    pub target: Target,
    pub strategy: String,
}

/// What one migration did.
#[derive(Clone, Debug)]
pub struct MoveReport {
    pub strategy: String,
    pub steps: u32,
    pub bins: u32,
    pub bytes: u64,
    /// Since the run started.
    pub started: Duration,
    pub duration: Duration,
}

/// A keyed count run.
#[derive(Clone, Debug, Default)]
pub struct CountRun {
    /// `(key, window_start, count, sum)` of every result row, sorted.
    pub rows: Vec<(i64, i64, i64, i64)>,
    pub moves: Vec<MoveReport>,
    /// With the probe: `(ns since start, ns from emission to applied)`
    /// per batch the keyed window applied.
    pub latency: Vec<(u64, u64)>,
    /// `(ns since start, resident bytes)` sampled every 10 ms.
    pub rss: Vec<(u64, u64)>,
    pub seconds: f64,
    /// Records the generator emitted.
    pub emitted: u64,
    /// Rows held for a moving bin that spilled to disk.
    pub spilled_rows: u64,
}

/// The workload.
#[derive(Clone, Debug)]
pub struct CountSpec {
    pub events: u64,
    pub workers: usize,
    pub bins: u32,
    pub keys: u64,
    /// Events per second of the generator (0: as fast as it can).
    pub rate: u64,
    pub window: String,
    pub probe: bool,
    /// Keep the result rows (the test); else only their count.
    pub keep_rows: bool,
    /// End the input once every migration is done (else at `events`).
    pub stop_after_moves: bool,
    /// `[migration] hold_memory` and the data dir held records spill to
    /// (`None`: the defaults).
    pub hold: Option<(u64, std::path::PathBuf)>,
}

pub(crate) fn strategy(name: &str) -> Result<Strategy, String> {
    match name {
        "all_at_once" => Ok(Strategy::AllAtOnce),
        "fluid" => Ok(Strategy::Fluid {
            gap: Duration::ZERO,
        }),
        "batched" => Ok(Strategy::Batched {
            max_bins_per_step: None,
        }),
        other => Err(format!(
            "unknown strategy `{other}` (all_at_once, fluid or batched)"
        )),
    }
}

/// Runs the keyed count, doing `moves` one after the other while it runs.
pub fn keyed_count(spec: &CountSpec, moves: &[Move]) -> Result<CountRun, String> {
    let rate = if spec.rate > 0 {
        format!("rate = {}", spec.rate)
    } else {
        String::new()
    };
    let hold = match &spec.hold {
        // The path as a TOML basic string (Debug quotes and escapes it).
        Some((bytes, dir)) => format!(
            "data_dir = {:?}\n[migration]\nhold_memory = {bytes}",
            dir.display().to_string()
        ),
        None => String::new(),
    };
    let toml = format!(
        r#"
[node]
workers = {workers}
bins = {bins}
{hold}
[checkpoint]
enabled = false
[sources.events]
type = "generator"
schema = "wcount"
count = {events}
keys = {keys}
{rate}
[transforms.counts]
type = "window"
inputs = ["events"]
key = ["key"]
window = {{ kind = "tumbling", size = "{window}" }}
aggregates = {{ count = "count(*)", sum = "sum(value)" }}
[sinks.rows]
type = "blackhole"
inputs = ["counts"]
"#,
        workers = spec.workers,
        bins = spec.bins,
        events = spec.events,
        keys = spec.keys,
        window = spec.window,
    );
    let (plan, _) = load_str("<keyed count>", &toml).map_err(|d| d.render())?;
    let counts = plan
        .nodes
        .iter()
        .position(|n| n.id == "counts")
        .ok_or("no window")?;
    let schema = plan.nodes[counts].outputs[0].schema.clone();
    let col = |name: &str| schema.index_of(name).ok_or(format!("no {name}"));
    let cols = [
        col("key")?,
        col("window_start")?,
        col("count")?,
        col("sum")?,
    ];
    let rows = Arc::new(Mutex::new(Vec::new()));
    let r = rows.clone();
    let keep = spec.keep_rows;
    let tap: Tap = Arc::new(move |b| {
        if !keep {
            return;
        }
        let c: Vec<&[i64]> = cols.iter().map(|&i| b.column(i).ints()).collect();
        let mut out = r.lock().unwrap_or_else(|e| e.into_inner());
        out.extend((0..b.len()).map(|i| (c[0][i], c[1][i], c[2][i], c[3][i])));
    });
    let running = exec::start(
        Arc::new(plan),
        Arc::new(AtomicBool::new(false)),
        HashMap::from([("rows".to_string(), tap)]),
    )?;
    let shared = running.shared();
    let started = Instant::now();
    if spec.probe {
        let _ = shared.probe.set(Arc::new(exec::Probe {
            node: counts,
            origin: started,
            samples: (0..spec.workers).map(|_| Mutex::default()).collect(),
        }));
    }
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            // The sampler measures; it must not take a core from a worker
            // (at normal priority its reads of /proc ran up to 2.6 ms on a
            // core both workers wanted, `perf sched timehist`).
            #[cfg(target_os = "linux")]
            // SAFETY: plain system calls on this thread's own id.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
            }
            let mut rss = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(bytes) = resident_bytes() {
                    rss.push((started.elapsed().as_nanos() as u64, bytes));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            rss
        })
    };
    let driver = {
        let shared = shared.clone();
        let moves = moves.to_vec();
        let workers = spec.workers;
        let stop_after = spec.stop_after_moves;
        std::thread::spawn(move || -> Result<Vec<MoveReport>, String> {
            let mut reports = Vec::new();
            for m in moves {
                std::thread::sleep(m.pause);
                let target = match &m.target {
                    Target::Even => None,
                    Target::Over(ws) => {
                        let even = crate::migrate::even(shared.bins, ws.len() as u32);
                        Some(even.into_iter().map(|i| ws[i as usize] as u32).collect())
                    }
                };
                let _ = workers;
                let at = started.elapsed();
                let r = shared.rebalance(target, strategy(&m.strategy)?)?;
                reports.push(MoveReport {
                    strategy: m.strategy.clone(),
                    steps: r.steps,
                    bins: r.bins,
                    bytes: r.bytes,
                    started: at,
                    duration: r.duration,
                });
            }
            if stop_after {
                std::thread::sleep(Duration::from_millis(500));
                shared.request_stop();
            }
            Ok(reports)
        })
    };
    let report = running.wait();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let rss = sampler.join().unwrap_or_default();
    let moves = driver
        .join()
        .map_err(|_| "the migration driver panicked".to_string())??;
    if let Some(f) = report.failure {
        return Err(f);
    }
    let mut rows = std::mem::take(&mut *rows.lock().unwrap_or_else(|e| e.into_inner()));
    rows.sort_unstable();
    let mut latency: Vec<(u64, u64)> = shared
        .probe
        .get()
        .map(|p| {
            p.samples
                .iter()
                .flat_map(|s| std::mem::take(&mut *s.lock().unwrap_or_else(|e| e.into_inner())))
                .collect()
        })
        .unwrap_or_default();
    latency.sort_unstable();
    Ok(CountRun {
        rows,
        moves,
        latency,
        rss,
        seconds: report.elapsed.as_secs_f64(),
        emitted: report
            .components
            .iter()
            .find(|c| c.id == "events")
            .map_or(0, |c| c.counters.records_out),
        spilled_rows: report.held_spilled_rows,
    })
}

/// This process's resident memory (Linux), for the bench's peak.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
