//! The live migration protocol as sans-IO state machines: [`Migrator`], one
//! per worker thread, covering every keyed operator instance ("node") of
//! that worker, and [`Coordinator`], one per run, which turns a plan into
//! steps. Neither does IO, spawns threads or reads a clock: the driver feeds
//! inputs (with the time where it matters) and carries out the outputs.
//!
//! One step `e` (epoch `e`, a set of bin moves), Megaphone-style:
//! 1. The coordinator sends `Prepare(step)` to every worker. A worker's
//!    migrator learns which bins come to it (from now on it holds records
//!    of those bins, see [`Migrator::must_hold`]) and answers `Prepared`.
//!    Without this round a record routed the new way could reach its new
//!    owner before that owner knew the bin was coming.
//! 2. With every worker prepared, the coordinator sends `Switch(e)`. Each
//!    worker's router switches the step's bins to their new owners and,
//!    before routing anything else, sends a marker of epoch `e` on every
//!    keyed exchange edge to every other worker: on each FIFO stream the
//!    marker separates records routed the old way from the new way.
//! 3. An old owner exports a bin of a node once the markers of epoch `e`
//!    came from every sender on every exchange input port of that node:
//!    nothing routed the old way is still on its way, nothing more will
//!    come. The state goes to the new owner.
//! 4. The new owner installs the state, then applies the records it held
//!    for that bin in arrival order. Its operator watermark stays put while
//!    a bin of that node is still coming (held records must not become
//!    late).
//! 5. A worker whose part of the step is over (switched, every marker in,
//!    every incoming bin installed) reports `Done`; with every worker done
//!    the step is complete and the coordinator starts the next one.
//!
//! Steps and checkpoints never overlap (a snapshot taken while a bin is in
//! flight would miss it): the coordinator does not prepare a step while a
//! checkpoint is in flight, and the driver must not inject a barrier unless
//! [`Coordinator::checkpoint_allowed`]. So every checkpoint records a
//! completed assignment, and after a crash ownership falls back to the
//! checkpoint's assignment (or [`super::plan::fallback`] of it when a
//! worker is gone for good): see [`Migrator::reset`], [`Coordinator::reset`].

use std::collections::VecDeque;
use std::time::Duration;

use super::plan::{Assignment, Move, Step, Strategy, plan};

/// Time since an origin the driver chooses (the sim's virtual clock, a
/// run's start).
pub(crate) type Time = Duration;

/// A keyed operator instance of a worker as the migrator sees it: the
/// worker's node index and its input ports fed by keyed exchanges (each
/// has one sender per global worker).
#[derive(Clone, Debug)]
pub(crate) struct KeyedNode {
    pub(crate) node: usize,
    pub(crate) ports: Vec<usize>,
}

/// What a worker feeds its [`Migrator`].
#[derive(Clone, Debug)]
pub(crate) enum Input {
    /// From the coordinator: a step is coming.
    Prepare(Step),
    /// From the coordinator: every worker is prepared; switch the routes.
    Switch { epoch: u64 },
    /// A marker of `epoch` arrived on exchange input `(node, port)` from
    /// global worker `sender` (never this worker: its own marker counts at
    /// `Switch`, since its local deliveries are synchronous).
    Marker {
        node: usize,
        port: usize,
        sender: u32,
        epoch: u64,
    },
    /// A chunk (`bytes` long) of the state of `(node, bin)` arrived from
    /// its old owner; `last` on the final one. The worker keeps the chunks
    /// until `Install`.
    StateChunk {
        node: usize,
        bin: u32,
        epoch: u64,
        bytes: u64,
        last: bool,
    },
}

/// What a [`Migrator`] asks its worker to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// Tell the coordinator: prepared for step `epoch`.
    Prepared { epoch: u64 },
    /// The routing table has switched ([`Migrator::owner`]): before routing
    /// any other record, send `Marker(epoch)` on every keyed exchange edge
    /// to every other global worker.
    BroadcastMarker { epoch: u64 },
    /// Stop advancing `node`'s operator watermark (keep tracking the
    /// inputs' watermarks): a bin of it is coming, and the records held
    /// for it must not become late.
    HoldWatermark { node: usize },
    /// Take bin `bin` of `node` out of the operator (its entries, pending
    /// timers and window state) and send it to worker `to` as state chunks
    /// of `epoch`. Records of that bin will no longer arrive here.
    Export {
        node: usize,
        bin: u32,
        to: u32,
        epoch: u64,
    },
    /// The whole state of `(node, bin)` has arrived: install it in the
    /// operator.
    Install { node: usize, bin: u32, epoch: u64 },
    /// Apply the records held for `(node, bin)`, in arrival order, then
    /// process that bin's records directly (`must_hold` is now false).
    Release { node: usize, bin: u32 },
    /// `node` no longer waits for a bin: recompute its watermark from its
    /// inputs and advance the operator (firing installed windows that are
    /// due, including ones whose end is already behind the watermark).
    ReleaseWatermark { node: usize },
    /// Tell the coordinator: this worker's part of step `epoch` is over;
    /// it installed `bins_in` bins of `bytes_in` bytes of state.
    Done {
        epoch: u64,
        bins_in: u32,
        bytes_in: u64,
    },
}

/// Per keyed node, the state of the step in flight.
struct Slot {
    node: usize,
    ports: Vec<usize>,
    /// Bit per bin: records of that bin are held (it is coming here).
    holding: Vec<u64>,
    /// Bins of this node still coming here.
    incoming: u32,
    /// `markers[port index][sender]`: the marker of the step arrived.
    markers: Vec<Vec<bool>>,
    /// `ended[port index][sender]`: that sender sent `End` on the port.
    /// Nothing more comes from it, so it stands for its marker of every
    /// later step (a sender whose input ended sends no markers).
    ended: Vec<Vec<bool>>,
    missing: usize,
}

impl Slot {
    fn holds(&self, bin: u32) -> bool {
        self.holding[(bin / 64) as usize] & (1 << (bin % 64)) != 0
    }

    fn set_holding(&mut self, bin: u32, on: bool) {
        let (w, b) = ((bin / 64) as usize, 1u64 << (bin % 64));
        if on {
            self.holding[w] |= b;
        } else {
            self.holding[w] &= !b;
        }
    }
}

struct InFlight {
    step: Step,
    switched: bool,
    /// Moves whose source is this worker.
    outgoing: Vec<Move>,
    /// Number of (node, bin) states still coming, over all nodes.
    incoming: u32,
    bins_in: u32,
    bytes_in: u64,
    done: bool,
}

/// One worker's side of the protocol. Hot-path queries ([`owner`],
/// [`idle`], [`must_hold`]) are array and bit lookups.
///
/// [`owner`]: Migrator::owner
/// [`idle`]: Migrator::idle
/// [`must_hold`]: Migrator::must_hold
pub(crate) struct Migrator {
    me: u32,
    /// The router's table: bin -> global worker.
    table: Vec<u32>,
    epoch: u64,
    slots: Vec<Slot>,
    /// Node index -> slot index (`u32::MAX`: not keyed).
    slot_of: Vec<u32>,
    step: Option<InFlight>,
    /// Global workers that are part of the run (markers come from them).
    live: Vec<bool>,
}

impl Migrator {
    /// The migrator of global worker `me` of `workers`, starting from
    /// `assignment`, for the worker's keyed nodes.
    pub(crate) fn new(
        me: u32,
        workers: u32,
        assignment: &Assignment,
        nodes: &[KeyedNode],
    ) -> Migrator {
        let bins = assignment.owners.len();
        let max_node = nodes.iter().map(|n| n.node + 1).max().unwrap_or(0);
        let mut slot_of = vec![u32::MAX; max_node];
        let slots = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                slot_of[n.node] = i as u32;
                Slot {
                    node: n.node,
                    ports: n.ports.clone(),
                    holding: vec![0; bins.div_ceil(64)],
                    incoming: 0,
                    markers: vec![vec![false; workers as usize]; n.ports.len()],
                    ended: vec![vec![false; workers as usize]; n.ports.len()],
                    missing: 0,
                }
            })
            .collect();
        Migrator {
            me,
            table: assignment.owners.clone(),
            epoch: assignment.epoch,
            slots,
            slot_of,
            step: None,
            live: vec![true; workers as usize],
        }
    }

    /// The global worker the router sends records of `bin` to.
    #[inline]
    // Used by the simulator (crash recovery, checkpoint gating); the
    // engine does not yet recover from a crash in the middle of a move.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn owner(&self, bin: u32) -> u32 {
        self.table[bin as usize]
    }

    /// The router's whole table, bin -> global worker.
    #[inline]
    pub(crate) fn table(&self) -> &[u32] {
        &self.table
    }

    /// The epoch of the router's table.
    // Used by the simulator (crash recovery, checkpoint gating); the
    // engine does not yet recover from a crash in the middle of a move.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// No step in flight on this worker: nothing is held, no watermark
    /// is held, [`must_hold`](Migrator::must_hold) is false.
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        self.step.is_none()
    }

    /// Whether a record of `bin` arriving at keyed `node` must be held
    /// (its state has not been installed here yet) instead of applied.
    #[inline]
    pub(crate) fn must_hold(&self, node: usize, bin: u32) -> bool {
        if self.step.is_none() {
            return false;
        }
        match self.slot_of.get(node) {
            Some(&s) if s != u32::MAX => self.slots[s as usize].holds(bin),
            _ => false,
        }
    }

    /// Whether `node`'s operator watermark is held (a bin is coming).
    pub(crate) fn watermark_held(&self, node: usize) -> bool {
        self.step.is_some()
            && matches!(self.slot_of.get(node), Some(&s) if s != u32::MAX && self.slots[s as usize].incoming > 0)
    }

    /// Back to `assignment` with nothing in flight: after a crash, the
    /// run restarts from a checkpoint, which records a completed
    /// assignment. The driver discards held records and received chunks
    /// (the sources replay them from the checkpoint).
    // Used by the simulator (crash recovery, checkpoint gating); the
    // engine does not yet recover from a crash in the middle of a move.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn reset(&mut self, assignment: &Assignment) {
        self.table.clone_from(&assignment.owners);
        self.epoch = assignment.epoch;
        for s in &mut self.slots {
            s.holding.iter_mut().for_each(|w| *w = 0);
            s.incoming = 0;
            s.missing = 0;
        }
        self.step = None;
    }

    /// [`reset`](Migrator::reset) after workers are gone for good: only
    /// the workers with `live[w]` send markers from now on (`assignment`
    /// gives the others no bins, e.g. [`super::plan::fallback`]).
    // Used by the simulator (crash recovery, checkpoint gating); the
    // engine does not yet recover from a crash in the middle of a move.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn reset_live(&mut self, assignment: &Assignment, live: &[bool]) {
        debug_assert!(assignment.owners.iter().all(|&w| live[w as usize]));
        self.live = live.to_vec();
        self.reset(assignment);
    }

    /// `count` more global workers take part from now on (a node joined
    /// the run): they send markers of every later step. Only between
    /// steps (the join holds the cluster-wide migration lock).
    pub(crate) fn add_workers(&mut self, count: u32) {
        debug_assert!(self.step.is_none(), "workers added amid a step");
        let total = self.live.len() + count as usize;
        self.live.resize(total, true);
        for slot in &mut self.slots {
            for port in slot.markers.iter_mut().chain(slot.ended.iter_mut()) {
                port.resize(total, false);
            }
        }
    }

    /// Handles one input; appends what the worker must do to `out`.
    ///
    /// Inputs out of protocol (a step while another is in flight, a marker
    /// or chunk of another epoch) are bugs of the driver: they panic in
    /// debug builds and are ignored otherwise.
    pub(crate) fn handle(&mut self, input: Input, out: &mut Vec<Output>) {
        match input {
            Input::Prepare(step) => self.prepare(step, out),
            Input::Switch { epoch } => self.switch(epoch, out),
            Input::Marker {
                node,
                port,
                sender,
                epoch,
            } => self.marker(node, port, sender, epoch, out),
            Input::StateChunk {
                node,
                bin,
                epoch,
                bytes,
                last,
            } => self.chunk(node, bin, epoch, bytes, last, out),
        }
    }

    fn prepare(&mut self, step: Step, out: &mut Vec<Output>) {
        if self.step.is_some() || step.epoch != self.epoch + 1 {
            debug_assert!(
                false,
                "worker {}: prepare {} at epoch {}",
                self.me, step.epoch, self.epoch
            );
            return;
        }
        let mut incoming = 0;
        for slot in &mut self.slots {
            slot.incoming = 0;
            for m in step.moves.iter().filter(|m| m.to == self.me) {
                slot.set_holding(m.bin, true);
                slot.incoming += 1;
            }
            incoming += slot.incoming;
            for port in &mut slot.markers {
                port.iter_mut().for_each(|m| *m = false);
            }
            slot.missing = slot.ports.len() * self.live.iter().filter(|&&l| l).count();
            // Senders that already ended count as marked (never this
            // worker: its own marker counts at `Switch`).
            for (p, ended) in slot.ended.iter().enumerate() {
                for (w, &e) in ended.iter().enumerate() {
                    if e && w != self.me as usize && self.live[w] {
                        slot.markers[p][w] = true;
                        slot.missing -= 1;
                    }
                }
            }
            if slot.incoming > 0 {
                out.push(Output::HoldWatermark { node: slot.node });
            }
        }
        let outgoing = step
            .moves
            .iter()
            .filter(|m| m.from == self.me)
            .copied()
            .collect();
        out.push(Output::Prepared { epoch: step.epoch });
        self.step = Some(InFlight {
            step,
            switched: false,
            outgoing,
            incoming,
            bins_in: 0,
            bytes_in: 0,
            done: false,
        });
    }

    fn switch(&mut self, epoch: u64, out: &mut Vec<Output>) {
        let Some(f) = self
            .step
            .as_mut()
            .filter(|f| f.step.epoch == epoch && !f.switched)
        else {
            debug_assert!(false, "worker {}: switch {epoch} unprepared", self.me);
            return;
        };
        f.switched = true;
        for m in &f.step.moves {
            self.table[m.bin as usize] = m.to;
        }
        self.epoch = epoch;
        out.push(Output::BroadcastMarker { epoch });
        // Its own marker: everything it routed the old way to itself was
        // delivered synchronously.
        for s in 0..self.slots.len() {
            for p in 0..self.slots[s].ports.len() {
                self.count_marker(s, p, self.me, out);
            }
        }
        self.maybe_done(out);
    }

    /// Global worker `sender` sent `End` on keyed input `(node, port)`:
    /// it stands for its marker of the step in flight and of every later
    /// one. Not an [`Input`]: it is not part of a step.
    pub(crate) fn sender_ended(
        &mut self,
        node: usize,
        port: usize,
        sender: u32,
        out: &mut Vec<Output>,
    ) {
        let Some(&s) = self.slot_of.get(node).filter(|&&s| s != u32::MAX) else {
            return;
        };
        let Some(p) = self.slots[s as usize].ports.iter().position(|&q| q == port) else {
            return;
        };
        let slot = &mut self.slots[s as usize];
        if std::mem::replace(&mut slot.ended[p][sender as usize], true)
            || sender == self.me
            || !self.live.get(sender as usize).copied().unwrap_or(false)
        {
            return;
        }
        if self.step.is_some() && !slot.markers[p][sender as usize] {
            self.count_marker(s as usize, p, sender, out);
            self.maybe_done(out);
        }
    }

    fn marker(&mut self, node: usize, port: usize, sender: u32, epoch: u64, out: &mut Vec<Output>) {
        let ok = self.step.as_ref().is_some_and(|f| f.step.epoch == epoch)
            && sender != self.me
            && self.live.get(sender as usize) == Some(&true);
        let slot = self.slot_of.get(node).copied().unwrap_or(u32::MAX);
        let p = (slot != u32::MAX)
            .then(|| {
                self.slots[slot as usize]
                    .ports
                    .iter()
                    .position(|&q| q == port)
            })
            .flatten();
        let (true, Some(p)) = (ok, p) else {
            debug_assert!(
                false,
                "worker {}: marker {epoch} on ({node}, {port}) from {sender} out of protocol",
                self.me
            );
            return;
        };
        self.count_marker(slot as usize, p, sender, out);
        self.maybe_done(out);
    }

    fn count_marker(&mut self, s: usize, p: usize, sender: u32, out: &mut Vec<Output>) {
        let slot = &mut self.slots[s];
        if std::mem::replace(&mut slot.markers[p][sender as usize], true) {
            debug_assert!(false, "worker {}: marker from {sender} twice", self.me);
            return;
        }
        slot.missing -= 1;
        if slot.missing > 0 {
            return;
        }
        let f = self.step.as_ref().expect("a step is in flight");
        for m in &f.outgoing {
            out.push(Output::Export {
                node: slot.node,
                bin: m.bin,
                to: m.to,
                epoch: f.step.epoch,
            });
        }
    }

    fn chunk(
        &mut self,
        node: usize,
        bin: u32,
        epoch: u64,
        bytes: u64,
        last: bool,
        out: &mut Vec<Output>,
    ) {
        let slot = self.slot_of.get(node).copied().unwrap_or(u32::MAX);
        let ok = slot != u32::MAX
            && self.slots[slot as usize].holds(bin)
            && self.step.as_ref().is_some_and(|f| f.step.epoch == epoch);
        if !ok {
            debug_assert!(
                false,
                "worker {}: state of ({node}, {bin}) epoch {epoch} out of protocol",
                self.me
            );
            return;
        }
        let f = self.step.as_mut().expect("checked");
        f.bytes_in += bytes;
        if !last {
            return;
        }
        f.bins_in += 1;
        f.incoming -= 1;
        let slot = &mut self.slots[slot as usize];
        slot.set_holding(bin, false);
        slot.incoming -= 1;
        out.push(Output::Install { node, bin, epoch });
        out.push(Output::Release { node, bin });
        if slot.incoming == 0 {
            out.push(Output::ReleaseWatermark { node });
        }
        self.maybe_done(out);
    }

    /// What the step in flight still waits for, for a log line when it
    /// takes long: `None` when no step is in flight.
    pub(crate) fn waiting_for(&self) -> Option<String> {
        let f = self.step.as_ref()?;
        if !f.switched {
            return Some(format!("step {}: its switch", f.step.epoch));
        }
        let mut parts = Vec::new();
        for slot in &self.slots {
            for (p, port) in slot.ports.iter().enumerate() {
                let senders: Vec<String> = (0..self.live.len())
                    .filter(|&w| self.live[w] && !slot.markers[p][w])
                    .map(|w| w.to_string())
                    .collect();
                if !senders.is_empty() {
                    parts.push(format!(
                        "markers on node {} port {port} from workers {}",
                        slot.node,
                        senders.join(", ")
                    ));
                }
            }
        }
        if f.incoming > 0 {
            parts.push(format!("{} bins' state", f.incoming));
        }
        Some(format!("step {}: {}", f.step.epoch, parts.join("; ")))
    }

    fn maybe_done(&mut self, out: &mut Vec<Output>) {
        let Some(f) = self.step.as_mut() else { return };
        if f.done || !f.switched || f.incoming > 0 || self.slots.iter().any(|s| s.missing > 0) {
            return;
        }
        f.done = true;
        out.push(Output::Done {
            epoch: f.step.epoch,
            bins_in: f.bins_in,
            bytes_in: f.bytes_in,
        });
        self.step = None;
    }
}

/// What the driver feeds the [`Coordinator`].
#[derive(Clone, Debug)]
pub(crate) enum CoordInput {
    /// Time passed (wake it at [`Coordinator::next_wakeup`]).
    Tick,
    /// A worker's [`Output::Prepared`].
    Prepared { worker: u32, epoch: u64 },
    /// A worker's [`Output::Done`].
    Done {
        worker: u32,
        epoch: u64,
        bins_in: u32,
        bytes_in: u64,
    },
}

/// One completed step or migration, for the log and the bench.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Report {
    /// The epoch reached.
    pub(crate) epoch: u64,
    pub(crate) steps: u32,
    pub(crate) bins: u32,
    pub(crate) bytes: u64,
    pub(crate) duration: Duration,
}

/// What the [`Coordinator`] asks the driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CoordOutput {
    /// Send [`Input::Prepare`] with this step to every live worker.
    Prepare(Step),
    /// Send [`Input::Switch`] to every live worker.
    Switch { epoch: u64 },
    /// A step is complete (log it); the assignment is now its epoch's.
    StepDone(Report),
    /// The whole migration is complete (log it).
    MigrationDone(Report),
}

enum Phase {
    Idle,
    /// The next step may be prepared at this time (`gap`).
    Gap(Time),
    Preparing {
        step: Step,
        waiting: Vec<bool>,
        left: u32,
    },
    Switched {
        step: Step,
        waiting: Vec<bool>,
        left: u32,
    },
}

/// Drives a migration: steps one at a time, each prepared, switched and
/// awaited on every worker; `gap` apart for `fluid`.
pub(crate) struct Coordinator {
    /// The last completed assignment.
    assignment: Assignment,
    queue: VecDeque<Step>,
    gap: Duration,
    phase: Phase,
    checkpoint: bool,
    step_started: Time,
    step_bytes: u64,
    step_bins: u32,
    migration: Option<(Time, Report)>,
    /// Workers that take part (`reset_live`).
    live: Vec<bool>,
}

impl Coordinator {
    pub(crate) fn new(workers: u32, assignment: Assignment) -> Coordinator {
        Coordinator {
            assignment,
            queue: VecDeque::new(),
            gap: Duration::ZERO,
            phase: Phase::Idle,
            checkpoint: false,
            step_started: Duration::ZERO,
            step_bytes: 0,
            step_bins: 0,
            migration: None,
            live: vec![true; workers as usize],
        }
    }

    /// The last completed assignment (what a checkpoint records).
    pub(crate) fn assignment(&self) -> &Assignment {
        &self.assignment
    }

    /// A migration is under way (steps in flight or queued).
    pub(crate) fn busy(&self) -> bool {
        self.migration.is_some()
    }

    /// Starts migrating to `target` by `strategy`; returns the number of
    /// steps (0: already there). Refused (`None`) while one is under way.
    pub(crate) fn migrate(
        &mut self,
        now: Time,
        target: &[u32],
        strategy: Strategy,
        out: &mut Vec<CoordOutput>,
    ) -> Option<usize> {
        if self.busy() {
            return None;
        }
        let steps = plan(&self.assignment, target, strategy);
        let n = steps.len();
        if n == 0 {
            return Some(0);
        }
        self.gap = match strategy {
            Strategy::Fluid { gap } => gap,
            _ => Duration::ZERO,
        };
        self.queue = steps.into();
        self.migration = Some((
            now,
            Report {
                epoch: self.assignment.epoch,
                steps: 0,
                bins: 0,
                bytes: 0,
                duration: Duration::ZERO,
            },
        ));
        self.phase = Phase::Gap(now);
        self.poll(now, out);
        Some(n)
    }

    /// A checkpoint barrier is in flight (`true`) or completed (`false`):
    /// no step is prepared meanwhile.
    // Used by the simulator (crash recovery, checkpoint gating); the
    // engine does not yet recover from a crash in the middle of a move.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn set_checkpoint_in_flight(
        &mut self,
        now: Time,
        on: bool,
        out: &mut Vec<CoordOutput>,
    ) {
        self.checkpoint = on;
        if !on {
            self.poll(now, out);
        }
    }

    /// Whether a checkpoint barrier may be injected now: no step is in
    /// flight.
    // Used by the simulator (crash recovery, checkpoint gating); the
    // engine does not yet recover from a crash in the middle of a move.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn checkpoint_allowed(&self) -> bool {
        matches!(self.phase, Phase::Idle | Phase::Gap(_))
    }

    /// When to feed [`CoordInput::Tick`] next, if it waits for time.
    pub(crate) fn next_wakeup(&self) -> Option<Time> {
        match self.phase {
            Phase::Gap(t) if !self.checkpoint => Some(t),
            _ => None,
        }
    }

    /// Drops the migration in flight and restarts from `assignment` (the
    /// checkpoint's, after a crash; see [`Migrator::reset`]). A member
    /// that did not coordinate a migration also takes the assignment it
    /// made this way (`exec::migration_mesh`).
    pub(crate) fn reset(&mut self, assignment: Assignment) {
        self.assignment = assignment;
        self.queue.clear();
        self.phase = Phase::Idle;
        self.checkpoint = false;
        self.migration = None;
    }

    /// [`reset`](Coordinator::reset) after workers are gone for good:
    /// from now on only the workers with `live[w]` are asked and awaited
    /// (the engine: after a member drained and left).
    pub(crate) fn reset_live(&mut self, assignment: Assignment, live: &[bool]) {
        debug_assert!(assignment.owners.iter().all(|&w| live[w as usize]));
        self.live = live.to_vec();
        self.reset(assignment);
    }

    /// The workers that take part.
    pub(crate) fn live(&self) -> &[bool] {
        &self.live
    }

    pub(crate) fn handle(&mut self, now: Time, input: CoordInput, out: &mut Vec<CoordOutput>) {
        match input {
            CoordInput::Tick => {}
            CoordInput::Prepared { worker, epoch } => {
                if let Phase::Preparing {
                    step,
                    waiting,
                    left,
                } = &mut self.phase
                    && step.epoch == epoch
                    && std::mem::replace(&mut waiting[worker as usize], false)
                {
                    *left -= 1;
                    if *left == 0 {
                        let step = std::mem::replace(
                            step,
                            Step {
                                epoch: 0,
                                moves: Vec::new(),
                            },
                        );
                        out.push(CoordOutput::Switch { epoch });
                        self.phase = Phase::Switched {
                            step,
                            waiting: self.live.clone(),
                            left: self.live_count(),
                        };
                    }
                } else {
                    debug_assert!(false, "prepared {epoch} from {worker} out of protocol");
                }
            }
            CoordInput::Done {
                worker,
                epoch,
                bins_in,
                bytes_in,
            } => {
                if let Phase::Switched {
                    step,
                    waiting,
                    left,
                } = &mut self.phase
                    && step.epoch == epoch
                    && std::mem::replace(&mut waiting[worker as usize], false)
                {
                    self.step_bins += bins_in;
                    self.step_bytes += bytes_in;
                    *left -= 1;
                    if *left == 0 {
                        let step = std::mem::replace(
                            step,
                            Step {
                                epoch: 0,
                                moves: Vec::new(),
                            },
                        );
                        self.complete(now, step, out);
                    }
                } else {
                    debug_assert!(false, "done {epoch} from {worker} out of protocol");
                }
            }
        }
        self.poll(now, out);
    }

    /// The step in flight and the workers it still waits for, for the
    /// error when a step takes too long.
    pub(crate) fn awaiting(&self) -> Option<String> {
        let (what, step, waiting) = match &self.phase {
            Phase::Preparing { step, waiting, .. } => ("Prepared", step, waiting),
            Phase::Switched { step, waiting, .. } => ("Done", step, waiting),
            _ => return None,
        };
        let workers: Vec<String> = (0..waiting.len())
            .filter(|&w| waiting[w])
            .map(|w| w.to_string())
            .collect();
        Some(format!(
            "step {} waits for `{what}` from workers {}",
            step.epoch,
            workers.join(", ")
        ))
    }

    fn complete(&mut self, now: Time, step: Step, out: &mut Vec<CoordOutput>) {
        self.assignment.apply(&step);
        let report = Report {
            epoch: step.epoch,
            steps: 1,
            bins: step.moves.len() as u32,
            bytes: self.step_bytes,
            duration: now.saturating_sub(self.step_started),
        };
        out.push(CoordOutput::StepDone(report.clone()));
        let (started, total) = self.migration.as_mut().expect("a migration is under way");
        total.epoch = step.epoch;
        total.steps += 1;
        total.bins += report.bins;
        total.bytes += report.bytes;
        if self.queue.is_empty() {
            total.duration = now.saturating_sub(*started);
            out.push(CoordOutput::MigrationDone(total.clone()));
            self.migration = None;
            self.phase = Phase::Idle;
        } else {
            self.phase = Phase::Gap(now + self.gap);
        }
    }

    fn live_count(&self) -> u32 {
        self.live.iter().filter(|&&l| l).count() as u32
    }

    /// Prepares the next step when its time has come.
    fn poll(&mut self, now: Time, out: &mut Vec<CoordOutput>) {
        let Phase::Gap(at) = self.phase else { return };
        if self.checkpoint || now < at {
            return;
        }
        let Some(step) = self.queue.pop_front() else {
            self.phase = Phase::Idle;
            return;
        };
        self.step_started = now;
        self.step_bytes = 0;
        self.step_bins = 0;
        out.push(CoordOutput::Prepare(step.clone()));
        self.phase = Phase::Preparing {
            step,
            waiting: self.live.clone(),
            left: self.live_count(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Workers 0 and 1 with two bins each, and keyed node 3 with one input.
    fn two_workers() -> (Assignment, [KeyedNode; 1], Vec<Migrator>) {
        let start = Assignment::new(1, vec![0, 0, 1, 1]);
        let nodes = [KeyedNode {
            node: 3,
            ports: vec![0],
        }];
        let w = (0..2)
            .map(|i| Migrator::new(i, 2, &start, &nodes))
            .collect();
        (start, nodes, w)
    }

    /// Workers added to a run (a node joined) are awaited like the others:
    /// the old owner exports only once the newcomer's marker came too, and
    /// the newcomer can be a bin's new owner.
    #[test]
    fn an_added_worker_is_awaited_and_can_take_a_bin() {
        let (start, nodes, mut w) = two_workers();
        w.iter_mut().for_each(|m| m.add_workers(1));
        w.push(Migrator::new(2, 3, &start, &nodes));
        let step = Step {
            epoch: 2,
            moves: vec![Move {
                bin: 0,
                from: 0,
                to: 2,
            }],
        };
        let mut o = Vec::new();
        for m in &mut w {
            m.handle(Input::Prepare(step.clone()), &mut o);
        }
        assert!(w[2].must_hold(3, 0) && w[2].watermark_held(3));
        o.clear();
        w[0].handle(Input::Switch { epoch: 2 }, &mut o);
        let marker = |sender| Input::Marker {
            node: 3,
            port: 0,
            sender,
            epoch: 2,
        };
        w[0].handle(marker(1), &mut o);
        assert!(
            !o.iter().any(|x| matches!(x, Output::Export { .. })),
            "the newcomer's marker is awaited: {o:?}"
        );
        w[0].handle(marker(2), &mut o);
        assert!(o.contains(&Output::Export {
            node: 3,
            bin: 0,
            to: 2,
            epoch: 2
        }));
    }

    /// One bin from worker 0 to worker 1, driven by hand through every
    /// phase, with the hot-path queries checked along the way.
    #[test]
    fn one_move_walks_through_the_protocol() {
        let (start, _, mut w) = two_workers();
        let mut c = Coordinator::new(2, start.clone());
        let (mut co, mut o) = (Vec::new(), Vec::new());
        let t = Duration::from_millis;
        assert_eq!(
            c.migrate(t(0), &[0, 1, 1, 1], Strategy::AllAtOnce, &mut co),
            Some(1)
        );
        let step = Step {
            epoch: 2,
            moves: vec![Move {
                bin: 1,
                from: 0,
                to: 1,
            }],
        };
        assert_eq!(co, vec![CoordOutput::Prepare(step.clone())]);
        assert!(!c.checkpoint_allowed());
        assert!(w.iter().all(|m| m.idle() && !m.must_hold(3, 1)));

        w[0].handle(Input::Prepare(step.clone()), &mut o);
        assert_eq!(o, vec![Output::Prepared { epoch: 2 }]);
        o.clear();
        w[1].handle(Input::Prepare(step.clone()), &mut o);
        assert_eq!(
            o,
            vec![
                Output::HoldWatermark { node: 3 },
                Output::Prepared { epoch: 2 }
            ]
        );
        o.clear();
        assert!(w[1].must_hold(3, 1) && !w[1].must_hold(3, 0) && !w[0].must_hold(3, 1));
        assert!(w[1].watermark_held(3) && !w[0].watermark_held(3));

        co.clear();
        c.handle(
            t(1),
            CoordInput::Prepared {
                worker: 0,
                epoch: 2,
            },
            &mut co,
        );
        assert!(co.is_empty(), "waits for every worker");
        c.handle(
            t(1),
            CoordInput::Prepared {
                worker: 1,
                epoch: 2,
            },
            &mut co,
        );
        assert_eq!(co, vec![CoordOutput::Switch { epoch: 2 }]);

        // Worker 1 switches first; worker 0's marker to it is later.
        w[1].handle(Input::Switch { epoch: 2 }, &mut o);
        assert_eq!(o, vec![Output::BroadcastMarker { epoch: 2 }]);
        o.clear();
        assert_eq!(w[1].owner(1), 1);
        assert_eq!(w[0].owner(1), 0, "worker 0 has not switched yet");
        w[0].handle(
            Input::Marker {
                node: 3,
                port: 0,
                sender: 1,
                epoch: 2,
            },
            &mut o,
        );
        assert!(o.is_empty(), "its own marker is missing");
        w[0].handle(Input::Switch { epoch: 2 }, &mut o);
        assert_eq!(
            o,
            vec![
                Output::BroadcastMarker { epoch: 2 },
                Output::Export {
                    node: 3,
                    bin: 1,
                    to: 1,
                    epoch: 2
                },
                Output::Done {
                    epoch: 2,
                    bins_in: 0,
                    bytes_in: 0
                },
            ]
        );
        o.clear();
        assert!(w[0].idle() && w[0].table() == [0, 1, 1, 1]);

        w[1].handle(
            Input::StateChunk {
                node: 3,
                bin: 1,
                epoch: 2,
                bytes: 10,
                last: false,
            },
            &mut o,
        );
        w[1].handle(
            Input::Marker {
                node: 3,
                port: 0,
                sender: 0,
                epoch: 2,
            },
            &mut o,
        );
        assert!(o.is_empty());
        w[1].handle(
            Input::StateChunk {
                node: 3,
                bin: 1,
                epoch: 2,
                bytes: 5,
                last: true,
            },
            &mut o,
        );
        assert_eq!(
            o,
            vec![
                Output::Install {
                    node: 3,
                    bin: 1,
                    epoch: 2
                },
                Output::Release { node: 3, bin: 1 },
                Output::ReleaseWatermark { node: 3 },
                Output::Done {
                    epoch: 2,
                    bins_in: 1,
                    bytes_in: 15
                },
            ]
        );
        assert!(w[1].idle() && !w[1].must_hold(3, 1) && w[1].epoch() == 2);

        co.clear();
        c.handle(
            t(2),
            CoordInput::Done {
                worker: 0,
                epoch: 2,
                bins_in: 0,
                bytes_in: 0,
            },
            &mut co,
        );
        c.handle(
            t(5),
            CoordInput::Done {
                worker: 1,
                epoch: 2,
                bins_in: 1,
                bytes_in: 15,
            },
            &mut co,
        );
        let report = Report {
            epoch: 2,
            steps: 1,
            bins: 1,
            bytes: 15,
            duration: t(5),
        };
        assert_eq!(
            co,
            vec![
                CoordOutput::StepDone(report.clone()),
                CoordOutput::MigrationDone(report)
            ]
        );
        assert!(c.checkpoint_allowed() && !c.busy());
        assert_eq!(c.assignment(), &Assignment::new(2, vec![0, 1, 1, 1]));
    }

    /// Fluid steps wait `gap` after each other, and none is prepared while
    /// a checkpoint is in flight.
    /// A sender that sent `End` (its input ended) before or during a step
    /// stands for its marker: the old owner exports without waiting for
    /// a marker that will never come.
    #[test]
    fn an_ended_sender_stands_for_its_marker() {
        let nodes = [KeyedNode {
            node: 3,
            ports: vec![0],
        }];
        let step = Step {
            epoch: 2,
            moves: vec![Move {
                bin: 1,
                from: 0,
                to: 1,
            }],
        };
        let export = Output::Export {
            node: 3,
            bin: 1,
            to: 1,
            epoch: 2,
        };
        // Worker 2 ended before the step, worker 1 during it.
        let mut w = Migrator::new(0, 3, &Assignment::new(1, vec![0, 0, 1, 2]), &nodes);
        let mut o = Vec::new();
        w.sender_ended(3, 0, 2, &mut o);
        w.handle(Input::Prepare(step.clone()), &mut o);
        w.handle(Input::Switch { epoch: 2 }, &mut o);
        assert!(!o.contains(&export), "worker 1's marker is missing: {o:?}");
        o.clear();
        w.sender_ended(3, 0, 1, &mut o);
        assert_eq!(o[0], export, "{o:?}");
        assert!(w.idle());
        // An end from this worker itself, or twice, changes nothing.
        o.clear();
        w.sender_ended(3, 0, 0, &mut o);
        w.sender_ended(3, 0, 1, &mut o);
        assert!(o.is_empty());
    }

    #[test]
    fn coordinator_honours_gap_and_checkpoints() {
        let t = Duration::from_millis;
        let mut c = Coordinator::new(1, Assignment::new(1, vec![0, 0]));
        let mut co = Vec::new();
        c.set_checkpoint_in_flight(t(0), true, &mut co);
        let fluid = Strategy::Fluid { gap: t(10) };
        assert_eq!(c.migrate(t(0), &[1, 1], fluid, &mut co), Some(2));
        assert!(co.is_empty(), "a checkpoint is in flight");
        assert!(c.migrate(t(0), &[1, 0], fluid, &mut co).is_none(), "busy");
        c.set_checkpoint_in_flight(t(1), false, &mut co);
        assert!(matches!(&co[..], [CoordOutput::Prepare(s)] if s.epoch == 2));
        co.clear();
        c.handle(
            t(2),
            CoordInput::Prepared {
                worker: 0,
                epoch: 2,
            },
            &mut co,
        );
        c.handle(
            t(3),
            CoordInput::Done {
                worker: 0,
                epoch: 2,
                bins_in: 1,
                bytes_in: 1,
            },
            &mut co,
        );
        assert!(matches!(
            &co[..],
            [CoordOutput::Switch { .. }, CoordOutput::StepDone(_)]
        ));
        assert_eq!(c.next_wakeup(), Some(t(13)));
        assert!(c.checkpoint_allowed(), "between steps");
        co.clear();
        c.handle(t(12), CoordInput::Tick, &mut co);
        assert!(co.is_empty());
        c.handle(t(13), CoordInput::Tick, &mut co);
        assert!(matches!(&co[..], [CoordOutput::Prepare(s)] if s.epoch == 3));
    }
}
