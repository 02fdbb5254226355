//! A decision mapped onto a running distributed run: the controller says
//! which member owns each bin and how many workers each member uses; live
//! migration needs the global worker of every bin, over the worker slots
//! fixed at start. Within a member its bins spread evenly over the workers
//! it uses, and a bin stays on its worker whenever that worker is kept and
//! has room (fewest moves: the controller's placement already kept bins on
//! their member where it could).

use std::collections::BTreeMap;
use std::ops::Range;

/// The global worker of every bin: `owner` is the target member of each
/// bin, `workers` the workers each member uses (clamped to its slots, at
/// least 1 for a member with bins), `members` each member's global worker
/// slots, `current` the global worker of each bin now.
pub(crate) fn target_workers(
    owner: &[String],
    workers: &BTreeMap<String, u16>,
    members: &[(String, Range<usize>)],
    current: &[u32],
) -> Result<Vec<u32>, String> {
    if owner.len() != current.len() {
        return Err(format!(
            "the decision places {} bins, the run has {}",
            owner.len(),
            current.len()
        ));
    }
    let mut target = vec![u32::MAX; owner.len()];
    for (name, slots) in members {
        let bins: Vec<usize> = (0..owner.len()).filter(|&b| owner[b] == *name).collect();
        if bins.is_empty() {
            continue;
        }
        let slots: Vec<u32> = slots.clone().map(|w| w as u32).collect();
        if slots.is_empty() {
            return Err(format!("member {name} has no workers for its bins"));
        }
        let want = usize::from(workers.get(name).copied().unwrap_or(1)).clamp(1, slots.len());
        // Keep the workers already holding most of these bins.
        let held = |w: u32| bins.iter().filter(|&&b| current[b] == w).count();
        let mut chosen = slots.clone();
        crate::cold_sort::sort_by_key(&mut chosen, |&w| (std::cmp::Reverse(held(w)), w));
        chosen.truncate(want);
        // Even quotas, the larger ones to the workers holding more.
        let mut room: BTreeMap<u32, usize> = chosen
            .iter()
            .enumerate()
            .map(|(i, &w)| (w, bins.len() / want + usize::from(i < bins.len() % want)))
            .collect();
        let mut left = Vec::new();
        for &b in &bins {
            match room.get_mut(&current[b]) {
                Some(r) if *r > 0 => {
                    *r -= 1;
                    target[b] = current[b];
                }
                _ => left.push(b),
            }
        }
        for b in left {
            let (&w, r) = room
                .iter_mut()
                .max_by_key(|(w, r)| (**r, std::cmp::Reverse(**w)))
                .expect("at least one worker is chosen");
            *r -= 1;
            target[b] = w;
        }
    }
    if let Some(b) = target.iter().position(|&w| w == u32::MAX) {
        return Err(format!(
            "bin {b} goes to {}, which is not a member of the run",
            owner[b]
        ));
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members() -> Vec<(String, Range<usize>)> {
        vec![("a".into(), 0..2), ("b".into(), 2..4), ("c".into(), 4..6)]
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn consolidating_keeps_what_stays_and_spreads_within_a_member() {
        // 12 bins evenly over 6 workers; everything goes to `a` with 2
        // workers: a's 4 bins stay put, the 8 others split 4/4.
        let current: Vec<u32> = (0..12).map(|b| b / 2).collect();
        let owner = names(&["a"; 12]);
        let workers = [("a".to_string(), 2)].into();
        let t = target_workers(&owner, &workers, &members(), &current).unwrap();
        assert_eq!(&t[..4], &[0, 0, 1, 1], "bins already on a stay");
        assert_eq!(t.iter().filter(|&&w| w == 0).count(), 6);
        assert_eq!(t.iter().filter(|&&w| w == 1).count(), 6);
        // One worker: everything on the one holding most.
        let workers = [("a".to_string(), 1)].into();
        let t = target_workers(&owner, &workers, &members(), &current).unwrap();
        assert!(t.iter().all(|&w| w == 0), "{t:?}");
    }

    #[test]
    fn spreading_moves_only_the_bins_that_change_member() {
        let current = vec![0u32; 12];
        let mut owner = names(&["a"; 12]);
        for b in [1, 4, 7, 10] {
            owner[b] = "b".into();
        }
        for b in [2, 5, 8, 11] {
            owner[b] = "c".into();
        }
        let workers = [("a".into(), 1), ("b".into(), 1), ("c".into(), 5)].into();
        let t = target_workers(&owner, &workers, &members(), &current).unwrap();
        let moved = (0..12).filter(|&b| t[b] != current[b]).count();
        assert_eq!(moved, 8);
        assert!([1, 4, 7, 10].iter().all(|&b| t[b] == 2), "{t:?}");
        // c uses its 2 slots (5 clamped), 2 bins each.
        assert_eq!([2, 5, 8, 11].map(|b| t[b]), [4, 5, 4, 5]);
        assert_eq!(
            target_workers(&names(&["x"; 12]), &workers, &members(), &current).unwrap_err(),
            "bin 0 goes to x, which is not a member of the run"
        );
    }
}
