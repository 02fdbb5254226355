//! Live migration across the members of a distributed run: the control
//! messages between the coordinating member and the others, on one
//! [`StreamKind::Control`] stream from each member to each other member
//! (ordered, apart from the data so a full data stream never delays a
//! step). Markers and bin state go on the data streams (`remote.rs`).
//!
//! Exactly one coordinator at a time, cluster-wide, deterministically:
//! the coordinator is the member that got the request. It first takes its
//! own lock (`Control::migrating`), then sends `Begin { id, epoch }` to
//! every other member; each takes its lock and answers `Accept`, or
//! `Refuse` if its lock is held (another migration, here or coordinated
//! elsewhere), its input has ended, or its assignment epoch is not the
//! coordinator's (it has not seen the same steps). One refusal and the
//! coordinator releases the members that accepted (`Abort { id }`) and
//! answers 409. Two members asked at once both refuse each other: neither
//! runs, both answer 409, nothing is half started. With every member
//! locked, the coordinator runs the steps (`Prepare`, `Switch` to every
//! member's workers; `Prepared`, `Done` back to it); at the end `Finish`
//! releases the members, whose coordinators take the assignment the steps
//! made (so the next request may go to any member). A worker's migrator
//! also refuses (ignores, in release builds) a `Prepare` for an epoch
//! other than the next of its own.
//!
//! SIGTERM drains a member ([`Shared::drain`]): its sources end, but its
//! workers hold back `End` on their exchange streams (a bin's state goes
//! out on them, and nothing may follow an `End`); it coordinates the move
//! of its bins to the others like any rebalance, then sends `Leave`; each
//! other member marks it gone (its streams closing is no failure, its
//! workers are no longer asked or awaited) and answers `Left`. With every
//! answer in, its workers send the held `End`s and return. A sender that
//! ended stands for its marker of every later step (`Migrator::sender_ended`).

use std::net::SocketAddr;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::Shared;
use super::migration::{Control, RebalanceError, lock};
use super::remote::Cluster;
use crate::mesh::driver::MeshNode;
use crate::mesh::frame::{Frame, MigrateMsg, StreamKind};
use crate::mesh::streams::FrameReceiver;
use crate::migrate::{CoordInput, Input, Move, Step};

/// How long the coordinator waits for every member to answer `Begin`.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The other members as the control plane sees them. Members are only
/// ever added (a node joins, `join.rs`), never removed: one that drained
/// is marked as left.
pub(crate) struct Link {
    /// This member's index in the assignment.
    pub(crate) me: usize,
    members: RwLock<Members>,
}

#[derive(Default)]
struct Members {
    names: Vec<String>,
    /// Per member: the queue of its control stream (`None` for this one).
    to: Vec<Option<flume::Sender<MigrateMsg>>>,
    /// Per member: its global workers.
    workers: Vec<std::ops::Range<usize>>,
    /// Per member: it drained and left the run (`Leave`). It owns no bin
    /// and sent `End` on all its streams: its streams closing is no
    /// failure, and migrations go on without it.
    left: Vec<bool>,
}

impl Link {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Members> {
        self.members.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Members> {
        self.members.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Member `node`'s name.
    pub(crate) fn name(&self, node: usize) -> String {
        self.read()
            .names
            .get(node)
            .map_or("?".to_string(), |n| n.clone())
    }

    /// How many members the run has had (those that left included).
    pub(crate) fn len(&self) -> usize {
        self.read().names.len()
    }

    pub(crate) fn send(&self, node: usize, msg: MigrateMsg) {
        if let Some(Some(tx)) = self.read().to.get(node) {
            let _ = tx.send(msg);
        }
    }

    /// To every other member still in the run.
    pub(crate) fn broadcast(&self, msg: MigrateMsg) {
        let m = self.read();
        for (node, tx) in m.to.iter().enumerate() {
            if let Some(tx) = tx
                && !m.left[node]
            {
                let _ = tx.send(msg.clone());
            }
        }
    }

    /// Every member the run has had, in member order: name and global
    /// workers.
    pub(crate) fn member_slots(&self) -> Vec<(String, std::ops::Range<usize>)> {
        let m = self.read();
        m.names
            .iter()
            .cloned()
            .zip(m.workers.iter().cloned())
            .collect()
    }

    /// Whether member `node` drained and left the run.
    pub(crate) fn has_left(&self, node: usize) -> bool {
        self.read().left.get(node).copied().unwrap_or(false)
    }

    /// Marks member `node` as left; whether it was in the run.
    fn set_left(&self, node: usize) -> bool {
        self.write()
            .left
            .get_mut(node)
            .is_some_and(|l| !std::mem::replace(l, true))
    }

    /// Per global worker: whether its member left the run.
    pub(crate) fn gone_workers(&self, global: usize) -> Vec<bool> {
        let m = self.read();
        let mut gone = vec![false; global];
        for (node, range) in m.workers.iter().enumerate() {
            if m.left[node] {
                for w in range.clone().filter(|&w| w < global) {
                    gone[w] = true;
                }
            }
        }
        gone
    }

    /// The other members still in the run.
    pub(crate) fn others(&self) -> Vec<usize> {
        let m = self.read();
        (0..m.to.len())
            .filter(|&n| m.to[n].is_some() && !m.left[n])
            .collect()
    }

    /// Adds a member that joined the run, reached through `to`.
    pub(crate) fn add(
        &self,
        name: String,
        to: flume::Sender<MigrateMsg>,
        workers: std::ops::Range<usize>,
    ) -> usize {
        let mut m = self.write();
        m.names.push(name);
        m.to.push(Some(to));
        m.workers.push(workers);
        m.left.push(false);
        m.names.len() - 1
    }

    /// Takes every other member's lock for request `id` at `epoch`, or
    /// releases those taken and says who refused.
    pub(crate) fn lock_cluster(
        &self,
        control: &Control,
        id: u64,
        epoch: u64,
    ) -> Result<(), RebalanceError> {
        let others = self.others().len();
        while control.acks.1.try_recv().is_ok() {}
        self.broadcast(MigrateMsg::Begin {
            id,
            node: self.me as u16,
            epoch,
        });
        let deadline = Instant::now() + LOCK_TIMEOUT;
        let mut accepted = 0;
        let mut refused = Vec::new();
        let mut answered = 0;
        while answered < others {
            let left = deadline.saturating_duration_since(Instant::now());
            match control.acks.1.recv_timeout(left) {
                Ok(MigrateMsg::Accept { id: i, .. }) if i == id => {
                    accepted += 1;
                    answered += 1;
                }
                Ok(MigrateMsg::Refuse {
                    id: i,
                    node,
                    reason,
                }) if i == id => {
                    refused.push(format!("{}: {reason}", self.name(node as usize)));
                    answered += 1;
                }
                Ok(_) => {} // an answer to an earlier request
                Err(_) => {
                    refused.push(format!(
                        "{} of {others} members did not answer within {LOCK_TIMEOUT:?}",
                        others - answered
                    ));
                    break;
                }
            }
        }
        if refused.is_empty() && accepted == others {
            return Ok(());
        }
        // Members release only a lock taken for this id.
        self.broadcast(MigrateMsg::Abort { id });
        Err(RebalanceError::Busy(format!(
            "a migration is already running elsewhere or cannot start ({})",
            refused.join("; ")
        )))
    }
}

/// Opens this member's control stream to every other member and gives the
/// migration control its [`Link`]. The tasks end with the run.
pub(crate) fn start(cluster: &Cluster, shared: &Arc<Shared>) -> Vec<smol::Task<()>> {
    let Some(control) = &shared.migration else {
        return Vec::new();
    };
    let a = &cluster.assignment;
    let mut members = Members::default();
    let mut tasks = Vec::new();
    for node in 0..a.members.len() {
        let left = cluster.left.get(node).copied().unwrap_or(false);
        if node == cluster.me || left {
            members.to.push(None);
        } else {
            let (tx, task) = spawn_control(
                cluster.mesh.clone(),
                cluster.addrs[node],
                a.members[node].name.clone(),
                node,
                shared,
            );
            members.to.push(Some(tx));
            tasks.push(task);
        }
        members.names.push(a.members[node].name.clone());
        members
            .workers
            .push(a.first[node]..a.first[node] + a.members[node].workers as usize);
        members.left.push(left);
    }
    let _ = control.mesh.set(Link {
        me: cluster.me,
        members: RwLock::new(members),
    });
    tasks
}

/// The queue of a control stream to member `node` at `addr`, and the task
/// writing it.
pub(crate) fn spawn_control(
    mesh: Arc<MeshNode>,
    addr: SocketAddr,
    name: String,
    node: usize,
    shared: &Arc<Shared>,
) -> (flume::Sender<MigrateMsg>, smol::Task<()>) {
    let (tx, rx) = flume::unbounded();
    let shared = shared.clone();
    let task = smol::spawn(async move {
        if let Err(e) = send_control(mesh, addr, rx).await
            && !shared.failed.load(Relaxed)
            && !shared.halted.load(Relaxed)
            && !shared.gone(node)
        {
            tracing::warn!("migration control stream to {name}: {e}");
        }
    });
    (tx, task)
}

async fn send_control(
    mesh: Arc<MeshNode>,
    addr: SocketAddr,
    rx: flume::Receiver<MigrateMsg>,
) -> Result<(), String> {
    let peer = mesh.connect(addr).await.map_err(|e| e.to_string())?;
    let mut tx = peer
        .open_stream(StreamKind::Control)
        .await
        .map_err(|e| e.to_string())?;
    while let Ok(msg) = rx.recv_async().await {
        tx.send(&Frame::Migrate(msg))
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Reads a member's control stream to this one. A frame that is not a
/// migration message closes it with an error naming the peer.
pub(crate) async fn read_control(rx: FrameReceiver, shared: Arc<Shared>) {
    let peer = rx.peer().to_string();
    let mut rx = super::remote::Incoming::control(rx);
    loop {
        match rx.recv().await {
            Ok(Some(Frame::Migrate(
                msg @ (MigrateMsg::JoinAsk { .. } | MigrateMsg::Joined { .. }),
            ))) => super::join::on_msg(&shared, msg),
            Ok(Some(Frame::Migrate(msg))) => shared.on_migrate_msg(msg),
            Ok(Some(other)) => {
                tracing::error!(
                    "closing the migration control stream from {peer}: unexpected frame {other:?}"
                );
                return;
            }
            Ok(None) => return,
            Err(e) => {
                if !shared.failed.load(Relaxed)
                    && !shared.halted.load(Relaxed)
                    && !shared.left.load(SeqCst)
                {
                    tracing::warn!("migration control stream from {peer}: {e}");
                }
                return;
            }
        }
    }
}

impl Shared {
    /// The bin assignment in force (epoch, global worker per bin), as the
    /// controller's gossip publishes it. `None` while a migration runs
    /// here (the assignment is between two epochs) or without migration
    /// control; never waits for the lock a migration holds.
    pub(crate) fn assignment_in_force(&self) -> Option<(u64, Vec<u32>)> {
        let control = self.migration.as_ref()?;
        if control.migrating.load(SeqCst) {
            return None;
        }
        let coordinator = control.coordinator.try_lock().ok()?;
        let a = coordinator.assignment();
        Some((a.epoch, a.owners.clone()))
    }

    /// The members of a distributed run still in it: name and global
    /// workers, in member order (`None` for a run alone).
    pub(crate) fn members_in_run(&self) -> Option<Vec<(String, std::ops::Range<usize>)>> {
        let link = self.migration.as_ref()?.mesh.get()?;
        let m = link.read();
        Some(
            (0..m.names.len())
                .filter(|&n| !m.left[n])
                .map(|n| (m.names[n].clone(), m.workers[n].clone()))
                .collect(),
        )
    }

    /// Whether this run is distributed over members with live migration
    /// between them (SIGTERM drains this member then).
    pub(crate) fn can_drain(&self) -> bool {
        self.migration
            .as_ref()
            .is_some_and(|c| c.mesh.get().is_some())
    }

    /// Whether member `node` left the run, or this member did: a stream
    /// between them closing is not a failure then.
    pub(crate) fn gone(&self, node: usize) -> bool {
        self.left.load(SeqCst) || self.peer_left(node)
    }

    /// Whether member `node` left the run.
    pub(crate) fn peer_left(&self, node: usize) -> bool {
        self.migration
            .as_ref()
            .and_then(|c| c.mesh.get())
            .is_some_and(|l| l.has_left(node))
    }

    /// SIGTERM on a member of a distributed run: its sources have been
    /// asked to end; its bins move to the other members (the
    /// [`fallback`](crate::migrate::fallback) of its workers, by
    /// `strategy`), then it tells the others it leaves and, once they
    /// answered, its workers end and send `End` on every stream. Gives up
    /// at `deadline`.
    pub(crate) fn drain(
        &self,
        strategy: crate::migrate::Strategy,
        deadline: Instant,
    ) -> Result<crate::migrate::Report, String> {
        let control = self
            .migration
            .as_ref()
            .ok_or("this run has no migration control")?;
        let link = control.mesh.get().ok_or("this is not a distributed run")?;
        let report = loop {
            let mut gone = link.gone_workers(self.total_workers.load(SeqCst));
            gone.iter_mut()
                .skip(self.first_worker)
                .take(self.workers)
                .for_each(|g| *g = true);
            if gone.iter().all(|&g| g) {
                return Err("no other member is left to take its bins".into());
            }
            let current = lock(&control.coordinator).assignment().clone();
            let target = crate::migrate::fallback(&current, &gone).owners;
            match self.rebalance(Some(target), strategy) {
                Ok(r) => break r,
                // Another member's migration: this one goes after it.
                Err(RebalanceError::Busy(m)) if Instant::now() < deadline => {
                    tracing::debug!("drain waits: {m}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        while control.acks.1.try_recv().is_ok() {}
        let mut waiting: Vec<usize> = link.others();
        link.broadcast(MigrateMsg::Leave {
            node: link.me as u16,
        });
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match control.acks.1.recv_timeout(left) {
                Ok(MigrateMsg::Left { node }) => waiting.retain(|&n| n != node as usize),
                Ok(_) => {}
                Err(_) => {
                    let names: Vec<String> = waiting.iter().map(|&n| link.name(n)).collect();
                    return Err(format!(
                        "{} did not answer its leave in time",
                        names.join(", ")
                    ));
                }
            }
        }
        self.left.store(true, SeqCst);
        self.wake_workers();
        Ok(report)
    }

    /// A control message from another member.
    fn on_migrate_msg(&self, msg: MigrateMsg) {
        let Some(control) = &self.migration else {
            return;
        };
        let Some(link) = control.mesh.get() else {
            return;
        };
        match msg {
            MigrateMsg::Begin { id, node, epoch } => {
                let answer = match self.take_lock(control, id, node as usize, epoch) {
                    Ok(()) => MigrateMsg::Accept {
                        id,
                        node: link.me as u16,
                    },
                    Err(reason) => MigrateMsg::Refuse {
                        id,
                        node: link.me as u16,
                        reason,
                    },
                };
                link.send(node as usize, answer);
            }
            msg @ (MigrateMsg::CheckpointRequest { .. }
            | MigrateMsg::CheckpointAligned { .. }
            | MigrateMsg::CheckpointGo { .. }
            | MigrateMsg::CheckpointPrepared { .. }
            | MigrateMsg::CheckpointCommitted { .. }) => {
                let _ = control.checkpoint_msgs.0.send(msg);
            }
            MigrateMsg::Accept { .. }
            | MigrateMsg::Refuse { .. }
            | MigrateMsg::Left { .. }
            | MigrateMsg::JoinReady { .. }
            | MigrateMsg::JoinStarted { .. } => {
                let _ = control.acks.0.send(msg);
            }
            // Handled by `join::on_msg`, and by a newcomer before its run.
            MigrateMsg::JoinAsk { .. } | MigrateMsg::Joined { .. } | MigrateMsg::Welcome(_) => {}
            MigrateMsg::Leave { node } => {
                let node = node as usize;
                if link.set_left(node) {
                    let name = link.name(node);
                    tracing::info!(
                        member = name.as_str(),
                        "{name} drained and left the run; the others go on without it"
                    );
                }
                // Answer on the stream, then forget it.
                link.send(
                    node,
                    MigrateMsg::Left {
                        node: link.me as u16,
                    },
                );
            }
            MigrateMsg::Abort { id } => {
                let mut holder = lock(&control.holder);
                if holder.is_some_and(|(i, _)| i == id) {
                    *holder = None;
                    control.migrating.store(false, SeqCst);
                }
            }
            MigrateMsg::Prepare { epoch, moves } => {
                let step = Step {
                    epoch,
                    moves: moves
                        .into_iter()
                        .map(|(bin, from, to)| Move { bin, from, to })
                        .collect(),
                };
                lock(&control.tracked).0 = Some(step.clone());
                control.to_all(&mut lock(&control.trace), || Input::Prepare(step.clone()));
                self.wake_workers();
            }
            MigrateMsg::Switch { epoch } => {
                {
                    let mut tracked = lock(&control.tracked);
                    if let Some(step) = tracked.0.take().filter(|s| s.epoch == epoch) {
                        tracked.1.apply(&step);
                    }
                }
                control.to_all(&mut lock(&control.trace), || Input::Switch { epoch });
                self.wake_workers();
            }
            MigrateMsg::Prepared { worker, epoch } => {
                let _ = control
                    .to_coordinator
                    .send((CoordInput::Prepared { worker, epoch }, 0));
            }
            MigrateMsg::Done {
                worker,
                epoch,
                bins_in,
                bytes_in,
            } => {
                let _ = control.to_coordinator.send((
                    CoordInput::Done {
                        worker,
                        epoch,
                        bins_in,
                        bytes_in,
                    },
                    0,
                ));
            }
            MigrateMsg::Finish { id, epoch } => {
                let mut holder = lock(&control.holder);
                if holder.is_some_and(|(i, _)| i == id) {
                    let tracked = lock(&control.tracked).1.clone();
                    if tracked.epoch != epoch {
                        tracing::warn!(
                            "the migration ended at epoch {epoch}, this member saw epoch {}",
                            tracked.epoch
                        );
                    }
                    lock(&control.coordinator).reset(tracked);
                    *holder = None;
                    control.moved.store(true, SeqCst);
                    control.migrating.store(false, SeqCst);
                }
            }
        }
    }

    /// This member's lock for request `id` of member `node`.
    fn take_lock(&self, control: &Control, id: u64, node: usize, epoch: u64) -> Result<(), String> {
        if control
            .migrating
            .compare_exchange(false, true, SeqCst, SeqCst)
            .is_err()
        {
            return Err(control.busy_reason());
        }
        if self.finishing.load(SeqCst) > 0 {
            control.migrating.store(false, SeqCst);
            return Err("its input has ended".into());
        }
        // A member that drains leaves once its own migration is done.
        if self.stop.load(Relaxed) {
            control.migrating.store(false, SeqCst);
            return Err("it is stopping".into());
        }
        let here = lock(&control.coordinator).assignment().clone();
        if here.epoch != epoch {
            control.migrating.store(false, SeqCst);
            return Err(format!(
                "it is at assignment epoch {}, the coordinator at {epoch}",
                here.epoch
            ));
        }
        *lock(&control.tracked) = (None, here);
        *lock(&control.holder) = Some((id, node));
        Ok(())
    }
}
