//! Profiling runs measure the cache as the tuner would apply it. In a test
//! binary of its own: its pipeline keeps a core busy, which starved the
//! niced profiling runs of `tests/tune.rs` running beside it.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A sliding window with allowed lateness over 40 000 sensors (more than
/// 12 MiB of open state) whose tuner may choose caches of 1 to 16 MiB,
/// with a profiling run every second.
const PIPELINE: &str = r#"
[node]
data_dir = "{data}"
workers = 1

[api]
address = "127.0.0.1:{port}"

[tune]
enabled = true
step = "200ms"
horizon = "2s"
latency_p99_ms = 50
max_recovery_s = 5
workers = [1, 1]
cache_bytes = ["1MiB", "16MiB"]
profile = true
profile_interval = "1s"
profile_budget = 1

[sources.g]
type = "generator"
schema = "readings"
keys = 40000
rate = 5000

[transforms.per_sensor]
type = "window"
inputs = ["g"]
key = ["sensor"]
window = { kind = "hopping", size = "10s", slide = "1s", allowed_lateness = "1s" }
aggregates = { n = "count(*)" }

[sinks.b]
type = "blackhole"
inputs = ["per_sensor"]
"#;

/// The open state on the node's bins now, from `/metrics`.
fn open_state_bytes(port: u16) -> f64 {
    let (_, body) = http(port, "GET", "/metrics").expect("metrics");
    body.lines()
        .filter(|l| l.starts_with("eddy_bin_state_bytes{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The optimiser's observations of profiling runs, from `GET /tune`: not
/// those measured in place, which run with the applied settings (one with
/// a 16 MiB cache less a few KiB once failed this test).
fn observations(port: u16) -> Vec<Value> {
    let (_, body) = http(port, "GET", "/tune").expect("GET /tune");
    let v: Value = serde_json::from_str(&body).expect("json");
    let all = v["optimizer"]["observations"].as_array().cloned();
    all.unwrap_or_default()
        .into_iter()
        .filter(|o| o["in_place"] != Value::Bool(true))
        .collect()
}

/// With allowed lateness, a run with a cache the state outgrows measures
/// bins cycling through sled, which no applied choice runs with: once the
/// state passes 12 MiB, every run has 16 MiB, the top of the range,
/// whatever the candidate.
#[test]
fn profiling_runs_measure_the_cache_above_the_open_state() {
    let s = Scratch::new();
    let port = free_port();
    let _daemon = start_with_api(&s, port, PIPELINE, Stdio::null());
    let state = 12.0 * (1u64 << 20) as f64;
    wait_until(
        "12 MiB of open state",
        Duration::from_secs(60),
        || (open_state_bytes(port) >= state).then_some(()),
        || format!("{} bytes", open_state_bytes(port)),
    );
    let seen = observations(port).len();
    // The next run may have started before: the three after it.
    let runs = wait_until(
        "four more profiling runs",
        Duration::from_secs(180),
        || Some(observations(port)).filter(|o| o.len() >= seen + 4),
        || format!("{:?}", observations(port)),
    );
    for o in &runs[seen + 1..] {
        let cache = o["settings"]["cache_bytes"].as_u64().unwrap();
        assert_eq!(
            cache,
            16 << 20,
            "a run with a cache below the open state: {o}"
        );
    }
}
