//! A node joins a running distributed run: three `eddy run` members
//! (127.0.0.2..=127.0.0.4) run the deterministic `wcount` generator at a
//! fixed rate into a keyed tumbling-window count; a fourth (127.0.0.5),
//! started mid-run with the same pipeline, joins it and receives its
//! share of the bins (open windows fed by every member), then one of the
//! first three drains on SIGTERM. Every record read is counted exactly
//! once: the counts add up to what the sources read, no window fires on
//! two members, and none counts more than with the whole input (node-2's
//! input is cut at its drain, so the single-node output bounds the union
//! from above; `tests/migration_mesh.rs` checks exact equality where no
//! input is cut).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const NODES: usize = 3;
const WORKERS: usize = 2;
const BINS: usize = 64;
const EVENTS: u64 = 250_000;
const RATE: u64 = 25_000;

/// One node, the whole input.
fn reference() -> Vec<String> {
    let s = Scratch::new();
    let head = format!(
        "[node]\nworkers = {WORKERS}\nbins = {BINS}\ndata_dir = \"{}\"\n[checkpoint]\nenabled = false\n",
        s.path("data").display()
    );
    let out = s.path("rows.jsonl");
    let config = s.write(
        "single.toml",
        &keyed_count_pipeline(&head, EVENTS, None, &out),
    );
    run_ok(&config);
    multiset(&json_lines(&s.read("rows.jsonl")))
}

/// Records the sources read, from the `finished:` lines of the logs.
fn records_read(logs: &str) -> u64 {
    logs.lines()
        .filter_map(|l| l.split("finished: ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Waits until `file` in `s` contains `what`, or fails with `logs()`.
fn wait_for_log(s: &Scratch, file: &str, what: &str, limit: Duration, logs: &dyn Fn() -> String) {
    let started = Instant::now();
    while !s.read(file).contains(what) {
        assert!(
            started.elapsed() < limit,
            "{file} does not say {what:?} after {limit:?}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_joins_a_running_run_then_another_drains() {
    let want = reference();
    let s = Scratch::new();
    let out = |name: &str| s.path(&format!("rows-{name}.jsonl"));
    let m = Members::start(&s, NODES, WORKERS, BINS, |i| {
        keyed_count_pipeline(
            "[migration]\ndrain_timeout = \"20s\"\n",
            EVENTS,
            Some(RATE),
            &out(&format!("node-{i}")),
        )
    });
    let mut names = m.names.clone();
    let mut nodes = m.nodes;
    let api = m.api;

    // node-3: a certificate of the same CA, the same pipeline, the same
    // `expect_members`; the others' run is under way when it starts.
    std::thread::sleep(Duration::from_millis(1500));
    let dir = s.path("");
    run_eddy(&[
        "cluster",
        "issue",
        "--ca",
        dir.join("ca").to_str().expect("utf8"),
        "--out",
        dir.join("certs").to_str().expect("utf8"),
        "node-3",
    ]);
    let seeds: String = s
        .read("node-0.toml")
        .lines()
        .find_map(|l| l.strip_prefix("seeds = [")?.strip_suffix(']'))
        .expect("node-0's seeds")
        .into();
    let api3 = free_port();
    let member = Member {
        name: "node-3",
        workers: WORKERS,
        bins: BINS,
        listen: free_udp([127, 0, 0, 5]),
        seeds: &seeds,
        expect: NODES,
        api: api3,
    };
    let body = keyed_count_pipeline(
        "[migration]\ndrain_timeout = \"20s\"\n",
        EVENTS,
        Some(RATE),
        &out("node-3"),
    );
    let joined_at = Instant::now();
    let child = spawn_member(&s, "node-3", &member.config(&s, &body), Vec::new());
    nodes.push(child);
    names.push("node-3".into());
    let logs = || -> String {
        names
            .iter()
            .map(|n| format!("--- {n}:\n{}", s.read(&format!("{n}.log"))))
            .collect()
    };

    wait_for_log(
        &s,
        "node-3.log",
        "joined run at epoch",
        Duration::from_secs(20),
        &logs,
    );
    // The sponsor (the first member by name) moves its share of the bins.
    wait_for_log(
        &s,
        "node-0.log",
        "node-3 joined: the run's bins spread",
        Duration::from_secs(20),
        &logs,
    );
    eprintln!(
        "node-3 joined and got its bins {:?} after it started",
        joined_at.elapsed()
    );
    let line = s
        .read("node-0.log")
        .lines()
        .find(|l| l.contains("node-3 joined:"))
        .expect("logged")
        .to_string();
    // 64 bins over 8 workers: the newcomer's two take 16 (and bins move
    // between the others too, to even ranges).
    let moved: u64 = line
        .split("bins=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no bins= in {line}"));
    assert!(moved >= 16, "{line}");
    eprintln!("{line}");
    let (code, status) = http(api3, "GET", "/status").expect("node-3's API answers");
    assert_eq!(code, 200);
    let status: Value = serde_json::from_str(&status).expect("JSON");
    let alive: Vec<&str> = status["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter(|m| m["state"] == "alive")
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(alive.len(), 4, "{status}");
    assert_eq!(api.len(), NODES);

    // node-2 drains; the three others finish the run.
    std::thread::sleep(Duration::from_millis(500));
    let pid = nodes[2].0.as_ref().expect("running").id();
    signal(pid, "TERM");
    let limit = Instant::now() + Duration::from_secs(60);
    for i in [2, 0, 1, 3] {
        let status = loop {
            let child = nodes[i].0.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < limit, "node-{i} did not exit\n{}", logs());
            std::thread::sleep(Duration::from_millis(50));
        };
        nodes[i].0 = None;
        assert!(
            status.success(),
            "node-{i} exited with {status}\n{}",
            logs()
        );
    }
    let logs = logs();
    assert!(
        s.read("node-2.log").contains("drained:"),
        "node-2 logs no drain\n{logs}"
    );
    for n in ["node-0", "node-1", "node-3"] {
        let at = logs.find(&format!("--- {n}:")).expect("log");
        let end = logs[at + 4..]
            .find("--- node-")
            .map_or(logs.len(), |e| at + 4 + e);
        assert!(
            logs[at..end].contains("node-2 drained and left the run"),
            "{n} did not see node-2 leave\n{logs}"
        );
    }
    let read = records_read(&logs);
    assert!(
        read < EVENTS && read > EVENTS / 3,
        "{read} records read\n{logs}"
    );
    let mut got = Vec::new();
    for n in &names {
        got.extend(multiset(&json_lines(&s.read(&format!("rows-{n}.jsonl")))));
    }
    assert!(
        !s.read("rows-node-3.jsonl").is_empty(),
        "node-3 fired no window: it got no bins\n{logs}"
    );
    assert_each_record_counted_once(&got, &want, read, &logs);
}
