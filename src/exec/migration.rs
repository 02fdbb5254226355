//! Live bin migration between the workers of a running pipeline, driven by
//! the sans-IO machines of `crate::migrate`: a [`Coordinator`] run by
//! whoever asks for a rebalance ([`Shared::rebalance`]), and a
//! [`Migrator`] per worker, fed from the worker loop.
//!
//! Per worker: control messages (Prepare, Switch) come on a channel and
//! are handled between batches; markers and bin state travel on the
//! exchange channels, in order with the records; records of a bin whose
//! state has not arrived yet are held per (node, bin), in arrival order.
//! The hot path pays one `idle()` test per exchanged batch.
//!
//! In a distributed run the same happens across members: markers and bin
//! state travel as frames on the exchange streams (`remote.rs`), and the
//! coordinator's Prepare/Switch and the workers' replies on a control
//! stream per peer (`migration_mesh.rs`, which also says how exactly one
//! coordinator runs at a time cluster-wide).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Shared;
use super::held::HeldRecords;
use super::migration_mesh::Link;
use super::worker::{Body, Route, Worker};
use crate::data::Batch;
use crate::kernel::hash::bin_of;
use crate::mesh::frame::MigrateMsg;
use crate::migrate::{
    Assignment, CoordInput, CoordOutput, Coordinator, Input, Migrator, Output, Report, Step,
    Strategy,
};
use crate::state::BinEntries;

/// How long a rebalance waits for the workers before giving up.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);
/// A worker whose part of a step lasts this long says what it waits for.
const SLOW_STEP: Duration = Duration::from_secs(10);

/// The node-wide side: the coordinator (when this node coordinates) and
/// the channels to this node's workers.
pub(crate) struct Control {
    /// This node's workers, by local index, with the trace id of each
    /// message (0 untraced).
    pub(crate) to_workers: Vec<flume::Sender<(Input, u64)>>,
    /// The same, for the workers a node that joins adds (`join.rs`).
    pub(crate) join_to_workers: Vec<flume::Sender<super::join::AddWorkers>>,
    /// Replies of the workers (this node's, and other members' over the
    /// mesh) to the coordinator.
    pub(crate) to_coordinator: flume::Sender<(CoordInput, u64)>,
    from_workers: flume::Receiver<(CoordInput, u64)>,
    /// The coordinator's activity log (`eddy trace`): its planning and
    /// the control messages it exchanges with the workers.
    pub(super) trace: Mutex<crate::trace::LaneTrace>,
    pub(crate) coordinator: Mutex<Coordinator>,
    origin: Instant,
    /// Set while a migration runs (coordinated here or by another member):
    /// no checkpoint barrier is injected, no worker returns, no other
    /// migration starts. This node's part of the cluster-wide lock.
    pub(crate) migrating: AtomicBool,
    /// A migration completed its steps since the checkpoint leader last
    /// looked: in a distributed run it takes a checkpoint at once, so a
    /// restart after a later crash finds the bins where they are now.
    pub(crate) moved: AtomicBool,
    /// Who holds `migrating`: (request id, coordinating member).
    pub(crate) holder: Mutex<Option<(u64, usize)>>,
    /// The other members, in a distributed run.
    pub(crate) mesh: std::sync::OnceLock<Link>,
    /// Answers of the other members to this node's `Begin`.
    pub(crate) acks: (flume::Sender<MigrateMsg>, flume::Receiver<MigrateMsg>),
    /// Checkpoint messages from the other members, for this member's
    /// checkpoint thread (`cluster_checkpoint`).
    pub(crate) checkpoint_msgs: (flume::Sender<MigrateMsg>, flume::Receiver<MigrateMsg>),
    /// On a member that does not coordinate: the step in flight and the
    /// assignment after the steps switched so far (its coordinator takes
    /// it at `Finish`, so any member may coordinate the next migration).
    pub(crate) tracked: Mutex<(Option<Step>, Assignment)>,
}

/// Why a rebalance did not happen.
#[derive(Debug)]
pub(crate) enum RebalanceError {
    /// Another migration runs (here or on another member): HTTP 409.
    Busy(String),
    Failed(String),
}

impl std::fmt::Display for RebalanceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RebalanceError::Busy(m) | RebalanceError::Failed(m) => f.write_str(m),
        }
    }
}

impl From<RebalanceError> for String {
    fn from(e: RebalanceError) -> String {
        e.to_string()
    }
}

impl From<String> for RebalanceError {
    fn from(m: String) -> RebalanceError {
        RebalanceError::Failed(m)
    }
}

impl From<&str> for RebalanceError {
    fn from(m: &str) -> RebalanceError {
        RebalanceError::Failed(m.to_string())
    }
}

/// How workers hold records of bins still moving in (`[migration]
/// hold_memory`, see `held.rs`).
pub(crate) struct Hold<'a> {
    pub(crate) memory: u64,
    pub(crate) data_dir: &'a Path,
    /// Rows spilled to disk by this node's workers.
    pub(crate) spilled: Arc<AtomicU64>,
}

/// One worker's side.
pub(crate) struct WorkerMigration {
    pub(crate) machine: Migrator,
    control: Option<flume::Receiver<(Input, u64)>>,
    /// Records of bins whose state is still coming, per (node, bin).
    held: HeldRecords,
    /// Bin state arrived and not installed yet.
    arrived: HashMap<(usize, u32), BinEntries>,
    /// Per node: the exchange edge bin state is sent on (its first).
    state_edge: Vec<Option<usize>>,
    /// Nodes whose inputs all ended while a bin was still coming.
    deferred_end: Vec<usize>,
    /// When this worker saw the step in flight begin, and whether it
    /// said it was slow.
    step_seen: Option<(Instant, bool)>,
    /// `(node, edge)`: `End` not sent yet on the edge while this member
    /// drains (see `Worker::end_node`).
    pub(crate) held_ends: Vec<(usize, usize)>,
    /// A node joining the run: its workers to add (`join.rs`).
    pub(crate) joins: Option<flume::Receiver<super::join::AddWorkers>>,
    /// Per node: its watermark is held until its outgoing bins left. A
    /// sender's watermark that comes after its marker may be ahead of
    /// records it already sent the new owner: applied here before the
    /// export, it would fire the bin's windows without them, and the new
    /// owner would fire them again with the rest.
    out_held: Vec<bool>,
}

/// Builds the control of this node's `workers` workers (global ids from
/// `first`, of `global` in the run) and each worker's side, at assignment
/// `epoch` (0 at the start of a run; a node that joins takes the run's),
/// without the workers `gone[w]` of members that left the run. Each worker
/// holds records as `hold` says.
#[allow(clippy::too_many_arguments)]
pub(crate) fn setup(
    workers: usize,
    first: usize,
    global: usize,
    assignment: &[u16],
    epoch: u64,
    gone: &[bool],
    keyed: &[crate::migrate::KeyedNode],
    state_edge: Vec<Option<usize>>,
    hold: &Hold<'_>,
) -> (Option<std::sync::Arc<Control>>, Vec<WorkerMigration>) {
    let current = Assignment::new(epoch, assignment.iter().map(|&w| w as u32).collect());
    let live: Vec<bool> = (0..global)
        .map(|w| !gone.get(w).copied().unwrap_or(false))
        .collect();
    let (coord_tx, coord_rx) = flume::unbounded();
    let mut to_workers = Vec::new();
    let mut join_to_workers = Vec::new();
    let mut sides = Vec::new();
    for w in 0..workers {
        let (tx, rx) = flume::unbounded();
        to_workers.push(tx);
        let (join_tx, join_rx) = flume::unbounded();
        join_to_workers.push(join_tx);
        let mut machine = Migrator::new((first + w) as u32, global as u32, &current, keyed);
        if live.iter().any(|l| !l) {
            machine.reset_live(&current, &live);
        }
        sides.push(WorkerMigration {
            machine,
            control: Some(rx),
            joins: Some(join_rx),
            held: HeldRecords::new(first + w, hold.memory, hold.data_dir, hold.spilled.clone()),
            arrived: HashMap::new(),
            out_held: vec![false; state_edge.len()],
            state_edge: state_edge.clone(),
            deferred_end: Vec::new(),
            step_seen: None,
            held_ends: Vec::new(),
        });
    }
    let mut coordinator = Coordinator::new(global as u32, current.clone());
    coordinator.reset_live(current.clone(), &live);
    let control = std::sync::Arc::new(Control {
        to_workers,
        join_to_workers,
        to_coordinator: coord_tx,
        from_workers: coord_rx,
        coordinator: Mutex::new(coordinator),
        trace: Mutex::new(crate::trace::LaneTrace::new(
            crate::trace::LaneName::Coordinator,
            vec!["migration".into()],
        )),
        origin: Instant::now(),
        migrating: AtomicBool::new(false),
        moved: AtomicBool::new(false),
        holder: Mutex::new(None),
        mesh: std::sync::OnceLock::new(),
        acks: flume::unbounded(),
        checkpoint_msgs: flume::unbounded(),
        tracked: Mutex::new((None, current)),
    });
    (Some(control), sides)
}

impl WorkerMigration {
    /// A placeholder while a worker is being built.
    pub(crate) fn fixed(
        me: usize,
        workers: usize,
        assignment: &[u16],
        keyed: &[crate::migrate::KeyedNode],
    ) -> WorkerMigration {
        let current = Assignment::new(0, assignment.iter().map(|&w| w as u32).collect());
        WorkerMigration {
            machine: Migrator::new(me as u32, workers as u32, &current, keyed),
            control: None,
            joins: None,
            held: HeldRecords::new(me, u64::MAX, Path::new("."), Arc::default()),
            arrived: HashMap::new(),
            state_edge: Vec::new(),
            deferred_end: Vec::new(),
            step_seen: None,
            held_ends: Vec::new(),
            out_held: Vec::new(),
        }
    }
}

impl Shared {
    /// Moves bins between this run's workers (every member's, in a
    /// distributed run) while it runs, from the current assignment to
    /// `target` (default: even), step by step as `strategy` says; returns
    /// when every step is done. One at a time, cluster-wide. A checkpoint
    /// of a distributed run holds the lock for a moment: the migration
    /// starts after it.
    pub(crate) fn rebalance(
        &self,
        target: Option<Vec<u32>>,
        strategy: Strategy,
    ) -> Result<Report, RebalanceError> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            match self.rebalance_once(target.clone(), strategy) {
                Err(RebalanceError::Busy(m))
                    if m.contains("a checkpoint is being taken") && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => return other,
            }
        }
    }

    fn rebalance_once(
        &self,
        target: Option<Vec<u32>>,
        strategy: Strategy,
    ) -> Result<Report, RebalanceError> {
        let control = self
            .migration
            .as_ref()
            .ok_or("this run has no migration control")?;
        // Members that drained and left take no bins; members that
        // joined do (`total_workers` counts them).
        let global_workers = self.total_workers.load(SeqCst);
        let gone = control.mesh.get().map_or(vec![false; global_workers], |l| {
            l.gone_workers(global_workers)
        });
        let target = target.unwrap_or_else(|| {
            let live: Vec<u32> = (0..global_workers as u32)
                .filter(|&w| !gone[w as usize])
                .collect();
            crate::migrate::even(self.bins, live.len() as u32)
                .into_iter()
                .map(|i| live[i as usize])
                .collect()
        });
        if target.len() != self.bins as usize {
            return Err(format!(
                "the target assignment has {} bins, the run {}",
                target.len(),
                self.bins
            )
            .into());
        }
        if let Some(w) = target.iter().find(|&&w| w as usize >= global_workers) {
            return Err(format!(
                "the target assignment names worker {w}, the run has {global_workers}"
            )
            .into());
        }
        if let Some(w) = target.iter().find(|&&w| gone[w as usize]) {
            return Err(format!(
                "the target assignment names worker {w}, whose member left the run"
            )
            .into());
        }
        // With `may_finish`: either that worker stays for the migration,
        // or the migration sees it leaving and does not start.
        if control
            .migrating
            .compare_exchange(false, true, SeqCst, SeqCst)
            .is_err()
        {
            return Err(RebalanceError::Busy(control.busy_reason()));
        }
        if self.finishing.load(SeqCst) > 0 {
            control.migrating.store(false, SeqCst);
            return Err("the input has ended: no migration now".into());
        }
        let me = control.mesh.get().map_or(0, |l| l.me);
        let id = request_id(me);
        *lock(&control.holder) = Some((id, me));
        let result = (|| {
            let mut coordinator = lock(&control.coordinator);
            // Members that left are neither asked nor awaited (they own
            // no bin: they left after their bins moved away).
            let live: Vec<bool> = gone.iter().map(|g| !g).collect();
            if coordinator.live() != live.as_slice() {
                let a = coordinator.assignment().clone();
                coordinator.reset_live(a, &live);
            }
            if let Some(link) = control.mesh.get() {
                link.lock_cluster(control, id, coordinator.assignment().epoch)?;
            }
            let r = self.drive(control, &mut coordinator, &target, strategy);
            if let Some(link) = control.mesh.get() {
                link.broadcast(MigrateMsg::Finish {
                    id,
                    epoch: coordinator.assignment().epoch,
                });
            }
            r.map_err(RebalanceError::Failed)
        })();
        *lock(&control.holder) = None;
        if result.is_ok() {
            control.moved.store(true, SeqCst);
        }
        control.migrating.store(false, SeqCst);
        result
    }

    fn drive(
        &self,
        control: &Control,
        coordinator: &mut Coordinator,
        target: &[u32],
        strategy: Strategy,
    ) -> Result<Report, String> {
        // A checkpoint in flight finishes first (a snapshot taken while a
        // bin is between workers would miss it).
        if let Some(cp) = &self.checkpoints {
            let deadline = Instant::now() + STEP_TIMEOUT;
            while cp.aligned() < cp.requested() {
                if Instant::now() > deadline || self.failed.load(Relaxed) {
                    return Err("a checkpoint in flight did not complete".into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let now = || control.origin.elapsed();
        let mut out = Vec::new();
        // Replies of an abandoned migration are stale.
        while control.from_workers.try_recv().is_ok() {}
        match coordinator.migrate(now(), target, strategy, &mut out) {
            None => return Err("a migration is already running".into()),
            Some(0) => {
                return Ok(Report {
                    epoch: coordinator.assignment().epoch,
                    steps: 0,
                    bins: 0,
                    bytes: 0,
                    duration: Duration::ZERO,
                });
            }
            Some(_) => {}
        }
        let mut deadline = Instant::now() + STEP_TIMEOUT;
        let mut trace = lock(&control.trace);
        loop {
            for o in out.drain(..) {
                match o {
                    CoordOutput::Prepare(step) => {
                        deadline = Instant::now() + STEP_TIMEOUT;
                        if let Some(link) = control.mesh.get() {
                            link.broadcast(MigrateMsg::Prepare {
                                epoch: step.epoch,
                                moves: step.moves.iter().map(|m| (m.bin, m.from, m.to)).collect(),
                            });
                        }
                        control.to_all(&mut trace, || Input::Prepare(step.clone()));
                        self.wake_workers();
                    }
                    CoordOutput::Switch { epoch } => {
                        if let Some(link) = control.mesh.get() {
                            link.broadcast(MigrateMsg::Switch { epoch });
                        }
                        control.to_all(&mut trace, || Input::Switch { epoch });
                        self.wake_workers();
                    }
                    CoordOutput::StepDone(r) => tracing::debug!(
                        epoch = r.epoch,
                        bins = r.bins,
                        bytes = r.bytes,
                        duration_ms = r.duration.as_secs_f64() * 1e3,
                        "migration step done"
                    ),
                    CoordOutput::MigrationDone(r) => {
                        tracing::info!(
                            epoch = r.epoch,
                            strategy = strategy.name(),
                            steps = r.steps,
                            bins = r.bins,
                            bytes = r.bytes,
                            duration_ms = r.duration.as_secs_f64() * 1e3,
                            "migration done: {} bins ({} bytes) in {} steps, {:.1?}",
                            r.bins,
                            r.bytes,
                            r.steps,
                            r.duration
                        );
                        return Ok(r);
                    }
                }
            }
            if self.failed.load(Relaxed) || self.halted.load(Relaxed) {
                return Err("the run ended during the migration".into());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "a step took longer than {STEP_TIMEOUT:?} ({})",
                    coordinator.awaiting().unwrap_or_default()
                ));
            }
            let wait = coordinator
                .next_wakeup()
                .map_or(Duration::from_millis(50), |t| {
                    t.saturating_sub(now()).min(Duration::from_millis(50))
                });
            let input = match control.from_workers.recv_timeout(wait) {
                Ok((input, id)) => {
                    trace.received(id);
                    input
                }
                Err(_) => CoordInput::Tick,
            };
            let t = trace.begin();
            coordinator.handle(now(), input, &mut out);
            trace.end(t, crate::trace::Kind::Migration, 0);
        }
    }
}

impl Worker {
    /// Every instance of this worker ended: whether it may return. Not
    /// while a migration runs: the others wait for its markers (and it
    /// may still be a bin's old or new owner). A checkpoint of a
    /// distributed run holding the lock is no reason to stay: an instance
    /// that ended has passed every barrier, and the checkpoint may well be
    /// waiting for it to end.
    pub(crate) fn may_finish(&self) -> bool {
        let Some(control) = &self.shared.migration else {
            return true;
        };
        self.shared.finishing.fetch_add(1, SeqCst);
        if control.moving_bins() {
            self.shared.finishing.fetch_sub(1, SeqCst);
            return false;
        }
        true
    }

    /// Handles waiting control messages (between batches).
    pub(crate) fn poll_migration(&mut self) -> bool {
        let joins: Vec<_> = self
            .mig
            .joins
            .as_ref()
            .map(|rx| rx.try_iter().collect())
            .unwrap_or_default();
        let joined = !joins.is_empty();
        for j in joins {
            self.add_workers(j);
        }
        let Some(rx) = &self.mig.control else {
            return joined;
        };
        let inputs: Vec<(Input, u64)> = rx.try_iter().collect();
        let any = joined || !inputs.is_empty();
        for (input, id) in inputs {
            self.trace.received(id);
            self.migrate_input(input);
        }
        self.watch_step();
        any
    }

    /// Says once what a step that lasts long waits for here, so a stuck
    /// migration names the missing marker or state on the worker that
    /// misses it.
    fn watch_step(&mut self) {
        if self.mig.machine.idle() {
            self.mig.step_seen = None;
            return;
        }
        let (since, said) = self.mig.step_seen.get_or_insert((Instant::now(), false));
        if !*said && since.elapsed() > SLOW_STEP {
            *said = true;
            tracing::warn!(
                "worker {}: a migration step is still waiting after {SLOW_STEP:?} for {} ({} records held)",
                self.global,
                self.mig.machine.waiting_for().unwrap_or_default(),
                self.mig.held.rows()
            );
        }
    }

    fn migrate_input(&mut self, input: Input) {
        if let Input::Prepare(step) = &input
            && step.moves.iter().any(|m| m.from as usize == self.global)
        {
            for (node, edge) in self.mig.state_edge.iter().enumerate() {
                self.mig.out_held[node] = edge.is_some();
            }
        }
        let mut out = Vec::new();
        self.mig.machine.handle(input, &mut out);
        self.carry_out(out);
    }

    /// A batch exchanged into keyed `(node, port)`: applied, or held (the
    /// rows of bins whose state is still coming).
    #[inline]
    pub(crate) fn deliver_keyed(&mut self, node: usize, port: usize, batch: Batch) {
        // Per-bin input rates for the controller: counted here, at the
        // bin's owner, records held for a moving bin included.
        self.nodes[node]
            .metrics
            .count_bins(batch.key_hash(), self.shared.bins);
        if self.mig.machine.idle() {
            self.deliver(node, port, batch);
        } else {
            self.deliver_or_hold(node, port, batch);
        }
    }

    fn deliver_or_hold(&mut self, node: usize, port: usize, batch: Batch) {
        let bins = self.shared.bins;
        let mut keep: Vec<u32> = Vec::new();
        let mut hold: HashMap<u32, Vec<u32>> = HashMap::new();
        for (i, &h) in batch.key_hash().iter().enumerate() {
            let bin = bin_of(h, bins);
            if self.mig.machine.must_hold(node, bin) {
                hold.entry(bin).or_default().push(i as u32);
            } else {
                keep.push(i as u32);
            }
        }
        if hold.is_empty() {
            self.deliver(node, port, batch);
            return;
        }
        for (bin, rows) in hold {
            let part = batch.take_rows(&rows);
            self.mig.held.hold(node, bin, port, part);
        }
        if !keep.is_empty() {
            let part = batch.take_rows(&keep);
            self.deliver(node, port, part);
        }
    }

    /// Whether the node sending on exchange `edge` ended here and sent
    /// `End` on it (not held back).
    fn edge_ended(&self, edge: usize) -> bool {
        if self.mig.held_ends.iter().any(|&(_, e)| e == edge) {
            return false;
        }
        self.nodes.iter().any(|n| {
            n.ended
                && n.routes
                    .iter()
                    .flatten()
                    .any(|r| matches!(r, Route::Exchange { edge: e } if *e == edge))
        })
    }

    /// Global worker `sender` sent `End` on exchange input `(node, port)`.
    pub(crate) fn migration_sender_ended(&mut self, node: usize, port: usize, sender: usize) {
        let mut out = Vec::new();
        self.mig
            .machine
            .sender_ended(node, port, sender as u32, &mut out);
        self.carry_out(out);
    }

    /// A marker or bin state arrived on exchange `(node, port)`.
    pub(crate) fn migration_body(&mut self, node: usize, port: usize, sender: usize, body: Body) {
        match body {
            Body::Marker(epoch) => self.migrate_input(Input::Marker {
                node,
                port,
                sender: sender as u32,
                epoch,
            }),
            Body::State {
                bin,
                epoch,
                entries,
            } => {
                let bytes = entries
                    .iter()
                    .map(|(k, v)| (k.len() + v.len()) as u64)
                    .sum();
                self.mig.arrived.insert((node, bin), entries);
                self.migrate_input(Input::StateChunk {
                    node,
                    bin,
                    epoch,
                    bytes,
                    last: true,
                });
            }
            _ => unreachable!("only migration bodies come here"),
        }
    }

    /// Whether `node`'s operator watermark stays where it is for now.
    #[inline]
    pub(crate) fn watermark_held(&self, node: usize) -> bool {
        self.mig.machine.watermark_held(node) || self.mig.out_held.get(node) == Some(&true)
    }

    /// Whether `node`'s end waits for a bin still coming or leaving.
    pub(crate) fn defer_end(&mut self, node: usize) -> bool {
        if self.watermark_held(node) {
            self.mig.deferred_end.push(node);
            true
        } else {
            false
        }
    }

    fn carry_out(&mut self, out: Vec<Output>) {
        let mut i = 0;
        while i < out.len() {
            match &out[i] {
                Output::Prepared { epoch } => self.reply_to_coordinator(CoordInput::Prepared {
                    worker: self.global as u32,
                    epoch: *epoch,
                }),
                Output::BroadcastMarker { epoch } => {
                    for edge in 0..self.edges.len() {
                        let from = self.edges[edge].node;
                        // A node that ended sent `End` on its edges, which
                        // stands for every later marker (and nothing may
                        // follow an `End` on a stream).
                        if self.edge_ended(edge) {
                            continue;
                        }
                        for w in 0..self.edges[edge].senders.len() {
                            if w != self.global {
                                self.send(from, edge, w, Body::Marker(*epoch));
                            }
                        }
                    }
                }
                // Checked where watermarks arrive (`watermark_held`).
                Output::HoldWatermark { .. } => {}
                Output::Export { node, .. } => {
                    // Consecutive exports of one node: one scan of its state.
                    let node = *node;
                    let mut moves = Vec::new();
                    while let Some(Output::Export {
                        node: n,
                        bin,
                        to,
                        epoch,
                    }) = out.get(i)
                    {
                        if *n != node {
                            break;
                        }
                        moves.push((*bin, *to, *epoch));
                        i += 1;
                    }
                    self.export(node, &moves);
                    if let Some(held) = self.mig.out_held.get_mut(node) {
                        *held = false;
                    }
                    self.release_watermark(node);
                    continue;
                }
                Output::Install { node, bin, .. } => {
                    let (node, bin) = (*node, *bin);
                    let entries = self.mig.arrived.remove(&(node, bin)).unwrap_or_default();
                    let component = self.nodes[node].component.clone();
                    let mut failed = None;
                    self.call_as(node, 0, crate::trace::Kind::Migration, |op, ctx| {
                        if let Err(e) = op.install_bin(bin, entries, ctx) {
                            failed = Some(e);
                        }
                    });
                    if let Some(e) = failed {
                        self.shared
                            .fail(format!("{component}: cannot install bin {bin}: {e}"));
                    }
                }
                Output::Release { node, bin } => {
                    let (node, bin) = (*node, *bin);
                    for held in self.mig.held.take(node, bin) {
                        match self.mig.held.load(held) {
                            Ok((port, batch)) => self.deliver(node, port, batch),
                            Err(e) => {
                                let component = &self.nodes[node].component;
                                self.shared
                                    .fail(format!("{component}: cannot apply held records: {e}"));
                                break;
                            }
                        }
                    }
                }
                Output::ReleaseWatermark { node } => self.release_watermark(*node),
                Output::Done {
                    epoch,
                    bins_in,
                    bytes_in,
                } => self.reply_to_coordinator(CoordInput::Done {
                    worker: self.global as u32,
                    epoch: *epoch,
                    bins_in: *bins_in,
                    bytes_in: *bytes_in,
                }),
            }
            i += 1;
        }
    }

    /// `node`'s watermark may move again: catch up, and end it if its
    /// inputs ended meanwhile.
    fn release_watermark(&mut self, node: usize) {
        if self.watermark_held(node) {
            return;
        }
        self.advance_watermark(node);
        if let Some(at) = self.mig.deferred_end.iter().position(|&n| n == node) {
            self.mig.deferred_end.swap_remove(at);
            self.end_node(node);
        }
    }

    fn reply_to_coordinator(&mut self, input: CoordInput) {
        if let Some(control) = &self.shared.migration {
            let id = self.trace.send_id(false);
            self.trace.sent(id);
            control.reply(input, id);
        }
    }

    /// Takes `moves`' bins out of `node`'s operator and sends each to its
    /// new owner, on the node's first exchange edge.
    fn export(&mut self, node: usize, moves: &[(u32, u32, u64)]) {
        let bins: Vec<u32> = moves.iter().map(|m| m.0).collect();
        let Some(edge) = self.mig.state_edge.get(node).copied().flatten() else {
            return;
        };
        let t = self.trace.begin();
        let exported = match self.nodes[node].op.as_mut() {
            Some(op) => op.export_bins(&bins),
            None => Ok(bins.iter().map(|_| BinEntries::new()).collect()),
        };
        self.trace.end(t, crate::trace::Kind::Migration, node);
        let exported = match exported {
            Ok(e) => e,
            Err(e) => {
                let component = self.nodes[node].component.clone();
                self.shared
                    .fail(format!("{component}: cannot export bins: {e}"));
                return;
            }
        };
        for (&(bin, to, epoch), entries) in moves.iter().zip(exported) {
            self.send(
                node,
                edge,
                to as usize,
                Body::State {
                    bin,
                    epoch,
                    entries,
                },
            );
        }
    }
}

impl Control {
    /// `make()` to every worker of this node, each message traced.
    pub(super) fn to_all(&self, trace: &mut crate::trace::LaneTrace, make: impl Fn() -> Input) {
        for tx in &self.to_workers {
            let id = trace.send_id(false);
            trace.sent(id);
            let _ = tx.send((make(), id));
        }
    }

    /// A worker's reply, to the coordinator wherever it runs (`id`: its
    /// trace id; a reply to another member's coordinator goes untraced).
    pub(crate) fn reply(&self, input: CoordInput, id: u64) {
        let coordinating = lock(&self.holder).map(|(_, node)| node);
        match (self.mesh.get(), coordinating) {
            (Some(link), Some(node)) if node != link.me => {
                let msg = match input {
                    CoordInput::Prepared { worker, epoch } => {
                        MigrateMsg::Prepared { worker, epoch }
                    }
                    CoordInput::Done {
                        worker,
                        epoch,
                        bins_in,
                        bytes_in,
                    } => MigrateMsg::Done {
                        worker,
                        epoch,
                        bins_in,
                        bytes_in,
                    },
                    CoordInput::Tick => return,
                };
                link.send(node, msg);
            }
            _ => {
                let _ = self.to_coordinator.send((input, id));
            }
        }
    }

    /// Why a migration cannot start now.
    /// A migration holds the lock (not a checkpoint of a distributed run,
    /// which takes it to keep bins in place while its barriers travel).
    pub(crate) fn moving_bins(&self) -> bool {
        self.migrating.load(SeqCst)
            && !lock(&self.holder)
                .is_some_and(|(id, _)| id & super::cluster_checkpoint::LOCK_BIT != 0)
    }

    pub(crate) fn busy_reason(&self) -> String {
        match *lock(&self.holder) {
            Some((id, node)) if id & super::cluster_checkpoint::LOCK_BIT != 0 => {
                match self.mesh.get() {
                    Some(link) if node != link.me => {
                        format!("a checkpoint is being taken (led by {})", link.name(node))
                    }
                    _ => "a checkpoint is being taken (led by this node)".to_string(),
                }
            }
            Some((_, node)) => match self.mesh.get() {
                Some(link) if node != link.me => format!(
                    "a migration is already running (coordinated by {})",
                    link.name(node)
                ),
                _ => "a migration is already running (coordinated by this node)".to_string(),
            },
            None => "a migration is already running".to_string(),
        }
    }
}

/// A mutex's value, also after a panic elsewhere (the data stays valid:
/// every critical section here is a plain assignment).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A request id unique in the cluster for its lifetime: the member in the
/// high bits, the time in the low ones.
pub(crate) fn request_id(me: usize) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    ((me as u64) << 48) ^ (nanos & ((1 << 48) - 1))
}
