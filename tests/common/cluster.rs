//! Helpers for the tests that run several real eddy nodes: free ports on
//! a loopback address, `eddy` subcommands that must succeed, and a cluster
//! CA with a certificate per node made by `eddy cluster init/issue`.

use std::net::SocketAddr;
use std::path::Path;

use super::eddy;

/// A UDP port free on `ip` (see `ports`).
pub fn free_udp(ip: [u8; 4]) -> SocketAddr {
    super::ports::free_on(ip)
}

/// A TCP port free on `ip` (see `ports`).
pub fn free_tcp(ip: [u8; 4]) -> SocketAddr {
    super::ports::free_on(ip)
}

/// Runs `eddy ARGS…` and fails the test, with its stderr, unless it
/// succeeds.
pub fn run_eddy(args: &[&str]) {
    let out = eddy().args(args).output().expect("run eddy");
    assert!(
        out.status.success(),
        "eddy {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A cluster CA (cluster `blue`) in `dir/ca` and a certificate per node
/// name in `dir/certs`.
pub fn make_certs(dir: &Path, names: &[impl AsRef<str>]) {
    make_certs_in(&dir.join("ca"), &dir.join("certs"), names);
}

/// `eddy cluster init` of `ca` (cluster `blue`), then a certificate per
/// node name in `certs`.
pub fn make_certs_in(ca: &Path, certs: &Path, names: &[impl AsRef<str>]) {
    let ca = ca.to_str().expect("utf8");
    run_eddy(&["cluster", "init", ca, "--cluster", "blue"]);
    for n in names {
        run_eddy(&[
            "cluster",
            "issue",
            "--ca",
            ca,
            "--out",
            certs.to_str().expect("utf8"),
            n.as_ref(),
        ]);
    }
}

/// The members of a distributed run (`[mesh] expect_members`), each an
/// `eddy run` on its own loopback address (127.0.0.2, .3, ...) with mutual
/// TLS from `eddy cluster`, its local API on 127.0.0.1 and its log in
/// `NAME.log` of the scratch directory. Suspicion is slow (3 s), so a
/// member busy on a loaded machine is not taken for dead.
pub struct Members {
    pub names: Vec<String>,
    pub nodes: Vec<super::Running>,
    pub api: Vec<u16>,
}

impl Members {
    /// Starts `n` members named `node-0`…; `body(i)` is member i's pipeline
    /// after its `[node]`, `[mesh]` and `[api]` sections (it may add more
    /// sections). Returns once every member has started its run.
    pub fn start(
        s: &super::Scratch,
        n: usize,
        workers: usize,
        bins: usize,
        body: impl Fn(usize) -> String,
    ) -> Members {
        Members::start_with_env(s, n, workers, bins, body, |_| Vec::new())
    }

    /// As [`Members::start`], member i with `env(i)` added to its
    /// environment.
    pub fn start_with_env(
        s: &super::Scratch,
        n: usize,
        workers: usize,
        bins: usize,
        body: impl Fn(usize) -> String,
        env: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Members {
        let names: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
        make_certs(&s.path(""), &names);
        let addrs: Vec<SocketAddr> = (0..n).map(|i| free_udp([127, 0, 0, 2 + i as u8])).collect();
        let seeds: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
        let api: Vec<u16> = (0..n).map(|_| super::free_port()).collect();
        let seeds = seeds.join(", ");
        let nodes = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let member = Member {
                    name,
                    workers,
                    bins,
                    listen: addrs[i],
                    seeds: &seeds,
                    expect: n,
                    api: api[i],
                };
                spawn_member(s, name, &member.config(s, &body(i)), env(i))
            })
            .collect();
        let m = Members { names, nodes, api };
        let started = std::time::Instant::now();
        for name in &m.names {
            while !s
                .read(&format!("{name}.log"))
                .contains("bin assignment epoch")
            {
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(60),
                    "{name} did not start\n{}",
                    m.logs(s)
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        m
    }

    /// Every member's log, for a failing assertion.
    pub fn logs(&self, s: &super::Scratch) -> String {
        member_logs(s, &self.names)
    }
}

/// What differs between the members of a test's run.
pub struct Member<'a> {
    pub name: &'a str,
    pub workers: usize,
    pub bins: usize,
    pub listen: SocketAddr,
    /// The items of the `seeds` array, quoted.
    pub seeds: &'a str,
    pub expect: usize,
    pub api: u16,
}

impl Member<'_> {
    /// Its pipeline file: `[node]`, `[mesh]` with a certificate of the CA
    /// in `s` (`make_certs`), `[api]`, then `body`.
    pub fn config(&self, s: &super::Scratch, body: &str) -> String {
        let Member {
            name,
            workers,
            bins,
            listen,
            seeds,
            expect,
            api,
        } = self;
        format!(
            r#"[node]
name = "{name}"
workers = {workers}
bins = {bins}
data_dir = "{data}"

[mesh]
ca_cert = "{dir}/ca/ca.crt"
cert = "{dir}/certs/{name}.crt"
key = "{dir}/certs/{name}.key"
listen = "{listen}"
seeds = [{seeds}]
probe_period = "500ms"
suspect_timeout = "3s"
expect_members = {expect}
expect_timeout = "30s"

[api]
address = "127.0.0.1:{api}"

{body}
"#,
            data = s.path(&format!("{name}-data")).display(),
            dir = s.path("").display(),
        )
    }
}

/// Writes `NAME.toml` and starts `eddy run` on it with its log in
/// `NAME.log` and `env` added to its environment.
pub fn spawn_member(
    s: &super::Scratch,
    name: &str,
    config: &str,
    env: Vec<(&'static str, String)>,
) -> super::Running {
    let file = s.write(&format!("{name}.toml"), config);
    let log = std::fs::File::create(s.path(&format!("{name}.log"))).expect("log file");
    let child = eddy()
        // `EDDY_TEST_LOG=eddy=debug,info` to see a failing run's steps.
        .env(
            "RUST_LOG",
            std::env::var("EDDY_TEST_LOG").unwrap_or("info".into()),
        )
        .envs(env)
        .arg("run")
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn eddy");
    super::Running(Some(child))
}

/// The logs `NAME.log` of the members `names`, for a failing assertion.
pub fn member_logs(s: &super::Scratch, names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("--- {n}:\n{}", s.read(&format!("{n}.log"))))
        .collect()
}

/// Waits up to `limit` for the members `names` (running as `nodes`) to
/// exit, each with success; the union of the rows they wrote to
/// `rows-NAME.jsonl`, as a multiset.
pub fn finished_rows(
    s: &super::Scratch,
    names: &[String],
    nodes: &mut [super::Running],
    limit: std::time::Duration,
) -> Vec<String> {
    let started = std::time::Instant::now();
    for (i, node) in nodes.iter_mut().enumerate() {
        let Some(child) = node.0.as_mut() else {
            continue; // the test waited for it already
        };
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            assert!(
                started.elapsed() < limit,
                "the members did not finish within {limit:?}\n{}",
                member_logs(s, names)
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        node.0 = None;
        assert!(
            status.success(),
            "{} exited with {status}\n{}",
            names[i],
            member_logs(s, names)
        );
    }
    let mut rows = Vec::new();
    for n in names {
        rows.extend(super::json_lines(&s.read(&format!("rows-{n}.jsonl"))));
    }
    super::multiset(&rows)
}

/// What the members of a distributed run must give together: the rows
/// (as a multiset) of one node with 2 workers, `bins` bins and no
/// checkpoints running `pipeline(head, out)`, where `head` is its `[node]`
/// and `[checkpoint]` sections and `out` the file its sink writes.
pub fn reference_rows(bins: usize, pipeline: impl FnOnce(&str, &Path) -> String) -> Vec<String> {
    let s = super::Scratch::new();
    let head = format!(
        "[node]\nworkers = 2\nbins = {bins}\ndata_dir = \"{}\"\n[checkpoint]\nenabled = false\n",
        s.path("data").display()
    );
    let out = s.path("rows.jsonl");
    let config = s.write("single.toml", &pipeline(&head, &out));
    super::run_ok(&config);
    super::multiset(&super::json_lines(&s.read("rows.jsonl")))
}

/// The keyed stage of the controller tests, after a source `input`: 1 ms
/// windows counting per `key` (with `aggregate` besides), a map that costs
/// `cost` per row (`""`: none), and a file sink writing `out`.
pub fn counts_then_slow_map(
    input: &str,
    key: &str,
    aggregate: &str,
    cost: &str,
    out: &Path,
) -> String {
    let cost = if cost.is_empty() {
        String::new()
    } else {
        format!("cost_per_record = \"{cost}\"")
    };
    format!(
        r#"
[transforms.counts]
type = "window"
inputs = ["{input}"]
key = ["{key}"]
window = {{ kind = "tumbling", size = "1ms" }}
aggregates = {{ n = "count(*)", {aggregate} }}

[transforms.slow]
type = "map"
inputs = ["counts"]
fields = {{ twice = "n * 2" }}
{cost}

[sinks.rows]
type = "file"
inputs = ["slow"]
path = "{out}"
"#,
        out = out.display()
    )
}

/// Polls `f` until it gives something; fails after `limit`, with
/// `context()` (the members' logs, say) in the message.
pub fn wait_until<T>(
    what: &str,
    limit: std::time::Duration,
    mut f: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            started.elapsed() < limit,
            "{what}: not within {limit:?}\n{}",
            context()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Generator (`wcount`, 2000 keys, `rate` per second if given) -> keyed
/// 100 ms tumbling count and sum -> file `out`, after `head`: the pipeline
/// the distributed-run tests compare with a single node.
pub fn keyed_count_pipeline(head: &str, events: u64, rate: Option<u64>, out: &Path) -> String {
    let rate = rate.map_or(String::new(), |r| format!("rate = {r}"));
    format!(
        r#"{head}
[sources.events]
type = "generator"
schema = "wcount"
count = {events}
keys = 2000
{rate}

[transforms.counts]
type = "window"
inputs = ["events"]
key = ["key"]
window = {{ kind = "tumbling", size = "100ms" }}
aggregates = {{ count = "count(*)", sum = "sum(value)" }}

[sinks.rows]
type = "file"
inputs = ["counts"]
path = "{out}"
"#,
        out = out.display()
    )
}

/// For a run that stopped early: the window rows `got` count `read`
/// records in all, no window fired twice, and none counted more than in
/// `want`, the rows of the whole input (a row is its window and key, then
/// `count` and `sum`).
pub fn assert_each_record_counted_once(got: &[String], want: &[String], read: u64, logs: &str) {
    let split = |rows: &[String]| -> std::collections::BTreeMap<String, u64> {
        let mut m = std::collections::BTreeMap::new();
        for r in rows {
            let mut v: serde_json::Value = serde_json::from_str(r).expect("JSON row");
            let count = v["count"].as_u64().expect("count");
            let o = v.as_object_mut().expect("object");
            o.remove("count");
            o.remove("sum");
            let id = v.to_string();
            assert!(m.insert(id, count).is_none(), "a window fired twice: {r}");
        }
        m
    };
    let (got, want) = (split(got), split(want));
    assert_eq!(got.values().sum::<u64>(), read, "counted vs read\n{logs}");
    for (id, n) in &got {
        let full = want.get(id).copied().unwrap_or(0);
        assert!(*n <= full, "{id}: {n} > {full} with the whole input");
    }
}
