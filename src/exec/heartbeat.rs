//! Heartbeats of the threads that must keep moving (workers, the
//! checkpoint committer), so systemd's watchdog restarts a daemon that is
//! alive but stuck — a deadlock inside the store (sled 0.34.7 had one,
//! patched in `vendor/sled`), an operator that never returns — instead of
//! one that merely runs.
//!
//! The clock is a global epoch the watchdog thread advances (about every
//! 100 ms); a thread's beat copies the epoch it sees into its own slot.
//! That is a relaxed load of a rarely written word and a compare per loop
//! turn, never per record, and nothing at all is written while the epoch
//! has not moved, so the hot path pays nothing measurable. A thread that
//! waits (an empty inbox, a full channel, a checkpoint not yet aligned)
//! still turns its loop and beats; one held inside an operator or a sled
//! call does not, and the watchdog names it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

/// Advanced by the watchdog only; starts at 1 so a fresh slot is current.
static EPOCH: AtomicU64 = AtomicU64::new(1);
/// Every live heartbeat; dead ones (their thread returned) are pruned.
static REGISTRY: Mutex<Vec<Weak<Slot>>> = Mutex::new(Vec::new());

struct Slot {
    /// `eddy-worker-0`, `checkpoint committer`.
    name: String,
    /// The components whose calls `enter` marks, by index.
    components: Vec<Arc<str>>,
    /// The newest epoch this thread saw.
    seen: AtomicU64,
    /// 1 + the index in `components` of the call under way, 0 for none.
    inside: AtomicUsize,
}

/// One thread's heartbeat; dropping it (the thread ends) unregisters it.
pub(crate) struct Heartbeat(Arc<Slot>);

impl Heartbeat {
    /// Registers a thread called `name`, whose calls into `components`
    /// (by index) are named when it is stuck in one.
    pub(crate) fn register(name: String, components: Vec<Arc<str>>) -> Heartbeat {
        let slot = Arc::new(Slot {
            name,
            components,
            seen: AtomicU64::new(EPOCH.load(Relaxed)),
            inside: AtomicUsize::new(0),
        });
        let mut all = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&slot));
        Heartbeat(slot)
    }

    /// The thread made a turn of its loop.
    #[inline]
    pub(crate) fn beat(&self) {
        let now = EPOCH.load(Relaxed);
        // Only written when the epoch moved: no cache line ping-pong with
        // the watchdog between its ticks.
        if self.0.seen.load(Relaxed) != now {
            self.0.seen.store(now, Relaxed);
        }
    }

    /// A call into component `index` begins; returns what to hand to
    /// `leave` (calls nest: an operator's output runs the next one).
    #[inline]
    pub(crate) fn enter(&self, index: usize) -> usize {
        let outer = self.0.inside.load(Relaxed);
        self.0.inside.store(index + 1, Relaxed);
        outer
    }

    #[inline]
    pub(crate) fn leave(&self, outer: usize) {
        self.0.inside.store(outer, Relaxed);
    }
}

/// Advances the epoch: the watchdog's clock, once per tick.
pub(crate) fn tick() {
    EPOCH.fetch_add(1, Relaxed);
}

/// Threads that have not beaten for more than `ticks` epochs, each as
/// "NAME (inside COMPONENT) for N ticks", the stalest first.
pub(crate) fn stuck(ticks: u64) -> Vec<String> {
    let now = EPOCH.load(Relaxed);
    let mut all = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|w| w.strong_count() > 0);
    let mut late: Vec<(u64, String)> = all
        .iter()
        .filter_map(Weak::upgrade)
        .filter_map(|s| {
            let age = now.saturating_sub(s.seen.load(Relaxed));
            if age <= ticks {
                return None;
            }
            let inside = s.inside.load(Relaxed);
            let what = match inside.checked_sub(1).and_then(|i| s.components.get(i)) {
                Some(c) => format!("{} (inside component `{c}`)", s.name),
                None => s.name.clone(),
            };
            Some((age, what))
        })
        .collect();
    crate::cold_sort::sort_by_key(&mut late, |l| std::cmp::Reverse(l.0));
    late.into_iter().map(|(_, w)| w).collect()
}
