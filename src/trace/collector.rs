//! The collector thread: drains every lane's ring often (so rings stay
//! small), and once a window is complete analyses it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::event::Event;
use super::lane::Lane;
use super::report::{LaneView, analyze};
use super::{KEEP_WINDOWS, TRACER, on, window_ms};
use crate::exec::clock;

/// How often rings are drained. A worker logs a few events per batch; at
/// 30k batches/s that is far below a ring's 32k events per drain.
const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// A window is analysed this long after it ends: a span is logged when it
/// ends, so one crossing the window's end arrives late. Spans longer than
/// this (none in the engine: parks are at most 50 ms) are seen as unknown.
const LAG_NS: u64 = 100_000_000;

struct Pending {
    lane: Arc<Lane>,
    events: Vec<Event>,
    dropped_seen: u64,
}

pub(super) fn start() {
    let spawned = std::thread::Builder::new()
        .name("eddy-trace".into())
        .spawn(run);
    if let Err(e) = spawned {
        tracing::error!("cannot start the trace collector: {e}; no trace windows");
    }
}

fn run() {
    let mut lanes: Vec<Pending> = Vec::new();
    // The next window: (start, length) in process-clock nanoseconds.
    let mut next: Option<(u64, u64)> = None;
    loop {
        std::thread::sleep(DRAIN_EVERY);
        let new = std::mem::take(&mut *TRACER.new_lanes.lock().unwrap_or_else(|e| e.into_inner()));
        lanes.extend(new.into_iter().map(|lane| Pending {
            lane,
            events: Vec::new(),
            dropped_seen: 0,
        }));
        for p in &mut lanes {
            p.lane.ring.drain_into(&mut p.events);
        }
        let w = window_ms() * 1_000_000;
        if !on() {
            next = None;
            lanes.iter_mut().for_each(|p| p.events.clear());
        } else {
            let now = clock::now_ns();
            // Windows lie on a grid of their length; the first is the
            // first whole one after tracing came on.
            let (mut ws, len) = match next {
                Some((ws, len)) if len == w => (ws, len),
                _ => ((now / w + 1) * w, w),
            };
            while now >= ws + len + LAG_NS {
                let report = window(&mut lanes, ws, ws + len, now);
                let mut windows = TRACER.windows.lock().unwrap_or_else(|e| e.into_inner());
                if windows.len() == KEEP_WINDOWS {
                    windows.pop_front();
                }
                windows.push_back(report);
                drop(windows);
                ws += len;
                for p in &mut lanes {
                    p.events.retain(|e| e.end >= ws);
                }
            }
            next = Some((ws, len));
        }
        // A lane whose owner is gone (a finished run) and that holds
        // nothing more leaves.
        lanes.retain(|p| Arc::strong_count(&p.lane) > 1 || !p.events.is_empty());
    }
}

fn window(lanes: &mut [Pending], ws: u64, we: u64, now: u64) -> super::WindowReport {
    let dropped: u64 = lanes
        .iter_mut()
        .map(|p| {
            let d = p.lane.ring.dropped();
            let new = d - p.dropped_seen;
            p.dropped_seen = d;
            new
        })
        .sum();
    let labels: Vec<String> = lanes.iter().map(|p| p.lane.name.label()).collect();
    let views: Vec<LaneView<'_>> = lanes
        .iter()
        .zip(labels)
        .filter(|(p, _)| !p.events.is_empty() || Arc::strong_count(&p.lane) > 1)
        .map(|(p, label)| LaneView {
            label,
            peer: p.lane.name.peer(),
            gap: p.lane.name.gap(),
            ops: &p.lane.ops,
            events: &p.events,
        })
        .collect();
    let mut report = analyze(&views, ws, we);
    report.dropped = dropped;
    let unix_now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    report.start_unix_ms = unix_now_ms.saturating_sub((now - ws) / 1_000_000);
    report
}
