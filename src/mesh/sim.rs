//! Deterministic simulation of SWIM membership, in the manner of
//! TigerBeetle's VOPR: one seed derives every fault option (loss,
//! duplication, delay and so reordering, which node crashes, the partition),
//! a virtual clock jumps to the next packet or timer, and a failure prints
//! the seed and options with how to replay it (`EDDY_SIM_SEED=N`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::membership::{MemberId, MemberState, Membership, MembershipConfig};

/// Everything a run depends on, derived from its seed.
#[derive(Clone, Debug)]
struct Options {
    seed: u64,
    nodes: usize,
    drop_per_mille: u32,
    duplicate_per_mille: u32,
    delay_min_ms: u64,
    delay_max_ms: u64,
    /// The node that is killed and restarted.
    crash: usize,
    /// Nodes on the minority side of the partition.
    minority: Vec<usize>,
    /// Node whose payload is checked everywhere.
    payload_node: usize,
}

impl Options {
    fn from_seed(seed: u64) -> Options {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = 5;
        let delay_min_ms = rng.random_range(0..5);
        let mut all: Vec<usize> = (0..nodes).collect();
        let mut minority = Vec::new();
        for _ in 0..rng.random_range(1..=2) {
            let i = rng.random_range(0..all.len());
            minority.push(all.swap_remove(i));
        }
        minority.sort_unstable();
        Options {
            seed,
            nodes,
            drop_per_mille: rng.random_range(0..80),
            duplicate_per_mille: rng.random_range(0..30),
            delay_min_ms,
            delay_max_ms: delay_min_ms + rng.random_range(1..80),
            crash: rng.random_range(0..nodes),
            minority,
            payload_node: rng.random_range(0..nodes),
        }
    }
}

/// Prints how to replay a failed run.
struct ReplayOnPanic(Options);

impl Drop for ReplayOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "membership simulation failed with {:?}\nreplay: EDDY_SIM_SEED={} cargo test --lib mesh::sim",
                self.0, self.0.seed
            );
        }
    }
}

struct Sim {
    opts: Options,
    rng: StdRng,
    t0: Instant,
    now: Instant,
    addrs: Vec<SocketAddr>,
    nodes: Vec<Option<Membership>>,
    /// Packets in flight: (arrival, order) -> (destination, source, bytes).
    net: BTreeMap<(Instant, u64), (usize, SocketAddr, Vec<u8>)>,
    seq: u64,
    /// Side of each node while partitioned.
    partition: Option<Vec<bool>>,
}

fn config() -> MembershipConfig {
    MembershipConfig {
        probe_period: Duration::from_secs(1),
        suspect_timeout: Duration::from_secs(3),
        cluster_size_hint: 5,
        rejoin_interval: Duration::from_secs(5),
        payload_refresh: Duration::from_secs(10),
        max_payload_bytes: 256,
        max_packet_bytes: 1024,
    }
}

impl Sim {
    fn new(opts: Options) -> Sim {
        let t0 = Instant::now();
        // Loopback addresses as in the real tests; nothing is sent anywhere.
        let addrs = (0..opts.nodes)
            .map(|i| SocketAddr::from(([127, 0, 0, 10 + i as u8], 7400)))
            .collect();
        let mut sim = Sim {
            rng: StdRng::seed_from_u64(opts.seed ^ 0x51f1_5eed),
            t0,
            now: t0,
            addrs,
            nodes: (0..opts.nodes).map(|_| None).collect(),
            net: BTreeMap::new(),
            seq: 0,
            partition: None,
            opts,
        };
        for i in 0..sim.opts.nodes {
            sim.start(i, 1_000 + i as u64);
        }
        sim
    }

    fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// Starts (or restarts) node `i` with `incarnation`; its seeds are nodes
    /// 0 and 1, as a static seed list would give.
    fn start(&mut self, i: usize, incarnation: u64) {
        let id = MemberId {
            addr: self.addrs[i],
            name: format!("n{i}"),
            incarnation,
        };
        let mut m = Membership::new(
            id,
            config(),
            self.opts.seed ^ (i as u64) ^ incarnation,
            self.now,
        );
        for s in [0, 1] {
            m.handle_discovered(self.now, self.addrs[s]);
        }
        self.nodes[i] = Some(m);
        self.flush();
    }

    fn crash(&mut self, i: usize) {
        self.nodes[i] = None;
    }

    fn send(&mut self, src: usize, dst_addr: SocketAddr, bytes: Vec<u8>) {
        let Some(dst) = self.addrs.iter().position(|a| *a == dst_addr) else {
            return;
        };
        if let Some(side) = &self.partition
            && side[src] != side[dst]
        {
            return;
        }
        if self.rng.random_range(0..1000) < self.opts.drop_per_mille {
            return;
        }
        let copies = if self.rng.random_range(0..1000) < self.opts.duplicate_per_mille {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self
                .rng
                .random_range(self.opts.delay_min_ms..=self.opts.delay_max_ms);
            self.seq += 1;
            self.net.insert(
                (self.now + Duration::from_millis(delay), self.seq),
                (dst, self.addrs[src], bytes.clone()),
            );
        }
    }

    /// Moves every node's outputs into the network, in node order.
    fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            let mut out = Vec::new();
            if let Some(m) = self.nodes[i].as_mut() {
                while let Some(t) = m.poll_transmit() {
                    out.push(t);
                }
                while m.poll_event().is_some() {}
            }
            for t in out {
                self.send(i, t.dst, t.bytes);
            }
        }
    }

    /// One step of virtual time: to the next packet or timer.
    fn step(&mut self, limit: Instant) {
        let next_packet = self.net.keys().next().map(|k| k.0);
        let next_timer = self
            .nodes
            .iter()
            .flatten()
            .filter_map(Membership::poll_timeout)
            .min();
        let next = [next_packet, next_timer]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(limit);
        self.now = self.now.max(next.min(limit));
        while let Some(entry) = self.net.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (dst, src, bytes) = entry.remove();
            let now = self.now;
            if let Some(m) = self.nodes[dst].as_mut() {
                // Errors (stale or from a dead identity) change nothing.
                let _ = m.handle_datagram(now, src, &bytes);
            }
        }
        let now = self.now;
        for m in self.nodes.iter_mut().flatten() {
            m.handle_timeout(now);
        }
        self.flush();
    }

    /// Runs until `done` holds or `within` passes; returns how long it took.
    fn run_until(&mut self, within: Duration, done: impl Fn(&Sim) -> bool) -> Option<Duration> {
        let start = self.now;
        let limit = start + within;
        while self.now < limit {
            self.step(limit);
            if done(self) {
                return Some(self.now - start);
            }
        }
        None
    }

    fn state_seen(&self, observer: usize, target: usize) -> Option<(MemberState, MemberId)> {
        let m = self.nodes[observer].as_ref()?;
        m.members()
            .into_iter()
            .find(|r| r.id.addr == self.addrs[target])
            .map(|r| (r.state, r.id))
    }

    /// Every live node sees every other live node alive, with its current
    /// identity.
    fn all_alive(&self) -> bool {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|i| self.nodes[*i].is_some())
            .collect();
        live.iter().all(|&i| {
            live.iter().all(|&j| {
                let current = self.nodes[j].as_ref().map(|m| m.identity().clone());
                matches!(self.state_seen(i, j), Some((MemberState::Alive, id)) if Some(&id) == current.as_ref())
            })
        })
    }

    fn all_see_down(&self, observers: &[usize], target: usize) -> bool {
        observers
            .iter()
            .all(|&i| matches!(self.state_seen(i, target), Some((MemberState::Down, _))))
    }
}

fn run(seed: u64) -> String {
    let opts = Options::from_seed(seed);
    let _guard = ReplayOnPanic(opts.clone());
    let mut sim = Sim::new(opts.clone());
    let n = opts.nodes;
    let mut report = format!("seed {seed}:");

    // 1. Convergence, with faults on from the start.
    let t = sim
        .run_until(Duration::from_secs(20), Sim::all_alive)
        .expect("5 nodes converge to all alive within 20 s");
    report += &format!(" converged {:.1}s", t.as_secs_f64());
    // A payload now; its newer version is published after the restart
    // (a restarted node starts without one).
    let p = opts.payload_node;
    let publish = |sim: &mut Sim, v: &[u8]| {
        let now = sim.now;
        sim.nodes[p]
            .as_mut()
            .expect("live")
            .set_payload(now, v.to_vec())
            .expect("small payload");
    };
    publish(&mut sim, b"v1");

    // 2. A crash is detected by every other node.
    let c = opts.crash;
    let old = sim.nodes[c].as_ref().expect("live").identity().clone();
    sim.crash(c);
    let others: Vec<usize> = (0..n).filter(|&i| i != c).collect();
    let t = sim
        .run_until(Duration::from_secs(20), |s| s.all_see_down(&others, c))
        .expect("a crashed node is declared down within 20 s");
    report += &format!(", crash detected {:.1}s", t.as_secs_f64());

    // 3. The restarted node rejoins with a higher incarnation.
    let new_incarnation = old.incarnation + sim.elapsed().as_millis() as u64;
    sim.start(c, new_incarnation);
    let t = sim
        .run_until(Duration::from_secs(30), |s| {
            s.all_alive()
                && others.iter().all(|&i| {
                    matches!(s.state_seen(i, c), Some((MemberState::Alive, id)) if id.incarnation > old.incarnation)
                })
        })
        .expect("a restarted node rejoins within 30 s");
    report += &format!(", rejoined {:.1}s", t.as_secs_f64());

    publish(&mut sim, b"v2");

    // 4. A partition is detected on both sides, then heals.
    let side: Vec<bool> = (0..n).map(|i| opts.minority.contains(&i)).collect();
    sim.partition = Some(side.clone());
    let (a, b): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| side[i]);
    let t = sim
        .run_until(Duration::from_secs(30), |s| {
            b.iter().all(|&j| s.all_see_down(&a, j)) && a.iter().all(|&j| s.all_see_down(&b, j))
        })
        .unwrap_or_else(|| {
            let view: Vec<Vec<Option<MemberState>>> = (0..n)
                .map(|i| (0..n).map(|j| sim.state_seen(i, j).map(|s| s.0)).collect())
                .collect();
            let states: Vec<String> = sim
                .nodes
                .iter()
                .flatten()
                .map(|m| m.debug_state(sim.now))
                .collect();
            panic!(
                "each side of a partition declares the other down within 30 s; views: {view:?}\n{}",
                states.join("\n")
            )
        });
    report += &format!(", partition detected {:.1}s", t.as_secs_f64());
    sim.partition = None;
    let t = sim
        .run_until(Duration::from_secs(120), Sim::all_alive)
        .expect("a healed partition converges to all alive within 120 s");
    report += &format!(", healed {:.1}s", t.as_secs_f64());

    // 5. Every node, the restarted one included, has the newest payload.
    let t = sim
        .run_until(Duration::from_secs(30), |s| {
            (0..n).all(|i| {
                let rows = s.nodes[i]
                    .as_ref()
                    .map(Membership::members)
                    .unwrap_or_default();
                rows.iter().any(|r| {
                    r.id.addr == s.addrs[p] && r.payload.as_ref().is_some_and(|pl| pl.1 == b"v2")
                })
            })
        })
        .expect("the newest payload reaches every node");
    report += &format!(", payload everywhere {:.1}s", t.as_secs_f64());
    report
}

#[test]
fn membership_survives_faults_crashes_and_partitions() {
    let seeds: Vec<u64> = match std::env::var("EDDY_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("EDDY_SIM_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("EDDY_SIM_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(12);
            (0..n).map(|i| 0xedd1_0000 + i).collect()
        }
    };
    for seed in seeds {
        let report = run(seed);
        eprintln!("{report}");
    }
}

#[test]
fn same_seed_same_run() {
    // Determinism is what makes a failing seed worth printing.
    let trace = |seed| {
        let mut sim = Sim::new(Options::from_seed(seed));
        sim.run_until(Duration::from_secs(5), |_| false);
        (
            sim.seq,
            sim.nodes
                .iter()
                .flatten()
                .map(|m| m.members().len())
                .sum::<usize>(),
        )
    };
    assert_eq!(trace(42), trace(42));
}

#[test]
fn a_node_that_leaves_tells_every_member_at_once() {
    // Seven nodes: more members than foca's gossip fan-out, on a network
    // that neither loses nor duplicates, with 1 ms delay.
    let mut opts = Options::from_seed(7);
    opts.nodes = 7;
    opts.drop_per_mille = 0;
    opts.duplicate_per_mille = 0;
    opts.delay_min_ms = 1;
    opts.delay_max_ms = 2;
    let mut sim = Sim::new(opts);
    sim.run_until(Duration::from_secs(60), Sim::all_alive)
        .expect("seven nodes converge");
    let now = sim.now;
    sim.nodes[0].as_mut().unwrap().leave(now);

    sim.flush();
    sim.nodes[0] = None;
    // Well under one probe period (1 s): only the leave message itself
    // can have told them; gossip riding on probes would need periods.
    let others: Vec<usize> = (1..7).collect();
    let took = sim.run_until(Duration::from_millis(50), |s| s.all_see_down(&others, 0));
    assert!(
        took.is_some(),
        "not every member heard the leave directly: {:?}",
        others
            .iter()
            .map(|&i| sim.state_seen(i, 0).map(|s| s.0))
            .collect::<Vec<_>>()
    );
}
