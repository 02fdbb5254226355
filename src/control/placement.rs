//! From "the dataflow needs this much worker time" to workers per node and
//! an owner for every bin.
//!
//! A node `n` with `w_n` workers and demand `D_n` (the workers it would need
//! to carry the whole target load, see `ds2`) can carry the fraction
//! `k_n = w_n / D_n` of the load. Workers are added where one worker carries
//! the most (fastest nodes first, preferring nodes already working, so equal
//! nodes are not swapped on noise) until `Σ k_n ≥ need`, with
//! `need = 1 + scaling factor`; no node gets more workers than cores.
//!
//! Bins carry their measured input rates, so a hot bin weighs what it is. A
//! node may hold at most `L_n = k_n / need` of the load: proportional to its
//! measured capacity, keeping the headroom on every node. Bins move only
//! when their node is over its limit (or leaves): from such a node, the
//! smallest bin that alone removes the excess, else the largest, until it
//! fits; every displaced bin, largest first, goes where it fits with the most
//! relative room. That is the fewest moves that meet capacity for a greedy
//! planner, and the same input always gives the same assignment. If a bin
//! fits nowhere (one hot bin larger than a node's room), a worker is added
//! where it helps and the placement is redone.

use std::collections::BTreeMap;

use super::{BinSample, NodeId};

/// What the planner knows about one alive node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeCapacity {
    pub(crate) node: NodeId,
    pub(crate) cores: u16,
    /// `D_n`; must be positive.
    pub(crate) demand: f64,
    pub(crate) current_workers: u16,
}

/// A planned assignment and what it costs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Placement {
    pub(crate) workers: BTreeMap<NodeId, u16>,
    pub(crate) owner: Vec<NodeId>,
    /// Bins whose owner changes.
    pub(crate) moves: u32,
    /// State that has to travel for those moves.
    pub(crate) bytes_moved: u64,
    /// `Σ k_n`: the fraction of the target load the workers can carry.
    pub(crate) capacity: f64,
    /// Nodes left over their limit because no core was left to add.
    pub(crate) overloaded: Vec<NodeId>,
}

/// Nodes using all their cores look this much faster when ordering, so
/// that noise between equal nodes does not move work around.
const STICKY: f64 = 0.8;

fn order(nodes: &[NodeCapacity]) -> Vec<NodeCapacity> {
    let mut v = nodes.to_vec();
    // The more of its cores a node already uses, the stickier: a
    // scale-down keeps the busiest nodes and empties the least busy.
    let key = |n: &NodeCapacity| {
        let used = f64::from(n.current_workers.min(n.cores)) / f64::from(n.cores.max(1));
        n.demand * (1.0 - (1.0 - STICKY) * used)
    };
    crate::cold_sort::sort_by(&mut v, |a, b| {
        key(a).total_cmp(&key(b)).then(a.node.cmp(&b.node))
    });
    v
}

/// The fewest workers, on the nodes where a worker carries most, whose
/// capacity reaches `need`.
pub(crate) fn choose_workers(nodes: &[NodeCapacity], need: f64) -> BTreeMap<NodeId, u16> {
    let mut workers: BTreeMap<NodeId, u16> = nodes.iter().map(|n| (n.node, 0)).collect();
    let mut capacity = 0.0;
    for n in order(nodes) {
        while capacity < need && workers[&n.node] < n.cores {
            *workers.get_mut(&n.node).expect("every node is in the map") += 1;
            capacity += 1.0 / n.demand;
        }
    }
    workers
}

fn capacity_of(nodes: &[NodeCapacity], workers: &BTreeMap<NodeId, u16>) -> f64 {
    nodes
        .iter()
        .map(|n| f64::from(workers.get(&n.node).copied().unwrap_or(0)) / n.demand)
        .sum()
}

/// The load share of every bin (uniform when nothing was measured).
pub(crate) fn bin_shares(bins: &[BinSample]) -> Vec<f64> {
    let total: f64 = bins.iter().map(|b| b.records_per_s.max(0.0)).sum();
    if total > 0.0 {
        bins.iter()
            .map(|b| b.records_per_s.max(0.0) / total)
            .collect()
    } else {
        vec![1.0 / bins.len().max(1) as f64; bins.len()]
    }
}

/// Places bins for fixed workers; returns the owners and the nodes left
/// over their limit.
fn place(
    nodes: &[NodeCapacity],
    workers: &BTreeMap<NodeId, u16>,
    shares: &[f64],
    current: &[NodeId],
    need: f64,
) -> (Vec<NodeId>, Vec<NodeId>) {
    let capacity = capacity_of(nodes, workers);
    let scale = need.min(capacity).max(f64::MIN_POSITIVE);
    let limit: BTreeMap<NodeId, f64> = nodes
        .iter()
        .filter(|n| workers.get(&n.node).copied().unwrap_or(0) > 0)
        .map(|n| (n.node, f64::from(workers[&n.node]) / n.demand / scale))
        .collect();
    const EPS: f64 = 1e-9;

    let mut owner: Vec<Option<NodeId>> = (0..shares.len())
        .map(|b| current.get(b).copied().filter(|o| limit.contains_key(o)))
        .collect();
    let mut load: BTreeMap<NodeId, f64> = limit.keys().map(|&n| (n, 0.0)).collect();
    let mut held: BTreeMap<NodeId, Vec<usize>> = limit.keys().map(|&n| (n, Vec::new())).collect();
    for (b, o) in owner.iter().enumerate() {
        if let Some(o) = o {
            *load.get_mut(o).expect("owner has a limit") += shares[b];
            held.get_mut(o).expect("owner has a limit").push(b);
        }
    }
    // Shed from nodes over their limit.
    for (&n, bins) in held.iter_mut() {
        while load[&n] > limit[&n] + EPS && !bins.is_empty() {
            let excess = load[&n] - limit[&n];
            let pick = bins
                .iter()
                .enumerate()
                .filter(|&(_, &b)| shares[b] >= excess)
                .min_by(|a, b| shares[*a.1].total_cmp(&shares[*b.1]).then(a.1.cmp(b.1)))
                .or_else(|| {
                    bins.iter()
                        .enumerate()
                        .max_by(|a, b| shares[*a.1].total_cmp(&shares[*b.1]).then(b.1.cmp(a.1)))
                })
                .map(|(i, _)| i)
                .expect("bins is not empty");
            let b = bins.swap_remove(pick);
            *load.get_mut(&n).expect("node has a load") -= shares[b];
            owner[b] = None;
        }
    }
    // Place the displaced, largest first.
    let mut homeless: Vec<usize> = (0..shares.len()).filter(|&b| owner[b].is_none()).collect();
    crate::cold_sort::sort_by(&mut homeless, |&a, &b| {
        shares[b].total_cmp(&shares[a]).then(a.cmp(&b))
    });
    for b in homeless {
        let fits = limit
            .iter()
            .filter(|&(n, &l)| load[n] + shares[b] <= l + EPS)
            .max_by(|a, b| {
                let ra = (a.1 - load[a.0]) / a.1;
                let rb = (b.1 - load[b.0]) / b.1;
                ra.total_cmp(&rb).then(b.0.cmp(a.0))
            })
            .map(|(&n, _)| n);
        let n = fits.or_else(|| {
            limit
                .iter()
                .max_by(|a, b| {
                    (a.1 - load[a.0])
                        .total_cmp(&(b.1 - load[b.0]))
                        .then(b.0.cmp(a.0))
                })
                .map(|(&n, _)| n)
        });
        if let Some(n) = n {
            *load.get_mut(&n).expect("node has a load") += shares[b];
            owner[b] = Some(n);
        }
    }
    let overloaded = limit
        .iter()
        .filter(|&(n, &l)| load[n] > l + EPS)
        .map(|(&n, _)| n)
        .collect();
    let owner = owner
        .into_iter()
        .map(|o| o.unwrap_or(NodeId::MAX))
        .collect();
    (owner, overloaded)
}

/// Workers and bin owners for a load of `need` (`1 + scaling factor`, in
/// units of the whole target load), starting from `current` owners.
pub(crate) fn plan(
    nodes: &[NodeCapacity],
    bins: &[BinSample],
    current: &[NodeId],
    need: f64,
) -> Placement {
    let shares = bin_shares(bins);
    let mut workers = choose_workers(nodes, need);
    let ordered = order(nodes);
    let mut rounds = nodes.iter().map(|n| usize::from(n.cores)).sum::<usize>() + 1;
    let (owner, overloaded) = loop {
        let (owner, overloaded) = place(nodes, &workers, &shares, current, need);
        rounds -= 1;
        if overloaded.is_empty() || rounds == 0 {
            break (owner, overloaded);
        }
        // A worker where the overload is, else where one carries most.
        let spare = |n: &NodeCapacity| workers[&n.node] < n.cores;
        let grow = ordered
            .iter()
            .find(|n| overloaded.contains(&n.node) && spare(n))
            .or_else(|| ordered.iter().find(|n| spare(n)));
        match grow {
            Some(n) => *workers.get_mut(&n.node).expect("every node is in the map") += 1,
            None => break (owner, overloaded),
        }
    };
    let mut moves = 0;
    let mut bytes_moved = 0;
    for (b, o) in owner.iter().enumerate() {
        if current.get(b) != Some(o) {
            moves += 1;
            bytes_moved += bins.get(b).map_or(0, |s| s.state_bytes);
        }
    }
    Placement {
        capacity: capacity_of(nodes, &workers),
        workers,
        owner,
        moves,
        bytes_moved,
        overloaded,
    }
}

/// Bin owners for workers chosen elsewhere, each node's share in
/// proportion to `w_n / D_n`.
pub(crate) fn place_for_workers(
    nodes: &[NodeCapacity],
    workers: &BTreeMap<NodeId, u16>,
    bins: &[BinSample],
    current: &[NodeId],
) -> Placement {
    let shares = bin_shares(bins);
    let capacity = capacity_of(nodes, workers);
    let (owner, overloaded) = place(nodes, workers, &shares, current, capacity);
    let mut moves = 0;
    let mut bytes_moved = 0;
    for (b, o) in owner.iter().enumerate() {
        if current.get(b) != Some(o) {
            moves += 1;
            bytes_moved += bins.get(b).map_or(0, |s| s.state_bytes);
        }
    }
    Placement {
        workers: workers.clone(),
        owner,
        moves,
        bytes_moved,
        capacity,
        overloaded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(node: NodeId, cores: u16, demand: f64, current: u16) -> NodeCapacity {
        NodeCapacity {
            node,
            cores,
            demand,
            current_workers: current,
        }
    }

    fn uniform(n: usize) -> Vec<BinSample> {
        vec![
            BinSample {
                records_per_s: 1.0,
                state_bytes: 10
            };
            n
        ]
    }

    #[test]
    fn fastest_workers_first_and_never_more_than_cores() {
        // Node 2 is four times slower (needs 8 workers for the load alone).
        let nodes = [node(1, 2, 2.0, 0), node(2, 4, 8.0, 0), node(3, 2, 2.0, 0)];
        let w = choose_workers(&nodes, 1.2);
        assert_eq!(w[&1] + w[&3], 3, "{w:?}");
        assert_eq!(w[&2], 0);
        // More than the fast nodes can give: the slow one fills the rest.
        let w = choose_workers(&nodes, 2.2);
        assert_eq!((w[&1], w[&2], w[&3]), (2, 2, 2));
        // Cannot reach the need: every core is used.
        let w = choose_workers(&nodes, 100.0);
        assert_eq!((w[&1], w[&2], w[&3]), (2, 4, 2));
    }

    #[test]
    fn shares_follow_capacity_from_scratch() {
        // A laptop (demand 1 per worker-load) and a Pi four times slower.
        let nodes = [node(1, 1, 1.0, 0), node(2, 4, 4.0, 0)];
        let bins = uniform(64);
        let p = plan(&nodes, &bins, &[], 2.0);
        assert_eq!(p.workers, [(1, 1), (2, 4)].into());
        let on_pi = p.owner.iter().filter(|&&o| o == 2).count();
        assert_eq!(on_pi, 32, "equal capacity, equal share");
        assert!(p.overloaded.is_empty());
        assert_eq!(p.moves, 64);
    }

    #[test]
    fn same_input_same_plan_and_no_moves_when_capacity_is_met() {
        let nodes = [node(1, 4, 4.0, 4), node(2, 4, 4.0, 0)];
        let bins = uniform(32);
        let current = vec![1; 32];
        let p = plan(&nodes, &bins, &current, 1.0);
        assert_eq!(p, plan(&nodes, &bins, &current, 1.0));
        assert_eq!(p.moves, 0);
        assert_eq!(p.workers, [(1, 4), (2, 0)].into());
    }

    #[test]
    fn scale_out_moves_only_the_excess() {
        let nodes = [node(1, 4, 4.0, 4), node(2, 4, 4.0, 0)];
        let bins = uniform(32);
        let current = vec![1; 32];
        // Needs 1.4 loads: 6 workers; node 1 keeps at most 1/1.4 of the
        // load: 22 of 32 bins.
        let p = plan(&nodes, &bins, &current, 1.4);
        assert_eq!(p.workers, [(1, 4), (2, 2)].into());
        assert_eq!(p.moves, 10, "32 - 22 bins move, no more");
        assert_eq!(p.bytes_moved, 100);
        // At exactly 1.5, 32 bins cannot split 2:1 within the limits: a
        // worker more rather than a node over its capacity.
        let p = plan(&nodes, &bins, &current, 1.5);
        assert_eq!(p.workers, [(1, 4), (2, 3)].into());
        assert!(p.overloaded.is_empty());
    }

    #[test]
    fn a_hot_bin_moves_alone_and_gets_a_worker_where_it_fits() {
        let nodes = [node(1, 3, 4.0, 2), node(2, 3, 4.0, 2)];
        let mut bins = uniform(8);
        bins[3].records_per_s = 12.0; // 12 of 19: 63 % of the load
        let current = vec![1, 1, 1, 1, 2, 2, 2, 2];
        let p = plan(&nodes, &bins, &current, 1.0);
        assert!(p.overloaded.is_empty(), "{p:?}");
        // 3 + 1 workers carry the load, but not with the hot bin where it
        // leaves the small node over its room: one more worker there.
        assert_eq!(p.workers, [(1, 3), (2, 2)].into());
        let hot = p.owner[3];
        let hot_load: f64 = (0..8)
            .filter(|&b| p.owner[b] == hot)
            .map(|b| bins[b].records_per_s)
            .sum::<f64>()
            / 19.0;
        let k = f64::from(p.workers[&hot]) / 4.0 / p.capacity.min(1.0);
        assert!(hot_load <= k + 1e-9, "{hot_load} > {k}");
    }

    #[test]
    fn bins_of_a_node_without_workers_move() {
        let nodes = [node(1, 4, 1.0, 1), node(2, 4, 1.0, 1)];
        let bins = uniform(10);
        let current = vec![1, 2, 1, 2, 1, 2, 1, 2, 1, 2];
        let p = plan(&nodes, &bins, &current, 1.0);
        assert_eq!(p.workers.values().sum::<u16>(), 1);
        let keep = p.owner[0];
        assert!(p.owner.iter().all(|&o| o == keep));
        assert_eq!(p.moves, 5);
    }
}
