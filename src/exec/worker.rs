//! One worker thread: an instance of every operator, driven by its sources
//! and by batches other workers exchange with it.
//!
//! Operators between two exchanges run fused: a batch is pushed through them
//! by direct calls. At a keyed exchange each row goes to the worker owning
//! its bin; rows this worker owns are delivered directly, the rest travel
//! over bounded channels.
//!
//! Deadlock freedom with bounded channels: a worker blocked sending on an
//! exchange into node `n` keeps draining its own inboxes for nodes `>= n`
//! (nodes are in topological order). Handling those can only send to nodes
//! further downstream, so among all blocked workers the one blocked on the
//! most downstream exchange always finds its receiver draining it.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::Shared;
use super::metrics::OpMetrics;
use super::operator::{OpCtx, Operator, SourcePoll, SourceTask};
use crate::data::{Batch, KeySpec};
use crate::kernel::hash::bin_of;
use crate::kernel::watermark::{BoundedOutOfOrderness, WATERMARK_END, WATERMARK_START};
use crate::trace::Kind::{Checkpoint, Processing, Waiting};

/// What travels between workers on an exchange channel.
pub(crate) struct Message {
    pub(crate) from: u32,
    pub(crate) body: Body,
    /// The trace's message id (0 while tracing is off).
    pub(crate) trace: u64,
}

pub(crate) enum Body {
    Batch(Batch),
    Watermark(i64),
    /// Checkpoint barrier `id`: everything before it belongs to checkpoint
    /// `id`.
    Barrier(u64),
    End,
    /// Live migration: the sender's routes switched to epoch's table;
    /// everything before it was routed the old way.
    Marker(u64),
    /// Live migration: the whole state of a bin, from its old owner.
    State {
        bin: u32,
        epoch: u64,
        entries: crate::state::BinEntries,
    },
}

/// Where one output of a node goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Route {
    /// The consumer's instance on this worker.
    Local { node: usize, port: usize },
    /// Exchanged by key over exchange `edge`.
    Exchange { edge: usize },
}

/// One keyed exchange into `(node, port)`.
pub(crate) struct Edge {
    pub(crate) node: usize,
    pub(crate) port: usize,
    pub(crate) key: KeySpec,
    /// One sender per global worker (including this one, unused): the
    /// inbox of a worker of this node, or the queue of the stream to a
    /// worker of another node (`remote.rs`).
    pub(crate) senders: Vec<flume::Sender<Message>>,
    /// This worker's inbox for the edge.
    pub(crate) inbox: flume::Receiver<Message>,
}

/// Per input port: the watermark, newest barrier and end of each
/// upstream sender.
pub(crate) struct Port {
    pub(crate) watermarks: Vec<i64>,
    pub(crate) barriers: Vec<u64>,
    pub(crate) ended: Vec<bool>,
}

impl Port {
    pub(crate) fn new(senders: usize, checkpoint: u64) -> Port {
        Port {
            watermarks: vec![WATERMARK_START; senders],
            barriers: vec![checkpoint; senders],
            ended: vec![false; senders],
        }
    }
}

pub(crate) struct NodeState {
    pub(crate) component: Arc<str>,
    /// `None` for sources, and while the operator is running.
    pub(crate) op: Option<Box<dyn Operator>>,
    pub(crate) ports: Vec<Port>,
    pub(crate) watermark: i64,
    pub(crate) ended: bool,
    pub(crate) routes: Vec<Vec<Route>>,
    pub(crate) metrics: Arc<OpMetrics>,
    /// Reused output buffer.
    pub(crate) emitted: Vec<(usize, Batch)>,
    /// The newest checkpoint barrier this instance has passed, and the
    /// newest it has seen on any input.
    pub(crate) passed: u64,
    pub(crate) pending: u64,
}

pub(crate) struct SourceState {
    pub(crate) node: usize,
    pub(crate) task: Box<dyn SourceTask>,
    /// `None` for untimed sources.
    pub(crate) watermark: Option<BoundedOutOfOrderness>,
    /// An advanced watermark not sent downstream yet: it goes at most once
    /// per `watermark_interval`, not with every batch, because every
    /// advance is an operator call downstream and a message to every
    /// other worker (with small batches, most of a worker's messages).
    pub(crate) held_watermark: Option<i64>,
    /// When this source's watermark last went downstream.
    pub(crate) watermark_sent: Option<Instant>,
    /// Samples the source's records for the tuner's profiling runs.
    pub(crate) recorder: Option<Arc<super::recorder::Recorder>>,
    /// Watermark alignment with the other workers' shares of this source.
    pub(crate) align: Option<Arc<super::align::Alignment>>,
}

pub(crate) struct Worker {
    /// Index among this node's workers (its thread).
    pub(crate) id: usize,
    /// Index among the run's workers (senders, bins).
    pub(crate) global: usize,
    pub(crate) shared: Arc<Shared>,
    pub(crate) nodes: Vec<NodeState>,
    pub(crate) sources: Vec<SourceState>,
    pub(crate) edges: Vec<Edge>,
    /// Exchange edges ordered by target node, most downstream first.
    pub(crate) drain_order: Vec<usize>,
    pub(crate) rows_by_worker: Vec<Vec<u32>>,
    /// The newest checkpoint whose barrier this worker's sources injected.
    pub(crate) injected: u64,
    /// Live migration: the router's table (bin -> global worker) and what
    /// moving bins needs (`migration.rs`).
    pub(crate) mig: super::migration::WorkerMigration,
    pub(crate) trace: crate::trace::LaneTrace,
    /// For systemd's watchdog (`heartbeat.rs`): beats once per loop turn,
    /// and names the operator a stuck call is in.
    pub(crate) beat: super::heartbeat::Heartbeat,
}

/// Messages handled per inbox per round, so that sources keep a fair share.
const DRAIN_BATCH: usize = 16;
/// Longest sleep while idle; a safety net, wakeups are explicit.
const IDLE_PARK: Duration = Duration::from_millis(50);
/// How soon a worker whose source share waits for the others' (watermark
/// alignment) looks again: about the time a share takes for a batch.
const ALIGN_RECHECK: Duration = Duration::from_micros(200);
/// Sleep while blocked on a full channel with nothing else to do.
const BLOCKED_PARK: Duration = Duration::from_micros(200);

impl Worker {
    /// Runs until every operator instance on this worker has ended.
    pub(crate) fn run(mut self) {
        self.restore();
        loop {
            self.beat.beat();
            if self.shared.failed.load(Relaxed) || self.shared.halted.load(Relaxed) {
                return;
            }
            if self.shared.left.load(Relaxed) {
                // This member drained: it owns no bin and the others know
                // it leaves, so nothing more is due here. The `End`s held
                // back go out, and every instance ends now, in plan order,
                // without waiting for the others' `End`.
                for (node, edge) in std::mem::take(&mut self.mig.held_ends) {
                    self.end_edge(node, edge);
                }
                for node in 0..self.nodes.len() {
                    self.end_node(node);
                }
                return;
            }
            let mut progressed = self.poll_migration();
            progressed |= self.drain_inboxes(0);
            let mut wake_at: Option<Instant> = None;
            let stop = self.shared.stop.load(Relaxed);
            // A requested checkpoint: barriers go out first, then the
            // sources wait until every instance has passed it (see
            // `checkpoint.rs` for why that makes alignment free).
            let mut paused = false;
            if let Some(cp) = self.shared.checkpoints.clone() {
                let requested = cp.requested();
                let migrating = self
                    .shared
                    .migration
                    .as_ref()
                    .is_some_and(|m| m.moving_bins());
                if requested > self.injected && !migrating {
                    self.inject_barrier(requested);
                    progressed = true;
                }
                paused = cp.aligned() < self.injected
                    || self.injected >= self.shared.last_barrier.load(Relaxed);
            }
            for s in 0..self.sources.len() {
                if paused {
                    break;
                }
                let node = self.sources[s].node;
                if self.nodes[node].ended {
                    continue;
                }
                if self.sources[s]
                    .align
                    .as_ref()
                    .is_some_and(|a| a.ahead(self.id))
                {
                    // The others' progress does not wake this thread: look
                    // again soon. What it produced still goes downstream.
                    wake_at = min_time(wake_at, Some(Instant::now() + ALIGN_RECHECK));
                    if let Some(due) = self.send_held_watermark(s) {
                        wake_at = min_time(wake_at, Some(due));
                    }
                    continue;
                }
                let start = super::metrics::instrumented().then(Instant::now);
                let t = self.trace.begin();
                let outer = self.beat.enter(node);
                let polled = self.sources[s].task.poll(stop);
                self.beat.leave(outer);
                if !matches!(polled, SourcePoll::Pending(_)) {
                    self.trace.end(t, Processing, node); // an empty poll is loop
                }
                if let Some(start) = start {
                    OpMetrics::add(
                        &self.nodes[node].metrics.useful_ns,
                        start.elapsed().as_nanos() as u64,
                    );
                }
                match polled {
                    SourcePoll::Batch(batch) => {
                        progressed = true;
                        self.source_batch(s, batch);
                    }
                    SourcePoll::Pending(at) => {
                        wake_at = min_time(wake_at, at);
                        self.align_free(s);
                    }
                    SourcePoll::Ended => {
                        progressed = true;
                        self.align_free(s);
                        self.end_node(node);
                    }
                }
                if let Some(due) = self.send_held_watermark(s) {
                    wake_at = min_time(wake_at, Some(due));
                }
            }
            if self.nodes.iter().all(|n| n.ended) && self.may_finish() {
                return;
            }
            if !progressed {
                let idle = Instant::now();
                let timeout = wake_at.map_or(IDLE_PARK, |t| {
                    t.saturating_duration_since(idle).min(IDLE_PARK)
                });
                let t = self.trace.begin();
                std::thread::park_timeout(timeout);
                self.trace.end(t, Waiting, 0);
                let waited = idle.elapsed().as_nanos() as u64;
                for n in &self.nodes {
                    if !n.ended {
                        OpMetrics::add(&n.metrics.waiting_ns, waited);
                    }
                }
            }
        }
    }

    fn source_batch(&mut self, s: usize, batch: Batch) {
        let node = self.sources[s].node;
        if super::metrics::instrumented() {
            OpMetrics::add(&self.nodes[node].metrics.records_out, batch.len() as u64);
        }
        if let Some(r) = &self.sources[s].recorder {
            r.offer(self.id, &batch, super::clock::now_ns());
        }
        let advanced = self.sources[s].watermark.as_mut().and_then(|w| {
            let before = w.watermark();
            batch.event_time().iter().for_each(|&t| w.observe(t));
            let after = w.watermark();
            (after > before).then_some(after)
        });
        if let (Some(a), Some(w)) = (&self.sources[s].align, &self.sources[s].watermark) {
            a.advanced(self.id, w.watermark());
        }
        self.nodes[node].emitted.push((0, batch));
        self.route_emitted(node);
        if advanced.is_some() {
            self.sources[s].held_watermark = advanced;
            self.send_held_watermark(s);
        }
    }

    /// Source `s` had nothing to give or ended: it holds no other
    /// worker's share back.
    fn align_free(&self, s: usize) {
        if let Some(a) = &self.sources[s].align {
            a.free(self.id);
        }
    }

    /// Sends source `s`'s held watermark downstream if its interval has
    /// passed; else returns when it will have.
    fn send_held_watermark(&mut self, s: usize) -> Option<Instant> {
        let source = &mut self.sources[s];
        let wm = source.held_watermark?;
        let now = Instant::now();
        if let Some(due) = source
            .watermark_sent
            .map(|t| t + self.shared.watermark_interval)
            .filter(|&due| due > now)
        {
            return Some(due);
        }
        source.held_watermark = None;
        source.watermark_sent = Some(now);
        let node = source.node;
        if self.nodes[node].ended || wm <= self.nodes[node].watermark {
            return None;
        }
        self.nodes[node].watermark = wm;
        self.nodes[node].metrics.watermark.set(wm);
        self.propagate_watermark(node, wm);
        None
    }

    /// Runs `node`'s operator on a batch arriving at `port`.
    pub(super) fn deliver(&mut self, node: usize, port: usize, batch: Batch) {
        let rows = batch.len() as u64;
        if let Some(probe) = self.shared.probe.get().filter(|p| p.node == node) {
            let emitted = batch.ingest_ns().iter().copied().min().unwrap_or(0);
            let probe = probe.clone();
            self.call(node, rows, |op, ctx| op.on_batch(port, batch, ctx));
            let now = super::clock::now_ns();
            let at = probe.origin.elapsed().as_nanos() as u64;
            if let Ok(mut s) = probe.samples[self.id].lock() {
                s.push((at, now.saturating_sub(emitted)));
            }
            return;
        }
        self.call(node, rows, |op, ctx| op.on_batch(port, batch, ctx));
    }

    /// Calls into `node`'s operator, measures it, and routes what it emits.
    pub(super) fn call(
        &mut self,
        node: usize,
        rows_in: u64,
        f: impl FnOnce(&mut dyn Operator, &mut OpCtx<'_>),
    ) {
        self.call_as(node, rows_in, Processing, f);
    }

    /// As [`call`](Self::call), traced as `activity` (live migration's
    /// installs are not processing).
    pub(super) fn call_as(
        &mut self,
        node: usize,
        rows_in: u64,
        activity: crate::trace::Kind,
        f: impl FnOnce(&mut dyn Operator, &mut OpCtx<'_>),
    ) {
        let mut t = self.trace.begin();
        let state = &mut self.nodes[node];
        let Some(mut op) = state.op.take() else {
            // An operator is never re-entered: the drain rule only reaches
            // nodes downstream of the one running.
            debug_assert!(false, "operator {} re-entered", state.component);
            return;
        };
        let mut out = std::mem::take(&mut state.emitted);
        let (component, metrics) = (state.component.clone(), state.metrics.clone());
        let shared = self.shared.clone();
        let start = super::metrics::instrumented().then(Instant::now);
        let outer = self.beat.enter(node);
        // What went downstream during the call: its time is the downstream
        // operators' (they measure it themselves), not this one's.
        let mut forwarded_ns = 0u64;
        let (blocked_ns, failure) = {
            let mut forward = |batches: &mut Vec<(usize, Batch)>| {
                let began = Instant::now();
                if start.is_some() {
                    // Counted before downstream counts them in.
                    let rows = batches.iter().map(|(_, b)| b.len() as u64).sum();
                    OpMetrics::add(&metrics.records_out, rows);
                }
                self.trace.end(t, activity, node);
                self.beat.leave(outer);
                self.route_batches(node, batches);
                self.beat.enter(node);
                t = self.trace.begin();
                forwarded_ns += began.elapsed().as_nanos() as u64;
            };
            let mut ctx = OpCtx {
                out: &mut out,
                forward: Some(&mut forward),
                component: &component,
                metrics: &metrics,
                dead_letter: &shared.dead_letter,
                blocked_ns: 0,
                failure: None,
            };
            f(op.as_mut(), &mut ctx);
            (ctx.blocked_ns, ctx.failure.take())
        };
        self.beat.leave(outer);
        if let Some(failure) = failure {
            self.shared.fail(format!("{component}: {failure}"));
        }
        if let Some(start) = start {
            let elapsed = (start.elapsed().as_nanos() as u64).saturating_sub(forwarded_ns);
            OpMetrics::add(&metrics.records_in, rows_in);
            OpMetrics::add(&metrics.useful_ns, elapsed.saturating_sub(blocked_ns));
            OpMetrics::add(&metrics.blocked_ns, blocked_ns);
            OpMetrics::add(
                &metrics.records_out,
                out.iter().map(|(_, b)| b.len() as u64).sum(),
            );
        }
        let state = &mut self.nodes[node];
        state.op = Some(op);
        state.emitted = out;
        self.trace.end(t, activity, node);
        self.route_emitted(node);
    }

    /// Sends what `node` emitted along its routes.
    fn route_emitted(&mut self, node: usize) {
        let mut out = std::mem::take(&mut self.nodes[node].emitted);
        self.route_batches(node, &mut out);
        // Keep the buffer's capacity unless a nested call put one back.
        if self.nodes[node].emitted.is_empty() {
            self.nodes[node].emitted = out;
        }
    }

    /// Sends `out`, emitted by `node`, along its routes, leaving it empty.
    fn route_batches(&mut self, node: usize, out: &mut Vec<(usize, Batch)>) {
        for (port, batch) in out.drain(..) {
            let n_routes = self.nodes[node].routes[port].len();
            let mut batch = Some(batch);
            for r in 0..n_routes {
                let route = self.nodes[node].routes[port][r];
                let b = if r + 1 == n_routes {
                    batch.take().expect("moved once")
                } else {
                    batch.clone().expect("present")
                };
                match route {
                    Route::Local { node: to, port } => self.deliver(to, port, b),
                    Route::Exchange { edge } => self.exchange(node, edge, b),
                }
            }
        }
    }

    /// Splits a batch by the worker owning each row's bin.
    fn exchange(&mut self, from: usize, edge: usize, mut batch: Batch) {
        let workers = self.shared.global_workers;
        let (to, port) = (self.edges[edge].node, self.edges[edge].port);
        let hashes = self.edges[edge].key.hash_rows(&batch);
        if workers == 1 {
            batch.set_key_hash(hashes);
            self.deliver_keyed(to, port, batch);
            return;
        }
        let bins = self.shared.bins;
        let mut rows = std::mem::take(&mut self.rows_by_worker);
        rows.iter_mut().for_each(Vec::clear);
        let table = self.mig.machine.table();
        if rows.is_empty() {
            // Taken by an exchange further up this stack: this worker,
            // blocked on a full channel there, drains its inboxes downstream.
            let owners = table.iter().map(|&w| w as usize + 1).max();
            rows = vec![Vec::new(); owners.unwrap_or(0).max(workers)];
        }
        for (i, &h) in hashes.iter().enumerate() {
            rows[table[bin_of(h, bins) as usize] as usize].push(i as u32);
        }
        batch.set_key_hash(hashes);
        let mut local = None;
        for (w, picked) in rows.iter().enumerate() {
            if picked.is_empty() {
                continue;
            }
            let part = if picked.len() == batch.len() {
                batch.clone()
            } else {
                batch.take_rows(picked)
            };
            if w == self.global {
                local = Some(part);
            } else {
                self.send(from, edge, w, Body::Batch(part));
            }
        }
        self.rows_by_worker = rows;
        if let Some(part) = local {
            self.deliver_keyed(to, port, part);
        }
    }

    /// Sends on an exchange channel; while it is full, drains this worker's
    /// inboxes downstream of the edge (see the module comment).
    pub(super) fn send(&mut self, from: usize, edge: usize, to: usize, body: Body) {
        let trace = self.trace.send_id(matches!(body, Body::Batch(_)));
        let mut msg = Message {
            from: self.global as u32,
            body,
            trace,
        };
        let mut blocked_since: Option<Instant> = None;
        loop {
            match self.edges[edge].senders[to].try_send(msg) {
                Ok(()) => break,
                Err(flume::TrySendError::Disconnected(_)) => return, // that worker failed; the run is failing
                Err(flume::TrySendError::Full(m)) => msg = m,
            }
            blocked_since.get_or_insert_with(Instant::now);
            // Blocked on a full channel is waiting, not stuck: the worker
            // that does not drain it is the one to name.
            self.beat.beat();
            if self.shared.failed.load(Relaxed) {
                return;
            }
            let edge_node = self.edges[edge].node;
            if !self.drain_inboxes(edge_node) {
                let t = self.trace.begin();
                std::thread::park_timeout(BLOCKED_PARK);
                self.trace.end(t, Waiting, 0);
            }
        }
        self.trace.sent(trace);
        self.shared.wake(to);
        if let Some(since) = blocked_since {
            OpMetrics::add(
                &self.nodes[from].metrics.blocked_ns,
                since.elapsed().as_nanos() as u64,
            );
        }
    }

    /// Handles waiting messages of exchanges into nodes `>= min_node`;
    /// returns whether there were any.
    fn drain_inboxes(&mut self, min_node: usize) -> bool {
        let mut any = false;
        for i in 0..self.drain_order.len() {
            let edge = self.drain_order[i];
            if self.edges[edge].node < min_node {
                continue;
            }
            for _ in 0..DRAIN_BATCH {
                let Ok(msg) = self.edges[edge].inbox.try_recv() else {
                    break;
                };
                any = true;
                self.trace.received(msg.trace);
                // The sender may be parked waiting for this space.
                let sender = msg.from as usize;
                if self.edges[edge].inbox.len() + 1 >= self.shared.channel_capacity {
                    self.shared.wake(sender);
                }
                let (node, port) = (self.edges[edge].node, self.edges[edge].port);
                match msg.body {
                    Body::Batch(b) => self.deliver_keyed(node, port, b),
                    Body::Watermark(wm) => self.input_watermark(node, port, sender, wm),
                    Body::Barrier(id) => self.input_barrier(node, port, sender, id),
                    Body::End => self.input_end(node, port, sender),
                    body @ (Body::Marker(_) | Body::State { .. }) => {
                        self.migration_body(node, port, sender, body)
                    }
                }
            }
        }
        any
    }

    /// A sender's watermark on `(node, port)` advanced.
    fn input_watermark(&mut self, node: usize, port: usize, sender: usize, wm: i64) {
        let state = &mut self.nodes[node];
        let slot = &mut state.ports[port].watermarks[sender];
        if wm <= *slot {
            return;
        }
        *slot = wm;
        self.advance_watermark(node);
    }

    /// Advances `node`'s operator to the minimum of its inputs'
    /// watermarks, unless a bin coming to it holds it back.
    pub(super) fn advance_watermark(&mut self, node: usize) {
        if self.watermark_held(node) {
            return;
        }
        let state = &mut self.nodes[node];
        let min = state
            .ports
            .iter()
            .flat_map(|p| p.watermarks.iter().copied())
            .min()
            .unwrap_or(WATERMARK_END);
        if min <= state.watermark {
            return;
        }
        state.watermark = min;
        state.metrics.watermark.set(min);
        self.call(node, 0, |op, ctx| op.on_watermark(min, ctx));
        self.propagate_watermark(node, min);
    }

    fn propagate_watermark(&mut self, node: usize, wm: i64) {
        self.for_each_route(node, |w, route| match route {
            Route::Local { node: to, port } => w.input_watermark(to, port, 0, wm),
            Route::Exchange { edge } => {
                w.broadcast(node, edge, Body::Watermark(wm), |me, to, port| {
                    me.input_watermark(to, port, me.global, wm)
                })
            }
        });
    }

    /// A sender of `(node, port)` has no more data.
    fn input_end(&mut self, node: usize, port: usize, sender: usize) {
        if std::mem::replace(&mut self.nodes[node].ports[port].ended[sender], true) {
            return;
        }
        self.migration_sender_ended(node, port, sender);
        // An ended input no longer holds the watermark back, nor a barrier.
        self.input_watermark(node, port, sender, WATERMARK_END);
        self.try_pass_barrier(node);
        if self.nodes[node]
            .ports
            .iter()
            .all(|p| p.ended.iter().all(|&e| e))
            && !self.defer_end(node)
        {
            self.end_node(node);
        }
    }

    /// Every input of `node` ended (or, for a source, the source did).
    pub(super) fn end_node(&mut self, node: usize) {
        if std::mem::replace(&mut self.nodes[node].ended, true) {
            return;
        }
        if self.nodes[node].op.is_some() {
            self.call(node, 0, |op, ctx| op.on_end(ctx));
        } else if self.nodes[node].watermark < WATERMARK_END {
            // A source: its final watermark fires everything downstream.
            self.nodes[node].watermark = WATERMARK_END;
            self.nodes[node].metrics.watermark.set(WATERMARK_END);
            self.propagate_watermark(node, WATERMARK_END);
        }
        if let Some(cp) = self.shared.checkpoints.clone() {
            // What this instance leaves behind, for the checkpoint that
            // completes the run (and any taken before it).
            let mut snapshot = self.snapshot_node(node, super::checkpoint::FINAL);
            if let Some(s) = self.sources.iter().find(|s| s.node == node) {
                snapshot.position = s.task.position();
            }
            if !self.snapshot_failed(node, &mut snapshot) {
                cp.submit_end(node, self.id, snapshot);
            }
        }
        self.for_each_route(node, |w, route| match route {
            Route::Local { node: to, port } => w.input_end(to, port, 0),
            // A member that drains holds its `End` back: its bins' state
            // still has to go out on these streams, and nothing may follow
            // an `End`. It goes out when the member leaves.
            Route::Exchange { edge } if w.shared.draining.load(Relaxed) => {
                w.mig.held_ends.push((node, edge));
            }
            Route::Exchange { edge } => w.end_edge(node, edge),
        });
    }

    /// Sends `End` on exchange `edge` from `node` (to this worker too).
    pub(super) fn end_edge(&mut self, node: usize, edge: usize) {
        self.shared.ended_exchange.store(true, Relaxed);
        self.broadcast(node, edge, Body::End, |me, to, port| {
            me.input_end(to, port, me.global)
        });
    }

    /// Installs this worker's share of the state in the checkpoint being
    /// restored: the bins it owns, the watermarks.
    fn restore(&mut self) {
        let (Some(cp), Some(record)) = (
            self.shared.checkpoints.clone(),
            self.shared.restored.clone(),
        ) else {
            return;
        };
        for node in 0..self.nodes.len() {
            let Some(op_record) = record.operator(&self.nodes[node].component) else {
                continue;
            };
            self.nodes[node].watermark = op_record.watermark;
            self.nodes[node].metrics.watermark.set(op_record.watermark);
            let Some(op) = self.nodes[node].op.as_mut() else {
                continue;
            };
            op.restore_watermark(op_record.watermark);
            for bin in &op_record.bins {
                if self.shared.assignment[bin.bin as usize] as usize != self.global {
                    continue;
                }
                self.beat.beat();
                let mut entries = Vec::with_capacity(bin.entries as usize);
                for chunk in cp.store().read_bin(&op_record.id, bin) {
                    match chunk {
                        Ok(c) => entries.extend(c.entries),
                        Err(e) => {
                            self.shared.fail(format!(
                                "cannot restore {}: {e}",
                                self.nodes[node].component
                            ));
                            return;
                        }
                    }
                }
                if let Err(e) = op.restore(bin.bin, entries) {
                    self.shared.fail(format!(
                        "the state of {} in checkpoint {} does not fit its config ({e}); if you changed its key or aggregates, remove {} to start over",
                        op_record.id,
                        record.id,
                        cp.store().dir().display()
                    ));
                    return;
                }
            }
        }
    }

    /// Sends barrier `id` from every live source of this worker, with
    /// the source's position.
    fn inject_barrier(&mut self, id: u64) {
        self.injected = id;
        let cp = self
            .shared
            .checkpoints
            .clone()
            .expect("only with checkpoints");
        for s in 0..self.sources.len() {
            let node = self.sources[s].node;
            if self.nodes[node].ended {
                continue;
            }
            let snapshot = super::checkpoint::Snapshot {
                position: self.sources[s].task.position(),
                ..Default::default()
            };
            cp.submit(node, self.id, id, snapshot);
            self.nodes[node].passed = id;
            self.propagate_barrier(node, id);
        }
    }

    fn propagate_barrier(&mut self, node: usize, id: u64) {
        self.for_each_route(node, |w, route| match route {
            Route::Local { node: to, port } => w.input_barrier(to, port, 0, id),
            Route::Exchange { edge } => {
                w.broadcast(node, edge, Body::Barrier(id), |me, to, port| {
                    me.input_barrier(to, port, me.global, id)
                })
            }
        });
    }

    fn input_barrier(&mut self, node: usize, port: usize, sender: usize, id: u64) {
        let state = &mut self.nodes[node];
        let slot = &mut state.ports[port].barriers[sender];
        *slot = (*slot).max(id);
        state.pending = state.pending.max(id);
        self.try_pass_barrier(node);
    }

    /// Passes the pending barrier once it has come on every input that has
    /// not ended: snapshot, then forward it.
    fn try_pass_barrier(&mut self, node: usize) {
        let state = &self.nodes[node];
        let id = state.pending;
        if state.ended || id <= state.passed {
            return;
        }
        let aligned = state
            .ports
            .iter()
            .all(|p| p.barriers.iter().zip(&p.ended).all(|(&b, &e)| b >= id || e));
        if !aligned {
            return;
        }
        let mut snapshot = self.snapshot_node(node, id);
        if self.snapshot_failed(node, &mut snapshot) {
            return;
        }
        if let Some(cp) = &self.shared.checkpoints {
            cp.submit(node, self.id, id, snapshot);
        }
        self.nodes[node].passed = id;
        self.propagate_barrier(node, id);
    }

    /// Fails the run if the operator could not take `snapshot`: the
    /// checkpoint it was for never completes.
    fn snapshot_failed(&self, node: usize, snapshot: &mut super::checkpoint::Snapshot) -> bool {
        let Some(failure) = snapshot.failure.take() else {
            return false;
        };
        let component = &self.nodes[node].component;
        self.shared.fail(format!("{component}: {failure}"));
        true
    }

    fn snapshot_node(&mut self, node: usize, id: u64) -> super::checkpoint::Snapshot {
        let state = &mut self.nodes[node];
        let mut snapshot = match state.op.as_mut() {
            Some(op) => {
                let start = Instant::now();
                let t = self.trace.begin();
                let s = op.snapshot(id);
                self.trace.end(t, Checkpoint, node);
                OpMetrics::add(&state.metrics.useful_ns, start.elapsed().as_nanos() as u64);
                s
            }
            None => Default::default(),
        };
        snapshot.watermark = state.watermark;
        snapshot
    }

    fn for_each_route(&mut self, node: usize, mut f: impl FnMut(&mut Self, Route)) {
        for port in 0..self.nodes[node].routes.len() {
            for r in 0..self.nodes[node].routes[port].len() {
                let route = self.nodes[node].routes[port][r];
                f(self, route);
            }
        }
    }

    /// Sends a control message on `edge` to every other worker, and applies
    /// it to this worker's instance with `local`.
    fn broadcast(
        &mut self,
        from: usize,
        edge: usize,
        body: Body,
        local: impl FnOnce(&mut Self, usize, usize),
    ) {
        for w in 0..self.edges[edge].senders.len() {
            if w != self.global {
                let b = match &body {
                    Body::Watermark(x) => Body::Watermark(*x),
                    Body::Barrier(x) => Body::Barrier(*x),
                    Body::End => Body::End,
                    Body::Marker(x) => Body::Marker(*x),
                    Body::Batch(_) | Body::State { .. } => {
                        unreachable!("only control messages are broadcast")
                    }
                };
                self.send(from, edge, w, b);
            }
        }
        let (to, port) = (self.edges[edge].node, self.edges[edge].port);
        local(self, to, port);
    }
}

fn min_time(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}
