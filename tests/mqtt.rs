//! The MQTT source and sink against a real broker: Debian's `mosquitto`,
//! started by each test on a free loopback port with persistence in a
//! scratch directory, and killed at the end.
//!
//! Where `mosquitto` is not installed the tests say so and pass, except
//! under `CI=true`, where a missing broker fails them (`.ci/run` installs
//! it).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::*;
use rumqttc::{Client, Event, MqttOptions, Outgoing, Packet, QoS};

/// The broker binary, or `None` (after saying why) where it is missing.
fn mosquitto() -> Option<PathBuf> {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join("mosquitto");
        if p.exists() {
            return Some(p);
        }
    }
    let why = "mosquitto is not installed (apt-get install mosquitto)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}; CI must have it");
    }
    eprintln!("skipped: {why}");
    None
}

/// A running broker on `port`.
struct Broker {
    port: u16,
    _process: Running,
}

fn start_broker(bin: &Path, scratch: &Scratch) -> Broker {
    let port = free_port();
    let data = scratch.path("mosquitto");
    std::fs::create_dir_all(&data).unwrap();
    // Unlimited in-flight and queued messages: eddy acknowledges at
    // checkpoints, and a killed eddy's session must keep everything
    // published while it is down.
    let config = scratch.write(
        "mosquitto.conf",
        &format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\nmax_inflight_messages 0\nmax_queued_messages 0\n",
            data.display()
        ),
    );
    let process = Running(Some(
        Command::new(bin)
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(scratch.path("mosquitto.log")).unwrap())
            .spawn()
            .expect("start mosquitto"),
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "mosquitto did not listen on {port}: {}",
            scratch.read("mosquitto.log")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Broker {
        port,
        _process: process,
    }
}

/// Starts `eddy run CONFIG`, its stderr going to `log`.
fn start_eddy(config: &Path, log: &Path) -> Running {
    Running(Some(
        eddy()
            .arg("run")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("spawn eddy"),
    ))
}

/// Waits until `log` contains `text`.
fn wait_for_log(log: &Path, text: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let content = std::fs::read_to_string(log).unwrap_or_default();
        if content.contains(text) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}; eddy said:\n{content}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The JSON lines of `path` so far.
fn lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // A line being written may be cut: keep whole lines only.
    let whole = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    json_lines(whole)
}

/// Publishes `n` readings at QoS 1 from a thread; `acked` counts the
/// broker's acknowledgements. Reading `i` has `"id": i` and goes to
/// `sensors/s{i % 10}/temp`.
fn publish_readings(port: u16, n: u64, acked: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    let mut o = MqttOptions::new("test-publisher", "127.0.0.1", port);
    o.set_keep_alive(Duration::from_secs(30)).set_inflight(500);
    let (client, mut connection) = Client::new(o, 1000);
    std::thread::spawn(move || {
        let driver = std::thread::spawn(move || {
            for event in connection.iter() {
                match event {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        if acked.fetch_add(1, Relaxed) + 1 == n {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => panic!("publisher lost the broker: {e}"),
                }
            }
        });
        for i in 0..n {
            let payload = format!(r#"{{"id":{i},"sensor":"s{}","temp":{}.5}}"#, i % 10, i % 40);
            client
                .publish(
                    format!("sensors/s{}/temp", i % 10),
                    QoS::AtLeastOnce,
                    false,
                    payload,
                )
                .unwrap();
        }
        driver.join().unwrap();
        let _ = client.disconnect();
    })
}

/// 100k readings at QoS 1; eddy is SIGKILLed mid-way and started again
/// with the same client id: every reading is in the output.
#[test]
fn a_killed_run_loses_no_reading() {
    let Some(bin) = mosquitto() else { return };
    let s = Scratch::new();
    let broker = start_broker(&bin, &s);
    let out = s.path("out.jsonl");
    let config = s.write(
        "mqtt.toml",
        &format!(
            r#"
[node]
data_dir = "{data}"
workers = 2
[checkpoint]
interval = "200ms"
[api]
enabled = false
[sources.readings]
type = "mqtt"
url = "mqtt://127.0.0.1:{port}"
topics = ["sensors/+/temp"]
qos = 1
client_id = "eddy-kill-test"
schema = {{ id = "int", sensor = "string", temp = "float" }}
[sinks.out]
type = "file"
inputs = ["readings"]
path = "{out}"
delivery = "exactly_once"
"#,
            data = s.path("data").display(),
            port = broker.port,
            out = out.display()
        ),
    );
    const N: u64 = 100_000;
    let log1 = s.path("eddy1.log");
    let mut first = start_eddy(&config, &log1);
    wait_for_log(&log1, "subscribed", "eddy did not subscribe");

    let acked = Arc::new(AtomicU64::new(0));
    let publisher = publish_readings(broker.port, N, acked.clone());
    // Kill once part of the readings is through.
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines(&out).len() < 15_000 {
        assert!(
            Instant::now() < deadline,
            "eddy wrote {} lines; it said:\n{}",
            lines(&out).len(),
            std::fs::read_to_string(&log1).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut child = first.0.take().unwrap();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let at_kill_published = acked.load(Relaxed);
    let at_kill_written = lines(&out).len();
    println!(
        "killed eddy with {at_kill_written} readings written and {at_kill_published} of {N} published"
    );
    assert!(
        at_kill_published < N,
        "the publisher was done before the kill; the test proves nothing"
    );
    std::thread::sleep(Duration::from_millis(300));

    let log2 = s.path("eddy2.log");
    let mut second = start_eddy(&config, &log2);
    publisher.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let distinct = loop {
        let ids: BTreeSet<i64> = lines(&out)
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        if ids.len() as u64 == N || Instant::now() > deadline {
            break ids;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut child = second.0.take().unwrap();
    signal(child.id(), "TERM");
    let status = child.wait().unwrap();
    let rows = lines(&out);
    let missing: Vec<i64> = (0..N as i64)
        .filter(|i| !distinct.contains(i))
        .take(10)
        .collect();
    println!(
        "after the restart: {} lines, {} distinct readings, {} duplicates",
        rows.len(),
        distinct.len(),
        rows.len() - distinct.len()
    );
    assert!(
        missing.is_empty(),
        "{} readings missing, such as {missing:?}; eddy said:\n{}",
        N - distinct.len() as u64,
        std::fs::read_to_string(&log2).unwrap_or_default()
    );
    assert!(status.success(), "eddy exited with {status} after SIGTERM");
    // Records are intact, not only their ids.
    let r = rows.iter().find(|r| r["id"] == 42).unwrap();
    assert_eq!(r["sensor"], "s2");
    assert_eq!(r["temp"], 2.5);
}

/// One `GET /metrics`; the body.
fn metrics(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("API");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

fn metric(body: &str, name: &str, id: &str) -> f64 {
    let label = format!("component_id=\"{id}\"");
    body.lines()
        .find(|l| l.starts_with(name) && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} for {id} in:\n{body}"))
}

/// Topic filters with `+` and `#`, the topic as a field, a payload of
/// two lines, and a malformed payload that goes to the dead-letter
/// output and is counted.
#[test]
fn wildcards_put_the_topic_in_a_field() {
    let Some(bin) = mosquitto() else { return };
    let s = Scratch::new();
    let broker = start_broker(&bin, &s);
    let out = s.path("out.jsonl");
    let api = free_port();
    let config = s.write(
        "mqtt.toml",
        &format!(
            r#"
[node]
data_dir = "{data}"
workers = 1
[checkpoint]
enabled = false
[api]
address = "127.0.0.1:{api}"
[sources.readings]
type = "mqtt"
url = "mqtt://127.0.0.1:{port}"
topics = ["sensors/+/temp", "alerts/#"]
qos = 1
topic_field = "topic"
schema = {{ id = "int", v = "float" }}
[sinks.out]
type = "file"
inputs = ["readings"]
path = "{out}"
"#,
            data = s.path("data").display(),
            port = broker.port,
            out = out.display()
        ),
    );
    let log = s.path("eddy.log");
    let mut run = start_eddy(&config, &log);
    wait_for_log(&log, "subscribed", "eddy did not subscribe");

    let mut o = MqttOptions::new("test-wildcards", "127.0.0.1", broker.port);
    o.set_keep_alive(Duration::from_secs(30));
    let (client, mut connection) = Client::new(o, 100);
    let messages: &[(&str, &str)] = &[
        ("sensors/a/temp", r#"{"id":1,"v":1.5}"#),
        (
            "sensors/b/temp",
            "{\"id\":2,\"v\":2.5}\n{\"id\":3,\"v\":3.5}\n",
        ),
        ("sensors/a/humidity", r#"{"id":4,"v":4.5}"#), // matches no filter
        ("alerts/x/y/z", r#"{"id":5,"v":5.5}"#),
        ("sensors/c/temp", r#"{"id":6,"v":"#), // malformed
        ("alerts", r#"{"id":7,"v":7.5}"#),     // `alerts/#` matches its parent too
    ];
    for (topic, payload) in messages {
        client
            .publish(*topic, QoS::AtLeastOnce, false, payload.as_bytes())
            .unwrap();
    }
    let mut acks = 0;
    for event in connection.iter() {
        if let Ok(Event::Incoming(Packet::PubAck(_))) = event {
            acks += 1;
            if acks == messages.len() {
                break;
            }
        }
    }
    let want: BTreeMap<i64, &str> = [
        (1, "sensors/a/temp"),
        (2, "sensors/b/temp"),
        (3, "sensors/b/temp"),
        (5, "alerts/x/y/z"),
        (7, "alerts"),
    ]
    .into_iter()
    .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines(&out).len() < want.len() || metric_or_zero(api) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "got {:?}; eddy said:\n{}",
            lines(&out),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200)); // nothing more comes
    let got: BTreeMap<i64, String> = lines(&out)
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["topic"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: BTreeMap<i64, String> = want.into_iter().map(|(k, v)| (k, v.into())).collect();
    assert_eq!(got, want);
    assert_eq!(lines(&out).len(), want.len(), "no record twice");
    let body = metrics(api);
    assert_eq!(metric(&body, "component_errors_total", "readings"), 1.0);
    assert_eq!(
        metric(&body, "component_received_events_total", "readings"),
        6.0
    );
    assert_eq!(
        metric(&body, "component_sent_events_total", "readings"),
        5.0
    );
    let mut child = run.0.take().unwrap();
    signal(child.id(), "TERM");
    assert!(child.wait().unwrap().success());
    let dead = json_lines(&std::fs::read_to_string(s.path("data/dead_letter.jsonl")).unwrap());
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["component"], "readings");
    assert_eq!(dead[0]["topic"], "sensors/c/temp");
    assert_eq!(dead[0]["record"], r#"{"id":6,"v":"#);
    let _ = client.disconnect();

    fn metric_or_zero(api: u16) -> f64 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", api)) else {
            return 0.0;
        };
        let _ = write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        );
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let label = "component_id=\"readings\"";
        text.lines()
            .find(|l| l.starts_with("component_errors_total") && l.contains(label))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }
}

/// The sink: eddy publishes generated readings to a topic built from a
/// field; a subscriber receives every one.
#[test]
fn the_sink_publishes_every_record() {
    let Some(bin) = mosquitto() else { return };
    let s = Scratch::new();
    let broker = start_broker(&bin, &s);
    const N: usize = 5_000;

    let mut o = MqttOptions::new("test-subscriber", "127.0.0.1", broker.port);
    o.set_keep_alive(Duration::from_secs(30));
    let (client, mut connection) = Client::new(o, 100);
    client.subscribe("eddy/#", QoS::AtLeastOnce).unwrap();
    for event in connection.iter() {
        if let Ok(Event::Incoming(Packet::SubAck(_))) = event {
            break;
        }
    }
    let received = std::thread::spawn(move || {
        let mut got: Vec<(String, serde_json::Value)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < N && Instant::now() < deadline {
            match connection.recv_timeout(Duration::from_millis(200)) {
                Ok(Ok(Event::Incoming(Packet::Publish(p)))) => got.push((
                    p.topic.clone(),
                    serde_json::from_slice(&p.payload).expect("a JSON record"),
                )),
                Ok(Ok(Event::Outgoing(Outgoing::Disconnect))) => break,
                _ => {}
            }
        }
        got
    });
    let config = s.write(
        "mqtt.toml",
        &format!(
            r#"
[node]
data_dir = "{data}"
workers = 2
[checkpoint]
interval = "100ms"
[api]
enabled = false
[sources.readings]
type = "generator"
schema = "readings"
count = {N}
keys = 7
[sinks.out]
type = "mqtt"
inputs = ["readings"]
url = "mqtt://127.0.0.1:{port}"
topic = "eddy/{{sensor}}/readings"
qos = 1
"#,
            data = s.path("data").display(),
            port = broker.port,
        ),
    );
    let done = run_ok(&config);
    let got = received.join().unwrap();
    let _ = client.disconnect();
    assert_eq!(
        got.len(),
        N,
        "received {} of {N}; eddy said:\n{}",
        got.len(),
        String::from_utf8_lossy(&done.stderr)
    );
    let mut sensors = BTreeSet::new();
    for (topic, r) in &got {
        let sensor = r["sensor"].as_str().expect("a sensor field");
        assert_eq!(topic, &format!("eddy/{sensor}/readings"));
        assert!(r["temp"].is_number() && r["ts"].is_number(), "{r}");
        sensors.insert(sensor.to_string());
    }
    assert_eq!(sensors.len(), 7, "{sensors:?}");
}
