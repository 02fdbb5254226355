//! Crash recovery with real processes: eddy is SIGKILLed at seeded random
//! moments while it windows a file of 2M records, and restarted each time.
//! With an exactly-once file sink the final output equals an uninterrupted
//! run's exactly; with at-least-once nothing is missing (duplicates are
//! counted).

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

const RECORDS: usize = 2_000_000;

fn input(s: &Scratch) -> std::path::PathBuf {
    let mut rng = Rng::new(42);
    let mut text = String::with_capacity(RECORDS * 40);
    for i in 0..RECORDS {
        let ts = 1_767_225_600_000 + (i as i64) / 20 - rng.below(300) as i64;
        text.push_str(&format!(
            "{{\"k\":{},\"v\":{},\"ts\":{ts}}}\n",
            rng.below(1000),
            rng.below(100)
        ));
    }
    s.write("in.jsonl", &text)
}

fn config(s: &Scratch, name: &str, delivery: &str) -> std::path::PathBuf {
    s.write(
        &format!("{name}.toml"),
        &format!(
            r#"
[node]
workers = 2
data_dir = "{data}"
[checkpoint]
interval = "150ms"
[sources.in]
type = "file"
path = "{input}"
schema = {{ k = "int", v = "int", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "300ms"
[transforms.w]
type = "window"
inputs = ["in"]
key = ["k"]
window = {{ kind = "tumbling", size = "1s" }}
aggregates = {{ n = "count(*)", total = "sum(v)", lo = "min(v)", hi = "max(v)" }}
[sinks.out]
type = "file"
inputs = ["w"]
path = "{out}"
delivery = "{delivery}"
"#,
            data = s.path(&format!("{name}-data")).display(),
            input = s.path("in.jsonl").display(),
            out = s.path(&format!("{name}.jsonl")).display(),
        ),
    )
}

/// Runs to completion, after `kills` runs SIGKILLed at seeded moments.
/// Each restart resumes where the last checkpoint left off, so the moments
/// share 70 % of `span` (an uninterrupted run's duration) between them:
/// seeded random shares, and the work left over for the final run. Returns
/// how many runs were killed before finishing.
fn run_with_kills(config: &std::path::Path, kills: usize, seed: u64, span: Duration) -> usize {
    let mut rng = Rng::new(seed);
    let weights: Vec<f64> = (0..kills)
        .map(|_| 0.2 + rng.below(1000) as f64 / 1000.0)
        .collect();
    let total: f64 = weights.iter().sum();
    let mut killed = 0;
    for w in weights {
        let mut child = eddy()
            .arg("run")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let after = span.mul_f64(0.7 * w / total);
        let started = Instant::now();
        while started.elapsed() < after && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            killed += 1;
        }
        let _ = child.wait();
    }
    run_ok(config);
    killed
}

fn counts(rows: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for r in rows {
        *m.entry(r.as_str()).or_default() += 1;
    }
    m
}

#[test]
fn sigkill_at_random_moments_loses_nothing_and_duplicates_nothing_exactly_once() {
    let s = Scratch::new();
    input(&s);
    let started = Instant::now();
    run_ok(&config(&s, "reference", "exactly_once"));
    let span = started.elapsed();
    let reference = multiset(&json_lines(&s.read("reference.jsonl")));
    assert!(reference.len() > 50_000, "{} rows", reference.len());

    let killed = run_with_kills(&config(&s, "crashed", "exactly_once"), 10, 7, span);
    assert!(
        killed >= 8,
        "only {killed} runs were killed mid-way: make the input longer"
    );
    let recovered = multiset(&json_lines(&s.read("crashed.jsonl")));
    assert_eq!(
        recovered.len(),
        reference.len(),
        "row count after {killed} crashes"
    );
    assert!(
        recovered == reference,
        "the output after {killed} crashes differs from an uninterrupted run"
    );
}

#[test]
fn sigkill_at_random_moments_loses_nothing_at_least_once() {
    let s = Scratch::new();
    input(&s);
    let started = Instant::now();
    run_ok(&config(&s, "reference", "at_least_once"));
    let span = started.elapsed();
    let reference = multiset(&json_lines(&s.read("reference.jsonl")));
    let killed = run_with_kills(&config(&s, "crashed", "at_least_once"), 10, 8, span);
    assert!(killed >= 8, "only {killed} runs were killed mid-way");
    let recovered = multiset(&json_lines(&s.read("crashed.jsonl")));
    let (want, got) = (counts(&reference), counts(&recovered));
    let missing: Vec<_> = want
        .iter()
        .filter(|(r, n)| got.get(*r).copied().unwrap_or(0) < **n)
        .take(3)
        .collect();
    assert!(
        missing.is_empty(),
        "rows missing after {killed} crashes: {missing:?}"
    );
    let duplicates = recovered.len() - reference.len();
    eprintln!(
        "at_least_once after {killed} crashes: {} rows, {duplicates} duplicates",
        recovered.len()
    );
}

/// A config whose state is far larger than its cache.
fn small_cache(s: &Scratch, name: &str, cache: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(config(s, name, "exactly_once")).unwrap();
    let text = text
        .replace(
            "[checkpoint]",
            &format!("[state]\ncache_bytes = \"{cache}\"\n[checkpoint]"),
        )
        // Long windows and many keys: a lot of state stays open.
        .replace("size = \"1s\"", "size = \"20s\"")
        .replace("interval = \"150ms\"", "interval = \"50ms\"");
    s.write(&format!("{name}.toml"), &text)
}

/// Runs `config` with `--stats`; returns stderr and the window's
/// `(evictions, loads back)`.
fn run_spilling(config: &std::path::Path) -> (String, u64, u64) {
    let out = output_within(
        eddy()
            .arg("run")
            .arg("--stats")
            .arg(config)
            .stdin(Stdio::null()),
        RUN_LIMIT,
    );
    let stats = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stats}");
    let line = stats
        .lines()
        .find(|l| l.contains("state over the cache"))
        .unwrap_or_else(|| panic!("no evictions:\n{stats}"));
    let numbers: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert_eq!(numbers.len(), 2, "{line}");
    (stats, numbers[0], numbers[1])
}

#[test]
fn state_larger_than_the_cache_spills_to_the_store_and_stays_correct() {
    let s = Scratch::new();
    let mut rng = Rng::new(9);
    let mut text = String::new();
    for i in 0..300_000i64 {
        text.push_str(&format!(
            "{{\"k\":{},\"v\":{},\"ts\":{}}}\n",
            rng.below(50_000),
            rng.below(100),
            1_767_225_600_000 + i / 5
        ));
    }
    s.write("in.jsonl", &text);
    let roomy = run_ok(&small_cache(&s, "roomy", "256MiB"));
    assert!(!String::from_utf8_lossy(&roomy.stderr).contains("does not fit"));
    let roomy = multiset(&json_lines(&s.read("roomy.jsonl")));
    assert!(roomy.len() > 50_000, "{} rows", roomy.len());

    // Every key is hot and the state is far over the cache: bins leave
    // memory as runs of partial aggregates and are never read back for a
    // record, only merged when their windows fire and at checkpoints.
    let (stats, evictions, loads) = run_spilling(&small_cache(&s, "cramped", "64KiB"));
    assert!(
        evictions > 10 && loads == 0,
        "{evictions} evictions, {loads} loads back"
    );
    assert!(!stats.contains("does not fit"), "{stats}");
    let cramped = multiset(&json_lines(&s.read("cramped.jsonl")));
    assert!(
        cramped == roomy,
        "a 64 KiB cache gives other results ({} rows vs {})",
        cramped.len(),
        roomy.len()
    );

    // With allowed lateness a late record re-emits its key's whole result,
    // so once a window has fired, bins come back whole. The lateness
    // outlasts the input (60 s of event time), so a fired window stays
    // open whatever steps the watermark takes: with 2 s, one step could
    // fire a window and drop it, and nothing came back. (Whether the
    // operator also warns depends on how fast they cycle, so it is not
    // checked here.)
    let late = small_cache(&s, "late", "64KiB");
    let text = std::fs::read_to_string(&late).unwrap().replace(
        "size = \"20s\" }",
        "size = \"20s\", allowed_lateness = \"60s\" }",
    );
    std::fs::write(&late, text).unwrap();
    let (_, evictions, loads) = run_spilling(&late);
    assert!(
        evictions > 10 && loads > 10,
        "{evictions} evictions, {loads} loads back"
    );
    assert!(
        multiset(&json_lines(&s.read("late.jsonl"))) == roomy,
        "with allowed lateness, a 64 KiB cache gives other results"
    );

    // And through crashes.
    let killed = run_with_kills(
        &small_cache(&s, "crashed", "64KiB"),
        5,
        11,
        Duration::from_secs(2),
    );
    assert!(
        multiset(&json_lines(&s.read("crashed.jsonl"))) == roomy,
        "after {killed} crashes with a small cache"
    );
}

/// Session windows and an interval join keep their state across SIGKILLs
/// too: restarted at seeded moments, the exactly-once output equals an
/// uninterrupted run's.
#[test]
fn session_windows_and_interval_joins_recover_exactly_after_sigkill() {
    let s = Scratch::new();
    let mut rng = Rng::new(11);
    let (mut left, mut right) = (String::new(), String::new());
    for i in 0..400_000i64 {
        let ts = 1_767_225_600_000 + i / 20 - rng.below(200) as i64;
        left.push_str(&format!(
            "{{\"k\":{},\"v\":{},\"ts\":{ts}}}\n",
            rng.below(20_000),
            rng.below(100)
        ));
        right.push_str(&format!(
            "{{\"a\":{},\"p\":{},\"ts\":{ts}}}\n",
            rng.below(20_000),
            rng.below(1000)
        ));
    }
    s.write("left.jsonl", &left);
    s.write("right.jsonl", &right);
    let config = |name: &str| {
        s.write(
            &format!("{name}.toml"),
            &format!(
                r#"
[node]
workers = 2
bins = 64
data_dir = "{data}"
[api]
enabled = false
[checkpoint]
interval = "100ms"
[sources.left]
type = "file"
path = "{left}"
schema = {{ k = "int", v = "int", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "200ms"
[sources.right]
type = "file"
path = "{right}"
schema = {{ a = "int", p = "int", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "200ms"
[transforms.sessions]
type = "window"
inputs = ["left"]
key = ["k"]
window = {{ kind = "session", gap = "500ms" }}
aggregates = {{ n = "count(*)", total = "sum(v)" }}
[transforms.j]
type = "join"
inputs = ["left", "right"]
left_on = ["k"]
right_on = ["a"]
within = "1s"
[sinks.sessions_out]
type = "file"
inputs = ["sessions"]
path = "{s_out}"
delivery = "exactly_once"
[sinks.join_out]
type = "file"
inputs = ["j"]
path = "{j_out}"
delivery = "exactly_once"
"#,
                data = s.path(&format!("{name}-data")).display(),
                left = s.path("left.jsonl").display(),
                right = s.path("right.jsonl").display(),
                s_out = s.path(&format!("{name}-sessions.jsonl")).display(),
                j_out = s.path(&format!("{name}-join.jsonl")).display(),
            ),
        )
    };
    let started = Instant::now();
    run_ok(&config("reference"));
    let span = started.elapsed();
    let read = |name: &str| multiset(&json_lines(&s.read(name)));
    let (sessions, joined) = (
        read("reference-sessions.jsonl"),
        read("reference-join.jsonl"),
    );
    assert!(sessions.len() > 10_000, "{} sessions", sessions.len());
    assert!(joined.len() > 10_000, "{} joined rows", joined.len());

    let killed = run_with_kills(&config("crashed"), 5, 13, span);
    eprintln!("uninterrupted run {span:?}; {killed} runs killed");
    assert!(killed >= 4, "only {killed} runs were killed mid-way");
    let got = read("crashed-sessions.jsonl");
    assert!(
        got == sessions,
        "sessions after {killed} crashes: {} rows, uninterrupted {}",
        got.len(),
        sessions.len()
    );
    let got = read("crashed-join.jsonl");
    assert!(
        got == joined,
        "join after {killed} crashes: {} rows, uninterrupted {}",
        got.len(),
        joined.len()
    );
}

/// A finite run ends even when its checkpoints take longer than their
/// interval: the committer once checked whether to stop only while waiting
/// for the next one, so after the last record, with every commit
/// completing at once and outlasting 1 ms, it committed forever.
#[test]
fn a_run_ends_when_its_checkpoints_outlast_their_interval() {
    let s = Scratch::new();
    let mut text = String::new();
    for i in 0..20_000i64 {
        text.push_str(&format!(
            "{{\"k\":{},\"v\":1,\"ts\":{}}}\n",
            i % 500,
            1_767_225_600_000 + i
        ));
    }
    s.write("in.jsonl", &text);
    let config = config(&s, "busy", "exactly_once");
    let busy = std::fs::read_to_string(&config)
        .unwrap()
        .replace("interval = \"150ms\"", "interval = \"1ms\"");
    std::fs::write(&config, busy).unwrap();
    for attempt in 0..3 {
        let _ = std::fs::remove_dir_all(s.path("busy-data"));
        let _ = std::fs::remove_file(s.path("busy.jsonl"));
        let out = output_within(
            eddy().arg("run").arg(&config).stdin(Stdio::null()),
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "run {attempt}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows = json_lines(&s.read("busy.jsonl"));
        let total: i64 = rows.iter().map(|r| r["n"].as_i64().unwrap()).sum();
        assert_eq!(total, 20_000, "run {attempt}");
    }
}
