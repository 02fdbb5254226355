//! The logs of peers. In a distributed run every member sends what its
//! lanes log to every other member, on one [`StreamKind::Trace`] stream
//! each, and analyses the union: the activity graph of a window spans the
//! whole run, the two halves of a batch between members join by its wire
//! id, and critical participation names the peer and the worker that hold
//! latency back. Switching tracing on one member's API switches it on all.
//!
//! Nothing here blocks a worker or the collector: a peer that does not
//! keep up loses events, counted as dropped, like a full ring.
//!
//! [`StreamKind::Trace`]: crate::mesh::frame::StreamKind::Trace

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use super::event::{DATA_BIT, Event, Kind};
use super::lane::{Lane, WIRE_BIT};
use crate::exec::clock;
use crate::mesh::frame::{TraceEvents, TraceLane, TraceMsg};

/// Messages queued for one peer before events are dropped: at one message
/// per collector drain (20 ms), over a second of backlog.
pub(crate) const PEER_QUEUE: usize = 64;
/// Events per message, so a message stays far below the frame limit (an
/// event takes about 15–30 bytes).
const EVENTS_PER_MESSAGE: usize = 16 * 1024;
/// Received events held for the collector before new ones are dropped.
const INBOX_EVENTS: usize = 4 << 20;

struct Peers {
    to: Mutex<Vec<(String, flume::Sender<TraceMsg>)>>,
    inbox: Mutex<(Vec<(String, TraceEvents)>, usize)>,
    dropped: AtomicU64,
}

static PEERS: Peers = Peers {
    to: Mutex::new(Vec::new()),
    inbox: Mutex::new((Vec::new(), 0)),
    dropped: AtomicU64::new(0),
};

/// Keeps the peers of a distributed run attached while it runs.
pub(crate) struct Attached;

impl Drop for Attached {
    fn drop(&mut self) {
        PEERS.to.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Sends this member's events to `peers` (name, queue of its trace stream)
/// until the returned guard is dropped.
pub(crate) fn attach(peers: Vec<(String, flume::Sender<TraceMsg>)>) -> Attached {
    *PEERS.to.lock().unwrap_or_else(|e| e.into_inner()) = peers;
    Attached
}

/// A switch from the local API: here and on every peer.
pub(crate) fn switch(enabled: bool) {
    super::set_enabled(enabled);
    let msg = TraceMsg::Switch {
        enabled,
        window_ms: super::window_ms(),
    };
    for (name, tx) in PEERS.to.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        if tx.try_send(msg.clone()).is_err() {
            tracing::warn!("could not pass the trace switch on to {name}: its queue is full");
        }
    }
}

/// What a peer sent on its trace stream.
pub(crate) fn received(peer: &str, msg: TraceMsg) {
    match msg {
        TraceMsg::Switch { enabled, window_ms } => {
            super::set_window_ms(window_ms);
            super::set_enabled(enabled);
            tracing::info!(enabled, window_ms, "tracing switched by {peer}");
        }
        TraceMsg::Events(events) => {
            let n: usize = events.lanes.iter().map(|l| l.events.len()).sum();
            let mut inbox = PEERS.inbox.lock().unwrap_or_else(|e| e.into_inner());
            if inbox.1 + n > INBOX_EVENTS {
                PEERS.dropped.fetch_add(n as u64, Relaxed);
            } else {
                inbox.1 += n;
                inbox.0.push((peer.to_string(), events));
            }
        }
    }
}

/// Events lost on the way to or from peers since the last call.
pub(super) fn take_dropped() -> u64 {
    PEERS.dropped.swap(0, Relaxed)
}

/// Unix nanoseconds minus process-clock nanoseconds.
fn unix_offset_ns() -> i128 {
    static OFFSET: OnceLock<i128> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        unix - clock::now_ns() as i128
    })
}

/// Sends the events this member's lanes logged since the last drain
/// (`(lane, new events)`) to every peer. Tracing off or no peers: nothing.
pub(super) fn ship<'a>(new: impl Iterator<Item = (&'a Lane, u64, &'a [Event])>) {
    let to = PEERS.to.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if to.is_empty() {
        return;
    }
    let offset = unix_offset_ns();
    let mut messages = Vec::new();
    let mut lanes: Vec<TraceLane> = Vec::new();
    let mut count = 0;
    let mut base = u64::MAX;
    for (lane, id, events) in new {
        for part in events.chunks(EVENTS_PER_MESSAGE) {
            if count + part.len() > EVENTS_PER_MESSAGE && !lanes.is_empty() {
                messages.push(message(std::mem::take(&mut lanes), base));
                (count, base) = (0, u64::MAX);
            }
            let unix = |t: u64| (t as i128 + offset).max(0) as u64;
            base = base.min(part.iter().map(|e| unix(e.start)).min().unwrap_or(u64::MAX));
            count += part.len();
            lanes.push(TraceLane {
                id,
                label: lane.name.label(),
                gap_waits: lane.name.gap() == Kind::Waiting,
                ops: lane.ops.iter().map(|o| o.to_string()).collect(),
                // Offsets from the lane's own base are fixed below, once
                // the message's base is known.
                events: part
                    .iter()
                    .map(|e| (unix(e.start), e.end - e.start, e.kind as u8, e.op, e.id))
                    .collect(),
            });
        }
    }
    if !lanes.is_empty() {
        messages.push(message(lanes, base));
    }
    for msg in messages {
        let n: usize = match &msg {
            TraceMsg::Events(e) => e.lanes.iter().map(|l| l.events.len()).sum(),
            TraceMsg::Switch { .. } => 0,
        };
        for (_, tx) in &to {
            if tx.try_send(msg.clone()).is_err() {
                PEERS.dropped.fetch_add(n as u64, Relaxed);
            }
        }
    }
}

/// Makes event starts offsets from `base`.
fn message(mut lanes: Vec<TraceLane>, base: u64) -> TraceMsg {
    for l in &mut lanes {
        for e in &mut l.events {
            e.0 -= base;
        }
    }
    TraceMsg::Events(TraceEvents {
        base_unix_ns: base,
        lanes,
    })
}

/// One lane of a peer as the collector keeps it.
pub(super) struct RemoteLane {
    pub(super) peer: String,
    pub(super) id: u64,
    pub(super) label: String,
    pub(super) gap: Kind,
    pub(super) ops: Vec<Arc<str>>,
    /// When its last events arrived (process clock).
    pub(super) seen_ns: u64,
}

/// Takes what peers sent: `(lane, its events on this process's clock)`.
/// Ids of messages inside a peer are made distinct from this process's;
/// ids of batches between members (wire ids) are kept, so both halves join.
pub(super) fn take_received() -> Vec<(RemoteLane, Vec<Event>)> {
    let batches = std::mem::take(&mut *PEERS.inbox.lock().unwrap_or_else(|e| e.into_inner())).0;
    let offset = unix_offset_ns();
    let now = clock::now_ns();
    let mut out = Vec::new();
    for (peer, batch) in batches {
        let salt = crate::kernel::hash::hash_bytes(peer.as_bytes());
        for lane in batch.lanes {
            let events = lane
                .events
                .iter()
                .filter_map(|&(start, len, kind, op, id)| {
                    let start = (batch.base_unix_ns as i128 + start as i128 - offset)
                        .try_into()
                        .ok()?;
                    Some(Event {
                        start,
                        end: start + len,
                        kind: Kind::from_u8(kind),
                        op,
                        id: peer_local_id(id, salt),
                    })
                })
                .collect();
            out.push((
                RemoteLane {
                    peer: peer.clone(),
                    id: lane.id,
                    label: format!("{} on {peer}", lane.label),
                    gap: if lane.gap_waits {
                        Kind::Waiting
                    } else {
                        Kind::Unknown
                    },
                    ops: lane.ops.into_iter().map(Arc::from).collect(),
                    seen_ns: now,
                },
                events,
            ));
        }
    }
    out
}

/// A peer's id of a message inside that peer, mapped so that it cannot
/// meet an id of this process's; wire ids and 0 stay as they are.
fn peer_local_id(id: u64, salt: u64) -> u64 {
    if id == 0 || id & WIRE_BIT != 0 {
        return id;
    }
    let mut h = (id ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 31;
    ((h & !(WIRE_BIT | DATA_BIT)) | (id & DATA_BIT)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_ids_never_become_wire_ids_and_keep_their_kind() {
        let salt = crate::kernel::hash::hash_bytes(b"node-b");
        for id in [1u64, 42, (7 << 40) | 3, DATA_BIT | 5, DATA_BIT | (9 << 40)] {
            let mapped = peer_local_id(id, salt);
            assert_ne!(mapped, 0);
            assert_eq!(mapped & WIRE_BIT, 0, "{id:#x}");
            assert_eq!(mapped & DATA_BIT, id & DATA_BIT, "{id:#x}");
            assert_ne!(mapped, peer_local_id(id, salt ^ 1), "another peer");
        }
        let wire = super::super::wire_id(1, 0, 0, 2, 7);
        assert_eq!(peer_local_id(wire, salt), wire);
    }
}
