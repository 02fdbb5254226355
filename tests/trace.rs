//! `eddy trace` against real daemons with a known answer: a transform made
//! slow with the test-only `cost_per_record` ranks first by critical
//! participation, and with every bin on worker 0 (`bins = 1`) worker 0 is
//! named as the straggler. Also the `[trace]` table's errors and the
//! switch on the local API.

mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn start(s: &Scratch, pipeline: &str) -> (Running, u16) {
    let port = free_port();
    (start_with_api(s, port, pipeline, Stdio::piped()), port)
}

/// Runs `eddy trace --json --count N` and returns its windows.
fn trace_windows(port: u16, count: usize, extra: &[&str]) -> Vec<Value> {
    let mut child: Child = eddy()
        .args(["trace", "--api", &format!("127.0.0.1:{port}"), "--json"])
        .args(["--count", &count.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn eddy trace");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("eddy trace did not print {count} windows within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert!(
        out.status.success(),
        "eddy trace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let windows = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(windows.len(), count, "{windows:?}");
    windows
}

fn rows<'a>(w: &'a Value, dim: &str) -> &'a Vec<Value> {
    w[dim].as_array().expect("rows")
}

fn cp_of(w: &Value, dim: &str, name: &str) -> f64 {
    rows(w, dim)
        .iter()
        .find(|r| r["name"] == name)
        .and_then(|r| r["cp"].as_f64())
        .unwrap_or(0.0)
}

/// Windows whose CP is defined: each dimension sums to 1.
fn check_sums(w: &Value) {
    if w["paths"] == "none" {
        return;
    }
    for dim in ["activities", "workers"] {
        let sum: f64 = rows(w, dim).iter().map(|r| r["cp"].as_f64().unwrap()).sum();
        assert!((sum - 1.0).abs() < 1e-6, "{dim} CP sums to {sum}: {w}");
    }
}

const SLOW_MAP: &str = r#"
[node]
data_dir = "{data}"
workers = 2
[api]
address = "127.0.0.1:{port}"
[checkpoint]
enabled = false
[trace]
enabled = true
window = "500ms"
[sources.gen]
type = "generator"
schema = "readings"
keys = 16
rate = 6000
[transforms.fast]
type = "map"
inputs = ["gen"]
fields = { temp = "temp + 1" }
[transforms.slow]
type = "map"
inputs = ["fast"]
fields = { humidity = "humidity * 2" }
cost_per_record = "50us"
[transforms.per_sensor]
type = "window"
inputs = ["slow"]
key = ["sensor"]
window = { kind = "tumbling", size = "1s" }
aggregates = { n = "count(*)" }
[sinks.out]
type = "blackhole"
inputs = ["per_sensor"]
"#;

#[test]
fn the_slow_transform_has_the_highest_critical_participation() {
    let s = Scratch::new();
    let (_daemon, port) = start(&s, SLOW_MAP);
    let windows = trace_windows(port, 3, &[]);
    // The first window may have begun as the pipeline started.
    for w in &windows[1..] {
        check_sums(w);
        assert_ne!(w["paths"], "none", "{w}");
        let top = &rows(w, "operators")[0];
        assert_eq!(top["name"], "slow", "{w}");
        assert!(
            cp_of(w, "operators", "slow") > 3.0 * cp_of(w, "operators", "fast"),
            "{w}"
        );
        assert_eq!(w["window_ms"], 500);
        let waiting = rows(w, "activities")
            .iter()
            .find(|r| r["name"] == "waiting");
        if let Some(waiting) = waiting {
            assert_eq!(waiting["cp"], 0.0, "waiting carries no critical path");
        }
    }
    // The local API has the same windows, and switches tracing off.
    let (code, body) = http(port, "GET", "/trace").expect("GET /trace");
    assert_eq!(code, 200);
    let state: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(state["enabled"], true);
    assert!(!state["windows"].as_array().expect("windows").is_empty());
    let off = eddy()
        .args(["trace", "--api", &format!("127.0.0.1:{port}"), "--off"])
        .output()
        .expect("eddy trace --off");
    assert!(off.status.success());
    let (_, body) = http(port, "GET", "/trace").expect("GET /trace");
    let state: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(state["enabled"], false);
}

/// Every bin on worker 0: the window and the slow map after it run there
/// alone; worker 1 only generates its half and sends it over. The map keeps
/// worker 0 about 60 % busy: at 24 % a machine busy with other tests could
/// preempt worker 1's generator long enough that worker 0 waited on it and
/// worker 1 truly held the paths (seen at ratios down to 1.5 with two
/// spinning processes beside it; at 60 % the least was 7.8).
const STRAGGLER: &str = r#"
[node]
data_dir = "{data}"
workers = 2
bins = 1
[api]
address = "127.0.0.1:{port}"
[checkpoint]
enabled = false
[sources.gen]
type = "generator"
schema = "readings"
keys = 4
rate = 4000
[transforms.per_event]
type = "window"
inputs = ["gen"]
key = ["sensor", "ts"]
window = { kind = "tumbling", size = "10ms" }
aggregates = { n = "count(*)" }
[transforms.slow]
type = "map"
inputs = ["per_event"]
fields = { n = "n + 1" }
cost_per_record = "150us"
[sinks.out]
type = "blackhole"
inputs = ["slow"]
"#;

#[test]
fn a_straggler_worker_is_named() {
    let s = Scratch::new();
    let (_daemon, port) = start(&s, STRAGGLER);
    // Tracing is off in the file: `eddy trace` turns it on.
    let windows = trace_windows(port, 3, &["--window", "500ms"]);
    for w in &windows[1..] {
        check_sums(w);
        let top = &rows(w, "workers")[0];
        assert_eq!(top["name"], "worker 0", "{w}");
        assert!(
            cp_of(w, "workers", "worker 0") > 2.0 * cp_of(w, "workers", "worker 1"),
            "{w}"
        );
        assert_eq!(rows(w, "operators")[0]["name"], "slow", "{w}");
    }
}

#[test]
fn trace_table_errors_name_the_place() {
    let s = Scratch::new();
    let file = s.write(
        "bad.toml",
        r#"[trace]
enabled = "yes"
window = "5ms"
colour = 1
[sources.gen]
type = "generator"
count = 1
[sinks.out]
type = "blackhole"
inputs = ["gen"]
"#,
    );
    let out = eddy()
        .arg("validate")
        .arg(&file)
        .output()
        .expect("validate");
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    let f = file.display().to_string();
    assert!(err.contains(&format!("{f}:2:11")), "{err}");
    assert!(
        err.contains(&format!("{f}:3:10")) && err.contains("between 10ms and 60s"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{f}:4:1")) && err.contains("colour"),
        "{err}"
    );
}

/// The migration coordinator is a timeline of its own: while bins move,
/// it plans steps and exchanges Prepare, Switch and the workers' replies
/// as control messages, which the windows show beside the workers.
#[test]
fn the_migration_coordinator_is_traced() {
    let s = Scratch::new();
    let (_daemon, port) = start(&s, &SLOW_MAP.replace("cost_per_record = \"50us\"", ""));
    let moving = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mover = {
        let moving = moving.clone();
        std::thread::spawn(move || {
            let mut to = 0;
            let mut moves = 0;
            while moving.load(std::sync::atomic::Ordering::Relaxed) {
                let body = serde_json::json!({ "assignment": vec![to; 256] }).to_string();
                if let Some((200, _)) = http_with(port, "POST", "/rebalance", &body) {
                    moves += 1;
                    to = 1 - to;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            moves
        })
    };
    let windows = trace_windows(port, 4, &[]);
    moving.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(mover.join().unwrap() > 0, "no rebalance went through");
    let seen = windows[1..].iter().find(|w| {
        rows(w, "workers")
            .iter()
            .any(|r| r["name"] == "migration coordinator")
    });
    let w = seen.unwrap_or_else(|| panic!("no window has the coordinator: {windows:?}"));
    eprintln!(
        "control messages: CP {:.2}; migration coordinator: CP {:.2}",
        cp_of(w, "activities", "control message"),
        cp_of(w, "workers", "migration coordinator")
    );
    check_sums(w);
    let control = rows(w, "activities")
        .iter()
        .find(|r| r["name"] == "control message")
        .unwrap_or_else(|| panic!("no control messages: {w}"));
    // The workers wait for Prepare and Switch, the coordinator for their
    // replies: the messages between them carry critical paths.
    assert!(control["cp"].as_f64().unwrap() > 0.0, "{w}");
    assert!(cp_of(w, "workers", "migration coordinator") > 0.0, "{w}");
}
