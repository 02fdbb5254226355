//! `[tune] profile_budget`: profiling runs may take at most this share of
//! the node's CPU over the last season. Demeter profiles on spare capacity;
//! on a small device there is little, and runs that fall behind take a
//! whole core for their duration, so without a bound the tuner could cost
//! more than it saves.
//!
//! Sans-IO: the daemon samples its own CPU seconds and those of the
//! children it reaped (the runs, made for itself or served to peers)
//! whenever a run is due, and asks whether it may start.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What [`Budget::check`] found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Verdict {
    /// The share of the node's CPU the runs took over the window.
    pub(crate) used: f64,
    /// Why the next run waits, if it does.
    pub(crate) held: Option<String>,
}

pub(crate) struct Budget {
    share: f64,
    window: Duration,
    /// `(when, the process's own CPU s, its reaped children's)`: the first
    /// is the window's baseline.
    samples: VecDeque<(Instant, f64, f64)>,
    /// The children's CPU seconds when the last run started, and what
    /// that run took.
    started: Option<f64>,
    last_cost: f64,
    /// What each run over the window took, by when it was weighed.
    costs: VecDeque<(Instant, f64)>,
}

impl Budget {
    /// `share` of the CPU over `window`, counted from `now`, when the
    /// process had used `own` and its children `children` CPU seconds.
    pub(crate) fn new(
        share: f64,
        window: Duration,
        now: Instant,
        own: f64,
        children: f64,
    ) -> Budget {
        Budget {
            share,
            window,
            samples: VecDeque::from([(now, own, children)]),
            started: None,
            last_cost: 0.0,
            costs: VecDeque::new(),
        }
    }

    /// Whether a run may start now: it may when the runs so far and one
    /// more as costly as the costliest over the window stay within the
    /// share of all the CPU the node spent over it. (Weighed by the last
    /// run alone, a run at the peak after one at a quiet hour took
    /// `eddy bench tune`'s profiling to 11 % of the CPU for a while.)
    pub(crate) fn check(&mut self, now: Instant, own: f64, children: f64) -> Verdict {
        // A due time the tuner let pass (no forecast yet, say) made no
        // run: the last run's cost still stands.
        if let Some(at_start) = self.started.take()
            && children > at_start
        {
            self.last_cost = children - at_start;
            self.costs.push_back((now, self.last_cost));
        }
        while self
            .costs
            .front()
            .is_some_and(|&(t, _)| now.duration_since(t) >= self.window)
        {
            self.costs.pop_front();
        }
        self.samples.push_back((now, own, children));
        // The baseline is the last sample at or before the window's start.
        while self
            .samples
            .get(1)
            .is_some_and(|&(t, _, _)| now.duration_since(t) >= self.window)
        {
            self.samples.pop_front();
        }
        let (_, own0, children0) = self.samples[0];
        let spent = (children - children0).max(0.0);
        let total = (own - own0).max(0.0) + spent;
        let used = if total > 0.0 { spent / total } else { 0.0 };
        let next = self
            .costs
            .iter()
            .map(|&(_, c)| c)
            .fold(self.last_cost, f64::max);
        let held = (spent + next > self.share * (total + next)).then(|| {
            format!(
                "profiling runs took {spent:.1} of the {total:.1} CPU s this node spent over the \
                 last {} s ({:.1} %); one more like the costliest of them ({next:.1} CPU s) would pass \
                 [tune] profile_budget = {} ({:.0} %): the next run waits",
                self.window.as_secs(),
                100.0 * used,
                self.share,
                100.0 * self.share
            )
        });
        if held.is_none() {
            self.started = Some(children);
        }
        Verdict { used, held }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_wait_while_they_would_pass_the_share() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut b = Budget::new(0.1, Duration::from_secs(100), t0, 0.0, 0.0);
        // Nothing spent: the first run starts.
        let v = b.check(at(1), 1.0, 0.0);
        assert_eq!(
            v,
            Verdict {
                used: 0.0,
                held: None
            }
        );
        // It took 2 CPU s while the pipeline took 4: a third of the CPU.
        let v = b.check(at(10), 5.0, 2.0);
        assert!((v.used - 2.0 / 7.0).abs() < 1e-9, "{v:?}");
        let held = v.held.expect("held");
        assert!(
            held.contains("profiling runs took 2.0 of the 7.0 CPU s") && held.contains("(10 %)"),
            "{held}"
        );
        // One more like it may start once the two stay within a tenth:
        // 2 + 2 <= 0.1 * (pipeline + 2 + 2), from 36 pipeline seconds on.
        assert!(b.check(at(20), 30.0, 2.0).held.is_some());
        let v = b.check(at(30), 36.0, 2.0);
        assert_eq!(v.held, None, "{v:?}");
        // That due time made no run: the next is still weighed at 2.
        assert_eq!(b.check(at(31), 36.5, 2.0).held, None);
        assert_eq!(b.last_cost, 2.0);
    }

    #[test]
    fn the_budget_is_over_the_last_window() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut b = Budget::new(0.1, Duration::from_secs(100), t0, 0.0, 0.0);
        assert_eq!(b.check(at(1), 0.0, 0.0).held, None);
        // A run of 10 CPU s against 10 of the pipeline: held.
        assert!(b.check(at(50), 10.0, 10.0).held.is_some());
        // A window later that run has left the window: the pipeline alone
        // spent 20 since, so one more of 10 would be a third: still held.
        assert!(b.check(at(160), 30.0, 10.0).held.is_some());
        // With 100 more pipeline seconds in the window it may start.
        let v = b.check(at(200), 130.0, 10.0);
        assert_eq!(v.held, None, "{v:?}");
        assert_eq!(v.used, 0.0);
    }

    #[test]
    fn the_next_run_is_weighed_as_the_costliest_over_the_window() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut b = Budget::new(0.1, Duration::from_secs(100), t0, 0.0, 0.0);
        assert_eq!(b.check(at(1), 0.0, 0.0).held, None);
        // A run at the peak took 4 CPU s: 4 + 4 <= 0.1 * (74 + 4 + 4).
        assert_eq!(b.check(at(50), 74.0, 4.0).held, None);
        // One at a quiet hour took 1: 5 + 4 > 0.1 * (78 + 5 + 4), held,
        // though one more like the last would fit (5 + 1 <= 8.4).
        let held = b.check(at(60), 78.0, 5.0).held.expect("held");
        assert!(held.contains("(4.0 CPU s)"), "{held}");
        // Once the costly run is out of the window, the cheap one weighs:
        // 1 + 1 <= 0.1 * (26 + 1 + 1).
        assert_eq!(b.check(at(151), 100.0, 5.0).held, None);
    }
}
