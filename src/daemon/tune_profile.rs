//! Profiling runs: a real `eddy run` child on a pipeline derived from the
//! running one (the same transforms; its generators driven at the target
//! rate, its other sources replaced by a replay of their recently
//! recorded records at that rate; every sink a blackhole; the candidate
//! settings; its own data dir and API port), at the lowest CPU priority,
//! for a few seconds. Measured
//! from the outside: CPU seconds (`/proc/PID/stat`), peak RSS (`VmHWM`),
//! p99 end-to-end latency (its `--stats` at exit), and the recovery time
//! (a second start on its final checkpoint, until its `/metrics` answers,
//! which it does once the restore is done).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::tune_cap::Cap;
use super::tune_store::Measured;
use crate::exec::recorder::Recording;

/// A source's recent records as a run replays them: its fields as `(name,
/// type)`, and JSON lines. Plain data, so that a peer can be sent it.
pub(crate) struct Recorded {
    pub(crate) fields: Vec<(String, String)>,
    pub(crate) lines: Vec<u8>,
}

impl From<Recording> for Recorded {
    fn from(rec: Recording) -> Recorded {
        Recorded {
            fields: rec
                .schema
                .fields()
                .iter()
                .map(|f| (f.name.clone(), f.ty.name().to_string()))
                .collect(),
            lines: rec.lines,
        }
    }
}

/// The most a restart may take before the run counts as not recovering.
const RECOVERY_LIMIT: Duration = Duration::from_secs(120);

/// One profiling run to make.
pub(crate) struct Profile<'a> {
    /// The running pipeline's file (read again: a reload may change it).
    pub(crate) pipeline: &'a Path,
    pub(crate) settings: &'a BTreeMap<String, u64>,
    pub(crate) rate: f64,
    pub(crate) duration: Duration,
    /// A directory of its own, removed afterwards.
    pub(crate) scratch: PathBuf,
    /// Recent records of the sources that are not generators, by id.
    pub(crate) recorded: &'a BTreeMap<String, Recorded>,
}

/// Lines a replay file holds at most (its records repeat beyond).
const MAX_REPLAY_LINES: usize = 2_000_000;

/// Makes the run under `cap`; `stop` cuts it short (the node is
/// stopping).
pub(crate) fn run(p: &Profile<'_>, cap: &Cap, stop: &AtomicBool) -> Result<Measured, String> {
    // The run's API port is one the kernel just had free; another process
    // may take it before the run binds it, so a run that finds it taken
    // is made again on another.
    let mut attempt = 0;
    let outcome = loop {
        let _ = std::fs::remove_dir_all(&p.scratch);
        std::fs::create_dir_all(&p.scratch)
            .map_err(|e| format!("cannot create {}: {e}", p.scratch.display()))?;
        attempt += 1;
        match measure(p, cap, stop) {
            Err(e) if attempt < 3 && e.contains("Address already in use") => continue,
            outcome => break outcome,
        }
    };
    let outcome = outcome.map_err(|e| {
        if e.contains("memory allocation") || e.contains("Resource temporarily unavailable") {
            format!(
                "the run needed more than [tune] profile_memory ({} MiB): {e}",
                cap.memory_bytes >> 20
            )
        } else {
            e
        }
    });
    let _ = std::fs::remove_dir_all(&p.scratch);
    outcome
}

fn measure(p: &Profile<'_>, cap: &Cap, stop: &AtomicBool) -> Result<Measured, String> {
    let text = std::fs::read_to_string(p.pipeline)
        .map_err(|e| format!("cannot read {}: {e}", p.pipeline.display()))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port for the run's API: {e}"))?
        .port();
    let replays = write_replays(&text, p)?;
    let derived = derive(
        &text,
        p.settings,
        p.rate,
        &p.scratch.join("data"),
        port,
        &replays,
    )?;
    let file = p.scratch.join("pipeline.toml");
    std::fs::write(&file, derived).map_err(|e| format!("cannot write {}: {e}", file.display()))?;

    let mut child = Guard(Some(spawn(&file, cap)?));
    let pid = child.pid();
    let until = Instant::now() + p.duration;
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            return Err("the node is stopping".into());
        }
        if let Some(status) = child.try_wait() {
            return Err(format!(
                "the run exited early ({status}): {}",
                child.stderr()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Read before the final checkpoint, which is not part of running.
    let cpu_s = super::procfs::cpu_seconds(pid)?;
    let peak_memory_bytes = super::procfs::status_bytes(&pid.to_string(), "VmHWM")? as f64;
    terminate(pid);
    let (status, stderr) = child.finish();
    if !status.is_some_and(|s| s.success()) {
        return Err(format!("the run failed ({status:?}): {stderr}"));
    }
    // Less than one clock tick: the run was starved of CPU (niced, on
    // busy cores), and as an observation it would teach the models that
    // its settings cost nothing (seen in CI: 0.0 CPU s, a p99 of 1 us).
    if cpu_s <= 0.0 {
        return Err(format!(
            "the run got no measurable CPU time in {:?} (starved by other work on its cores)",
            p.duration
        ));
    }
    let interval_ms = p
        .settings
        .get("checkpoint_interval")
        .copied()
        .unwrap_or(DEFAULT_CHECKPOINT_MS);
    let (cpu_s, peak_memory_bytes) = with_checkpoint(
        (cpu_s, peak_memory_bytes),
        super::stats::process_figures(&stderr),
        p.duration,
        Duration::from_millis(interval_ms),
    );
    // A run that fell behind teaches the models as much as one that kept
    // up: these settings fail at this rate. Without it they would be
    // proposed again and again.
    let (latency_p99_ms, fell_behind) = match sink_p99_ms(&stderr) {
        Some(ms) => (ms, false),
        None => match backlog_ms(&stderr, p.rate, p.duration) {
            Some(ms) => (ms, true),
            None => return Err(no_latency(&stderr, p.rate, p.duration)),
        },
    };

    // Recovery: start again on the checkpoint it just took.
    let started = Instant::now();
    let mut again = Guard(Some(spawn(&file, cap)?));
    let recovery_s = loop {
        if stop.load(Ordering::Relaxed) {
            return Err("the node is stopping".into());
        }
        if let Some(status) = again.try_wait() {
            return Err(format!("the restart exited ({status}): {}", again.stderr()));
        }
        if metrics_ready(port) {
            break started.elapsed().as_secs_f64();
        }
        if started.elapsed() > RECOVERY_LIMIT {
            break RECOVERY_LIMIT.as_secs_f64();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    terminate(again.pid());
    let _ = again.finish();
    Ok(Measured {
        settings: p.settings.clone(),
        rate: p.rate,
        cpu_s,
        peak_memory_bytes,
        latency_p99_ms,
        recovery_s: Some(recovery_s),
        fell_behind,
        in_place: false,
    })
}

/// The checkpoint interval of a run whose settings do not name one.
const DEFAULT_CHECKPOINT_MS: u64 = 10_000;

/// The run's cost with its checkpoints in: `running` (CPU seconds, peak
/// bytes) as read before the final checkpoint, `after` as the run
/// reported at its exit (`--stats`), after that checkpoint.
///
/// A run shorter than its checkpoint interval took no checkpoint while it
/// was measured, so its settings looked cheaper than they are: in one
/// `eddy bench tune` day the runs with 15-30 s intervals measured a
/// third less memory at the peak than the same rate with a 2-4 s one,
/// and the tuner chose long intervals with a cache that held all the
/// state, which at the peak cost 0.89 of the static run's memory. The
/// final checkpoint stands in for the periodic ones: its memory counts
/// in full (every checkpoint reaches it), its CPU in the share of an
/// interval the run lasted (in full once the run spans one).
fn with_checkpoint(
    running: (f64, f64),
    after: Option<(f64, f64)>,
    duration: Duration,
    interval: Duration,
) -> (f64, f64) {
    let Some((cpu, peak)) = after else {
        return running;
    };
    let share = (duration.as_secs_f64() / interval.as_secs_f64().max(1e-3)).min(1.0);
    let checkpoint_cpu = (cpu - running.0).max(0.0);
    (running.0 + share * checkpoint_cpu, running.1.max(peak))
}

/// A source's records written out to be replayed by a `file` source.
pub(crate) struct Replay {
    pub(crate) path: PathBuf,
    /// `(field, type)` in the recording's order.
    pub(crate) schema: Vec<(String, String)>,
}

/// Writes a replay file for every recorded source: enough lines for the
/// run at its share of the rate, the recording repeated as needed, and
/// the event-time field (when the source has one) rewritten to advance at
/// that rate from now, so that windows see the replayed stream as a live
/// one rather than the same minutes again and again.
fn write_replays(text: &str, p: &Profile<'_>) -> Result<BTreeMap<String, Replay>, String> {
    let t: toml::Table = text
        .parse()
        .map_err(|e| format!("cannot parse the pipeline: {e}"))?;
    let sources = t.get("sources").and_then(toml::Value::as_table);
    let n = sources.map_or(1, |s| s.len().max(1)) as f64;
    let per_source = (p.rate / n).max(1.0);
    let lines =
        ((per_source * p.duration.as_secs_f64() * 1.2).ceil() as usize + 1).min(MAX_REPLAY_LINES);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut out = BTreeMap::new();
    for (id, rec) in p.recorded {
        let event_time = sources
            .and_then(|s| s.get(id))
            .and_then(|s| s.get("event_time"))
            .and_then(toml::Value::as_str);
        let bytes = replay_lines(&rec.lines, event_time, lines, per_source, now_ms)
            .map_err(|e| format!("`sources.{id}`: {e}"))?;
        let path = p.scratch.join(format!("replay-{id}.jsonl"));
        std::fs::write(&path, bytes)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let schema = rec.fields.clone();
        out.insert(id.clone(), Replay { path, schema });
    }
    Ok(out)
}

/// `count` lines cycling through `recorded`, with `event_time` set to
/// advance by `1 / rate` seconds a line from `from_ms`.
fn replay_lines(
    recorded: &[u8],
    event_time: Option<&str>,
    count: usize,
    rate: f64,
    from_ms: i64,
) -> Result<Vec<u8>, String> {
    let bytes = recorded.len();
    let recorded: Vec<&[u8]> = recorded
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    if recorded.is_empty() {
        return Err("no records recorded yet (the source has had no input since the start)".into());
    }
    let mut out = Vec::with_capacity(count * (bytes / recorded.len() + 1));
    for i in 0..count {
        let line = recorded[i % recorded.len()];
        match event_time {
            None => out.extend_from_slice(line),
            Some(field) => {
                let mut record: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(line)
                        .map_err(|e| format!("a recorded line is not a JSON object: {e}"))?;
                let ts = from_ms + (i as f64 * 1000.0 / rate) as i64;
                record.insert(field.to_string(), ts.into());
                serde_json::to_writer(&mut out, &record).expect("a JSON object writes");
            }
        }
        out.push(b'\n');
    }
    Ok(out)
}

/// The running pipeline's text made into a profiling run's.
pub(crate) fn derive(
    text: &str,
    settings: &BTreeMap<String, u64>,
    rate: f64,
    data_dir: &Path,
    port: u16,
    replays: &BTreeMap<String, Replay>,
) -> Result<String, String> {
    use toml::{Table, Value};
    let mut t: Table = text
        .parse()
        .map_err(|e| format!("cannot parse the pipeline: {e}"))?;
    // Its own node: no cluster, no tuner, nothing shared with this one.
    for key in ["mesh", "tune", "trace"] {
        t.remove(key);
    }
    let int = |name: &str| -> Result<Value, String> {
        let v = settings
            .get(name)
            .ok_or_else(|| format!("no value for `{name}`"))?;
        Ok(Value::Integer(*v as i64))
    };
    let mut section = |name: &str| -> Table {
        match t.remove(name) {
            Some(Value::Table(s)) => s,
            _ => Table::new(),
        }
    };
    let mut node = section("node");
    node.insert(
        "data_dir".into(),
        Value::String(data_dir.display().to_string()),
    );
    node.remove("dead_letter");
    node.insert("workers".into(), int("workers")?);
    node.insert("batch_size".into(), int("batch_size")?);
    if let Some(ms) = settings.get("flush_interval") {
        node.insert("flush_interval".into(), Value::String(format!("{ms}ms")));
    }
    let mut checkpoint = section("checkpoint");
    checkpoint.insert("enabled".into(), Value::Boolean(true));
    checkpoint.insert(
        "interval".into(),
        Value::String(format!(
            "{}ms",
            settings
                .get("checkpoint_interval")
                .copied()
                .unwrap_or(DEFAULT_CHECKPOINT_MS)
        )),
    );
    let mut state = section("state");
    state.insert("cache_bytes".into(), int("cache_bytes")?);
    let mut api = Table::new();
    api.insert("enabled".into(), Value::Boolean(true));
    api.insert("address".into(), Value::String(format!("127.0.0.1:{port}")));

    let mut sources = match t.remove("sources") {
        Some(Value::Table(s)) => s,
        _ => return Err("the pipeline has no sources".into()),
    };
    let n = sources.len().max(1) as f64;
    let share = Value::Integer((rate / n).round().max(1.0) as i64);
    for (id, s) in sources.iter_mut() {
        let Value::Table(s) = s else { continue };
        let kind = s.get("type").and_then(Value::as_str).unwrap_or("?");
        if kind == "generator" {
            // A run is driven at the target rate throughout: a schedule
            // of the running pipeline's would take over from its start.
            s.remove("count");
            s.remove("rate_steps");
            s.insert("rate".into(), share.clone());
            continue;
        }
        let Some(replay) = replays.get(id) else {
            return Err(format!(
                "`sources.{id}` (`{kind}`) has no recorded records to replay"
            ));
        };
        let mut schema = Table::new();
        for (field, ty) in &replay.schema {
            schema.insert(field.clone(), Value::String(ty.to_string()));
        }
        let mut file = Table::new();
        file.insert("type".into(), Value::String("file".into()));
        file.insert(
            "path".into(),
            Value::String(replay.path.display().to_string()),
        );
        file.insert("format".into(), Value::String("json".into()));
        file.insert("schema".into(), Value::Table(schema));
        file.insert("rate".into(), share.clone());
        for key in ["event_time", "max_out_of_orderness"] {
            if let Some(v) = s.get(key) {
                file.insert(key.into(), v.clone());
            }
        }
        *s = file;
    }
    let mut sinks = match t.remove("sinks") {
        Some(Value::Table(s)) => s,
        _ => Table::new(),
    };
    for (_, s) in sinks.iter_mut() {
        let inputs = match s {
            Value::Table(s) => s.get("inputs").cloned(),
            _ => None,
        };
        let mut b = Table::new();
        b.insert("type".into(), Value::String("blackhole".into()));
        if let Some(i) = inputs {
            b.insert("inputs".into(), i);
        }
        *s = Value::Table(b);
    }
    t.insert("node".into(), Value::Table(node));
    t.insert("checkpoint".into(), Value::Table(checkpoint));
    t.insert("state".into(), Value::Table(state));
    t.insert("api".into(), Value::Table(api));
    t.insert("sources".into(), Value::Table(sources));
    t.insert("sinks".into(), Value::Table(sinks));
    Ok(t.to_string())
}

/// `eddy run --stats FILE` at the lowest priority (`nice`, when there is
/// one), so the pipeline it measures for keeps the cores it needs, under
/// `cap`.
fn spawn(file: &Path, cap: &Cap) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find eddy itself: {e}"))?;
    let nice = Path::new("/usr/bin/nice");
    let mut cmd = if nice.exists() {
        let mut c = Command::new(nice);
        c.args(["-n", "19"]).arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    die_with_parent(&mut cmd, cap);
    cmd.args(["run", "--stats", "--log-level", "warn"])
        .arg(file)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))
}

/// The child gets SIGKILL when this thread's process dies, so a daemon
/// killed with SIGKILL (or by the OOM killer) leaves no profiling run
/// behind: `Guard`'s drop only covers an orderly exit. The death signal
/// follows the thread that spawned the child, which is the profiling
/// thread: it lives as long as the tuner. The cap is applied there too.
fn die_with_parent(cmd: &mut Command, cap: &Cap) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    let (set, memory, cpu) = (cap.cpu_set(), cap.memory_bytes, cap.cpu_seconds);
    // SAFETY: between fork and exec only async-signal-safe calls run here
    // (prctl, getppid, sched_setaffinity, setrlimit), and nothing is
    // allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl: the signal will not come.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::other("the daemon exited"));
            }
            Cap::apply(&set, memory, cpu)
        });
    }
}

/// A child killed and reaped if the run is abandoned.
struct Guard(Option<Child>);

impl Guard {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    fn stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(e) = self.0.as_mut().and_then(|c| c.stderr.as_mut()) {
            let _ = e.read_to_string(&mut s);
        }
        s.trim().to_string()
    }

    /// Waits for the exit (SIGKILL after 60 s); the status and stderr.
    fn finish(&mut self) -> (Option<std::process::ExitStatus>, String) {
        let Some(mut c) = self.0.take() else {
            return (None, String::new());
        };
        let mut err = String::new();
        let reader = c.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            match c.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = c.kill();
                    break c.wait().ok();
                }
            }
        };
        if let Some(r) = reader {
            err = r.join().unwrap_or_default();
        }
        (status, err)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn terminate(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Why a run measured no latency, from its `--stats`: nothing reached
/// its sinks, because its sources fell behind the rate (the candidate
/// cannot carry it here) or because no window closed in time; with the
/// first warning the run logged, which names the cause when it knows it
/// (a cache the state outgrew, say).
fn no_latency(stats: &str, rate: f64, duration: Duration) -> String {
    let given = given(stats);
    let due = rate * duration.as_secs_f64();
    let why = if fell_behind(given, due) {
        format!(
            "its sources gave {given} of the {due:.0} records due at {rate:.0}/s: these settings \
             fell behind"
        )
    } else {
        format!(
            "its sources gave the {given} records due, but no window closed in {} s",
            duration.as_secs()
        )
    };
    let warning = stats
        .lines()
        .find_map(|l| l.split_once(" WARN ").map(|(_, w)| w.trim()))
        .map_or(String::new(), |w| format!(" (it warned: {w})"));
    format!("no output reached the run's sinks, so it measured no latency: {why}{warning}")
}

/// The records a run's sources gave, from its `--stats`: the rows
/// without records in.
fn given(stats: &str) -> u64 {
    stats
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[2] == "-").then(|| f[3].parse::<u64>().ok())?
        })
        .sum()
}

/// Whether sources that gave `given` of `due` records fell behind.
fn fell_behind(given: u64, due: f64) -> bool {
    (given as f64) < 0.9 * due
}

/// For a run that fell behind, the backlog at its end in milliseconds:
/// the next record it would have read was due that long before, so no
/// record after it can be less late.
fn backlog_ms(stats: &str, rate: f64, duration: Duration) -> Option<f64> {
    let (given, due) = (given(stats), rate * duration.as_secs_f64());
    fell_behind(given, due).then(|| (due - given as f64) / rate.max(1.0) * 1e3)
}

/// The highest p99 of the blackhole sinks in a `--stats` table (its
/// columns end in p50, p99, p999 ms).
fn sink_p99_ms(stats: &str) -> Option<f64> {
    stats
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[1] == "blackhole")
                .then(|| f[f.len() - 2].parse::<f64>().ok())
                .flatten()
        })
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
}

/// Whether the run's `/metrics` answers 200: its pipeline has started.
fn metrics_ready(port: u16) -> bool {
    use std::io::Write;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && &head[9..12] == b"200"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_counts_the_final_checkpoint_as_its_periodic_ones() {
        let stats =
            "elapsed 12.000 s; dead letters 0\nprocess: 3.00 CPU s, peak memory 200 bytes\n";
        let after = super::super::stats::process_figures(stats);
        assert_eq!(after, Some((3.0, 200.0)));
        let s = Duration::from_secs;
        // (running, after, interval) → counted, for a 12 s run.
        let cases = [
            // Half an interval: half the final checkpoint's CPU, all of
            // its memory.
            ((2.0, 100.0), after, s(24), (2.5, 200.0)),
            // Spanning an interval, the run took checkpoints all along.
            ((2.0, 100.0), after, s(2), (3.0, 200.0)),
            // Memory never goes below what was read while running.
            ((2.0, 300.0), after, s(2), (3.0, 300.0)),
            // No process line: what was read while running.
            ((2.0, 100.0), None, s(2), (2.0, 100.0)),
        ];
        for (running, after, interval, counted) in cases {
            assert_eq!(
                with_checkpoint(running, after, s(12), interval),
                counted,
                "{running:?} {after:?} {interval:?}"
            );
        }
        assert_eq!(super::super::stats::process_figures("elapsed 1 s\n"), None);
    }

    #[test]
    fn the_derived_pipeline_keeps_transforms_and_drives_generators() {
        let text = "[node]\nworkers = 2\ndead_letter = \"/x\"\n[mesh]\ncluster = \"c\"\n[tune]\nenabled = true\n\
                    [sources.a]\ntype = \"generator\"\ncount = 10\n[sources.b]\ntype = \"generator\"\nrate = 5\n\
                    rate_steps = [{ at = \"1s\", events_per_second = 7 }]\n\
                    [transforms.f]\ntype = \"filter\"\ninputs = [\"a\", \"b\"]\ncondition = \"true\"\n\
                    [sinks.o]\ntype = \"file\"\npath = \"/out\"\ninputs = [\"f\"]\n";
        let settings: BTreeMap<String, u64> = [
            ("workers", 3),
            ("cache_bytes", 1 << 24),
            ("checkpoint_interval", 2000),
            ("batch_size", 512),
            ("flush_interval", 5),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let none = BTreeMap::new();
        let out = derive(text, &settings, 1000.0, Path::new("/tmp/p"), 9999, &none).unwrap();
        let (config, d) = crate::config::parse("derived.toml", &out);
        assert!(!d.has_errors(), "{}\n{out}", d.render());
        let n = &config.node;
        assert_eq!((n.workers, n.batch_size, n.cache_bytes), (3, 512, 1 << 24));
        assert_eq!(n.checkpoint_interval_ms, Some(2000));
        assert_eq!(n.flush_interval_ms, 5);
        assert!(n.mesh.is_none() && !n.tune.enabled);
        assert_eq!(n.api.address.port(), 9999);
        assert_eq!(n.dead_letter, Path::new("/tmp/p/dead_letter.jsonl"));
        assert!(
            out.contains("rate = 500") && !out.contains("count") && !out.contains("rate_steps"),
            "{out}"
        );
        assert!(
            out.contains("type = \"blackhole\"") && !out.contains("/out"),
            "{out}"
        );
        assert!(out.contains("[transforms.f]"), "{out}");
        let stdin = "[sources.m]\ntype = \"stdin\"\nschema = { k = \"string\" }\nevent_time = \"ts\"\n\
                     [sinks.o]\ntype = \"stdout\"\ninputs = [\"m\"]\n";
        let err = derive(stdin, &settings, 1.0, Path::new("/p"), 1, &none).unwrap_err();
        assert!(
            err.contains("`sources.m` (`stdin`) has no recorded records to replay"),
            "{err}"
        );
        // With a recording, the source becomes a paced replay of it.
        let replays = BTreeMap::from([(
            "m".to_string(),
            Replay {
                path: "/p/replay-m.jsonl".into(),
                schema: vec![("k".into(), "string".into()), ("ts".into(), "int".into())],
            },
        )]);
        let out = derive(stdin, &settings, 300.0, Path::new("/p"), 1, &replays).unwrap();
        let (config, d) = crate::config::parse("derived.toml", &out);
        assert!(!d.has_errors(), "{}\n{out}", d.render());
        match &config.components[0].spec {
            crate::config::Spec::File(f) => {
                assert_eq!(f.path.value, Path::new("/p/replay-m.jsonl"));
                assert_eq!(f.rate, Some(300));
                assert_eq!(f.schema.len(), 2);
                assert_eq!(f.event_time.field.as_ref().unwrap().value, "ts");
            }
            other => panic!("{other:?}"),
        }
        let stats = "component type in out errors late true rate/s p50 ms p99 ms p999 ms\n\
                     g generator 0 10 0 0 - - - -\no blackhole 10 0 0 0 5.0 0.100 2.500 3.000\n";
        assert_eq!(sink_p99_ms(stats), Some(2.5));
    }

    #[test]
    fn a_run_without_output_says_whether_it_fell_behind() {
        let stats = |out: u64| {
            format!(
                "2026-12-02T08:54:06Z  WARN the state of w's open windows does not fit its cache \
                 share operator=w\ncomponent type in out errors late true rate/s p50 ms p99 ms p999 ms\n\
                 g generator - {out} 0 0 845168 - - -\nw window {out} 0 0 0 30430 - - -\n\
                 o blackhole 0 - 0 0 0 - - -\n"
            )
        };
        let secs = Duration::from_secs(12);
        let behind = no_latency(&stats(397_547), 100_000.0, secs);
        assert!(sink_p99_ms(&stats(397_547)).is_none());
        assert!(
            behind.starts_with(
                "no output reached the run's sinks, so it measured no latency: its sources gave \
                 397547 of the 1200000 records due at 100000/s: these settings fell behind (it \
                 warned: the state of w's open windows does not fit its cache share operator=w)"
            ),
            "{behind}"
        );
        // The run is an observation all the same: at least the backlog
        // late.
        let backlog = backlog_ms(&stats(397_547), 100_000.0, secs).unwrap();
        assert!((backlog - 8024.53).abs() < 1e-6, "{backlog}");
        assert_eq!(backlog_ms(&stats(1_200_000), 100_000.0, secs), None);
        let kept_up = no_latency(&stats(1_200_000), 100_000.0, secs);
        assert!(
            kept_up.contains("gave the 1200000 records due, but no window closed in 12 s"),
            "{kept_up}"
        );
    }

    #[test]
    fn a_replay_repeats_the_recording_with_event_time_advancing_at_the_rate() {
        let rec = b"{\"k\":\"a\",\"ts\":5}\n{\"k\":\"b\",\"ts\":1}\n";
        let out = replay_lines(rec, Some("ts"), 5, 500.0, 1_000).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"k\":\"a\",\"ts\":1000}\n{\"k\":\"b\",\"ts\":1002}\n{\"k\":\"a\",\"ts\":1004}\n\
             {\"k\":\"b\",\"ts\":1006}\n{\"k\":\"a\",\"ts\":1008}\n"
        );
        let plain = replay_lines(rec, None, 3, 500.0, 0).unwrap();
        assert_eq!(
            plain
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count(),
            3
        );
        assert!(
            replay_lines(b"", None, 3, 1.0, 0)
                .unwrap_err()
                .contains("no records")
        );
    }
}
