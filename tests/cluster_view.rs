//! The controller's gossip through real processes: three `eddy run` nodes
//! on 127.0.0.2..=127.0.0.4 (static seeds, mutual TLS from `eddy
//! cluster`), each running an endless generator pipeline. Every node's
//! `GET /cluster` must show all three nodes' operator rates with fresh ages,
//! the same announcer (the lowest id), a decision with its reason; `eddy top
//! --once` prints them; `/metrics` carries them labelled by node; and when
//! the announcer leaves, the next lowest id takes over.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn cluster(port: u16) -> Option<Value> {
    let (code, body) = http(port, "GET", "/cluster")?;
    (code == 200).then(|| serde_json::from_str(&body).expect("JSON"))
}

/// Polls `f` until it holds or `within` passes; the last document is
/// returned either way.
fn wait_for(port: u16, within: Duration, f: impl Fn(&Value) -> bool) -> (bool, Value) {
    let deadline = Instant::now() + within;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        if let Some(doc) = cluster(port) {
            if f(&doc) {
                return (true, doc);
            }
            last = doc;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    (false, last)
}

/// All three members alive, each with a summary younger than 3 s whose
/// generator and filter measured a rate.
fn fresh_rates(doc: &Value, names: &[&str]) -> bool {
    let members = doc["members"].as_array().cloned().unwrap_or_default();
    names.iter().all(|n| {
        members.iter().any(|m| {
            m["name"] == *n
                && m["state"] == "alive"
                && m["age_ms"].as_u64().is_some_and(|a| a < 3000)
                && m["summary"]["operators"].as_array().is_some_and(|ops| {
                    ["ticks", "keep"].iter().all(|id| {
                        ops.iter().any(|o| {
                            o["id"] == *id
                                && o["observed_in_per_s"].as_f64().is_some_and(|r| r > 50.0)
                                && o["true_processing_per_s"].as_f64().is_some_and(|r| r > 0.0)
                        })
                    })
                })
        })
    })
}

#[test]
fn every_node_sees_every_nodes_rates_and_one_announcer() {
    let s = Scratch::new();
    let names = ["node-a", "node-b", "node-c"];
    make_certs(&s.path(""), &names);
    let mesh: Vec<SocketAddr> = (0..3).map(|i| free_udp([127, 0, 0, 2 + i as u8])).collect();
    let seeds: Vec<String> = mesh.iter().map(|a| format!("\"{a}\"")).collect();
    let apis: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let text = format!(
            r#"[node]
name = "{name}"
workers = 1
data_dir = "{data}"

[sources.ticks]
type = "generator"
rate = 400

[transforms.keep]
type = "filter"
inputs = ["ticks"]
condition = "temp > -1000"

[sinks.sink]
type = "blackhole"
inputs = ["keep"]

[mesh]
ca_cert = "{dir}/ca/ca.crt"
cert = "{dir}/certs/{name}.crt"
key = "{dir}/certs/{name}.key"
listen = "{listen}"
seeds = [{seeds}]
probe_period = "300ms"
suspect_timeout = "1s"

[api]
address = "127.0.0.1:{api}"
"#,
            data = s.path(&format!("{name}-data")).display(),
            dir = s.path("").display(),
            listen = mesh[i],
            seeds = seeds.join(", "),
            api = apis[i],
        );
        let config = s.write(&format!("{name}.toml"), &text);
        let log = std::fs::File::create(s.path(&format!("{name}.log"))).expect("log");
        let child = eddy()
            .env("RUST_LOG", "info")
            .arg("run")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn eddy");
        nodes.push(Running(Some(child)));
    }
    let logs = || -> String {
        names
            .iter()
            .map(|n| format!("--- {n}:\n{}", s.read(&format!("{n}.log"))))
            .collect()
    };
    let mut by_id: Vec<&str> = names.to_vec();
    let id = |n: &str| -> String {
        // The same id `/status` shows (16 hex digits of the name's hash).
        let (_, body) = http(apis[0], "GET", "/status").expect("status");
        let status: Value = serde_json::from_str(&body).expect("json");
        status["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == n))
            .and_then(|m| m["id"].as_str())
            .map(str::to_string)
            .unwrap_or_default()
    };

    // Every node sees every node's rates, fresh.
    for (i, port) in apis.iter().enumerate() {
        let (ok, doc) = wait_for(*port, Duration::from_secs(30), |d| fresh_rates(d, &names));
        assert!(
            ok,
            "{} never showed all rates: {doc:#}\n{}",
            names[i],
            logs()
        );
    }
    by_id.sort_by_key(|n| id(n));
    let lowest = by_id[0];

    // The same announcer everywhere, and a decision with its reason.
    for (i, port) in apis.iter().enumerate() {
        let (ok, doc) = wait_for(*port, Duration::from_secs(30), |d| {
            d["announcer"] == lowest && d["decision"]["reason"].as_str().is_some()
        });
        assert!(
            ok,
            "{}: no decision by {lowest}: {doc:#}\n{}",
            names[i],
            logs()
        );
        let d = &doc["decision"];
        assert_eq!(d["executed"], false);
        assert_eq!(d["announced_here"], names[i] == lowest, "{d:#}");
    }
    let all = logs();
    assert!(
        all.contains(&format!("decisions are announced by {lowest} (this node)")),
        "{all}"
    );

    // `eddy top --once` prints one frame of the same.
    let out = eddy()
        .args(["top", "--once", "--api", &format!("127.0.0.1:{}", apis[1])])
        .output()
        .expect("eddy top");
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{frame}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for n in names {
        assert!(frame.contains(n), "{frame}");
    }
    for needle in [
        "USEFUL%",
        "BACKPR%",
        "ticks",
        "keep",
        &format!("announced by {lowest}"),
        "why: ",
    ] {
        assert!(frame.contains(needle), "no `{needle}` in:\n{frame}");
    }
    assert!(!frame.contains('\x1b'), "--once prints no escape codes");

    // `/metrics` carries the cluster's rates labelled by node.
    let (_, metrics) = http(apis[2], "GET", "/metrics").expect("metrics");
    for n in names {
        let series =
            format!("eddy_cluster_observed_processing_rate{{node=\"{n}\",component_id=\"keep\"}}");
        assert!(metrics.contains(&series), "no {series} in\n{metrics}");
    }

    // The announcer leaves: the next lowest id takes over on the others.
    let gone = names.iter().position(|n| *n == lowest).unwrap();
    let pid = nodes[gone].0.as_ref().unwrap().id();
    signal(pid, "TERM");
    let status = nodes[gone].0.as_mut().unwrap().wait().expect("wait");
    nodes[gone].0 = None;
    assert!(
        status.success(),
        "{lowest} exited with {status}\n{}",
        logs()
    );
    let next = by_id[1];
    for (i, port) in apis.iter().enumerate() {
        if i == gone {
            continue;
        }
        let (ok, doc) = wait_for(*port, Duration::from_secs(20), |d| {
            d["announcer"] == next
                && d["decision"]["announcer"] == next
                && d["members"].as_array().is_some_and(|ms| {
                    ms.iter()
                        .any(|m| m["name"] == lowest && m["state"] == "down")
                })
        });
        assert!(
            ok,
            "{}: {next} did not take over: {doc:#}\n{}",
            names[i],
            logs()
        );
    }
    assert!(
        logs().contains(&format!("decisions are announced by {next} (this node)")),
        "{}",
        logs()
    );
}

/// Without a daemon, `eddy top --once` says where it looked and fails.
#[test]
fn top_without_a_daemon_fails_clearly() {
    let port = free_port();
    let out = eddy()
        .args(["top", "--once", "--api", &format!("127.0.0.1:{port}")])
        .output()
        .expect("eddy top");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no eddy node answers"), "{err}");
}
