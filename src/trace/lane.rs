//! A lane is one timeline of the activity graph: a worker thread, or one
//! exchange stream's task. Its owner logs through [`LaneTrace`], whose
//! calls cost one branch on the global switch while tracing is off.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::event::{DATA_BIT, Event, Kind, NO_OP};
use super::ring::Ring;
use super::{TRACER, on};
use crate::exec::clock;

/// Events a lane holds between two drains of the collector (every
/// `collector::DRAIN_EVERY`); 32 bytes each.
const RING_EVENTS: usize = 1 << 15;

/// Which timeline a lane is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LaneName {
    /// A worker, by its global index.
    Worker(usize),
    /// The task moving exchange `edge` from worker `from` to `to` over the
    /// mesh; `outgoing` on the sending node.
    Link {
        peer: String,
        outgoing: bool,
        edge: usize,
        from: usize,
        to: usize,
    },
    /// The coordinator of live migrations on this node: it plans each
    /// step and exchanges Prepare, Switch and the workers' replies.
    Coordinator,
    /// The thread that runs quinn's tasks for this node's endpoint.
    Transport,
}

impl LaneName {
    pub(crate) fn label(&self) -> String {
        match self {
            LaneName::Worker(w) => format!("worker {w}"),
            LaneName::Link {
                peer,
                outgoing: true,
                edge,
                from,
                to,
            } => format!("exchange {edge} w{from}->w{to} (to {peer})"),
            LaneName::Link {
                peer,
                edge,
                from,
                to,
                ..
            } => format!("exchange {edge} w{from}->w{to} (from {peer})"),
            LaneName::Coordinator => "migration coordinator".to_string(),
            LaneName::Transport => "QUIC endpoint".to_string(),
        }
    }

    pub(crate) fn peer(&self) -> Option<&str> {
        match self {
            LaneName::Worker(_) | LaneName::Coordinator | LaneName::Transport => None,
            LaneName::Link { peer, .. } => Some(peer),
        }
    }

    /// What fills a gap: a worker between spans runs its loop; an
    /// exchange task between spans waits for a message.
    pub(crate) fn gap(&self) -> Kind {
        match self {
            LaneName::Worker(_) => Kind::Unknown,
            LaneName::Link { .. } | LaneName::Coordinator | LaneName::Transport => Kind::Waiting,
        }
    }
}

/// A registered lane: the collector drains its ring.
pub(crate) struct Lane {
    pub(crate) name: LaneName,
    /// Operator names, indexed by `Event::op`.
    pub(crate) ops: Vec<Arc<str>>,
    pub(crate) ring: Ring,
}

/// The logging handle a lane's owner keeps. The ring is allocated and
/// registered at the first event logged, so a run with tracing off costs
/// nothing but this struct.
pub(crate) struct LaneTrace {
    name: LaneName,
    ops: Vec<Arc<str>>,
    lane: Option<Arc<Lane>>,
    /// Unique among this process's lanes: the high bits of its message ids.
    uid: u64,
    seq: u64,
}

/// Bits of a message id for the sequence within a lane.
const SEQ_BITS: u32 = 40;
/// Ids of messages over the mesh (see [`wire_id`]) have this bit.
pub(super) const WIRE_BIT: u64 = 1 << 62;

impl LaneTrace {
    pub(crate) fn new(name: LaneName, ops: Vec<Arc<str>>) -> LaneTrace {
        LaneTrace {
            name,
            ops,
            lane: None,
            uid: (TRACER.next_lane.fetch_add(1, Relaxed) + 1) & ((WIRE_BIT >> SEQ_BITS) - 1),
            seq: 0,
        }
    }

    pub(crate) fn worker(global: usize, ops: Vec<Arc<str>>) -> LaneTrace {
        LaneTrace::new(LaneName::Worker(global), ops)
    }

    /// Starts a span: a timestamp, or 0 while tracing is off.
    #[inline]
    pub(crate) fn begin(&self) -> u64 {
        if on() { clock::now_ns() | 1 } else { 0 }
    }

    /// Ends a span begun with [`begin`](Self::begin); `op` indexes the
    /// operator names for processing, checkpoint and migration spans and is
    /// ignored for the others (which belong to no operator).
    #[inline]
    pub(crate) fn end(&mut self, start: u64, kind: Kind, op: usize) {
        if start != 0 {
            let op = match kind {
                Kind::Processing | Kind::Checkpoint | Kind::Migration => op,
                _ => NO_OP as usize,
            };
            self.log(start, clock::now_ns(), kind, op, 0);
        }
    }

    /// The id for a message about to be sent, or 0 while tracing is off.
    #[inline]
    pub(crate) fn send_id(&mut self, data: bool) -> u64 {
        if on() { self.next_id(data) } else { 0 }
    }

    /// The message with `id` (from [`send_id`](Self::send_id)) left.
    #[inline]
    pub(crate) fn sent(&mut self, id: u64) {
        if id != 0 {
            self.message(id, true);
        }
    }

    /// The message with `id` arrived (0: sent while tracing was off).
    #[inline]
    pub(crate) fn received(&mut self, id: u64) {
        if id != 0 && on() {
            self.message(id, false);
        }
    }

    fn next_id(&mut self, data: bool) -> u64 {
        self.seq += 1;
        let id = self.uid << SEQ_BITS | (self.seq & ((1 << SEQ_BITS) - 1));
        if data { id | DATA_BIT } else { id }
    }

    #[inline(never)]
    fn message(&mut self, id: u64, send: bool) {
        let kind = match (id & DATA_BIT != 0, send) {
            (true, true) => Kind::DataSend,
            (true, false) => Kind::DataRecv,
            (false, true) => Kind::ControlSend,
            (false, false) => Kind::ControlRecv,
        };
        let t = clock::now_ns();
        self.log(t, t, kind, NO_OP as usize, id);
    }

    #[inline(never)]
    pub(crate) fn log(&mut self, start: u64, end: u64, kind: Kind, op: usize, id: u64) {
        let lane = self.lane.get_or_insert_with(|| {
            let lane = Arc::new(Lane {
                name: self.name.clone(),
                ops: std::mem::take(&mut self.ops),
                ring: Ring::new(RING_EVENTS),
            });
            TRACER.register(lane.clone());
            lane
        });
        lane.ring.push(&Event {
            start,
            end,
            kind,
            op: op.min(NO_OP as usize) as u16,
            id,
        });
    }
}

/// The id of batch `seq` of an exchange stream, which both ends of the
/// stream know without it being on the wire: the two halves of a message
/// between peers match when their logs are joined.
pub(crate) fn wire_id(epoch: u64, edge: usize, from: usize, to: usize, seq: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in [epoch, edge as u64, from as u64, to as u64, seq] {
        h = (h ^ v).wrapping_mul(0x0100_0000_01b3);
        h ^= h >> 29;
    }
    (h & (WIRE_BIT - 1)) | WIRE_BIT | DATA_BIT
}
