//! LAN discovery (the multicast beacon) restricted to the loopback
//! interface: two nodes of one cluster find each other's QUIC address; a
//! node of another cluster is ignored. Nothing leaves `lo`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use eddy::daemon::cluster::mesh::{BeaconDiscovery, Discovery};

#[test]
fn multicast_beacon_on_loopback_finds_nodes_of_the_same_cluster_only() {
    // A cluster name of this run only, so other runs on the machine do not
    // interfere.
    let cluster = format!("t{}", std::process::id());
    let lo = vec!["lo".to_string()];
    let a_addr: SocketAddr = "127.0.0.21:7401".parse().expect("addr");
    let b_addr: SocketAddr = "127.0.0.22:7402".parse().expect("addr");
    let x_addr: SocketAddr = "127.0.0.23:7403".parse().expect("addr");
    let mut a = BeaconDiscovery::start(&cluster, "node-a", a_addr, Some(&lo)).expect("beacon a");
    let mut b = BeaconDiscovery::start(&cluster, "node-b", b_addr, Some(&lo)).expect("beacon b");
    let _x = BeaconDiscovery::start(&format!("{cluster}x"), "node-x", x_addr, Some(&lo))
        .expect("beacon x");
    let (mut seen_a, mut seen_b) = (BTreeSet::new(), BTreeSet::new());
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !(seen_a.contains(&b_addr) && seen_b.contains(&a_addr)) {
        seen_a.extend(a.poll_candidates(Instant::now()));
        seen_b.extend(b.poll_candidates(Instant::now()));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(seen_a.contains(&b_addr), "a found {seen_a:?}");
    assert!(seen_b.contains(&a_addr), "b found {seen_b:?}");
    std::thread::sleep(Duration::from_millis(500));
    seen_a.extend(a.poll_candidates(Instant::now()));
    assert!(
        !seen_a.contains(&x_addr),
        "another cluster's node was proposed: {seen_a:?}"
    );
    assert!(!seen_a.contains(&a_addr), "a proposed itself");
}
