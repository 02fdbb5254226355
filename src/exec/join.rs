//! A node joining a running distributed run.
//!
//! The newcomer (started with the same pipeline after the run began, see
//! `daemon::distribute`) asks one member, its sponsor, with `JoinAsk` on a
//! control stream. The sponsor takes the cluster-wide migration lock (so
//! no bin moves and every member is at the same assignment epoch), numbers
//! the newcomer's workers after the run's last global worker, and tells
//! the others (`Joined`). Every member then adds it ([`Shared::add_member`]):
//! a control stream to it, a stream per (exchange, local worker, newcomer
//! worker), and its workers as senders and destinations of every worker
//! ([`Worker::add_workers`]): each receiving port awaits the newcomer's
//! watermark (starting at the operator's own watermark, so the minimum
//! never goes back) and its end of input, the migration machines await its
//! markers, and each sender tells the newcomer where its stream stands
//! (watermark, and `End` if it already ended). Once all answered
//! (`JoinReady`, with their highest operator watermark), the sponsor sends
//! the newcomer its `Welcome` (members, assignment in force, watermark),
//! releases the lock, waits for the newcomer to run (`JoinStarted`) and
//! moves its share of the bins to it: an even rebalance over every worker
//! still in the run, by `[migration] strategy`.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::migration::{RebalanceError, lock};
use super::remote::Cluster;
use super::worker::{Body, Message, Route, Worker};
use super::{Shared, migration_mesh};
use crate::control::assignment::{Assignment, Slot};
use crate::kernel::watermark::WATERMARK_START;
use crate::mesh::driver::{IncomingStream, MeshNode};
use crate::mesh::frame::{Frame, JoinWelcome, MigrateMsg, StreamKind};

/// How long each phase of a join may take (the lock, the members' answers,
/// the newcomer's start).
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);

/// What a worker adds when a node joins: a queue to each of the
/// newcomer's workers (global ids from `first`), per exchange edge.
pub(crate) struct AddWorkers {
    pub(crate) first: usize,
    pub(crate) senders: Vec<Vec<flume::Sender<Message>>>,
    /// The worker's answer: the highest watermark of its keyed operators.
    pub(crate) ack: flume::Sender<i64>,
}

/// A newcomer's welcome, and the streams it took from the mesh while it
/// waited for it (the members open theirs before the welcome comes).
pub(crate) struct Joining {
    pub(crate) welcome: JoinWelcome,
    pending: Mutex<Vec<IncomingStream>>,
}

impl Joining {
    pub(crate) fn take_pending(&self) -> Vec<IncomingStream> {
        std::mem::take(&mut *lock(&self.pending))
    }
}

/// What adding a member needs from the remote half of the exchanges.
pub(crate) struct Hook {
    mesh: Arc<MeshNode>,
    /// The epoch of the assignment the run started with (on every stream).
    run_epoch: u64,
    /// The members and their workers, growing as nodes join.
    assignment: RwLock<Assignment>,
    /// Every member's mesh address, in member order.
    addrs: Mutex<Vec<SocketAddr>>,
    edges: usize,
    /// The exchange streams' sender tasks (awaited at the end of the run).
    senders: Arc<Mutex<Vec<smol::Task<()>>>>,
    /// Control streams to members that joined.
    control: Mutex<Vec<smol::Task<()>>>,
    /// `[migration] strategy`: how the newcomer's bins move to it.
    pub(crate) strategy: std::sync::OnceLock<crate::migrate::Strategy>,
}

impl Hook {
    pub(crate) fn new(
        cluster: &Cluster,
        edges: usize,
        senders: Arc<Mutex<Vec<smol::Task<()>>>>,
    ) -> Arc<Hook> {
        Arc::new(Hook {
            mesh: cluster.mesh.clone(),
            run_epoch: cluster.assignment.epoch,
            assignment: RwLock::new((*cluster.assignment).clone()),
            addrs: Mutex::new(cluster.addrs.clone()),
            edges,
            senders,
            control: Mutex::new(Vec::new()),
            strategy: std::sync::OnceLock::new(),
        })
    }

    /// The members and their workers now.
    pub(crate) fn assignment(&self) -> Assignment {
        self.assignment
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A member's control message about a join; the slow parts on a thread of
/// their own (the caller reads a stream).
pub(crate) fn on_msg(shared: &Arc<Shared>, msg: MigrateMsg) {
    let shared = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("eddy-join".into())
        .spawn(move || match msg {
            MigrateMsg::JoinAsk {
                name,
                addr,
                workers,
            } => {
                if let Err(e) = shared.admit(&name, &addr, workers) {
                    tracing::error!("{name} cannot join the run: {e}");
                }
            }
            MigrateMsg::Joined {
                id,
                sponsor,
                node,
                name,
                addr,
                workers,
                first,
            } => {
                let Some(link) = shared.migration.as_ref().and_then(|c| c.mesh.get()) else {
                    return;
                };
                let held = shared
                    .migration
                    .as_ref()
                    .is_some_and(|c| lock(&c.holder).is_some_and(|(i, _)| i == id));
                if !held {
                    tracing::warn!(
                        "ignoring the join of {name}: its sponsor does not hold the lock"
                    );
                    return;
                }
                let added = addr
                    .parse::<SocketAddr>()
                    .map_err(|e| format!("its address {addr:?}: {e}"))
                    .and_then(|a| {
                        shared.add_member(node as usize, &name, a, workers, first as usize)
                    });
                match added {
                    Ok(watermark) => link.send(
                        sponsor as usize,
                        MigrateMsg::JoinReady {
                            node: link.me as u16,
                            watermark,
                        },
                    ),
                    // The others may have added it: the run cannot go on
                    // consistently.
                    Err(e) => shared.fail(format!("cannot add {name}, which joins the run: {e}")),
                }
            }
            _ => {}
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start a thread for a join: {e}");
    }
}

impl Shared {
    /// The sponsor's side of a join (see the module comment).
    fn admit(self: &Arc<Self>, name: &str, addr: &str, workers: u16) -> Result<(), String> {
        let control = self.migration.as_ref().ok_or("no migration control")?;
        let link = control.mesh.get().ok_or("not a distributed run")?;
        let hook = self.join.get().ok_or("not a distributed run")?;
        let addr: SocketAddr = addr
            .parse()
            .map_err(|e| format!("its address {addr:?}: {e}"))?;
        if workers == 0 {
            return Err("it has no workers".into());
        }
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let id = loop {
            match self.lock_for_join(control, link) {
                Ok(id) => break id,
                Err(RebalanceError::Busy(m)) if Instant::now() < deadline => {
                    tracing::debug!("the join of {name} waits: {m}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        let node = link.len();
        let first = self.total_workers.load(SeqCst);
        let welcome = (|| -> Result<JoinWelcome, String> {
            let mut waiting = link.others();
            while control.acks.1.try_recv().is_ok() {}
            link.broadcast(MigrateMsg::Joined {
                id,
                sponsor: link.me as u16,
                node: node as u16,
                name: name.to_string(),
                addr: addr.to_string(),
                workers,
                first: first as u32,
            });
            let mut watermark = self.add_member(node, name, addr, workers, first)?;
            while !waiting.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now()) + JOIN_TIMEOUT;
                match control.acks.1.recv_timeout(left) {
                    Ok(MigrateMsg::JoinReady {
                        node: n,
                        watermark: w,
                    }) => {
                        waiting.retain(|&m| m != n as usize);
                        watermark = watermark.max(w);
                    }
                    Ok(_) => {}
                    Err(_) => {
                        let names: Vec<String> = waiting.iter().map(|&n| link.name(n)).collect();
                        return Err(format!("{} did not add it in time", names.join(", ")));
                    }
                }
            }
            let a = lock(&control.coordinator).assignment().clone();
            let members = hook.assignment();
            let addrs = lock(&hook.addrs).clone();
            Ok(JoinWelcome {
                node: node as u16,
                sponsor: link.me as u16,
                run_epoch: hook.run_epoch,
                epoch: a.epoch,
                owners: a.owners,
                members: (0..members.members.len())
                    .map(|n| {
                        let m = &members.members[n];
                        let addr = addrs.get(n).map_or(String::new(), |a| a.to_string());
                        (m.name.clone(), addr, m.workers, link.has_left(n))
                    })
                    .collect(),
                watermark,
            })
        })();
        let epoch = lock(&control.coordinator).assignment().epoch;
        let result = match welcome {
            Ok(w) => {
                // First on the newcomer's control stream, before `Finish`.
                link.send(node, MigrateMsg::Welcome(w.clone()));
                Ok(w)
            }
            Err(e) => {
                self.fail(format!("the join of {name} failed: {e}"));
                Err(e)
            }
        };
        link.broadcast(MigrateMsg::Finish { id, epoch });
        *lock(&control.holder) = None;
        control.migrating.store(false, SeqCst);
        let w = result?;
        tracing::info!(
            member = name,
            "{name} joins the run as member {node} (workers {first}-{}) at epoch {}; \
             its share of the bins moves to it once it runs",
            first + workers as usize - 1,
            w.epoch
        );
        // The newcomer runs: its share of the bins.
        let started = Instant::now() + JOIN_TIMEOUT;
        loop {
            let left = started.saturating_duration_since(Instant::now());
            match control.acks.1.recv_timeout(left) {
                Ok(MigrateMsg::JoinStarted { node: n }) if n as usize == node => break,
                Ok(_) => {}
                Err(_) => return Err(format!("{name} did not start within {JOIN_TIMEOUT:?}")),
            }
        }
        let strategy = hook
            .strategy
            .get()
            .copied()
            .ok_or("the run has no migration strategy")?;
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let new = first..first + workers as usize;
        loop {
            let current = lock(&control.coordinator).assignment().owners.clone();
            let gone = link.gone_workers(self.total_workers.load(SeqCst));
            let target = share_for(&current, &gone, new.clone());
            match self.rebalance(Some(target), strategy) {
                Ok(r) => {
                    tracing::info!(
                        member = name,
                        epoch = r.epoch,
                        bins = r.bins,
                        bytes = r.bytes,
                        "{name} joined: the run's bins spread over its workers too ({} bins moved, {} bytes, epoch {})",
                        r.bins,
                        r.bytes,
                        r.epoch
                    );
                    return Ok(());
                }
                Err(RebalanceError::Busy(m)) if Instant::now() < deadline => {
                    tracing::debug!("moving bins to {name} waits: {m}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(format!("moving its bins to it: {e}")),
            }
        }
    }

    /// The cluster-wide lock, as a migration takes it (see
    /// `migration_mesh`); its request id.
    fn lock_for_join(
        &self,
        control: &super::migration::Control,
        link: &migration_mesh::Link,
    ) -> Result<u64, RebalanceError> {
        if control
            .migrating
            .compare_exchange(false, true, SeqCst, SeqCst)
            .is_err()
        {
            return Err(RebalanceError::Busy(control.busy_reason()));
        }
        let release = || {
            *lock(&control.holder) = None;
            control.migrating.store(false, SeqCst);
        };
        if self.finishing.load(SeqCst) > 0 || self.stop.load(SeqCst) {
            release();
            return Err("the run is ending: no node joins it now".into());
        }
        let id = super::migration::request_id(link.me);
        *lock(&control.holder) = Some((id, link.me));
        let epoch = lock(&control.coordinator).assignment().epoch;
        if let Err(e) = link.lock_cluster(control, id, epoch) {
            release();
            return Err(e);
        }
        Ok(id)
    }

    /// Adds member `node` (a node joining the run, global workers from
    /// `first`) on this member; returns the highest watermark of this
    /// member's keyed operators, which the newcomer's records must not be
    /// older than.
    pub(crate) fn add_member(
        self: &Arc<Self>,
        node: usize,
        name: &str,
        addr: SocketAddr,
        workers: u16,
        first: usize,
    ) -> Result<i64, String> {
        let control = self.migration.as_ref().ok_or("no migration control")?;
        let link = control.mesh.get().ok_or("not a distributed run")?;
        let hook = self.join.get().ok_or("not a distributed run")?;
        if link.len() != node || self.total_workers.load(SeqCst) != first {
            return Err(format!(
                "it would be member {node} with workers from {first}, this member knows {} members and {} workers",
                link.len(),
                self.total_workers.load(SeqCst)
            ));
        }
        {
            let mut a = hook.assignment.write().unwrap_or_else(|e| e.into_inner());
            a.members.push(Slot {
                name: name.to_string(),
                workers,
            });
            a.first.push(first);
            lock(&hook.addrs).push(addr);
        }
        let shared = self.clone();
        let (tx, task) =
            migration_mesh::spawn_control(hook.mesh.clone(), addr, name.to_string(), node, &shared);
        lock(&hook.control).push(task);
        link.add(name.to_string(), tx, first..first + workers as usize);
        let new = first..first + workers as usize;
        let mut per_worker: Vec<Vec<Vec<flume::Sender<Message>>>> =
            vec![vec![Vec::new(); hook.edges]; self.workers];
        for (l, edges) in per_worker.iter_mut().enumerate() {
            for (edge, queues) in edges.iter_mut().enumerate() {
                for g in new.clone() {
                    let (tx, rx) = flume::bounded(self.channel_capacity);
                    queues.push(tx);
                    let to = super::remote::Link {
                        mesh: hook.mesh.clone(),
                        addr,
                        name: name.to_string(),
                        kind: StreamKind::Exchange {
                            epoch: hook.run_epoch,
                            edge: edge as u16,
                            sender: (self.first_worker + l) as u16,
                            receiver: g as u16,
                        },
                    };
                    let task =
                        super::remote::spawn_sender(to, rx, &shared, node, self.first_worker + l);
                    lock(&hook.senders).push(task);
                }
            }
        }
        let (ack, acks) = flume::unbounded();
        for (l, senders) in per_worker.into_iter().enumerate() {
            let _ = control.join_to_workers[l].send(AddWorkers {
                first,
                senders,
                ack: ack.clone(),
            });
        }
        self.wake_workers();
        let mut watermark = WATERMARK_START;
        for _ in 0..self.workers {
            match acks.recv_timeout(JOIN_TIMEOUT) {
                Ok(w) => watermark = watermark.max(w),
                Err(_) => return Err(format!("a worker did not add it within {JOIN_TIMEOUT:?}")),
            }
        }
        self.total_workers.store(new.end, SeqCst);
        tracing::info!(
            member = name,
            "added {name} ({addr}) to the run as member {node}, workers {}-{}",
            new.start,
            new.end - 1
        );
        Ok(watermark)
    }
}

impl Worker {
    /// A node joined: its workers become senders into every exchange port
    /// and destinations of every exchange (see the module comment).
    pub(crate) fn add_workers(&mut self, add: AddWorkers) {
        let AddWorkers {
            first,
            senders,
            ack,
        } = add;
        let count = senders.first().map_or(0, Vec::len);
        let total = first + count;
        for (e, s) in senders.into_iter().enumerate() {
            if self.edges[e].senders.len() != first {
                self.shared.fail(format!(
                    "worker {}: the workers of a joining node start at {first}, it has {} senders",
                    self.global,
                    self.edges[e].senders.len()
                ));
                return;
            }
            self.edges[e].senders.extend(s);
        }
        self.rows_by_worker.resize(total, Vec::new());
        let mut floor = WATERMARK_START;
        for e in 0..self.edges.len() {
            let (node, port) = (self.edges[e].node, self.edges[e].port);
            let state = &mut self.nodes[node];
            let (wm, passed, ended) = (state.watermark, state.passed, state.ended);
            let p = &mut state.ports[port];
            // Its slot starts at the operator's watermark: the minimum
            // stays where it is until the newcomer's own watermark passes.
            p.watermarks.resize(total, wm);
            p.barriers.resize(total, passed);
            p.ended.resize(total, ended);
            floor = floor.max(wm);
        }
        self.mig.machine.add_workers(count as u32);
        // Where each of this worker's streams stands, for the newcomer.
        for e in 0..self.edges.len() {
            let from: Vec<usize> = (0..self.nodes.len())
                .filter(|&n| {
                    self.nodes[n]
                        .routes
                        .iter()
                        .flatten()
                        .any(|r| matches!(r, Route::Exchange { edge } if *edge == e))
                })
                .collect();
            let held = self.mig.held_ends.iter().any(|&(_, x)| x == e);
            for f in from {
                let (wm, ended) = (self.nodes[f].watermark, self.nodes[f].ended && !held);
                for g in first..total {
                    if wm > WATERMARK_START {
                        self.send(f, e, g, Body::Watermark(wm));
                    }
                    if ended {
                        self.send(f, e, g, Body::End);
                    }
                }
            }
        }
        let _ = ack.send(floor);
    }
}

/// The assignment after `new` workers (a node that joined) took their
/// share: the bins they get come one at a time from the most loaded live
/// worker (the highest-numbered bin of it), until every live worker has
/// its even share; no other bin moves.
pub(crate) fn share_for(current: &[u32], gone: &[bool], new: std::ops::Range<usize>) -> Vec<u32> {
    let total = gone.len().max(new.end);
    let live = (0..total)
        .filter(|&w| !gone.get(w).copied().unwrap_or(false))
        .count()
        .max(1);
    let mut load = vec![0usize; total];
    for &w in current {
        load[w as usize] += 1;
    }
    let share = current.len() / live;
    let mut owners = current.to_vec();
    for w in new {
        while load[w] < share {
            let Some(from) = (0..total)
                .filter(|&v| v != w && load[v] > share)
                .max_by_key(|&v| (load[v], v))
            else {
                break;
            };
            let Some(bin) = owners.iter().rposition(|&o| o as usize == from) else {
                break;
            };
            owners[bin] = w as u32;
            load[from] -= 1;
            load[w] += 1;
        }
    }
    owners
}

/// The newcomer's side: asks member `sponsor` (name, mesh address) to
/// join, and waits up to `timeout` for its welcome.
pub(crate) fn ask(
    mesh: &Arc<MeshNode>,
    sponsor: (&str, SocketAddr),
    workers: u16,
    timeout: Duration,
) -> Result<Joining, String> {
    let me = mesh.identity().clone();
    let incoming = mesh.incoming();
    smol::block_on(async {
        let peer = mesh
            .connect(sponsor.1)
            .await
            .map_err(|e| format!("cannot reach {}: {e}", sponsor.0))?;
        let mut tx = peer
            .open_stream(StreamKind::Control)
            .await
            .map_err(|e| format!("cannot open a stream to {}: {e}", sponsor.0))?;
        tx.send(&Frame::Migrate(MigrateMsg::JoinAsk {
            name: me.name.clone(),
            addr: me.addr.to_string(),
            workers,
        }))
        .await
        .map_err(|e| format!("cannot ask {}: {e}", sponsor.0))?;
        let mut pending = Vec::new();
        let waited = crate::mesh::endpoint::with_timeout(timeout, async {
            loop {
                let Ok(mut stream) = incoming.recv_async().await else {
                    return Err("the mesh closed".to_string());
                };
                if stream.kind != StreamKind::Control || stream.receiver.peer().name != sponsor.0 {
                    pending.push(stream);
                    continue;
                }
                match stream.receiver.recv().await {
                    Ok(Some(Frame::Migrate(MigrateMsg::Welcome(w)))) => {
                        pending.push(stream);
                        return Ok(w);
                    }
                    Ok(other) => {
                        return Err(format!("{} answered {other:?}, not a welcome", sponsor.0));
                    }
                    Err(e) => return Err(format!("the control stream from {}: {e}", sponsor.0)),
                }
            }
        })
        .await;
        let welcome = match waited {
            Some(w) => w?,
            None => {
                return Err(format!(
                    "{} did not welcome this node within {timeout:?} (its log says why)",
                    sponsor.0
                ));
            }
        };
        let _ = tx.finish();
        Ok(Joining {
            welcome,
            pending: Mutex::new(pending),
        })
    })
}

/// The cluster a newcomer runs in, from its welcome.
pub(crate) fn cluster(mesh: &Arc<MeshNode>, joining: Joining) -> Result<Cluster, String> {
    let w = &joining.welcome;
    let mut members = Vec::new();
    let mut first = Vec::new();
    let mut addrs = Vec::new();
    let mut left = Vec::new();
    let mut next = 0;
    for (name, addr, workers, gone) in &w.members {
        members.push(Slot {
            name: name.clone(),
            workers: *workers,
        });
        first.push(next);
        next += *workers as usize;
        addrs.push(
            addr.parse::<SocketAddr>()
                .map_err(|e| format!("member {name}'s address {addr:?}: {e}"))?,
        );
        left.push(*gone);
    }
    let owner = w
        .owners
        .iter()
        .map(|&o| u16::try_from(o).map_err(|_| format!("worker {o} in the welcome")))
        .collect::<Result<Vec<u16>, String>>()?;
    if owner.iter().any(|&o| o as usize >= next) {
        return Err("the welcome's assignment names a worker no member has".into());
    }
    let me = w.node as usize;
    if me >= members.len() || members[me].name != mesh.identity().name {
        return Err("the welcome names another node".into());
    }
    Ok(Cluster {
        assignment: Arc::new(Assignment {
            epoch: w.run_epoch,
            members,
            first,
            owner,
        }),
        me,
        addrs,
        mesh: mesh.clone(),
        left,
        join: Some(joining),
        restore: None,
        run: (0, Vec::new()),
    })
}

impl Shared {
    /// The newcomer's part runs: the sponsor may move its bins.
    pub(crate) fn join_started(&self, sponsor: usize) {
        let Some(link) = self.migration.as_ref().and_then(|c| c.mesh.get()) else {
            return;
        };
        link.send(
            sponsor,
            MigrateMsg::JoinStarted {
                node: link.me as u16,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A newcomer's two workers take their even share of 64 bins from the
    /// most loaded workers; no other bin moves, none goes to a worker of a
    /// member that left.
    #[test]
    fn a_newcomer_takes_its_share_and_nothing_else_moves() {
        let current: Vec<u32> = (0..64).map(|b| (b * 6 / 64) as u32).collect();
        let gone = vec![false; 8];
        let target = share_for(&current, &gone, 6..8);
        let mut load = [0; 8];
        target.iter().for_each(|&w| load[w as usize] += 1);
        assert_eq!(load, [8; 8], "{target:?}");
        let moved = current.iter().zip(&target).filter(|(a, b)| a != b).count();
        assert_eq!(moved, 16);
        assert!(current.iter().zip(&target).all(|(a, b)| a == b || *b >= 6));

        // Workers 2-3 left (own nothing): the share is over six workers.
        let current: Vec<u32> = (0..64).map(|b| [0, 1, 4, 5][b * 4 / 64]).collect();
        let mut gone = vec![false; 8];
        gone[2] = true;
        gone[3] = true;
        let target = share_for(&current, &gone, 6..8);
        let mut load = [0; 8];
        target.iter().for_each(|&w| load[w as usize] += 1);
        assert_eq!(load[2] + load[3], 0);
        assert_eq!(load[6], 10);
        assert_eq!(load[7], 10);
    }
}
