//! The checkpoint thread: every interval it asks the sources for a barrier
//! and commits the checkpoint once every instance has passed it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Shared;
use super::checkpoint::{Checkpoints, Committed};
use super::heartbeat::Heartbeat;

/// How often the thread looks at its quit flag while waiting.
const TICK: Duration = Duration::from_millis(20);

/// The interval is read before every wait: the tuner may change it.
pub(crate) fn spawn_committer(
    shared: Arc<Shared>,
    quit: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("eddy-checkpoint".into())
        .spawn(move || {
            let cp = shared
                .checkpoints
                .clone()
                .expect("the committer runs with checkpoints");
            // Waiting for barriers beats (`alive` is asked every 50 ms);
            // writing the checkpoint to sled does not, so a stuck write is
            // named by the watchdog.
            let beat = Heartbeat::register(
                "eddy-checkpoint (the checkpoint committer)".into(),
                Vec::new(),
            );
            let mut last = Instant::now();
            let stopped = || quit.load(Relaxed) || shared.failed.load(Relaxed);
            loop {
                // Asked before the wait as well as during it: a commit that
                // takes longer than the interval leaves no wait, and once
                // every instance has ended each commit completes at once,
                // so a check only inside the wait let the run end never
                // (with 50 ms checkpoints and a large exactly-once piece).
                if stopped() {
                    return;
                }
                while last.elapsed() < interval(&shared) {
                    beat.beat();
                    if stopped() {
                        return;
                    }
                    std::thread::sleep(TICK.min(interval(&shared)));
                }
                last = Instant::now();
                let running = || {
                    beat.beat();
                    !quit.load(Relaxed)
                };
                match take(&shared, &cp, &running) {
                    Ok(Some(c)) => tracing::debug!(
                        checkpoint = c.id,
                        bins = c.bins,
                        keys = c.entries,
                        bytes = c.bytes,
                        ms = c.duration.as_secs_f64() * 1e3,
                        "checkpoint committed"
                    ),
                    Ok(None) => return,
                    Err(e) => {
                        shared.fail(e);
                        return;
                    }
                }
            }
        })
}

fn interval(shared: &Shared) -> Duration {
    Duration::from_millis(shared.live.checkpoint_interval_ms())
}

/// Takes the next checkpoint: requests its barriers and commits it.
/// `Ok(None)` if the run ended or stopped before it completed.
/// `go_on` turning false abandons the wait.
pub(crate) fn take(
    shared: &Shared,
    cp: &Checkpoints,
    go_on: &dyn Fn() -> bool,
) -> Result<Option<Committed>, String> {
    let alive = || go_on() && !shared.failed.load(Relaxed) && !shared.halted.load(Relaxed);
    let mut id = cp.requested() + 1;
    if !cp.request(id) {
        // The one before is still in flight: the periodic thread stopped
        // (SIGTERM) while waiting for it. Finish it, then take this one.
        if cp.commit(id - 1, false, &alive)?.is_none() {
            return Ok(None);
        }
        id = cp.requested() + 1;
        if !cp.request(id) {
            return Ok(None);
        }
    }
    shared.wake_workers();
    cp.commit(id, false, &alive)
}
