//! Distributed execution through real processes: three `eddy run` nodes on
//! 127.0.0.2..=127.0.0.4 (static seeds, mutual TLS from `eddy cluster`),
//! each reading its own third of the input, with the bins of every keyed
//! operator split over the six workers of the cluster. The union of the
//! three nodes' outputs must be exactly the output of one node running the
//! whole input: a keyed tumbling window (count, sum, min, max) and a keyed
//! tumbling-window join.
//!
//! Each node's input is in event-time order, and so is the single node's:
//! no record is late anywhere, so the outputs can be compared exactly.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const BASE: i64 = 1_767_225_600_000;
const NODES: usize = 3;
/// A 3-node run of this size takes 1-3 s here; this is the limit before
/// the test says the cluster hung.
const RUN_LIMIT: Duration = Duration::from_secs(90);

/// Auctions `(id, seller, ts)` and bids `(auction, price, ts)`, each in
/// event-time order.
fn inputs(seed: u64) -> (Vec<String>, Vec<String>) {
    let mut rng = Rng::new(seed);
    let mut auctions: Vec<(i64, String)> = (0..3000)
        .map(|i| {
            let ts = BASE + i * 10 - rng.below(300) as i64;
            let line = json!({"id": i, "seller": rng.below(300), "ts": ts}).to_string();
            (ts, line)
        })
        .collect();
    let mut bids: Vec<(i64, String)> = (0..30_000)
        .map(|i| {
            let ts = BASE + i - rng.below(300) as i64;
            let line = json!({"auction": rng.below(3000), "price": rng.below(10_000), "ts": ts})
                .to_string();
            (ts, line)
        })
        .collect();
    auctions.sort();
    bids.sort();
    (
        auctions.into_iter().map(|(_, l)| l).collect(),
        bids.into_iter().map(|(_, l)| l).collect(),
    )
}

/// Lines `i` with `i % parts == part`, in order.
fn slice(lines: &[String], part: usize, parts: usize) -> String {
    lines
        .iter()
        .enumerate()
        .filter(|(i, _)| i % parts == part)
        .map(|(_, l)| format!("{l}\n"))
        .collect()
}

/// The pipeline, with `[node]` and `[mesh]` given by the caller.
fn pipeline(s: &Scratch, tag: &str, node_and_mesh: &str) -> PathBuf {
    let text = format!(
        r#"{node_and_mesh}
[sources.auctions]
type = "file"
path = "{a}"
schema = {{ id = "int", seller = "int", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "300ms"

[sources.bids]
type = "file"
path = "{b}"
schema = {{ auction = "int", price = "int", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "300ms"

[transforms.per_auction]
type = "window"
inputs = ["bids"]
key = ["auction"]
window = {{ kind = "tumbling", size = "2s" }}
aggregates = {{ n = "count(*)", total = "sum(price)", lo = "min(price)", hi = "max(price)" }}

[transforms.j]
type = "join"
inputs = ["auctions", "bids"]
left_on = ["id"]
right_on = ["auction"]
window = {{ kind = "tumbling", size = "2s" }}

[sinks.counts]
type = "file"
inputs = ["per_auction"]
path = "{counts}"

[sinks.pairs]
type = "file"
inputs = ["j"]
path = "{pairs}"
"#,
        a = s.path(&format!("auctions-{tag}.jsonl")).display(),
        b = s.path(&format!("bids-{tag}.jsonl")).display(),
        counts = s.path(&format!("counts-{tag}.jsonl")).display(),
        pairs = s.path(&format!("pairs-{tag}.jsonl")).display(),
    );
    s.write(&format!("{tag}.toml"), &text)
}

fn spawn(config: &Path, log: &Path) -> Running {
    let log = std::fs::File::create(log).expect("log file");
    let child = eddy()
        .env("RUST_LOG", "info")
        .arg("run")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn eddy");
    Running(Some(child))
}

#[test]
fn three_nodes_equal_one_node() {
    let s = Scratch::new();
    let (auctions, bids) = inputs(5);

    // The reference: one node, the whole input.
    s.write("auctions-single.jsonl", &slice(&auctions, 0, 1));
    s.write("bids-single.jsonl", &slice(&bids, 0, 1));
    let single = pipeline(
        &s,
        "single",
        &format!(
            "[node]\nworkers = 2\nbins = 64\ndata_dir = \"{}\"\n[checkpoint]\nenabled = false\n",
            s.path("single-data").display()
        ),
    );
    run_ok(&single);
    let want_counts = multiset(&json_lines(&s.read("counts-single.jsonl")));
    let want_pairs = multiset(&json_lines(&s.read("pairs-single.jsonl")));
    assert!(
        want_counts.len() > 1000,
        "{} window rows",
        want_counts.len()
    );
    assert!(want_pairs.len() > 1000, "{} join rows", want_pairs.len());

    // Three nodes, a third of the input each.
    let names: Vec<String> = (0..NODES).map(|i| format!("node-{i}")).collect();
    make_certs(&s.path(""), &names);
    let addrs: Vec<SocketAddr> = (0..NODES)
        .map(|i| free_udp([127, 0, 0, 2 + i as u8]))
        .collect();
    let seeds: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
    let mut nodes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        s.write(
            &format!("auctions-{name}.jsonl"),
            &slice(&auctions, i, NODES),
        );
        s.write(&format!("bids-{name}.jsonl"), &slice(&bids, i, NODES));
        let head = format!(
            r#"[node]
name = "{name}"
workers = 2
bins = 64
data_dir = "{data}"

[mesh]
ca_cert = "{dir}/ca/ca.crt"
cert = "{dir}/certs/{name}.crt"
key = "{dir}/certs/{name}.key"
listen = "{listen}"
seeds = [{seeds}]
probe_period = "300ms"
suspect_timeout = "1s"
expect_members = {NODES}
expect_timeout = "30s"

[api]
enabled = false
"#,
            data = s.path(&format!("{name}-data")).display(),
            dir = s.path("").display(),
            listen = addrs[i],
            seeds = seeds.join(", "),
        );
        let config = pipeline(&s, name, &head);
        nodes.push(spawn(&config, &s.path(&format!("{name}.log"))));
    }
    let logs = || -> String {
        names
            .iter()
            .map(|n| format!("--- {n}:\n{}", s.read(&format!("{n}.log"))))
            .collect()
    };
    let started = Instant::now();
    for (i, node) in nodes.iter_mut().enumerate() {
        let status = loop {
            let child = node.0.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            assert!(
                started.elapsed() < RUN_LIMIT,
                "the cluster did not finish within {RUN_LIMIT:?}\n{}",
                logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        node.0 = None;
        assert!(
            status.success(),
            "node-{i} exited with {status}\n{}",
            logs()
        );
    }
    eprintln!("3-node run took {:.1?}", started.elapsed());
    let all = logs();
    assert!(all.contains("bin assignment epoch 1"), "{all}");

    let union = |what: &str| -> Vec<String> {
        let mut rows = Vec::new();
        for n in &names {
            let part = json_lines(&s.read(&format!("{what}-{n}.jsonl")));
            assert!(
                !part.is_empty(),
                "{n} wrote no {what}: every node owns bins"
            );
            rows.extend(part);
        }
        multiset(&rows)
    };
    let got_counts = union("counts");
    assert_eq!(got_counts.len(), want_counts.len(), "window rows");
    assert_eq!(got_counts, want_counts, "keyed window: 3 nodes vs 1");
    let got_pairs = union("pairs");
    assert_eq!(got_pairs.len(), want_pairs.len(), "join rows");
    assert_eq!(got_pairs, want_pairs, "keyed join: 3 nodes vs 1");
}

/// A distributed run takes checkpoints (`tests/distributed_checkpoint.rs`),
/// so `eddy validate` takes an exactly-once sink there without a word.
#[test]
fn validate_takes_checkpoints_and_exactly_once_in_a_distributed_run() {
    let s = Scratch::new();
    let mesh = |sink: &str| {
        format!(
            r#"[mesh]
ca_cert = "ca.crt"
cert = "n.crt"
key = "n.key"
seeds = ["127.0.0.2:7400"]
expect_members = 3
[sources.s]
type = "generator"
count = 10
[sinks.o]
type = "file"
inputs = ["s"]
path = "out.jsonl"
{sink}
"#
        )
    };
    let exact = s.write("exact.toml", &mesh("delivery = \"exactly_once\""));
    let out = eddy()
        .arg("validate")
        .arg(&exact)
        .output()
        .expect("validate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("checkpoint"), "{err}");
    let off = s.write(
        "off.toml",
        &format!(
            "[checkpoint]\nenabled = false\n{}",
            mesh("delivery = \"exactly_once\"")
        ),
    );
    let out = eddy().arg("validate").arg(&off).output().expect("validate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("exactly_once needs checkpoints"), "{err}");
}

/// Two nodes whose windows are keyed by different fields would route rows
/// to the wrong owners: neither runs. The first to see the other's
/// fingerprint refuses it by name and leaves; the other then may not have
/// heard the fingerprint and gives up waiting (`expect_timeout`).
#[test]
fn a_member_with_another_pipeline_is_refused() {
    let s = Scratch::new();
    let names: Vec<String> = vec!["left".into(), "right".into()];
    make_certs(&s.path(""), &names);
    let addrs: Vec<SocketAddr> = (0..2).map(|i| free_udp([127, 0, 0, 5 + i as u8])).collect();
    let seeds: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
    let mut nodes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        s.write(
            &format!("in-{name}.jsonl"),
            "{\"a\": 1, \"b\": 2, \"ts\": 0}\n",
        );
        let key = if i == 0 { "a" } else { "b" };
        let text = format!(
            r#"[node]
name = "{name}"
data_dir = "{data}"
[mesh]
ca_cert = "{dir}/ca/ca.crt"
cert = "{dir}/certs/{name}.crt"
key = "{dir}/certs/{name}.key"
listen = "{listen}"
seeds = [{seeds}]
expect_members = 2
expect_timeout = "5s"
[api]
enabled = false
[sources.s]
type = "file"
path = "{input}"
schema = {{ a = "int", b = "int", ts = "int" }}
event_time = "ts"
[transforms.w]
type = "window"
inputs = ["s"]
key = ["{key}"]
window = {{ kind = "tumbling", size = "1s" }}
aggregates = {{ n = "count(*)" }}
[sinks.o]
type = "file"
inputs = ["w"]
path = "{out}"
"#,
            data = s.path(&format!("{name}-data")).display(),
            dir = s.path("").display(),
            listen = addrs[i],
            seeds = seeds.join(", "),
            input = s.path(&format!("in-{name}.jsonl")).display(),
            out = s.path(&format!("out-{name}.jsonl")).display(),
        );
        let config = s.write(&format!("{name}.toml"), &text);
        nodes.push(spawn(&config, &s.path(&format!("{name}.log"))));
    }
    let started = Instant::now();
    let mut refused = 0;
    for (node, name) in nodes.iter_mut().zip(&names) {
        let status = loop {
            if let Some(st) = node.0.as_mut().expect("running").try_wait().expect("wait") {
                break st;
            }
            assert!(started.elapsed() < RUN_LIMIT, "{name} did not stop");
            std::thread::sleep(Duration::from_millis(50));
        };
        node.0 = None;
        let log = s.read(&format!("{name}.log"));
        assert!(!status.success(), "{name} ran anyway:\n{log}");
        let other = names.iter().find(|n| *n != name).expect("two");
        if log.contains(&format!("member {other} (")) && log.contains("runs a different pipeline") {
            refused += 1;
        } else {
            assert!(log.contains("gave up after 5s"), "{name}:\n{log}");
        }
        assert!(
            s.read(&format!("out-{name}.jsonl")).is_empty(),
            "{name} wrote output"
        );
    }
    assert!(refused >= 1, "no node named the mismatch");
}
