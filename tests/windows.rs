//! Keyed event-time windows through the real binary: tumbling, hopping and
//! session windows over seeded out-of-order input equal a reference
//! computed here, and the output is the same multiset whatever the number
//! of workers and bins.

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::{Value, json};

const BASE: i64 = 1_767_225_600_000;
const DISORDER: u64 = 2_000;

#[derive(Clone, Debug)]
struct Event {
    sensor: String,
    value: i64,
    price: f64,
    ts: i64,
}

fn events(seed: u64, n: usize) -> Vec<Event> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| Event {
            sensor: format!("k{}", rng.below(37)),
            value: rng.below(2001) as i64 - 1000,
            price: rng.below(100_000) as f64 / 100.0,
            ts: BASE + i as i64 * 7 - rng.below(DISORDER) as i64,
        })
        .collect()
}

fn write_events(s: &Scratch, name: &str, events: &[Event]) -> std::path::PathBuf {
    let mut text = String::new();
    for e in events {
        text.push_str(
            &json!({"sensor": e.sensor, "value": e.value, "price": e.price, "ts": e.ts})
                .to_string(),
        );
        text.push('\n');
    }
    s.write(name, &text)
}

const AGGREGATES: &str = r#"{ n = "count(*)", total = "sum(value)", lo = "min(value)", hi = "max(value)", mean = "avg(value)", cheapest = "min(price)", spent = "sum(price)", first_value = "first(value)", last_value = "last(value)", kinds = "count_distinct(value % 10)" }"#;

fn config(
    s: &Scratch,
    input: &std::path::Path,
    window: &str,
    workers: usize,
    bins: usize,
    out: &str,
) -> std::path::PathBuf {
    let text = format!(
        r#"
[node]
workers = {workers}
bins = {bins}
data_dir = "{data}"

[sources.events]
type = "file"
path = "{input}"
schema = {{ sensor = "string", value = "int", price = "float", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "{DISORDER}ms"

[transforms.agg]
type = "window"
inputs = ["events"]
key = ["sensor"]
window = {window}
aggregates = {AGGREGATES}

[sinks.out]
type = "file"
inputs = ["agg"]
path = "{out}"
"#,
        data = s.path("data").display(),
        input = input.display(),
        out = s.path(out).display(),
    );
    s.write(&format!("{out}.toml"), &text)
}

/// The reference: every aggregate of one group, computed plainly.
fn aggregate(sensor: &str, group: &[&Event], start: i64, end: i64) -> Value {
    let values: Vec<i64> = group.iter().map(|e| e.value).collect();
    let first = group
        .iter()
        .min_by(|a, b| a.ts.cmp(&b.ts).then(a.value.cmp(&b.value)))
        .unwrap();
    let last = group
        .iter()
        .max_by(|a, b| a.ts.cmp(&b.ts).then(a.value.cmp(&b.value)))
        .unwrap();
    let kinds: std::collections::BTreeSet<i64> = values.iter().map(|v| v % 10).collect();
    json!({
        "sensor": sensor,
        "n": group.len(),
        "total": values.iter().sum::<i64>(),
        "lo": values.iter().min(),
        "hi": values.iter().max(),
        "mean": values.iter().sum::<i64>() as f64 / values.len() as f64,
        "cheapest": group.iter().map(|e| e.price).fold(f64::INFINITY, f64::min),
        "spent": group.iter().map(|e| e.price).sum::<f64>(),
        "first_value": first.value,
        "last_value": last.value,
        "kinds": kinds.len(),
        "window_start": start,
        "window_end": end,
    })
}

fn by_window(events: &[Event], windows_of: impl Fn(i64) -> Vec<(i64, i64)>) -> Vec<Value> {
    let mut groups: BTreeMap<(String, i64, i64), Vec<&Event>> = BTreeMap::new();
    for e in events {
        for (s, end) in windows_of(e.ts) {
            groups
                .entry((e.sensor.clone(), s, end))
                .or_default()
                .push(e);
        }
    }
    groups
        .iter()
        .map(|((k, s, end), g)| aggregate(k, g, *s, *end))
        .collect()
}

fn sessions(events: &[Event], gap: i64) -> Vec<Value> {
    let mut per_key: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events {
        per_key.entry(&e.sensor).or_default().push(e);
    }
    let mut out = Vec::new();
    for (k, mut evs) in per_key {
        evs.sort_by_key(|e| e.ts);
        let mut group: Vec<&Event> = Vec::new();
        for e in evs {
            if let Some(last) = group.last()
                && e.ts - last.ts > gap
            {
                let (s, end) = (group[0].ts, group.last().unwrap().ts + gap);
                out.push(aggregate(k, &group, s, end));
                group.clear();
            }
            group.push(e);
        }
        let (s, end) = (group[0].ts, group.last().unwrap().ts + gap);
        out.push(aggregate(k, &group, s, end));
    }
    out
}

/// Runs `window` over `events` with several worker and bin counts; checks
/// they agree exactly and match `expected`.
fn check(name: &str, evs: &[Event], window: &str, expected: Vec<Value>) {
    let s = Scratch::new();
    let input = write_events(&s, "events.jsonl", evs);
    let mut first: Option<Vec<String>> = None;
    for (workers, bins) in [(1, 1), (1, 256), (2, 16), (4, 256), (3, 64)] {
        let out = format!("out-{workers}-{bins}.jsonl");
        run_ok(&config(&s, &input, window, workers, bins, &out));
        let rows = json_lines(&s.read(&out));
        assert_rows_match(
            &rows,
            &expected,
            &["sensor", "window_start", "window_end"],
            &format!("{name} with {workers} workers, {bins} bins"),
        );
        let set = multiset(&rows);
        match &first {
            None => first = Some(set),
            Some(f) => assert_eq!(
                f, &set,
                "{name}: {workers} workers / {bins} bins differ from 1 worker / 1 bin"
            ),
        }
    }
}

#[test]
fn tumbling_windows_match_reference_for_any_workers_and_bins() {
    let evs = events(1, 30_000);
    let expected = by_window(&evs, |ts| {
        let s = ts.div_euclid(1000) * 1000;
        vec![(s, s + 1000)]
    });
    check(
        "tumbling",
        &evs,
        r#"{ kind = "tumbling", size = "1s" }"#,
        expected,
    );
}

#[test]
fn hopping_windows_match_reference_for_any_workers_and_bins() {
    let evs = events(2, 12_000);
    let expected = by_window(&evs, |ts| {
        let last = ts.div_euclid(500) * 500;
        (0..4)
            .map(|k| last - k * 500)
            .filter(|&s| s > ts - 2000)
            .map(|s| (s, s + 2000))
            .collect()
    });
    check(
        "hopping",
        &evs,
        r#"{ kind = "hopping", size = "2s", slide = "500ms" }"#,
        expected,
    );
}

#[test]
fn session_windows_match_reference_for_any_workers_and_bins() {
    let evs = events(3, 12_000);
    let expected = sessions(&evs, 150);
    check(
        "session",
        &evs,
        r#"{ kind = "session", gap = "150ms" }"#,
        expected,
    );
}

/// One field of `/proc/PID/status`, trimmed.
fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// Peak resident memory of a running process (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let kib: u64 = status_field(pid, "VmHWM")
        .trim_end_matches("kB")
        .trim()
        .parse()
        .expect("VmHWM in kB");
    kib * 1024
}

/// The thread ids of a process's threads named `name`.
fn threads(pid: u32, name: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(|t| {
            let tid = t.ok()?.file_name().into_string().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
            (comm.trim() == name).then_some(tid)
        })
        .collect()
}

/// Runs a util-linux tool (`taskset`, `chrt`) that must succeed.
fn util_linux(program: &str, args: &[&str]) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} (util-linux): {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

/// An unpaced generator's two worker shares never run at quite the same
/// speed. Without watermark alignment the faster share's event time ran
/// away from the slower one's, and the keyed window downstream, which
/// fires only as far as the slower share's watermark, kept every window
/// in between open: the process grew by 100–400 MB a second for as long
/// as it ran. With `max_drift` (10 s by default) it stays flat. To make
/// one share slow for certain, both workers share one core and worker 0
/// runs only when worker 1 waits (`SCHED_IDLE`).
#[test]
fn an_unpaced_generator_on_two_workers_keeps_open_windows_bounded() {
    let s = Scratch::new();
    let port = free_port();
    let pipeline = r#"
[node]
workers = 2
[api]
address = "127.0.0.1:{port}"
[checkpoint]
enabled = false
[sources.events]
type = "generator"
schema = "wcount"
[transforms.scaled]
type = "map"
inputs = ["events"]
fields = { value = "value * 2" }
[transforms.counts]
type = "window"
inputs = ["scaled"]
key = ["key"]
window = { kind = "tumbling", size = "100ms" }
aggregates = { n = "count(*)", sum = "sum(value)" }
[sinks.rows]
type = "blackhole"
inputs = ["counts"]
"#;
    let mut daemon = start_with_api(&s, port, pipeline, std::process::Stdio::null());
    let pid = daemon.0.as_ref().expect("running").id();
    // A thread names itself when it first runs (std sets the name from
    // inside it), so on a busy machine a worker may still carry its
    // parent's name after the API is up.
    let named = std::time::Instant::now();
    let (slow, fast) = loop {
        let found = (threads(pid, "eddy-worker-0"), threads(pid, "eddy-worker-1"));
        if (found.0.len(), found.1.len()) == (1, 1)
            || named.elapsed() > std::time::Duration::from_secs(10)
        {
            break found;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!((slow.len(), fast.len()), (1, 1), "worker threads");
    let allowed = status_field(pid, "Cpus_allowed_list");
    let cpu = allowed.split([',', '-']).next().expect("an allowed CPU");
    for tid in [&slow[0], &fast[0]] {
        util_linux("taskset", &["-p", "-c", cpu, tid]);
    }
    util_linux("chrt", &["--idle", "-p", "0", &slow[0]]);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let early = peak_rss(pid);
    std::thread::sleep(std::time::Duration::from_secs(4));
    let late = peak_rss(pid);
    signal(pid, "INT");
    let status = daemon.0.take().expect("running").wait().expect("wait");
    assert!(status.success(), "eddy run: {status}");
    const MIB: u64 = 1 << 20;
    eprintln!(
        "peak RSS after 1 s {} MiB, after 5 s {} MiB",
        early / MIB,
        late / MIB
    );
    assert!(
        late < early + 150 * MIB,
        "peak RSS grew from {} MiB to {} MiB in 4 s",
        early / MIB,
        late / MIB
    );
}
