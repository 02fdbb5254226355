//! One analysed window: critical participation and plain share of time,
//! summed per activity type, operator, lane (worker or exchange stream)
//! and peer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::cores::Cores;
use super::cp::{CpScratch, Participation, Paths, Tally, critical_participation_in};
use super::event::{Event, Kind, NO_OP};
use super::graph::{GraphScratch, LaneInput, Pag, PagEdge, build_into};

/// One lane's events with what the report names it by.
pub(crate) struct LaneView<'a> {
    pub(crate) label: String,
    /// The peer an exchange stream of this node goes to or comes from.
    pub(crate) peer: Option<&'a str>,
    /// The peer that logged the lane; `None` for this node's own.
    pub(crate) node: Option<&'a str>,
    pub(crate) gap: Kind,
    pub(crate) ops: &'a [Arc<str>],
    pub(crate) events: &'a [Event],
}

/// A component or activity with its critical participation (the share of
/// the window's critical paths through it, weighted by time) and its plain
/// share of time: for activities and operators, of all lanes' time; for a
/// worker or peer, the busy (not waiting) share of its own lanes' time.
/// `None` for messages, which overlap the lanes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub name: String,
    pub cp: f64,
    pub share: Option<f64>,
}

/// What `GET /trace` answers per window.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WindowReport {
    /// The window's start, Unix time in milliseconds.
    pub start_unix_ms: u64,
    pub window_ms: u64,
    /// Timelines in the graph: workers and exchange streams.
    pub lanes: usize,
    /// Activity events inside the window.
    pub events: usize,
    /// Events lost because a lane's buffer was full (since the last window).
    pub dropped: u64,
    /// Which paths CP is over: `"spanning"` (SnailTrail's, from the
    /// window's start to its end), `"busy"` (no path spans the window,
    /// because every lane waited at some moment: the maximal paths between
    /// waits), or `"none"` (nothing but waiting).
    pub paths: String,
    /// log10 of the number of those paths.
    pub paths_log10: Option<f64>,
    /// Time the analysis of this window took.
    pub analysis_ms: f64,
    pub activities: Vec<Row>,
    pub operators: Vec<Row>,
    pub workers: Vec<Row>,
    /// Only in a distributed run: each member by the lanes it logged (with
    /// the peers' logs in the window), else this node and each peer its
    /// exchange streams talk to.
    pub peers: Vec<Row>,
}

/// How the `peers` rows call the node that analyses.
const THIS_NODE: &str = "(this node)";

#[derive(Default)]
struct Acc {
    /// name → (CP, time, whether time is counted)
    rows: HashMap<String, (f64, u64, bool)>,
}

impl Acc {
    fn add(&mut self, name: &str, cp: f64, time_ns: Option<u64>) {
        let slot = match self.rows.get_mut(name) {
            Some(s) => s,
            None => self.rows.entry(name.to_string()).or_default(),
        };
        slot.0 += cp;
        if let Some(t) = time_ns {
            slot.1 += t;
            slot.2 = true;
        }
    }

    /// `lane_time(name)`: the time a row's share is of.
    fn rows(self, lane_time: impl Fn(&str) -> f64) -> Vec<Row> {
        let mut rows: Vec<Row> = self
            .rows
            .into_iter()
            .map(|(name, (cp, t, timed))| Row {
                share: timed.then(|| t as f64 / lane_time(&name).max(1.0)),
                name,
                cp,
            })
            .collect();
        crate::cold_sort::sort_by(&mut rows, |a, b| {
            b.cp.total_cmp(&a.cp)
                .then(b.share.unwrap_or(0.0).total_cmp(&a.share.unwrap_or(0.0)))
                .then(a.name.cmp(&b.name))
        });
        rows
    }
}

/// (receiving lane, sending lane, activity, operator)
type GroupKey = (u32, u32, Kind, u16);

/// The dimensions of [`Tables`]: lanes, and operator slots per lane (the
/// last one for no operator).
#[derive(Clone, Copy)]
struct Shape {
    lanes: usize,
    slots: usize,
}

impl Shape {
    fn local_ix(self, lane: u32, kind: Kind, op: u16) -> usize {
        let op = (op as usize).min(self.slots - 1);
        (lane as usize * Kind::COUNT + kind as usize) * self.slots + op
    }

    fn message_ix(self, to_lane: u32, from_lane: u32, kind: Kind) -> usize {
        let k = usize::from(kind == Kind::ControlMessage);
        (to_lane as usize * self.lanes + from_lane as usize) * 2 + k
    }
}

/// CP and time summed per (lane, kind, operator) of local edges, and per
/// (receiving lane, sending lane, kind) of messages, with whether any
/// message was there: few distinct keys, so that the named rows cost
/// nothing per edge.
struct Tables<'p> {
    pag: &'p Pag,
    shape: Shape,
    local: Vec<(f64, u64)>,
    messages: Vec<(f64, u64, bool)>,
}

impl<'p> Tables<'p> {
    fn new(pag: &'p Pag, shape: Shape) -> Tables<'p> {
        Tables {
            pag,
            shape,
            local: vec![(0.0, 0); shape.lanes * Kind::COUNT * shape.slots],
            messages: vec![(0.0, 0, false); shape.lanes * shape.lanes * 2],
        }
    }
}

impl Tally for Tables<'_> {
    /// A local edge's CP is shared among its pieces by duration: every
    /// path through one of them runs through all.
    fn add(&mut self, e: &PagEdge, c: f64) {
        if e.is_message() {
            let g = &mut self.messages[self.shape.message_ix(e.to_lane, e.lane, e.kind)];
            g.0 += c;
            g.1 += e.w;
            g.2 = true;
            return;
        }
        let per_ns = if e.w > 0 { c / e.w as f64 } else { 0.0 };
        for p in self.pag.pieces_of(e) {
            let g = &mut self.local[self.shape.local_ix(e.lane, p.kind, p.op)];
            g.0 += per_ns * p.w as f64;
            g.1 += p.w;
        }
    }

    fn merge(&mut self, later: Self) {
        for (g, h) in self.local.iter_mut().zip(later.local) {
            g.0 += h.0;
            g.1 += h.1;
        }
        for (g, h) in self.messages.iter_mut().zip(later.messages) {
            g.0 += h.0;
            g.1 += h.1;
            g.2 |= h.2;
        }
    }
}

/// What an analysis builds, kept by whoever analyses window after window
/// so that each reuses the memory of the one before: allocated afresh,
/// a window of a million events was fresh pages from the kernel each
/// time, a third of its analysis.
#[derive(Default)]
pub(crate) struct Analysis {
    pag: Pag,
    graph: GraphScratch,
    cp: CpScratch,
    /// The most events a window analysed in this memory had.
    sized_for: usize,
    pub(crate) cores: Cores,
}

/// Builds the graph of `[ws, we)` in `a`'s memory and sums its critical
/// participation. `start_unix_ms` and `dropped` are left for the caller.
pub(crate) fn analyze<'a>(
    a: &mut Analysis,
    lanes: &[LaneView<'a>],
    ws: u64,
    we: u64,
) -> WindowReport {
    let started = Instant::now();
    // What a burst left is let go once windows are a quarter of its size.
    let logged: usize = lanes.iter().map(|l| l.events.len()).sum();
    if logged.saturating_mul(4) < a.sized_for {
        *a = Analysis {
            cores: a.cores,
            ..Analysis::default()
        };
    }
    a.sized_for = a.sized_for.max(logged);
    let inputs: Vec<LaneInput<'_>> = lanes
        .iter()
        .map(|l| LaneInput {
            gap: l.gap,
            events: l.events,
        })
        .collect();
    let Analysis {
        pag,
        graph,
        cp,
        cores,
        ..
    } = a;
    build_into(pag, graph, &inputs, ws, we, true, *cores);
    let slots = lanes.iter().map(|l| l.ops.len()).max().unwrap_or(0) + 1;
    let shape = Shape {
        lanes: lanes.len(),
        slots,
    };
    let pag = &*pag;
    let Participation {
        tally,
        scale,
        ln_paths,
        paths,
    } = critical_participation_in(pag, cp, *cores, || Tables::new(pag, shape));
    let Tables {
        local, messages, ..
    } = tally;
    let (mut activities, mut operators, mut workers, mut peers) = (
        Acc::default(),
        Acc::default(),
        Acc::default(),
        Acc::default(),
    );
    let any_peer = lanes.iter().any(|l| l.peer.is_some() || l.node.is_some());
    // With the peers' own lanes in the graph, a lane is its member's; with
    // this node's alone, an exchange stream stands for the peer it talks to.
    let by_node = lanes.iter().any(|l| l.node.is_some());
    let member = |l: &LaneView<'a>| {
        if by_node {
            l.node.unwrap_or(THIS_NODE)
        } else {
            l.peer.unwrap_or(THIS_NODE)
        }
    };
    let mut groups: Vec<(GroupKey, (f64, u64))> = Vec::new();
    for lane in 0..lanes.len() as u32 {
        for kind in Kind::ALL {
            for op in 0..slots {
                let g = local[shape.local_ix(lane, kind, op as u16)];
                if g.1 > 0 {
                    let op = if op + 1 == slots { NO_OP } else { op as u16 };
                    groups.push(((lane, lane, kind, op), (g.0 * scale, g.1)));
                }
            }
        }
        for from in 0..lanes.len() {
            for kind in [Kind::DataMessage, Kind::ControlMessage] {
                let g = messages[shape.message_ix(lane, from as u32, kind)];
                if g.2 {
                    groups.push(((lane, from as u32, kind, NO_OP), (g.0 * scale, g.1)));
                }
            }
        }
    }
    for &((to_lane, from_lane, kind, op), (c, w)) in &groups {
        let message = matches!(kind, Kind::DataMessage | Kind::ControlMessage);
        let time = (!message).then_some(w);
        activities.add(kind.name(), c, time);
        // A message is charged to the lane that takes it: its time in a
        // queue is the receiver not keeping up.
        let lane = &lanes[to_lane as usize];
        // Per lane, the share is of busy time: a lane is there all along.
        let busy = time.filter(|_| kind != Kind::Waiting);
        workers.add(&lane.label, c, busy.or(time.map(|_| 0)));
        if op != NO_OP
            && let Some(name) = lane.ops.get(op as usize)
        {
            match kind {
                Kind::Processing => operators.add(name, c, time),
                k => operators.add(&format!("{name} ({})", k.name()), c, time),
            }
        }
        if any_peer {
            // A message from an incoming exchange stream is the peer's.
            let peer = if by_node || lane.peer.is_some() {
                member(lane)
            } else {
                member(&lanes[from_lane as usize])
            };
            peers.add(peer, c, busy.or(time.map(|_| 0)));
        }
    }
    let span = pag.span as f64;
    let all_lanes = span * lanes.len() as f64;
    let mut per_label: HashMap<&str, f64> = HashMap::new();
    let mut per_peer: HashMap<&str, f64> = HashMap::new();
    for l in lanes {
        *per_label.entry(&l.label).or_default() += span;
        *per_peer.entry(member(l)).or_default() += span;
    }
    WindowReport {
        start_unix_ms: 0,
        window_ms: pag.span / 1_000_000,
        lanes: lanes.len(),
        events: pag.events,
        dropped: 0,
        paths: match paths {
            Paths::Spanning => "spanning",
            Paths::Busy => "busy",
            Paths::None => "none",
        }
        .to_string(),
        paths_log10: (ln_paths > f64::NEG_INFINITY).then(|| ln_paths / std::f64::consts::LN_10),
        analysis_ms: started.elapsed().as_secs_f64() * 1e3,
        activities: activities.rows(|_| all_lanes),
        operators: operators.rows(|_| all_lanes),
        workers: workers.rows(|n| per_label.get(n).copied().unwrap_or(span)),
        peers: peers.rows(|n| per_peer.get(n).copied().unwrap_or(span)),
    }
}
