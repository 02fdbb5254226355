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

use super::cores::{Cores, both};
use super::event::Kind;
use super::graph::{Pag, PagEdge};

/// A path count too large for an `f64`: `m · 2^(e · SHIFT)`, with `m` in
/// `[1, 2^SHIFT)` for any count but zero (`m == 0`). Counts grow
/// exponentially with a window's messages; adding two takes a multiply and
/// a compare here, where counts kept as logarithms took an `exp` and a
/// `log1p`, a tenth of a window's analysis.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Count {
    m: f64,
    e: i32,
}

const SHIFT: i32 = 480;

/// `2^k` for a `k` in the normal range of `f64`.
const fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// `2^SHIFT`: a count's `m` stays below it.
const TOP: f64 = pow2(SHIFT);
/// `2^(-SHIFT · d)` for `d` = 0, 1, 2 and 3 or more. Beyond the last
/// nonzero factor a term is below an `f64`'s precision of the larger one.
const DOWN: [f64; 4] = [1.0, pow2(-SHIFT), pow2(-2 * SHIFT), 0.0];

impl Count {
    const ZERO: Count = Count { m: 0.0, e: 0 };
    const ONE: Count = Count { m: 1.0, e: 0 };

    #[inline]
    fn add(self, other: Count) -> Count {
        if self.m == 0.0 {
            return other;
        }
        if other.m == 0.0 {
            return self;
        }
        let (hi, lo) = if self.e >= other.e {
            (self, other)
        } else {
            (other, self)
        };
        // Both `m` are at least 1: a term two exponents down is below the
        // larger one's precision.
        let m = match hi.e - lo.e {
            0 => hi.m + lo.m,
            1 => hi.m + lo.m * DOWN[1],
            _ => hi.m,
        };
        if m >= TOP {
            Count {
                m: m * DOWN[1],
                e: hi.e + 1,
            }
        } else {
            Count { m, e: hi.e }
        }
    }

    fn ln(self) -> f64 {
        if self.m == 0.0 {
            f64::NEG_INFINITY
        } else {
            self.m.ln() + f64::from(self.e * SHIFT) * std::f64::consts::LN_2
        }
    }
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

/// What sums the edges' CPs as they are weighed, so that whoever wants
/// them summed (per activity, operator, lane) needs no pass of its own over
/// the edges. On two cores each half of the edges has its own.
pub(crate) trait Tally: Send {
    /// Called with every edge, in order, and its CP times
    /// [`Participation::scale`] (0 for an edge on no path).
    fn add(&mut self, e: &PagEdge, cp: f64);
    /// Adds what `later` summed of the edges after this one's.
    fn merge(&mut self, later: Self);
}

/// A window's critical participation: each edge's went into `tally`.
pub(crate) struct Participation<T> {
    pub(crate) tally: T,
    /// What the tally's sums are multiplied by to be CPs.
    pub(crate) scale: f64,
    /// `ln` of the number of paths CP is over.
    pub(crate) ln_paths: f64,
    pub(crate) paths: Paths,
}

/// Every edge's CP, in the edges' order.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct PerEdge(pub(crate) Vec<f64>);

#[cfg(test)]
impl Tally for PerEdge {
    fn add(&mut self, _: &PagEdge, cp: f64) {
        self.0.push(cp);
    }

    fn merge(&mut self, later: Self) {
        self.0.extend(later.0);
    }
}

#[cfg(test)]
impl Participation<PerEdge> {
    /// Each edge's CP.
    pub(crate) fn per_edge(&self) -> Vec<f64> {
        self.tally.0.iter().map(|c| c * self.scale).collect()
    }
}

/// [`critical_participation_in`] in fresh memory, returning the CPs.
#[cfg(test)]
pub(crate) fn critical_participation(pag: &Pag) -> (Vec<f64>, f64, Paths) {
    let mut scratch = CpScratch::default();
    let p = critical_participation_in(pag, &mut scratch, Cores::ONE, PerEdge::default);
    (p.per_edge(), p.ln_paths, p.paths)
}

/// The buffers of the passes below, kept from one window to the next (see
/// `graph::GraphScratch`).
#[derive(Default)]
pub(crate) struct CpScratch {
    first: Vec<u32>,
    indeg: Vec<u32>,
    succ: Vec<u32>,
    busy_starts: Vec<u32>,
    busy_ends: Vec<u32>,
    reached: Vec<bool>,
    lane_at: Vec<u32>,
    ready: Vec<u32>,
    runs: Vec<(u32, u32)>,
    f: Vec<Count>,
    b: Vec<Count>,
}

/// Clears `v` and fills it with `n` times `x`, keeping its allocation.
fn refill<T: Clone>(v: &mut Vec<T>, n: usize, x: T) {
    v.clear();
    v.resize(n, x);
}

/// The CP of every edge of `pag` (0 for waiting edges), summed by tallies
/// that `new` makes; `ln` of the number of paths it is over, and which
/// paths those are. On two `cores` the forward and backward counts run
/// side by side, and each half of the edges is weighed on its own.
pub(crate) fn critical_participation_in<T: Tally>(
    pag: &Pag,
    scratch: &mut CpScratch,
    cores: Cores,
    new: impl Fn() -> T + Sync,
) -> Participation<T> {
    let n = pag.nodes;
    let CpScratch {
        first,
        indeg,
        succ,
        busy_starts,
        busy_ends,
        reached,
        lane_at,
        ready,
        runs,
        f,
        b,
    } = scratch;
    // Successors along the edges that may carry critical paths: a point's
    // local edge to the next point (a flag per point), then its messages
    // (CSR; every message may carry). The passes below read these small
    // arrays instead of the edges.
    let messages = &pag.edges[pag.first_message..];
    refill(first, n + 1, 0);
    refill(indeg, n, 0);
    for e in messages {
        first[e.from as usize + 1] += 1;
        indeg[e.to as usize] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    // Each point's next free slot, walking up from its start; `first` is
    // shifted back to the starts below.
    refill(succ, messages.len(), 0);
    for e in messages {
        succ[first[e.from as usize] as usize] = e.to;
        first[e.from as usize] += 1;
    }
    for i in (1..=n).rev() {
        first[i] = first[i - 1];
    }
    first[0] = 0;
    let g = Succ {
        local: &pag.carries_next,
        first,
        messages: succ,
    };
    // A topological order as runs of consecutive points of one lane: a
    // lane goes as far as its next receive whose sends are not all
    // ordered yet, then waits for them. The lanes' own order (time) is a
    // superset of the local edges that carry, and real messages cannot
    // close a cycle with it (a receive comes after its send in real time,
    // and a lane's points are in real time); points that could still not
    // be ordered are left out. Runs instead of one index per point, and
    // no in-degree kept for local edges, make this and both counting
    // passes streams over the lanes.
    // On the way, which points a path from a lane's start reaches: whether
    // a path spans the window is known before any counting.
    refill(reached, n, false);
    for &s in &pag.starts {
        reached[s as usize] = true;
    }
    lane_at.clear();
    lane_at.extend(pag.starts.iter().copied());
    ready.clear();
    ready.extend((0..pag.starts.len() as u32).rev());
    runs.clear();
    while let Some(lane) = ready.pop() {
        let l = lane as usize;
        let (first_point, end) = (lane_at[l], pag.ends[l] + 1);
        let mut v = first_point;
        while v < end && indeg[v as usize] == 0 {
            let r = reached[v as usize];
            let i = v as usize;
            if g.local[i] {
                reached[i + 1] |= r;
            }
            for &to in &g.messages[g.first[i] as usize..g.first[i + 1] as usize] {
                reached[to as usize] |= r;
                indeg[to as usize] -= 1;
                if indeg[to as usize] == 0 {
                    let other = pag.starts.partition_point(|&s| s <= to) - 1;
                    if other != l && lane_at[other] == to {
                        ready.push(other as u32);
                    }
                }
            }
            v += 1;
        }
        if v > first_point {
            runs.push((first_point, v));
            lane_at[l] = v;
        }
    }
    let mut counts = Counts {
        f,
        b,
        split: cores.split(n),
    };
    if pag.ends.iter().any(|&e| reached[e as usize]) {
        let w = count(pag, g, runs, &pag.starts, &pag.ends, &mut counts, &new);
        return w.participation(Paths::Spanning);
    }
    // No path spans the window: the busy periods' paths. A point between
    // two waits starts and ends no path of any length: not counting it
    // keeps the count the same however waits are cut. The order above
    // used the in-degrees up, and most windows never get here.
    refill(indeg, n, 0);
    for e in messages {
        indeg[e.to as usize] += 1;
    }
    let entered = |v: u32| {
        let i = v as usize;
        indeg[i] > 0 || (i > 0 && pag.carries_next[i - 1])
    };
    busy_starts.clear();
    busy_starts.extend((0..n as u32).filter(|&v| !entered(v) && g.has_out(v)));
    busy_ends.clear();
    busy_ends.extend((0..n as u32).filter(|&v| !g.has_out(v) && entered(v)));
    let w = count(pag, g, runs, busy_starts, busy_ends, &mut counts, &new);
    if w.ln_paths == f64::NEG_INFINITY || w.ln_length == f64::NEG_INFINITY {
        // Every edge was weighed 0.
        return Participation {
            ln_paths: f64::NEG_INFINITY,
            ..w.participation(Paths::None)
        };
    }
    w.participation(Paths::Busy)
}

/// Where [`count`] counts: paths to and from each point; whether on two
/// cores.
struct Counts<'a> {
    f: &'a mut Vec<Count>,
    b: &'a mut Vec<Count>,
    split: bool,
}

/// What [`count`] found.
struct Weighed<T> {
    tally: T,
    scale: f64,
    /// `ln` of the total path length (`Σ w · N(e)`), and of the number of
    /// paths (`-∞` when none).
    ln_length: f64,
    ln_paths: f64,
}

impl<T> Weighed<T> {
    fn participation(self, paths: Paths) -> Participation<T> {
        Participation {
            tally: self.tally,
            scale: self.scale,
            ln_paths: self.ln_paths,
            paths,
        }
    }
}

fn carries(e: &PagEdge) -> bool {
    e.kind != Kind::Waiting
}

#[derive(Clone, Copy)]
struct Succ<'a> {
    local: &'a [bool],
    first: &'a [u32],
    messages: &'a [u32],
}

impl Succ<'_> {
    /// Calls `f` with each successor of `v`.
    #[inline(always)]
    fn each(&self, v: u32, mut f: impl FnMut(u32)) {
        let i = v as usize;
        if self.local[i] {
            f(v + 1);
        }
        for &to in &self.messages[self.first[i] as usize..self.first[i + 1] as usize] {
            f(to);
        }
    }

    #[inline]
    fn has_out(&self, v: u32) -> bool {
        let i = v as usize;
        self.local[i] || self.first[i + 1] > self.first[i]
    }
}

/// Path counting between `starts` and `ends`: the CP of every edge, into
/// tallies `new` makes.
fn count<T: Tally>(
    pag: &Pag,
    g: Succ<'_>,
    runs: &[(u32, u32)],
    starts: &[u32],
    ends: &[u32],
    out: &mut Counts<'_>,
    new: &(impl Fn() -> T + Sync),
) -> Weighed<T> {
    let n = pag.nodes;
    let Counts { f, b, split } = out;
    // The paths from the starts to each point, and from each point to the
    // ends: neither needs the other.
    both(
        *split,
        || {
            refill(f, n, Count::ZERO);
            for &s in starts {
                f[s as usize] = Count::ONE;
            }
            for &(first_point, end) in runs {
                for v in first_point..end {
                    let fv = f[v as usize];
                    if fv.m == 0.0 {
                        continue;
                    }
                    g.each(v, |to| f[to as usize] = f[to as usize].add(fv));
                }
            }
        },
        || {
            refill(b, n, Count::ZERO);
            for &e in ends {
                b[e as usize] = Count::ONE;
            }
            for &(first_point, end) in runs.iter().rev() {
                for v in (first_point..end).rev() {
                    let mut bv = b[v as usize];
                    g.each(v, |to| bv = bv.add(b[to as usize]));
                    b[v as usize] = bv;
                }
            }
        },
    );
    let paths = ends
        .iter()
        .fold(Count::ZERO, |acc, &e| acc.add(f[e as usize]));
    // w · N(e) per edge, N(e) = f(from) · b(to): `m` below 2^(2·SHIFT),
    // exponents summed. No edge is on more paths than there are, so scaled
    // by the count of all paths each fits an `f64`; their sum is the
    // length of all paths (so scaled). With no path, no edge has both
    // counts, and every one weighs 0.
    let top = paths.e;
    let (f, b) = (&**f, &**b);
    let weigh = |edges: &[PagEdge]| {
        let mut tally = new();
        let mut length = 0.0;
        for e in edges {
            let (f, b) = (f[e.from as usize], b[e.to as usize]);
            let c = if !carries(e) || e.w == 0 || f.m == 0.0 || b.m == 0.0 {
                0.0
            } else {
                e.w as f64 * f.m * b.m * DOWN[(top - f.e - b.e).clamp(0, 3) as usize]
            };
            length += c;
            tally.add(e, c);
        }
        (tally, length)
    };
    let (first, second) = pag.edges.split_at(pag.edges.len() / 2);
    let ((mut tally, l1), (later, l2)) = both(*split, || weigh(first), || weigh(second));
    tally.merge(later);
    let length = l1 + l2;
    let ln_length = if paths.m == 0.0 || length == 0.0 {
        f64::NEG_INFINITY
    } else {
        Count { m: length, e: top }.ln()
    };
    Weighed {
        tally,
        scale: if length > 0.0 { 1.0 / length } else { 0.0 },
        ln_length,
        ln_paths: paths.ln(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::event::{DATA_BIT, Event, NO_OP};
    use crate::trace::graph::{GraphScratch, LaneInput, build, build_into, build_with};
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
        // One memory for all cases, as the collector keeps one: what a
        // case leaves behind must not change the next one's counts.
        let (mut pag, mut graph, mut scratch) = (
            Pag::default(),
            GraphScratch::default(),
            CpScratch::default(),
        );
        for case in 0..500 {
            let lanes = random_lanes(&mut rng);
            let inputs: Vec<LaneInput<'_>> = lanes
                .iter()
                .map(|e| LaneInput {
                    gap: Kind::Unknown,
                    events: e,
                })
                .collect();
            // Every other case on two cores, split however small.
            let cores = if case % 2 == 0 {
                Cores::TWO
            } else {
                Cores::ONE
            };
            build_into(&mut pag, &mut graph, &inputs, 0, 1000, true, cores);
            let pag = &pag;
            let p = critical_participation_in(pag, &mut scratch, cores, PerEdge::default);
            let (ln_paths, paths, fast) = (p.ln_paths, p.paths, p.per_edge());
            let (mut slow, mut total) = brute_force(pag, &pag.starts, &pag.ends);
            if total > 0 {
                assert_eq!(paths, Paths::Spanning, "case {case}");
                spanning += 1;
            } else {
                // No spanning path: the maximal paths between waits.
                let (starts, ends) = busy_ends(pag);
                (slow, total) = brute_force(pag, &starts, &ends);
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
            let (want, got) = (by_activity(&fine, &fine_cp), by_activity(pag, &fast));
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

    /// Two worker lanes (gaps unknown) with these events.
    fn two_workers<'a>(a: &'a [Event], b: &'a [Event]) -> [LaneInput<'a>; 2] {
        [a, b].map(|events| LaneInput {
            gap: Kind::Unknown,
            events,
        })
    }

    #[test]
    fn counts_beyond_an_f64_add_exactly_where_an_f64_can_tell() {
        let ln2 = std::f64::consts::LN_2;
        let pow = |k: u32| (0..k).fold(Count::ONE, |c, _| c.add(c));
        let c = pow(2000);
        assert!((c.ln() / ln2 - 2000.0).abs() < 1e-9, "{c:?}");
        // 2^1000 + 2^999 + 1, in every order.
        let (big, half) = (pow(1000), pow(999));
        let want = 1000.0 * ln2 + 1.5f64.ln();
        for sum in [
            big.add(half).add(Count::ONE),
            Count::ONE.add(half).add(big),
            half.add(Count::ONE.add(big)),
        ] {
            assert!((sum.ln() - want).abs() < 1e-12, "{sum:?}");
        }
        // Across one exponent: 2^500 + 2^479.
        let want = 500.0 * ln2 + (1.0 + 2f64.powi(-21)).ln();
        for sum in [pow(500).add(pow(479)), pow(479).add(pow(500))] {
            assert!((sum.ln() - want).abs() < 1e-12, "{sum:?}");
        }
        assert_eq!(Count::ZERO.add(big), big);
        assert_eq!(Count::ZERO.ln(), f64::NEG_INFINITY);
    }

    #[test]
    fn a_window_of_more_paths_than_an_f64_holds_still_sums_to_one() {
        // Two lanes send each other a message every round: the paths
        // double each round, 2^1500 and more in all.
        const ROUNDS: u64 = 1500;
        let lane = |me: u64| -> Vec<Event> {
            let mut events = Vec::new();
            for t in 0..ROUNDS {
                let send = DATA_BIT | me << 32 | t;
                let recv = DATA_BIT | (1 - me) << 32 | t;
                events.push(Event::instant(4 * t + 1, Kind::DataSend, send));
                events.push(Event::instant(4 * t + 3, Kind::DataRecv, recv));
            }
            events
        };
        let (a, b) = (lane(0), lane(1));
        let lanes = two_workers(&a, &b);
        let pag = build(&lanes, 0, 4 * ROUNDS + 4);
        let (cp, ln_paths, paths) = critical_participation(&pag);
        assert_eq!(paths, Paths::Spanning);
        let doublings = ln_paths / std::f64::consts::LN_2;
        assert!(
            (ROUNDS as f64..ROUNDS as f64 + 3.0).contains(&doublings),
            "{doublings}"
        );
        assert!(cp.iter().all(|c| c.is_finite() && *c >= 0.0));
        assert!((cp.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let on_lane = |l: u32| -> f64 {
            pag.edges
                .iter()
                .zip(&cp)
                .filter(|(e, _)| !e.is_message() && e.lane == l)
                .map(|(_, c)| c)
                .sum()
        };
        assert!(
            (on_lane(0) - on_lane(1)).abs() < 1e-9,
            "{} {}",
            on_lane(0),
            on_lane(1)
        );
    }

    /// Logs no real run makes: each lane receives the other's message at
    /// the instant it sends its own (the graph drops a message received
    /// before it was sent, so only equal times can close a cycle). The
    /// points on the cycle and after it cannot be ordered and are left
    /// out; the analysis ends, and what it says is finite.
    #[test]
    fn a_cycle_of_messages_is_left_out_not_followed() {
        let ev = |start, end, kind, id| Event {
            start,
            end,
            kind,
            op: if kind == Kind::Processing { 0 } else { NO_OP },
            id,
        };
        let (one, two) = (DATA_BIT | 1, DATA_BIT | 2);
        let a = [
            ev(0, 10, Kind::Processing, 0),
            ev(10, 10, Kind::DataRecv, one),
            ev(10, 10, Kind::DataSend, two),
            ev(10, 100, Kind::Processing, 0),
        ];
        let b = [
            ev(0, 10, Kind::Processing, 0),
            ev(10, 10, Kind::DataRecv, two),
            ev(10, 10, Kind::DataSend, one),
            ev(10, 100, Kind::Processing, 0),
        ];
        let lanes = two_workers(&a, &b);
        let pag = build(&lanes, 0, 100);
        assert!(pag.first_message < pag.edges.len(), "the messages joined");
        let mut scratch = CpScratch::default();
        let p = critical_participation_in(&pag, &mut scratch, Cores::ONE, PerEdge::default);
        let ordered: u32 = scratch.runs.iter().map(|(a, b)| b - a).sum();
        assert!((ordered as usize) < pag.nodes, "a cycle is left out");
        let (ln_paths, cp) = (p.ln_paths, p.per_edge());
        assert!(cp.iter().all(|c| c.is_finite() && *c >= 0.0), "{cp:?}");
        assert!(cp.iter().sum::<f64>() <= 1.0 + 1e-9);
        assert!(!ln_paths.is_nan());
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
        let lanes = two_workers(&a, &b);
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
