//! Clusters of real `eddy run` processes, checked the way an operator sees
//! them: through `eddy peers --json` of every node.
//!
//! - 3 and 5 nodes on 127.0.0.2..=127.0.0.6 with static seeds converge to
//!   all `alive`; a SIGKILLed node is marked `down` by every other node
//!   within the detection time; restarted with the same config it is
//!   `alive` everywhere again with a higher incarnation; SIGTERM leaves the
//!   cluster (the others mark the node `down` sooner than failure detection
//!   could) and exits 0.
//! - A node whose certificate comes from another CA (same cluster name) is
//!   never listed by the legit nodes, which log the refusal with its
//!   address.
//! - As root: nodes in network namespaces joined by a bridge find each
//!   other with mDNS alone; a partition (one link down) is detected and
//!   heals.
//!
//! Every process is killed by a guard, even when an assertion fails.

mod common;

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{Scratch, eddy, free_tcp, free_udp, make_certs_in};
use serde_json::Value;

/// SWIM settings of every node here.
const PROBE_PERIOD: Duration = Duration::from_millis(300);
const SUSPECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A fresh cluster, or a restarted node, must be all alive everywhere this
/// soon (it takes 0.1-0.5 s here).
const CONVERGE: Duration = Duration::from_secs(3);
/// Poll interval of `eddy peers`.
const POLL: Duration = Duration::from_millis(100);

/// The time every other node may take to mark a crashed node `down`, when
/// each node has `others` other members:
/// - up to `others` probe periods until some node probes it (each node
///   probes its members in a shuffled round robin, one per period, so every
///   member is probed by every node at least once per round; with several
///   nodes probing, the first probe usually comes within one period);
/// - one period for the probe to fail (direct ping, ack deadline of half a
///   period, indirect pings through the others; suspect at the next tick);
/// - `suspect_timeout` for the suspicion to expire;
/// - two periods for the `down` to be gossiped to every node (updates ride
///   on the probes every node sends each period; log2(5) < 3 hops, most
///   nodes hear it from the detector directly);
/// - 700 ms of slack: the 100 ms `eddy peers` poll, a process spawn per
///   poll, and timers running late on two cores shared by every process
///   of the test (and other builds).
fn detection_time(others: usize) -> Duration {
    PROBE_PERIOD * (others as u32 + 3) + SUSPECT_TIMEOUT + Duration::from_millis(700)
}

/// A node that left with SIGTERM tells the cluster: the others mark it
/// `down` from gossip, well before failure detection, which needs at least
/// half a probe period plus `suspect_timeout` (1.15 s) after the process
/// stopped answering. 1 s from its exit is therefore only met by a real
/// leave.
const LEAVE_SEEN: Duration = Duration::from_secs(1);

/// Tests of this file run one at a time: their timing assertions are about
/// eddy, not about how many other clusters share the two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A free port on `ip` for UDP (the mesh) or TCP (the API), from the
/// kernel's ephemeral range: no clash with the 7400/7401 defaults other
/// tests use, nor with their random ports.
/// What one node is given.
struct NodeSpec<'a> {
    name: &'a str,
    mesh: SocketAddr,
    api: SocketAddr,
    /// `None`: `discovery = ["mdns"]` and no seeds.
    seeds: Option<Vec<SocketAddr>>,
    ca_dir: &'a Path,
    cert_dir: &'a Path,
    /// Run inside this network namespace.
    netns: Option<String>,
}

/// One `eddy run` process and what the test knows of it.
struct Node {
    name: String,
    mesh: SocketAddr,
    api: SocketAddr,
    config: PathBuf,
    log: PathBuf,
    netns: Option<String>,
    child: Option<Child>,
}

impl Node {
    fn new(s: &Scratch, spec: NodeSpec<'_>) -> Node {
        let discovery = match &spec.seeds {
            Some(seeds) => {
                let list: Vec<String> = seeds.iter().map(|a| format!("\"{a}\"")).collect();
                format!("discovery = [\"static\"]\nseeds = [{}]", list.join(", "))
            }
            None => "discovery = [\"mdns\"]".to_string(),
        };
        let name = spec.name;
        // An endless pipeline: a slow generator into a blackhole.
        let text = format!(
            r#"[node]
name = "{name}"
data_dir = "{data}"
workers = 1

[sources.ticks]
type = "generator"
rate = 5

[sinks.sink]
type = "blackhole"
inputs = ["ticks"]

[mesh]
ca_cert = "{ca}/ca.crt"
cert = "{certs}/{name}.crt"
key = "{certs}/{name}.key"
listen = "{mesh}"
{discovery}
probe_period = "{probe}ms"
suspect_timeout = "{suspect}ms"

[api]
address = "{api}"
"#,
            data = s.path(&format!("{name}-data")).display(),
            ca = spec.ca_dir.display(),
            certs = spec.cert_dir.display(),
            mesh = spec.mesh,
            probe = PROBE_PERIOD.as_millis(),
            suspect = SUSPECT_TIMEOUT.as_millis(),
            api = spec.api,
        );
        Node {
            name: name.to_string(),
            mesh: spec.mesh,
            api: spec.api,
            config: s.write(&format!("{name}.toml"), &text),
            log: s.path(&format!("{name}.log")),
            netns: spec.netns,
            child: None,
        }
    }

    /// `eddy ARGS`, in the node's namespace if it has one.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = match &self.netns {
            None => eddy(),
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_eddy")])
                    .env_remove("RUST_LOG")
                    .env_remove("STATE_DIRECTORY");
                c
            }
        };
        c.args(args);
        c
    }

    /// Starts `eddy run`; stderr is appended to the node's log file (a
    /// restart keeps the first life's lines).
    fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        // `ip netns exec` execs eddy: the child's pid is eddy's.
        let child = self
            .command(&["run", self.config.to_str().expect("utf8")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn eddy run");
        self.child = Some(child);
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// SIGKILL, as a crash or a power cut.
    fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }

    fn signal_term(&self) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        assert_eq!(rc, 0, "SIGTERM to {}", self.name);
    }

    /// Waits for the process to exit after a signal.
    fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                self.child = None;
                return st;
            }
            if Instant::now() > deadline {
                panic!(
                    "{} did not exit within {within:?} of SIGTERM; log:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The members this node lists: `eddy peers --api ADDR --json`.
    fn peers(&self) -> Result<Vec<Member>, String> {
        if let Some(child) = &self.child
            && let Ok(Some(_)) = exited_unreaped(child)
        {
            return Err(format!("{} exited; log:\n{}", self.name, self.log()));
        }
        let out = self
            .command(&["peers", "--api", &self.api.to_string(), "--json"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("eddy peers: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "eddy peers --api {} failed: {}",
                self.api,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "eddy peers --json printed {:?}: {e}",
                String::from_utf8_lossy(&out.stdout)
            )
        })?;
        let rows = v["members"]
            .as_array()
            .ok_or_else(|| format!("no `members` in {v}"))?;
        rows.iter().map(Member::from_json).collect()
    }
}

/// Whether the child has exited, without reaping it (a reaped pid could be
/// reused before the guard kills it).
fn exited_unreaped(child: &Child) -> std::io::Result<Option<()>> {
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child with WNOWAIT leaves it unreaped.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            child.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: filled in by waitid; 0 when the child is still running.
    Ok((unsafe { info.si_pid() } != 0).then_some(()))
}

/// One row of `eddy peers --json`.
#[derive(Clone, Debug)]
struct Member {
    name: String,
    addr: String,
    state: String,
    incarnation: u64,
    local: bool,
}

impl Member {
    fn from_json(v: &Value) -> Result<Member, String> {
        let field = |k: &str| v.get(k).ok_or_else(|| format!("member without `{k}`: {v}"));
        for k in ["id", "rtt_ms", "last_seen_ms"] {
            field(k)?;
        }
        Ok(Member {
            name: field("name")?.as_str().unwrap_or_default().to_string(),
            addr: field("addr")?.as_str().unwrap_or_default().to_string(),
            state: field("state")?.as_str().unwrap_or_default().to_string(),
            incarnation: field("incarnation")?
                .as_u64()
                .ok_or_else(|| format!("bad incarnation in {v}"))?,
            local: field("local")?.as_bool().unwrap_or(false),
        })
    }
}

fn show(rows: &[Member]) -> String {
    let r: Vec<String> = rows
        .iter()
        .map(|m| {
            format!(
                "{}@{}:{}#{}{}",
                m.name,
                m.addr,
                m.state,
                m.incarnation,
                if m.local { "(local)" } else { "" }
            )
        })
        .collect();
    r.join(" ")
}

/// The nodes of a test; dropping it SIGKILLs and reaps every process still
/// running (also when an assertion failed).
struct Cluster {
    nodes: Vec<Node>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Cluster {
    fn start_all(&mut self) -> Instant {
        for n in &mut self.nodes {
            n.start();
        }
        Instant::now()
    }

    /// Polls `check` on every running node (or on `observers`) until it
    /// holds for all of them; panics after `within` (counted from `since`)
    /// with what each node listed last and its log. Returns the time it
    /// took from `since`.
    fn wait_all(
        &self,
        what: &str,
        since: Instant,
        within: Duration,
        observers: &[usize],
        check: impl Fn(&Node, &[Member]) -> Result<(), String>,
    ) -> Duration {
        let mut last = vec![String::new(); self.nodes.len()];
        let mut pending: Vec<usize> = observers.to_vec();
        loop {
            pending.retain(|&i| {
                let n = &self.nodes[i];
                match n.peers().and_then(|rows| {
                    check(n, &rows).map_err(|e| format!("{e}; lists {}", show(&rows)))
                }) {
                    Ok(()) => false,
                    Err(e) => {
                        last[i] = e;
                        true
                    }
                }
            });
            let took = since.elapsed();
            if pending.is_empty() {
                eprintln!("{what}: {took:?}");
                return took;
            }
            if took > within {
                let mut msg = format!("{what}: not within {within:?}:\n");
                for &i in &pending {
                    msg.push_str(&format!("  {}: {}\n", self.nodes[i].name, last[i]));
                }
                for n in &self.nodes {
                    msg.push_str(&format!("---- log of {}:\n{}", n.name, n.log()));
                }
                panic!("{msg}");
            }
            std::thread::sleep(POLL);
        }
    }

    fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].child.is_some())
            .collect()
    }

    /// Every node in `members` is listed `alive` at its address by
    /// `observer`, and nothing else is listed.
    fn all_alive(&self, members: &[usize]) -> impl Fn(&Node, &[Member]) -> Result<(), String> {
        let expected: Vec<(String, String)> = members
            .iter()
            .map(|&i| (self.nodes[i].name.clone(), self.nodes[i].mesh.to_string()))
            .collect();
        move |observer, rows| {
            for (name, addr) in &expected {
                let row = rows
                    .iter()
                    .find(|m| &m.addr == addr)
                    .ok_or_else(|| format!("{name} ({addr}) is not listed"))?;
                if row.state != "alive" || &row.name != name {
                    return Err(format!("{name} ({addr}) is {}", row.state));
                }
                if row.local != (*addr == observer.mesh.to_string()) {
                    return Err(format!("{name}: wrong `local`"));
                }
            }
            if rows.len() != expected.len() {
                return Err(format!("{} rows, expected {}", rows.len(), expected.len()));
            }
            Ok(())
        }
    }
}

/// The node at `addr` is listed with `state` (one row at that address).
fn listed_as(
    addr: SocketAddr,
    state: &'static str,
) -> impl Fn(&Node, &[Member]) -> Result<(), String> {
    move |_, rows| has_state(rows, addr, state)
}

fn has_state(rows: &[Member], addr: SocketAddr, state: &str) -> Result<(), String> {
    let addr = addr.to_string();
    let at: Vec<&Member> = rows.iter().filter(|m| m.addr == addr).collect();
    match at.as_slice() {
        [m] if m.state == state => Ok(()),
        [m] => Err(format!("{addr} is {}", m.state)),
        [] => Err(format!("{addr} is not listed")),
        _ => Err(format!("{} rows for {addr}", at.len())),
    }
}

/// Static seeds: node 0 seeds node 1; node i > 0 seeds node 0 and, from
/// node 2 on, node i - 1. So some nodes know only one other at start.
fn seeds_of(i: usize, mesh: &[SocketAddr]) -> Vec<SocketAddr> {
    match i {
        0 => vec![mesh[1]],
        1 => vec![mesh[0]],
        _ => vec![mesh[0], mesh[i - 1]],
    }
}

/// A loopback cluster of `n` nodes on 127.0.0.2.. with static seeds.
fn loopback_cluster(s: &Scratch, n: usize) -> Cluster {
    let names: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (ca, certs) = (s.path("ca"), s.path("certs"));
    make_certs_in(&ca, &certs, &refs);
    let ip = |i: usize| [127, 0, 0, 2 + i as u8];
    let mesh: Vec<SocketAddr> = (0..n).map(|i| free_udp(ip(i))).collect();
    let nodes = (0..n)
        .map(|i| {
            Node::new(
                s,
                NodeSpec {
                    name: &names[i],
                    mesh: mesh[i],
                    api: free_tcp(ip(i)),
                    seeds: Some(seeds_of(i, &mesh)),
                    ca_dir: &ca,
                    cert_dir: &certs,
                    netns: None,
                },
            )
        })
        .collect();
    Cluster { nodes }
}

/// The whole life of a cluster: converge, crash one node, restart it,
/// stop every node with SIGTERM.
fn crash_restart_and_stop(n: usize, victim: usize) {
    let _serial = serial();
    let s = Scratch::new();
    let mut c = loopback_cluster(&s, n);
    let everyone: Vec<usize> = (0..n).collect();
    let started = c.start_all();
    c.wait_all(
        &format!("{n} nodes all alive"),
        started,
        CONVERGE,
        &everyone,
        c.all_alive(&everyone),
    );
    let old_incarnation = c.nodes[victim]
        .peers()
        .expect("victim's peers")
        .iter()
        .find(|m| m.local)
        .expect("the victim lists itself")
        .incarnation;

    // A crash: every other node marks it down within the detection time.
    let victim_addr = c.nodes[victim].mesh;
    c.nodes[victim].kill();
    let killed = Instant::now();
    let others: Vec<usize> = everyone.iter().copied().filter(|&i| i != victim).collect();
    c.wait_all(
        &format!("n{victim} down after SIGKILL"),
        killed,
        detection_time(n - 1),
        &others,
        listed_as(victim_addr, "down"),
    );

    // Restarted with the same config (and data dir): alive again
    // everywhere, as a new incarnation, and it lists everyone alive.
    c.nodes[victim].start();
    let restarted = Instant::now();
    c.wait_all(
        &format!("n{victim} alive again after restart"),
        restarted,
        CONVERGE,
        &everyone,
        |node, rows| {
            c.all_alive(&everyone)(node, rows)?;
            let row = rows
                .iter()
                .find(|m| m.addr == victim_addr.to_string())
                .ok_or("victim not listed")?;
            if row.incarnation <= old_incarnation {
                return Err(format!(
                    "n{victim} has incarnation {}, not above {old_incarnation}",
                    row.incarnation
                ));
            }
            Ok(())
        },
    );

    // SIGTERM leaves the cluster: the others mark the node down from its
    // goodbye, sooner than failure detection could, and it exits 0.
    let leaver = (victim + 1) % n;
    c.nodes[leaver].signal_term();
    let status = c.nodes[leaver].wait_exit(Duration::from_secs(15));
    let exited = Instant::now();
    assert!(
        status.success(),
        "n{leaver} exited with {status} after SIGTERM; log:\n{}",
        c.nodes[leaver].log()
    );
    let leaver_addr = c.nodes[leaver].mesh;
    let rest = c.running();
    c.wait_all(
        &format!("n{leaver} down after SIGTERM"),
        exited,
        LEAVE_SEEN,
        &rest,
        listed_as(leaver_addr, "down"),
    );
    assert!(
        c.nodes[leaver].log().contains("left the mesh"),
        "{}",
        c.nodes[leaver].log()
    );

    // The rest stop together, each exiting 0.
    for &i in &rest {
        c.nodes[i].signal_term();
    }
    for &i in &rest {
        let status = c.nodes[i].wait_exit(Duration::from_secs(15));
        assert!(
            status.success(),
            "n{i} exited with {status} after SIGTERM; log:\n{}",
            c.nodes[i].log()
        );
    }
}

#[test]
fn three_nodes_converge_detect_a_crash_readmit_the_restart_and_stop_cleanly() {
    // The victim is a leaf: nobody has it as a seed, so it must announce
    // itself on restart.
    crash_restart_and_stop(3, 2);
}

#[test]
fn five_nodes_converge_detect_a_crash_readmit_the_restart_and_stop_cleanly() {
    // The victim is everyone's seed and itself seeds only n1.
    crash_restart_and_stop(5, 0);
}

#[test]
fn a_node_with_a_certificate_of_another_ca_is_refused_and_logged() {
    let _serial = serial();
    let s = Scratch::new();
    let mut c = loopback_cluster(&s, 2);
    // Another CA with the same cluster name: only the signature tells the
    // intruder apart.
    let (other_ca, other_certs) = (s.path("other-ca"), s.path("other-certs"));
    make_certs_in(&other_ca, &other_certs, &["intruder"]);
    let seeds = vec![c.nodes[0].mesh, c.nodes[1].mesh];
    let intruder = Node::new(
        &s,
        NodeSpec {
            name: "intruder",
            mesh: free_udp([127, 0, 0, 6]),
            api: free_tcp([127, 0, 0, 6]),
            seeds: Some(seeds),
            ca_dir: &other_ca,
            cert_dir: &other_certs,
            netns: None,
        },
    );
    let intruder_addr = intruder.mesh;
    c.nodes.push(intruder);
    let started = c.start_all();
    let legit = [0, 1];
    // Both legit nodes list each other alive and nothing else.
    c.wait_all(
        "legit nodes alive",
        started,
        CONVERGE,
        &legit,
        c.all_alive(&legit),
    );
    // The intruder announced itself to both at start: each logged the
    // refusal with its address.
    let needle = format!("refused connection from {intruder_addr}");
    let deadline = started + Duration::from_secs(5);
    for &i in &legit {
        while !c.nodes[i].log().contains(&needle) {
            assert!(
                Instant::now() < deadline,
                "no `{needle}` in the log of {}:\n{}\n---- intruder:\n{}",
                c.nodes[i].name,
                c.nodes[i].log(),
                c.nodes[2].log()
            );
            std::thread::sleep(POLL);
        }
        let line = c.nodes[i]
            .log()
            .lines()
            .find(|l| l.contains(&needle))
            .map(str::to_string)
            .unwrap_or_default();
        eprintln!("{}: {line}", c.nodes[i].name);
        // A TLS refusal over the certificate, not a timeout or a crash.
        assert!(
            line.contains("not signed by the CA of cluster `blue`"),
            "{line}"
        );
    }
    // Refused, it is not listed at any state (not even `down`: SWIM never
    // heard of it), and it sees nobody alive.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_millis(1500) {
        for &i in &legit {
            let rows = c.nodes[i].peers().expect("peers");
            assert!(
                rows.iter()
                    .all(|m| m.addr != intruder_addr.to_string() && m.name != "intruder"),
                "{} lists the intruder: {}",
                c.nodes[i].name,
                show(&rows)
            );
        }
        std::thread::sleep(POLL);
    }
    let theirs = c.nodes[2].peers().expect("intruder's peers");
    assert!(
        theirs.iter().all(|m| m.local || m.state != "alive"),
        "the intruder sees members: {}",
        show(&theirs)
    );
}

/// Network namespaces for one test: a `switch` namespace holding a bridge,
/// and one namespace per node whose `eth0` is a veth pair's end, the other
/// end a port of the bridge. Nothing is created in the host's namespace,
/// so the host's interfaces are never touched; addresses are in
/// 10.213.77.0/24, which exists only inside these namespaces. Dropping it
/// deletes every namespace (and with them the veths and the bridge).
struct Netns {
    switch: String,
    nodes: Vec<String>,
}

/// The address of node `i` inside the namespaces.
fn ns_ip(i: usize) -> [u8; 4] {
    [10, 213, 77, 10 + i as u8]
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// `None` (and why on stderr) when this process cannot make network
    /// namespaces: not root, or no `ip netns`.
    fn create(nodes: usize) -> Option<Netns> {
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        if uid != 0 {
            eprintln!("SKIPPED: network namespaces need root (running as uid {uid})");
            return None;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let tag = format!("eddy-mc-{}-{}", std::process::id(), nanos % 100_000);
        let switch = format!("{tag}-sw");
        if let Err(e) = ip(&["netns", "add", &switch]) {
            eprintln!("SKIPPED: cannot create a network namespace ({e})");
            return None;
        }
        let mut ns = Netns {
            switch,
            nodes: Vec::new(),
        };
        let sw = ns.switch.clone();
        let setup = |ns: &mut Netns| -> Result<(), String> {
            // No IGMP snooping: mDNS's 224.0.0.251 reaches every port.
            ip(&[
                "-n",
                &sw,
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "mcast_snooping",
                "0",
            ])?;
            ip(&["-n", &sw, "link", "set", "br0", "up"])?;
            for i in 0..nodes {
                let node = format!("{tag}-n{i}");
                ip(&["netns", "add", &node])?;
                ns.nodes.push(node.clone());
                let port = format!("p{i}");
                ip(&[
                    "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                    "netns", &node,
                ])?;
                ip(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
                ip(&["-n", &sw, "link", "set", &port, "up"])?;
                let [a, b, c, d] = ns_ip(i);
                let cidr = format!("{a}.{b}.{c}.{d}/24");
                ip(&["-n", &node, "addr", "add", &cidr, "dev", "eth0"])?;
                ip(&["-n", &node, "link", "set", "eth0", "up"])?;
                ip(&["-n", &node, "link", "set", "lo", "up"])?;
            }
            Ok(())
        };
        if let Err(e) = setup(&mut ns) {
            panic!("setting up the namespaces failed: {e}");
        }
        Some(ns)
    }

    /// Takes node `i`'s bridge port down (`up = false`) or up: a partition
    /// of that node. (`tc netem loss 100%` would do too, but sch_netem is
    /// not in every kernel, nor in the one these tests were written on; a
    /// veth link going down always works.)
    fn set_port(&self, i: usize, up: bool) {
        let port = format!("p{i}");
        ip(&[
            "-n",
            &self.switch,
            "link",
            "set",
            &port,
            if up { "up" } else { "down" },
        ])
        .expect("set the bridge port");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in self.nodes.iter().chain(std::iter::once(&self.switch)) {
            if let Err(e) = ip(&["netns", "del", n]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// mDNS can be slower than seeds: a node queries when it starts and
/// answers come within a second or so; the driver reads discovery once a
/// second; then the SWIM join as with seeds.
const MDNS_CONVERGE: Duration = Duration::from_secs(8);

/// After a partition heals, the nodes announce to the members they hold
/// down (and the isolated node to the candidates it found) every
/// `rejoin_interval`, fixed at 5 s in eddy: up to 5 s, plus a QUIC
/// handshake if the partition outlived the connections, plus two probe
/// periods of gossip and the slack of `detection_time`.
const HEAL: Duration = Duration::from_millis(5000 + 1000 + 600 + 700);

#[test]
fn in_network_namespaces_mdns_finds_the_peers_and_a_partition_is_detected_and_heals() {
    let _serial = serial();
    let n = 3;
    // Declared before the nodes: dropped after them, once the processes
    // are gone.
    let Some(netns) = Netns::create(n) else {
        return;
    };
    let s = Scratch::new();
    let names: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (ca, certs) = (s.path("ca"), s.path("certs"));
    make_certs_in(&ca, &certs, &refs);
    let mut c = Cluster {
        nodes: (0..n)
            .map(|i| {
                Node::new(
                    &s,
                    NodeSpec {
                        name: &names[i],
                        // Each namespace is its own network stack: fixed
                        // ports clash with nothing.
                        mesh: SocketAddr::from((ns_ip(i), 7500)),
                        api: SocketAddr::from(([127, 0, 0, 1], 7501)),
                        seeds: None,
                        ca_dir: &ca,
                        cert_dir: &certs,
                        netns: Some(netns.nodes[i].clone()),
                    },
                )
            })
            .collect(),
    };
    let everyone: Vec<usize> = (0..n).collect();
    let started = c.start_all();
    // (a) mDNS alone: nobody was told any address. Multicast crosses the
    // bridge (snooping off), each node registers its `eth0` address, and
    // the mDNS of one namespace cannot hear another test's.
    c.wait_all(
        "all alive by mDNS across namespaces",
        started,
        MDNS_CONVERGE,
        &everyone,
        c.all_alive(&everyone),
    );

    // (b) n2's link goes down: each side marks the other down.
    let cut = 2;
    netns.set_port(cut, false);
    let partitioned = Instant::now();
    let cut_addr = c.nodes[cut].mesh;
    c.wait_all(
        "the cut node down on the others",
        partitioned,
        detection_time(n - 1),
        &[0, 1],
        listed_as(cut_addr, "down"),
    );
    let (a0, a1) = (c.nodes[0].mesh, c.nodes[1].mesh);
    c.wait_all(
        "the others down on the cut node",
        partitioned,
        detection_time(n - 1),
        &[cut],
        move |_, rows| {
            has_state(rows, a0, "down")?;
            has_state(rows, a1, "down")
        },
    );
    netns.set_port(cut, true);
    let healed = Instant::now();
    c.wait_all(
        "all alive again after the partition heals",
        healed,
        HEAL,
        &everyone,
        c.all_alive(&everyone),
    );
    for i in everyone {
        c.nodes[i].signal_term();
        let status = c.nodes[i].wait_exit(Duration::from_secs(15));
        assert!(status.success(), "n{i}: {status}");
    }
}
