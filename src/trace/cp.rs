//! Critical participation (SnailTrail, Hoffmann et al., NSDI 2018, §3):
//! in a window of length T every path through the PAG from a lane's start
//! point to a lane's end point, along non-waiting edges, is a critical path
//! of length T. An activity `a` of duration `w` lying on `N(a)` of the `N`
//! paths has `CP(a) = w · N(a) / (N · T)`; summed over all activities this
//! is 1. `N(a) = f(src) · b(dst)` where `f` counts the paths from any start
//! to a point (one pass forward in topological order) and `b` the paths
//! from a point to any end (one pass backward): no path is enumerated.
//! Counts grow exponentially with the messages in a window, so they are
//! kept as natural logarithms.
//!
//! A lightly loaded pipeline waits on every lane at once now and then, and
//! then no path crosses the whole window. Rather than saying nothing, the
//! analysis then falls back to the maximal paths of the busy periods: from
//! every point no non-waiting edge enters to every point none leaves, each
//! weighted by its length, `CP(a) = w · N(a) / Σ_e w_e · N(e)`. With a
//! spanning path this is the definition above (`Σ_e w_e · N(e) = N · T`);
//! the report says which one a window used.

use super::event::Kind;
use super::graph::{Pag, PagEdge};

/// `ln(e^a + e^b)`.
#[inline]
fn ln_add(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    hi + (lo - hi).exp().ln_1p()
}

/// Which paths a window's CP is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Paths {
    /// SnailTrail's: from the window's start to its end.
    Spanning,
    /// Maximal paths between waits (no path spans the window).
    Busy,
    /// No edge carries a path (everything waited).
    None,
}

/// The CP of every edge of `pag` (0 for waiting edges), `ln` of the number
/// of paths it is over, and which paths those are.
pub(crate) fn critical_participation(pag: &Pag) -> (Vec<f64>, f64, Paths) {
    let n = pag.nodes;
    // Successors (CSR) along the edges that may carry critical paths: the
    // passes below read these small arrays in order instead of the edges.
    let mut first = vec![0u32; n + 1];
    let mut indeg = vec![0u32; n];
    for e in pag.edges.iter().filter(|e| carries(e)) {
        first[e.from as usize + 1] += 1;
        indeg[e.to as usize] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut fill = first.clone();
    let mut succ = vec![0u32; first[n] as usize];
    for e in pag.edges.iter().filter(|e| carries(e)) {
        succ[fill[e.from as usize] as usize] = e.to;
        fill[e.from as usize] += 1;
    }
    drop(fill);
    let g = Csr {
        first: &first,
        succ: &succ,
    };
    // A point between two waits starts and ends no path of any length:
    // not counting it keeps the count the same however waits are cut.
    let busy_starts: Vec<u32> = (0..n as u32)
        .filter(|&v| indeg[v as usize] == 0 && g.has_out(v))
        .collect();
    let busy_ends: Vec<u32> = (0..n as u32)
        .filter(|&v| !g.has_out(v) && indeg[v as usize] > 0)
        .collect();
    // Kahn's order; a cycle (impossible with a sane clock) is left out.
    // On the way, which points a path from a lane's start reaches: whether
    // a path spans the window is known before any counting.
    let mut reached = vec![false; n];
    for &s in &pag.starts {
        reached[s as usize] = true;
    }
    let mut order: Vec<u32> = Vec::with_capacity(n);
    order.extend((0..n as u32).filter(|&v| indeg[v as usize] == 0));
    let mut k = 0;
    while k < order.len() {
        let v = order[k];
        k += 1;
        let r = reached[v as usize];
        for &to in g.next(v) {
            reached[to as usize] |= r;
            indeg[to as usize] -= 1;
            if indeg[to as usize] == 0 {
                order.push(to);
            }
        }
    }
    if pag.ends.iter().any(|&e| reached[e as usize]) {
        let (cp, _, ln_paths) = count(pag, g, &order, &pag.starts, &pag.ends);
        return (cp, ln_paths, Paths::Spanning);
    }
    let (cp, length, ln_paths) = count(pag, g, &order, &busy_starts, &busy_ends);
    if ln_paths == f64::NEG_INFINITY || length == f64::NEG_INFINITY {
        return (vec![0.0; pag.edges.len()], f64::NEG_INFINITY, Paths::None);
    }
    (cp, ln_paths, Paths::Busy)
}

fn carries(e: &PagEdge) -> bool {
    e.kind != Kind::Waiting
}

#[derive(Clone, Copy)]
struct Csr<'a> {
    first: &'a [u32],
    succ: &'a [u32],
}

impl Csr<'_> {
    #[inline]
    fn next(&self, v: u32) -> &[u32] {
        let v = v as usize;
        &self.succ[self.first[v] as usize..self.first[v + 1] as usize]
    }

    fn has_out(&self, v: u32) -> bool {
        self.first[v as usize + 1] > self.first[v as usize]
    }
}

/// Path counting between `starts` and `ends`: the CP of every edge, `ln`
/// of the total path length (`Σ w · N(e)`), and `ln` of the number of
/// paths (`-∞` when none).
fn count(
    pag: &Pag,
    g: Csr<'_>,
    order: &[u32],
    starts: &[u32],
    ends: &[u32],
) -> (Vec<f64>, f64, f64) {
    let n = pag.nodes;
    let mut f = vec![f64::NEG_INFINITY; n];
    for &s in starts {
        f[s as usize] = 0.0;
    }
    for &v in order {
        let fv = f[v as usize];
        if fv == f64::NEG_INFINITY {
            continue;
        }
        for &to in g.next(v) {
            f[to as usize] = ln_add(f[to as usize], fv);
        }
    }
    let ln_paths = ends
        .iter()
        .fold(f64::NEG_INFINITY, |acc, &e| ln_add(acc, f[e as usize]));
    if ln_paths == f64::NEG_INFINITY {
        return (vec![0.0; pag.edges.len()], f64::NEG_INFINITY, ln_paths);
    }
    let mut b = vec![f64::NEG_INFINITY; n];
    for &e in ends {
        b[e as usize] = 0.0;
    }
    for &v in order.iter().rev() {
        let mut bv = b[v as usize];
        for &to in g.next(v) {
            bv = ln_add(bv, b[to as usize]);
        }
        b[v as usize] = bv;
    }
    // w · N(e) per edge, N(e) scaled by the largest so that one `exp` per
    // edge does; their sum is the length of all paths (so scaled).
    let mut cp: Vec<f64> = pag
        .edges
        .iter()
        .map(|e| {
            if carries(e) && e.w > 0 {
                f[e.from as usize] + b[e.to as usize]
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    let top = cp.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if top == f64::NEG_INFINITY {
        cp.fill(0.0);
        return (cp, f64::NEG_INFINITY, ln_paths);
    }
    let mut length = 0.0;
    for (c, e) in cp.iter_mut().zip(&pag.edges) {
        *c = e.w as f64 * (*c - top).exp();
        length += *c;
    }
    cp.iter_mut().for_each(|c| *c /= length);
    (cp, length.ln() + top, ln_paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::event::{DATA_BIT, Event, NO_OP};
    use crate::trace::graph::{LaneInput, build, build_with};
    use std::collections::BTreeMap;

    /// A small seeded generator (SplitMix64), so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random lanes over `[0, 1000)`: spans of random kinds (waiting among
    /// them), and messages from a random lane to another at a later or
    /// equal time.
    fn random_lanes(rng: &mut Rng) -> Vec<Vec<Event>> {
        let lanes = 1 + rng.below(4) as usize;
        let mut out = vec![Vec::new(); lanes];
        for lane in out.iter_mut() {
            let mut t = rng.below(50);
            while t < 1000 {
                let len = 1 + rng.below(150);
                let kind = match rng.below(4) {
                    0 => Kind::Waiting,
                    1 => Kind::Serialization,
                    _ => Kind::Processing,
                };
                lane.push(Event {
                    start: t,
                    end: t + len,
                    kind,
                    op: rng.below(3) as u16,
                    id: 0,
                });
                t += len + rng.below(40);
            }
        }
        let messages = rng.below(7);
        for m in 0..messages {
            let (a, b) = (
                rng.below(lanes as u64) as usize,
                rng.below(lanes as u64) as usize,
            );
            if a == b {
                continue;
            }
            let sent = rng.below(1000);
            let got = sent + rng.below(200);
            let id = if m % 2 == 0 { DATA_BIT | m } else { m + 1 };
            let instant = |t, kind| Event {
                start: t,
                end: t,
                kind,
                op: NO_OP,
                id,
            };
            out[a].push(instant(sent, Kind::DataSend));
            out[b].push(instant(got, Kind::DataRecv));
        }
        out
    }

    /// Every path from `starts` to `ends` along non-waiting edges, by
    /// depth-first enumeration: each edge's CP (its time on all paths over
    /// the paths' total length) and the number of paths.
    fn brute_force(pag: &Pag, starts: &[u32], ends: &[u32]) -> (Vec<f64>, u64) {
        struct Walk<'a> {
            pag: &'a Pag,
            ends: std::collections::HashSet<u32>,
            on_paths: Vec<u64>,
            total: u64,
            length: u64,
        }
        fn walk(w: &mut Walk<'_>, v: u32, path: &mut Vec<usize>) {
            if w.ends.contains(&v) {
                w.total += 1;
                for &e in path.iter() {
                    w.on_paths[e] += 1;
                    w.length += w.pag.edges[e].w;
                }
            }
            for i in 0..w.pag.edges.len() {
                let e = w.pag.edges[i];
                if e.from == v && e.kind != Kind::Waiting {
                    path.push(i);
                    walk(w, e.to, path);
                    path.pop();
                }
            }
        }
        let mut w = Walk {
            pag,
            ends: ends.iter().copied().collect(),
            on_paths: vec![0; pag.edges.len()],
            total: 0,
            length: 0,
        };
        for &s in starts {
            walk(&mut w, s, &mut Vec::new());
        }
        let cp = pag
            .edges
            .iter()
            .zip(&w.on_paths)
            .map(|(e, &k)| {
                if w.length == 0 {
                    0.0
                } else {
                    (e.w * k) as f64 / w.length as f64
                }
            })
            .collect();
        (cp, w.total)
    }

    /// The points no waiting-free edge enters, and those none leaves.
    fn busy_ends(pag: &Pag) -> (Vec<u32>, Vec<u32>) {
        let carries = |e: &&crate::trace::graph::PagEdge| e.kind != Kind::Waiting;
        let enters = |v: u32| pag.edges.iter().filter(carries).any(|e| e.to == v);
        let leaves = |v: u32| pag.edges.iter().filter(carries).any(|e| e.from == v);
        let starts = (0..pag.nodes as u32)
            .filter(|&v| !enters(v) && leaves(v))
            .collect();
        let ends = (0..pag.nodes as u32)
            .filter(|&v| !leaves(v) && enters(v))
            .collect();
        (starts, ends)
    }

    /// CP per (receiving lane, sending lane, activity, operator), a local
    /// edge's shared among its pieces by duration.
    fn by_activity(pag: &Pag, cp: &[f64]) -> BTreeMap<(u32, u32, Kind, u16), f64> {
        let mut out = BTreeMap::new();
        for (e, &c) in pag.edges.iter().zip(cp) {
            if e.is_message() {
                *out.entry((e.to_lane, e.lane, e.kind, NO_OP)).or_default() += c;
                continue;
            }
            for p in pag.pieces_of(e) {
                *out.entry((e.lane, e.lane, p.kind, p.op)).or_default() +=
                    c * p.w as f64 / e.w as f64;
            }
        }
        out
    }

    #[test]
    fn path_counting_equals_enumeration_on_random_graphs() {
        let mut rng = Rng(0x5EED);
        let (mut spanning, mut busy) = (0, 0);
        for case in 0..500 {
            let lanes = random_lanes(&mut rng);
            let inputs: Vec<LaneInput<'_>> = lanes
                .iter()
                .map(|e| LaneInput {
                    gap: Kind::Unknown,
                    events: e,
                })
                .collect();
            let pag = build(&inputs, 0, 1000);
            let (fast, ln_paths, paths) = critical_participation(&pag);
            let (mut slow, mut total) = brute_force(&pag, &pag.starts, &pag.ends);
            if total > 0 {
                assert_eq!(paths, Paths::Spanning, "case {case}");
                spanning += 1;
            } else {
                // No spanning path: the maximal paths between waits.
                let (starts, ends) = busy_ends(&pag);
                (slow, total) = brute_force(&pag, &starts, &ends);
                if slow.iter().any(|&c| c > 0.0) {
                    assert_eq!(paths, Paths::Busy, "case {case}");
                    busy += 1;
                } else {
                    assert_eq!(paths, Paths::None, "case {case}");
                }
            }
            for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
                assert!(
                    (a - b).abs() < 1e-9,
                    "case {case}, edge {i} {:?}: counted {a}, enumerated {b}",
                    pag.edges[i]
                );
            }
            // The compacted graph loses nothing: enumerating the paths of
            // the graph with a node at every span boundary gives every
            // activity the same CP.
            let fine = build_with(&inputs, 0, 1000, false);
            assert!(fine.nodes >= pag.nodes, "case {case}");
            let (fine_starts, fine_ends) = match paths {
                Paths::Spanning => (fine.starts.clone(), fine.ends.clone()),
                _ => busy_ends(&fine),
            };
            let (fine_cp, fine_total) = brute_force(&fine, &fine_starts, &fine_ends);
            assert_eq!(fine_total, total, "case {case}: paths");
            let (want, got) = (by_activity(&fine, &fine_cp), by_activity(&pag, &fast));
            assert_eq!(
                want.keys().collect::<Vec<_>>(),
                got.keys().collect::<Vec<_>>(),
                "case {case}"
            );
            for (k, a) in &want {
                assert!(
                    (a - got[k]).abs() < 1e-9,
                    "case {case}, {k:?}: {a} vs {}",
                    got[k]
                );
            }
            if paths != Paths::None {
                assert!((ln_paths - (total as f64).ln()).abs() < 1e-9, "case {case}");
                let sum: f64 = fast.iter().sum();
                assert!((sum - 1.0).abs() < 1e-9, "case {case}: CP sums to {sum}");
            }
        }
        // The generator must exercise both definitions.
        assert!(
            spanning > 50 && busy > 50,
            "{spanning} spanning, {busy} busy"
        );
    }

    #[test]
    fn the_slow_side_of_a_handoff_dominates() {
        // Lane 0 works 10 then waits; lane 1 waits for its message, then
        // works 90. Only one path: 10 on lane 0, the message, 90 on lane 1.
        let id = DATA_BIT | 1;
        let a = [
            Event {
                start: 0,
                end: 10,
                kind: Kind::Processing,
                op: 0,
                id: 0,
            },
            Event {
                start: 10,
                end: 10,
                kind: Kind::DataSend,
                op: NO_OP,
                id,
            },
            Event {
                start: 10,
                end: 100,
                kind: Kind::Waiting,
                op: NO_OP,
                id: 0,
            },
        ];
        let b = [
            Event {
                start: 0,
                end: 10,
                kind: Kind::Waiting,
                op: NO_OP,
                id: 0,
            },
            Event {
                start: 10,
                end: 10,
                kind: Kind::DataRecv,
                op: NO_OP,
                id,
            },
            Event {
                start: 10,
                end: 100,
                kind: Kind::Processing,
                op: 1,
                id: 0,
            },
        ];
        let lanes = [
            LaneInput {
                gap: Kind::Unknown,
                events: &a,
            },
            LaneInput {
                gap: Kind::Unknown,
                events: &b,
            },
        ];
        let pag = build(&lanes, 0, 100);
        let (cp, ln_paths, paths) = critical_participation(&pag);
        assert_eq!(
            (ln_paths, paths),
            (0.0, Paths::Spanning),
            "exactly one path"
        );
        let by_op = |op| -> f64 {
            pag.edges
                .iter()
                .zip(&cp)
                .flat_map(|(e, c)| {
                    pag.pieces_of(e)
                        .iter()
                        .map(move |p| (p, c * p.w as f64 / e.w as f64))
                })
                .filter(|(p, _)| p.op == op && p.kind == Kind::Processing)
                .map(|(_, c)| c)
                .sum()
        };
        assert!((by_op(0) - 0.1).abs() < 1e-12);
        assert!((by_op(1) - 0.9).abs() < 1e-12);
    }
}
