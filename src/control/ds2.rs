//! The DS2 scaling policy (Kalavri et al., "Three steps is all you need",
//! OSDI 2018), evaluated in one topological traversal from the sources.
//!
//! Per operator instance `k` of operator `o_i`, over an interval of wall
//! time `W` of which `W_u` was useful (inside operator code, not waiting for
//! input nor for output space), with `R_prc` records processed and `R_psd`
//! produced (§3.1):
//!
//! ```text
//! true processing rate      λp[o_i^k] = R_prc / W_u
//! true output rate          λo[o_i^k] = R_psd / W_u
//! observed processing rate  λ̂p[o_i^k] = R_prc / W
//! observed output rate      λ̂o[o_i^k] = R_psd / W
//! ```
//!
//! Operator rates are the sums over its `p_i` instances (§3.2):
//! `λp[o_i] = Σ_k λp[o_i^k]`, `λo[o_i] = Σ_k λo[o_i^k]`. The optimal
//! parallelism of `o_i` is the target rate of its input over the true rate
//! one instance sustains (Eq. 7), and the target output rate it then has is
//! its selectivity times that input (Eq. 8):
//!
//! ```text
//! (7)  π_i      = ⌈ Σ_{o_j ∈ up(o_i)} λo*[o_j] / (λp[o_i] / p_i) ⌉
//! (8)  λo*[o_i] = (λo[o_i] / λp[o_i]) · Σ_{o_j ∈ up(o_i)} λo*[o_j]
//!      λo*[src] = the target rate of the source (what arrives from outside)
//! ```
//!
//! Visiting operators in topological order makes every `λo*[o_j]` known when
//! `o_i` is reached, so one traversal computes every `π_i`. As in the
//! reference implementation, the scaling factor `f ≥ 0` over-provisions:
//! `π_i = ⌈(1 + f) · x_i⌉` with `x_i` the unrounded quotient of Eq. 7; and
//! when no operator would scale up (in eddy: nor would the number of workers,
//! see below) but some source still achieves less than
//! its target by more than the target rate ratio `t ≥ 1`
//! (`λo*[src] / λ̂o[src] > t`), every `π_i` is multiplied by that ratio
//! (capacity assumed linear in instances).
//!
//! eddy runs an instance of every operator on every worker (as timely does),
//! so the number that matters is worker time: operator `o_i` needs `x_i`
//! workers' worth of useful time, the dataflow `Σ_i x_i` (DS2's mapping for
//! Timely, §5). Nodes differ, so the same sum is also taken per node with
//! that node's own per-instance rates: `D_n = Σ_i T_i / r_{i,n}`, where `T_i`
//! is the target input rate of `o_i` and `r_{i,n}` the mean true processing
//! rate of its instances on node `n` — the workers node `n` would need to
//! carry the whole target load alone. A node that measured nothing yet is
//! assumed to be as fast as the cluster's mean; a later decision corrects it.
//! Instances that did no useful work in the interval have no true rate and
//! are left out of the means.

use std::collections::BTreeMap;
use std::fmt;

use super::{ClusterView, NodeId};

/// DS2's knobs (its `ds2.toml`), besides intervals (see `controller`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ds2Params {
    /// Over-provision every operator by this fraction (DS2 default 0).
    pub(crate) scaling_factor: f64,
    /// `≥ 1`: the largest tolerated target/observed source rate ratio when
    /// no operator scales up (DS2 default: off, `f64::MAX`).
    pub(crate) target_rate_ratio: f64,
}

impl Default for Ds2Params {
    fn default() -> Self {
        Ds2Params {
            // The measurement error of useful time (±10 % in the simulator),
            // so one decision is enough even when the estimate is low.
            scaling_factor: 0.12,
            target_rate_ratio: 1.25,
        }
    }
}

/// The result of Eq. 7/8 for one operator.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct OperatorEstimate {
    pub(crate) name: String,
    /// Instances that did useful work (`p_i`).
    pub(crate) instances: u32,
    /// `λp[o_i]`, aggregated over instances.
    pub(crate) true_processing_per_s: f64,
    /// `λo[o_i]`, aggregated.
    pub(crate) true_output_per_s: f64,
    /// `λ̂o[o_i]`, aggregated.
    pub(crate) observed_output_per_s: f64,
    /// `Σ_{up} λo*`; for a source, its target rate.
    pub(crate) target_input_per_s: f64,
    /// `λo*[o_i]`.
    pub(crate) target_output_per_s: f64,
    /// `x_i`: workers' worth of useful time needed (unrounded Eq. 7).
    pub(crate) optimal: f64,
    /// `π_i` after the scaling factor and any target-rate adjustment.
    pub(crate) parallelism: u32,
}

/// The policy's answer for the whole dataflow.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Ds2Estimate {
    /// In topological order.
    pub(crate) operators: Vec<OperatorEstimate>,
    /// Largest `λo*[src] / λ̂o[src]` over the sources.
    pub(crate) source_rate_ratio: f64,
    /// The factor applied by the target-rate-ratio rule (1 when it did not
    /// fire).
    pub(crate) adjustment: f64,
    /// `Σ_i x_i`: workers' worth of useful time the dataflow needs.
    pub(crate) workers_needed: f64,
    /// `D_n` for every alive node: workers it would need to carry the whole
    /// target load alone, including the adjustment (not the scaling factor).
    pub(crate) node_demand: BTreeMap<NodeId, f64>,
    /// Nodes whose demand is the cluster mean because they measured nothing.
    pub(crate) unmeasured: Vec<NodeId>,
}

/// Why the policy could not run on a view.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ds2Error {
    /// The graph has a cycle through this operator.
    Cycle(String),
    /// No instance of this operator did useful work, so it has no true rate.
    NotMeasured(String),
    /// An upstream index points past the operator list.
    BadUpstream { operator: String, upstream: usize },
}

impl fmt::Display for Ds2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ds2Error::Cycle(op) => write!(f, "the dataflow has a cycle through {op}"),
            Ds2Error::NotMeasured(op) => {
                write!(f, "{op}: no instance did useful work this interval")
            }
            Ds2Error::BadUpstream { operator, upstream } => {
                write!(f, "{operator}: upstream index {upstream} is out of range")
            }
        }
    }
}

/// Topological order, smallest index first among the ready ones (so the
/// order, and everything computed from it, is deterministic).
pub(crate) fn topological_order(view: &ClusterView) -> Result<Vec<usize>, Ds2Error> {
    let n = view.operators.len();
    let mut indegree = vec![0usize; n];
    let mut downstream = vec![Vec::new(); n];
    for (i, op) in view.operators.iter().enumerate() {
        for &u in &op.upstream {
            if u >= n {
                return Err(Ds2Error::BadUpstream {
                    operator: op.name.clone(),
                    upstream: u,
                });
            }
            indegree[i] += 1;
            downstream[u].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &d in &downstream[i] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                ready.insert(d);
            }
        }
    }
    if order.len() < n {
        let stuck = (0..n).find(|&i| indegree[i] > 0).unwrap_or(0);
        return Err(Ds2Error::Cycle(view.operators[stuck].name.clone()));
    }
    Ok(order)
}

/// Per-operator sums of one view's samples.
#[derive(Clone, Default)]
struct Sums {
    instances: u32,
    true_processing: f64,
    true_output: f64,
    observed_output: f64,
    offered: f64,
    any_offered: bool,
    /// Per node: (sum of instance true processing rates, instances).
    per_node: BTreeMap<NodeId, (f64, u32)>,
}

/// Evaluates Eq. 7/8 on a view.
pub(crate) fn evaluate(view: &ClusterView, params: &Ds2Params) -> Result<Ds2Estimate, Ds2Error> {
    let order = topological_order(view)?;
    let mut sums = vec![Sums::default(); view.operators.len()];
    for s in &view.samples {
        let Some(sum) = sums.get_mut(s.operator) else {
            continue;
        };
        if let Some(offered) = s.offered_per_s {
            sum.offered += offered;
            sum.any_offered = true;
        }
        let c = &s.counters;
        if let Some(observed) = c.observed_output_rate(s.interval_ns) {
            sum.observed_output += observed;
        }
        let source = view.operators[s.operator].upstream.is_empty();
        // A source processes what it emits; its records_in may be zero.
        let processed = if source { c.records_out } else { c.records_in };
        if c.useful_ns == 0 || processed == 0 {
            continue;
        }
        let lp = processed as f64 * 1e9 / c.useful_ns as f64;
        let lo = c.true_output_rate().unwrap_or(0.0);
        sum.instances += 1;
        sum.true_processing += lp;
        sum.true_output += lo;
        let node = sum.per_node.entry(s.node).or_insert((0.0, 0));
        node.0 += lp;
        node.1 += 1;
    }

    let mut target_out = vec![0.0f64; view.operators.len()];
    let mut operators = Vec::with_capacity(order.len());
    let mut source_rate_ratio = 0.0f64;
    for &i in &order {
        let op = &view.operators[i];
        let s = &sums[i];
        if s.instances == 0 {
            return Err(Ds2Error::NotMeasured(op.name.clone()));
        }
        let per_instance = s.true_processing / f64::from(s.instances);
        let (target_in, target_o) = if op.upstream.is_empty() {
            let target = if s.any_offered {
                s.offered
            } else {
                s.observed_output
            };
            if s.observed_output > 0.0 {
                source_rate_ratio = source_rate_ratio.max(target / s.observed_output);
            } else if target > 0.0 {
                source_rate_ratio = f64::INFINITY;
            }
            (target, target)
        } else {
            let input: f64 = op.upstream.iter().map(|&u| target_out[u]).sum();
            // Eq. 8: selectivity (λo/λp) times the target input.
            (input, s.true_output / s.true_processing * input)
        };
        target_out[i] = target_o;
        let optimal = target_in / per_instance;
        operators.push(OperatorEstimate {
            name: op.name.clone(),
            instances: s.instances,
            true_processing_per_s: s.true_processing,
            true_output_per_s: s.true_output,
            observed_output_per_s: s.observed_output,
            target_input_per_s: target_in,
            target_output_per_s: target_o,
            optimal,
            parallelism: ceil_u32(optimal * (1.0 + params.scaling_factor)),
        });
    }

    // In eddy every worker runs every operator: the dataflow scales up when
    // it needs more workers in all than it has, even if no single operator
    // needs more instances than there are workers.
    let workers_now = view.assignment.total_workers();
    let scales_up = operators.iter().any(|e| e.parallelism > e.instances)
        || ceil_u32(
            operators.iter().map(|e| e.optimal).sum::<f64>() * (1.0 + params.scaling_factor),
        ) > workers_now;
    let adjustment = if !scales_up && source_rate_ratio > params.target_rate_ratio {
        source_rate_ratio.min(1e6)
    } else {
        1.0
    };
    if adjustment != 1.0 {
        for e in &mut operators {
            e.parallelism = ceil_u32(f64::from(e.parallelism) * adjustment);
        }
    }
    let workers_needed = operators.iter().map(|e| e.optimal).sum::<f64>() * adjustment;

    // D_n: each node's own per-instance rates where it measured them.
    let mut node_demand = BTreeMap::new();
    let mut unmeasured = Vec::new();
    for n in &view.nodes {
        let mut demand = 0.0;
        let mut measured = false;
        for (&i, e) in order.iter().zip(&operators) {
            let rate = match sums[i].per_node.get(&n.node) {
                Some(&(sum, k)) if k > 0 => {
                    measured = true;
                    sum / f64::from(k)
                }
                _ => e.true_processing_per_s / f64::from(e.instances),
            };
            demand += e.target_input_per_s / rate;
        }
        if !measured {
            unmeasured.push(n.node);
        }
        node_demand.insert(n.node, demand * adjustment);
    }
    Ok(Ds2Estimate {
        operators,
        source_rate_ratio,
        adjustment,
        workers_needed,
        node_demand,
        unmeasured,
    })
}

fn ceil_u32(x: f64) -> u32 {
    if x.is_finite() && x > 0.0 {
        x.ceil().min(f64::from(u32::MAX)) as u32
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Assignment, NodeSample, OperatorSample, OperatorSpec};
    use crate::kernel::counters::Counters;

    const S: u64 = 1_000_000_000;

    fn spec(name: &str, upstream: &[usize]) -> OperatorSpec {
        OperatorSpec {
            name: name.into(),
            upstream: upstream.to_vec(),
        }
    }

    fn sample(op: usize, node: u32, rin: u64, rout: u64, useful_ns: u64) -> OperatorSample {
        OperatorSample {
            operator: op,
            node,
            worker: 0,
            interval_ns: S,
            counters: Counters {
                records_in: rin,
                records_out: rout,
                useful_ns,
                waiting_ns: S - useful_ns.min(S),
                blocked_ns: 0,
            },
            offered_per_s: None,
        }
    }

    fn view(ops: Vec<OperatorSpec>, samples: Vec<OperatorSample>) -> ClusterView {
        ClusterView {
            operators: ops,
            nodes: vec![NodeSample { node: 1, cores: 8 }],
            samples,
            bins: vec![],
            assignment: Assignment {
                epoch: 1,
                workers: [(1, 1)].into(),
                owner: vec![],
            },
        }
    }

    /// The worked example of the paper's Fig. 2 in spirit: a source at a
    /// target 2000/s, an operator that halves its input and sustains 500/s
    /// per instance, then one that sustains 250/s.
    #[test]
    fn eq7_and_eq8_in_one_traversal() {
        let ops = vec![spec("src", &[]), spec("filter", &[0]), spec("sink", &[1])];
        let mut src = sample(0, 1, 0, 1000, S / 10);
        src.offered_per_s = Some(2000.0);
        let samples = vec![
            src,
            // 1000 in, 500 out in 2 s of useful time: λp = 500, λo = 250.
            sample(1, 1, 1000, 500, 2 * S),
            // 500 in over 2 s: λp = 250.
            sample(2, 1, 500, 0, 2 * S),
        ];
        let params = Ds2Params {
            scaling_factor: 0.0,
            target_rate_ratio: f64::MAX,
        };
        let e = evaluate(&view(ops, samples), &params).unwrap();
        let [s, f, k] = &e.operators[..] else {
            panic!("three operators")
        };
        assert_eq!(s.target_output_per_s, 2000.0);
        assert_eq!(f.target_input_per_s, 2000.0);
        assert_eq!(f.optimal, 4.0);
        assert_eq!(f.parallelism, 4);
        assert_eq!(f.target_output_per_s, 1000.0);
        assert_eq!(k.target_input_per_s, 1000.0);
        assert_eq!(k.parallelism, 4);
        // The source emits 10 000/s of useful time: 0.2 of a worker.
        assert!((s.optimal - 0.2).abs() < 1e-9);
        assert!((e.workers_needed - 8.2).abs() < 1e-9);
        assert_eq!(e.source_rate_ratio, 2.0);
        assert_eq!(e.adjustment, 1.0, "operators scale up: no adjustment");
    }

    #[test]
    fn fan_in_sums_upstream_targets_and_factor_rounds_up() {
        let ops = vec![spec("a", &[]), spec("b", &[]), spec("join", &[0, 1])];
        let samples = vec![
            sample(0, 1, 0, 300, S / 10),
            sample(1, 1, 0, 100, S / 10),
            // Two instances at 100/s each: λp[join] = 200, per instance 100.
            sample(2, 1, 200, 200, 2 * S),
            OperatorSample {
                worker: 1,
                ..sample(2, 1, 200, 200, 2 * S)
            },
        ];
        let params = Ds2Params {
            scaling_factor: 0.1,
            target_rate_ratio: f64::MAX,
        };
        let e = evaluate(&view(ops, samples), &params).unwrap();
        let join = &e.operators[2];
        assert_eq!(join.instances, 2);
        assert_eq!(join.target_input_per_s, 400.0);
        assert_eq!(join.optimal, 4.0);
        assert_eq!(join.parallelism, 5, "⌈4 · 1.1⌉");
    }

    #[test]
    fn target_rate_ratio_fires_only_when_nothing_scales_up() {
        let ops = vec![spec("src", &[]), spec("op", &[0])];
        // Everything looks fine per instance, but the source reaches only
        // half of what arrives.
        let mut src = sample(0, 1, 0, 100, S / 100);
        src.offered_per_s = Some(200.0);
        let samples = vec![src, sample(1, 1, 100, 100, S / 10)];
        let params = Ds2Params {
            scaling_factor: 0.0,
            target_rate_ratio: 1.5,
        };
        let mut v = view(ops, samples);
        v.operators[1].name = "op".into();
        let e = evaluate(&v, &params).unwrap();
        // op needs 200 / 1000 = 0.2 → 1 instance: no scale-up, ratio 2.
        assert_eq!(e.adjustment, 2.0);
        assert_eq!(e.operators[1].parallelism, 2);
    }

    #[test]
    fn cycles_and_unmeasured_operators_are_errors() {
        let ops = vec![spec("a", &[1]), spec("b", &[0])];
        assert_eq!(
            evaluate(&view(ops, vec![]), &Ds2Params::default()),
            Err(Ds2Error::Cycle("a".into()))
        );
        let ops = vec![spec("src", &[]), spec("idle", &[0])];
        let samples = vec![sample(0, 1, 0, 10, 1000), sample(1, 1, 0, 0, 0)];
        assert_eq!(
            evaluate(&view(ops, samples), &Ds2Params::default()),
            Err(Ds2Error::NotMeasured("idle".into()))
        );
    }

    #[test]
    fn node_demand_uses_each_nodes_own_rates() {
        let ops = vec![spec("src", &[]), spec("op", &[0])];
        let mut fast = sample(1, 1, 1000, 1000, S); // 1000/s per instance
        fast.worker = 0;
        let slow = sample(1, 2, 250, 250, S); // 250/s per instance
        let mut src = sample(0, 1, 0, 1250, S / 1000);
        src.offered_per_s = Some(2000.0);
        let mut v = view(ops, vec![src, fast, slow]);
        v.nodes = vec![
            NodeSample { node: 1, cores: 4 },
            NodeSample { node: 2, cores: 4 },
            NodeSample { node: 3, cores: 4 },
        ];
        let e = evaluate(
            &v,
            &Ds2Params {
                scaling_factor: 0.0,
                target_rate_ratio: f64::MAX,
            },
        )
        .unwrap();
        // Source 1.25 M/s per instance; op 1000/s on node 1, 250/s on 2.
        let src_part = 2000.0 / 1_250_000.0;
        assert!((e.node_demand[&1] - (src_part + 2.0)).abs() < 1e-9);
        assert!((e.node_demand[&2] - (2000.0 / 1_250_000.0 * 1.0 + 8.0)).abs() < 1e-6);
        // Node 3 measured nothing: the mean (625/s) stands in.
        assert!((e.node_demand[&3] - (src_part + 3.2)).abs() < 1e-9);
        assert_eq!(e.unmeasured, vec![3]);
    }
}
