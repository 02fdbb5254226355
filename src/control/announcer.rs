//! Decisions without a master: every node runs the same deterministic
//! planner (DS2 with hysteresis, [`Controller`]) on its gossiped
//! [`ClusterState`] once per decision interval, so every node that sees the
//! same view computes the same decision; the alive member with the lowest id
//! announces it. When that member dies, membership marks it down and the
//! next lowest id announces, with a controller that has been running on the
//! same inputs all along.
//!
//! The announcer executes its reconfiguring decisions by live migration
//! (`daemon::gossip`, mapping them with [`super::execute`]); the record
//! says how that went. The next view carries the assignment in force
//! (its epoch and the owner of every bin, [`InForce`]), and any change of
//! it restarts the controller's warm-up and waits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::controller::{Action, Controller, ControllerConfig, Policy};
use super::view::{ClusterState, InForce};
use super::{NodeId, OperatorSpec};

/// One decision as `GET /cluster` shows it and the log says it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct DecisionRecord {
    /// When it was made (Unix ms).
    pub(crate) at_ms: u64,
    /// The member that announces decisions when this one was made.
    pub(crate) announcer: Option<String>,
    /// Whether this node is that member.
    pub(crate) announced_here: bool,
    /// `"hold"`, `"scale_up"` or `"scale_down"`.
    pub(crate) action: String,
    /// The epoch of the assignment in force.
    pub(crate) epoch: u64,
    /// Its epoch + 1 when the decision reconfigures.
    pub(crate) next_epoch: Option<u64>,
    /// Workers per node: the target when it reconfigures, else as now.
    pub(crate) workers: BTreeMap<String, u16>,
    /// Bins per node, likewise.
    pub(crate) bins: BTreeMap<String, u32>,
    pub(crate) current_workers: u32,
    pub(crate) proposed_workers: u32,
    /// DS2's `Σ x_i`: workers' worth of useful time needed.
    pub(crate) workers_needed: Option<f64>,
    /// The multiple of the target load the assignment in force carries.
    pub(crate) current_capacity: f64,
    /// Bins that would move.
    pub(crate) moves: u32,
    pub(crate) reason: String,
    /// Whether the migration to it completed.
    pub(crate) executed: bool,
    /// How executing it went, on the announcer (`None` elsewhere and for
    /// a hold).
    pub(crate) execution: Option<Execution>,
    /// The member owning each bin in the target (reconfiguring decisions).
    #[serde(skip)]
    pub(crate) target: Option<Vec<String>>,
}

/// The outcome of executing a decision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Execution {
    /// `"running"`, `"done"`, `"busy"` (another migration held the lock:
    /// retried at the next interval), `"failed"`, `"superseded"` or
    /// `"skipped"` (nothing to execute: see `detail`).
    pub(crate) status: String,
    /// The assignment epoch after the migration (one per step).
    pub(crate) epoch_after: Option<u64>,
    pub(crate) steps: u32,
    pub(crate) bins_moved: u32,
    pub(crate) bytes: u64,
    pub(crate) duration_ms: f64,
    pub(crate) attempts: u32,
    /// Why it did not run or failed.
    pub(crate) detail: Option<String>,
}

impl DecisionRecord {
    /// The log line: `decision epoch 1 → 2 scale_up: node-a 4 workers 40
    /// bins, ...; why`.
    pub(crate) fn log_line(&self) -> String {
        let target: Vec<String> = self
            .workers
            .iter()
            .map(|(n, w)| {
                format!(
                    "{n} {w} workers {} bins",
                    self.bins.get(n).copied().unwrap_or(0)
                )
            })
            .collect();
        let epochs = match self.next_epoch {
            Some(e) => format!("epoch {} → {e}", self.epoch),
            None => format!("epoch {}", self.epoch),
        };
        format!(
            "decision {epochs} {}: {}; {}",
            self.action,
            target.join(", "),
            self.reason
        )
    }
}

/// The planner every node runs.
pub(crate) struct Planner {
    controller: Controller,
    operators: Vec<OperatorSpec>,
    pipeline: u64,
    /// The epoch of the assignment in force at the last tick.
    epoch: Option<u64>,
}

impl Planner {
    /// A planner for the local graph `operators` and pipeline fingerprint
    /// `pipeline`, whose assignment has been in force since `now_ms`.
    pub(crate) fn new(
        config: ControllerConfig,
        operators: Vec<OperatorSpec>,
        pipeline: u64,
        now_ms: u64,
    ) -> Planner {
        Planner {
            controller: Controller::new(config, now_ms),
            operators,
            pipeline,
            epoch: None,
        }
    }

    /// One decision interval: plans on `state` as of `now_ms`. `None` when
    /// there is nothing to plan on yet (no summary of this node).
    pub(crate) fn handle_tick(
        &mut self,
        now_ms: u64,
        state: &ClusterState,
        in_force: Option<&InForce>,
    ) -> Result<DecisionRecord, String> {
        let (view, names) = state.planner_view(&self.operators, self.pipeline, in_force)?;
        let epoch = view.assignment.epoch;
        if self.epoch.is_some_and(|e| e != epoch) {
            self.controller.note_change(now_ms);
        }
        self.epoch = Some(epoch);
        let d = self.controller.handle_view(now_ms, &view);
        let name = |id: &NodeId| {
            names
                .get(id)
                .cloned()
                .unwrap_or_else(|| format!("{id:08x}"))
        };
        let target = d.assignment.as_ref().unwrap_or(&view.assignment);
        let workers = target
            .workers
            .iter()
            .map(|(id, &w)| (name(id), w))
            .collect();
        let mut bins: BTreeMap<String, u32> = BTreeMap::new();
        for o in &target.owner {
            *bins.entry(name(o)).or_default() += 1;
        }
        let announcer = state.announcer().map(str::to_string);
        Ok(DecisionRecord {
            at_ms: now_ms,
            announced_here: announcer.as_deref() == Some(state.me()),
            announcer,
            action: match d.action {
                Action::Hold => "hold",
                Action::ScaleUp => "scale_up",
                Action::ScaleDown => "scale_down",
            }
            .into(),
            epoch: view.assignment.epoch,
            next_epoch: d.assignment.as_ref().map(|a| a.epoch),
            workers,
            bins,
            current_workers: d.inputs.current_workers,
            proposed_workers: d.inputs.proposed_workers,
            workers_needed: d.inputs.estimate.as_ref().map(|e| e.workers_needed),
            current_capacity: d.inputs.current_capacity,
            moves: d.inputs.moves,
            reason: d.reason,
            executed: false,
            execution: None,
            target: d
                .assignment
                .as_ref()
                .map(|a| a.owner.iter().map(name).collect()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::view::{NodeSummary, Observed, OperatorSummary, node_id};

    fn ops() -> Vec<OperatorSpec> {
        vec![
            OperatorSpec {
                name: "src".into(),
                upstream: vec![],
            },
            OperatorSpec {
                name: "op".into(),
                upstream: vec![0],
            },
        ]
    }

    /// A node of 1 worker whose operator runs at 1000 records/s per worker
    /// and is offered `rate`/s (it keeps up only to 1000).
    fn summary(bins_held: u32, rate: f32) -> NodeSummary {
        let op = |id: &str, tp: f32| OperatorSummary {
            id: id.into(),
            instances: 1,
            true_processing_per_s: tp,
            true_output_per_s: tp,
            observed_in_per_s: rate,
            observed_out_per_s: rate,
            backlog: 0,
            useful_permille: 500,
            backpressure_permille: 0,
            offered_per_s: None,
        };
        NodeSummary {
            workers: 4,
            pipeline: 9,
            checkpoints: Vec::new(),
            run: 0,
            cores: 4,
            rss_bytes: 1,
            bins_held,
            bins_total: 48,
            epoch: 1,
            interval_ms: 1000,
            operators: vec![op("src", 1e6), op("op", 1000.0)],
            truncated: 0,
            bins: Default::default(),
            idle_cores: 0.0,
        }
    }

    fn config() -> ControllerConfig {
        ControllerConfig {
            warm_up: 0,
            stabilization_ms: 0,
            ..Default::default()
        }
    }

    /// Three nodes each see the others through gossip and themselves
    /// locally: the same view.
    fn views(names: &[&str], rate: f32) -> Vec<ClusterState> {
        names
            .iter()
            .map(|me| {
                let mut v = ClusterState::new(me);
                v.handle_local(0, None, summary(16, rate));
                let obs: Vec<Observed> = names
                    .iter()
                    .filter(|n| *n != me)
                    .map(|n| Observed {
                        name: n.to_string(),
                        addr: None,
                        state: "alive".into(),
                        payload: Some(((1, 1), postcard::to_stdvec(&summary(16, rate)).unwrap())),
                    })
                    .collect();
                v.handle_members(0, &obs);
                v
            })
            .collect()
    }

    #[test]
    fn every_node_computes_the_same_decision_and_one_announces_it() {
        let names = ["a", "b", "c"];
        // 1500/s per node: 4500/s needs 4.5 workers' worth of the operator;
        // the 3 workers holding bins (of 4 threads each, as every member's
        // migration control says) carry 0.67× of it: scale up.
        let in_force = InForce {
            epoch: 1,
            owner: (0..48).map(|b| names[b / 16].to_string()).collect(),
            workers_used: names.iter().map(|n| (n.to_string(), 1)).collect(),
        };
        let mut records = Vec::new();
        for v in views(&names, 1500.0) {
            let mut p = Planner::new(config(), ops(), 9, 0);
            records.push(
                p.handle_tick(10_000, &v, Some(&in_force))
                    .expect("decision"),
            );
        }
        let lowest = *names.iter().min_by_key(|n| node_id(n)).unwrap();
        for r in &records {
            assert_eq!(r.action, "scale_up", "{}", r.reason);
            assert_eq!(r.next_epoch, Some(2));
            assert_eq!(r.announcer.as_deref(), Some(lowest));
            let mut same = r.clone();
            same.announced_here = records[0].announced_here;
            assert_eq!(same, records[0], "the same decision everywhere");
        }
        assert_eq!(records.iter().filter(|r| r.announced_here).count(), 1);
        let r = &records[0];
        assert_eq!(r.current_workers, 3);
        assert!(r.proposed_workers > r.current_workers, "{r:?}");
        let target = r.target.as_ref().expect("target owners");
        assert_eq!(target.len(), 48);
        let moved = (0..48).filter(|&b| target[b] != in_force.owner[b]).count();
        assert_eq!(moved as u32, r.moves, "the bins that move are counted");
        assert_eq!(r.bins.values().sum::<u32>(), 48);
        let line = r.log_line();
        assert!(
            line.starts_with("decision epoch 1 → 2 scale_up: "),
            "{line}"
        );

        assert!(!r.executed);
    }

    #[test]
    fn the_next_lowest_announces_when_the_announcer_dies() {
        let names = ["a", "b", "c"];
        let mut sorted = names.to_vec();
        sorted.sort_by_key(|n| node_id(n));
        // Seen from the highest-id node, which is never the announcer.
        let me = sorted[2];
        let mut v = views(&names, 500.0)
            .into_iter()
            .find(|v| v.me() == me)
            .unwrap();
        let mut p = Planner::new(config(), ops(), 9, 0);
        let r = p.handle_tick(1_000, &v, None).expect("decision");
        assert_eq!(r.announcer.as_deref(), Some(sorted[0]));
        assert!(!r.announced_here);
        let down = |dead: &[&str]| -> Vec<Observed> {
            sorted[..2]
                .iter()
                .map(|n| Observed {
                    name: n.to_string(),
                    addr: None,
                    state: if dead.contains(n) { "down" } else { "alive" }.into(),
                    payload: Some(((1, 1), postcard::to_stdvec(&summary(16, 500.0)).unwrap())),
                })
                .collect()
        };
        v.handle_members(2_000, &down(&[sorted[0]]));
        let r = p.handle_tick(2_000, &v, None).expect("decision");
        assert_eq!(r.announcer.as_deref(), Some(sorted[1]));
        v.handle_members(3_000, &down(&[sorted[0], sorted[1]]));
        let r = p.handle_tick(3_000, &v, None).expect("decision");
        assert_eq!(r.announcer.as_deref(), Some(me));
        assert!(r.announced_here, "the last one alive announces");
    }

    #[test]
    fn nothing_to_plan_before_the_first_summary() {
        let v = ClusterState::new("a");
        let mut p = Planner::new(config(), ops(), 9, 0);
        assert!(p.handle_tick(0, &v, None).is_err());
    }
}
