//! Counters of the mesh, shared by the endpoint, its connections and
//! streams; the daemon's `/metrics` endpoint will export them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Monotonic counters; cheap to bump from any task.
#[derive(Debug, Default)]
pub struct MeshMetrics {
    /// Connections that completed TLS and the `Hello` exchange.
    pub connections_established: AtomicU64,
    /// Handshakes refused or failed: bad certificate, wrong cluster, wrong
    /// ALPN, wrong version, timeout.
    pub handshakes_refused: AtomicU64,
    /// Connections closed because the peer sent a frame that does not
    /// decode or exceeds the limit.
    pub malformed_frames: AtomicU64,
    pub frames_sent: AtomicU64,
    pub frames_received: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    /// Membership datagrams dropped because a queue was full or no
    /// connection was ready (SWIM tolerates loss).
    pub datagrams_dropped: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    pub connections_established: u64,
    pub handshakes_refused: u64,
    pub malformed_frames: u64,
    pub frames_sent: u64,
    pub frames_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub datagrams_dropped: u64,
}

impl MeshMetrics {
    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            connections_established: self.connections_established.load(Relaxed),
            handshakes_refused: self.handshakes_refused.load(Relaxed),
            malformed_frames: self.malformed_frames.load(Relaxed),
            frames_sent: self.frames_sent.load(Relaxed),
            frames_received: self.frames_received.load(Relaxed),
            bytes_sent: self.bytes_sent.load(Relaxed),
            bytes_received: self.bytes_received.load(Relaxed),
            datagrams_dropped: self.datagrams_dropped.load(Relaxed),
        }
    }
}
