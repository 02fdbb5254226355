//! The driver of one mesh node: it owns the QUIC endpoint, runs the
//! membership machine on real time, moves SWIM packets as QUIC datagrams
//! over the authenticated connections (so only cluster members can speak
//! SWIM), feeds discovered addresses in, and publishes the member table.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::beacon::BeaconDiscovery;
use super::config::{DiscoveryKind, MeshConfig};
use super::discovery::{Combined, Discovery, StaticSeeds};
use super::endpoint::{EndpointOptions, MeshEndpoint, MeshError, Peer};
use super::frame::StreamKind;
use super::identity::NodeIdentity;
use super::membership::{MemberId, MemberInfo, Membership, MembershipConfig, MembershipEvent};
use super::metrics::MeshMetrics;
use super::streams::FrameReceiver;

/// Inputs queued for the driver loop; bounded, datagrams beyond it are
/// dropped (SWIM tolerates loss), connection events wait.
const EVENT_QUEUE: usize = 1024;
/// Packets kept per address while its connection is being set up.
const PENDING_PER_PEER: usize = 8;
/// Streams opened by peers and not yet taken by [`MeshNode::incoming`];
/// beyond it, stream acceptors wait (and QUIC's stream limit holds the
/// peers back).
const INCOMING_STREAMS: usize = 256;
/// Profiling streams (`StreamKind::Profile`) not yet taken; beyond it a
/// new one is dropped (its asker hears nothing and gives up).
const PROFILE_STREAMS: usize = 16;

/// A stream a peer opened, with what its `Open` frame said it carries.
pub struct IncomingStream {
    pub kind: StreamKind,
    pub receiver: FrameReceiver,
}

/// Settings of a mesh node.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub listen: SocketAddr,
    /// The address members use for this node; required when `listen` is a
    /// wildcard.
    pub advertise: Option<SocketAddr>,
    pub endpoint: EndpointOptions,
    pub membership: MembershipConfig,
    /// How often discovery is asked for candidates.
    pub discovery_interval: Duration,
    /// Seed of the membership machine's random choices.
    pub seed: u64,
}

impl NodeOptions {
    pub fn new(listen: SocketAddr) -> NodeOptions {
        NodeOptions {
            listen,
            advertise: None,
            endpoint: EndpointOptions::default(),
            membership: MembershipConfig::default(),
            discovery_interval: Duration::from_secs(1),
            seed: rand::random(),
        }
    }
}

enum Input {
    Datagram(SocketAddr, bytes::Bytes),
    Connected(Peer),
    ConnectFailed(SocketAddr),
    Closed(SocketAddr),
    SetPayload(Vec<u8>),
    Leave(flume::Sender<()>),
}

/// A running mesh node. Dropping it stops the driver and closes the
/// endpoint.
pub struct MeshNode {
    endpoint: MeshEndpoint,
    identity: MemberId,
    inputs: flume::Sender<Input>,
    table: Arc<Mutex<Vec<MemberInfo>>>,
    peers: Arc<Mutex<HashMap<SocketAddr, Peer>>>,
    incoming: flume::Receiver<IncomingStream>,
    profiles: flume::Receiver<IncomingStream>,
    _task: smol::Task<()>,
}

impl MeshNode {
    /// Binds the endpoint and starts the driver on smol's global executor.
    pub fn start(
        identity: &NodeIdentity,
        options: NodeOptions,
        discovery: Box<dyn Discovery>,
    ) -> Result<MeshNode, MeshError> {
        let endpoint = MeshEndpoint::bind(identity, options.listen, options.endpoint.clone())?;
        let addr = options
            .advertise
            .or_else(|| default_advertise(endpoint.local_addr()))
            .ok_or_else(|| {
                MeshError::Setup(format!(
                    "listening on {} and no non-loopback IPv4 address found: set `advertise`, \
                     the address other nodes use for this one",
                    options.listen
                ))
            })?;
        let me = MemberId {
            addr,
            name: identity.node_name.clone(),
            incarnation: options.endpoint.incarnation,
        };
        let now = Instant::now();
        let membership = Membership::new(me.clone(), options.membership.clone(), options.seed, now);
        let (tx, rx) = flume::bounded(EVENT_QUEUE);
        let table = Arc::new(Mutex::new(membership.members()));
        let peers = Arc::new(Mutex::new(HashMap::new()));
        let (streams_tx, streams_rx) = flume::bounded(INCOMING_STREAMS);
        let (profiles_tx, profiles_rx) = flume::bounded(PROFILE_STREAMS);
        // Accepted connections join the driver's table like outgoing ones.
        let accept = {
            let endpoint = endpoint.clone();
            let tx = tx.downgrade();
            async move {
                while let Some(peer) = endpoint.accept().await {
                    let Some(tx) = tx.upgrade() else { break };
                    if tx.send_async(Input::Connected(peer)).await.is_err() {
                        break;
                    }
                }
            }
        };
        let driver = Driver {
            endpoint: endpoint.clone(),
            membership,
            discovery,
            inputs_tx: tx.downgrade(),
            conns: peers.clone(),
            connecting: HashSet::new(),
            pending: HashMap::new(),
            table: table.clone(),
            metrics: endpoint.metrics(),
            discovery_interval: options.discovery_interval,
            streams: streams_tx,
            profiles: profiles_tx,
        };
        let task = smol::spawn(async move {
            let accept = smol::spawn(accept);
            driver.run(rx).await;
            drop(accept);
        });
        Ok(MeshNode {
            endpoint,
            identity: me,
            inputs: tx,
            table,
            peers,
            incoming: streams_rx,
            profiles: profiles_rx,
            _task: task,
        })
    }

    /// Starts the mesh from the `[mesh]` section: loads and checks the
    /// certificates (the node name is the certificate's; `node_name`, the
    /// `[node] name`, must match it if given), then discovery and the
    /// driver. What the daemon calls at start.
    pub fn start_from_config(
        config: &MeshConfig,
        node_name: Option<&str>,
    ) -> Result<MeshNode, MeshError> {
        let identity = NodeIdentity::load(
            &config.ca_cert,
            &config.cert,
            &config.key,
            config.cluster.as_deref(),
        )
        .map_err(|e| MeshError::Setup(e.to_string()))?;
        if let Some(name) = node_name
            && name != identity.node_name
        {
            return Err(MeshError::Setup(format!(
                "[node] name is `{name}` but {} is issued to `{}`",
                config.cert.display(),
                identity.node_name
            )));
        }
        let mut options = NodeOptions::new(config.listen);
        options.advertise = config.advertise;
        options.endpoint.keep_alive = config.keep_alive;
        options.endpoint.idle_timeout = config.idle_timeout;
        options.endpoint.max_frame_bytes = config.max_frame_bytes;
        options.membership.probe_period = config.probe_period;
        options.membership.suspect_timeout = config.suspect_timeout;
        let own = config.advertise.or(Some(config.listen));
        let mut sources: Vec<Box<dyn Discovery>> = Vec::new();
        for kind in &config.discovery {
            match kind {
                DiscoveryKind::Static => sources.push(Box::new(StaticSeeds::new(
                    config.seeds.clone(),
                    own,
                    Duration::from_secs(10),
                ))),
                DiscoveryKind::Mdns => {
                    let advertise = config.advertise.unwrap_or(config.listen);
                    let beacon = BeaconDiscovery::start(
                        &identity.cluster,
                        &identity.node_name,
                        advertise,
                        None,
                    )
                    .map_err(MeshError::Setup)?;
                    sources.push(Box::new(beacon));
                }
            }
        }
        MeshNode::start(&identity, options, Box::new(Combined(sources)))
    }

    pub fn endpoint(&self) -> &MeshEndpoint {
        &self.endpoint
    }

    /// The identity this node started with.
    pub fn identity(&self) -> &MemberId {
        &self.identity
    }

    /// The member table as of the driver's last step (this node included).
    pub fn members(&self) -> Vec<MemberInfo> {
        self.table.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// The live connection to `addr`, for the data plane.
    pub fn peer(&self, addr: SocketAddr) -> Option<Peer> {
        self.peers
            .lock()
            .ok()
            .and_then(|p| p.get(&addr).filter(|p| !p.is_closed()).cloned())
    }

    /// Streams peers opened to this node (data, state), on any connection
    /// with them. Take each one: until then it waits, bounded.
    pub fn incoming(&self) -> flume::Receiver<IncomingStream> {
        self.incoming.clone()
    }

    /// Profiling streams peers opened to this node: they go apart from
    /// [`MeshNode::incoming`], which belongs to the running pipeline.
    pub fn profile_streams(&self) -> flume::Receiver<IncomingStream> {
        self.profiles.clone()
    }

    /// A connection to the member at `addr`: the one membership keeps if it
    /// is up, else a new one.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Peer, MeshError> {
        if let Some(p) = self.peer(addr) {
            return Ok(p);
        }
        let peer = self.endpoint.connect(addr).await?;
        // The driver reads its datagrams and streams like any other
        // connection's (the peer may now send membership packets on it).
        let _ = self.inputs.send_async(Input::Connected(peer.clone())).await;
        Ok(peer)
    }

    /// Publishes this node's gossip payload (at most `max_payload_bytes`).
    pub fn set_payload(&self, data: Vec<u8>) {
        let _ = self.inputs.try_send(Input::SetPayload(data));
    }

    /// Tells the cluster we leave, so members mark us down at once.
    pub async fn leave(&self) {
        let (tx, rx) = flume::bounded(1);
        if self.inputs.send_async(Input::Leave(tx)).await.is_ok() {
            let _ = super::endpoint::with_timeout(Duration::from_secs(1), rx.recv_async()).await;
        }
    }
}

/// The address to advertise for `local`: itself if concrete, else the
/// first up, non-loopback, non-link-local IPv4 address of this host with
/// the same port.
fn default_advertise(local: SocketAddr) -> Option<SocketAddr> {
    if !local.ip().is_unspecified() {
        return Some(local);
    }
    let ifaces = if_addrs::get_if_addrs().ok()?;
    ifaces
        .iter()
        .filter(|i| !i.is_loopback() && !i.is_link_local() && i.ip().is_ipv4())
        .map(|i| SocketAddr::new(i.ip(), local.port()))
        .next()
}

impl Drop for MeshNode {
    /// Closes every connection at once: peers see the node gone as they
    /// would a crash, unless [`MeshNode::leave`] was called first.
    fn drop(&mut self) {
        self.endpoint.close();
    }
}

struct Driver {
    endpoint: MeshEndpoint,
    membership: Membership,
    discovery: Box<dyn Discovery>,
    inputs_tx: flume::WeakSender<Input>,
    conns: Arc<Mutex<HashMap<SocketAddr, Peer>>>,
    connecting: HashSet<SocketAddr>,
    pending: HashMap<SocketAddr, VecDeque<Vec<u8>>>,
    table: Arc<Mutex<Vec<MemberInfo>>>,
    metrics: Arc<MeshMetrics>,
    discovery_interval: Duration,
    /// Where streams that peers open go.
    streams: flume::Sender<IncomingStream>,
    profiles: flume::Sender<IncomingStream>,
}

impl Driver {
    /// The loop: wait for an input or the next deadline, hand it to the
    /// machine, then drive its outputs until there are none.
    async fn run(mut self, inputs: flume::Receiver<Input>) {
        let mut next_discovery = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_discovery {
                for addr in self.discovery.poll_candidates(now) {
                    self.membership.handle_discovered(now, addr);
                }
                next_discovery = now + self.discovery_interval;
                self.refresh_rtts();
            }
            self.membership.handle_timeout(now);
            self.drive_outputs();
            let deadline = self
                .membership
                .poll_timeout()
                .map_or(next_discovery, |t| t.min(next_discovery));
            let input =
                smol::future::or(async { inputs.recv_async().await.ok().map(Some) }, async {
                    smol::Timer::at(deadline).await;
                    Some(None)
                })
                .await;
            match input {
                None => return, // every sender is gone: the node was dropped
                Some(None) => {}
                Some(Some(i)) => {
                    if !self.handle_input(i) {
                        return;
                    }
                }
            }
        }
    }

    fn handle_input(&mut self, input: Input) -> bool {
        let now = Instant::now();
        match input {
            Input::Datagram(from, bytes) => {
                if let Err(e) = self.membership.handle_datagram(now, from, &bytes) {
                    tracing::debug!(%from, "{e}");
                }
            }
            Input::Connected(peer) => self.add_peer(peer),
            Input::ConnectFailed(addr) => {
                self.connecting.remove(&addr);
                if let Some(q) = self.pending.remove(&addr) {
                    MeshMetrics::bump(&self.metrics.datagrams_dropped, q.len() as u64);
                }
            }
            Input::Closed(addr) => {
                if let Ok(mut c) = self.conns.lock()
                    && c.get(&addr).is_some_and(Peer::is_closed)
                {
                    c.remove(&addr);
                }
            }
            Input::SetPayload(data) => {
                if let Err(e) = self.membership.set_payload(now, data) {
                    tracing::warn!("{e}");
                }
            }
            Input::Leave(done) => {
                self.membership.leave(now);
                self.drive_outputs();
                let _ = done.try_send(());
                return false;
            }
        }
        true
    }

    fn add_peer(&mut self, peer: Peer) {
        let addr = peer.remote_address();
        self.connecting.remove(&addr);
        // Datagrams of this connection go to the loop until it closes.
        if let Some(tx) = self.inputs_tx.upgrade() {
            let reader = peer.clone();
            let metrics = self.metrics.clone();
            smol::spawn(async move {
                while let Ok(d) = reader.read_datagram().await {
                    if tx.try_send(Input::Datagram(addr, d)).is_err() {
                        MeshMetrics::bump(&metrics.datagrams_dropped, 1);
                    }
                }
                let _ = tx.send_async(Input::Closed(addr)).await;
            })
            .detach();
        }
        // Streams the peer opens on this connection.
        let acceptor = peer.clone();
        let streams = self.streams.clone();
        let profiles = self.profiles.clone();
        smol::spawn(async move {
            loop {
                match acceptor.accept_stream().await {
                    Ok((StreamKind::Profile, receiver)) => {
                        let stream = IncomingStream {
                            kind: StreamKind::Profile,
                            receiver,
                        };
                        if profiles.try_send(stream).is_err() {
                            tracing::warn!(
                                "dropping a profiling stream from {}: {PROFILE_STREAMS} wait already",
                                acceptor.label()
                            );
                        }
                    }
                    Ok((kind, receiver)) => {
                        if streams
                            .send_async(IncomingStream { kind, receiver })
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(MeshError::Malformed { .. }) => return, // closed and logged
                    Err(e) => {
                        tracing::debug!("no more streams from {}: {e}", acceptor.label());
                        return;
                    }
                }
            }
        })
        .detach();
        if let Some(q) = self.pending.remove(&addr) {
            for bytes in q {
                self.send_on(&peer, bytes);
            }
        }
        if let Ok(mut c) = self.conns.lock() {
            // Both sides may connect at once: keep the newest, the other
            // one still delivers what it receives.
            c.insert(addr, peer);
        }
    }

    fn send_on(&self, peer: &Peer, bytes: Vec<u8>) {
        if let Err(e) = peer.send_datagram(bytes.into()) {
            MeshMetrics::bump(&self.metrics.datagrams_dropped, 1);
            tracing::debug!("{e}");
        }
    }

    /// Sends what the machine produced and reports its events.
    fn drive_outputs(&mut self) {
        while let Some(t) = self.membership.poll_transmit() {
            let live = self
                .conns
                .lock()
                .ok()
                .and_then(|c| c.get(&t.dst).filter(|p| !p.is_closed()).cloned());
            match live {
                Some(peer) => self.send_on(&peer, t.bytes),
                None => self.connect_and_queue(t.dst, t.bytes),
            }
        }
        let mut changed = false;
        while let Some(e) = self.membership.poll_event() {
            changed = true;
            match &e {
                MembershipEvent::Up(m) => {
                    tracing::info!(member = %m.name, addr = %m.addr, "member up")
                }
                MembershipEvent::Down(m) => {
                    tracing::info!(member = %m.name, addr = %m.addr, "member down")
                }
                MembershipEvent::Replaced { new, .. } => {
                    tracing::info!(member = %new.name, addr = %new.addr, incarnation = new.incarnation, "member restarted")
                }
                _ => {}
            }
        }
        let _ = changed;
        if let Ok(mut t) = self.table.lock() {
            *t = self.membership.members();
        }
    }

    fn connect_and_queue(&mut self, addr: SocketAddr, bytes: Vec<u8>) {
        let q = self.pending.entry(addr).or_default();
        if q.len() >= PENDING_PER_PEER {
            q.pop_front();
            MeshMetrics::bump(&self.metrics.datagrams_dropped, 1);
        }
        q.push_back(bytes);
        if !self.connecting.insert(addr) {
            return;
        }
        let Some(tx) = self.inputs_tx.upgrade() else {
            return;
        };
        let endpoint = self.endpoint.clone();
        smol::spawn(async move {
            let input = match endpoint.connect(addr).await {
                Ok(peer) => Input::Connected(peer),
                Err(_) => Input::ConnectFailed(addr),
            };
            let _ = tx.send_async(input).await;
        })
        .detach();
    }

    fn refresh_rtts(&mut self) {
        let rtts: Vec<(SocketAddr, Duration)> = self
            .conns
            .lock()
            .map(|c| {
                c.iter()
                    .filter(|(_, p)| !p.is_closed())
                    .map(|(a, p)| (*a, p.rtt()))
                    .collect()
            })
            .unwrap_or_default();
        for (addr, rtt) in rtts {
            self.membership.handle_rtt(addr, rtt);
        }
    }
}
