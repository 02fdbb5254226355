//! The remote half of keyed exchanges in a distributed run. A worker sends
//! to a worker of another node exactly as to a local one, on a bounded
//! channel; here a task per (exchange, local worker, remote worker) takes
//! from that channel, encodes batches and markers into frames and writes
//! them on its own ordered QUIC stream, waiting on QUIC flow control. On
//! the other node a task per incoming stream decodes the frames and pushes
//! them into the receiving worker's inbox with a bounded send: a full inbox
//! stops the reading, QUIC flow control then stops the writing, and the
//! sending worker finds its channel full. No queue on the way is unbounded.
//!
//! Watermarks and the end of input travel in band as markers, so for the
//! receiving worker a remote sender is one more input channel: per-sender
//! order, the minimum watermark and end-of-input work as they do locally.
//! So do live migration's markers and bin state (the state cut into chunks
//! well below the frame limit, put together again by the reader), so they
//! keep their order with the records exactly as on a local channel.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::Shared;
use super::clock;
use super::worker::{Body, Message};
use crate::control::assignment::Assignment;
use crate::data::{SchemaRef, wire};
use crate::mesh::driver::{IncomingStream, MeshNode};
use crate::mesh::frame::{BinState, DataBatch, Frame, Marker, StreamKind};
use crate::mesh::streams::FrameReceiver;
use crate::trace::{Kind, LaneName, LaneTrace, wire_id};

/// Frames written at once by a sender task when its queue has several.
const FRAMES_PER_WRITE: usize = 16;
/// How long the end of a run waits for peers to read what it sent.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest chunk of a migrating bin's state (also at most a quarter of the
/// peer's frame limit): a chunk is one write, and records wait behind it.
const STATE_CHUNK_BYTES: usize = 256 << 10;

/// What a distributed run knows of its cluster.
pub(crate) struct Cluster {
    pub(crate) assignment: Arc<Assignment>,
    /// This node's index in `assignment.members`.
    pub(crate) me: usize,
    /// The mesh address of every member, in `assignment.members` order.
    pub(crate) addrs: Vec<SocketAddr>,
    pub(crate) mesh: Arc<MeshNode>,
    /// Per member: it drained and left the run before this node joined.
    pub(crate) left: Vec<bool>,
    /// Set when this node joins a running run (`join.rs`).
    pub(crate) join: Option<super::join::Joining>,
    /// With checkpoints: where this run starts from, the same on every
    /// member (`cluster_checkpoint`).
    pub(crate) restore: Option<super::cluster_checkpoint::RestorePoint>,
    /// The run's id and this member's checkpoints when it began (what its
    /// gossip says once it runs).
    pub(crate) run: (u64, super::cluster_checkpoint::Marks),
}

/// One keyed exchange as the remote half sees it.
pub(crate) struct RemoteEdge {
    /// The schema of the rows crossing it.
    pub(crate) schema: SchemaRef,
    /// The inbox of each local worker.
    pub(crate) inboxes: Vec<flume::Sender<Message>>,
}

/// The running remote half of a run's exchanges.
pub(crate) struct RemoteExchange {
    /// `[edge][local worker][global worker]`: the queue to that worker if
    /// it is on another node.
    pub(crate) queues: Vec<Vec<Vec<Option<flume::Sender<Message>>>>>,
    /// Shared with `join.rs`, which adds those to a member that joins.
    senders: Arc<std::sync::Mutex<Vec<smol::Task<()>>>>,
    _dispatch: smol::Task<()>,
    /// The migration control streams to the other members.
    _control: Vec<smol::Task<()>>,
    /// This member's activity logs to the other members.
    _trace: (Vec<smol::Task<()>>, crate::trace::peers::Attached),
}

impl RemoteExchange {
    /// Creates the queues and starts a sender task per remote pair and the
    /// task that takes the streams peers open to this node.
    pub(crate) fn start(
        cluster: &Cluster,
        shared: &Arc<Shared>,
        edges: Vec<RemoteEdge>,
    ) -> Result<RemoteExchange, String> {
        let a = &cluster.assignment;
        let total = a.total_workers();
        let first = a.first[cluster.me];
        let local = a.members[cluster.me].workers as usize;
        let is_local = |g: usize| (first..first + local).contains(&g);
        let per_peer = edges.len() * local * total.saturating_sub(local);
        if per_peer > crate::mesh::endpoint::MAX_UNI_STREAMS as usize {
            return Err(format!(
                "the run needs {per_peer} streams to its peers, more than the mesh allows ({}); use fewer workers",
                crate::mesh::endpoint::MAX_UNI_STREAMS
            ));
        }
        let mut queues = Vec::with_capacity(edges.len());
        let mut senders = Vec::new();
        for edge in 0..edges.len() {
            let mut per_local = Vec::with_capacity(local);
            for l in 0..local {
                let mut per_global = Vec::with_capacity(total);
                for g in 0..total {
                    if is_local(g) {
                        per_global.push(None);
                        continue;
                    }
                    let (tx, rx) = flume::bounded(shared.channel_capacity);
                    per_global.push(Some(tx));
                    let node = a.node_of_worker(g);
                    if cluster.left.get(node).copied().unwrap_or(false) {
                        continue; // never read: a member that left before this one joined
                    }
                    let link = Link {
                        mesh: cluster.mesh.clone(),
                        addr: cluster.addrs[node],
                        name: a.members[node].name.clone(),
                        kind: StreamKind::Exchange {
                            epoch: a.epoch,
                            edge: edge as u16,
                            sender: (first + l) as u16,
                            receiver: g as u16,
                        },
                    };
                    senders.push(spawn_sender(link, rx, shared, node, first + l));
                }
                per_local.push(per_global);
            }
            queues.push(per_local);
        }
        let senders = Arc::new(std::sync::Mutex::new(senders));
        let control = super::migration_mesh::start(cluster, shared);
        let trace = start_trace(cluster, shared);
        let hook = super::join::Hook::new(cluster, edges.len(), senders.clone());
        let _ = shared.join.set(hook.clone());
        let dispatch = Dispatch {
            hook,
            mesh: cluster.mesh.clone(),
            me: cluster.me,
            edges,
            shared: shared.clone(),
        };
        let incoming = cluster.mesh.incoming();
        // Streams a joining node took while it waited for its welcome.
        let pending = cluster
            .join
            .as_ref()
            .map(|j| j.take_pending())
            .unwrap_or_default();
        let task = smol::spawn(async move { dispatch.run(pending, incoming).await });
        Ok(RemoteExchange {
            queues,
            senders,
            _dispatch: task,
            _control: control,
            _trace: trace,
        })
    }

    /// Waits until peers have read everything this node sent (after the
    /// workers ended), so the node may leave the mesh. A failed run does
    /// not wait.
    pub(crate) fn finish(self, shared: &Shared) {
        if shared.failed.load(Relaxed) || shared.halted.load(Relaxed) {
            return;
        }
        // The workers dropped their ends of the queues; these are the
        // last, and each sender task finishes its stream once its queue
        // has no sender left.
        drop(self.queues);
        let senders = std::mem::take(&mut *self.senders.lock().unwrap_or_else(|e| e.into_inner()));
        let delivered = smol::block_on(crate::mesh::endpoint::with_timeout(
            DELIVERY_TIMEOUT,
            async {
                for t in senders {
                    t.await;
                }
            },
        ));
        if delivered.is_none() {
            tracing::warn!(
                "peers did not read all this node sent within {DELIVERY_TIMEOUT:?}; leaving anyway"
            );
        }
    }
}

/// Where a sender task writes.
pub(crate) struct Link {
    pub(crate) mesh: Arc<MeshNode>,
    pub(crate) addr: SocketAddr,
    pub(crate) name: String,
    pub(crate) kind: StreamKind,
}

/// The task moving the queue of global worker `worker` onto its stream to
/// member `node`; a failure fails the run unless that member left.
pub(crate) fn spawn_sender(
    link: Link,
    rx: flume::Receiver<Message>,
    shared: &Arc<Shared>,
    node: usize,
    worker: usize,
) -> smol::Task<()> {
    let shared = shared.clone();
    let edge = match link.kind {
        StreamKind::Exchange { edge, .. } => edge,
        _ => 0,
    };
    // On the QUIC thread: each write is then a call into quinn's
    // connection, not a wake-up of another thread (the mesh bench sends
    // 1.6 times as much this way).
    let endpoint = link.mesh.endpoint().clone();
    endpoint.spawn(async move {
        let name = link.name.clone();
        if let Err(e) = send_stream(link, rx, &shared, node, worker).await
            && !shared.failed.load(Relaxed)
            && !shared.halted.load(Relaxed)
        {
            if shared.gone(node) {
                tracing::debug!("exchange {edge} to {name} (left the run): {e}");
                return;
            }
            shared.fail(format!(
                "exchange {edge} to {name}: {e}; a distributed run needs every member until it ends"
            ));
        }
    })
}

/// Moves one queue onto its stream, then waits until the peer has read it
/// all. After the end marker only migrating bins' state may follow: a
/// worker whose input ended still owns bins, and a later step moves them
/// from it on this stream. So the stream stays open until the worker drops
/// its end of the queue (it returned), not just until `End`.
async fn send_stream(
    link: Link,
    rx: flume::Receiver<Message>,
    shared: &Shared,
    node: usize,
    worker: usize,
) -> Result<(), String> {
    let peer = link
        .mesh
        .connect(link.addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut tx = peer
        .open_stream(link.kind)
        .await
        .map_err(|e| e.to_string())?;
    let mut frames = Vec::with_capacity(FRAMES_PER_WRITE);
    let mut seq = 0u64;
    let (mut trace, ids) = link_trace(&link.kind, &link.name, true);
    let mut ended = false;
    let chunk_limit = STATE_CHUNK_BYTES.min(tx.max_frame_bytes() / 4);
    loop {
        let Ok(first) = rx.recv_async().await else {
            if ended {
                break;
            }
            // The worker is gone without an end: the run failed or halted.
            return Ok(());
        };
        if ended && !matches!(first.body, Body::State { .. }) {
            return Err("a message other than a bin's state after the end marker".into());
        }
        frames.clear();
        let mut next = Some(first);
        while let Some(msg) = next {
            trace.received(msg.trace);
            let frame = match msg.body {
                Body::Batch(b) => {
                    let mut bytes = Vec::new();
                    let t = trace.begin();
                    wire::encode(&b, clock::now_ns(), &mut bytes);
                    trace.end(t, Kind::Serialization, 0);
                    seq += 1;
                    trace.sent(if t != 0 { ids(seq) } else { 0 });
                    Frame::Data(DataBatch {
                        seq,
                        records: b.len() as u32,
                        bytes,
                    })
                }
                Body::Watermark(w) => Frame::Marker(Marker::Watermark(w)),
                Body::Barrier(id) => Frame::Marker(Marker::Barrier(id)),
                Body::End => {
                    ended = true;
                    Frame::Marker(Marker::End)
                }
                Body::Marker(epoch) => Frame::Marker(Marker::Migration(epoch)),
                Body::State {
                    bin,
                    epoch,
                    entries,
                } => {
                    // Its own write: the chunks may be many.
                    if !frames.is_empty() {
                        tx.send_many(&frames).await.map_err(|e| e.to_string())?;
                        frames.clear();
                    }
                    let chunks = super::bin_wire::encode_chunks(&entries, chunk_limit);
                    let n = chunks.len();
                    for (index, bytes) in chunks.into_iter().enumerate() {
                        let frame = Frame::BinState(BinState {
                            epoch,
                            bin,
                            index: index as u32,
                            last: index + 1 == n,
                            bytes,
                        });
                        tx.send(&frame)
                            .await
                            .map_err(|e| format!("state of bin {bin}: {e}"))?;
                    }
                    next = rx.try_recv().ok();
                    continue;
                }
            };
            frames.push(frame);
            if ended || frames.len() == FRAMES_PER_WRITE {
                break;
            }
            next = rx.try_recv().ok();
        }
        // The worker may be parked on this queue being full.
        if rx.len() + frames.len() >= shared.channel_capacity {
            shared.wake(worker);
        }
        tx.send_many(&frames).await.map_err(|e| e.to_string())?;
    }
    // A member that left reads nothing more: waiting for it would last
    // until the connection times out.
    if shared.peer_left(node) {
        return Ok(());
    }
    // The end marker is written. A peer closes its connections only after
    // every one of its workers has ended, which needs this stream's end
    // marker: a close now (the peer leaving) is not a loss.
    if let Err(e) = tx.finish_and_wait().await {
        tracing::debug!("after the end marker to {}: {e}", link.name);
    }
    Ok(())
}

/// The wire id of batch `seq` on one stream (see `trace::wire_id`).
type WireIds = Box<dyn Fn(u64) -> u64 + Send>;

/// The trace lane of an exchange stream to (`outgoing`) or from `peer`.
fn link_trace(kind: &StreamKind, peer: &str, outgoing: bool) -> (LaneTrace, WireIds) {
    let (epoch, edge, from, to) = match *kind {
        StreamKind::Exchange {
            epoch,
            edge,
            sender,
            receiver,
        } => (epoch, edge as usize, sender as usize, receiver as usize),
        _ => (0, 0, 0, 0),
    };
    let name = LaneName::Link {
        peer: peer.to_string(),
        outgoing,
        edge,
        from,
        to,
    };
    (
        LaneTrace::new(name, Vec::new()),
        Box::new(move |seq| wire_id(epoch, edge, from, to, seq)),
    )
}

/// Takes the streams peers open and starts a reader for each exchange
/// stream, after checking it belongs to this run.
struct Dispatch {
    /// The assignment grows when a node joins.
    hook: Arc<super::join::Hook>,
    /// Readers run on its QUIC thread, as senders do.
    mesh: Arc<MeshNode>,
    me: usize,
    edges: Vec<RemoteEdge>,
    shared: Arc<Shared>,
}

impl Dispatch {
    /// Until the mesh closes: a node may join the run at any time.
    async fn run(self, pending: Vec<IncomingStream>, incoming: flume::Receiver<IncomingStream>) {
        let mut seen = HashSet::new();
        let mut pending = pending.into_iter();
        loop {
            let stream = match pending.next() {
                Some(s) => s,
                None => match incoming.recv_async().await {
                    Ok(s) => s,
                    Err(_) => return,
                },
            };
            let peer = stream.receiver.peer().to_string();
            if stream.kind == StreamKind::Trace {
                seen.insert((usize::MAX - 1, usize::MAX, seen.len()));
                smol::spawn(read_trace(stream.receiver)).detach();
                continue;
            }
            if stream.kind == StreamKind::Control {
                seen.insert((usize::MAX, usize::MAX, seen.len()));
                smol::spawn(super::migration_mesh::read_control(
                    stream.receiver,
                    self.shared.clone(),
                ))
                .detach();
                continue;
            }
            let StreamKind::Exchange {
                epoch,
                edge,
                sender,
                receiver,
            } = stream.kind
            else {
                tracing::debug!("ignoring a {:?} stream from {peer}", stream.kind);
                continue;
            };
            let (edge, sender, receiver) = (edge as usize, sender as usize, receiver as usize);
            let a = self.hook.assignment();
            let a = &a;
            let total = a.total_workers();
            let first = a.first[self.me];
            let local = a.members[self.me].workers as usize;
            let problem = if epoch != a.epoch {
                Some(format!(
                    "it sends under assignment epoch {epoch}, this node runs epoch {}",
                    a.epoch
                ))
            } else if edge >= self.edges.len() {
                Some(format!(
                    "it sends on exchange {edge}, this pipeline has {}; do both run the same pipeline?",
                    self.edges.len()
                ))
            } else if !(first..first + local).contains(&receiver)
                || sender >= total
                || a.node_of_worker(sender) == self.me
            {
                Some(format!(
                    "it sends from worker {sender} to worker {receiver}, which do not match the assignment ({a})"
                ))
            } else if !seen.insert((edge, sender, receiver)) {
                Some(format!(
                    "it opened the stream of exchange {edge} from worker {sender} to {receiver} twice"
                ))
            } else {
                None
            };
            if let Some(p) = problem {
                self.shared
                    .fail(format!("refusing a data stream from {peer}: {p}"));
                return;
            }
            let wake = {
                let shared = self.shared.clone();
                Box::new(move || shared.wake(receiver))
            };
            let reader = Reader {
                trace: link_trace(&stream.kind, &peer, false),
                rx: Incoming::new(stream.receiver),
                schema: self.edges[edge].schema.clone(),
                inbox: self.edges[edge].inboxes[receiver - first].clone(),
                sender: sender as u32,
                wake,
            };
            let shared = self.shared.clone();
            let from = a.node_of_worker(sender);
            let endpoint = self.mesh.endpoint();
            endpoint.spawn(async move {
                if let Err(e) = reader.run().await
                    && !shared.failed.load(Relaxed)
                    && !shared.halted.load(Relaxed)
                    && !shared.gone(from)
                {
                    shared.fail(format!(
                        "exchange {edge} from {peer}: {e}; a distributed run needs every member until it ends"
                    ));
                }
            })
            .detach();
        }
    }
}

/// Opens a trace stream to every other member, fed by the trace collector
/// (`trace::peers`) until the run ends.
fn start_trace(
    cluster: &Cluster,
    shared: &Arc<Shared>,
) -> (Vec<smol::Task<()>>, crate::trace::peers::Attached) {
    let a = &cluster.assignment;
    let mut queues = Vec::new();
    let mut tasks = Vec::new();
    for node in (0..a.members.len()).filter(|&n| n != cluster.me && !cluster.left[n]) {
        let (tx, rx) = flume::bounded(crate::trace::peers::PEER_QUEUE);
        let name = a.members[node].name.clone();
        queues.push((name.clone(), tx));
        let (mesh, addr, shared) = (cluster.mesh.clone(), cluster.addrs[node], shared.clone());
        tasks.push(smol::spawn(async move {
            let sent = async {
                let peer = mesh.connect(addr).await.map_err(|e| e.to_string())?;
                let mut tx = peer
                    .open_stream(StreamKind::Trace)
                    .await
                    .map_err(|e| e.to_string())?;
                while let Ok(msg) = rx.recv_async().await {
                    tx.send(&Frame::Trace(msg))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                Ok::<(), String>(())
            };
            if let Err(e) = sent.await
                && !shared.failed.load(Relaxed)
                && !shared.halted.load(Relaxed)
                && !shared.gone(node)
            {
                tracing::warn!("trace stream to {name}: {e}; its analysis misses this node");
            }
        }));
    }
    (tasks, crate::trace::peers::attach(queues))
}

/// Reads a member's trace stream. A frame that is not a trace message
/// closes it with an error naming the peer; the run goes on.
async fn read_trace(mut rx: FrameReceiver) {
    let (peer, name) = (rx.peer().to_string(), rx.peer().name.clone());
    loop {
        match rx.recv().await {
            Ok(Some(Frame::Trace(msg))) => crate::trace::peers::received(&name, msg),
            Ok(Some(other)) => {
                tracing::error!("closing the trace stream from {peer}: unexpected frame {other:?}");
                return;
            }
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("trace stream from {peer}: {e}");
                return;
            }
        }
    }
}

/// A stream as its reader takes it: straight from the mesh, or, for tests
/// of a slow link, each frame held for a while after it arrived, as a link
/// with that much more latency would (frames keep flowing meanwhile; only
/// their delivery is late). In the receiving member's environment:
/// `EDDY_TEST_LINK_DELAY=50ms` delays every exchange stream,
/// `EDDY_TEST_CONTROL_DELAY=50ms` every migration control stream (whose
/// messages then come after the data sent with them).
pub(super) enum Incoming {
    Direct(FrameReceiver),
    Delayed {
        rx: flume::Receiver<(std::time::Instant, Result<Option<Frame>, String>)>,
        delay: Duration,
        _pump: smol::Task<()>,
    },
}

/// The delay test hook `var` asks for, said once.
fn test_delay(var: &str, what: &str) -> Option<Duration> {
    let text = std::env::var(var).ok()?;
    let d = crate::config::parse_duration(&text)
        .map_err(|e| tracing::error!("{var}={text:?}: {e}; not delaying"))
        .ok()?;
    tracing::warn!("test hook: every {what} into this member is delayed {d:?}");
    Some(d)
}

impl Incoming {
    fn new(rx: FrameReceiver) -> Incoming {
        static DELAY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
        let delay = *DELAY.get_or_init(|| test_delay("EDDY_TEST_LINK_DELAY", "exchange stream"));
        Incoming::delayed(rx, delay)
    }

    pub(super) fn control(rx: FrameReceiver) -> Incoming {
        static DELAY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
        let delay = *DELAY.get_or_init(|| test_delay("EDDY_TEST_CONTROL_DELAY", "control stream"));
        Incoming::delayed(rx, delay)
    }

    fn delayed(rx: FrameReceiver, delay: Option<Duration>) -> Incoming {
        let Some(delay) = delay else {
            return Incoming::Direct(rx);
        };
        // Bounded: a reader that stops taking still stops the sender.
        let (tx, delayed) = flume::bounded(1024);
        let pump = smol::spawn(async move {
            let mut rx = rx;
            loop {
                let frame = rx.recv().await.map_err(|e| e.to_string());
                let last = !matches!(frame, Ok(Some(_)));
                if tx
                    .send_async((std::time::Instant::now(), frame))
                    .await
                    .is_err()
                    || last
                {
                    return;
                }
            }
        });
        Incoming::Delayed {
            rx: delayed,
            delay,
            _pump: pump,
        }
    }

    pub(super) async fn recv(&mut self) -> Result<Option<Frame>, String> {
        match self {
            Incoming::Direct(rx) => rx.recv().await.map_err(|e| e.to_string()),
            Incoming::Delayed { rx, delay, .. } => {
                let (arrived, frame) = rx
                    .recv_async()
                    .await
                    .map_err(|_| "the delayed stream's reader stopped".to_string())?;
                smol::Timer::at(arrived + *delay).await;
                frame
            }
        }
    }
}

/// Reads one exchange stream into a worker's inbox.
struct Reader {
    rx: Incoming,
    schema: SchemaRef,
    inbox: flume::Sender<Message>,
    sender: u32,
    /// Wakes the receiving worker.
    wake: Box<dyn Fn() + Send>,
    /// This stream's trace lane, and the wire id of each batch.
    trace: (LaneTrace, WireIds),
}

impl Reader {
    async fn run(mut self) -> Result<(), String> {
        let mut ended = false;
        // A migrating bin's state being put together: (epoch, bin, next
        // chunk index, entries).
        let mut state: Option<(u64, u32, u32, crate::state::BinEntries)> = None;
        let (trace, ids) = &mut self.trace;
        loop {
            let frame = self.rx.recv().await?;
            let body = match frame {
                None if ended && state.is_none() => return Ok(()),
                None if ended => return Err("the stream ended amid a bin's state chunks".into()),
                None => return Err("the stream ended before its end marker".into()),
                // A bin's state may follow `End` (see `send_stream`).
                Some(ref f) if ended && !matches!(f, Frame::BinState(_)) => {
                    return Err("data after the end marker".into());
                }
                Some(ref f) if state.is_some() && !matches!(f, Frame::BinState(_)) => {
                    return Err("a frame amid a bin's state chunks".into());
                }
                Some(Frame::Data(d)) => {
                    let t = trace.begin();
                    if t != 0 {
                        trace.received(ids(d.seq));
                    }
                    let b = wire::decode(&d.bytes, &self.schema, clock::now_ns())
                        .map_err(|e| format!("batch {}: {e}", d.seq))?;
                    trace.end(t, Kind::Deserialization, 0);
                    Body::Batch(b)
                }
                Some(Frame::Marker(Marker::Watermark(w))) => Body::Watermark(w),
                Some(Frame::Marker(Marker::Barrier(id))) => Body::Barrier(id),
                Some(Frame::Marker(Marker::End)) => {
                    ended = true;
                    Body::End
                }
                Some(Frame::Marker(Marker::Migration(epoch))) => Body::Marker(epoch),
                Some(Frame::BinState(c)) => {
                    let (epoch, bin, index, mut entries) =
                        state
                            .take()
                            .unwrap_or((c.epoch, c.bin, 0, Default::default()));
                    if (epoch, bin, index) != (c.epoch, c.bin, c.index) {
                        return Err(format!(
                            "state chunk {} of bin {} (epoch {}) where chunk {index} of bin {bin} (epoch {epoch}) was due",
                            c.index, c.bin, c.epoch
                        ));
                    }
                    super::bin_wire::decode_chunk(&c.bytes, &mut entries)
                        .map_err(|e| format!("state of bin {bin}: {e}"))?;
                    if !c.last {
                        state = Some((epoch, bin, index + 1, entries));
                        continue;
                    }
                    Body::State {
                        bin,
                        epoch,
                        entries,
                    }
                }
                Some(other) => return Err(format!("unexpected frame {other:?}")),
            };
            let id = trace.send_id(matches!(body, Body::Batch(_)));
            let msg = Message {
                from: self.sender,
                body,
                trace: id,
            };
            // Bounded: while the inbox is full this stream is not read, and
            // QUIC flow control holds the sender back.
            if self.inbox.send_async(msg).await.is_err() {
                return Ok(()); // the worker is gone: the run ended or failed
            }
            trace.sent(id);
            (self.wake)();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::data::{BatchBuilder, DataType, Field, Schema};
    use crate::mesh::ca;
    use crate::mesh::endpoint::{EndpointOptions, MeshEndpoint, with_timeout};
    use crate::mesh::identity::NodeIdentity;

    fn endpoint(ca: &ca::CertAndKey, name: &str) -> MeshEndpoint {
        let node = ca::issue_node(ca, "blue", name, 1).expect("node cert");
        let id = NodeIdentity::from_pem(&ca.cert_pem, &node, None).expect("identity");
        MeshEndpoint::bind(
            &id,
            SocketAddr::from(([127, 0, 0, 1], 0)),
            EndpointOptions::default(),
        )
        .expect("bind")
    }

    /// About 64 KiB: row `i` of every batch holds `seq`.
    fn batch(schema: &SchemaRef, seq: i64) -> Vec<u8> {
        let mut b = BatchBuilder::new(schema.clone(), 2048, false);
        for _ in 0..2048 {
            b.column_mut(0).push_int(seq);
            b.column_mut(1).push_str("0123456789abcdef0123456789abcdef");
            b.finish_row(0, 0);
        }
        let mut bytes = Vec::new();
        wire::encode(&b.take(), 0, &mut bytes);
        bytes
    }

    /// Backpressure end to end over real QUIC: while nobody drains the
    /// worker's inbox, the reader stops at the inbox's capacity and the
    /// writer stops once QUIC's window is full (well before all frames are
    /// sent); once the inbox drains, everything arrives, in order.
    #[test]
    fn a_full_inbox_stops_the_stream() {
        // ~33 MB, far over QUIC's 8 MiB stream receive window (`mesh::endpoint`).
        const FRAMES: i64 = 500;
        const INBOX: usize = 4;
        let ca = ca::generate_ca("blue", 1).expect("ca");
        let (a, b) = (endpoint(&ca, "a"), endpoint(&ca, "b"));
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int),
            Field::new("pad", DataType::Str),
        ]));
        let (inbox_tx, inbox) = flume::bounded(INBOX);
        let sent = Arc::new(std::sync::atomic::AtomicI64::new(0));
        smol::block_on(async {
            let to_b = a.connect(b.local_addr()).await.expect("connect");
            let from_a = b.accept().await.expect("accept");
            let kind = StreamKind::Exchange {
                epoch: 1,
                edge: 0,
                sender: 0,
                receiver: 1,
            };
            let mut tx = to_b.open_stream(kind).await.expect("open");
            let writer = {
                let (schema, sent) = (schema.clone(), sent.clone());
                smol::spawn(async move {
                    for seq in 0..FRAMES {
                        let bytes = batch(&schema, seq);
                        let frame = Frame::Data(DataBatch {
                            seq: seq as u64,
                            records: 2048,
                            bytes,
                        });
                        tx.send(&frame).await.expect("send");
                        sent.store(seq + 1, Relaxed);
                    }
                    tx.send(&Frame::Marker(Marker::End)).await.expect("end");
                    tx.finish_and_wait().await.expect("delivered");
                })
            };
            let (got_kind, rx) = from_a.accept_stream().await.expect("accept stream");
            assert_eq!(got_kind, kind);
            let reader = Reader {
                rx: Incoming::Direct(rx),
                schema: schema.clone(),
                inbox: inbox_tx,
                sender: 0,
                wake: Box::new(|| {}),
                trace: link_trace(&kind, "a", false),
            };
            let reading = smol::spawn(reader.run());

            // Nobody drains: both ends stop.
            let mut last = -1;
            loop {
                smol::Timer::after(Duration::from_millis(300)).await;
                let now = sent.load(Relaxed);
                if now == last {
                    break;
                }
                last = now;
            }
            eprintln!("held back after {last} of {FRAMES} frames");
            assert_eq!(inbox.len(), INBOX, "the reader fills the inbox and waits");
            assert!(
                last < FRAMES / 2,
                "the writer should be held back by flow control, but sent {last} of {FRAMES} frames"
            );

            // Drain: everything arrives, in order, then the end.
            let mut seq = 0;
            loop {
                let msg = with_timeout(Duration::from_secs(10), inbox.recv_async())
                    .await
                    .expect("arrives")
                    .expect("open");
                match msg.body {
                    Body::Batch(b) => {
                        assert_eq!(b.column(0).int(0), Some(seq));
                        assert_eq!(b.len(), 2048);
                        seq += 1;
                    }
                    Body::End => break,
                    _ => panic!("only batches and the end were sent"),
                }
            }
            assert_eq!(seq, FRAMES);
            reading.await.expect("the stream ends cleanly");
            writer.await;
        });
    }

    /// Migration markers and a bin's state cut into chunks cross a real
    /// QUIC stream in order with the batches, and the reader puts the
    /// state together again; a chunk out of order closes the stream with
    /// an error that says so.
    #[test]
    fn markers_and_chunked_state_cross_in_order() {
        let ca = ca::generate_ca("blue", 1).expect("ca");
        let (a, b) = (endpoint(&ca, "a"), endpoint(&ca, "b"));
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::Int),
            Field::new("pad", DataType::Str),
        ]));
        let entries: crate::state::BinEntries =
            (0..5000u32).map(|i| (i.to_le_bytes(), [7; 100])).collect();
        let chunks = super::super::bin_wire::encode_chunks(&entries, 64 << 10);
        assert!(chunks.len() > 5);
        smol::block_on(async {
            let to_b = a.connect(b.local_addr()).await.expect("connect");
            let from_a = b.accept().await.expect("accept");
            let kind = StreamKind::Exchange {
                epoch: 1,
                edge: 0,
                sender: 0,
                receiver: 1,
            };
            let mut tx = to_b.open_stream(kind).await.expect("open");
            let mut frames = vec![
                Frame::Data(DataBatch {
                    seq: 1,
                    records: 2048,
                    bytes: batch(&schema, 1),
                }),
                Frame::Marker(Marker::Migration(3)),
            ];
            let n = chunks.len();
            for (i, bytes) in chunks.iter().enumerate() {
                frames.push(Frame::BinState(BinState {
                    epoch: 3,
                    bin: 9,
                    index: i as u32,
                    last: i + 1 == n,
                    bytes: bytes.clone(),
                }));
            }
            frames.push(Frame::Marker(Marker::End));
            let writer = smol::spawn(async move {
                tx.send_many(&frames).await.expect("send");
                tx.finish_and_wait().await.expect("delivered");
            });
            let (_, rx) = from_a.accept_stream().await.expect("accept stream");
            let (inbox_tx, inbox) = flume::unbounded();
            let reader = Reader {
                rx: Incoming::Direct(rx),
                schema: schema.clone(),
                inbox: inbox_tx,
                sender: 0,
                wake: Box::new(|| {}),
                trace: link_trace(&kind, "a", false),
            };
            reader.run().await.expect("the stream ends cleanly");
            writer.await;
            let got: Vec<Body> = inbox.drain().map(|m| m.body).collect();
            assert_eq!(got.len(), 4, "batch, marker, state, end");
            assert!(matches!(got[0], Body::Batch(_)));
            assert!(matches!(got[1], Body::Marker(3)));
            match &got[2] {
                Body::State {
                    bin: 9,
                    epoch: 3,
                    entries: e,
                } => assert!(*e == entries, "the state arrives whole"),
                _ => panic!("the state comes third"),
            }
            assert!(matches!(got[3], Body::End));

            // A chunk out of order.
            let mut tx = to_b.open_stream(kind).await.expect("open");
            let bad = Frame::BinState(BinState {
                epoch: 3,
                bin: 9,
                index: 1,
                last: true,
                bytes: Vec::new(),
            });
            tx.send(&bad).await.expect("send");
            let (_, rx) = from_a.accept_stream().await.expect("accept stream");
            let (inbox_tx, _inbox) = flume::unbounded();
            let reader = Reader {
                rx: Incoming::Direct(rx),
                schema,
                inbox: inbox_tx,
                sender: 0,
                wake: Box::new(|| {}),
                trace: link_trace(&kind, "a", false),
            };
            let err = reader.run().await.expect_err("refused");
            assert!(err.contains("state chunk 1 of bin 9"), "{err}");
        });
    }
}
