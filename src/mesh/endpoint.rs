//! One quinn endpoint per node, on smol, that both listens and connects from
//! the same UDP socket. After TLS (mutual, ALPN `eddy/1`), the connecting
//! side opens the control stream and sends [`Hello`]; the accepting side
//! answers [`Frame::Welcome`] or [`Frame::Refuse`] with a reason. Every
//! refusal is logged with the peer's address and counted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{ConnectionError, TransportConfig, VarInt};

use super::frame::{self, Frame, Hello, InvalidFrame, StreamKind};
use super::identity::{NodeIdentity, node_id_of};
use super::metrics::MeshMetrics;
use super::runtime::EndpointThread;
use super::streams::{FrameReceiver, FrameSender, PeerLabel};
use super::{PROTOCOL_VERSION, ca};

/// Application close codes.
pub const ERR_SHUTDOWN: VarInt = VarInt::from_u32(0);
/// The peer broke the protocol (a malformed frame); reason in the close.
pub const ERR_PROTOCOL: VarInt = VarInt::from_u32(1);
/// The handshake was refused (version, cluster, node name).
pub const ERR_REFUSED: VarInt = VarInt::from_u32(2);

/// Unidirectional streams a peer may have open at once on a connection.
pub const MAX_UNI_STREAMS: u32 = 4096;
/// Largest `Hello`/`Welcome`/`Refuse` frame accepted.
const HELLO_MAX_BYTES: usize = frame::MIN_MAX_FRAME_BYTES;
/// Handshakes in progress at once; more wait in quinn's bounded incoming
/// queue, and beyond that quinn refuses them.
const MAX_CONCURRENT_HANDSHAKES: usize = 32;
/// Peers accepted but not yet taken by [`MeshEndpoint::accept`].
const ACCEPTED_QUEUE: usize = 16;

/// Settings of an endpoint (from `[mesh]`).
#[derive(Clone, Debug)]
pub struct EndpointOptions {
    pub keep_alive: Duration,
    pub idle_timeout: Duration,
    pub max_frame_bytes: usize,
    /// Time for TLS plus the `Hello` exchange.
    pub handshake_timeout: Duration,
    /// Sent in `Hello`; a restarted node has a new one.
    pub incarnation: u64,
}

impl Default for EndpointOptions {
    fn default() -> EndpointOptions {
        EndpointOptions {
            keep_alive: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(10),
            max_frame_bytes: frame::DEFAULT_MAX_FRAME_BYTES,
            handshake_timeout: Duration::from_secs(5),
            incarnation: unix_millis(),
        }
    }
}

/// Milliseconds since the Unix epoch: a node's incarnation, higher after
/// every restart as long as the clock does not go back.
pub fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Everything that can go wrong in the mesh, each naming the peer.
#[derive(Debug)]
pub enum MeshError {
    /// Binding the socket or building TLS configs.
    Setup(String),
    /// TLS or QUIC failed before the `Hello` exchange.
    Handshake { addr: SocketAddr, reason: String },
    /// The peer answered the `Hello` with a refusal, or we refused its own.
    Refused { addr: SocketAddr, reason: String },
    /// The peer sent bytes that are not a frame; its connection was closed.
    Malformed { peer: PeerLabel, reason: String },
    /// A frame too large to send.
    FrameTooLarge {
        peer: PeerLabel,
        error: InvalidFrame,
    },
    /// A stream or the connection failed.
    Stream { peer: PeerLabel, reason: String },
    Timeout {
        addr: SocketAddr,
        what: &'static str,
    },
}

impl std::fmt::Display for MeshError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MeshError::Setup(e) => write!(f, "mesh setup: {e}"),
            MeshError::Handshake { addr, reason } => {
                write!(f, "handshake with {addr} failed: {reason}")
            }
            MeshError::Refused { addr, reason } => write!(f, "refused by {addr}: {reason}"),
            MeshError::Malformed { peer, reason } => {
                write!(f, "malformed frame from {peer}: {reason}")
            }
            MeshError::FrameTooLarge { peer, error } => write!(f, "cannot send to {peer}: {error}"),
            MeshError::Stream { peer, reason } => write!(f, "stream to {peer}: {reason}"),
            MeshError::Timeout { addr, what } => write!(f, "{what} with {addr} timed out"),
        }
    }
}

impl std::error::Error for MeshError {}

impl MeshError {
    /// The reason alone, without the address (for log lines that already
    /// name the peer).
    pub fn reason(&self) -> String {
        match self {
            MeshError::Handshake { reason, .. } | MeshError::Refused { reason, .. } => {
                reason.clone()
            }
            MeshError::Timeout { what, .. } => format!("{what} timed out"),
            other => other.to_string(),
        }
    }
}

/// What every connection of this endpoint shares.
struct Shared {
    hello: Hello,
    server_name: String,
    opts: EndpointOptions,
    metrics: Arc<MeshMetrics>,
}

/// A QUIC endpoint of the mesh. Cheap to clone; the endpoint closes when the
/// last clone is dropped.
#[derive(Clone)]
pub struct MeshEndpoint {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    accepted: flume::Receiver<Peer>,
    local: SocketAddr,
    /// Where quinn's tasks run; [`MeshEndpoint::spawn`] puts more there.
    thread: Arc<EndpointThread>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.endpoint.close(ERR_SHUTDOWN, b"shutting down");
    }
}

/// Kernel buffer of the UDP socket, each way. Linux's default (208 KiB)
/// overflows at a few hundred MB/s: the kernel drops datagrams, QUIC takes
/// them for congestion and halves its window (the bench saw thousands of
/// `RcvbufErrors`). The kernel caps it at `net.core.rmem_max`/`wmem_max`.
const SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// Upper bound of MTU discovery, which is also the largest UDP payload an
/// endpoint accepts. quinn starts at 1 200 bytes and probes upwards: a
/// 1500 LAN settles at ~1 472 within the first second of a connection,
/// loopback and jumbo-frame LANs go up to this bound. Bigger datagrams are
/// fewer packets to seal, send, receive and acknowledge: the mesh bench
/// went from 126 to 613 MB/s with it (0.12 to 0.28 of TCP in that run).
/// Why not 65 527 (loopback's limit): quinn hands the kernel up to 10
/// datagrams of one size in one GSO send, and Linux refuses a send over
/// 64 KiB in all (EMSGSIZE, which quinn-udp drops silently, so every batch
/// is lost: the bench fell to 44 MB/s, p99 148 ms). 64 KiB datagrams
/// without GSO were slower than these (370 against 610 MB/s).
const MTU_BOUND: u16 = 6_500;

/// How much a stream may have in flight. quinn's default (1.25 MB, sized
/// for 100 Mbit/s at 100 ms) made a sender on loopback wait for window
/// updates between batches: the bench's p50 at half load was 1.9 ms with
/// it and 0.16 ms with 8 MiB. The price: a stream whose reader stalls may
/// hold up to this much in the receiver's memory.
const STREAM_WINDOW_BYTES: u32 = 8 << 20;

fn transport(opts: &EndpointOptions) -> Result<Arc<TransportConfig>, MeshError> {
    let mut t = TransportConfig::default();
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(MTU_BOUND);
    t.mtu_discovery_config(Some(mtu));
    t.stream_receive_window(VarInt::from_u32(STREAM_WINDOW_BYTES));
    t.send_window(u64::from(STREAM_WINDOW_BYTES) * 4);
    t.keep_alive_interval(Some(opts.keep_alive));
    // A distributed run keeps one stream open per exchange and worker pair
    // for its whole length: a stream waiting for a free slot would wait
    // forever.
    t.max_concurrent_uni_streams(VarInt::from_u32(MAX_UNI_STREAMS));
    let idle = quinn::IdleTimeout::try_from(opts.idle_timeout)
        .map_err(|e| MeshError::Setup(format!("idle_timeout: {e}")))?;
    t.max_idle_timeout(Some(idle));
    Ok(Arc::new(t))
}

impl MeshEndpoint {
    /// Binds `listen` and starts accepting. Must be called inside a smol
    /// context (the accept loop runs on smol's global executor).
    pub fn bind(
        identity: &NodeIdentity,
        listen: SocketAddr,
        opts: EndpointOptions,
    ) -> Result<MeshEndpoint, MeshError> {
        let setup = |e: &dyn std::fmt::Display| MeshError::Setup(e.to_string());
        let transport = transport(&opts)?;
        let server_tls = identity.server_config().map_err(|e| setup(&e))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(
            QuicServerConfig::try_from(server_tls).map_err(|e| setup(&e))?,
        ));
        server.transport_config(transport.clone());
        server.max_incoming(256);
        let client_tls = identity.client_config().map_err(|e| setup(&e))?;
        let mut client = quinn::ClientConfig::new(Arc::new(
            QuicClientConfig::try_from(client_tls).map_err(|e| setup(&e))?,
        ));
        client.transport_config(transport);
        let cannot_listen =
            |e: std::io::Error| MeshError::Setup(format!("cannot listen on {listen}: {e}"));
        let socket = std::net::UdpSocket::bind(listen).map_err(cannot_listen)?;
        // Best effort: a smaller buffer only costs throughput.
        if let Ok(state) = quinn::udp::UdpSocketState::new((&socket).into()) {
            let _ = state.set_recv_buffer_size((&socket).into(), SOCKET_BUFFER_BYTES);
            let _ = state.set_send_buffer_size((&socket).into(), SOCKET_BUFFER_BYTES);
        }
        let mut config = quinn::EndpointConfig::default();
        config
            .max_udp_payload_size(MTU_BOUND)
            .map_err(|e| setup(&e))?;
        let thread = EndpointThread::start("eddy-quic".into()).map_err(cannot_listen)?;
        let mut endpoint = quinn::Endpoint::new(config, Some(server), socket, thread.clone())
            .map_err(cannot_listen)?;
        endpoint.set_default_client_config(client);
        let local = endpoint.local_addr().map_err(|e| setup(&e))?;
        let shared = Arc::new(Shared {
            hello: Hello {
                protocol_version: PROTOCOL_VERSION,
                cluster: identity.cluster.clone(),
                node_id: identity.node_id,
                node_name: identity.node_name.clone(),
                incarnation: opts.incarnation,
            },
            server_name: identity.server_name(),
            opts,
            metrics: Arc::new(MeshMetrics::default()),
        });
        let (tx, rx) = flume::bounded(ACCEPTED_QUEUE);
        smol::spawn(accept_loop(endpoint.clone(), shared.clone(), tx)).detach();
        Ok(MeshEndpoint {
            inner: Arc::new(Inner {
                endpoint,
                shared,
                accepted: rx,
                local,
                thread,
            }),
        })
    }

    /// Runs `future` on the thread of this endpoint's QUIC work. A task
    /// that mostly moves frames between a queue and a stream wakes and is
    /// woken by quinn's drivers: on their thread each hand-off is a call,
    /// not a wake-up of another thread.
    pub fn spawn<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = T> + Send + 'static,
    ) -> smol::Task<T> {
        self.inner.thread.spawn(future)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// This node's `Hello`.
    pub fn hello(&self) -> &Hello {
        &self.inner.shared.hello
    }

    pub fn metrics(&self) -> Arc<MeshMetrics> {
        self.inner.shared.metrics.clone()
    }

    /// Connects to `addr`: TLS, then `Hello`. A refusal (by either side) is
    /// logged with the address and returned.
    pub async fn connect(&self, addr: SocketAddr) -> Result<Peer, MeshError> {
        let shared = &self.inner.shared;
        let result =
            match with_timeout(shared.opts.handshake_timeout, self.connect_inner(addr)).await {
                Some(r) => r,
                None => Err(MeshError::Timeout {
                    addr,
                    what: "connecting",
                }),
            };
        match &result {
            Ok(peer) => {
                MeshMetrics::bump(&shared.metrics.connections_established, 1);
                tracing::debug!(peer = %peer.label(), "connected");
            }
            // No answer is what a down node gives: SWIM retries, so keep it
            // out of the warnings.
            Err(e @ MeshError::Timeout { .. }) => {
                tracing::debug!(%addr, "could not connect to {addr}: {e}")
            }
            Err(e) => {
                MeshMetrics::bump(&shared.metrics.handshakes_refused, 1);
                tracing::warn!(%addr, "could not connect to {addr}: {e}");
            }
        }
        result
    }

    async fn connect_inner(&self, addr: SocketAddr) -> Result<Peer, MeshError> {
        let shared = &self.inner.shared;
        let handshake = |reason: String| MeshError::Handshake { addr, reason };
        let connecting = self
            .inner
            .endpoint
            .connect(addr, &shared.server_name)
            .map_err(|e| handshake(e.to_string()))?;
        let conn = connecting.await.map_err(|e| handshake(describe(&e)))?;
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| handshake(describe(&e)))?;
        let hello = frame::encode_to_vec(&Frame::Hello(shared.hello.clone()), HELLO_MAX_BYTES)
            .map_err(|e| handshake(e.to_string()))?;
        send.write_all(&hello)
            .await
            .map_err(|e| refusal_of(addr, &conn, e.to_string()))?;
        let answer = read_first_frame(&mut recv).await;
        let theirs = match answer {
            Ok(Frame::Welcome(h)) => h,
            Ok(Frame::Refuse { reason }) => {
                conn.close(ERR_REFUSED, b"refused");
                return Err(MeshError::Refused { addr, reason });
            }
            Ok(other) => {
                let reason = format!("expected Welcome, got {}", frame_name(&other));
                conn.close(ERR_PROTOCOL, reason.as_bytes());
                return Err(handshake(reason));
            }
            Err(FirstFrameError::Invalid(e, _)) => {
                conn.close(ERR_PROTOCOL, e.to_string().as_bytes());
                return Err(handshake(e.to_string()));
            }
            Err(FirstFrameError::Stream(reason)) => return Err(refusal_of(addr, &conn, reason)),
        };
        if let Err(reason) = check_hello(&theirs, &shared.hello, &conn) {
            conn.close(ERR_REFUSED, reason.as_bytes());
            return Err(MeshError::Refused { addr, reason });
        }
        Ok(Peer::new(conn, theirs, shared, send, recv))
    }

    /// The next peer that connected to us and passed the handshake.
    /// Refused handshakes never show up here: they are logged and counted.
    /// `None` once the endpoint is closed.
    pub async fn accept(&self) -> Option<Peer> {
        self.inner.accepted.recv_async().await.ok()
    }

    /// Closes every connection and stops listening.
    pub fn close(&self) {
        self.inner.endpoint.close(ERR_SHUTDOWN, b"shutting down");
    }

    /// Closes every connection, then waits (at most `limit`) until the
    /// peers were told: a process that exits right after `close` may never
    /// send the close, and a peer still writing to it then waits for its
    /// idle timeout.
    pub async fn close_and_wait(&self, limit: Duration) {
        self.close();
        with_timeout(limit, self.inner.endpoint.wait_idle()).await;
    }
}

/// Accepts connections until the endpoint closes; each handshake runs in
/// its own task so a slow peer cannot hold up the others.
async fn accept_loop(endpoint: quinn::Endpoint, shared: Arc<Shared>, tx: flume::Sender<Peer>) {
    let permits = Arc::new(smol::lock::Semaphore::new(MAX_CONCURRENT_HANDSHAKES));
    while let Some(incoming) = endpoint.accept().await {
        let permit = permits.acquire_arc().await;
        let shared = shared.clone();
        let tx = tx.clone();
        smol::spawn(async move {
            let addr = incoming.remote_address();
            let result =
                match with_timeout(shared.opts.handshake_timeout, accept_one(incoming, &shared))
                    .await
                {
                    Some(r) => r,
                    None => Err(MeshError::Timeout {
                        addr,
                        what: "handshake",
                    }),
                };
            drop(permit);
            match result {
                Ok(peer) => {
                    MeshMetrics::bump(&shared.metrics.connections_established, 1);
                    tracing::debug!(peer = %peer.label(), "accepted");
                    // Bounded: if nobody takes peers, new ones wait here.
                    let _ = tx.send_async(peer).await;
                }
                Err(e) => {
                    MeshMetrics::bump(&shared.metrics.handshakes_refused, 1);
                    tracing::warn!(%addr, "refused connection from {addr}: {}", e.reason());
                }
            }
        })
        .detach();
    }
}

async fn accept_one(incoming: quinn::Incoming, shared: &Shared) -> Result<Peer, MeshError> {
    let addr = incoming.remote_address();
    let handshake = |reason: String| MeshError::Handshake { addr, reason };
    let conn = incoming
        .accept()
        .map_err(|e| handshake(describe(&e)))?
        .await
        .map_err(|e| handshake(describe(&e)))?;
    let (mut send, mut recv) = conn
        .accept_bi()
        .await
        .map_err(|e| handshake(describe(&e)))?;
    let theirs: Result<Hello, (String, bool)> = match read_first_frame(&mut recv).await {
        Ok(Frame::Hello(h)) => check_hello(&h, &shared.hello, &conn)
            .map(|()| h)
            .map_err(|r| (r, true)),
        Ok(other) => Err((format!("expected Hello, got {}", frame_name(&other)), false)),
        // A Hello of another version may not decode; its version still can.
        Err(FirstFrameError::Invalid(_, Some(v))) if v != PROTOCOL_VERSION => {
            Err((version_mismatch(v, &shared.hello), true))
        }
        Err(FirstFrameError::Invalid(e, _)) => Err((e.to_string(), false)),
        Err(FirstFrameError::Stream(reason)) => return Err(handshake(reason)),
    };
    match theirs {
        Ok(h) => {
            let welcome =
                frame::encode_to_vec(&Frame::Welcome(shared.hello.clone()), HELLO_MAX_BYTES)
                    .map_err(|e| handshake(e.to_string()))?;
            send.write_all(&welcome)
                .await
                .map_err(|e| handshake(e.to_string()))?;
            Ok(Peer::new(conn, h, shared, send, recv))
        }
        Err((reason, tell)) => {
            if tell {
                // Tell the peer why, then give it a moment to read it before
                // the close (a close discards unread stream data).
                if let Ok(bytes) = frame::encode_to_vec(
                    &Frame::Refuse {
                        reason: reason.clone(),
                    },
                    HELLO_MAX_BYTES,
                ) {
                    let _ = send.write_all(&bytes).await;
                    let _ = send.finish();
                    let _ = with_timeout(Duration::from_secs(1), conn.closed()).await;
                }
                conn.close(ERR_REFUSED, reason.as_bytes());
            } else {
                conn.close(ERR_PROTOCOL, reason.as_bytes());
            }
            Err(MeshError::Refused { addr, reason })
        }
    }
}

fn version_mismatch(theirs: u32, ours: &Hello) -> String {
    format!(
        "protocol version mismatch: the connecting node speaks mesh protocol version {theirs}, \
         {} speaks version {}",
        ours.node_name, ours.protocol_version
    )
}

/// Checks a peer's `Hello` against our own and its certificate: same
/// version, same cluster, and the node name its certificate was issued for.
fn check_hello(theirs: &Hello, ours: &Hello, conn: &quinn::Connection) -> Result<(), String> {
    if theirs.protocol_version != ours.protocol_version {
        return Err(format!(
            "protocol version mismatch: {} speaks mesh protocol version {}, {} speaks version {}",
            theirs.node_name, theirs.protocol_version, ours.node_name, ours.protocol_version
        ));
    }
    if theirs.cluster != ours.cluster {
        return Err(format!(
            "{} says it is in cluster `{}`, this node is in cluster `{}`",
            theirs.node_name, theirs.cluster, ours.cluster
        ));
    }
    let cert_name = conn
        .peer_identity()
        .and_then(|any| {
            any.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| chain.first().and_then(|c| ca::summarize(c).ok()))
        .and_then(|s| s.common_name);
    if cert_name.as_deref() != Some(theirs.node_name.as_str()) {
        return Err(format!(
            "says it is node `{}` but its certificate is for `{}`",
            theirs.node_name,
            cert_name.as_deref().unwrap_or("?")
        ));
    }
    if theirs.node_id != node_id_of(&theirs.node_name) {
        return Err(format!(
            "node id {} does not match node name `{}`",
            theirs.node_id, theirs.node_name
        ));
    }
    Ok(())
}

enum FirstFrameError {
    /// Not a frame; with the `Hello` version if one could be read.
    Invalid(InvalidFrame, Option<u32>),
    Stream(String),
}

/// Reads exactly one small frame from the start of a stream.
async fn read_first_frame(recv: &mut quinn::RecvStream) -> Result<Frame, FirstFrameError> {
    let mut buf = Vec::new();
    loop {
        match frame::decode(&buf, HELLO_MAX_BYTES) {
            Ok((f, _)) => return Ok(f),
            Err(frame::DecodeError::Incomplete) => {}
            Err(frame::DecodeError::Invalid(e)) => {
                let version = buf
                    .get(frame::LEN_PREFIX_BYTES..)
                    .and_then(frame::peek_hello_version);
                return Err(FirstFrameError::Invalid(e, version));
            }
        }
        match recv.read_chunk(HELLO_MAX_BYTES, true).await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk.bytes),
            Ok(None) => {
                return Err(FirstFrameError::Stream(
                    "the stream ended before the first frame".into(),
                ));
            }
            Err(e) => return Err(FirstFrameError::Stream(read_error(&e))),
        }
    }
}

fn read_error(e: &quinn::ReadError) -> String {
    match e {
        quinn::ReadError::ConnectionLost(c) => describe(c),
        other => other.to_string(),
    }
}

/// A connection error as a sentence; a peer's close reason is quoted.
fn describe(e: &ConnectionError) -> String {
    match e {
        ConnectionError::ApplicationClosed(c) => {
            format!("closed by the peer: {}", String::from_utf8_lossy(&c.reason))
        }
        // In TLS 1.3 the connecting side checks the other's certificate
        // first, so a refusal can arrive as the peer's alert: say whose.
        ConnectionError::ConnectionClosed(c) if !c.reason.is_empty() => {
            format!(
                "the peer closed the connection ({}): {}",
                c.error_code,
                clean_tls_reason(&String::from_utf8_lossy(&c.reason))
            )
        }
        ConnectionError::ConnectionClosed(c) => format!("closed by the peer: {}", c.error_code),
        other => clean_tls_reason(&other.to_string()),
    }
}

/// rustls shows custom certificate errors as `Other(OtherError(msg))`:
/// keep the message.
fn clean_tls_reason(s: &str) -> String {
    const WRAP: &str = "Other(OtherError(";
    match (s.find(WRAP), s.rfind("))")) {
        (Some(a), Some(b)) if b > a => {
            format!("{}{}{}", &s[..a], &s[a + WRAP.len()..b], &s[b + 2..])
        }
        _ => s.to_string(),
    }
}

/// The peer may have closed the connection while we were writing: its close
/// reason says why.
fn refusal_of(addr: SocketAddr, conn: &quinn::Connection, fallback: String) -> MeshError {
    match conn.close_reason() {
        Some(ConnectionError::ApplicationClosed(c)) if c.error_code == ERR_REFUSED => {
            MeshError::Refused {
                addr,
                reason: String::from_utf8_lossy(&c.reason).into_owned(),
            }
        }
        Some(e) => MeshError::Handshake {
            addr,
            reason: describe(&e),
        },
        None => MeshError::Handshake {
            addr,
            reason: fallback,
        },
    }
}

fn frame_name(f: &Frame) -> &'static str {
    match f {
        Frame::Hello(_) => "Hello",
        Frame::Welcome(_) => "Welcome",
        Frame::Refuse { .. } => "Refuse",
        Frame::Open(_) => "Open",
        Frame::Data(_) => "Data",
        Frame::Membership(_) => "Membership",
        Frame::StateChunk(_) => "StateChunk",
        Frame::Marker(_) => "Marker",
        Frame::BinState(_) => "BinState",
        Frame::Migrate(_) => "Migrate",
        Frame::Trace(_) => "Trace",
        Frame::Profile(_) => "Profile",
    }
}

/// `Some(output)`, or `None` if `d` passed first.
pub(crate) async fn with_timeout<T>(d: Duration, f: impl Future<Output = T>) -> Option<T> {
    smol::future::or(async { Some(f.await) }, async {
        smol::Timer::after(d).await;
        None
    })
    .await
}

/// A connected, authenticated peer. Clones share the connection.
#[derive(Clone)]
pub struct Peer {
    conn: quinn::Connection,
    hello: Hello,
    label: PeerLabel,
    max_frame_bytes: usize,
    metrics: Arc<MeshMetrics>,
    control: Arc<Mutex<Option<(FrameSender, FrameReceiver)>>>,
}

impl Peer {
    fn new(
        conn: quinn::Connection,
        hello: Hello,
        shared: &Shared,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
    ) -> Peer {
        let label = PeerLabel {
            name: hello.node_name.clone(),
            addr: conn.remote_address(),
        };
        let max = shared.opts.max_frame_bytes;
        let control = (
            FrameSender::new(send, max, label.clone(), shared.metrics.clone()),
            FrameReceiver::new(
                recv,
                max,
                conn.clone(),
                label.clone(),
                shared.metrics.clone(),
            ),
        );
        Peer {
            conn,
            hello,
            label,
            max_frame_bytes: max,
            metrics: shared.metrics.clone(),
            control: Arc::new(Mutex::new(Some(control))),
        }
    }

    /// The peer's `Hello`: name, id, cluster, incarnation.
    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    pub fn label(&self) -> &PeerLabel {
        &self.label
    }

    pub fn remote_address(&self) -> SocketAddr {
        self.conn.remote_address()
    }

    /// QUIC's smoothed round-trip time estimate.
    pub fn rtt(&self) -> Duration {
        self.conn.rtt()
    }

    /// The bidirectional control stream the handshake used, once.
    pub fn take_control(&self) -> Option<(FrameSender, FrameReceiver)> {
        self.control.lock().ok().and_then(|mut c| c.take())
    }

    /// Opens a unidirectional stream of `kind` (its first frame says which).
    pub async fn open_stream(&self, kind: StreamKind) -> Result<FrameSender, MeshError> {
        let send = self.conn.open_uni().await.map_err(|e| MeshError::Stream {
            peer: self.label.clone(),
            reason: describe(&e),
        })?;
        let mut sender = FrameSender::new(
            send,
            self.max_frame_bytes,
            self.label.clone(),
            self.metrics.clone(),
        );
        sender.send(&Frame::Open(kind)).await?;
        Ok(sender)
    }

    /// The ordered data stream from our worker `sender_worker` to the
    /// peer's worker `receiver_worker`. Open one per pair and keep it.
    pub async fn open_data_stream(
        &self,
        sender_worker: u16,
        receiver_worker: u16,
    ) -> Result<FrameSender, MeshError> {
        self.open_stream(StreamKind::Data {
            sender_worker,
            receiver_worker,
        })
        .await
    }

    /// The next stream the peer opened, with its kind. A stream that does
    /// not start with `Open` closes the connection as malformed.
    pub async fn accept_stream(&self) -> Result<(StreamKind, FrameReceiver), MeshError> {
        let recv = self
            .conn
            .accept_uni()
            .await
            .map_err(|e| MeshError::Stream {
                peer: self.label.clone(),
                reason: describe(&e),
            })?;
        let mut receiver = FrameReceiver::new(
            recv,
            self.max_frame_bytes,
            self.conn.clone(),
            self.label.clone(),
            self.metrics.clone(),
        );
        match receiver.recv().await? {
            Some(Frame::Open(kind)) => Ok((kind, receiver)),
            other => {
                let reason = match other {
                    Some(f) => format!("stream starts with {} instead of Open", frame_name(&f)),
                    None => "stream ended before its Open frame".to_string(),
                };
                MeshMetrics::bump(&self.metrics.malformed_frames, 1);
                tracing::warn!(peer = %self.label.name, addr = %self.label.addr, "closing the connection to {}: {reason}", self.label);
                self.conn.close(ERR_PROTOCOL, reason.as_bytes());
                Err(MeshError::Malformed {
                    peer: self.label.clone(),
                    reason,
                })
            }
        }
    }

    /// Sends an unreliable datagram (membership packets).
    pub fn send_datagram(&self, bytes: bytes::Bytes) -> Result<(), MeshError> {
        self.conn
            .send_datagram(bytes)
            .map_err(|e| MeshError::Stream {
                peer: self.label.clone(),
                reason: e.to_string(),
            })
    }

    /// The next datagram from the peer.
    pub async fn read_datagram(&self) -> Result<bytes::Bytes, MeshError> {
        self.conn
            .read_datagram()
            .await
            .map_err(|e| MeshError::Stream {
                peer: self.label.clone(),
                reason: describe(&e),
            })
    }

    /// Resolves when the connection is closed, with why.
    pub async fn closed(&self) -> String {
        describe(&self.conn.closed().await)
    }

    pub fn is_closed(&self) -> bool {
        self.conn.close_reason().is_some()
    }

    pub fn close(&self, reason: &str) {
        self.conn.close(ERR_SHUTDOWN, reason.as_bytes());
    }
}
