//! The baseline DS2 is compared with: a CPU-threshold policy in the manner
//! of a Kubernetes HPA at 70 %.
//!
//! Utilisation is the share of worker time spent in operator code. The
//! desired number of workers is `⌈W · u / target⌉`, left alone while
//! `|u / target − 1| ≤ tolerance`; scale-ups apply at once, scale-downs take
//! the largest recommendation of the last `scale_down_window_ms` (HPA's
//! stabilisation window). It knows nothing of node speeds or bin rates: new
//! workers go to the nodes with the fewest (as a scheduler spreads pods) and
//! bins follow the worker count.

use std::collections::{BTreeMap, VecDeque};

use super::controller::{Action, Decision, DecisionInputs, Policy};
use super::placement::{self, NodeCapacity};
use super::{Assignment, ClusterView, NodeId};

#[derive(Clone, Copy, Debug)]
pub(crate) struct ThresholdConfig {
    pub(crate) target_utilisation: f64,
    pub(crate) tolerance: f64,
    pub(crate) scale_down_window_ms: u64,
    /// Intervals ignored after a change (as DS2's warm-up, for fairness).
    pub(crate) warm_up: u32,
}

impl Default for ThresholdConfig {
    fn default() -> Self {
        ThresholdConfig {
            target_utilisation: 0.7,
            tolerance: 0.1,
            scale_down_window_ms: 300_000,
            warm_up: 1,
        }
    }
}

pub(crate) struct ThresholdPolicy {
    config: ThresholdConfig,
    recommendations: VecDeque<(u64, u32)>,
    intervals_since_change: u32,
}

impl ThresholdPolicy {
    pub(crate) fn new(config: ThresholdConfig) -> ThresholdPolicy {
        ThresholdPolicy {
            config,
            recommendations: VecDeque::new(),
            intervals_since_change: 0,
        }
    }
}

/// Spreads `total` workers: keeps what runs, adds to the nodes with the
/// fewest, removes from the nodes with the most.
fn spread(view: &ClusterView, total: u32) -> BTreeMap<NodeId, u16> {
    let mut w: BTreeMap<NodeId, u16> = view
        .nodes
        .iter()
        .map(|n| (n.node, view.assignment.workers_on(n.node).min(n.cores)))
        .collect();
    let cores: BTreeMap<NodeId, u16> = view.nodes.iter().map(|n| (n.node, n.cores)).collect();
    let mut sum: u32 = w.values().map(|&x| u32::from(x)).sum();
    while sum < total {
        let Some((&n, _)) = w
            .iter()
            .filter(|&(n, &x)| x < cores[n])
            .min_by_key(|&(n, &x)| (x, *n))
        else {
            break;
        };
        *w.get_mut(&n).expect("node is in the map") += 1;
        sum += 1;
    }
    while sum > total {
        let Some((&n, _)) = w
            .iter()
            .filter(|&(_, &x)| x > 0)
            .max_by_key(|&(n, &x)| (x, std::cmp::Reverse(*n)))
        else {
            break;
        };
        *w.get_mut(&n).expect("node is in the map") -= 1;
        sum -= 1;
    }
    w
}

impl Policy for ThresholdPolicy {
    fn handle_view(&mut self, now_ms: u64, view: &ClusterView) -> Decision {
        let cfg = self.config;
        let current = view.assignment.total_workers();
        let hold = |reason: String| Decision {
            at_ms: now_ms,
            action: Action::Hold,
            assignment: None,
            reason,
            inputs: DecisionInputs {
                current_workers: current,
                proposed_workers: current,
                ..Default::default()
            },
        };
        if self.intervals_since_change < cfg.warm_up {
            self.intervals_since_change += 1;
            return hold("warm-up".into());
        }
        let useful: u64 = view.samples.iter().map(|s| s.counters.useful_ns).sum();
        let interval = view
            .samples
            .iter()
            .map(|s| s.interval_ns)
            .max()
            .unwrap_or(0);
        // Utilisation over the workers that reported.
        let reporting: std::collections::BTreeSet<(NodeId, u16)> =
            view.samples.iter().map(|s| (s.node, s.worker)).collect();
        let capacity_ns = reporting.len() as u64 * interval;
        if capacity_ns == 0 {
            return hold("no measurements".into());
        }
        let u = (useful as f64 / capacity_ns as f64).min(1.0);
        let ratio = u / cfg.target_utilisation;
        let desired = if (ratio - 1.0).abs() <= cfg.tolerance {
            current
        } else {
            ((f64::from(current) * ratio).ceil() as u32).max(1)
        };
        self.recommendations.push_back((now_ms, desired));
        while self
            .recommendations
            .front()
            .is_some_and(|&(t, _)| now_ms.saturating_sub(t) > cfg.scale_down_window_ms)
        {
            self.recommendations.pop_front();
        }
        let target = if desired >= current {
            desired
        } else {
            self.recommendations
                .iter()
                .map(|&(_, d)| d)
                .max()
                .unwrap_or(desired)
        };
        let workers = spread(view, target);
        let total: u32 = workers.values().map(|&w| u32::from(w)).sum();
        let reason = format!(
            "utilisation {:.0} % of {current} workers, target {:.0} % → {desired}, {total} after the window",
            u * 100.0,
            cfg.target_utilisation * 100.0
        );
        if total == current {
            return hold(reason);
        }
        let nodes: Vec<NodeCapacity> = view
            .nodes
            .iter()
            .map(|n| NodeCapacity {
                node: n.node,
                cores: n.cores,
                demand: 1.0,
                current_workers: view.assignment.workers_on(n.node),
            })
            .collect();
        let p = placement::place_for_workers(&nodes, &workers, &view.bins, &view.assignment.owner);
        self.intervals_since_change = 0;
        Decision {
            at_ms: now_ms,
            action: if total > current {
                Action::ScaleUp
            } else {
                Action::ScaleDown
            },
            inputs: DecisionInputs {
                current_workers: current,
                proposed_workers: total,
                moves: p.moves,
                bytes_moved: p.bytes_moved,
                ..Default::default()
            },
            assignment: Some(Assignment {
                epoch: view.assignment.epoch + 1,
                workers: p.workers,
                owner: p.owner,
            }),
            reason,
        }
    }
}
