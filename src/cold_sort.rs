//! A stable sort for the control path that shares one copy of the sort
//! routine.
//!
//! The standard library's `sort_by` is generic over the element type and
//! the comparator, so each call site with its own closure links a separate
//! copy of the whole driftsort (about 6 KB at `opt-level = "s"`; 57 copies
//! made 344 KiB of the binary). Code that sorts a few rows for a report,
//! a plan or a membership table does not need that speed, and the edge
//! daemon has a size budget (README, "Footprint"). Here only the order of
//! indices is sorted, through one comparator object, and the slice is then
//! permuted in place: one driftsort in the binary for all callers.
//!
//! The data path keeps the standard sorts.

use std::cmp::Ordering;

/// Sorts `v` stably by `cmp`, like `slice::sort_by`.
pub(crate) fn sort_by<T>(v: &mut [T], cmp: impl Fn(&T, &T) -> Ordering) {
    let order = sorted_indices(v.len(), &|a, b| cmp(&v[a], &v[b]));
    permute(v, order);
}

/// Sorts `v` stably by the key `f` returns, like `slice::sort_by_key`.
pub(crate) fn sort_by_key<T, K: Ord>(v: &mut [T], f: impl Fn(&T) -> K) {
    sort_by(v, |a, b| f(a).cmp(&f(b)));
}

/// Sorts `v` stably, like `slice::sort`.
pub(crate) fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, T::cmp);
}

/// The indices `0..n` in the order `cmp` gives them, equal ones in their
/// original order. Not generic: this is the one copy of the sort.
#[inline(never)]
fn sorted_indices(n: usize, cmp: &dyn Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| cmp(a, b));
    order
}

/// Rearranges `v` so that position `i` holds what was at `order[i]`,
/// following each cycle of the permutation with swaps.
fn permute<T>(v: &mut [T], mut order: Vec<usize>) {
    const DONE: usize = usize::MAX;
    for start in 0..v.len() {
        if order[start] == DONE {
            continue;
        }
        // Each swap puts one position of the cycle right; the element
        // that was at `start` rides along to the last position, which
        // takes it when the cycle closes.
        let mut at = start;
        loop {
            let from = order[at];
            order[at] = DONE;
            if from == start {
                break;
            }
            v.swap(at, from);
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, to compare with the standard sort
    /// on many shapes without a dependency.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn equals_the_standard_stable_sort() {
        let mut seed = 0x9E37_79B9_7F4A_7C15;
        for len in 0..200 {
            // Few distinct keys, so many ties: stability is checked by the
            // second field, which records the original position.
            let keys = 1 + xorshift(&mut seed) % 8;
            let v: Vec<(u64, usize)> = (0..len).map(|i| (xorshift(&mut seed) % keys, i)).collect();
            let mut expected = v.clone();
            expected.sort_by_key(|e| e.0);
            let mut got = v.clone();
            sort_by_key(&mut got, |e| e.0);
            assert_eq!(got, expected, "len {len}");
            let mut reversed = v;
            sort_by(&mut reversed, |a, b| b.0.cmp(&a.0));
            expected.sort_by_key(|e| std::cmp::Reverse(e.0));
            assert_eq!(reversed, expected, "len {len}, descending");
        }
    }

    #[test]
    fn moves_owned_values_without_losing_or_duplicating_any() {
        let mut v: Vec<String> = ["pear", "apple", "fig", "apple", "kiwi", "banana"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        sort(&mut v);
        assert_eq!(v, ["apple", "apple", "banana", "fig", "kiwi", "pear"]);
    }
}
