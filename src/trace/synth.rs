//! Seeded synthetic activity logs shaped like a distributed pipeline, for
//! `eddy bench trace` (analysis speed on a window of known size) and tests.

use std::sync::Arc;

use super::event::{DATA_BIT, Event, Kind, NO_OP};
use super::lane::{LaneName, wire_id};
use super::report::{LaneView, WindowReport, analyze};

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

/// `nodes × workers` workers over `[0, span_ns)`, each logging about
/// `events_per_worker` events: operator spans (three operators), some
/// waiting, and a message to a random worker after each span. Messages to
/// another node go through an outgoing exchange lane (serialization) and
/// an incoming one (deserialization), as `exec::remote` logs them.
pub(crate) fn pipeline(
    nodes: usize,
    workers: usize,
    span_ns: u64,
    events_per_worker: usize,
    seed: u64,
) -> Vec<SynthLane> {
    let mut rng = Rng(seed);
    let total = nodes * workers;
    let ops: Vec<Arc<str>> = ["parse", "enrich", "counts"].map(Arc::from).to_vec();
    let mut lanes: Vec<SynthLane> = (0..total)
        .map(|w| SynthLane {
            name: LaneName::Worker(w),
            ops: ops.clone(),
            events: Vec::with_capacity(events_per_worker + events_per_worker / 2),
        })
        .collect();
    // Exchange lanes by (from, to, outgoing).
    let mut links: std::collections::HashMap<(usize, usize, bool), usize> = Default::default();
    // A span and a send per step, plus the receive on the other side.
    let steps = (events_per_worker / 3).max(1) as u64;
    let step = (span_ns / steps).max(4);
    let mut seq = 0u64;
    for w in 0..total {
        let mut t = rng.below(step);
        while t + step < span_ns {
            let d = step / 2 + rng.below(step / 2);
            let kind = if rng.below(8) == 0 {
                Kind::Waiting
            } else {
                Kind::Processing
            };
            lanes[w].events.push(Event {
                start: t,
                end: t + d,
                kind,
                op: if kind == Kind::Waiting {
                    NO_OP
                } else {
                    rng.below(3) as u16
                },
                id: 0,
            });
            t += d;
            let to = rng.below(total as u64) as usize;
            if to != w && kind == Kind::Processing {
                seq += 1;
                let id = DATA_BIT | seq;
                let instant = |t: u64, kind: Kind, id: u64| Event {
                    start: t,
                    end: t,
                    kind,
                    op: NO_OP,
                    id,
                };
                lanes[w].events.push(instant(t, Kind::DataSend, id));
                let delay = 1 + rng.below(step);
                if w / workers == to / workers {
                    lanes[to]
                        .events
                        .push(instant(t + delay, Kind::DataRecv, id));
                } else {
                    let peer = |n: usize| format!("node-{n}");
                    let mut lane_of = |lanes: &mut Vec<SynthLane>, outgoing: bool| {
                        *links.entry((w, to, outgoing)).or_insert_with(|| {
                            lanes.push(SynthLane {
                                name: LaneName::Link {
                                    peer: peer(if outgoing { to / workers } else { w / workers }),
                                    outgoing,
                                    edge: 0,
                                    from: w,
                                    to,
                                },
                                ops: Vec::new(),
                                events: Vec::new(),
                            });
                            lanes.len() - 1
                        })
                    };
                    let out = lane_of(&mut lanes, true);
                    let inc = lane_of(&mut lanes, false);
                    let wire = wire_id(1, 0, w, to, seq);
                    let local = DATA_BIT | (1 << 41) | seq;
                    let t1 = t + delay / 4;
                    let t2 = t1 + delay / 4;
                    let t3 = t2 + delay / 4;
                    let t4 = t + delay;
                    let ev = &mut lanes[out].events;
                    ev.push(instant(t1, Kind::DataRecv, id));
                    ev.push(Event {
                        start: t1,
                        end: t2,
                        kind: Kind::Serialization,
                        op: NO_OP,
                        id: 0,
                    });
                    ev.push(instant(t2, Kind::DataSend, wire));
                    let ev = &mut lanes[inc].events;
                    ev.push(instant(t3, Kind::DataRecv, wire));
                    ev.push(Event {
                        start: t3,
                        end: t4,
                        kind: Kind::Deserialization,
                        op: NO_OP,
                        id: 0,
                    });
                    ev.push(instant(t4, Kind::DataSend, local));
                    lanes[to].events.push(instant(t4, Kind::DataRecv, local));
                }
            }
        }
    }
    lanes
}

/// Analyses synthetic lanes as the collector analyses real ones.
pub(crate) fn analyze_lanes(lanes: &[SynthLane], ws: u64, we: u64) -> WindowReport {
    let views: Vec<LaneView<'_>> = lanes
        .iter()
        .map(|l| LaneView {
            label: l.name.label(),
            peer: l.name.peer(),
            gap: l.name.gap(),
            ops: &l.ops,
            events: &l.events,
        })
        .collect();
    analyze(&views, ws, we)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_synthetic_window_sums_to_one_per_dimension() {
        let lanes = pipeline(2, 2, 1_000_000_000, 3_000, 7);
        let r = analyze_lanes(&lanes, 0, 1_000_000_000);
        // Four workers each waiting an eighth of the time all wait at
        // once somewhere in a second: CP is over the busy periods.
        assert_eq!(r.paths, "busy");
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
}
