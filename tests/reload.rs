//! Live reload of a real `eddy run`: `SIGHUP` and `POST /reload` with a
//! changed file keep the state of what did not change (a window's counts
//! continue across two reloads and end exactly right: nothing lost,
//! nothing counted twice), start added components, and reject a broken
//! file while the old pipeline goes on.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

const EVENTS: u64 = 24_000;
const KEYS: u64 = 4;

/// The pipeline: a generator (about 8 s at 3000 events/s), a one-hour
/// window counting per sensor (one window over the whole run: it emits
/// at the end), a filter into a file, and `extra` sinks.
fn pipeline(s: &Scratch, port: u16, threshold: u32, extra: &[&str]) -> String {
    let mut p = format!(
        r#"
[node]
data_dir = "{data}"
workers = 2

[api]
address = "127.0.0.1:{port}"

[checkpoint]
interval = "300ms"

[sources.gen]
type = "generator"
schema = "readings"
keys = {KEYS}
rate = 3000
count = {EVENTS}

[transforms.per_sensor]
type = "window"
inputs = ["gen"]
key = ["sensor"]
window = {{ kind = "tumbling", size = "1h" }}
aggregates = {{ n = "count(*)" }}

[sinks.counts]
type = "file"
inputs = ["per_sensor"]
path = "{counts}"
format = "json"

[transforms.hot]
type = "filter"
inputs = ["gen"]
condition = "temp > {threshold}"

[sinks.hot_out]
type = "file"
inputs = ["hot"]
path = "{hot}"
format = "json"
"#,
        data = s.path("data").display(),
        counts = s.path("counts.jsonl").display(),
        hot = s.path("hot.jsonl").display(),
    );
    for name in extra {
        p.push_str(&format!(
            "\n[sinks.{name}]\ntype = \"file\"\ninputs = [\"gen\"]\npath = \"{}\"\nformat = \"json\"\n",
            s.path(&format!("{name}.jsonl")).display()
        ));
    }
    p
}

/// The window's count per sensor, over every row it emitted.
fn counts(s: &Scratch) -> BTreeMap<String, u64> {
    let mut per_sensor = BTreeMap::new();
    for r in json_lines(&s.read("counts.jsonl")) {
        *per_sensor
            .entry(r["sensor"].as_str().unwrap().to_string())
            .or_default() += r["n"].as_u64().unwrap();
    }
    per_sensor
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lines(s: &Scratch, name: &str) -> usize {
    std::fs::read_to_string(s.path(name))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn reload_keeps_unchanged_state_and_rejects_a_broken_file() {
    let s = Scratch::new();
    let port = free_port();
    let config = s.write("p.toml", &pipeline(&s, port, 20, &[]));
    let log = s.path("eddy.log");
    let mut run = Running(Some(
        eddy()
            .arg("run")
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    ));
    let pid = run.0.as_ref().unwrap().id();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    wait_for("the first records", Duration::from_secs(30), || {
        lines(&s, "hot.jsonl") > 100
    });

    // 1. SIGHUP: the filter changed and a sink was added.
    s.write("p.toml", &pipeline(&s, port, 25, &["extra"]));
    signal(pid, "HUP");
    wait_for("the SIGHUP reload", Duration::from_secs(30), || {
        log_text().contains("reloaded ")
    });
    let text = log_text();
    assert!(
        text.contains(
            "unchanged: sinks.counts, sinks.hot_out, sources.gen, transforms.per_sensor; \
             changed: transforms.hot; added: sinks.extra; removed: none"
        ),
        "{text}"
    );
    wait_for("the added sink's records", Duration::from_secs(30), || {
        lines(&s, "extra.jsonl") > 100
    });

    // 2. A broken file: refused with its errors, the pipeline goes on.
    s.write("p.toml", "[sources.gen]\ntype = \"nope\"\n");
    let (code, body) = http(port, "POST", "/reload").expect("the local API answers");
    assert_eq!(code, 422, "{body}");
    let outcome: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(outcome["reloaded"], false, "{body}");
    let message = outcome["message"].as_str().unwrap();
    assert!(
        message.contains("goes on unchanged") && message.contains("unknown value `nope`"),
        "{body}"
    );
    assert!(run.0.as_mut().unwrap().try_wait().unwrap().is_none());
    let before = lines(&s, "extra.jsonl");
    wait_for(
        "records after the refused reload",
        Duration::from_secs(30),
        || lines(&s, "extra.jsonl") > before + 100,
    );

    // 3. POST /reload with the extra sink removed again.
    s.write("p.toml", &pipeline(&s, port, 25, &[]));
    let (code, body) = http(port, "POST", "/reload").expect("the local API answers");
    assert_eq!(code, 200, "{body}");
    let outcome: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(outcome["reloaded"], true, "{body}");
    assert!(
        outcome["message"]
            .as_str()
            .unwrap()
            .contains("removed: sinks.extra"),
        "{body}"
    );

    let status = run.0.take().unwrap().wait().unwrap();
    let text = log_text();
    assert!(status.success(), "{status}: {text}");
    // Two reloads happened before the generator was done, so the counts
    // came through two handovers of the window's state.
    assert_eq!(text.matches("reloaded ").count(), 2, "{text}");

    // The reference: the same pipeline in one go, at full speed.
    let r = Scratch::new();
    let reference = pipeline(&r, free_port(), 20, &[]).replace("rate = 3000\n", "");
    run_ok(&r.write("p.toml", &reference));
    let got = counts(&s);
    assert_eq!(got.values().sum::<u64>(), EVENTS, "{got:?}\n{text}");
    assert_eq!(got, counts(&r), "{text}");
}

/// A window whose aggregates changed cannot take its old state: after the
/// reload it starts empty (and says so) instead of failing or decoding
/// state that does not fit; the rest of the pipeline keeps its state.
#[test]
fn a_window_whose_state_no_longer_fits_starts_anew() {
    let s = Scratch::new();
    let port = free_port();
    let config = s.write("p.toml", &pipeline(&s, port, 20, &[]));
    let log = s.path("eddy.log");
    let mut run = Running(Some(
        eddy()
            .arg("run")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    ));
    wait_for("the first records", Duration::from_secs(30), || {
        lines(&s, "hot.jsonl") > 1000
    });
    let changed = pipeline(&s, port, 20, &[]).replace(
        "n = \"count(*)\"",
        "n = \"count(*)\", total = \"sum(temp)\"",
    );
    s.write("p.toml", &changed);
    let (code, body) = http(port, "POST", "/reload").expect("the local API answers");
    assert_eq!(code, 200, "{body}");
    let status = run.0.take().unwrap().wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {text}");
    assert!(
        text.contains("per_sensor changed since checkpoint")
            && text.contains("its state does not survive; it starts anew"),
        "{text}"
    );
    let got = counts(&s);
    let total: u64 = got.values().sum();
    assert!(
        total < EVENTS && total > EVENTS / 2,
        "the new window counts only what came after the reload: {got:?}\n{text}"
    );
    // The filter's sink kept going from the source's position: every hot
    // reading once (at-least-once sink, but no crash: nothing replayed).
    let r = Scratch::new();
    let reference = pipeline(&r, free_port(), 20, &[]).replace("rate = 3000\n", "");
    run_ok(&r.write("p.toml", &reference));
    assert_eq!(lines(&s, "hot.jsonl"), lines(&r, "hot.jsonl"), "{text}");
}
