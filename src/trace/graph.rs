//! The program activity graph (PAG) of one snapshot window, as SnailTrail
//! defines it: a node is a point on one lane's timeline, a local edge is
//! the activity a lane performed between two consecutive points, and a
//! communication edge joins a message's send end to its receive end (by
//! message id) across lanes. Every lane's timeline covers the whole window:
//! spans are clipped to it, nested spans are flattened (the innermost owns
//! the time) and gaps are filled as `Unknown` (workers) or `Waiting`
//! (exchange tasks, which are idle whenever they log nothing).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::cores::{Cores, both};
use super::event::{DATA_BIT, Event, Kind, NO_OP};

/// One lane's events as the analysis sees them.
pub(crate) struct LaneInput<'a> {
    /// What fills time no span covers.
    pub(crate) gap: Kind,
    pub(crate) events: &'a [Event],
}

/// One activity inside an edge: a lane's uninterrupted run of busy (or of
/// waiting) time is one edge of the graph, whatever activities it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Duration in nanoseconds.
    pub(crate) w: u64,
    pub(crate) kind: Kind,
    pub(crate) op: u16,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct PagEdge {
    pub(crate) from: u32,
    pub(crate) to: u32,
    /// Duration in nanoseconds (of a local edge, the sum of its pieces).
    pub(crate) w: u64,
    /// A message's kind; `Waiting` for a local edge of waiting; for any
    /// other local edge the kind of its first piece.
    pub(crate) kind: Kind,
    /// The lane a local edge is on; for a message, the sending lane.
    pub(crate) lane: u32,
    /// For a message, the receiving lane; else `lane`.
    pub(crate) to_lane: u32,
    /// A local edge's pieces: `Pag::pieces[first_piece..first_piece +
    /// pieces]`, in time order (none for a message).
    pub(crate) first_piece: u32,
    pub(crate) pieces: u32,
}

impl PagEdge {
    pub(crate) fn is_message(&self) -> bool {
        matches!(self.kind, Kind::DataMessage | Kind::ControlMessage)
    }
}

#[derive(Default)]
pub(crate) struct Pag {
    pub(crate) nodes: usize,
    /// Each lane's node at the window's start, and at its end.
    pub(crate) starts: Vec<u32>,
    pub(crate) ends: Vec<u32>,
    pub(crate) edges: Vec<PagEdge>,
    /// The activities local edges are made of (see [`PagEdge::first_piece`]).
    pub(crate) pieces: Vec<Piece>,
    /// Per point `v`, whether a local edge that may carry critical paths
    /// (not waiting) leads from it to `v + 1`: a lane's points are numbered
    /// in a row, so its local edges are exactly these.
    pub(crate) carries_next: Vec<bool>,
    /// `edges[first_message..]` are the messages, all local edges before.
    pub(crate) first_message: usize,
    /// The window's length in nanoseconds.
    pub(crate) span: u64,
    /// Events inside the window.
    pub(crate) events: usize,
}

impl Pag {
    pub(crate) fn pieces_of(&self, e: &PagEdge) -> &[Piece] {
        let first = e.first_piece as usize;
        &self.pieces[first..first + e.pieces as usize]
    }
}

#[derive(Clone, Copy)]
struct Segment {
    start: u64,
    end: u64,
    kind: Kind,
    op: u16,
}

/// [`build_into`] in fresh memory.
#[cfg(test)]
pub(crate) fn build(lanes: &[LaneInput<'_>], ws: u64, we: u64) -> Pag {
    build_with(lanes, ws, we, true)
}

/// As [`build`]; `compact: false` makes a node at every span boundary
/// (SnailTrail's graph as drawn, for tests of the compaction).
#[cfg(test)]
pub(crate) fn build_with(lanes: &[LaneInput<'_>], ws: u64, we: u64, compact: bool) -> Pag {
    let mut pag = Pag::default();
    let mut scratch = GraphScratch::default();
    build_into(&mut pag, &mut scratch, lanes, ws, we, compact, Cores::ONE);
    pag
}

/// The buffers a graph is built with, kept from one window to the next:
/// a window's tens of megabytes allocated afresh each time were fresh
/// pages from the kernel, a quarter of the analysis (`perf`: page faults,
/// page clearing and `munmap`).
#[derive(Default)]
pub(crate) struct GraphScratch {
    own: LaneScratch,
    join: JoinScratch,
    /// The second half of the lanes, built on another core (see
    /// [`Cores`]) and then appended.
    other: Option<Box<(Pag, LaneScratch)>>,
}

/// What building lanes needs besides the graph.
#[derive(Default)]
struct LaneScratch {
    /// Message ends, to join once every lane is in.
    sends: Vec<End>,
    recvs: Vec<End>,
    spans: Vec<Segment>,
    instants: Vec<(u64, Event)>,
    segs: Vec<Segment>,
}

/// Clears `v` and makes room for `n`, keeping its allocation.
fn reuse<T>(v: &mut Vec<T>, n: usize) {
    v.clear();
    v.reserve(n);
}

/// Builds the PAG of `[ws, we)` from each lane's events (in any order)
/// into `pag`, reusing its buffers and `scratch`'s; with `compact`,
/// compacted: a node only where a message starts or ends, where a lane
/// starts or stops waiting, and at the window's ends. A run of activities
/// between two such points is one edge holding them as pieces. That loses
/// nothing: every point inside a run has one edge in and one out, so every
/// path through one of the run's activities runs through all of them, and
/// each piece's CP is its share of the run's by duration. It makes the
/// graph several times smaller than one node per span.
///
/// On two `cores` the lanes are built in two halves of about as many
/// events each; the graph is the one a single core builds.
pub(crate) fn build_into(
    pag: &mut Pag,
    scratch: &mut GraphScratch,
    lanes: &[LaneInput<'_>],
    ws: u64,
    we: u64,
    compact: bool,
    cores: Cores,
) {
    let logged: usize = lanes.iter().map(|l| l.events.len()).sum();
    let GraphScratch {
        own,
        join: join_scratch,
        other,
    } = scratch;
    let half = halfway(lanes, logged);
    if cores.split(logged) && half > 0 && half < lanes.len() {
        let (first, second) = lanes.split_at(half);
        let (opag, oscratch) = &mut **other.get_or_insert_with(Default::default);
        both(
            true,
            || build_lanes(pag, own, first, 0, ws, we, compact),
            || build_lanes(opag, oscratch, second, half as u32, ws, we, compact),
        );
        append(pag, own, opag, oscratch);
    } else {
        build_lanes(pag, own, lanes, 0, ws, we, compact);
    }
    pag.span = we.saturating_sub(ws);
    pag.first_message = pag.edges.len();
    let split = cores.split(own.sends.len() + own.recvs.len());
    join(join_scratch, &own.sends, &own.recvs, split, |send, recv| {
        if send.t <= recv.t {
            pag.edges.push(PagEdge {
                from: send.node,
                to: recv.node,
                w: recv.t - send.t,
                kind: if recv.id & DATA_BIT != 0 {
                    Kind::DataMessage
                } else {
                    Kind::ControlMessage
                },
                lane: send.lane,
                to_lane: recv.lane,
                first_piece: 0,
                pieces: 0,
            });
        }
    });
}

/// Where to cut `lanes` (of `logged` events in all) into two runs of
/// about as many events each.
fn halfway(lanes: &[LaneInput<'_>], logged: usize) -> usize {
    let mut before = 0;
    for (i, l) in lanes.iter().enumerate() {
        let after = before + l.events.len();
        if 2 * after >= logged {
            // Lane `i` goes to the side it leaves the less uneven.
            return if after - logged / 2 <= logged / 2 - before {
                i + 1
            } else {
                i
            };
        }
        before = after;
    }
    lanes.len()
}

/// Appends the graph of later lanes (`o`, numbered from 0) to `pag`.
fn append(pag: &mut Pag, own: &mut LaneScratch, o: &Pag, os: &LaneScratch) {
    let (nodes, pieces) = (pag.nodes as u32, pag.pieces.len() as u32);
    pag.starts.extend(o.starts.iter().map(|v| v + nodes));
    pag.ends.extend(o.ends.iter().map(|v| v + nodes));
    pag.edges.extend(o.edges.iter().map(|e| PagEdge {
        from: e.from + nodes,
        to: e.to + nodes,
        first_piece: e.first_piece + pieces,
        ..*e
    }));
    pag.pieces.extend_from_slice(&o.pieces);
    pag.carries_next.extend_from_slice(&o.carries_next);
    pag.nodes += o.nodes;
    pag.events += o.events;
    let moved = |e: &End| End {
        node: e.node + nodes,
        ..*e
    };
    own.sends.extend(os.sends.iter().map(moved));
    own.recvs.extend(os.recvs.iter().map(moved));
}

/// Builds the timelines of `lanes` (the first of them lane `first_lane`)
/// into `pag`, cleared first, and their message ends into `scratch`.
fn build_lanes(
    pag: &mut Pag,
    scratch: &mut LaneScratch,
    lanes: &[LaneInput<'_>],
    first_lane: u32,
    ws: u64,
    we: u64,
    compact: bool,
) {
    let logged: usize = lanes.iter().map(|l| l.events.len()).sum();
    reuse(&mut pag.starts, lanes.len());
    reuse(&mut pag.ends, lanes.len());
    reuse(&mut pag.edges, logged / 2 + 2 * lanes.len());
    reuse(&mut pag.pieces, logged);
    reuse(&mut pag.carries_next, logged / 2 + 2 * lanes.len());
    (pag.nodes, pag.first_message, pag.events) = (0, 0, 0);
    let LaneScratch {
        sends,
        recvs,
        spans,
        instants,
        segs,
    } = scratch;
    reuse(sends, logged / 4);
    reuse(recvs, logged / 4);
    for (lane_ix, lane) in lanes.iter().enumerate() {
        let lane_ix = first_lane + lane_ix as u32;
        spans.clear();
        instants.clear();
        for e in lane.events {
            if e.kind.is_instant() {
                if e.start >= ws && e.start <= we {
                    instants.push((e.start, *e));
                }
            } else if e.end > ws && e.start < we {
                spans.push(Segment {
                    start: e.start.max(ws),
                    end: e.end.min(we),
                    kind: e.kind,
                    op: e.op,
                });
            }
        }
        pag.events += spans.len() + instants.len();
        // Parents before their children. A ring holds events in the order
        // they ended, which is this order but for nested spans: check
        // before sorting.
        let parents_first =
            |a: &Segment, b: &Segment| a.start.cmp(&b.start).then(b.end.cmp(&a.end));
        if !spans.is_sorted_by(|a, b| parents_first(a, b).is_le()) {
            spans.sort_unstable_by(parents_first);
        }
        if !instants.is_sorted_by_key(|(t, _)| *t) {
            instants.sort_by_key(|(t, _)| *t);
        }
        flatten(spans, lane.gap, ws, we, segs);

        let mut run = Run {
            lane: lane_ix,
            node: new_node(pag),
            t: ws,
            first_piece: pag.pieces.len() as u32,
            waits: false,
            compact,
        };
        pag.starts.push(run.node);
        let mut ii = 0;
        for seg in segs.iter() {
            let mut from = seg.start;
            while ii < instants.len() && instants[ii].0 <= seg.end {
                let (t, e) = instants[ii];
                let t = t.max(from);
                run.piece(pag, from, t, seg);
                run.close(pag, t);
                let end = End {
                    id: e.id,
                    t,
                    node: run.node,
                    lane: lane_ix,
                };
                if e.kind.is_send() {
                    sends.push(end);
                } else {
                    recvs.push(end);
                }
                from = t;
                ii += 1;
            }
            run.piece(pag, from, seg.end, seg);
        }
        run.close(pag, we);
        pag.ends.push(run.node);
    }
}

/// One end of a message: its point in the graph.
#[derive(Clone, Copy)]
struct End {
    id: u64,
    t: u64,
    node: u32,
    lane: u32,
}

/// Calls `edge` with each receive end and the send end of its id (the
/// last one logged, should an id repeat), in the order of `recvs`. Ids are
/// first split into parts of about 2k sends by their hash, and each part
/// joined with a table of its own: one table for a whole window missed the
/// cache on nearly every look-up, which was a third of the analysis. The
/// edges then come in the receive ends' order (lane by lane, in time), so
/// that later passes read the graph's points in a few ordered streams
/// rather than in the hash's order.
fn join(
    j: &mut JoinScratch,
    sends: &[End],
    recvs: &[End],
    split: bool,
    mut edge: impl FnMut(&End, &End),
) {
    let bits = (sends.len() / 2048)
        .max(1)
        .next_power_of_two()
        .trailing_zeros()
        .min(13);
    // Bits of the hash that neither the table's buckets nor its tags use
    // (see `IdHasher`), so a part's ids still spread in its table.
    let part = |id: u64| ((id.wrapping_mul(ID_MIX) >> 44) & ((1 << bits) - 1)) as usize;
    let JoinScratch {
        sends_by_part,
        s_first,
        recvs_by_part,
        r_first,
        tables: [table, other_table],
        found,
        send_of,
    } = j;
    both(
        split,
        || scatter(sends, 1 << bits, part, sends_by_part, s_first),
        || scatter(recvs, 1 << bits, part, recvs_by_part, r_first),
    );
    // The parts are independent: on two cores each half of them is
    // matched with a table of its own, into its own range of `found`.
    let parts = 1 << bits;
    let half = parts / 2;
    found.clear();
    found.resize(recvs.len(), u32::MAX);
    let (found_first, found_second) = found.split_at_mut(r_first[half]);
    let (sends_by_part, s_first, recvs_by_part, r_first) =
        (&**sends_by_part, &**s_first, &**recvs_by_part, &**r_first);
    let ends = Parts {
        sends_by_part,
        s_first,
        recvs_by_part,
        r_first,
    };
    both(
        split,
        || ends.match_in(0..half, table, found_first),
        || ends.match_in(half..parts, other_table, found_second),
    );
    // For each receive end, the index of its send end in `sends`.
    send_of.clear();
    send_of.resize(recvs.len(), u32::MAX);
    for (&(_, r), &i) in recvs_by_part.iter().zip(found.iter()) {
        send_of[r as usize] = i;
    }
    for (r, &i) in recvs.iter().zip(send_of.iter()) {
        if i != u32::MAX {
            edge(&sends[i as usize], r);
        }
    }
}

/// Message ends grouped by part (see [`scatter`]).
#[derive(Clone, Copy)]
struct Parts<'a> {
    sends_by_part: &'a [(u64, u32)],
    s_first: &'a [usize],
    recvs_by_part: &'a [(u64, u32)],
    r_first: &'a [usize],
}

impl Parts<'_> {
    /// Sets `found[k]` to the index in `sends` of the send end of the
    /// `k`-th receive end of `parts` (in `recvs_by_part`'s order), where
    /// there is one.
    fn match_in(
        self,
        parts: std::ops::Range<usize>,
        table: &mut HashMap<u64, u32, BuildHasherDefault<IdHasher>>,
        found: &mut [u32],
    ) {
        let largest = parts
            .clone()
            .map(|p| self.s_first[p + 1] - self.s_first[p])
            .max()
            .unwrap_or(0);
        table.clear();
        table.reserve(largest);
        let base = self.r_first[parts.start];
        for p in parts {
            table.clear();
            for &(id, i) in &self.sends_by_part[self.s_first[p]..self.s_first[p + 1]] {
                table.insert(id, i);
            }
            let (from, to) = (self.r_first[p], self.r_first[p + 1]);
            for (slot, &(id, _)) in found[from - base..to - base]
                .iter_mut()
                .zip(&self.recvs_by_part[from..to])
            {
                if let Some(&i) = table.get(&id) {
                    *slot = i;
                }
            }
        }
    }
}

/// The join's buffers (see [`GraphScratch`]).
#[derive(Default)]
struct JoinScratch {
    sends_by_part: Vec<(u64, u32)>,
    s_first: Vec<usize>,
    recvs_by_part: Vec<(u64, u32)>,
    r_first: Vec<usize>,
    /// One per core.
    tables: [HashMap<u64, u32, BuildHasherDefault<IdHasher>>; 2],
    /// Per receive end in `recvs_by_part`, its send end's index.
    found: Vec<u32>,
    send_of: Vec<u32>,
}

/// Fills `out` with `(id, index in ends)` of `ends` grouped by `part` (in
/// their order within a part), and `first` with where each part begins.
fn scatter(
    ends: &[End],
    parts: usize,
    part: impl Fn(u64) -> usize,
    out: &mut Vec<(u64, u32)>,
    first: &mut Vec<usize>,
) {
    first.clear();
    first.resize(parts + 1, 0);
    for e in ends {
        first[part(e.id) + 1] += 1;
    }
    for p in 0..parts {
        first[p + 1] += first[p];
    }
    // Each part's next free slot, walking up from its start: `first[p]`
    // is restored from `first[p - 1]`'s end below.
    out.clear();
    out.resize(ends.len(), (0, 0));
    for (i, e) in ends.iter().enumerate() {
        let p = part(e.id);
        out[first[p]] = (e.id, i as u32);
        first[p] += 1;
    }
    // `first[p]` is now where part `p + 1` begins.
    for p in (1..=parts).rev() {
        first[p] = first[p - 1];
    }
    first[0] = 0;
}

/// The open run of one lane: the activities since its last node.
struct Run {
    lane: u32,
    /// The node the run starts at, and its time.
    node: u32,
    t: u64,
    first_piece: u32,
    /// Whether the run is waiting (it carries no critical paths).
    waits: bool,
    compact: bool,
}

impl Run {
    /// Adds `[from, to)` of `seg`; a change between waiting and working
    /// (or, not compacting, any new piece) ends the run first.
    fn piece(&mut self, pag: &mut Pag, from: u64, to: u64, seg: &Segment) {
        if to <= from {
            return;
        }
        let waits = seg.kind == Kind::Waiting;
        if waits != self.waits || !self.compact {
            self.close(pag, from);
            self.waits = waits;
        }
        pag.pieces.push(Piece {
            w: to - from,
            kind: seg.kind,
            op: seg.op,
        });
    }

    /// Ends the run at `t` (a node there); nothing when it is empty.
    fn close(&mut self, pag: &mut Pag, t: u64) {
        let end = pag.pieces.len() as u32;
        if end == self.first_piece {
            return;
        }
        let to = new_node(pag);
        debug_assert_eq!(to, self.node + 1, "a lane's points are numbered in a row");
        pag.carries_next[self.node as usize] = !self.waits;
        let first = pag.pieces[self.first_piece as usize].kind;
        pag.edges.push(PagEdge {
            from: self.node,
            to,
            w: t - self.t,
            kind: if self.waits { Kind::Waiting } else { first },
            lane: self.lane,
            to_lane: self.lane,
            first_piece: self.first_piece,
            pieces: end - self.first_piece,
        });
        (self.node, self.t, self.first_piece) = (to, t, end);
    }
}

const ID_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// Message ids are unique and already spread: a multiply is hash enough
/// (SipHash was a fifth of the analysis). A table takes its buckets from
/// the hash's low bits and its tags from the top 7.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }

    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = (self.0 ^ id).wrapping_mul(ID_MIX);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

fn new_node(pag: &mut Pag) -> u32 {
    pag.carries_next.push(false);
    pag.nodes += 1;
    (pag.nodes - 1) as u32
}

/// Turns spans sorted parents-first into segments covering `[ws, we]`
/// exactly, the innermost span owning each instant, gaps as `gap`.
fn flatten(spans: &[Segment], gap: Kind, ws: u64, we: u64, out: &mut Vec<Segment>) {
    out.clear();
    let gap = Segment {
        start: 0,
        end: we,
        kind: gap,
        op: NO_OP,
    };
    let push = |out: &mut Vec<Segment>, from: u64, to: u64, label: &Segment| {
        if to <= from {
            return;
        }
        if let Some(last) = out.last_mut()
            && last.end == from
            && last.kind == label.kind
            && last.op == label.op
        {
            last.end = to;
            return;
        }
        out.push(Segment {
            start: from,
            end: to,
            kind: label.kind,
            op: label.op,
        });
    };
    let mut cur = ws;
    let mut stack: Vec<Segment> = Vec::new();
    for sp in spans {
        while let Some(top) = stack.last().copied()
            && top.end <= sp.start
        {
            push(out, cur, top.end, &top);
            cur = cur.max(top.end);
            stack.pop();
        }
        let label = stack.last().copied().unwrap_or(gap);
        push(out, cur, sp.start, &label);
        cur = cur.max(sp.start);
        // A child never outlives its parent.
        let end = sp.end.min(label.end);
        stack.push(Segment { end, ..*sp });
    }
    while let Some(top) = stack.pop() {
        push(out, cur, top.end, &top);
        cur = cur.max(top.end);
    }
    push(out, cur, we, &gap);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_spans_flatten_innermost_first_and_gaps_fill() {
        let events = [
            Event::span(10, 50, Kind::Processing, 0),
            Event::span(20, 30, Kind::Waiting, NO_OP),
            Event::span(60, 200, Kind::Processing, 1), // clipped at 100
        ];
        let lanes = [LaneInput {
            gap: Kind::Unknown,
            events: &events,
        }];
        let pag = build_with(&lanes, 0, 100, false);
        let got: Vec<(u64, Kind, u16)> = pag
            .edges
            .iter()
            .map(|e| (e.w, e.kind, pag.pieces_of(e)[0].op))
            .collect();
        assert!(pag.edges.iter().all(|e| e.pieces == 1));
        assert_eq!(
            got,
            vec![
                (10, Kind::Unknown, NO_OP),
                (10, Kind::Processing, 0),
                (10, Kind::Waiting, NO_OP),
                (20, Kind::Processing, 0),
                (10, Kind::Unknown, NO_OP),
                (40, Kind::Processing, 1),
            ]
        );
        assert_eq!(pag.edges.iter().map(|e| e.w).sum::<u64>(), 100);

        // Compacted, the same pieces in the same order, with a node only
        // where the lane starts and stops waiting.
        let compact = build(&lanes, 0, 100);
        let runs: Vec<(u64, Kind, usize)> = compact
            .edges
            .iter()
            .map(|e| (e.w, e.kind, compact.pieces_of(e).len()))
            .collect();
        assert_eq!(
            runs,
            vec![
                (20, Kind::Unknown, 2),
                (10, Kind::Waiting, 1),
                (70, Kind::Processing, 3)
            ]
        );
        let pieces: Vec<(u64, Kind, u16)> =
            compact.pieces.iter().map(|p| (p.w, p.kind, p.op)).collect();
        assert_eq!(pieces, got);
        assert_eq!(compact.nodes, 4);
    }

    #[test]
    fn ends_join_in_parts_as_in_one_table() {
        // Enough sends for several parts; some ids repeat (the last send
        // logged counts), some receives have no send.
        let (mut sends, mut recvs) = (Vec::new(), Vec::new());
        let end = |id, t, node, lane| End { id, t, node, lane };
        for i in 0..20_000u64 {
            let id = i.wrapping_mul(0x2545_F491_4F6C_DD1D) | ((i % 2) << 63);
            sends.push(end(id, i, i as u32, 0));
            if i % 7 == 0 {
                sends.push(end(id, i + 1, i as u32 + 1, 0));
            }
            if i % 5 != 0 {
                recvs.push(end(id, i + 3, 0, 1));
            }
        }
        let mut one_table = HashMap::new();
        for s in &sends {
            one_table.insert(s.id, s.node);
        }
        assert!(!one_table.contains_key(&42));
        recvs.push(end(42, 5, 0, 1));
        let mut want: Vec<(u64, u32)> = recvs
            .iter()
            .filter_map(|r| one_table.get(&r.id).map(|&n| (r.id, n)))
            .collect();
        want.sort_unstable();
        // Buffers kept from a larger join, with more parts, and from a
        // smaller one give the same answer as fresh ones.
        let mut scratch = JoinScratch::default();
        let bigger: Vec<End> = (0..50_000).map(|i| end(i * 3 + 1, i, 7, 0)).collect();
        join(&mut scratch, &bigger, &bigger, true, |_, _| {});
        for split in [false, true, false] {
            let mut got = Vec::new();
            join(&mut scratch, &sends, &recvs, split, |s, r| {
                got.push((r.id, s.node))
            });
            got.sort_unstable();
            assert_eq!(got.len(), 16_000);
            assert_eq!(got, want);
        }
        let mut got = 0;
        join(&mut scratch, &sends[..100], &recvs[..100], false, |_, _| {
            got += 1
        });
        assert!(got > 50, "{got}");
    }

    #[test]
    fn messages_join_by_id_across_lanes() {
        let a = [
            Event::span(0, 40, Kind::Processing, 0),
            Event {
                start: 40,
                end: 40,
                kind: Kind::DataSend,
                op: NO_OP,
                id: DATA_BIT | 7,
            },
        ];
        let b = [
            Event::span(0, 60, Kind::Waiting, NO_OP),
            Event {
                start: 60,
                end: 60,
                kind: Kind::DataRecv,
                op: NO_OP,
                id: DATA_BIT | 7,
            },
            Event::span(60, 100, Kind::Processing, 1),
        ];
        let pag = build(
            &[
                LaneInput {
                    gap: Kind::Unknown,
                    events: &a,
                },
                LaneInput {
                    gap: Kind::Unknown,
                    events: &b,
                },
            ],
            0,
            100,
        );
        let m: Vec<&PagEdge> = pag.edges.iter().filter(|e| e.is_message()).collect();
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].w, m[0].lane, m[0].to_lane), (20, 0, 1));
        assert_eq!(m[0].kind, Kind::DataMessage);
    }
}
