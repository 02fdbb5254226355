//! The collector thread: drains every lane's ring often (so rings stay
//! small), and once a window is complete analyses it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::event::Event;
use super::lane::Lane;
use super::peers::{self, RemoteLane};
use super::report::{Analysis, LaneView, analyze};
use super::{KEEP_WINDOWS, TRACER, on, window_ms};
use crate::exec::clock;

/// How often rings are drained. A worker logs a few events per batch; at
/// 30k batches/s that is far below a ring's 32k events per drain.
const DRAIN_EVERY: Duration = Duration::from_millis(20);
/// A window is analysed this long after it ends: a span is logged when it
/// ends, so one crossing the window's end arrives late. Spans longer than
/// this (none in the engine: parks are at most 50 ms) are seen as unknown.
const LAG_NS: u64 = 100_000_000;

/// A lane of this process or of a peer, with the events not yet past.
struct Pending {
    source: Source,
    events: Vec<Event>,
}

enum Source {
    Local { lane: Arc<Lane>, dropped_seen: u64 },
    Remote(RemoteLane),
}

/// A peer's lane with no news for this long, and no events left, leaves.
const REMOTE_LANE_TTL_NS: u64 = 5_000_000_000;
/// How late a window is analysed once peers' events are in it: they
/// arrive a drain and a trip over the mesh after they happen.
const REMOTE_LAG_NS: u64 = 500_000_000;

impl Pending {
    fn label(&self) -> String {
        match &self.source {
            Source::Local { lane, .. } => lane.name.label(),
            Source::Remote(r) => r.label.clone(),
        }
    }

    /// Whether the lane may still log (its owner runs, or a peer sent it
    /// lately).
    fn alive(&self, now: u64) -> bool {
        match &self.source {
            Source::Local { lane, .. } => Arc::strong_count(lane) > 1,
            Source::Remote(r) => now.saturating_sub(r.seen_ns) < REMOTE_LANE_TTL_NS,
        }
    }

    fn view(&self, label: String, now: u64) -> Option<LaneView<'_>> {
        if self.events.is_empty() && !self.alive(now) {
            return None;
        }
        Some(match &self.source {
            Source::Local { lane, .. } => LaneView {
                label,
                peer: lane.name.peer(),
                node: None,
                gap: lane.name.gap(),
                ops: &lane.ops,
                events: &self.events,
            },
            Source::Remote(r) => LaneView {
                label,
                peer: None,
                node: Some(&r.peer),
                gap: r.gap,
                ops: &r.ops,
                events: &self.events,
            },
        })
    }
}

pub(super) fn start() {
    let spawned = std::thread::Builder::new()
        .name("eddy-trace".into())
        .spawn(run);
    if let Err(e) = spawned {
        tracing::error!("cannot start the trace collector: {e}; no trace windows");
    }
}

/// The collector's nice value: below the workers, so that a window's
/// analysis (tens of milliseconds a second) waits for a busy pipeline
/// instead of delaying its records, yet still runs (a tenth of a core's
/// share against a busy worker) rather than starving as an idle-class
/// thread would, when a user most wants to see the windows.
const NICE: i32 = 10;

fn run() {
    // Linux's nice is per thread; elsewhere the collector keeps the
    // process's priority.
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on this thread's own id.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, NICE);
    }
    let mut lanes: Vec<Pending> = Vec::new();
    // Kept while tracing is on (see `Analysis`), dropped when it goes off:
    // at 100k events per worker-second it holds tens of megabytes.
    let mut analysis: Option<Analysis> = None;
    // The next window: (start, length) in process-clock nanoseconds.
    let mut next: Option<(u64, u64)> = None;
    loop {
        std::thread::sleep(DRAIN_EVERY);
        let new = std::mem::take(&mut *TRACER.new_lanes.lock().unwrap_or_else(|e| e.into_inner()));
        lanes.extend(new.into_iter().map(|lane| Pending {
            source: Source::Local {
                lane,
                dropped_seen: 0,
            },
            events: Vec::new(),
        }));
        let mut fresh = Vec::new();
        for p in &mut lanes {
            if let Source::Local { lane, .. } = &p.source {
                fresh.push(p.events.len());
                lane.ring.drain_into(&mut p.events);
            }
        }
        if on() {
            peers::ship(
                lanes
                    .iter()
                    .filter_map(|p| match &p.source {
                        Source::Local { lane, .. } => Some((lane, p)),
                        Source::Remote(_) => None,
                    })
                    .zip(&fresh)
                    .map(|((lane, p), &from)| {
                        (&**lane, Arc::as_ptr(lane) as u64, &p.events[from..])
                    }),
            );
        }
        for (remote, events) in peers::take_received() {
            let known = lanes.iter_mut().find(|p| {
                matches!(&p.source, Source::Remote(r) if r.peer == remote.peer && r.id == remote.id)
            });
            match known {
                Some(p) => {
                    p.events.extend(events);
                    if let Source::Remote(r) = &mut p.source {
                        r.seen_ns = remote.seen_ns;
                    }
                }
                None => lanes.push(Pending {
                    source: Source::Remote(remote),
                    events,
                }),
            }
        }
        let w = window_ms() * 1_000_000;
        if !on() {
            next = None;
            analysis = None;
            lanes.iter_mut().for_each(|p| p.events.clear());
        } else {
            let now = clock::now_ns();
            // Windows lie on a grid of their length; the first is the
            // first whole one after tracing came on.
            let (mut ws, len) = match next {
                Some((ws, len)) if len == w => (ws, len),
                _ => ((now / w + 1) * w, w),
            };
            let lag = if lanes.iter().any(|p| matches!(p.source, Source::Remote(_))) {
                REMOTE_LAG_NS
            } else {
                LAG_NS
            };
            while now >= ws + len + lag {
                let a = analysis.get_or_insert_with(Analysis::default);
                let report = window(a, &mut lanes, ws, ws + len, now);
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
        let now = clock::now_ns();
        lanes.retain(|p| p.alive(now) || !p.events.is_empty());
    }
}

fn window(
    a: &mut Analysis,
    lanes: &mut [Pending],
    ws: u64,
    we: u64,
    now: u64,
) -> super::WindowReport {
    let dropped: u64 = lanes
        .iter_mut()
        .map(|p| match &mut p.source {
            Source::Local { lane, dropped_seen } => {
                let d = lane.ring.dropped();
                let new = d - *dropped_seen;
                *dropped_seen = d;
                new
            }
            Source::Remote(_) => 0,
        })
        .sum::<u64>()
        + peers::take_dropped();
    let labels: Vec<String> = lanes.iter().map(Pending::label).collect();
    let views: Vec<LaneView<'_>> = lanes
        .iter()
        .zip(labels)
        .filter_map(|(p, label)| p.view(label, now))
        .collect();
    let mut report = analyze(a, &views, ws, we);
    report.dropped = dropped;
    let unix_now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    report.start_unix_ms = unix_now_ms.saturating_sub((now - ws) / 1_000_000);
    report
}
