//! `GET /metrics` of a real `eddy run`: what a Prometheus server scrapes
//! parses with a real text-format parser, carries Vector's component
//! names with their labels, and its counters move between two scrapes.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use prometheus_parse::{Sample, Scrape, Value};

fn scrape(port: u16) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((200, body)) = http(port, "GET", "/metrics") {
            return Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
                .unwrap_or_else(|e| panic!("not the Prometheus text format ({e}):\n{body}"));
        }
        assert!(Instant::now() < deadline, "no /metrics on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn value(s: &Sample) -> f64 {
    match &s.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        other => panic!("{}: not a number: {other:?}", s.metric),
    }
}

/// The value of `metric` for component `id`.
fn of(scrape: &Scrape, metric: &str, id: &str) -> f64 {
    let s = scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && s.labels.get("component_id") == Some(id))
        .unwrap_or_else(|| panic!("no {metric} for {id}"));
    value(s)
}

fn node_metric(scrape: &Scrape, metric: &str) -> f64 {
    value(
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric)
            .unwrap_or_else(|| panic!("no {metric}")),
    )
}

#[test]
fn metrics_parse_as_prometheus_text_and_carry_vectors_component_names() {
    let s = Scratch::new();
    let port = free_port();
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
name = "edge-1"
workers = 2
data_dir = "{data}"
[api]
address = "127.0.0.1:{port}"
[checkpoint]
interval = "200ms"
[sources.readings]
type = "generator"
rate = 5000
[transforms.per_sensor]
type = "window"
inputs = ["readings"]
key = ["sensor"]
window = {{ kind = "tumbling", size = "200ms" }}
aggregates = {{ n = "count(*)" }}
[sinks.out]
type = "blackhole"
inputs = ["per_sensor"]
"#,
            data = s.path("data").display()
        ),
    );
    let mut run = Running(Some(
        eddy()
            .arg("run")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let first = scrape(port);
    std::thread::sleep(Duration::from_millis(1500));
    let second = scrape(port);

    let names: BTreeSet<&str> = second.samples.iter().map(|s| s.metric.as_str()).collect();
    for want in [
        "component_received_events_total",
        "component_sent_events_total",
        "component_errors_total",
        "busy_time_ms_per_second",
        "backpressured_time_ms_per_second",
        "eddy_true_processing_rate",
        "component_latency_seconds",
        "eddy_dead_letters_total",
        "eddy_checkpoints_total",
        "eddy_checkpoint_last_duration_seconds",
    ] {
        assert!(names.contains(want), "{want} missing from {names:?}");
    }
    // Labels as Vector puts them.
    let window = second
        .samples
        .iter()
        .find(|s| {
            s.metric == "component_received_events_total"
                && s.labels.get("component_id") == Some("per_sensor")
        })
        .expect("the window's received events");
    assert_eq!(window.labels.get("component_kind"), Some("transform"));
    assert_eq!(window.labels.get("component_type"), Some("window"));
    assert_eq!(window.labels.get("host"), Some("edge-1"));
    // The counters move while records flow.
    let sent = |s: &Scrape| of(s, "component_sent_events_total", "readings");
    assert!(
        sent(&second) >= sent(&first) + 2000.0,
        "the source sent {} then {}",
        sent(&first),
        sent(&second)
    );
    assert!(of(&second, "component_received_events_total", "out") > 0.0);
    assert!(of(&second, "busy_time_ms_per_second", "per_sensor") > 0.0);
    assert!(node_metric(&second, "eddy_checkpoints_total") >= 2.0);
    // The sink's latency histogram: cumulative buckets up to +Inf.
    let latency = second
        .samples
        .iter()
        .find(|s| {
            s.metric == "component_latency_seconds" && s.labels.get("component_id") == Some("out")
        })
        .expect("the sink's latency");
    match &latency.value {
        Value::Histogram(buckets) => {
            assert!(buckets.len() >= 10, "{buckets:?}");
            assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count));
            assert!(buckets.last().unwrap().count > 0.0);
        }
        other => panic!("latency is not a histogram: {other:?}"),
    }
    // Every worker's instance of the source and of the window has a
    // watermark, and it follows the generator's event time (its rate).
    let watermarks = |s: &Scrape, id: &str| -> Vec<(String, f64)> {
        let mut w: Vec<(String, f64)> = s
            .samples
            .iter()
            .filter(|x| x.metric == "eddy_watermark_ms" && x.labels.get("component_id") == Some(id))
            .map(|x| (x.labels.get("worker").unwrap_or("?").to_string(), value(x)))
            .collect();
        w.sort_by(|a, b| a.0.cmp(&b.0));
        w
    };
    for id in ["readings", "per_sensor"] {
        let at = watermarks(&second, id);
        let workers: Vec<&str> = at.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(workers, ["0", "1"], "{id}: {at:?}");
    }
    std::thread::sleep(Duration::from_millis(1000));
    let third = scrape(port);
    for ((w, before), (_, after)) in watermarks(&second, "per_sensor")
        .into_iter()
        .zip(watermarks(&third, "per_sensor"))
    {
        assert!(
            after >= before + 300.0,
            "per_sensor on worker {w}: watermark {before} then {after} a second later"
        );
    }

    let mut child = run.0.take().unwrap();
    signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());
}
