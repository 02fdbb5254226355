//! Assignments of key bins to global workers, and plans that move a run
//! from one assignment to another in steps.
//!
//! Pure functions: every node computes the same plan from the same inputs,
//! so a plan needs no agreement beyond the inputs.

use std::time::Duration;

/// `(epoch, bin -> global worker)`. Every keyed operator of a run shares
/// one assignment; the epoch grows by one with every step applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Assignment {
    pub(crate) epoch: u64,
    pub(crate) owners: Vec<u32>,
}

impl Assignment {
    pub(crate) fn new(epoch: u64, owners: Vec<u32>) -> Assignment {
        Assignment { epoch, owners }
    }

    /// Applies `step`: its moves' bins get their new owners and the epoch
    /// becomes the step's.
    pub(crate) fn apply(&mut self, step: &Step) {
        for m in &step.moves {
            debug_assert_eq!(self.owners[m.bin as usize], m.from, "move {m:?}");
            self.owners[m.bin as usize] = m.to;
        }
        self.epoch = step.epoch;
    }
}

/// Bin `bin` moves from worker `from` to worker `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Move {
    pub(crate) bin: u32,
    pub(crate) from: u32,
    pub(crate) to: u32,
}

/// The moves that happen together; applying them makes the assignment's
/// epoch `epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) epoch: u64,
    pub(crate) moves: Vec<Move>,
}

/// How a migration is cut into steps (`[migration] strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// Every move in one step: the baseline, with the longest pause.
    AllAtOnce,
    /// One bin per step, the next step `gap` after the previous completes.
    Fluid { gap: Duration },
    /// Each step a matching (no two moves share a source or a destination
    /// worker), as in Megaphone, of at most `max_bins_per_step` moves.
    Batched { max_bins_per_step: Option<u32> },
}

impl Strategy {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Strategy::AllAtOnce => "all_at_once",
            Strategy::Fluid { .. } => "fluid",
            Strategy::Batched { .. } => "batched",
        }
    }
}

/// `bins` bins spread evenly over `workers` workers, in contiguous runs
/// (bins are hash prefixes, so a run of bins is a hash range).
pub(crate) fn even(bins: u32, workers: u32) -> Vec<u32> {
    assert!(workers > 0, "an assignment needs a worker");
    (0..bins as u64)
        .map(|b| (b * workers as u64 / bins as u64) as u32)
        .collect()
}

/// The moves from `current` to `target`, by bin.
pub(crate) fn moves(current: &[u32], target: &[u32]) -> Vec<Move> {
    assert_eq!(current.len(), target.len(), "assignments of different bins");
    current
        .iter()
        .zip(target)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(bin, (&from, &to))| Move {
            bin: bin as u32,
            from,
            to,
        })
        .collect()
}

/// The steps that take `current` to `target`, with epochs `current.epoch +
/// 1`, `+ 2`, ...; empty when they are equal.
pub(crate) fn plan(current: &Assignment, target: &[u32], strategy: Strategy) -> Vec<Step> {
    let all = moves(&current.owners, target);
    let groups: Vec<Vec<Move>> = if all.is_empty() {
        Vec::new()
    } else {
        match strategy {
            Strategy::AllAtOnce => vec![all],
            Strategy::Fluid { .. } => all.into_iter().map(|m| vec![m]).collect(),
            Strategy::Batched { max_bins_per_step } => {
                batches(all, max_bins_per_step.unwrap_or(u32::MAX).max(1) as usize)
            }
        }
    };
    groups
        .into_iter()
        .enumerate()
        .map(|(i, moves)| Step {
            epoch: current.epoch + 1 + i as u64,
            moves,
        })
        .collect()
}

/// Cuts `moves` into matchings of at most `cap` moves: each round takes a
/// maximum matching of the bipartite (source worker, destination worker)
/// multigraph of the remaining moves. Busier workers are matched first,
/// so that the busiest worker (which bounds the number of rounds from
/// below) is in every round when possible.
///
/// A round looks at the (source, destination) pairs, not at the moves:
/// rounds times moves was 4.7 ms for 2048 one-move rounds (two workers,
/// 4096 bins), on the thread of the rebalance and so, on a node whose
/// cores were busy, as a stall of a worker at the start of every move.
fn batches(left: Vec<Move>, cap: usize) -> Vec<Vec<Move>> {
    let workers = left.iter().map(|m| m.from.max(m.to)).max().unwrap_or(0) as usize + 1;
    // Each pair's moves, lowest bin first.
    let mut pairs: std::collections::BTreeMap<(u32, u32), std::collections::VecDeque<Move>> =
        std::collections::BTreeMap::new();
    let mut remaining = left.len();
    for m in left {
        pairs.entry((m.from, m.to)).or_default().push_back(m);
    }
    for queue in pairs.values_mut() {
        queue.make_contiguous().sort_unstable_by_key(|m| m.bin);
    }
    let mut out = Vec::new();
    while remaining > 0 {
        // Remaining degree of each worker as a source and as a destination.
        let mut out_deg = vec![0usize; workers];
        let mut in_deg = vec![0usize; workers];
        // adj[s] = destinations s still sends to (once each).
        let mut adj: Vec<Vec<u32>> = vec![Vec::new(); workers];
        for (&(from, to), queue) in &pairs {
            out_deg[from as usize] += queue.len();
            in_deg[to as usize] += queue.len();
            adj[from as usize].push(to);
        }
        let matched_to = matching(&out_deg, &in_deg, &mut adj, cap);
        // One move per matched pair: the lowest bin of that pair.
        let mut step = Vec::new();
        for (d, s) in matched_to.iter().enumerate() {
            let Some(s) = *s else { continue };
            let pair = (s, d as u32);
            let queue = pairs.get_mut(&pair).expect("a matched pair has a move");
            step.push(queue.pop_front().expect("a pair with no move is removed"));
            if queue.is_empty() {
                pairs.remove(&pair);
            }
        }
        remaining -= step.len();
        crate::cold_sort::sort_by_key(&mut step, |m| m.bin);
        out.push(step);
    }
    out
}

/// A maximum matching of at most `cap` pairs of the bipartite graph
/// `adj[source] = destinations`, busier workers (by remaining `out_deg`
/// and `in_deg`) tried first: `matched[d]` is the source matched to
/// destination `d`.
fn matching(
    out_deg: &[usize],
    in_deg: &[usize],
    adj: &mut [Vec<u32>],
    cap: usize,
) -> Vec<Option<u32>> {
    let workers = out_deg.len();
    for a in adj.iter_mut() {
        crate::cold_sort::sort_by_key(a, |&d| (std::cmp::Reverse(in_deg[d as usize]), d));
    }
    let mut sources: Vec<u32> = (0..workers as u32)
        .filter(|&s| out_deg[s as usize] > 0)
        .collect();
    crate::cold_sort::sort_by_key(&mut sources, |&s| {
        (std::cmp::Reverse(out_deg[s as usize]), s)
    });
    let mut matched_to: Vec<Option<u32>> = vec![None; workers];
    let mut size = 0;
    for &s in &sources {
        if size == cap {
            break;
        }
        let mut seen = vec![false; workers];
        if augment(s, adj, &mut matched_to, &mut seen) {
            size += 1;
        }
    }
    matched_to
}

/// Kuhn's augmenting path from source `s`.
fn augment(s: u32, adj: &[Vec<u32>], matched_to: &mut [Option<u32>], seen: &mut [bool]) -> bool {
    for &d in &adj[s as usize] {
        if std::mem::replace(&mut seen[d as usize], true) {
            continue;
        }
        let free = match matched_to[d as usize] {
            None => true,
            Some(other) => augment(other, adj, matched_to, seen),
        };
        if free {
            matched_to[d as usize] = Some(s);
            return true;
        }
    }
    false
}

/// The assignment after workers with `dead[w]` are gone for good: their
/// bins, in ascending order, each go to the survivor holding the fewest
/// bins at that point (lowest index on a tie). Deterministic, so every
/// survivor computes the same one; the epoch grows by one. The engine
/// uses it for a member that drains (SIGTERM) and the simulator for
/// crashed workers.
pub(crate) fn fallback(current: &Assignment, dead: &[bool]) -> Assignment {
    let workers = dead.len();
    assert!(dead.iter().any(|d| !d), "no surviving worker");
    let mut load = vec![0usize; workers];
    for &w in &current.owners {
        if !dead[w as usize] {
            load[w as usize] += 1;
        }
    }
    let mut owners = current.owners.clone();
    for o in owners.iter_mut() {
        if dead[*o as usize] {
            let w = (0..workers)
                .filter(|&w| !dead[w])
                .min_by_key(|&w| (load[w], w))
                .expect("a survivor");
            load[w] += 1;
            *o = w as u32;
        }
    }
    Assignment::new(current.epoch + 1, owners)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(current: &Assignment, steps: &[Step]) -> Assignment {
        let mut a = current.clone();
        for s in steps {
            a.apply(s);
        }
        a
    }

    fn strategies() -> [Strategy; 4] {
        [
            Strategy::AllAtOnce,
            Strategy::Fluid {
                gap: Duration::ZERO,
            },
            Strategy::Batched {
                max_bins_per_step: None,
            },
            Strategy::Batched {
                max_bins_per_step: Some(2),
            },
        ]
    }

    fn assert_matching(step: &Step) {
        let mut from = std::collections::HashSet::new();
        let mut to = std::collections::HashSet::new();
        for m in &step.moves {
            assert!(from.insert(m.from), "source {} twice in {step:?}", m.from);
            assert!(to.insert(m.to), "destination {} twice in {step:?}", m.to);
        }
    }

    #[test]
    fn even_spreads_in_runs() {
        assert_eq!(even(8, 3), vec![0, 0, 0, 1, 1, 1, 2, 2]);
        assert_eq!(even(4, 1), vec![0; 4]);
        let a = even(4096, 7);
        for w in 0..7 {
            let n = a.iter().filter(|&&o| o == w).count();
            assert!((585..=586).contains(&n), "worker {w}: {n}");
        }
    }

    #[test]
    fn plans_reach_the_target_with_consecutive_epochs() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..200 {
            let workers = 1 + (next() % 6) as u32;
            let bins = 1 << (next() % 7);
            let current = Assignment::new(
                next() % 10,
                (0..bins)
                    .map(|_| (next() % workers as u64) as u32)
                    .collect(),
            );
            let target: Vec<u32> = (0..bins)
                .map(|_| (next() % workers as u64) as u32)
                .collect();
            let wanted = moves(&current.owners, &target).len();
            for strategy in strategies() {
                let steps = plan(&current, &target, strategy);
                let end = run(&current, &steps);
                assert_eq!(end.owners, target, "{strategy:?}");
                assert_eq!(end.epoch, current.epoch + steps.len() as u64);
                for (i, s) in steps.iter().enumerate() {
                    assert_eq!(s.epoch, current.epoch + 1 + i as u64);
                    assert!(!s.moves.is_empty());
                }
                let moved: usize = steps.iter().map(|s| s.moves.len()).sum();
                assert_eq!(moved, wanted, "each bin moves once, {strategy:?}");
                assert!(["all_at_once", "fluid", "batched"].contains(&strategy.name()));
                match strategy {
                    Strategy::AllAtOnce => assert!(steps.len() <= 1),
                    Strategy::Fluid { .. } => assert_eq!(steps.len(), wanted),
                    Strategy::Batched { max_bins_per_step } => {
                        for s in &steps {
                            assert_matching(s);
                            if let Some(cap) = max_bins_per_step {
                                assert!(s.moves.len() <= cap as usize);
                            }
                        }
                    }
                }
            }
        }
    }

    /// The fewest steps a matching plan can take is the largest number of
    /// moves sharing one worker (König); batched reaches it here.
    #[test]
    fn batched_takes_the_fewest_steps_in_simple_cases() {
        let batched = Strategy::Batched {
            max_bins_per_step: None,
        };
        // Every bin of worker 0 to workers 1..4: worker 0 sends one per step.
        let current = Assignment::new(1, vec![0; 8]);
        let target = vec![0, 1, 2, 3, 1, 2, 3, 0];
        let steps = plan(&current, &target, batched);
        assert_eq!(steps.len(), 6);
        // Disjoint pairs move in parallel: 0->1, 2->3 and 4->5, twice each.
        let current = Assignment::new(1, vec![0, 0, 2, 2, 4, 4]);
        let target = vec![1, 1, 3, 3, 5, 5];
        let steps = plan(&current, &target, batched);
        assert_eq!(steps.len(), 2);
        assert!(steps.iter().all(|s| s.moves.len() == 3));
        // A rotation 0->1->2->0 of two bins each: two steps of three.
        let current = Assignment::new(1, vec![0, 0, 1, 1, 2, 2]);
        let target = vec![1, 1, 2, 2, 0, 0];
        assert_eq!(plan(&current, &target, batched).len(), 2);
        // From 2 workers to 4 (a join): worker 1 sends 8 bins (4 to each
        // newcomer), worker 0 sends 4 to worker 1 alongside.
        let current = Assignment::new(1, even(16, 2));
        let steps = plan(&current, &even(16, 4), batched);
        assert_eq!(steps.len(), 8);
        assert_eq!(steps.iter().filter(|s| s.moves.len() == 2).count(), 4);
        // The cap cuts the matching.
        let capped = Strategy::Batched {
            max_bins_per_step: Some(1),
        };
        let current = Assignment::new(1, vec![0, 0, 2, 2]);
        assert_eq!(plan(&current, &[1, 1, 3, 3], capped).len(), 4);
    }

    /// `batches` as it was, one pass over every move per round (the
    /// matching itself is shared): the per-pair version must cut the same
    /// steps.
    fn batches_by_moves(mut left: Vec<Move>, cap: usize) -> Vec<Vec<Move>> {
        let workers = left.iter().map(|m| m.from.max(m.to)).max().unwrap_or(0) as usize + 1;
        let mut out = Vec::new();
        while !left.is_empty() {
            let mut out_deg = vec![0usize; workers];
            let mut in_deg = vec![0usize; workers];
            let mut adj: Vec<Vec<u32>> = vec![Vec::new(); workers];
            for m in &left {
                out_deg[m.from as usize] += 1;
                in_deg[m.to as usize] += 1;
                if !adj[m.from as usize].contains(&m.to) {
                    adj[m.from as usize].push(m.to);
                }
            }
            let matched_to = matching(&out_deg, &in_deg, &mut adj, cap);
            let mut step = Vec::new();
            for (d, s) in matched_to.iter().enumerate() {
                let Some(s) = *s else { continue };
                let i = left
                    .iter()
                    .position(|m| m.from == s && m.to == d as u32)
                    .unwrap();
                step.push(left.remove(i));
            }
            step.sort_by_key(|m| m.bin);
            out.push(step);
        }
        out
    }

    /// On random plans too, batched takes exactly as many steps as the
    /// busiest worker has moves (the lower bound for matchings), and cuts
    /// the steps the pass over every move cut, capped or not.
    #[test]
    fn batched_reaches_the_lower_bound_on_random_plans() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..2000 {
            let workers = 2 + (next() % 7) as u32;
            let bins = 1 << (2 + next() % 7);
            let mut pick = || {
                (0..bins)
                    .map(|_| (next() % workers as u64) as u32)
                    .collect()
            };
            let current = Assignment::new(1, pick());
            let target: Vec<u32> = pick();
            let mut degree = vec![0usize; 2 * workers as usize];
            for m in moves(&current.owners, &target) {
                degree[m.from as usize] += 1;
                degree[(workers + m.to) as usize] += 1;
            }
            let bound = degree.iter().copied().max().unwrap_or(0);
            let batched = Strategy::Batched {
                max_bins_per_step: None,
            };
            let steps = plan(&current, &target, batched);
            assert_eq!(steps.len(), bound, "{current:?} -> {target:?}");
            let all = moves(&current.owners, &target);
            for cap in [usize::MAX, 1 + (next() % 4) as usize] {
                assert_eq!(
                    batches(all.clone(), cap),
                    batches_by_moves(all.clone(), cap),
                    "{current:?} -> {target:?}, cap {cap}"
                );
            }
        }
    }

    #[test]
    fn fallback_spreads_the_dead_workers_bins() {
        let current = Assignment::new(4, even(12, 3));
        let a = fallback(&current, &[false, true, false]);
        assert_eq!(a.epoch, 5);
        assert_eq!(a.owners, vec![0, 0, 0, 0, 0, 2, 0, 2, 2, 2, 2, 2]);
        assert_eq!(a, fallback(&current, &[false, true, false]));
    }
}
