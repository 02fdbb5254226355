//! SWIM membership over real QUIC datagrams between mesh nodes on distinct
//! 127.0.0.x addresses with static seeds: they converge to all alive with
//! each other's payloads; a node that vanishes is declared down; restarted
//! at the same address, it rejoins with a higher incarnation.

mod mesh_common;
#[path = "common/ports.rs"]
mod ports;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use eddy::daemon::cluster::mesh::{
    MemberState, MembershipConfig, MeshNode, NodeIdentity, NodeOptions, StaticSeeds, unix_millis,
};
use mesh_common::*;

fn options(listen: SocketAddr, incarnation: u64) -> NodeOptions {
    let mut o = NodeOptions::new(listen);
    o.endpoint.incarnation = incarnation;
    o.membership = MembershipConfig {
        probe_period: Duration::from_millis(300),
        suspect_timeout: Duration::from_secs(1),
        rejoin_interval: Duration::from_millis(500),
        payload_refresh: Duration::from_secs(2),
        cluster_size_hint: 3,
        ..MembershipConfig::default()
    };
    o.discovery_interval = Duration::from_millis(200);
    o
}

/// Starts a node at `addr`; retries while a previous node's socket there is
/// still being released.
fn start(
    identity: &NodeIdentity,
    addr: SocketAddr,
    seeds: &[SocketAddr],
    incarnation: u64,
) -> MeshNode {
    let seeds: Vec<String> = seeds.iter().map(ToString::to_string).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let discovery = Box::new(StaticSeeds::new(
            seeds.clone(),
            Some(addr),
            Duration::from_millis(500),
        ));
        match MeshNode::start(identity, options(addr, incarnation), discovery) {
            Ok(n) => return n,
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying start at {addr}: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("cannot start a node at {addr}: {e}"),
        }
    }
}

fn free_port(ip: [u8; 4]) -> SocketAddr {
    ports::free_on(ip)
}

fn wait(what: &str, within: Duration, ok: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < within {
        if ok() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("{what}: not within {within:?}");
}

fn sees(observer: &MeshNode, addr: SocketAddr, state: MemberState) -> bool {
    observer
        .members()
        .iter()
        .any(|m| m.id.addr == addr && m.state == state)
}

#[test]
fn nodes_converge_detect_a_dead_node_and_see_it_rejoin() {
    logs();
    let ca = TestCa::new("blue");
    let ids: Vec<NodeIdentity> = (0..3).map(|i| ca.identity(&format!("node-{i}"))).collect();
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|i| free_port([127, 0, 0, 11 + i as u8]))
        .collect();
    // Every node gets the same seed list (its own address is skipped).
    let seeds = [addrs[0], addrs[1]];
    let base = unix_millis();
    let mut nodes: Vec<Option<MeshNode>> = (0..3)
        .map(|i| Some(start(&ids[i], addrs[i], &seeds, base + i as u64)))
        .collect();

    let all_alive = |nodes: &[Option<MeshNode>]| {
        nodes
            .iter()
            .flatten()
            .all(|n| addrs.iter().all(|a| sees(n, *a, MemberState::Alive)))
    };
    let t = wait(
        "3 nodes see each other alive",
        Duration::from_secs(3),
        || all_alive(&nodes),
    );
    eprintln!("converged in {t:?}");

    // Payloads travel with the gossip.
    nodes[1]
        .as_ref()
        .expect("live")
        .set_payload(b"metrics v1".to_vec());
    wait(
        "the payload reaches every node",
        Duration::from_secs(5),
        || {
            nodes.iter().flatten().all(|n| {
                n.members().iter().any(|m| {
                    m.id.addr == addrs[1]
                        && m.payload.as_ref().is_some_and(|p| p.1 == b"metrics v1")
                })
            })
        },
    );
    // RTTs are measured on the QUIC connections.
    wait("an RTT is known", Duration::from_secs(3), || {
        nodes[0]
            .as_ref()
            .expect("live")
            .members()
            .iter()
            .any(|m| m.rtt.is_some())
    });

    // Node 2 vanishes (no goodbye): the others declare it down.
    nodes[2] = None;
    let t = wait(
        "the vanished node is declared down",
        Duration::from_secs(10),
        || {
            nodes[..2]
                .iter()
                .flatten()
                .all(|n| sees(n, addrs[2], MemberState::Down))
        },
    );
    eprintln!("declared down after {t:?}");

    // Restarted at the same address, it rejoins with a higher incarnation.
    let restarted = unix_millis().max(base + 100);
    nodes[2] = Some(start(&ids[2], addrs[2], &seeds, restarted));
    let t = wait(
        "the restarted node rejoins",
        Duration::from_secs(10),
        || {
            all_alive(&nodes)
                && nodes[..2].iter().flatten().all(|n| {
                    n.members().iter().any(|m| {
                        m.id.addr == addrs[2]
                            && m.state == MemberState::Alive
                            && m.id.incarnation >= restarted
                    })
                })
        },
    );
    eprintln!("rejoined after {t:?}");
    let m = nodes[0]
        .as_ref()
        .expect("live")
        .endpoint()
        .metrics()
        .snapshot();
    assert_eq!(m.malformed_frames, 0, "{m:?}");
}

#[test]
fn nodes_start_from_mesh_config_with_static_seeds() {
    use eddy::daemon::cluster::mesh::{DiscoveryKind, MeshConfig};
    logs();
    let dir = tempfile::tempdir().expect("tmp");
    let ca_dir = dir.path().join("ca");
    eddy::daemon::cluster::mesh::init_ca_dir(&ca_dir, "blue", 30, false).expect("ca");
    let addrs: Vec<SocketAddr> = (0..2)
        .map(|i| free_port([127, 0, 0, 31 + i as u8]))
        .collect();
    let nodes: Vec<MeshNode> = (0..2)
        .map(|i| {
            let name = format!("node-{i}");
            eddy::daemon::cluster::mesh::issue_to_dir(&ca_dir, dir.path(), &name, 30, false)
                .expect("issue");
            let mut c = MeshConfig::new(
                ca_dir.join("ca.crt"),
                dir.path().join(format!("{name}.crt")),
                dir.path().join(format!("{name}.key")),
            );
            c.listen = addrs[i];
            c.discovery = vec![DiscoveryKind::Static];
            c.seeds = addrs.iter().map(ToString::to_string).collect();
            c.cluster = Some("blue".into());
            assert!(c.check().is_empty(), "{:?}", c.check());
            // The `[node] name` must be the certificate's.
            let e = MeshNode::start_from_config(&c, Some("someone-else"))
                .err()
                .expect("refused");
            assert!(e.to_string().contains("is issued to `node-"), "{e}");
            MeshNode::start_from_config(&c, Some(&name)).expect("start")
        })
        .collect();
    let t = wait(
        "2 nodes from config see each other",
        Duration::from_secs(5),
        || {
            nodes
                .iter()
                .all(|n| addrs.iter().all(|a| sees(n, *a, MemberState::Alive)))
        },
    );
    eprintln!("converged in {t:?}");
}
