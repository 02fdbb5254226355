//! Starting a distributed run (`[mesh] expect_members` above 1): publish
//! this node's workers and pipeline fingerprint in its gossip payload, wait
//! until the expected members are alive and have published theirs, check
//! they run the same pipeline, and compute the static bin assignment
//! (epoch 1), the same on every node.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::control::assignment::{self, Slot};
use crate::control::view::NodeSummary;
use crate::exec::Cluster;
use crate::exec::cluster_checkpoint::{
    ClusterMeta, Marks, RestorePoint, owners_now, restore_point,
};
use crate::kernel::hash::hash_bytes;
use crate::mesh::driver::MeshNode;
use crate::mesh::membership::MemberState;
use crate::plan::Plan;

/// How often the member table is looked at while waiting.
const POLL: Duration = Duration::from_millis(100);
/// How long more members than expected may be alive, none of them running
/// a run this node could join, before that is an error.
const TOO_MANY_GRACE: Duration = Duration::from_secs(5);

/// What a node of a distributed run tells the others in its gossip payload.
/// Once its pipeline runs, a node publishes a `control::view::NodeSummary`
/// instead, which starts with these fields (a test there checks it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunInfo {
    pub(crate) workers: u16,
    /// [`fingerprint`] of its pipeline.
    pub(crate) pipeline: u64,
    /// The checkpoints its store holds (`exec::cluster_checkpoint`): the
    /// run resumes from the newest one every member holds.
    pub(crate) checkpoints: Marks,
}

/// A hash of what must be equal on every node of a distributed run: the
/// bins, and every keyed exchange with the schema crossing it and its key
/// (sources and sinks may differ: each node reads and writes its own).
pub(crate) fn fingerprint(plan: &Plan) -> u64 {
    let mut text = format!("bins={}\n", plan.node.bins);
    for node in &plan.nodes {
        for (port, input) in node.inputs.iter().enumerate() {
            let Some(key) = &input.exchange else {
                continue;
            };
            let schema = &plan.nodes[input.from].outputs[input.from_port].schema;
            text.push_str(&format!(
                "{}.{port} <- {}: {} by {key:?}\n",
                node.id,
                plan.nodes[input.from].id,
                schema.describe()
            ));
        }
    }
    hash_bytes(text.as_bytes())
}

/// Waits for the members and computes the assignment. The error says what
/// was missing or does not match.
pub(crate) fn cluster(
    mesh: &Arc<MeshNode>,
    plan: &Plan,
    expected: u32,
    timeout: Duration,
) -> Result<Cluster, String> {
    let me = mesh.identity().clone();
    let (marks, metas) = local_checkpoints(plan)?;
    let own = RunInfo {
        workers: plan.node.workers as u16,
        pipeline: fingerprint(plan),
        checkpoints: marks,
    };
    mesh.set_payload(postcard::to_stdvec(&own).expect("encoding a small struct"));
    tracing::info!(
        "distributed run: waiting for {expected} members (this one included) for up to {timeout:?}"
    );
    let deadline = Instant::now() + timeout;
    let mut too_many_since: Option<Instant> = None;
    loop {
        let members = mesh.members();
        let alive: Vec<_> = members
            .iter()
            .filter(|m| m.state == MemberState::Alive)
            .collect();
        let mut slots = Vec::new();
        let mut marks = Vec::new();
        let mut addrs = Vec::new();
        let mut waiting_for = Vec::new();
        // Members whose run has started (they publish a node summary, not
        // just their run info): a newcomer joins their run.
        let mut running = Vec::new();
        // The run these members would form now. One of them may have
        // started it already (it saw everyone first): it counts. A member
        // in another run (one failing after this node crashed, say) does
        // not: this node waits for it.
        let candidate = run_id(alive.iter().map(|m| (m.id.name.as_str(), m.id.incarnation)));
        let mut elsewhere = 0;
        for m in &alive {
            let summary = m
                .payload
                .as_ref()
                .filter(|_| m.id.name != me.name)
                .and_then(|(_, bytes)| postcard::from_bytes::<NodeSummary>(bytes).ok())
                .filter(|s| s.pipeline == own.pipeline);
            if summary.is_some() {
                running.push((m.id.name.clone(), m.id.addr));
            }
            let info = if m.id.name == me.name {
                Some(own.clone())
            } else if let Some(s) = summary {
                if s.run != candidate {
                    elsewhere += 1;
                    waiting_for.push(m.id.name.clone());
                    continue;
                }
                Some(RunInfo {
                    workers: s.workers,
                    pipeline: s.pipeline,
                    checkpoints: s.checkpoints,
                })
            } else {
                m.payload
                    .as_ref()
                    .and_then(|(_, bytes)| postcard::from_bytes::<RunInfo>(bytes).ok())
            };
            match info {
                Some(i) if i.pipeline != own.pipeline => {
                    return Err(format!(
                        "member {} ({}) runs a different pipeline: the keyed exchanges, their schemas \
                         and `[node] bins` must be the same on every node",
                        m.id.name, m.id.addr
                    ));
                }
                Some(i) => {
                    slots.push(Slot {
                        name: m.id.name.clone(),
                        workers: i.workers,
                    });
                    marks.push(i.checkpoints);
                    addrs.push((m.id.name.clone(), m.id.addr));
                }
                None => waiting_for.push(m.id.name.clone()),
            }
        }
        // A run of at least `expect_members` others is under way: join it
        // (a member of the run still starting sees fewer running).
        if running.len() >= expected as usize && !running.is_empty() {
            crate::cold_sort::sort(&mut running);
            let (name, addr) = &running[0];
            tracing::info!(
                "a run of this pipeline is under way on {} members; asking {name} to join it",
                running.len()
            );
            let left = deadline.saturating_duration_since(Instant::now());
            let joining = crate::exec::join::ask(mesh, (name, *addr), own.workers, left)?;
            return crate::exec::join::cluster(mesh, joining);
        }
        // More alive than expected and nobody running yet: a run may have
        // just started (its members publish a summary after their first
        // interval, and payloads take a round of gossip to arrive).
        let too_many = alive.len() > expected as usize && running.is_empty();
        if !too_many {
            too_many_since = None;
        }
        if too_many && too_many_since.get_or_insert_with(Instant::now).elapsed() >= TOO_MANY_GRACE {
            let names: Vec<&str> = alive.iter().map(|m| m.id.name.as_str()).collect();
            return Err(format!(
                "{} members are alive ({}), `[mesh] expect_members` is {expected}: every node of a \
                 distributed run must expect the same members",
                alive.len(),
                names.join(", ")
            ));
        }
        if slots.len() == expected as usize && elsewhere == 0 {
            let mut a = assignment::even(plan.node.bins, &slots)?;
            let restore = match plan.node.checkpoint_interval_ms {
                None => None,
                Some(_) => Some(resume(&mut a, &marks, &metas)?),
            };
            let index = a
                .node_of(&me.name)
                .expect("this node is among the alive members");
            let addrs = a
                .members
                .iter()
                .map(|s| {
                    addrs
                        .iter()
                        .find(|(n, _)| *n == s.name)
                        .map(|(_, a)| *a)
                        .expect("every member has an address")
                })
                .collect();
            tracing::info!(
                "bin assignment {a}; this node is {} (workers {}..{})",
                me.name,
                a.first[index],
                a.first[index] + a.members[index].workers as usize
            );
            let left = vec![false; a.members.len()];
            return Ok(Cluster {
                assignment: Arc::new(a),
                me: index,
                addrs,
                mesh: mesh.clone(),
                left,
                join: None,
                restore,
                run: (candidate, own.checkpoints.clone()),
            });
        }
        if Instant::now() >= deadline {
            let names: Vec<&str> = slots.iter().map(|s| s.name.as_str()).collect();
            return Err(format!(
                "gave up after {timeout:?} ([mesh] expect_timeout): {expected} members expected, \
                 {} ready ({}){}; check that every node is started and can reach the others",
                slots.len(),
                names.join(", "),
                if waiting_for.is_empty() {
                    String::new()
                } else {
                    format!(", no pipeline info yet from {}", waiting_for.join(", "))
                }
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// A run's id: its members as they were when it began (a member that
/// restarts comes back with another incarnation, so a run it was in
/// before is not the one it forms now).
fn run_id<'a>(members: impl Iterator<Item = (&'a str, u64)>) -> u64 {
    let mut ids: Vec<String> = members.map(|(n, i)| format!("{n}@{i}")).collect();
    crate::cold_sort::sort(&mut ids);
    hash_bytes(ids.join("\n").as_bytes())
}

/// The checkpoints this node's store holds, and the assignment of each.
fn local_checkpoints(plan: &Plan) -> Result<(Marks, Vec<(u64, ClusterMeta)>), String> {
    if plan.node.checkpoint_interval_ms.is_none() {
        return Ok((Vec::new(), Vec::new()));
    }
    let store =
        crate::state::Store::open(&plan.node.data_dir, plan.node.cache_bytes).map_err(|e| e.0)?;
    let marks = store.marks();
    let metas = marks
        .iter()
        .filter_map(|&(id, _)| {
            let meta = postcard::from_bytes(&store.cluster_meta(id)?).ok()?;
            Some((id, meta))
        })
        .collect();
    Ok((marks, metas))
}

/// Where the run resumes, from every member's checkpoints (`marks`, in the
/// order of `slots`); a resumed run's bins go where the checkpoint had
/// them, so `a` changes to that.
fn resume(
    a: &mut assignment::Assignment,
    marks: &[Marks],
    metas: &[(u64, ClusterMeta)],
) -> Result<RestorePoint, String> {
    let point = restore_point(marks);
    let RestorePoint::Checkpoint(id) = point else {
        if marks.iter().any(|m| !m.is_empty()) {
            tracing::info!(
                "no checkpoint to resume from that every member holds (a member's data dir is empty, or the run had completed); the run starts from the beginning on every member"
            );
        }
        return Ok(point);
    };
    let meta = metas
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, m)| m)
        .ok_or_else(|| {
            format!(
                "cluster checkpoint {id} has no bin assignment in this node's data dir (taken alone, not by a distributed run?); remove the data dirs to start over"
            )
        })?;
    a.owner = owners_now(meta, a)
        .map_err(|e| format!("cannot resume from cluster checkpoint {id}: {e}"))?;
    tracing::info!(
        "restoring cluster checkpoint {id} (assignment epoch {}, every member holds it)",
        meta.epoch
    );
    Ok(point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_its_members_as_they_were_when_it_began() {
        let a = run_id([("b", 7), ("a", 3)].into_iter());
        assert_eq!(a, run_id([("a", 3), ("b", 7)].into_iter()), "any order");
        // b crashed and came back: a run it forms now is another one.
        assert_ne!(a, run_id([("a", 3), ("b", 8)].into_iter()));
        assert_ne!(a, run_id([("a", 3), ("b", 7), ("c", 1)].into_iter()));
    }

    #[test]
    fn fingerprint_sees_exchanges_not_sinks() {
        let base = r#"
[node]
bins = 64
[sources.s]
type = "file"
path = "in.jsonl"
schema = { k = "int", ts = "int" }
event_time = "ts"
[transforms.w]
type = "window"
inputs = ["s"]
key = ["k"]
window = { kind = "tumbling", size = "1s" }
aggregates = { n = "count(*)" }
"#;
        let plan = |extra: &str| {
            crate::daemon::load::load_str("t.toml", &format!("{base}{extra}"))
                .map(|(p, _)| p)
                .unwrap_or_else(|d| panic!("{}", d.render()))
        };
        let a = plan("[sinks.o]\ntype = \"stdout\"\ninputs = [\"w\"]\n");
        let b = plan("[sinks.o]\ntype = \"blackhole\"\ninputs = [\"w\"]\n");
        assert_eq!(fingerprint(&a), fingerprint(&b));
        let c = crate::daemon::load::load_str(
            "t.toml",
            &format!(
                "{}[sinks.o]\ntype = \"stdout\"\ninputs = [\"w\"]\n",
                base.replace("bins = 64", "bins = 128")
            ),
        )
        .map(|(p, _)| p)
        .unwrap_or_else(|d| panic!("{}", d.render()));
        assert_ne!(fingerprint(&a), fingerprint(&c));
        let d = crate::daemon::load::load_str(
            "t.toml",
            &format!(
                "{}[sinks.o]\ntype = \"stdout\"\ninputs = [\"w\"]\n",
                base.replace("key = [\"k\"]", "key = [\"ts\"]")
            ),
        )
        .map(|(p, _)| p)
        .unwrap_or_else(|d| panic!("{}", d.render()));
        assert_ne!(fingerprint(&a), fingerprint(&d), "another key");
    }
}
