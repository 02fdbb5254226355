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

use super::event::{DATA_BIT, Event, Kind, NO_OP};

/// One lane's events as the analysis sees them.
pub(crate) struct LaneInput<'a> {
    /// What fills time no span covers.
    pub(crate) gap: Kind,
    pub(crate) events: &'a [Event],
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct PagEdge {
    pub(crate) from: u32,
    pub(crate) to: u32,
    /// Duration in nanoseconds.
    pub(crate) w: u64,
    pub(crate) kind: Kind,
    pub(crate) op: u16,
    /// The lane a local edge is on; for a message, the sending lane.
    pub(crate) lane: u32,
    /// For a message, the receiving lane; else `lane`.
    pub(crate) to_lane: u32,
}

impl PagEdge {
    pub(crate) fn is_message(&self) -> bool {
        matches!(self.kind, Kind::DataMessage | Kind::ControlMessage)
    }
}

pub(crate) struct Pag {
    pub(crate) nodes: usize,
    /// Each lane's node at the window's start, and at its end.
    pub(crate) starts: Vec<u32>,
    pub(crate) ends: Vec<u32>,
    pub(crate) edges: Vec<PagEdge>,
    /// The window's length in nanoseconds.
    pub(crate) span: u64,
    /// Events inside the window.
    pub(crate) events: usize,
}

#[derive(Clone, Copy)]
struct Segment {
    start: u64,
    end: u64,
    kind: Kind,
    op: u16,
}

/// Builds the PAG of `[ws, we)` from each lane's events (in any order).
pub(crate) fn build(lanes: &[LaneInput<'_>], ws: u64, we: u64) -> Pag {
    let logged: usize = lanes.iter().map(|l| l.events.len()).sum();
    let mut pag = Pag {
        nodes: 0,
        starts: Vec::with_capacity(lanes.len()),
        ends: Vec::with_capacity(lanes.len()),
        // A span makes up to two edges (itself and the gap after it).
        edges: Vec::with_capacity(logged * 2),
        span: we.saturating_sub(ws),
        events: 0,
    };
    // Send ends by id; receive ends to join once every lane is in.
    let mut sends: HashMap<u64, (u32, u64, u32), BuildHasherDefault<IdHasher>> =
        HashMap::with_capacity_and_hasher(logged / 4, Default::default());
    let mut recvs: Vec<(u64, u32, u64, u32)> = Vec::new();
    let mut spans = Vec::new();
    let mut instants: Vec<(u64, Event)> = Vec::new();
    let mut segs = Vec::new();
    for (lane_ix, lane) in lanes.iter().enumerate() {
        let lane_ix = lane_ix as u32;
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
        // Parents before their children.
        spans.sort_unstable_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        instants.sort_unstable_by_key(|(t, _)| *t);
        flatten(&spans, lane.gap, ws, we, &mut segs);

        let mut last = new_node(&mut pag);
        pag.starts.push(last);
        let mut last_t = ws;
        let mut ii = 0;
        for seg in &segs {
            while ii < instants.len() && instants[ii].0 <= seg.end {
                let (t, e) = instants[ii];
                let t = t.max(last_t);
                if t > last_t {
                    let n = new_node(&mut pag);
                    local_edge(&mut pag, last, n, t - last_t, seg, lane_ix);
                    (last, last_t) = (n, t);
                }
                if e.kind.is_send() {
                    sends.insert(e.id, (last, t, lane_ix));
                } else {
                    recvs.push((e.id, last, t, lane_ix));
                }
                ii += 1;
            }
            if seg.end > last_t {
                let n = new_node(&mut pag);
                local_edge(&mut pag, last, n, seg.end - last_t, seg, lane_ix);
                (last, last_t) = (n, seg.end);
            }
        }
        pag.ends.push(last);
    }
    for (id, node, t, lane) in recvs {
        if let Some(&(from, sent, from_lane)) = sends.get(&id)
            && sent <= t
        {
            pag.edges.push(PagEdge {
                from,
                to: node,
                w: t - sent,
                kind: if id & DATA_BIT != 0 {
                    Kind::DataMessage
                } else {
                    Kind::ControlMessage
                },
                op: NO_OP,
                lane: from_lane,
                to_lane: lane,
            });
        }
    }
    pag
}

/// Message ids are unique and already spread: a multiply is hash enough
/// (SipHash was a fifth of the analysis).
#[derive(Default)]
pub(crate) struct IdHasher(u64);

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
        self.0 = (self.0 ^ id).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

fn new_node(pag: &mut Pag) -> u32 {
    pag.nodes += 1;
    (pag.nodes - 1) as u32
}

fn local_edge(pag: &mut Pag, from: u32, to: u32, w: u64, seg: &Segment, lane: u32) {
    pag.edges.push(PagEdge {
        from,
        to,
        w,
        kind: seg.kind,
        op: seg.op,
        lane,
        to_lane: lane,
    });
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

    fn span(start: u64, end: u64, kind: Kind, op: u16) -> Event {
        Event {
            start,
            end,
            kind,
            op,
            id: 0,
        }
    }

    #[test]
    fn nested_spans_flatten_innermost_first_and_gaps_fill() {
        let events = [
            span(10, 50, Kind::Processing, 0),
            span(20, 30, Kind::Waiting, NO_OP),
            span(60, 200, Kind::Processing, 1), // clipped at 100
        ];
        let pag = build(
            &[LaneInput {
                gap: Kind::Unknown,
                events: &events,
            }],
            0,
            100,
        );
        let got: Vec<(u64, Kind, u16)> = pag.edges.iter().map(|e| (e.w, e.kind, e.op)).collect();
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
    }

    #[test]
    fn messages_join_by_id_across_lanes() {
        let a = [
            span(0, 40, Kind::Processing, 0),
            Event {
                start: 40,
                end: 40,
                kind: Kind::DataSend,
                op: NO_OP,
                id: DATA_BIT | 7,
            },
        ];
        let b = [
            span(0, 60, Kind::Waiting, NO_OP),
            Event {
                start: 60,
                end: 60,
                kind: Kind::DataRecv,
                op: NO_OP,
                id: DATA_BIT | 7,
            },
            span(60, 100, Kind::Processing, 1),
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
