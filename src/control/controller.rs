//! The deterministic planner with hysteresis: when to act on DS2's
//! estimate, and when not to.
//!
//! Call [`Controller::handle_view`] once per policy interval with the view
//! measured over that interval. It returns a [`Decision`] that always says
//! why, with the numbers it decided from; when it reconfigures, the new
//! [`Assignment`] has the view's epoch + 1 and is a pure function of the
//! view (every node computes the same one). The controller assumes the
//! driver executes what it returns; the next view carries the assignment
//! actually in force.
//!
//! Rules, in order:
//! 1. *Warm-up*: the first `warm_up` intervals after a change are ignored
//!    (DS2's `warm_up_time`: rates right after a move are not steady).
//! 2. *Estimate*: DS2 (`ds2`) gives each node's demand `D_n`; the current
//!    assignment can carry `c = min_n k_n / load_n` of the target load
//!    (`k_n = w_n / D_n`, `load_n` its bins' share), so a hot bin counts.
//! 3. *Scale up* when `c < 1 / (1 + dead_band)`: plan for `1 + scaling
//!    factor`. The dead band is the measurement error: an assignment that
//!    was planned with headroom is not grown again on noise.
//! 4. *Scale down* only `scale_down_after_ms` after the last change, planning
//!    for `(1 + scaling factor)(1 + dead_band)`, removing at most
//!    `scale_down_max_factor` of the workers at once, and only if it frees
//!    at least `min_gain` of them (the cost check: moving state for less is
//!    not worth it).
//! 5. *Stabilisation*: no change sooner than `stabilization_ms` after the
//!    last one.
//! 6. *Activation*: act only after `activation` consecutive intervals agree
//!    on the direction (DS2's `activation_time`); the last plan is applied.

use std::fmt::Write as _;

use super::ds2::{self, Ds2Estimate, Ds2Params};
use super::placement::{self, NodeCapacity, Placement};
use super::{Assignment, ClusterView, NodeId};

/// The controller's knobs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ControllerConfig {
    /// Intervals ignored after a change.
    pub(crate) warm_up: u32,
    /// Consecutive agreeing intervals before acting.
    pub(crate) activation: u32,
    /// No change sooner than this after the last one.
    pub(crate) stabilization_ms: u64,
    /// No scale-down sooner than this after the last change.
    pub(crate) scale_down_after_ms: u64,
    /// At most this fraction of the workers is removed at once.
    pub(crate) scale_down_max_factor: f64,
    /// A scale-down must free at least this fraction of the workers.
    pub(crate) min_gain: f64,
    /// Relative error of the estimate tolerated before acting.
    pub(crate) dead_band: f64,
    pub(crate) ds2: Ds2Params,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            warm_up: 1,
            activation: 1,
            stabilization_ms: 20_000,
            scale_down_after_ms: 120_000,
            scale_down_max_factor: 0.5,
            min_gain: 0.1,
            dead_band: 0.1,
            ds2: Ds2Params::default(),
        }
    }
}

/// What a decision does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Hold,
    ScaleUp,
    ScaleDown,
}

/// The numbers a decision was made from.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DecisionInputs {
    pub(crate) estimate: Option<Ds2Estimate>,
    pub(crate) current_workers: u32,
    /// Fraction of the target load the current assignment carries.
    pub(crate) current_capacity: f64,
    pub(crate) proposed_workers: u32,
    pub(crate) moves: u32,
    pub(crate) bytes_moved: u64,
}

/// One decision, logged whatever it is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Decision {
    pub(crate) at_ms: u64,
    pub(crate) action: Action,
    /// The next assignment (epoch + 1) when `action` is not `Hold`.
    pub(crate) assignment: Option<Assignment>,
    pub(crate) reason: String,
    pub(crate) inputs: DecisionInputs,
}

/// A scaling policy driven by views, for the simulator to compare.
pub(crate) trait Policy {
    fn handle_view(&mut self, now_ms: u64, view: &ClusterView) -> Decision;
}

/// DS2 with hysteresis.
pub(crate) struct Controller {
    config: ControllerConfig,
    last_change_ms: u64,
    intervals_since_change: u32,
    /// Direction of the consecutive proposals so far, and how many.
    streak: Option<(Action, u32)>,
}

impl Controller {
    /// A controller whose current assignment was put in force at `now_ms`.
    pub(crate) fn new(config: ControllerConfig, now_ms: u64) -> Controller {
        Controller {
            config,
            last_change_ms: now_ms,
            intervals_since_change: 0,
            streak: None,
        }
    }

    /// The assignment in force changed at `now_ms` (a decision executed,
    /// or a rebalance from elsewhere): warm-up, stabilisation and the
    /// scale-down wait count from here.
    pub(crate) fn note_change(&mut self, now_ms: u64) {
        self.last_change_ms = now_ms;
        self.intervals_since_change = 0;
        self.streak = None;
    }

    fn hold(&mut self, at_ms: u64, reason: String, inputs: DecisionInputs) -> Decision {
        self.streak = None;
        Decision {
            at_ms,
            action: Action::Hold,
            assignment: None,
            reason,
            inputs,
        }
    }
}

/// The nodes as the planner sees them.
pub(crate) fn capacities(view: &ClusterView, est: &Ds2Estimate) -> Vec<NodeCapacity> {
    view.nodes
        .iter()
        .filter_map(|n| {
            let demand = *est.node_demand.get(&n.node)?;
            (demand > 0.0 && demand.is_finite()).then_some(NodeCapacity {
                node: n.node,
                cores: n.cores,
                demand,
                current_workers: view.assignment.workers_on(n.node),
            })
        })
        .collect()
}

/// `min_n k_n / load_n`: the multiple of the target load the assignment in
/// force can carry, its hot bins included (0 if a loaded node has no
/// workers or left).
pub(crate) fn current_capacity(view: &ClusterView, nodes: &[NodeCapacity]) -> f64 {
    let shares = placement::bin_shares(&view.bins);
    let mut load: std::collections::BTreeMap<NodeId, f64> = Default::default();
    for (b, &o) in view.assignment.owner.iter().enumerate() {
        *load.entry(o).or_default() += shares.get(b).copied().unwrap_or(0.0);
    }
    let mut c = f64::INFINITY;
    for (&node, &l) in &load {
        if l <= 0.0 {
            continue;
        }
        let k = nodes.iter().find(|n| n.node == node).map_or(0.0, |n| {
            f64::from(view.assignment.workers_on(node)) / n.demand
        });
        c = c.min(k / l);
    }
    if c.is_finite() { c } else { 0.0 }
}

fn next(view: &ClusterView, p: Placement) -> Assignment {
    Assignment {
        epoch: view.assignment.epoch + 1,
        workers: p.workers,
        owner: p.owner,
    }
}

impl Policy for Controller {
    fn handle_view(&mut self, now_ms: u64, view: &ClusterView) -> Decision {
        let cfg = self.config;
        let epoch = view.assignment.epoch;
        let current_workers = view.assignment.total_workers();
        let mut inputs = DecisionInputs {
            current_workers,
            proposed_workers: current_workers,
            ..Default::default()
        };
        if self.intervals_since_change < cfg.warm_up {
            self.intervals_since_change += 1;
            let reason = format!(
                "warm-up: interval {} of {} after epoch {epoch}",
                self.intervals_since_change, cfg.warm_up
            );
            return self.hold(now_ms, reason, inputs);
        }
        self.intervals_since_change = self.intervals_since_change.saturating_add(1);
        let est = match ds2::evaluate(view, &cfg.ds2) {
            Ok(e) => e,
            Err(e) => return self.hold(now_ms, format!("no estimate: {e}"), inputs),
        };
        let nodes = capacities(view, &est);
        let capacity = current_capacity(view, &nodes);
        inputs.current_capacity = capacity;
        let mut reason = format!(
            "DS2 needs {:.2} workers of useful time (source target/observed {:.2}{}); \
             {current_workers} workers carry {:.2}× the target load",
            est.workers_needed,
            est.source_rate_ratio,
            if est.adjustment != 1.0 {
                format!(", adjusted ×{:.2}", est.adjustment)
            } else {
                String::new()
            },
            capacity
        );
        if !est.unmeasured.is_empty() {
            let _ = write!(
                reason,
                "; unmeasured nodes {:?} taken as average",
                est.unmeasured
            );
        }
        inputs.estimate = Some(est);
        let need = 1.0 + cfg.ds2.scaling_factor;
        let since_change = now_ms.saturating_sub(self.last_change_ms);

        let (action, plan) = if capacity < 1.0 / (1.0 + cfg.dead_band) {
            let p = placement::plan(&nodes, &view.bins, &view.assignment.owner, need);
            let _ = write!(
                reason,
                "; below 1/(1+{}) → scale up to {} workers for {:.2}×",
                cfg.dead_band,
                p.workers.values().map(|&w| u32::from(w)).sum::<u32>(),
                need
            );
            (Action::ScaleUp, p)
        } else {
            let down_need = need * (1.0 + cfg.dead_band);
            let floor =
                (f64::from(current_workers) * (1.0 - cfg.scale_down_max_factor)).ceil() as u32;
            let mut scale = 1.0;
            let mut p = placement::plan(&nodes, &view.bins, &view.assignment.owner, down_need);
            // Raise the planned load until the cut is no deeper than allowed.
            for _ in 0..64 {
                let total: u32 = p.workers.values().map(|&w| u32::from(w)).sum();
                if total >= floor {
                    break;
                }
                scale *= 1.05;
                p = placement::plan(
                    &nodes,
                    &view.bins,
                    &view.assignment.owner,
                    down_need * scale,
                );
            }
            let total: u32 = p.workers.values().map(|&w| u32::from(w)).sum();
            let gain = 1.0 - f64::from(total) / f64::from(current_workers.max(1));
            if total >= current_workers || gain < cfg.min_gain {
                let _ = write!(
                    reason,
                    "; {total} workers would carry {down_need:.2}×: gain {:.0} % < {:.0} % → hold",
                    gain.max(0.0) * 100.0,
                    cfg.min_gain * 100.0
                );
                return self.hold(now_ms, reason, inputs);
            }
            if since_change < cfg.scale_down_after_ms {
                let _ = write!(
                    reason,
                    "; {total} workers would do, but scale-down waits {} s after a change ({} s so far)",
                    cfg.scale_down_after_ms / 1000,
                    since_change / 1000
                );
                return self.hold(now_ms, reason, inputs);
            }
            let _ = write!(
                reason,
                "; {total} workers carry {down_need:.2}× → scale down ({:.0} % fewer, at most {:.0} %)",
                gain * 100.0,
                cfg.scale_down_max_factor * 100.0
            );
            (Action::ScaleDown, p)
        };
        inputs.proposed_workers = plan.workers.values().map(|&w| u32::from(w)).sum();
        inputs.moves = plan.moves;
        inputs.bytes_moved = plan.bytes_moved;
        let _ = write!(
            reason,
            "; moves {} bins ({} bytes)",
            plan.moves, plan.bytes_moved
        );
        if !plan.overloaded.is_empty() {
            let _ = write!(reason, "; no cores left for nodes {:?}", plan.overloaded);
        }
        if since_change < cfg.stabilization_ms {
            let _ = write!(
                reason,
                "; stabilising ({} of {} s) → hold",
                since_change / 1000,
                cfg.stabilization_ms / 1000
            );
            return self.hold(now_ms, reason, inputs);
        }
        let count = match self.streak {
            Some((a, n)) if a == action => n + 1,
            _ => 1,
        };
        if count < cfg.activation {
            self.streak = Some((action, count));
            let _ = write!(reason, "; activation {count} of {} → hold", cfg.activation);
            return Decision {
                at_ms: now_ms,
                action: Action::Hold,
                assignment: None,
                reason,
                inputs,
            };
        }
        self.streak = None;
        self.last_change_ms = now_ms;
        self.intervals_since_change = 0;
        let _ = write!(reason, "; epoch {} → {}", epoch, epoch + 1);
        Decision {
            at_ms: now_ms,
            action,
            assignment: Some(next(view, plan)),
            reason,
            inputs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{BinSample, NodeSample, OperatorSample, OperatorSpec};
    use crate::kernel::counters::Counters;

    const S: u64 = 1_000_000_000;

    /// One source and one operator at 1000 records/s per instance, two
    /// nodes of 4 cores, 16 bins; the source offers `offered`/s and every
    /// worker in force measured its part.
    fn view(offered: f64, workers: &[(NodeId, u16)], epoch: u64) -> ClusterView {
        let assignment = Assignment {
            epoch,
            workers: workers.iter().copied().collect(),
            // Bins in proportion to workers.
            owner: (0..16)
                .map(|b| {
                    let slots: Vec<NodeId> = workers
                        .iter()
                        .flat_map(|&(n, w)| std::iter::repeat_n(n, usize::from(w)))
                        .collect();
                    slots[b % slots.len()]
                })
                .collect(),
        };
        let total = f64::from(assignment.total_workers());
        let mut samples = Vec::new();
        for &(node, w) in workers {
            for worker in 0..w {
                let per = offered / total;
                let rin = per as u64;
                samples.push(OperatorSample {
                    operator: 0,
                    node,
                    worker,
                    interval_ns: S,
                    counters: Counters {
                        records_out: rin,
                        useful_ns: rin * 1_000, // 1 M/s
                        ..Default::default()
                    },
                    offered_per_s: Some(per),
                });
                samples.push(OperatorSample {
                    operator: 1,
                    node,
                    worker,
                    interval_ns: S,
                    counters: Counters {
                        records_in: rin,
                        records_out: rin,
                        useful_ns: rin * 1_000_000, // 1000/s
                        ..Default::default()
                    },
                    offered_per_s: None,
                });
            }
        }
        ClusterView {
            operators: vec![
                OperatorSpec {
                    name: "src".into(),
                    upstream: vec![],
                },
                OperatorSpec {
                    name: "op".into(),
                    upstream: vec![0],
                },
            ],
            nodes: vec![
                NodeSample { node: 1, cores: 4 },
                NodeSample { node: 2, cores: 4 },
            ],
            samples,
            bins: vec![
                BinSample {
                    records_per_s: 1.0,
                    state_bytes: 100
                };
                16
            ],
            assignment,
        }
    }

    fn config() -> ControllerConfig {
        ControllerConfig {
            warm_up: 0,
            stabilization_ms: 0,
            ..Default::default()
        }
    }

    #[test]
    fn scales_up_in_one_step_with_epoch_plus_one_and_a_reason() {
        let mut c = Controller::new(config(), 0);
        let v = view(5000.0, &[(1, 1)], 7);
        let d = c.handle_view(10_000, &v);
        assert_eq!(d.action, Action::ScaleUp, "{}", d.reason);
        let a = d.assignment.clone().unwrap();
        assert_eq!(a.epoch, 8);
        // 5000/s at 1000/s per worker, ×1.12, plus the source: 6 workers.
        assert_eq!(a.total_workers(), 6, "{}", d.reason);
        assert_eq!((a.workers_on(1), a.workers_on(2)), (4, 2));
        assert!(d.reason.contains("scale up"), "{}", d.reason);
        assert!(d.inputs.estimate.is_some());
        // Deterministic: another node computes the same decision.
        let mut other = Controller::new(config(), 0);
        assert_eq!(other.handle_view(10_000, &v), d);
    }

    #[test]
    fn holds_when_sufficient_and_within_the_dead_band() {
        let mut c = Controller::new(config(), 0);
        let d = c.handle_view(10_000, &view(5000.0, &[(1, 4), (2, 2)], 2));
        assert_eq!(d.action, Action::Hold, "{}", d.reason);
        assert!(d.reason.contains("gain"), "{}", d.reason);
    }

    #[test]
    fn scale_down_waits_and_is_bounded() {
        let mut c = Controller::new(config(), 0);
        let v = view(1000.0, &[(1, 4), (2, 4)], 3);
        let d = c.handle_view(60_000, &v);
        assert_eq!(d.action, Action::Hold, "{}", d.reason);
        assert!(d.reason.contains("waits"), "{}", d.reason);
        let d = c.handle_view(130_000, &v);
        assert_eq!(d.action, Action::ScaleDown, "{}", d.reason);
        // 2 workers would do; at most half go at once.
        assert_eq!(d.assignment.unwrap().total_workers(), 4, "{}", d.reason);
    }

    #[test]
    fn warm_up_stabilisation_and_activation_hold() {
        let cfg = ControllerConfig {
            warm_up: 1,
            activation: 2,
            stabilization_ms: 30_000,
            ..Default::default()
        };
        let mut c = Controller::new(cfg, 0);
        let v = view(5000.0, &[(1, 1)], 1);
        let d = c.handle_view(10_000, &v);
        assert!(d.reason.starts_with("warm-up"), "{}", d.reason);
        let d = c.handle_view(20_000, &v);
        assert!(d.reason.contains("stabilising"), "{}", d.reason);
        let d = c.handle_view(30_000, &v);
        assert!(d.reason.contains("activation 1 of 2"), "{}", d.reason);
        let d = c.handle_view(40_000, &v);
        assert_eq!(d.action, Action::ScaleUp, "{}", d.reason);
    }
}
