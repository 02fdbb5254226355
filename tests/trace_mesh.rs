//! Critical-path analysis across the members of a distributed run, with a
//! known answer: two real members (mutual TLS over QUIC on loopback) run
//! the same keyed pipeline, and on node-1 alone a map costs 600 µs a record (more than its share of the input allows: it never waits)
//! (the test-only `cost_per_record`; sources and transforms may differ
//! between members, keyed exchanges may not). Tracing switched on at
//! node-0's local API switches node-1 too, node-0's windows hold node-1's
//! lanes (sent over the mesh), and they name node-1 and its worker as the
//! stragglers and `slow` as the operator.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const TRACE_ON: &str = "[trace]\nenabled = true\nwindow = \"500ms\"";

/// The pipeline; on node-1 the map costs `cost` a record.
fn body(i: usize, cost: &str, trace: &str) -> String {
    let cost = if i == 1 && !cost.is_empty() {
        format!("cost_per_record = \"{cost}\"")
    } else {
        String::new()
    };
    format!(
        r#"
{trace}
[checkpoint]
enabled = false
[sources.gen]
type = "generator"
schema = "readings"
keys = 16
rate = 4000
[transforms.slow]
type = "map"
inputs = ["gen"]
fields = {{ humidity = "humidity * 2" }}
{cost}
[transforms.per_sensor]
type = "window"
inputs = ["slow"]
key = ["sensor"]
window = {{ kind = "tumbling", size = "1s" }}
aggregates = {{ n = "count(*)" }}
[sinks.out]
type = "blackhole"
inputs = ["per_sensor"]
"#
    )
}

fn rows<'a>(w: &'a Value, dim: &str) -> &'a Vec<Value> {
    w[dim].as_array().expect("rows")
}

fn cp_of(w: &Value, dim: &str, name: &str) -> f64 {
    rows(w, dim)
        .iter()
        .filter(|r| r["name"].as_str().is_some_and(|n| n == name))
        .map(|r| r["cp"].as_f64().unwrap_or(0.0))
        .sum()
}

/// The fourth window `eddy trace` prints from the API at `port` (the
/// first may hold a peer's lanes only in part: they began before its
/// events flowed), with CPs that sum to 1.
fn last_window(port: u16) -> Value {
    let out = eddy()
        .args(["trace", "--api", &format!("127.0.0.1:{port}"), "--json"])
        .args(["--count", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("eddy trace");
    assert!(
        out.status.success(),
        "eddy trace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let windows = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(windows.len(), 4);
    let w = windows.last().expect("a window").clone();
    for dim in ["activities", "workers", "peers"] {
        let sum: f64 = rows(&w, dim)
            .iter()
            .map(|r| r["cp"].as_f64().unwrap())
            .sum();
        assert!((sum - 1.0).abs() < 1e-6, "{dim} CP sums to {sum}: {w}");
    }
    w
}

fn trace_state(port: u16) -> Value {
    let (code, body) = http(port, "GET", "/trace").expect("GET /trace");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

#[test]
fn a_members_straggler_is_named_by_the_others_analysis() {
    let s = Scratch::new();
    let m = Members::start(&s, 2, 1, 16, |i| body(i, "600us", ""));
    assert_eq!(trace_state(m.api[1])["enabled"], false);

    // Switched on one member, tracing is on at both, with its window.
    let (code, answer) = http_with(
        m.api[0],
        "POST",
        "/trace",
        r#"{"enabled": true, "window": "500ms"}"#,
    )
    .expect("POST /trace");
    assert_eq!(code, 200, "{answer}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let peer = trace_state(m.api[1]);
        if peer["enabled"] == true {
            assert_eq!(peer["window_ms"], 500, "{peer}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node-1 was not switched on\n{}",
            m.logs(&s)
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let w = last_window(m.api[0]);
    assert_ne!(w["paths"], "none", "{w}\n{}", m.logs(&s));
    // node-1's own lanes are in node-0's graph: its worker (global 1) and
    // its ends of the exchange streams.
    let names: Vec<&str> = rows(&w, "workers")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(names.contains(&"worker 1 on node-1"), "{names:?}");
    assert!(names.contains(&"worker 0"), "{names:?}");
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("exchange") && n.ends_with("on node-1")),
        "{names:?}"
    );
    // QUIC's own work, on each member's endpoint thread, is a lane too.
    for quic in ["QUIC endpoint", "QUIC endpoint on node-1"] {
        let busy = rows(&w, "workers")
            .iter()
            .find(|r| r["name"] == quic)
            .and_then(|r| r["share"].as_f64());
        eprintln!("{quic}: busy share {busy:?}");
        assert!(
            busy.is_some_and(|b| b > 0.0),
            "{quic}: {busy:?} in {names:?}"
        );
    }
    let transport = rows(&w, "activities")
        .iter()
        .find(|r| r["name"] == "transport")
        .and_then(|r| r["share"].as_f64());
    assert!(transport.is_some_and(|t| t > 0.0), "{w}");
    // The straggler: node-1, its worker, and the map that is slow there.
    let (here, there) = (
        cp_of(&w, "peers", "(this node)"),
        cp_of(&w, "peers", "node-1"),
    );
    assert!(there > here, "node-1 {there} vs this node {here}: {w}");
    assert_eq!(rows(&w, "workers")[0]["name"], "worker 1 on node-1", "{w}");
    assert_eq!(rows(&w, "operators")[0]["name"], "slow", "{w}");
}

#[test]
fn a_slow_link_makes_communication_dominate() {
    let s = Scratch::new();
    // Light load, no slow operator, tracing on from the config; every
    // exchange stream into node-1 is 40 ms late.
    let m = Members::start_with_env(
        &s,
        2,
        1,
        16,
        |i| body(i, "", TRACE_ON),
        |i| match i {
            1 => vec![("EDDY_TEST_LINK_DELAY", "40ms".to_string())],
            _ => Vec::new(),
        },
    );
    let w = last_window(m.api[0]);
    assert_ne!(w["paths"], "none", "{w}\n{}", m.logs(&s));
    assert_eq!(rows(&w, "activities")[0]["name"], "data message", "{w}");
    assert!(cp_of(&w, "activities", "data message") > 0.8, "{w}");
    // Charged to the lane that takes the late batches: node-1's end of
    // the exchange from node-0.
    let top = rows(&w, "workers")[0]["name"].as_str().expect("name");
    assert!(
        top.starts_with("exchange 0 w0->w1 (from node-0") && top.ends_with("on node-1"),
        "{w}"
    );
}
