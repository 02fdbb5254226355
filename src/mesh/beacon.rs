//! `discovery = ["mdns"]`: a small LAN multicast beacon on std/socket2 UDP
//! sockets, on its own thread (no tokio, no DNS). Every node sends a
//! postcard-encoded [`Beacon`] (cluster name, node name, mesh address) to
//! [`GROUP`]:[`PORT`] on each IPv4 interface, at start, every
//! [`ANNOUNCE_EVERY`] and at once when it hears a node it had not heard
//! recently, so a newcomer learns the others within a round trip. It
//! replaced mdns-sd, which cost about 0.2 MB of binary for the same job.
//! Discovery only proposes addresses; the TLS handshake decides whom to
//! trust, so a forged beacon costs a failed handshake, nothing more.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};

use super::discovery::Discovery;

/// The mDNS group: link-local (never routed), and switches with IGMP
/// snooping flood 224.0.0.0/24 to every port, so it reaches the LAN where
/// a 239.x group might not. The port is eddy's own, so mDNS responders
/// listening on 5353 never see these datagrams.
pub const GROUP: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 251);
/// The beacon's UDP port (the mesh's QUIC port 7400 is taken by quinn).
pub const PORT: u16 = 7399;
/// How often a node announces itself without being asked.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(5);
/// A node not heard for this long counts as new when heard again (it may
/// have restarted or come back from a partition): it gets an answer at once.
const FORGET_AFTER: Duration = Duration::from_secs(16);
/// How long the thread blocks in `recv`: bounds how late it sees `stop`.
const TICK: Duration = Duration::from_millis(200);
/// Tells eddy beacons from anything else sent to the port; the last byte is
/// the format version.
const MAGIC: [u8; 4] = *b"edb\x01";

/// What a node announces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Beacon {
    magic: [u8; 4],
    cluster: String,
    node: String,
    /// The mesh (QUIC) address; an unspecified IP means "the address this
    /// datagram came from".
    mesh: SocketAddr,
}

/// A running beacon: the thread stops when this is dropped.
pub struct BeaconDiscovery {
    found: mpsc::Receiver<SocketAddr>,
    stop: Arc<AtomicBool>,
}

impl BeaconDiscovery {
    /// Starts the beacon thread. `interfaces`: if given, only the IPv4
    /// addresses of these interface names are used (tests restrict it to
    /// `lo` or their namespace's links); else every IPv4 interface, looked
    /// up again at each announcement so addresses that appear later are
    /// joined. `advertise` is the QUIC address peers should use; with an
    /// unspecified IP peers use the address the beacon came from.
    pub fn start(
        cluster: &str,
        node_name: &str,
        advertise: SocketAddr,
        interfaces: Option<&[String]>,
    ) -> Result<BeaconDiscovery, String> {
        let socket = bind().map_err(|e| format!("multicast beacon on port {PORT}: {e}"))?;
        let beacon = Beacon {
            magic: MAGIC,
            cluster: cluster.to_string(),
            node: node_name.to_string(),
            mesh: advertise,
        };
        let message = postcard::to_stdvec(&beacon).map_err(|e| format!("beacon: {e}"))?;
        let (tx, found) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut state = Beaconing {
            socket,
            me: beacon,
            message,
            interfaces: interfaces.map(<[String]>::to_vec),
            joined: Vec::new(),
            heard: HashMap::new(),
            found: tx,
            stop: stop.clone(),
        };
        std::thread::Builder::new()
            .name("eddy-beacon".into())
            .spawn(move || state.run())
            .map_err(|e| format!("beacon thread: {e}"))?;
        Ok(BeaconDiscovery { found, stop })
    }
}

impl Discovery for BeaconDiscovery {
    fn poll_candidates(&mut self, _now: Instant) -> Vec<SocketAddr> {
        // Bounded by what the thread queued; never waits.
        self.found.try_iter().collect()
    }
}

impl Drop for BeaconDiscovery {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One socket on `0.0.0.0:PORT` for all interfaces; address reuse lets
/// several nodes on one host (tests, or a node and `eddy` tools) share it,
/// and multicast reaches each of them.
fn bind() -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, PORT).into())?;
    // Nodes on the same host hear each other; one hop only.
    s.set_multicast_loop_v4(true)?;
    s.set_multicast_ttl_v4(1)?;
    s.set_read_timeout(Some(TICK))?;
    Ok(s.into())
}

struct Beaconing {
    socket: UdpSocket,
    me: Beacon,
    message: Vec<u8>,
    interfaces: Option<Vec<String>>,
    /// Interface addresses the group is joined on (and announced from).
    joined: Vec<Ipv4Addr>,
    /// When each (node, mesh address) was last heard.
    heard: HashMap<(String, SocketAddr), Instant>,
    found: mpsc::Sender<SocketAddr>,
    stop: Arc<AtomicBool>,
}

impl Beaconing {
    fn run(&mut self) {
        let mut next_announce = Instant::now();
        let mut buf = [0u8; 1500];
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next_announce {
                self.join_interfaces();
                self.announce();
                self.heard
                    .retain(|_, at| now.duration_since(*at) < FORGET_AFTER);
                next_announce = now + ANNOUNCE_EVERY;
            }
            match self.socket.recv_from(&mut buf) {
                Ok((n, from)) => {
                    if self.hear(&buf[..n], from.ip()) {
                        // Someone new: tell them about us now rather than at
                        // our next round.
                        self.announce();
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => {
                    tracing::warn!("multicast beacon: receive on port {PORT}: {e}");
                    std::thread::sleep(TICK);
                }
            }
        }
    }

    /// The IPv4 addresses of the chosen interfaces (all when none were
    /// named).
    fn addresses(&self) -> Vec<Ipv4Addr> {
        let ifaces = match if_addrs::get_if_addrs() {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!("multicast beacon: cannot list interfaces: {e}");
                return Vec::new();
            }
        };
        ifaces
            .iter()
            .filter(|i| match &self.interfaces {
                Some(names) => names.contains(&i.name),
                // Peers on this host hear us on the LAN interfaces too;
                // loopback would only add a second address for each node.
                None => !i.is_loopback(),
            })
            .filter_map(|i| match i.ip() {
                IpAddr::V4(a) => Some(a),
                IpAddr::V6(_) => None,
            })
            .collect()
    }

    /// Joins the group on addresses not joined yet (they may appear after
    /// start, e.g. from DHCP).
    fn join_interfaces(&mut self) {
        for a in self.addresses() {
            if self.joined.contains(&a) {
                continue;
            }
            match self.socket.join_multicast_v4(&GROUP, &a) {
                Ok(()) => self.joined.push(a),
                Err(e) => tracing::warn!("multicast beacon: join {GROUP} on {a}: {e}"),
            }
        }
    }

    /// Sends the beacon out of every joined interface.
    fn announce(&self) {
        let sock = socket2::SockRef::from(&self.socket);
        for a in &self.joined {
            let sent = sock
                .set_multicast_if_v4(a)
                .and_then(|()| self.socket.send_to(&self.message, (GROUP, PORT)));
            if let Err(e) = sent {
                // An address that went away: expected, and retried next round.
                tracing::debug!("multicast beacon: send from {a}: {e}");
            }
        }
    }

    /// Handles one datagram; true if it named a node of our cluster not
    /// heard recently. Anything that is not a beacon is ignored.
    fn hear(&mut self, datagram: &[u8], from: IpAddr) -> bool {
        let Ok(b) = postcard::from_bytes::<Beacon>(datagram) else {
            return false;
        };
        if b.magic != MAGIC || b.cluster != self.me.cluster || b.node == self.me.node {
            return false;
        }
        let mesh = if b.mesh.ip().is_unspecified() {
            SocketAddr::new(from, b.mesh.port())
        } else {
            b.mesh
        };
        let new = self.heard.insert((b.node, mesh), Instant::now()).is_none();
        if new {
            // The driver may be gone (shutting down): nothing to do then.
            let _ = self.found.send(mesh);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(cluster: &str, node: &str) -> (Beaconing, mpsc::Receiver<SocketAddr>) {
        let (tx, rx) = mpsc::channel();
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let me = Beacon {
            magic: MAGIC,
            cluster: cluster.into(),
            node: node.into(),
            mesh: "127.0.0.1:7400".parse().expect("addr"),
        };
        let s = Beaconing {
            socket,
            message: Vec::new(),
            me,
            interfaces: None,
            joined: Vec::new(),
            heard: HashMap::new(),
            found: tx,
            stop: Arc::new(AtomicBool::new(false)),
        };
        (s, rx)
    }

    fn encode(cluster: &str, node: &str, mesh: &str) -> Vec<u8> {
        postcard::to_stdvec(&Beacon {
            magic: MAGIC,
            cluster: cluster.into(),
            node: node.into(),
            mesh: mesh.parse().expect("addr"),
        })
        .expect("encode")
    }

    #[test]
    fn hears_its_cluster_once_and_fills_in_an_unspecified_address() {
        let (mut s, rx) = state("c", "a");
        let from: IpAddr = "10.0.0.7".parse().expect("ip");
        assert!(s.hear(&encode("c", "b", "10.0.0.2:7400"), from));
        // Heard recently: proposed once, no answer again.
        assert!(!s.hear(&encode("c", "b", "10.0.0.2:7400"), from));
        assert!(s.hear(&encode("c", "d", "0.0.0.0:7411"), from));
        // Another cluster, itself, garbage, another format version.
        assert!(!s.hear(&encode("other", "x", "10.0.0.3:7400"), from));
        assert!(!s.hear(&encode("c", "a", "10.0.0.4:7400"), from));
        assert!(!s.hear(b"\x00\x01garbage", from));
        let mut old = encode("c", "e", "10.0.0.5:7400");
        old[3] = 0;
        assert!(!s.hear(&old, from));
        let got: Vec<SocketAddr> = rx.try_iter().collect();
        let want: Vec<SocketAddr> = vec![
            "10.0.0.2:7400".parse().expect("addr"),
            "10.0.0.7:7411".parse().expect("addr"),
        ];
        assert_eq!(got, want);
    }
}
