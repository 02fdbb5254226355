//! Live bin migration between real processes: three `eddy run` members
//! (127.0.0.2..=127.0.0.4, mutual TLS from `eddy cluster`) each run the
//! deterministic `wcount` generator at a fixed rate (each member its
//! share of the one event stream, split by global worker) into a keyed
//! tumbling-window count; bins move between the members while the records
//! flow, through `POST /rebalance` on one member and `eddy rebalance` on
//! another. The union of the three outputs must be exactly the single-node
//! output: one record lost or applied twice changes a count, a window
//! fired on two members shows as two rows.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const NODES: usize = 3;
const WORKERS: usize = 2;
const BINS: usize = 64;
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// `POST path` with a JSON body to 127.0.0.1:`port`: status and body.
fn post_json(port: u16, path: &str, body: &str) -> (u16, String) {
    http_with(port, "POST", path, body).expect("an answer from the API")
}

/// The even assignment of the run (global worker per bin).
fn even() -> Vec<usize> {
    (0..BINS).map(|b| b * NODES * WORKERS / BINS).collect()
}

/// About half of node-0's bins (its workers are 0 and 1) moved to the
/// other members' workers, round robin.
fn half_of_node0_away() -> Vec<usize> {
    let mut a = even();
    let mine: Vec<usize> = (0..BINS).filter(|&b| a[b] < WORKERS).collect();
    for (i, &b) in mine.iter().take(mine.len() / 2).enumerate() {
        a[b] = WORKERS + i % ((NODES - 1) * WORKERS);
    }
    a
}

struct Cluster {
    s: Scratch,
    names: Vec<String>,
    nodes: Vec<Running>,
    api: Vec<u16>,
}

impl Cluster {
    /// Three members running the pipeline with `migration` as their
    /// `[migration]` section; returns once every local API answers.
    fn start(events: u64, rate: u64, migration: &str) -> Cluster {
        Cluster::start_with(events, [rate; NODES], migration)
    }

    /// As `start`, each member's generator at its own rate (sources may
    /// differ between members; the keyed exchanges may not).
    fn start_with(events: u64, rates: [u64; NODES], migration: &str) -> Cluster {
        let s = Scratch::new();
        let m = Members::start(&s, NODES, WORKERS, BINS, |i| {
            let out = s.path(&format!("rows-node-{i}.jsonl"));
            keyed_count_pipeline(migration, events, Some(rates[i]), &out)
        });
        Cluster {
            s,
            names: m.names,
            nodes: m.nodes,
            api: m.api,
        }
    }

    fn logs(&self) -> String {
        self.names
            .iter()
            .map(|n| format!("--- {n}:\n{}", self.s.read(&format!("{n}.log"))))
            .collect()
    }

    /// Waits for every member to exit 0; the union of their rows.
    fn finish(mut self) -> (Vec<String>, String) {
        let started = Instant::now();
        for i in 0..NODES {
            if self.nodes[i].0.is_none() {
                continue; // the test waited for it already
            }
            let status = loop {
                let child = self.nodes[i].0.as_mut().expect("running");
                if let Some(status) = child.try_wait().expect("wait") {
                    break status;
                }
                assert!(
                    started.elapsed() < RUN_LIMIT,
                    "the cluster did not finish within {RUN_LIMIT:?}\n{}",
                    self.logs()
                );
                std::thread::sleep(Duration::from_millis(50));
            };
            self.nodes[i].0 = None;
            assert!(
                status.success(),
                "node-{i} exited with {status}\n{}",
                self.logs()
            );
        }
        let mut rows = Vec::new();
        for n in &self.names {
            rows.extend(json_lines(&self.s.read(&format!("rows-{n}.jsonl"))));
        }
        (multiset(&rows), self.logs())
    }
}

/// One node, the whole input: what the three members must give together.
fn reference(events: u64) -> Vec<String> {
    let s = Scratch::new();
    let head = format!(
        "[node]\nworkers = 2\nbins = {BINS}\ndata_dir = \"{}\"\n[checkpoint]\nenabled = false\n",
        s.path("data").display()
    );
    let out = s.path("rows.jsonl");
    let config = s.write(
        "single.toml",
        &keyed_count_pipeline(&head, events, None, &out),
    );
    run_ok(&config);
    multiset(&json_lines(&s.read("rows.jsonl")))
}

fn migrations_logged(logs: &str, node: &str) -> usize {
    let at = logs.find(&format!("--- {node}:")).expect("node log");
    let rest = &logs[at + 4..];
    let end = rest.find("--- node-").unwrap_or(rest.len());
    rest[..end].matches("migration done").count()
}

/// Half of node-0's bins move away through `POST /rebalance` with an
/// explicit assignment, then `eddy rebalance` on node-1 moves them back to
/// even; nothing is lost or duplicated.
#[test]
fn bins_move_between_processes_while_they_run() {
    const EVENTS: u64 = 150_000;
    let want = reference(EVENTS);
    assert!(want.len() > 10_000, "{} window rows", want.len());

    let c = Cluster::start(EVENTS, 25_000, "");
    std::thread::sleep(Duration::from_millis(1500));
    let target = half_of_node0_away();
    let moved = target.iter().zip(even()).filter(|(a, b)| **a != *b).count();
    let body = serde_json::json!({ "strategy": "batched", "assignment": target }).to_string();
    let (code, answer) = post_json(c.api[0], "/rebalance", &body);
    assert_eq!(code, 200, "POST /rebalance: {answer}\n{}", c.logs());
    let report: Value = serde_json::from_str(&answer).expect("JSON report");
    assert_eq!(report["bins"], moved, "{answer}");
    assert!(report["bytes"].as_u64().expect("bytes") > 0, "{answer}");
    eprintln!("first migration: {answer}");

    std::thread::sleep(Duration::from_millis(500));
    let out = eddy()
        .args(["rebalance", "--api", &format!("127.0.0.1:{}", c.api[1])])
        .output()
        .expect("eddy rebalance");
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "eddy rebalance: {}{}\n{}",
        printed,
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    assert!(
        printed.contains(&format!("{moved} bins")),
        "back to even moves the same bins: {printed}"
    );
    eprintln!("second migration: {printed}");

    let (got, logs) = c.finish();
    assert_eq!(migrations_logged(&logs, "node-0"), 1, "{logs}");
    assert_eq!(migrations_logged(&logs, "node-1"), 1, "{logs}");
    assert_eq!(migrations_logged(&logs, "node-2"), 0, "{logs}");
    assert_eq!(got.len(), want.len(), "window rows\n{logs}");
    assert!(
        got == want,
        "3 members with migrations vs 1 node: {}",
        row_diff(&got, &want)
    );
}

/// While a migration runs (fluid, 300 ms between steps), a second request
/// on another member, and on the coordinator itself, is refused with 409;
/// the first completes and the output is still exact.
#[test]
fn a_concurrent_rebalance_is_refused_with_409() {
    const EVENTS: u64 = 450_000;
    let want = reference(EVENTS);
    let c = Cluster::start(
        EVENTS,
        25_000,
        "[migration]\nstrategy = \"fluid\"\ngap = \"300ms\"\n",
    );
    std::thread::sleep(Duration::from_millis(1000));
    let body =
        serde_json::json!({ "strategy": "fluid", "assignment": half_of_node0_away() }).to_string();
    let port = c.api[0];
    let first = std::thread::spawn(move || post_json(port, "/rebalance", &body));
    std::thread::sleep(Duration::from_millis(700));
    let (code, answer) = post_json(c.api[2], "/rebalance", "");
    assert_eq!(code, 409, "{answer}\n{}", c.logs());
    assert!(answer.contains("already running"), "{answer}");
    let (code, answer) = post_json(c.api[0], "/rebalance", "");
    assert_eq!(code, 409, "{answer}");
    let (code, answer) = first.join().expect("first request");
    assert_eq!(code, 200, "{answer}\n{}", c.logs());
    let (got, logs) = c.finish();
    assert_eq!(migrations_logged(&logs, "node-0"), 1, "{logs}");
    assert_eq!(got.len(), want.len(), "window rows\n{logs}");
    assert!(
        got == want,
        "3 members with a migration vs 1 node: {}",
        row_diff(&got, &want)
    );
}

/// A migration between members goes on after their input ended (2 s of
/// it; the migration takes about 4): the state of a bin leaving a worker
/// then follows the `End` on its stream. It used to be dropped there, and
/// the step waited for it until its timeout.
#[test]
fn a_migration_between_members_outlives_their_input() {
    const EVENTS: u64 = 50_000;
    const RATE: u64 = 25_000;
    let want = reference(EVENTS);
    let c = Cluster::start(
        EVENTS,
        RATE,
        "[migration]\nstrategy = \"fluid\"\ngap = \"300ms\"\n",
    );
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    let body =
        serde_json::json!({ "strategy": "fluid", "assignment": half_of_node0_away() }).to_string();
    let (code, answer) = post_json(c.api[0], "/rebalance", &body);
    assert_eq!(code, 200, "{answer}\n{}", c.logs());
    let input = Duration::from_millis(EVENTS * 1000 / RATE);
    assert!(
        started.elapsed() > input + Duration::from_millis(500),
        "the migration ended {:?} after the start, before the input did: nothing moved after it",
        started.elapsed()
    );
    let (got, logs) = c.finish();
    assert_eq!(migrations_logged(&logs, "node-0"), 1, "{logs}");
    assert!(
        got == want,
        "3 members with a migration past their input vs 1 node: {}",
        row_diff(&got, &want)
    );
}

/// In one process `POST /rebalance` moves bins between its workers: every
/// bin to worker 0, while the records flow; the output is exact.
#[test]
fn rebalance_in_one_process() {
    const EVENTS: u64 = 100_000;
    let want = reference(EVENTS);
    let s = Scratch::new();
    let port = free_port();
    let head = format!(
        "[node]\nworkers = 2\nbins = {BINS}\ndata_dir = \"{}\"\n[checkpoint]\nenabled = false\n[api]\naddress = \"127.0.0.1:{port}\"\n",
        s.path("data").display()
    );
    let out = s.path("rows.jsonl");
    let config = s.write(
        "one.toml",
        &keyed_count_pipeline(&head, EVENTS, Some(40_000), &out),
    );
    let log = std::fs::File::create(s.path("one.log")).expect("log file");
    let mut node = Running(Some(
        eddy()
            .env("RUST_LOG", "info")
            .arg("run")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn eddy"),
    ));
    let started = Instant::now();
    wait_for_api(port);
    std::thread::sleep(Duration::from_millis(800));
    let body = serde_json::json!({ "assignment": vec![0; BINS] }).to_string();
    let (code, answer) = post_json(port, "/rebalance", &body);
    assert_eq!(code, 200, "{answer}\n{}", s.read("one.log"));
    let report: Value = serde_json::from_str(&answer).expect("JSON report");
    assert_eq!(report["bins"], BINS / 2, "{answer}");
    let child = node.0.as_mut().expect("running");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(started.elapsed() < RUN_LIMIT, "{}", s.read("one.log"));
        std::thread::sleep(Duration::from_millis(50));
    };
    node.0 = None;
    assert!(status.success(), "{}", s.read("one.log"));
    assert!(s.read("one.log").contains("migration done"));
    let got = multiset(&json_lines(&s.read("rows.jsonl")));
    assert!(
        got == want,
        "1 process with a migration: {}",
        row_diff(&got, &want)
    );
}

/// The records the members' sources read, from their logs' last line.
fn records_read(logs: &str) -> u64 {
    logs.lines()
        .filter_map(|l| l.split("finished: ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// SIGTERM drains a member mid-stream: node-2's sources end, its bins
/// (open windows, fed by every member) move to node-0 and node-1 while
/// their records flow, node-2 leaves the run and exits 0, and the others
/// finish it. Node-2's input is cut at the signal, so the reference is
/// not the single-node output: every record read is counted exactly once
/// (the counts add up to what the sources read), no window fires twice,
/// and no window counts more than with the whole input.
#[test]
fn sigterm_drains_a_member_and_the_others_finish() {
    const EVENTS: u64 = 150_000;
    let want = reference(EVENTS);
    let mut c = Cluster::start(EVENTS, 25_000, "[migration]\ndrain_timeout = \"20s\"\n");
    std::thread::sleep(Duration::from_millis(1500));
    let pid = c.nodes[2].0.as_ref().expect("running").id();
    signal(pid, "TERM");
    let sent = Instant::now();
    let status = loop {
        let child = c.nodes[2].0.as_mut().expect("running");
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "node-2 did not exit after SIGTERM\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let exited = sent.elapsed();
    c.nodes[2].0 = None;
    assert!(
        status.success(),
        "node-2 exited with {status}\n{}",
        c.logs()
    );
    let line =
        c.s.read("node-2.log")
            .lines()
            .find(|l| l.contains("drained:"))
            .unwrap_or_else(|| panic!("node-2 logs no drain\n{}", c.logs()))
            .to_string();
    for field in ["epoch=", "bins=21", "bytes=", "duration_ms="] {
        assert!(line.contains(field), "{field}: {line}");
    }
    eprintln!("{line}\nnode-2 exited {exited:?} after SIGTERM");
    let (got, logs) = c.finish();
    for n in ["node-0", "node-1"] {
        let at = logs.find(&format!("--- {n}:")).expect("log");
        assert!(
            logs[at..].contains("node-2 drained and left the run"),
            "{n} did not see node-2 leave\n{logs}"
        );
    }
    let read = records_read(&logs);
    assert!(
        read < EVENTS && read > EVENTS / 2,
        "{read} records read\n{logs}"
    );
    assert_each_record_counted_once(&got, &want, read, &logs);
}

/// A drain that cannot complete within `[migration] drain_timeout` (here
/// far shorter than one round trip) ends with an error and a non-zero
/// exit, not a hang.
#[test]
fn a_drain_past_its_timeout_exits_non_zero() {
    let mut c = Cluster::start(150_000, 25_000, "[migration]\ndrain_timeout = \"1ms\"\n");
    std::thread::sleep(Duration::from_millis(1000));
    let pid = c.nodes[2].0.as_ref().expect("running").id();
    signal(pid, "TERM");
    let sent = Instant::now();
    let status = loop {
        let child = c.nodes[2].0.as_mut().expect("running");
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(30),
            "node-2 did not exit after SIGTERM\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    c.nodes[2].0 = None;
    assert_eq!(status.code(), Some(1), "{}", c.logs());
    let log = c.s.read("node-2.log");
    assert!(
        log.contains("did not complete within [migration] drain_timeout"),
        "{log}"
    );
    assert!(!log.contains("drained:"), "{log}");
}
