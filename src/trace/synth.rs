//! Seeded synthetic activity logs shaped like a distributed pipeline, for
//! `eddy bench trace` (analysis speed on a window of known size) and tests.

use std::sync::Arc;

use super::event::{DATA_BIT, Event, Kind, NO_OP};
use super::lane::{LaneName, wire_id};
use super::report::{Analysis, LaneView, WindowReport, analyze};

pub(crate) struct SynthLane {
    pub(crate) name: LaneName,
    pub(crate) ops: Vec<Arc<str>>,
    pub(crate) events: Vec<Event>,
}

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// `nodes × workers` workers over `[0, span_ns)` running the loop of
/// `exec::worker` on the pipeline of `eddy bench trace` (generator → map →
/// keyed window → sink), logging what the engine logs, in the order a
/// lane's ring hands it over, about `events_per_worker` events each. Per
/// turn of its loop a worker takes what its inboxes hold (a receive and a
/// window call per batch or watermark), polls its source (the generator's
/// and the map's calls), splits the batch by key (a data message to some
/// of the other workers, a window call for its own rows), advances the
/// watermark (the map's and the window's calls, a control message to every
/// other worker), then parks until its next batch is due or a message
/// comes. Messages to another node go through an outgoing exchange lane
/// (serialization) and an incoming one (deserialization), as
/// `exec::remote` logs them.
pub(crate) fn pipeline(
    nodes: usize,
    workers: usize,
    span_ns: u64,
    events_per_worker: usize,
    seed: u64,
) -> Vec<SynthLane> {
    // A turn logs a few dozen events: guess the turn's length, then scale
    // it to the density asked for.
    let guess = (span_ns / (events_per_worker as u64 / 20).max(1)).max(1000);
    let total = nodes * workers;
    let first = Sim::run(nodes, workers, span_ns, guess, seed);
    let logged: usize = first.iter().take(total).map(|l| l.events.len()).sum();
    let per_worker = (logged / total.max(1)).max(1) as u64;
    let turn = (guess * per_worker / (events_per_worker as u64).max(1)).max(1000);
    Sim::run(nodes, workers, span_ns, turn, seed)
}

/// The simulated run behind [`pipeline`].
struct Sim {
    rng: Rng,
    workers: usize,
    lanes: Vec<SynthLane>,
    /// Messages on their way to each worker: (arrival, id).
    inbox: Vec<std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64)>>>,
    /// Exchange lanes by (from, to, outgoing), and when each is free.
    links: std::collections::HashMap<(usize, usize, bool), usize>,
    link_free: Vec<u64>,
    /// Batches sent per (from, to) stream, for their wire ids.
    stream_seq: std::collections::HashMap<(usize, usize), u64>,
    seq: u64,
    turn: u64,
    /// When each worker's next turn begins, and where its park is logged
    /// (a message wakes it early).
    now: Vec<u64>,
    parked: Vec<Option<usize>>,
    /// When each worker's source has its next batch.
    due: Vec<u64>,
}

impl Sim {
    fn run(nodes: usize, workers: usize, span_ns: u64, turn: u64, seed: u64) -> Vec<SynthLane> {
        let total = nodes * workers;
        let ops: Vec<Arc<str>> = ["gen", "map", "window"].map(Arc::from).to_vec();
        let mut sim = Sim {
            rng: Rng(seed),
            workers,
            lanes: (0..total)
                .map(|w| SynthLane {
                    name: LaneName::Worker(w),
                    ops: ops.clone(),
                    events: Vec::new(),
                })
                .collect(),
            inbox: (0..total).map(|_| Default::default()).collect(),
            links: Default::default(),
            link_free: Vec::new(),
            stream_seq: Default::default(),
            seq: 0,
            turn,
            now: Vec::new(),
            parked: vec![None; total],
            due: Vec::new(),
        };
        sim.now = (0..total).map(|_| sim.rng.below(turn)).collect();
        sim.due = sim.now.clone();
        while let Some((w, &t)) = sim.now.iter().enumerate().min_by_key(|(_, t)| **t) {
            if t >= span_ns {
                break;
            }
            sim.parked[w] = None;
            sim.now[w] = sim.turn_of(w, t, total);
        }
        sim.lanes
    }

    /// A duration of about `parts` thousandths of a turn.
    fn about(&mut self, parts: u64) -> u64 {
        let d = self.turn * parts / 1000;
        (d / 2 + self.rng.below(d.max(1))).max(1)
    }

    /// One turn of worker `w`'s loop from `t`; returns when the next
    /// begins.
    fn turn_of(&mut self, w: usize, mut t: u64, total: usize) -> u64 {
        // Inboxes: a window call per batch, a shorter one per watermark.
        while let Some(&std::cmp::Reverse((at, id))) = self.inbox[w].peek() {
            if at > t {
                break;
            }
            self.inbox[w].pop();
            let data = id & DATA_BIT != 0;
            let kind = if data {
                Kind::DataRecv
            } else {
                Kind::ControlRecv
            };
            self.lanes[w].events.push(Event::instant(t, kind, id));
            let d = if data { self.about(30) } else { self.about(5) };
            self.lanes[w]
                .events
                .push(Event::span(t, t + d, Kind::Processing, 2));
            t += d;
        }
        if t >= self.due[w] {
            self.due[w] = t + self.about(1000);
            t = self.poll(w, t, total);
        }
        // Parked until the next batch is due, or a message wakes it.
        let woken = self.inbox[w].peek().map_or(u64::MAX, |r| r.0.0);
        let until = self.due[w].min(woken).max(t + 1);
        self.parked[w] = Some(self.lanes[w].events.len());
        self.lanes[w]
            .events
            .push(Event::span(t, until, Kind::Waiting, NO_OP));
        until
    }

    /// The source's batch through the map, split by key; the watermark
    /// advances. Returns when it is done.
    fn poll(&mut self, w: usize, mut t: u64, total: usize) -> u64 {
        for (op, parts) in [(0, 30), (1, 20)] {
            let d = self.about(parts);
            self.lanes[w]
                .events
                .push(Event::span(t, t + d, Kind::Processing, op));
            t += d;
        }
        for to in 0..total {
            if to != w && self.rng.below(2) == 0 {
                self.send(w, to, t, true);
            }
        }
        let d = self.about(30);
        self.lanes[w]
            .events
            .push(Event::span(t, t + d, Kind::Processing, 2));
        t += d;
        // The watermark advances: the map's call, one to every other
        // worker, the window's call.
        let d = self.about(5);
        self.lanes[w]
            .events
            .push(Event::span(t, t + d, Kind::Processing, 1));
        t += d;
        for to in 0..total {
            if to != w {
                self.send(w, to, t, false);
            }
        }
        let d = self.about(5);
        self.lanes[w]
            .events
            .push(Event::span(t, t + d, Kind::Processing, 2));
        t + d
    }

    /// A message for `to` arrives at `at`: into its inbox, and a parked
    /// worker wakes.
    fn deliver(&mut self, to: usize, at: u64, id: u64) {
        self.inbox[to].push(std::cmp::Reverse((at, id)));
        if let Some(ix) = self.parked[to]
            && at < self.now[to]
        {
            let park = &mut self.lanes[to].events[ix];
            park.end = at.max(park.start + 1);
            self.now[to] = park.end;
            self.parked[to] = None;
        }
    }

    fn link(&mut self, from: usize, to: usize, outgoing: bool) -> usize {
        let workers = self.workers;
        let lanes = &mut self.lanes;
        let link_free = &mut self.link_free;
        *self.links.entry((from, to, outgoing)).or_insert_with(|| {
            let peer = if outgoing { to } else { from } / workers;
            lanes.push(SynthLane {
                name: LaneName::Link {
                    peer: format!("node-{peer}"),
                    outgoing,
                    edge: 0,
                    from,
                    to,
                },
                ops: Vec::new(),
                events: Vec::new(),
            });
            link_free.push(0);
            lanes.len() - 1
        })
    }

    /// A batch or watermark from `w` to `to` at `t`, through the exchange
    /// lanes when `to` is on another node.
    fn send(&mut self, w: usize, to: usize, t: u64, data: bool) {
        self.seq += 1;
        let id = if data { DATA_BIT | self.seq } else { self.seq };
        let send = if data {
            Kind::DataSend
        } else {
            Kind::ControlSend
        };
        let recv = if data {
            Kind::DataRecv
        } else {
            Kind::ControlRecv
        };
        self.lanes[w].events.push(Event::instant(t, send, id));
        if w / self.workers == to / self.workers {
            let at = t + self.about(2);
            self.deliver(to, at, id);
            return;
        }
        let (out, inc) = (self.link(w, to, true), self.link(w, to, false));
        let (out_free, inc_free) = (out - self.links_base(), inc - self.links_base());
        let mut at = (t + self.about(2)).max(self.link_free[out_free]);
        self.lanes[out].events.push(Event::instant(at, recv, id));
        let wire = if data {
            let seq = self.stream_seq.entry((w, to)).or_default();
            *seq += 1;
            let seq = *seq;
            let d = self.about(5);
            self.lanes[out]
                .events
                .push(Event::span(at, at + d, Kind::Serialization, NO_OP));
            at += d;
            let wire = wire_id(1, 0, w, to, seq);
            self.lanes[out]
                .events
                .push(Event::instant(at, Kind::DataSend, wire));
            Some(wire)
        } else {
            None
        };
        self.link_free[out_free] = at;
        // Over the network, then the incoming stream's task.
        let mut at = (at + self.about(20)).max(self.link_free[inc_free]);
        if let Some(wire) = wire {
            self.lanes[inc]
                .events
                .push(Event::instant(at, Kind::DataRecv, wire));
            let d = self.about(5);
            self.lanes[inc]
                .events
                .push(Event::span(at, at + d, Kind::Deserialization, NO_OP));
            at += d;
        }
        self.seq += 1;
        let local = if data { DATA_BIT | self.seq } else { self.seq };
        self.lanes[inc].events.push(Event::instant(at, send, local));
        self.link_free[inc_free] = at;
        let arrive = at + self.about(2);
        self.deliver(to, arrive, local);
    }

    /// The index of the first exchange lane (they follow the workers).
    fn links_base(&self) -> usize {
        self.inbox.len()
    }
}

/// Analyses synthetic lanes as the collector analyses real ones.
pub(crate) fn analyze_lanes(
    a: &mut Analysis,
    lanes: &[SynthLane],
    ws: u64,
    we: u64,
) -> WindowReport {
    let views: Vec<LaneView<'_>> = lanes
        .iter()
        .map(|l| LaneView {
            label: l.name.label(),
            peer: l.name.peer(),
            node: None,
            gap: l.name.gap(),
            ops: &l.ops,
            events: &l.events,
        })
        .collect();
    analyze(a, &views, ws, we)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::cores::Cores;

    #[test]
    fn a_synthetic_window_sums_to_one_per_dimension() {
        let lanes = pipeline(2, 2, 1_000_000_000, 3_000, 7);
        let r = analyze_lanes(&mut Analysis::default(), &lanes, 0, 1_000_000_000);
        // Four workers that wait most of the time all wait at once
        // somewhere in a second: CP is over the busy periods.
        assert_eq!(r.paths, "busy");
        // At about the density asked for, each lane's events in time order
        // (as a ring hands them over).
        let per_worker = lanes.iter().take(4).map(|l| l.events.len()).sum::<usize>() / 4;
        assert!((2_000..4_500).contains(&per_worker), "{per_worker}");
        for l in &lanes {
            assert!(
                l.events.windows(2).all(|p| p[0].end <= p[1].end),
                "{:?}",
                l.name
            );
        }
        for rows in [&r.activities, &r.workers, &r.peers] {
            let sum: f64 = rows.iter().map(|r| r.cp).sum();
            assert!((sum - 1.0).abs() < 1e-6, "{rows:?}");
        }
        assert!(r.activities.iter().any(|a| a.name == "serialization"));
        assert!(r.peers.iter().any(|p| p.name == "node-1"));
        let waiting = r
            .activities
            .iter()
            .find(|a| a.name == "waiting")
            .expect("waits");
        assert_eq!(waiting.cp, 0.0);
        assert!(waiting.share.unwrap_or(0.0) > 0.0);
    }

    /// The collector analyses every window in the memory of the one
    /// before: nothing of a larger or denser window may leak into the next.
    #[test]
    fn a_reused_analysis_answers_as_a_fresh_one() {
        let second = 1_000_000_000;
        let windows = [
            pipeline(2, 2, second, 6_000, 1),
            pipeline(1, 2, second, 1_500, 2),
            pipeline(2, 1, second, 3_000, 3),
            pipeline(1, 1, second, 200, 4),
        ];
        let mut reused = Analysis::default();
        for lanes in windows.iter().chain(windows.iter().rev()) {
            let mut fresh = analyze_lanes(&mut Analysis::default(), lanes, 0, second);
            let mut again = analyze_lanes(&mut reused, lanes, 0, second);
            assert!(fresh.events > 0);
            (fresh.analysis_ms, again.analysis_ms) = (0.0, 0.0);
            assert_eq!(fresh, again);
        }
    }

    /// Two cores build the graph in two halves and count side by side:
    /// the answer is one core's, but for the order of a float sum.
    #[test]
    fn two_cores_answer_as_one() {
        let second = 1_000_000_000;
        for (nodes, workers, per_worker, seed) in
            [(2, 2, 6_000, 5), (1, 3, 4_000, 6), (2, 1, 50, 7)]
        {
            let lanes = pipeline(nodes, workers, second, per_worker, seed);
            let mut one = Analysis::default();
            one.cores = Cores::ONE;
            let mut two = Analysis::default();
            two.cores = Cores::TWO;
            let a = analyze_lanes(&mut one, &lanes, 0, second);
            let b = analyze_lanes(&mut two, &lanes, 0, second);
            assert_eq!((a.events, &a.paths), (b.events, &b.paths));
            let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(1.0);
            assert!(close(
                a.paths_log10.unwrap_or(0.0),
                b.paths_log10.unwrap_or(0.0)
            ));
            for (ra, rb) in [
                (&a.activities, &b.activities),
                (&a.operators, &b.operators),
                (&a.workers, &b.workers),
                (&a.peers, &b.peers),
            ] {
                assert_eq!(ra.len(), rb.len());
                for (x, y) in ra.iter().zip(rb.iter()) {
                    assert!(
                        close(x.cp, y.cp) && x.share == y.share,
                        "{x:?} on one core, {y:?} on two"
                    );
                }
            }
            assert!(a.activities.iter().any(|r| r.cp > 0.0));
        }
    }
}
