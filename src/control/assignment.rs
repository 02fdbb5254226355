//! Bin assignment: which (node, worker) owns each key bin. Sans-IO: a pure
//! function of the member list, so every node that sees the same members
//! computes the same assignment without talking to the others.

use std::fmt;

/// One member as the assignment sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Node name (unique in a cluster: it is the certificate's name).
    pub(crate) name: String,
    /// Its `[node] workers`.
    pub(crate) workers: u16,
}

/// `(epoch, bin → owner)`: epoch 1 is the assignment a run starts with;
/// later ones (issue 5) will move bins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Assignment {
    pub(crate) epoch: u64,
    /// The members, sorted by name; index = node index.
    pub(crate) members: Vec<Slot>,
    /// Global worker index of each node's first worker: node `n` owns
    /// global workers `first[n]..first[n] + members[n].workers`.
    pub(crate) first: Vec<usize>,
    /// The global worker owning each bin.
    pub(crate) owner: Vec<u16>,
}

impl Assignment {
    /// Every worker of every member.
    pub(crate) fn total_workers(&self) -> usize {
        self.members.iter().map(|m| m.workers as usize).sum()
    }

    /// The node index of `name`.
    pub(crate) fn node_of(&self, name: &str) -> Option<usize> {
        self.members.iter().position(|m| m.name == name)
    }

    /// The node a global worker belongs to.
    pub(crate) fn node_of_worker(&self, worker: usize) -> usize {
        self.first
            .iter()
            .rposition(|&f| f <= worker)
            .expect("worker 0 is on node 0")
    }

    /// Bins owned by each node, in member order.
    pub(crate) fn bins_per_node(&self) -> Vec<usize> {
        let mut n = vec![0; self.members.len()];
        for &w in &self.owner {
            n[self.node_of_worker(w as usize)] += 1;
        }
        n
    }
}

impl fmt::Display for Assignment {
    /// `epoch 1: node-a 86 bins (workers 0-1), node-b ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "epoch {}:", self.epoch)?;
        for (i, (m, bins)) in self.members.iter().zip(self.bins_per_node()).enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            let first = self.first[i];
            write!(
                f,
                "{sep}{} {bins} bins (workers {}-{})",
                m.name,
                first,
                first + m.workers as usize - 1
            )?;
        }
        Ok(())
    }
}

/// Splits `bins` evenly over every worker of `members`: members sorted by
/// name, their workers numbered in that order, and bins given out in
/// contiguous ranges (global worker `g` of `W` gets bins
/// `g*B/W..(g+1)*B/W`), so shares differ by at most one bin. `members` may
/// come in any order; names must be unique and every member needs a
/// worker.
pub(crate) fn even(bins: u32, members: &[Slot]) -> Result<Assignment, String> {
    let mut members = members.to_vec();
    crate::cold_sort::sort_by(&mut members, |a, b| a.name.cmp(&b.name));
    if let Some(w) = members.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(format!("two members are named `{}`", w[0].name));
    }
    if let Some(m) = members.iter().find(|m| m.workers == 0) {
        return Err(format!("member `{}` has no workers", m.name));
    }
    let mut first = Vec::with_capacity(members.len());
    let mut total = 0usize;
    for m in &members {
        first.push(total);
        total += m.workers as usize;
    }
    if total == 0 {
        return Err("no members".into());
    }
    if total > u16::MAX as usize {
        return Err(format!("{total} workers in all; at most {}", u16::MAX));
    }
    if (bins as usize) < total {
        return Err(format!(
            "{bins} bins cannot be spread over {total} workers; raise `[node] bins` on every node"
        ));
    }
    let owner = (0..bins as usize)
        .map(|b| (b * total / bins as usize) as u16)
        .collect();
    Ok(Assignment {
        epoch: 1,
        members,
        first,
        owner,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, workers: u16) -> Slot {
        Slot {
            name: name.into(),
            workers,
        }
    }

    #[test]
    fn even_split_is_order_independent_and_balanced() {
        let a = even(256, &[slot("c", 2), slot("a", 1), slot("b", 3)]).unwrap();
        let b = even(256, &[slot("b", 3), slot("c", 2), slot("a", 1)]).unwrap();
        assert_eq!(a, b, "every node computes the same assignment");
        assert_eq!(
            a.members
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(a.first, [0, 1, 4]);
        assert_eq!(a.total_workers(), 6);
        let mut per_worker = [0usize; 6];
        a.owner.iter().for_each(|&w| per_worker[w as usize] += 1);
        let (lo, hi) = (per_worker.iter().min(), per_worker.iter().max());
        assert!(hi.unwrap() - lo.unwrap() <= 1, "{per_worker:?}");
        // Contiguous ranges, in worker order.
        assert!(a.owner.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(a.bins_per_node(), [43, 128, 85]);
        assert_eq!(a.node_of_worker(0), 0);
        assert_eq!(a.node_of_worker(3), 1);
        assert_eq!(a.node_of_worker(5), 2);
        assert_eq!(a.node_of("c"), Some(2));
        assert_eq!(
            a.to_string(),
            "epoch 1: a 43 bins (workers 0-0), b 128 bins (workers 1-3), c 85 bins (workers 4-5)"
        );
    }

    /// With one member it is the single-node assignment.
    #[test]
    fn one_member_matches_the_local_split() {
        let a = even(64, &[slot("solo", 3)]).unwrap();
        assert_eq!(a.owner, crate::exec::even_assignment(64, 3));
    }

    #[test]
    fn refusals() {
        assert!(
            even(8, &[slot("a", 1), slot("a", 1)])
                .unwrap_err()
                .contains("`a`")
        );
        assert!(even(8, &[slot("a", 0)]).unwrap_err().contains("no workers"));
        assert!(
            even(2, &[slot("a", 2), slot("b", 1)])
                .unwrap_err()
                .contains("bins")
        );
        assert!(even(8, &[]).is_err());
    }
}
