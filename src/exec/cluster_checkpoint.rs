//! Checkpoints of a distributed run: every member takes the same
//! checkpoint ids at the same cut, and a restart goes back to the newest
//! one every member holds.
//!
//! The member first by name still in the run leads, on its checkpoint
//! thread, every `[checkpoint] interval` and right after a migration
//! completes (so a restart after a later crash finds the bins where they
//! are now):
//! 1. It takes the cluster-wide migration lock (`migration_mesh`), so no
//!    bin is between members while barriers travel: the checkpoint records
//!    one assignment, the same on every member. If a migration holds it,
//!    this checkpoint waits for the next interval.
//! 2. `CheckpointRequest { id }`: every member injects barrier `id` at its
//!    sources, which then produce nothing until step 3. Barriers cross the
//!    mesh in band, so an operator aligns them from every member's workers.
//! 3. Once every instance of a member has passed `id`, it answers
//!    `CheckpointAligned`; with every answer in, `CheckpointGo` lets every
//!    member's sources go on. (Going on earlier could send a record
//!    produced after the barrier to an operator on another member that
//!    still waits for barriers, and it would count in that snapshot.)
//!    The lock is released.
//! 4. Every member commits the checkpoint to its own store (with the
//!    assignment) and answers `CheckpointPrepared`; with every answer in,
//!    `CheckpointCommitted`: only now do sinks publish and sources
//!    acknowledge what it covers.
//!
//! So when any member holds checkpoint `n` committed, every member holds
//! it prepared, and a restart of the run can go back to the newest id all
//! members hold ([`restore_point`]): each member restores its own bins and
//! source positions of it, and sinks cut back to it. A member lost mid-run
//! fails the run on every member (its streams break); restarted, they
//! resume from there, the bins where the checkpoint had them (a move in
//! progress is undone: its source still holds the bins as of the
//! checkpoint).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::Shared;
use super::checkpoint::Checkpoints;
use super::heartbeat::Heartbeat;
use super::migration::{Control, lock};
use super::migration_mesh::Link;
use crate::control::assignment::Assignment;
use crate::mesh::frame::MigrateMsg;

/// Set in the lock id of a checkpoint (a migration's never has it).
pub(crate) const LOCK_BIT: u64 = 1 << 63;
/// How often the thread looks at its quit flag while waiting.
const TICK: Duration = Duration::from_millis(20);
/// How soon a checkpoint after a migration is tried again when the lock
/// was refused.
const RETRY: Duration = Duration::from_millis(100);
/// How long the leader waits for every member to pass a barrier before it
/// says who it waits for, and before it gives up: sources everywhere wait
/// meanwhile, so a member that never answers would stall the whole run.
/// Past the limit the run fails, naming that member, and a restart
/// resumes from the checkpoint before.
const ALIGN_SLOW: Duration = Duration::from_secs(10);
const ALIGN_TIMEOUT: Duration = Duration::from_secs(60);

/// The assignment a checkpoint of a distributed run was taken at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClusterMeta {
    pub(crate) epoch: u64,
    /// Every member then, in member order: name and workers.
    pub(crate) members: Vec<(String, u16)>,
    /// The global worker owning each bin.
    pub(crate) owner: Vec<u16>,
}

/// What a member tells the others of its checkpoints before a run: the
/// id of each one its store holds, and whether it was a completed run's.
pub(crate) type Marks = Vec<(u64, bool)>;

/// Where a distributed run starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RestorePoint {
    /// From the beginning: every member forgets its checkpoints.
    Fresh,
    /// From checkpoint `id`, which every member holds.
    Checkpoint(u64),
}

/// The newest checkpoint every member holds, from each member's marks.
/// A run every member completed starts over, as does one without a
/// checkpoint common to all (a member with an empty data dir).
pub(crate) fn restore_point(members: &[Marks]) -> RestorePoint {
    if members.is_empty()
        || members
            .iter()
            .all(|m| m.iter().max_by_key(|(id, _)| *id).is_some_and(|(_, c)| *c))
    {
        return RestorePoint::Fresh;
    }
    let held = |m: &Marks, id: u64| m.iter().any(|&(i, c)| i == id && !c);
    members[0]
        .iter()
        .filter(|&&(id, completed)| !completed && members.iter().all(|m| held(m, id)))
        .map(|&(id, _)| id)
        .max()
        .map_or(RestorePoint::Fresh, RestorePoint::Checkpoint)
}

/// Moves checkpoint `meta`'s bins onto `now`'s workers, member by member
/// (members are named; their global worker numbers depend on who else is
/// in the run). Fails, naming the member, if one that owned bins then is
/// not in the run now or has fewer workers.
pub(crate) fn owners_now(meta: &ClusterMeta, now: &Assignment) -> Result<Vec<u16>, String> {
    let mut first = 0usize;
    let mut start = Vec::with_capacity(meta.members.len());
    for (_, w) in &meta.members {
        start.push(first);
        first += *w as usize;
    }
    meta.owner
        .iter()
        .map(|&g| {
            let g = g as usize;
            let m = start
                .iter()
                .rposition(|&s| s <= g)
                .ok_or_else(|| format!("worker {g} belongs to no member"))?;
            let (name, _) = &meta.members[m];
            let local = g - start[m];
            let n = now.node_of(name).ok_or_else(|| {
                format!("it gives bins to {name}, which is not in this run: start it too")
            })?;
            if local >= now.members[n].workers as usize {
                return Err(format!(
                    "it gives bins to worker {local} of {name}, which now has {} workers",
                    now.members[n].workers
                ));
            }
            Ok((now.first[n] + local) as u16)
        })
        .collect()
}

/// The checkpoint thread of a member of a distributed run.
pub(crate) fn spawn(shared: Arc<Shared>, quit: Arc<AtomicBool>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("eddy-checkpoint".into())
        .spawn(move || {
            let beat = Heartbeat::register(
                "eddy-checkpoint (the checkpoint committer)".into(),
                Vec::new(),
            );
            let (Some(cp), Some(control)) = (shared.checkpoints.clone(), shared.migration.clone())
            else {
                return;
            };
            let alive = || {
                beat.beat();
                !quit.load(Relaxed) && !shared.failed.load(Relaxed) && !shared.halted.load(Relaxed)
            };
            let mut last = Instant::now();
            let mut moved_retry = last;
            while alive() {
                let Some(link) = control.mesh.get() else {
                    std::thread::sleep(TICK);
                    continue;
                };
                let interval = Duration::from_millis(shared.live.checkpoint_interval_ms());
                let moved = control.moved.load(SeqCst) && Instant::now() >= moved_retry;
                let result = if leader(link) == link.me && (last.elapsed() >= interval || moved) {
                    last = Instant::now();
                    match lead(&shared, &control, link, &cp, &alive) {
                        Ok(true) => {
                            control.moved.store(false, SeqCst);
                            Ok(())
                        }
                        // A drained member still leaving refuses the lock.
                        Ok(false) => {
                            moved_retry = Instant::now() + RETRY;
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    match control.checkpoint_msgs.1.recv_timeout(TICK) {
                        Ok(MigrateMsg::CheckpointRequest { id }) => {
                            follow(&shared, &control, link, &cp, id, &alive)
                        }
                        // Left over from a checkpoint this member gave up on.
                        Ok(_) | Err(_) => Ok(()),
                    }
                };
                if let Err(e) = result {
                    shared.fail(e);
                    return;
                }
            }
        })
}

/// The member that leads checkpoints: the first still in the run.
fn leader(link: &Link) -> usize {
    (0..link.len()).find(|&n| !link.has_left(n)).unwrap_or(0)
}

/// What [`gather`] got.
enum Gathered {
    All,
    /// `alive` turned false.
    Quit,
    /// These members did not answer by the deadline.
    Missing(Vec<usize>),
}

/// Waits for `want` from every member in `from`.
fn gather(
    control: &Control,
    mut from: Vec<usize>,
    want: &dyn Fn(&MigrateMsg) -> Option<usize>,
    alive: &dyn Fn() -> bool,
    deadline: Option<Instant>,
) -> Gathered {
    while !from.is_empty() {
        if !alive() {
            return Gathered::Quit;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Gathered::Missing(from);
        }
        if let Ok(msg) = control.checkpoint_msgs.1.recv_timeout(TICK)
            && let Some(node) = want(&msg)
        {
            from.retain(|&n| n != node);
        }
    }
    Gathered::All
}

/// Waits until every member (this one included) has passed barrier `id`:
/// false if `alive` turned; an error past [`ALIGN_TIMEOUT`].
fn gather_aligned(
    control: &Control,
    link: &Link,
    cp: &Checkpoints,
    id: u64,
    alive: &dyn Fn() -> bool,
) -> Result<bool, String> {
    let started = Instant::now();
    let want = |m: &MigrateMsg| match *m {
        MigrateMsg::CheckpointAligned { id: i, node } if i == id => Some(node as usize),
        _ => None,
    };
    let mut from = link.others();
    let mut here = false;
    loop {
        let deadline = Instant::now() + ALIGN_SLOW;
        match gather(control, from, &want, alive, Some(deadline)) {
            Gathered::All => from = Vec::new(),
            Gathered::Quit => return Ok(false),
            Gathered::Missing(m) => from = m,
        }
        here = here || {
            let until = || alive() && Instant::now() < deadline;
            cp.wait_until(&|cp| cp.local_aligned() >= id, &until)
        };
        if !alive() {
            return Ok(false);
        }
        if from.is_empty() && here {
            return Ok(true);
        }
        let mut names: Vec<String> = from.iter().map(|&n| link.name(n)).collect();
        if !here {
            names.insert(0, link.name(link.me));
        }
        let names = names.join(", ");
        if started.elapsed() >= ALIGN_TIMEOUT {
            return Err(format!(
                "checkpoint {id}: {names} did not pass its barrier within {ALIGN_TIMEOUT:?}, and every member's sources wait for that; the run stops, and a restart resumes from checkpoint {}",
                id - 1
            ));
        }
        tracing::warn!(
            "checkpoint {id}: waiting {:.0?} so far for {names} to pass its barrier",
            started.elapsed()
        );
    }
}

fn release(control: &Control, link: &Link, lock_id: u64) {
    let mut holder = lock(&control.holder);
    if holder.is_some_and(|(i, _)| i == lock_id) {
        *holder = None;
        control.migrating.store(false, SeqCst);
    }
    drop(holder);
    link.broadcast(MigrateMsg::Abort { id: lock_id });
}

/// One checkpoint, led by this member: whether every member committed it.
fn lead(
    shared: &Shared,
    control: &Control,
    link: &Link,
    cp: &Checkpoints,
    alive: &dyn Fn() -> bool,
) -> Result<bool, String> {
    let id = cp.requested() + 1;
    let lock_id = LOCK_BIT | id;
    if control
        .migrating
        .compare_exchange(false, true, SeqCst, SeqCst)
        .is_err()
    {
        tracing::debug!("checkpoint {id} waits: {}", control.busy_reason());
        return Ok(false);
    }
    // Near the end of the input the final checkpoints take over.
    if shared.finishing.load(SeqCst) > 0 || shared.stop.load(Relaxed) {
        control.migrating.store(false, SeqCst);
        return Ok(false);
    }
    *lock(&control.holder) = Some((lock_id, link.me));
    let epoch = lock(&control.coordinator).assignment().epoch;
    if let Err(e) = link.lock_cluster(control, lock_id, epoch) {
        let mut holder = lock(&control.holder);
        *holder = None;
        control.migrating.store(false, SeqCst);
        tracing::debug!("checkpoint {id} waits: {e}");
        return Ok(false);
    }
    let others = link.others();
    let started = Instant::now();
    link.broadcast(MigrateMsg::CheckpointRequest { id });
    begin(shared, control, cp, id)?;
    let aligned = gather_aligned(control, link, cp, id, alive);
    if !matches!(aligned, Ok(true)) {
        release(control, link, lock_id);
        return aligned;
    }
    tracing::debug!(checkpoint = id, "every member aligned");
    link.broadcast(MigrateMsg::CheckpointGo { id });
    cp.open_gate(id);
    shared.wake_workers();
    release(control, link, lock_id);
    if cp.commit(id, false, alive)?.is_none() {
        return Ok(false);
    }
    let prepared = gather(
        control,
        others,
        &|m| match *m {
            MigrateMsg::CheckpointPrepared { id: i, node } if i == id => Some(node as usize),
            _ => None,
        },
        alive,
        None,
    );
    let prepared = matches!(prepared, Gathered::All);
    if prepared {
        link.broadcast(MigrateMsg::CheckpointCommitted { id });
        cp.announce(id);
        tracing::info!(
            checkpoint = id,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "checkpoint {id} committed on all members"
        );
    }
    Ok(prepared)
}

/// Injects barrier `id` on this member, its assignment recorded with it.
fn begin(shared: &Shared, control: &Control, cp: &Checkpoints, id: u64) -> Result<(), String> {
    if !cp.request(id) {
        return Err(format!(
            "checkpoint {id} was asked for while checkpoint {} was still in flight here",
            cp.requested()
        ));
    }
    let meta = {
        let coordinator = lock(&control.coordinator);
        let a = coordinator.assignment();
        ClusterMeta {
            epoch: a.epoch,
            members: link_members(control),
            owner: a.owners.iter().map(|&w| w as u16).collect(),
        }
    };
    cp.hold_cluster_meta(
        id,
        postcard::to_stdvec(&meta).expect("encoding a small struct"),
    );
    shared.wake_workers();
    Ok(())
}

fn link_members(control: &Control) -> Vec<(String, u16)> {
    let Some(link) = control.mesh.get() else {
        return Vec::new();
    };
    link.member_slots()
        .into_iter()
        .map(|(name, workers)| (name, workers.len() as u16))
        .collect()
}

/// This member's part of checkpoint `id`, led by another.
fn follow(
    shared: &Shared,
    control: &Control,
    link: &Link,
    cp: &Checkpoints,
    id: u64,
    alive: &dyn Fn() -> bool,
) -> Result<(), String> {
    let leader = leader(link);
    tracing::debug!(checkpoint = id, "asked for");
    begin(shared, control, cp, id)?;
    if !cp.wait_until(&|cp| cp.local_aligned() >= id, alive) {
        return Ok(());
    }
    link.send(
        leader,
        MigrateMsg::CheckpointAligned {
            id,
            node: link.me as u16,
        },
    );
    let go = |m: &MigrateMsg| matches!(*m, MigrateMsg::CheckpointGo { id: i } if i == id);
    if !matches!(
        gather(
            control,
            vec![leader],
            &|m| go(m).then_some(leader),
            alive,
            None
        ),
        Gathered::All
    ) {
        return Ok(());
    }
    cp.open_gate(id);
    shared.wake_workers();
    tracing::debug!(checkpoint = id, "go");
    if cp.commit(id, false, alive)?.is_none() {
        return Ok(());
    }
    tracing::debug!(checkpoint = id, "prepared");
    link.send(
        leader,
        MigrateMsg::CheckpointPrepared {
            id,
            node: link.me as u16,
        },
    );
    let committed =
        |m: &MigrateMsg| matches!(*m, MigrateMsg::CheckpointCommitted { id: i } if i == id);
    if matches!(
        gather(
            control,
            vec![leader],
            &|m| committed(m).then_some(leader),
            alive,
            None,
        ),
        Gathered::All
    ) {
        cp.announce(id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::assignment::Slot;

    #[test]
    fn the_run_goes_back_to_the_newest_checkpoint_every_member_holds() {
        // b prepared 8 and crashed before the others did.
        let a = vec![(7, false), (6, false)];
        let b = vec![(8, false), (7, false)];
        let c = vec![(7, false), (6, false)];
        assert_eq!(
            restore_point(&[a.clone(), b.clone(), c]),
            RestorePoint::Checkpoint(7)
        );
        // a completed its run; b did not: both go back to 7.
        let a_done = vec![(9, true), (7, false)];
        assert_eq!(
            restore_point(&[a_done.clone(), b.clone()]),
            RestorePoint::Checkpoint(7)
        );
        // Every member completed: start over.
        assert_eq!(
            restore_point(&[a_done.clone(), vec![(9, true), (7, false)]]),
            RestorePoint::Fresh
        );
        // A member with nothing: start over.
        assert_eq!(restore_point(&[a, vec![]]), RestorePoint::Fresh);
        assert_eq!(restore_point(&[vec![], vec![]]), RestorePoint::Fresh);
    }

    #[test]
    fn bins_follow_their_members_by_name() {
        let slot = |name: &str, workers| Slot {
            name: name.into(),
            workers,
        };
        // Then: a(2) b(2) c(2).
        let meta = ClusterMeta {
            epoch: 3,
            members: vec![("a".into(), 2), ("b".into(), 2), ("c".into(), 2)],
            owner: vec![2, 5, 0, 1, 2, 3, 4, 5],
        };
        let now = crate::control::assignment::even(8, &[slot("a", 2), slot("b", 2), slot("c", 2)])
            .unwrap();
        assert_eq!(owners_now(&meta, &now).unwrap(), meta.owner);
        // b drained since (it owned no bin in a later checkpoint): fine
        // only if it owns none in this one.
        let without_b = crate::control::assignment::even(8, &[slot("a", 2), slot("c", 2)]).unwrap();
        let e = owners_now(&meta, &without_b).unwrap_err();
        assert!(e.contains("b, which is not in this run"), "{e}");
        let meta2 = ClusterMeta {
            owner: vec![0, 5, 1, 4, 0, 1, 4, 5],
            ..meta
        };
        assert_eq!(
            owners_now(&meta2, &without_b).unwrap(),
            vec![0, 3, 1, 2, 0, 1, 2, 3]
        );
    }
}
