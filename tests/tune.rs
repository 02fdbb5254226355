//! The tuner of a real `eddy run` (`[tune]` with a 200 ms step): it
//! samples the generator's rate, forecasts it and scores the forecast;
//! `POST /tune/observe` feeds the optimiser profiling runs, whose Pareto
//! front and choice `eddy tune` shows (and `--plot` draws); the history
//! and the runs survive a restart on the same data dir.

mod common;

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

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
profile = false


[sources.g]
type = "generator"
rate = 2000

[sinks.b]
type = "blackhole"
inputs = ["g"]
"#;

fn start(s: &Scratch, port: u16) -> Running {
    start_with(s, port, PIPELINE)
}

fn start_with(s: &Scratch, port: u16, pipeline: &str) -> Running {
    start_with_api(s, port, pipeline, Stdio::null())
}

fn tune_state(port: u16) -> Value {
    let (code, body) = http(port, "GET", "/tune").expect("GET /tune");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Waits until `GET /tune` satisfies `done`.
fn wait_for(port: u16, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait_longer(port, what, 60, done)
}

fn wait_longer(port: u16, what: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = tune_state(port);
        if done(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} within {secs} s: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn post(port: u16, path: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("http");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

fn run(workers: u64, batch: u64, cpu: f64, memory: f64, p99: f64) -> String {
    json!({
        "settings": {"workers": workers, "cache_bytes": 64u64 << 20, "checkpoint_interval": 10000,
                     "batch_size": batch, "flush_interval": 10},
        "rate": 2000.0, "cpu_s": cpu, "peak_memory_bytes": memory,
        "latency_p99_ms": p99, "recovery_s": 1.0,
    })
    .to_string()
}

fn eddy_tune(port: u16, args: &[&str]) -> String {
    let out = eddy()
        .args(["tune", "--api", &format!("127.0.0.1:{port}")])
        .args(args)
        .output()
        .expect("eddy tune");
    assert!(
        out.status.success(),
        "eddy tune {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn the_tuner_samples_forecasts_chooses_and_remembers() {
    let s = Scratch::new();
    let port = free_port();
    let mut daemon = start(&s, port);
    // Enough steps that forecasts made earlier have been scored.
    let v = wait_for(port, "scored forecast", |v| {
        v["error"]["scored"].as_u64().is_some_and(|n| n >= 10)
            && v["history"].as_array().is_some_and(|h| h.len() >= 12)
    });
    let history = v["history"].as_array().unwrap();
    let step_gaps: Vec<u64> = history
        .windows(2)
        .map(|w| w[1]["unix_ms"].as_u64().unwrap() - w[0]["unix_ms"].as_u64().unwrap())
        .collect();
    assert!(
        step_gaps.iter().all(|&g| g % 200 == 0 && g > 0),
        "{step_gaps:?}"
    );
    // The generator runs at 2000/s: the mean of the samples after the
    // first (which may cover the start) is that rate.
    let rates: Vec<f64> = history[2..]
        .iter()
        .map(|x| x["rate"].as_f64().unwrap())
        .collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    assert!(
        (1500.0..2500.0).contains(&mean),
        "mean rate {mean}: {rates:?}"
    );
    let f = &v["forecast"];
    assert_eq!(f["points"].as_array().unwrap().len(), 10, "{f}");
    assert!(f["peak"].as_f64().unwrap() > 1000.0, "{f}");
    assert!(v["error"]["model_mape_pct"].as_f64().unwrap().is_finite());
    assert!(history.iter().any(|x| x["predicted"].is_f64()), "{v:#}");
    assert!(v["optimizer"]["choice"].is_null());
    assert!(
        v["optimizer"]["why"]
            .as_str()
            .unwrap()
            .contains("0 profiling runs so far"),
        "{v:#}"
    );

    // Profiling runs: two that conflict (fewer workers, less CPU but more
    // memory, or the reverse), one dominated, one over the latency goal.
    for (body, n) in [
        (run(1, 4096, 4.0, 300e6, 20.0), 1),
        (run(4, 512, 8.0, 100e6, 10.0), 2),
        (run(4, 4096, 9.0, 320e6, 12.0), 3),
        (run(1, 256, 1.0, 50e6, 400.0), 4),
    ] {
        let (code, answer) = post(port, "/tune/observe", &body);
        assert_eq!(code, 200, "{answer}");
        assert_eq!(
            serde_json::from_str::<Value>(&answer).unwrap()["observations"],
            n
        );
    }
    let (code, answer) = post(port, "/tune/observe", &run(9, 512, 1.0, 1.0, 1.0));
    assert_eq!(code, 422, "{answer}");
    assert!(answer.contains("`workers` = 9 is outside"), "{answer}");

    // Until the models expect some settings to meet the goals, the choice
    // is the settings expected to come closest, and `why` says so.
    let v = wait_for(port, "a choice that meets the goals", |v| {
        v["optimizer"]["why"]
            .as_str()
            .is_some_and(|w| w.starts_with("the least CPU and memory"))
    });
    let o = &v["optimizer"];
    assert_eq!(o["front"], json!([0, 1]), "{o:#}");
    assert_eq!(o["observations"][3]["feasible"], false);
    let chosen = &o["choice"]["settings"];
    for r in v["space"].as_array().unwrap() {
        let name = r["name"].as_str().unwrap();
        let x = chosen[name].as_u64().unwrap();
        assert!(
            (r["min"].as_u64().unwrap()..=r["max"].as_u64().unwrap()).contains(&x),
            "{name} = {x} outside {r}"
        );
    }
    assert!(o["choice"]["expected_latency_p99_ms"].as_f64().unwrap() <= 50.0);

    // Once applied, the settings in force stay while the models expect
    // them to meet the goals and nothing clearly cheaper: the rate here
    // does not move, so a change would buy nothing worth a
    // reconfiguration.
    let v = wait_for(port, "the settings in force kept", |v| {
        v["optimizer"]["why"]
            .as_str()
            .is_some_and(|w| w.starts_with("the settings in force: the models expect them to meet"))
    });
    assert_eq!(
        v["optimizer"]["choice"]["settings"], v["apply"]["applied"]["settings"],
        "{v:#}"
    );
    let text = eddy_tune(port, &[]);
    for want in [
        "forecast (",
        "forecast error (MAPE over",
        "Pareto front (2 of 4 profiling runs",
        "chosen for ",
        "next profiling run: workers = ",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let why = text
        .lines()
        .skip_while(|l| !l.starts_with("next profiling run: "))
        .nth(1)
        .unwrap_or_default();
    assert!(
        why.starts_with("  because it is a point of the initial space-filling design")
            || why.starts_with("  because it is where the models expect the most improvement")
            || why.starts_with("  because it is the choice with one setting moved")
            || why.starts_with("  because it is the settings the models expect to cost least"),
        "{text}"
    );
    // A step may have found something clearly cheaper since.
    assert!(
        text.contains("why: the settings in force")
            || text.contains("why: the least CPU and memory"),
        "{text}"
    );
    let plot = s.path("tune.svg");
    let json_out = eddy_tune(port, &["--json", "--plot", plot.to_str().unwrap()]);
    let parsed: Value = serde_json::from_str(&json_out).expect("--json is JSON");
    assert_eq!(
        parsed["optimizer"]["observations"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    let svg = std::fs::read_to_string(&plot).expect("the plot");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.matches("<polyline").count() >= 3, "{svg}");
    assert_eq!(svg.matches("<circle").count(), 4, "{svg}");

    // A restart on the same data dir keeps the history and the runs.
    let before = v["history"].as_array().unwrap().last().unwrap()["unix_ms"]
        .as_u64()
        .unwrap();
    let pid = daemon.0.as_ref().unwrap().id();
    signal(pid, "TERM");
    let status = daemon.0.take().unwrap().wait().unwrap();
    assert!(status.success(), "{status:?}");
    let _daemon = start(&s, port);
    let v = tune_state(port);
    assert_eq!(
        v["optimizer"]["observations"].as_array().unwrap().len(),
        4,
        "{v:#}"
    );
    assert!(
        v["history"].as_array().unwrap()[0]["unix_ms"]
            .as_u64()
            .unwrap()
            <= before,
        "{v:#}"
    );
    let v = wait_for(port, "a choice after the restart", |v| {
        !v["optimizer"]["choice"].is_null()
    });
    assert!(v["error"]["scored"].as_u64().unwrap() >= 10);

    // A run that fell behind, with a backlog under the goal at its end and
    // the least CPU and memory of all: it still misses the goal, so it is
    // neither feasible nor on the front.
    let mut behind: Value = serde_json::from_str(&run(4, 256, 0.5, 40e6, 10.0)).unwrap();
    behind["fell_behind"] = json!(true);
    let (code, answer) = post(port, "/tune/observe", &behind.to_string());
    assert_eq!(code, 200, "{answer}");
    let v = wait_for(port, "the fifth run", |v| {
        v["optimizer"]["observations"].as_array().unwrap().len() == 5
    });
    let o = &v["optimizer"];
    assert_eq!(o["observations"][4]["fell_behind"], true, "{o:#}");
    assert_eq!(o["observations"][4]["feasible"], false, "{o:#}");
    assert_eq!(o["observations"][0].get("fell_behind"), None, "{o:#}");
    assert_eq!(o["front"], json!([0, 1]), "{o:#}");
}

/// Profiling runs stay within `[tune] profile_budget` of the node's CPU:
/// with a budget of 1 % and a pipeline that takes next to nothing, the
/// first run is made and the next ones wait, saying why.
#[test]
fn profiling_runs_wait_while_they_would_pass_their_budget() {
    let s = Scratch::new();
    let port = free_port();
    let pipeline = PIPELINE.replace(
        "profile = false",
        "profile = true\nprofile_interval = \"1s\"\nprofile_duration = \"1s\"\nprofile_budget = 0.01",
    );
    let _daemon = start_with(&s, port, &pipeline);
    let v = wait_longer(port, "a run, then a held one", 120, |v| {
        v["profiling"]["held"].is_string()
    });
    let p = &v["profiling"];
    // Attempts: runs, or on busy cores (tests in parallel) runs starved
    // of CPU, which failed but whose cost the budget counts (one that got
    // no clock tick at all cost nothing, and the next may start).
    let attempts = |p: &Value| p["runs"].as_u64().unwrap() + p["failed"].as_u64().unwrap();
    let made = attempts(p);
    assert!((1..=3).contains(&made), "{p:#}");
    assert_eq!(p["budget"], 0.01, "{p:#}");
    assert!(p["used"].as_f64().unwrap() > 0.01, "{p:#}");
    let held = p["held"].as_str().unwrap();
    assert!(
        held.contains("[tune] profile_budget = 0.01 (1 %): the next run waits"),
        "{held}"
    );
    // Runs are due every second; the budget holds them all back.
    std::thread::sleep(Duration::from_secs(4));
    let v = tune_state(port);
    assert_eq!(attempts(&v["profiling"]), made, "{:#}", v["profiling"]);
    let text = eddy_tune(port, &[]);
    assert!(
        text.contains("profiling budget: 1 % of this node's CPU over the season; the runs took")
            && text.contains("held: profiling runs took"),
        "{text}"
    );
}

/// The node profiles by itself: real `eddy run` children on the derived
/// pipeline, measured from /proc and their own stats and restart.
#[test]
fn the_node_makes_profiling_runs_and_tells_the_optimiser() {
    let s = Scratch::new();
    let port = free_port();
    let pipeline = PIPELINE.replace(
        "profile = false",
        "profile = true\nprofile_interval = \"1s\"\nprofile_duration = \"1s\"\nprofile_budget = 1",
    );
    let _daemon = start_with(&s, port, &pipeline);
    let v = wait_longer(port, "two profiling runs", 180, |v| {
        v["optimizer"]["observations"]
            .as_array()
            .is_some_and(|o| o.len() >= 2)
    });
    let p = &v["profiling"];
    assert!(p["runs"].as_u64().unwrap() >= 2, "{p}");
    // Pinned to the idlest of the allowed cores, with the default caps.
    let cap = p["cap"].as_str().unwrap();
    assert!(
        cap.starts_with("cores [") && cap.contains(", 1024 MiB of data memory, "),
        "{p}"
    );
    assert!(p["cpu_s"].as_f64().unwrap() > 0.0, "{p}");
    for o in v["optimizer"]["observations"].as_array().unwrap() {
        let f = |k: &str| o[k].as_f64().unwrap_or_else(|| panic!("{k} in {o}"));
        // Driven at the forecast peak of a 2000/s generator.
        assert!((1000.0..4000.0).contains(&f("rate")), "{o}");
        assert!(f("cpu_s") > 0.0, "{o}");
        assert!(f("peak_memory_bytes") > 1e6, "{o}");
        assert!(f("latency_p99_ms") > 0.0, "{o}");
        assert!(f("recovery_s") > 0.0 && f("recovery_s") < 120.0, "{o}");
        for r in v["space"].as_array().unwrap() {
            let name = r["name"].as_str().unwrap();
            let x = o["settings"][name].as_u64().unwrap();
            assert!(
                (r["min"].as_u64().unwrap()..=r["max"].as_u64().unwrap()).contains(&x),
                "{name} = {x} outside {r}"
            );
        }
    }
    let text = eddy_tune(port, &[]);
    assert!(text.contains("profiling: "), "{text}");
    assert!(text.contains("runs of 1000 ms every 1000 ms"), "{text}");

    // A daemon killed outright takes its profiling run with it.
    let profile = s.path("data/tune-profile");
    let profile = profile.to_string_lossy();
    let running = || -> Vec<String> {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                if cmd.contains(&*profile) {
                    found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
                }
            }
        }
        found
    };
    // Profiling runs come every second: wait until one is under way.
    wait_until(
        "a profiling run",
        Duration::from_secs(60),
        || (!running().is_empty()).then_some(()),
        String::new,
    );
    drop(_daemon);
    let gone = Instant::now() + Duration::from_secs(10);
    while !running().is_empty() && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        running().is_empty(),
        "profiling runs outlived their SIGKILLed daemon: {:?}",
        running()
    );
}

#[test]
fn without_tune_the_api_says_how_to_turn_it_on() {
    let s = Scratch::new();
    let port = free_port();
    let _daemon = start_with(
        &s,
        port,
        &PIPELINE.replace("enabled = true", "enabled = false"),
    );
    let (code, body) = http(port, "GET", "/tune").unwrap();
    assert_eq!(code, 404);
    assert!(body.contains("[tune] enabled = true"), "{body}");
    let out = eddy()
        .args(["tune", "--api", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the tuner is off"));
}

/// Two worker threads, checkpoints every hour, a 1 GiB cache: the tuner's
/// ranges only allow one worker, checkpoints within 2 s and at most
/// 64 MiB, so whatever it chooses differs from all three, and applying it
/// shows in the running process.
const APPLIED: &str = r#"
[node]
data_dir = "{data}"
workers = 2
# Below the tuner's range (256 to 8192 by default): its choice shows.
batch_size = 64

[api]
address = "127.0.0.1:{port}"

[checkpoint]
interval = "1h"

[state]
cache_bytes = "1GiB"

[tune]
enabled = true
step = "200ms"
horizon = "2s"
latency_p99_ms = 50
max_recovery_s = 5
profile = false
profile_duration = "2s"
workers = [1, 1]
checkpoint_interval = ["200ms", "2s"]
cache_bytes = ["16MiB", "64MiB"]

[sources.g]
type = "generator"
schema = "readings"
keys = 64
rate = 2000

[transforms.per_sensor]
type = "window"
inputs = ["g"]
key = ["sensor"]
window = { kind = "tumbling", size = "1s" }
aggregates = { n = "count(*)" }

[sinks.b]
type = "blackhole"
inputs = ["per_sensor"]
"#;

/// A sample of `/metrics`; `None` while no pipeline runs (a reload).
fn try_gauge(port: u16, name: &str) -> Option<f64> {
    let (code, body) = http(port, "GET", "/metrics")?;
    if code != 200 {
        return None;
    }
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn gauge(port: u16, name: &str) -> f64 {
    try_gauge(port, name).unwrap_or_else(|| panic!("no {name} in /metrics"))
}

fn applied_run(cpu: f64, memory: f64, interval: &str) -> String {
    json!({
        "settings": {"workers": 1, "cache_bytes": 32u64 << 20, "checkpoint_interval": interval.parse::<u64>().unwrap(),
                     "batch_size": 1024, "flush_interval": 10},
        "rate": 2000.0, "cpu_s": cpu, "peak_memory_bytes": memory,
        "latency_p99_ms": 10.0, "recovery_s": 1.0,
    })
    .to_string()
}

#[test]
fn the_choice_is_applied_to_the_running_pipeline_without_a_restart() {
    let s = Scratch::new();
    let port = free_port();
    let mut daemon = start_with(&s, port, APPLIED);
    assert_eq!(gauge(port, "eddy_checkpoint_interval_seconds"), 3600.0);
    assert_eq!(gauge(port, "eddy_state_cache_bytes"), (1u64 << 30) as f64);
    assert_eq!(gauge(port, "eddy_batch_size"), 64.0);
    wait_for(port, "a forecast", |v| !v["forecast"].is_null());
    for (body, n) in [
        (applied_run(2.0, 80e6, "500"), 1),
        (applied_run(3.0, 60e6, "1500"), 2),
    ] {
        let (code, answer) = post(port, "/tune/observe", &body);
        assert_eq!(code, 200, "{answer}");
        assert_eq!(
            serde_json::from_str::<Value>(&answer).unwrap()["observations"],
            n
        );
    }
    let v = wait_for(port, "the choice applied", |v| {
        !v["apply"]["applied"].is_null()
    });
    let a = &v["apply"]["applied"];
    let setting = |name: &str| a["settings"][name].as_u64().unwrap();
    let how = |name: &str| a["outcome"][name].as_str().unwrap().to_string();
    assert!(
        how("workers")
            .starts_with("bins on 1 of 2 worker threads by live migration (batched): epoch "),
        "{a:#}"
    );
    assert!(how("checkpoint_interval").starts_with("live"), "{a:#}");
    assert!(how("cache_bytes").starts_with("live"), "{a:#}");
    assert!(how("flush_interval").starts_with("live"), "{a:#}");
    assert!(how("batch_size").starts_with("live"), "{a:#}");
    assert!(setting("batch_size") >= 256, "{a:#}");
    assert_eq!(gauge(port, "eddy_batch_size"), setting("batch_size") as f64);
    let interval_ms = setting("checkpoint_interval");
    assert!((200..=2000).contains(&interval_ms), "{a:#}");
    assert_eq!(
        gauge(port, "eddy_checkpoint_interval_seconds"),
        interval_ms as f64 / 1e3
    );
    assert_eq!(
        gauge(port, "eddy_state_cache_bytes"),
        setting("cache_bytes") as f64
    );
    // Checkpoints now come at the applied interval; the hour set at the
    // start would have taken none.
    let before = gauge(port, "eddy_checkpoints_total");
    wait_until(
        "checkpoints at the applied interval",
        Duration::from_secs(30),
        || (gauge(port, "eddy_checkpoints_total") >= before + 2.0).then_some(()),
        || format!("{}", gauge(port, "eddy_checkpoints_total")),
    );
    // The same process throughout, its pipeline never restarted.
    let uptime = gauge(port, "eddy_uptime_seconds");
    let since_start = v["history"].as_array().unwrap().len() as f64 * 0.2;
    assert!(
        uptime >= since_start,
        "uptime {uptime} s, {since_start} s of samples"
    );
    assert!(daemon.0.as_mut().unwrap().try_wait().unwrap().is_none());

    // With the choice in force, the tuner measures the pipeline itself
    // (a span to settle, then one of `profile_duration`) and tells the
    // optimiser beside the two runs posted.
    let v = wait_for(port, "a measure in place", |v| {
        v["optimizer"]["observations"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["in_place"] == true))
    });
    let observations = v["optimizer"]["observations"].as_array().unwrap();
    let m = observations.iter().find(|o| o["in_place"] == true).unwrap();
    assert_eq!(m["settings"], v["apply"]["applied"]["settings"], "{m:#}");
    let rate = m["rate"].as_f64().unwrap();
    assert!(
        (1600.0..2400.0).contains(&rate),
        "the generator's 2000/s: {m:#}"
    );
    assert!(m["cpu_s"].as_f64().unwrap() > 0.0, "{m:#}");
    let rss = m["peak_memory_bytes"].as_f64().unwrap();
    assert!((1e6..1e9).contains(&rss), "{m:#}");
    // Windows of 1 s close within the span, and their rows reach the sink.
    let p99 = m["latency_p99_ms"].as_f64().unwrap();
    assert!(p99 > 0.0 && p99 < 1000.0, "{m:#}");
    assert!(m.get("recovery_s").is_none(), "not restarted: {m:#}");
    // The next span, at the same settings and rate, takes its place.
    let first = m.clone();
    let in_place = |v: &Value| -> Vec<Value> {
        v["optimizer"]["observations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["in_place"] == true)
            .cloned()
            .collect()
    };
    let v = wait_for(port, "a newer measure in place", |v| {
        in_place(v).iter().any(|o| *o != first)
    });
    assert_eq!(in_place(&v).len(), 1, "{:#}", v["optimizer"]);
    assert_eq!(
        v["optimizer"]["observations"].as_array().unwrap().len(),
        3,
        "the two runs posted and one measure in place"
    );
    let text = eddy_tune(port, &[]);
    assert!(text.contains("applied for "), "{text}");
    assert!(
        text.contains("  workers = 1: bins on 1 of 2 worker threads"),
        "{text}"
    );
    assert!(text.contains(" in place"), "{text}");

    // A reload that adds a sink starts the pipeline from its file again:
    // the tuner applies its settings to the new pipeline.
    let file = s.path("pipeline.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        format!("{text}\n[sinks.c]\ntype = \"blackhole\"\ninputs = [\"g\"]\n"),
    )
    .unwrap();
    signal(daemon.0.as_ref().unwrap().id(), "HUP");
    wait_until(
        "the reloaded pipeline",
        Duration::from_secs(30),
        || try_gauge(port, "eddy_uptime_seconds").filter(|&u| u < uptime),
        String::new,
    );
    wait_until(
        "the settings applied to the reloaded pipeline",
        Duration::from_secs(30),
        || {
            try_gauge(port, "eddy_checkpoint_interval_seconds")
                .filter(|&i| i == interval_ms as f64 / 1e3)
        },
        || format!("{:?}", try_gauge(port, "eddy_checkpoint_interval_seconds")),
    );
    assert_eq!(gauge(port, "eddy_batch_size"), setting("batch_size") as f64);
}

/// A cache the tuner chooses is never left below the open state of a
/// window with allowed lateness: the models only know the state of short
/// profiling runs, and a cache such a window's state outgrows sends bins
/// through sled on every batch (other windows spill partial aggregates
/// instead). Here every run told to the optimiser had a 1 MiB cache, so
/// it chooses about that, while an hour-long window over 200 000 sensors
/// holds tens of MiB.
#[test]
fn a_cache_the_tuner_chose_stays_above_the_open_state() {
    let s = Scratch::new();
    let port = free_port();
    let pipeline = APPLIED
        .replace(
            "cache_bytes = [\"16MiB\", \"64MiB\"]",
            "cache_bytes = [\"1MiB\", \"2MiB\"]",
        )
        .replace("keys = 64\nrate = 2000", "keys = 200000\nrate = 50000")
        .replace("size = \"1s\"", "size = \"1h\", allowed_lateness = \"1s\"");
    let _daemon = start_with(&s, port, &pipeline);
    wait_for(port, "a forecast", |v| !v["forecast"].is_null());
    for (cpu, n) in [(2.0, 1), (3.0, 2)] {
        let body = json!({
            "settings": {"workers": 1, "cache_bytes": 1u64 << 20, "checkpoint_interval": 500,
                         "batch_size": 1024, "flush_interval": 10},
            "rate": 50000.0, "cpu_s": cpu, "peak_memory_bytes": 40e6 + cpu,
            "latency_p99_ms": 10.0, "recovery_s": 1.0,
        });
        let (code, answer) = post(port, "/tune/observe", &body.to_string());
        assert_eq!(code, 200, "{answer}");
        assert_eq!(
            serde_json::from_str::<Value>(&answer).unwrap()["observations"],
            n
        );
    }
    // Applied, then raised step by step as the state grows.
    let v = wait_longer(port, "the cache raised above 4 MiB", 120, |v| {
        v["apply"]["applied"]["settings"]["cache_bytes"]
            .as_u64()
            .is_some_and(|b| b > 4 << 20)
    });
    let a = &v["apply"]["applied"];
    let how = a["outcome"]["cache_bytes"].as_str().unwrap();
    assert!(
        how.starts_with("live, raised to ") && how.contains("the open state holds"),
        "{a:#}"
    );
    let cache = gauge(port, "eddy_state_cache_bytes");
    assert!(cache > (4u64 << 20) as f64, "{cache}");
    assert!(
        cache >= a["settings"]["cache_bytes"].as_u64().unwrap() as f64,
        "{a:#}"
    );
}

/// A pipeline fed by a growing file (`{input}`; any source but a
/// generator) at about 1000 readings/s by a [`Feeder`], making profiling
/// runs every second.
fn fed(input: &std::path::Path) -> String {
    let head = PIPELINE.split("[sources.g]").next().expect("a head");
    // Runs as short as the 1 s windows allow (a window, and 1 s to start).
    let head = head.replace(
        "profile = false",
        "profile = true\nprofile_interval = \"1s\"\nprofile_duration = \"2s\"\nprofile_budget = 1",
    );
    format!(
        "{head}{}",
        FED_BODY.replace("{input}", &input.display().to_string())
    )
}

const FED_BODY: &str = r#"
[sources.readings]
type = "file"
path = "{input}"
follow = true
schema = { sensor = "string", temp = "float", ts = "int" }
event_time = "ts"

[transforms.per_sensor]
type = "window"
inputs = ["readings"]
key = ["sensor"]
window = { kind = "tumbling", size = "1s" }
aggregates = { n = "count(*)", avg = "avg(temp)" }

[sinks.b]
type = "blackhole"
inputs = ["per_sensor"]
"#;

/// Appends about 1000 readings a second to a file until dropped.
struct Feeder {
    feeding: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Feeder {
    fn start(input: &std::path::Path) -> Feeder {
        let feeding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let thread = {
            let (feeding, input) = (feeding.clone(), input.to_path_buf());
            std::thread::spawn(move || {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&input)
                    .unwrap();
                let mut i = 0u64;
                while feeding.load(std::sync::atomic::Ordering::Relaxed) {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_millis();
                    let mut chunk = String::new();
                    for _ in 0..100 {
                        chunk.push_str(&format!(
                            "{{\"sensor\":\"s{}\",\"temp\":{}.5,\"ts\":{now}}}\n",
                            i % 13,
                            i % 40
                        ));
                        i += 1;
                    }
                    f.write_all(chunk.as_bytes()).unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Feeder {
            feeding,
            thread: Some(thread),
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.feeding
            .store(false, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Profiling runs replay what the file source recorded, at the forecast
/// rate.
#[test]
fn profiling_runs_replay_the_recorded_input_of_other_sources() {
    let s = Scratch::new();
    let port = free_port();
    let input = s.write("input.jsonl", "");
    let _daemon = start_with(&s, port, &fed(&input));
    let feeder = Feeder::start(&input);
    let v = wait_longer(port, "a profiling run on replayed input", 180, |v| {
        v["optimizer"]["observations"]
            .as_array()
            .is_some_and(|o| !o.is_empty())
    });
    drop(feeder);
    let o = &v["optimizer"]["observations"][0];
    let f = |k: &str| o[k].as_f64().unwrap_or_else(|| panic!("{k} in {o}"));
    assert!((500.0..2000.0).contains(&f("rate")), "{o}");
    assert!(f("cpu_s") > 0.0, "{o}");
    // Windows fired in the run: the replayed stream had event time.
    assert!(f("latency_p99_ms") > 0.0, "{o}");
    assert!(f("recovery_s") > 0.0, "{o}");
}

/// The forecast reaches the controller: DS2's source target (the offered
/// rate every node gossips) becomes at least the forecast peak, so its
/// decisions size the run for the load to come. A file source has no
/// schedule: without the tuner's forecast (`apply = false`) no target is
/// offered and DS2 takes what came.
#[test]
fn the_controller_sizes_for_the_forecast_peak() {
    let offered = |apply: bool| -> (Value, f64) {
        let s = Scratch::new();
        let port = free_port();
        let input = s.write("input.jsonl", "");
        let pipeline = fed(&input).replace(
            "profile = true",
            &format!("profile = false\napply = {apply}"),
        );
        let _daemon = start_with(&s, port, &pipeline);
        let feeder = Feeder::start(&input);
        wait_for(port, "a forecast", |v| !v["forecast"].is_null());
        // A summary published after the forecast.
        std::thread::sleep(Duration::from_millis(2500));
        let (code, body) = http(port, "GET", "/cluster").expect("GET /cluster");
        assert_eq!(code, 200, "{body}");
        let peak = tune_state(port)["forecast"]["peak"].as_f64().unwrap();
        drop(feeder);
        let doc: Value = serde_json::from_str(&body).unwrap();
        let source = doc["members"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["local"] == true))
            .and_then(|m| m["summary"]["operators"].as_array())
            .and_then(|ops| ops.iter().find(|o| o["id"] == "readings"))
            .unwrap_or_else(|| panic!("no local summary of `readings` in {doc:#}"))
            .clone();
        (source, peak)
    };
    let (source, peak) = offered(true);
    let target = source["offered_per_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{source}"));
    let observed = source["observed_out_per_s"].as_f64().unwrap();
    assert!(target >= observed, "{source}");
    // About 1000/s fed; the forecast a moment later is about the same.
    assert!(
        target > 400.0 && (0.5..2.0).contains(&(target / peak)),
        "target {target}/s, forecast peak {peak}/s: {source}"
    );
    let (source, _) = offered(false);
    assert!(source["offered_per_s"].is_null(), "{source}");
}

/// Two members of a distributed run of a `rate`/s generator, both tuning;
/// node-0 profiles every second under `profile_on`, node-1 not at all.
fn profiling_members(s: &Scratch, profile_on: &str, rate: u64) -> Members {
    Members::start(s, 2, 1, 16, |i| {
        let profile = if i == 0 {
            format!(
                "profile = true\nprofile_on = \"{profile_on}\"\nprofile_interval = \"1s\"\n\
                 profile_duration = \"1s\"\nprofile_budget = 1"
            )
        } else {
            "profile = false".to_string()
        };
        format!(
            "[tune]\nenabled = true\nstep = \"200ms\"\nhorizon = \"2s\"\nlatency_p99_ms = 50\n\
             max_recovery_s = 5\n{profile}\n\n[sources.g]\ntype = \"generator\"\nrate = {rate}\n\n\
             [sinks.b]\ntype = \"blackhole\"\ninputs = [\"g\"]\n"
        )
    })
}

/// `profile_on = "peers"`: node-0 has its profiling runs made on node-1's
/// spare cores. It asks over the mesh; node-1 starts the run as a child
/// of its own (in its own data dir), measures it and answers; node-0's
/// optimiser learns from it. Each `GET /tune` says where the runs went.
#[test]
fn profiling_runs_are_made_on_a_peer() {
    let s = Scratch::new();
    let m = profiling_members(&s, "peers", 2000);
    let peer_pid = m.nodes[1].0.as_ref().unwrap().id();
    // A run under way on node-1 is node-1's child, in node-1's data dir.
    let scratch = s.path("node-1-data/tune-profile-peer");
    let scratch = scratch.to_string_lossy();
    let children = || -> Vec<u32> {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let (Ok(cmd), Ok(stat)) = (
                std::fs::read(e.path().join("cmdline")),
                std::fs::read_to_string(e.path().join("stat")),
            ) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            if cmd.contains(&*scratch) {
                found.push(ppid.unwrap_or(0));
            }
        }
        found
    };
    let parents = wait_until(
        "a profiling run on node-1",
        Duration::from_secs(90),
        || {
            let c = children();
            (!c.is_empty()).then_some(c)
        },
        || m.logs(&s),
    );
    assert!(
        parents.iter().all(|&p| p == peer_pid),
        "runs {parents:?} are not node-1's ({peer_pid}) children"
    );
    let v = wait_longer(m.api[0], "two runs made on node-1", 180, |v| {
        v["profiling"]["runs_on_peers"].as_u64() >= Some(2)
            && v["optimizer"]["observations"]
                .as_array()
                .is_some_and(|o| o.len() >= 2)
    });
    let p = &v["profiling"];
    assert_eq!(p["on"], "peers", "{p}");
    assert_eq!(p["runs"], p["runs_on_peers"], "{p}");
    assert_eq!(p["last_place"], "node-1", "{p}");
    assert!(
        p["cap"].as_str().unwrap().starts_with("on node-1: cores ["),
        "{p}"
    );
    for o in v["optimizer"]["observations"].as_array().unwrap() {
        let f = |k: &str| o[k].as_f64().unwrap_or_else(|| panic!("{k} in {o}"));
        assert!(f("cpu_s") > 0.0 && f("peak_memory_bytes") > 1e6, "{o}");
        assert!(f("latency_p99_ms") > 0.0 && f("recovery_s") > 0.0, "{o}");
    }
    let served = &tune_state(m.api[1])["profiling"]["served"];
    assert!(served["runs"].as_u64() >= Some(2), "{served}");
    assert_eq!(served["last_asker"], "node-0", "{served}");
    let text = eddy_tune(m.api[0], &[]);
    assert!(
        text.contains("(profile_on = peers: ") && text.contains("the last on node-1"),
        "{text}"
    );
    let text = eddy_tune(m.api[1], &[]);
    assert!(text.contains("made for peers: "), "{text}");
    assert!(
        m.logs(&s)
            .contains("tuner: making a profiling run for node-0"),
        "{}",
        m.logs(&s)
    );
}

/// Burns one core until dropped: a thread pinned to `core`, spinning.
struct Spinner(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Spinner {
    fn on_core(core: usize) -> Spinner {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            // SAFETY: a zeroed set is valid; `core` is below CPU_SETSIZE.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(core, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        Spinner(stop)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `profile_on = "auto"` follows the idle cores the members gossip:
/// node-0 and node-1 are pinned to a core each (`taskset`) and the test
/// keeps node-0's core busy, so node-0 has its runs made on node-1.
#[test]
fn auto_profiles_on_the_peer_with_idle_cores() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 {
        eprintln!("skipped: pinning two members apart needs two cores, this machine has {cores}");
        return;
    }
    let s = Scratch::new();
    let m = profiling_members(&s, "auto", 500);
    for (i, node) in m.nodes.iter().enumerate() {
        let pid = node.0.as_ref().unwrap().id().to_string();
        let out = std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", &i.to_string(), &pid])
            .output()
            .expect("taskset");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _busy = Spinner::on_core(0);
    let v = wait_longer(m.api[0], "a run made on node-1", 120, |v| {
        v["profiling"]["runs_on_peers"].as_u64() >= Some(1)
    });
    let p = &v["profiling"];
    assert_eq!(p["on"], "auto", "{p}");
    assert!(
        p["cap"]
            .as_str()
            .unwrap()
            .starts_with("on node-1: cores [1]"),
        "{p}"
    );
    // The members' summaries say why: node-0's core is busy.
    let (_, body) = http(m.api[0], "GET", "/cluster").expect("GET /cluster");
    let cluster: Value = serde_json::from_str(&body).unwrap();
    let idle = |name: &str| {
        cluster["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .and_then(|n| n["summary"]["idle_cores"].as_f64())
            .unwrap_or_else(|| panic!("no idle cores of {name} in {cluster:#}"))
    };
    assert!(idle("node-0") < 0.5, "{cluster:#}");
}
