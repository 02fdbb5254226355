//! `eddy bench tune`: a diurnal input rate, compressed so that a day lasts
//! `--day` seconds, through real `eddy run` daemons three ways in one run:
//! a static configuration sized for the peak; DS2 alone (this harness reads
//! the daemon's `/metrics` every "hour", computes DS2's workers (Eq. 7 over
//! the pipeline's chain, 12 % headroom) and moves the bins onto that many
//! worker threads with `POST /rebalance`); and Demeter (the daemon's own
//! tuner: rate forecast with the day as its season, profiling runs, the
//! choice applied live, run for two days to learn, measured on the third).
//! Measured over one day each: the daemon's CPU seconds with those of its
//! profiling runs (children it reaped, whether they measured something or
//! not), its peak RSS (sampled every second), the share of 1 s windows
//! whose p99 end-to-end latency is over the goal (from the sink's latency
//! histogram), and the CPU seconds of the profiling runs alone.

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Bins of the keyed window: few, so a move is quick.
const BINS: u32 = 64;
/// The quietest hour's rate, as a share of the peak.
const TROUGH: f64 = 0.1;
/// DS2's scaling factor, as the controller uses it.
const HEADROOM: f64 = 0.12;

#[derive(Serialize)]
struct Run {
    policy: &'static str,
    cpu_s: f64,
    peak_memory_bytes: u64,
    windows_over_goal_pct: f64,
    profiling_cpu_s: f64,
    /// 1 s windows with output, over which the share is taken.
    windows: u64,
    /// The settings in force at the end of the measured day.
    detail: String,
}

#[derive(Serialize)]
struct Report {
    day_s: u64,
    peak_per_s: u64,
    latency_goal_ms: f64,
    keys: u64,
    window_s: u64,
    runs: Vec<Run>,
}

/// What the bench runs, from its command line.
#[derive(Clone, Copy)]
pub(crate) struct Workload {
    pub(crate) day_s: u64,
    pub(crate) peak: u64,
    pub(crate) goal_ms: f64,
    /// Sensors, the window's keys.
    pub(crate) keys: u64,
    /// The tumbling window's length.
    pub(crate) window_s: u64,
}

/// Runs `policies` (all three when empty), in their usual order.
pub(crate) fn tune(w: Workload, policies: &[String], json: bool) -> ExitCode {
    let w = Workload {
        day_s: w.day_s.max(24),
        peak: w.peak.max(100),
        keys: w.keys.max(1),
        window_s: w.window_s.max(1),
        ..w
    };
    let policies: Vec<&'static str> = POLICIES
        .into_iter()
        .filter(|p| policies.is_empty() || policies.iter().any(|q| q == p))
        .collect();
    match bench(w, &policies) {
        Ok(report) => {
            if json {
                println!("{}", serde_json::to_string(&report).expect("JSON"));
            } else {
                print_table(&report);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("eddy bench tune: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What every run of one bench shares.
#[derive(Clone, Copy)]
struct Setup {
    day_s: u64,
    peak: u64,
    goal_ms: f64,
    keys: u64,
    window_s: u64,
    cores: usize,
}

const POLICIES: [&str; 3] = ["static", "ds2", "demeter"];

fn bench(w: Workload, policies: &[&'static str]) -> Result<Report, String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let setup = Setup {
        day_s: w.day_s,
        peak: w.peak,
        goal_ms: w.goal_ms,
        keys: w.keys,
        window_s: w.window_s,
        cores,
    };
    let scratch =
        Scratch(std::env::temp_dir().join(format!("eddy-bench-tune-{}", std::process::id())));
    let mut runs = Vec::new();
    for &policy in policies {
        eprintln!("eddy bench tune: {policy}: running");
        let dir = scratch.0.join(policy);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let run = run_policy(policy, &dir, setup)?;
        eprintln!(
            "eddy bench tune: {policy}: {:.1} CPU s, {} MiB peak, {:.1} % of windows over the goal",
            run.cpu_s,
            run.peak_memory_bytes >> 20,
            run.windows_over_goal_pct
        );
        runs.push(run);
    }
    Ok(Report {
        day_s: w.day_s,
        peak_per_s: w.peak,
        latency_goal_ms: w.goal_ms,
        keys: w.keys,
        window_s: w.window_s,
        runs,
    })
}

/// The rate of the hour starting at `hour` (0..24): the trough at
/// midnight, the peak at noon.
fn rate_at(hour: usize, peak: u64) -> u64 {
    let phase = (hour as f64 + 0.5) / 24.0 * std::f64::consts::TAU;
    let share = TROUGH + (1.0 - TROUGH) * (1.0 - phase.cos()) / 2.0;
    (share * peak as f64).round().max(1.0) as u64
}

fn pipeline(policy: &str, dir: &std::path::Path, days: u64, port: u16, setup: Setup) -> String {
    let Setup {
        day_s,
        peak,
        goal_ms,
        keys,
        window_s,
        cores,
    } = setup;
    let hour_ms = day_s * 1000 / 24;
    let steps: Vec<String> = (1..24 * days as usize)
        .map(|h| {
            format!(
                "{{ at = \"{}ms\", events_per_second = {} }}",
                h as u64 * hour_ms,
                rate_at(h % 24, peak)
            )
        })
        .collect();
    let tune = if policy == "demeter" {
        let step_ms = (day_s * 1000 / 96).max(100);
        format!(
            r#"
[tune]
enabled = true
workers = [1, {cores}]
cache_bytes = ["4MiB", "256MiB"]
checkpoint_interval = ["1s", "30s"]
batch_size = [256, 4096]
flush_interval = ["1ms", "100ms"]
latency_p99_ms = {goal_ms}
max_recovery_s = 10
step = "{step_ms}ms"
horizon = "{horizon}ms"
season = "{season}ms"
profile = true
profile_duration = "{profile_s}s"
profile_interval = "{profile}ms"
"#,
            // A run must close windows to measure their latency: the
            // window, the second `[tune] profile_duration` leaves for the
            // start at least (the readings are in order), and one to spare.
            profile_s = window_s + 2,
            horizon = (day_s * 1000 / 8).max(step_ms),
            season = day_s * 1000,
            profile = day_s * 1000 / 6,
        )
    } else {
        String::new()
    };
    format!(
        r#"[node]
data_dir = "{data}"
workers = {cores}
bins = {BINS}
batch_size = 1024
flush_interval = "1ms"

[checkpoint]
interval = "1s"

[state]
cache_bytes = "256MiB"

[api]
address = "127.0.0.1:{port}"
{tune}
[sources.readings]
type = "generator"
schema = "readings"
keys = {keys}
rate = {first}
rate_steps = [{steps}]

[transforms.per_sensor]
type = "window"
inputs = ["readings"]
key = ["sensor"]
window = {{ kind = "tumbling", size = "{window_s}s" }}
aggregates = {{ n = "count(*)", avg = "avg(temp)", max = "max(temp)" }}

[sinks.out]
type = "blackhole"
inputs = ["per_sensor"]
"#,
        data = dir.join("data").display(),
        first = rate_at(0, peak),
        steps = steps.join(", "),
    )
}

/// The bench's directory, removed at the end.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A daemon of the bench, killed if the bench fails.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_policy(policy: &'static str, dir: &std::path::Path, setup: Setup) -> Result<Run, String> {
    let (day_s, peak, goal_ms, cores) = (setup.day_s, setup.peak, setup.goal_ms, setup.cores);
    let days = if policy == "demeter" { 3 } else { 1 };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, pipeline(policy, dir, days, port, setup))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find eddy itself: {e}"))?;
    let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .args(["run", "--log-level", "warn"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start eddy run: {e}"))?;
    let daemon = Daemon(child);
    let pid = daemon.0.id();
    let api = Api::new(port);
    let started = Instant::now();
    while api.get("/health").is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "{policy}: the daemon's API did not come up (see {})",
                dir.join("daemon.log").display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let day = Duration::from_secs(day_s);
    let hour = day / 24;
    let measure_from = day * (days as u32 - 1);
    let mut window = Window::default();
    let (mut cpu0, mut prof0) = (None, None);
    let (mut peak_rss, mut over, mut windows) = (0u64, 0u64, 0u64);
    let mut workers = cores;
    let mut ds2 = Ds2::default();
    let mut next_hour = hour;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let t = started.elapsed();
        if t >= day * days as u32 {
            break;
        }
        let metrics = api.get("/metrics").unwrap_or_default();
        let measuring = t >= measure_from;
        if measuring && cpu0.is_none() {
            prof0 = Some(super::procfs::children_cpu_seconds(pid)?);
            cpu0 = Some(super::procfs::cpu_seconds(pid)? + prof0.unwrap_or(0.0));
            window = Window::default();
        }
        if let Some(over_goal) = window.next(&metrics, goal_ms)
            && measuring
        {
            windows += 1;
            over += u64::from(over_goal);
        }
        if measuring {
            peak_rss =
                peak_rss.max(super::procfs::status_bytes(&pid.to_string(), "VmRSS").unwrap_or(0));
        }
        if policy == "ds2" && t >= next_hour {
            next_hour += hour;
            let due = rate_at(((t.as_secs_f64() / hour.as_secs_f64()) as usize) % 24, peak);
            if let Some(w) = ds2.workers(&metrics, due as f64, cores)
                && w != workers
            {
                let assignment: Vec<u32> = (0..BINS).map(|b| b * w as u32 / BINS).collect();
                let body = serde_json::json!({ "assignment": assignment }).to_string();
                if let Some((200, _)) = api.post("/rebalance", &body) {
                    workers = w;
                }
            }
        }
    }
    let children = super::procfs::children_cpu_seconds(pid)?;
    let cpu_s = super::procfs::cpu_seconds(pid)? + children - cpu0.unwrap_or(0.0);
    let profiling_cpu_s = children - prof0.unwrap_or(0.0);
    let detail = match policy {
        "static" => format!("{cores} workers, 256 MiB cache, 1 s checkpoints"),
        "ds2" => format!("{workers} of {cores} workers at the end"),
        _ => api
            .get("/tune")
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .map(|t| t["apply"]["applied"]["settings"].to_string())
            .unwrap_or_default(),
    };
    super::tune_profile::terminate(pid);
    Ok(Run {
        policy,
        cpu_s,
        peak_memory_bytes: peak_rss,
        windows_over_goal_pct: if windows == 0 {
            0.0
        } else {
            100.0 * over as f64 / windows as f64
        },
        profiling_cpu_s,
        windows,
        detail,
    })
}

/// The daemon's local API.
struct Api {
    addrs: Vec<std::net::SocketAddr>,
    name: String,
}

impl Api {
    fn new(port: u16) -> Api {
        Api {
            addrs: vec![([127, 0, 0, 1], port).into()],
            name: format!("127.0.0.1:{port}"),
        }
    }

    fn call(&self, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
        super::status::request(
            &self.addrs,
            &self.name,
            method,
            path,
            body,
            Duration::from_secs(60),
        )
        .ok()
        .map(|(code, b)| (code, String::from_utf8_lossy(&b).into_owned()))
    }

    fn get(&self, path: &str) -> Option<String> {
        match self.call("GET", path, "")? {
            (200, body) => Some(body),
            _ => None,
        }
    }

    fn post(&self, path: &str, body: &str) -> Option<(u16, String)> {
        self.call("POST", path, body)
    }
}

/// A `/metrics` sample: `name{labels}` of `component_id`'s line.
fn sample(metrics: &str, name: &str, component: &str, extra: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| {
            l.starts_with(name)
                && l[name.len()..].starts_with('{')
                && l.contains(&format!("component_id=\"{component}\""))
                && l.contains(extra)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The sink's latency histogram between two scrapes.
#[derive(Default)]
struct Window {
    last: Option<(f64, f64)>,
}

impl Window {
    /// Whether the window since the last scrape had its p99 over the goal
    /// (more than 1 % of its records later than the smallest bucket at or
    /// above it); `None` without records.
    fn next(&mut self, metrics: &str, goal_ms: f64) -> Option<bool> {
        let le = super::prometheus::LATENCY_BUCKETS
            .iter()
            .find(|&&b| b * 1e3 >= goal_ms)
            .copied()
            .unwrap_or(10.0);
        let bucket = "component_latency_seconds_bucket";
        let within = sample(metrics, bucket, "out", &format!("le=\"{le}\""))?;
        let all = sample(metrics, bucket, "out", "le=\"+Inf\"")?;
        let before = self.last.replace((within, all));
        let (w0, a0) = before?;
        let (w, a) = (within - w0, all - a0);
        (a > 0.0).then(|| (a - w) / a > 0.01)
    }
}

/// DS2 from the daemon's per-component counters between two decisions.
#[derive(Default)]
struct Ds2 {
    /// When, and the source's records sent by then.
    last: Option<(Instant, f64)>,
}

impl Ds2 {
    /// Workers (1..=cores) for `target` records/s at the source: each
    /// component needs its useful time per second scaled from the rate the
    /// source achieved to the target (Eq. 7 with Eq. 8's selectivities,
    /// in eddy's mapping: workers' worth of useful time), plus headroom.
    fn workers(&mut self, metrics: &str, target: f64, cores: usize) -> Option<usize> {
        let sent = sample(metrics, "component_sent_events_total", "readings", "")?;
        let now = Instant::now();
        let (then, before) = self.last.replace((now, sent))?;
        let source = (sent - before) / now.duration_since(then).as_secs_f64().max(1e-3);
        if source <= 0.0 {
            return None;
        }
        let busy_s: f64 = ["readings", "per_sensor", "out"]
            .iter()
            .filter_map(|c| sample(metrics, "busy_time_ms_per_second", c, ""))
            .sum::<f64>()
            / 1e3;
        let x = busy_s * target / source;
        Some(((1.0 + HEADROOM) * x).ceil().clamp(1.0, cores as f64) as usize)
    }
}

fn print_table(r: &Report) {
    println!(
        "a day of {} s, peak {} records/s, trough {:.0} %, {} keys in {} s windows, latency goal {} ms (p99 per 1 s window)",
        r.day_s,
        r.peak_per_s,
        TROUGH * 100.0,
        r.keys,
        r.window_s,
        r.latency_goal_ms
    );
    println!(
        "{:<8} {:>8} {:>12} {:>16} {:>14} {:>8}  settings",
        "policy", "cpu s", "peak MiB", "windows > goal", "profiling s", "windows"
    );
    let base = r.runs.first().filter(|b| b.policy == "static");
    for run in &r.runs {
        println!(
            "{:<8} {:>8.1} {:>12.1} {:>15.1}% {:>14.1} {:>8}  {}",
            run.policy,
            run.cpu_s,
            run.peak_memory_bytes as f64 / (1 << 20) as f64,
            run.windows_over_goal_pct,
            run.profiling_cpu_s,
            run.windows,
            run.detail
        );
    }
    if let Some(b) = base {
        for run in &r.runs[1..] {
            println!(
                "{} / static: cpu {:.2}, memory {:.2}",
                run.policy,
                run.cpu_s / b.cpu_s.max(1e-9),
                run.peak_memory_bytes as f64 / b.peak_memory_bytes.max(1) as f64
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_day_has_its_trough_at_midnight_and_its_peak_at_noon() {
        let rates: Vec<u64> = (0..24).map(|h| rate_at(h, 10_000)).collect();
        let max = rates
            .iter()
            .position(|&r| r == *rates.iter().max().unwrap());
        assert!(matches!(max, Some(11 | 12)), "{rates:?}");
        assert!(rates[0] < 1_100 && rates[23] < 1_100, "{rates:?}");
        assert!(rates.iter().all(|&r| (1_000..=10_000).contains(&r)));
    }

    fn metrics(within: u64, all: u64, sent: u64, busy: [f64; 3]) -> String {
        format!(
            "component_latency_seconds_bucket{{component_id=\"out\",host=\"h\",le=\"0.1\"}} {within}\n\
             component_latency_seconds_bucket{{component_id=\"out\",host=\"h\",le=\"+Inf\"}} {all}\n\
             component_sent_events_total{{component_id=\"readings\",host=\"h\"}} {sent}\n\
             busy_time_ms_per_second{{component_id=\"readings\",host=\"h\"}} {}\n\
             busy_time_ms_per_second{{component_id=\"per_sensor\",host=\"h\"}} {}\n\
             busy_time_ms_per_second{{component_id=\"out\",host=\"h\"}} {}\n",
            busy[0], busy[1], busy[2]
        )
    }

    #[test]
    fn a_window_is_over_the_goal_when_more_than_one_percent_is_late() {
        let mut w = Window::default();
        assert_eq!(w.next(&metrics(100, 100, 0, [0.0; 3]), 100.0), None);
        assert_eq!(
            w.next(&metrics(1090, 1100, 0, [0.0; 3]), 100.0),
            Some(false)
        );
        assert_eq!(w.next(&metrics(2070, 2100, 0, [0.0; 3]), 100.0), Some(true));
        assert_eq!(w.next(&metrics(2070, 2100, 0, [0.0; 3]), 100.0), None);
    }

    #[test]
    fn ds2_scales_useful_time_from_the_achieved_rate_to_the_target() {
        let mut d = Ds2::default();
        assert_eq!(d.workers(&metrics(0, 0, 0, [0.0; 3]), 1.0, 4), None);
        std::thread::sleep(Duration::from_millis(300));
        // 0.5 s of useful time a second at what the source achieved; the
        // target is 2.5x that: 1.25 workers, with headroom 2 (as long as
        // this thread is not held up for 40 % of the interval).
        let achieved = d.last.unwrap().0.elapsed().as_secs_f64() * 1000.0;
        let sent = achieved.round() as u64;
        let w = d.workers(&metrics(0, 0, sent, [100.0, 300.0, 100.0]), 2500.0, 4);
        assert_eq!(w, Some(2));
    }
}
