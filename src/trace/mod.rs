//! Online critical-path analysis, after SnailTrail (Hoffmann et al., NSDI
//! 2018): what is my latency made of?
//!
//! Workers and exchange tasks log activity spans and message ends into
//! per-lane bounded rings ([`lane`], [`ring`]); a collector thread drains
//! them, cuts snapshot windows, builds each window's program activity
//! graph ([`graph`]) and ranks activities, operators, workers and peers by
//! critical participation ([`cp`], [`report`]). `GET /trace` serves the
//! last windows, `eddy trace` shows them live.
//!
//! Tracing is off unless `[trace] enabled = true` or `POST /trace` turns it
//! on; while off, every hook is one load of [`TRACER`]`.enabled` and a
//! branch.

mod collector;
pub(crate) mod cores;
pub(crate) mod cp;
pub(crate) mod event;
pub(crate) mod graph;
mod lane;
pub(crate) mod peers;
mod polls;
pub(crate) mod report;
mod ring;
pub(crate) mod synth;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Once};

pub(crate) use event::Kind;
pub(crate) use lane::{LaneName, LaneTrace, wire_id};
pub(crate) use polls::TransportPolls;
pub use report::{Row, WindowReport};

use lane::Lane;

/// Windows `GET /trace` keeps.
pub(crate) const KEEP_WINDOWS: usize = 16;
/// The default snapshot window.
pub(crate) const DEFAULT_WINDOW_MS: u64 = 1000;

/// The process-wide switch, lanes and analysed windows.
pub(crate) struct Tracer {
    enabled: AtomicBool,
    window_ms: AtomicU64,
    pub(crate) next_lane: AtomicU64,
    /// Lanes registered since the collector last looked.
    new_lanes: Mutex<Vec<Arc<Lane>>>,
    windows: Mutex<VecDeque<WindowReport>>,
    collector: Once,
}

pub(crate) static TRACER: Tracer = Tracer {
    enabled: AtomicBool::new(false),
    window_ms: AtomicU64::new(DEFAULT_WINDOW_MS),
    next_lane: AtomicU64::new(0),
    new_lanes: Mutex::new(Vec::new()),
    windows: Mutex::new(VecDeque::new()),
    collector: Once::new(),
};

/// Whether tracing is on: the one check every hook makes.
#[inline]
pub(crate) fn on() -> bool {
    TRACER.enabled.load(Relaxed)
}

impl Tracer {
    fn register(&self, lane: Arc<Lane>) {
        self.new_lanes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(lane);
    }
}

/// Turns tracing on or off (the collector starts the first time).
pub(crate) fn set_enabled(enabled: bool) {
    if enabled {
        TRACER.collector.call_once(collector::start);
    }
    TRACER.enabled.store(enabled, Relaxed);
}

/// Sets the snapshot window; the next window starts on the new grid.
pub(crate) fn set_window_ms(ms: u64) {
    TRACER.window_ms.store(ms.max(1), Relaxed);
}

pub(crate) fn window_ms() -> u64 {
    TRACER.window_ms.load(Relaxed)
}

/// Takes the analysed windows kept so far, oldest first.
pub(crate) fn take_windows() -> Vec<WindowReport> {
    TRACER
        .windows
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .collect()
}

/// The last analysed windows, oldest first.
pub(crate) fn windows() -> Vec<WindowReport> {
    TRACER
        .windows
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect()
}
