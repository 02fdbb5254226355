//! Event time of each event index when the rate changes over time (a
//! generator's `rate_steps`): event time keeps in step with the schedule,
//! so that an event's time is when the schedule has it due. With one rate
//! throughout, event `i` is at `i * 1000 / events_per_second` ms; with
//! steps, each step starts a stretch at its own rate where the one before
//! left off. Spacing every event at the first rate, as before, made event
//! time run ten times faster than the wall clock once a schedule went from
//! a tenth of its peak to the peak, so a 10 s window closed every second.

use super::mix::FloorRatio;
use crate::config::RateStep;

/// One stretch of the schedule: from event `first` on, at `at_ms` after
/// the start, `eps` events per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stretch {
    first: u64,
    at_ms: i64,
    eps: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Timeline {
    /// In time order; the first at 0 with a positive rate.
    stretches: Vec<Stretch>,
}

impl Timeline {
    /// `steps` in time order, each replacing `eps` from its `at` on (a
    /// zero rate pauses).
    pub(crate) fn new(eps: u64, steps: &[RateStep]) -> Timeline {
        let mut stretches = vec![Stretch {
            first: 0,
            at_ms: 0,
            eps,
        }];
        for step in steps {
            let (at_ms, eps) = (step.at.as_millis() as i64, step.events_per_second);
            let last = *stretches.last().expect("one stretch at least");
            let at_ms = at_ms.max(last.at_ms);
            let first =
                last.first + ((at_ms - last.at_ms) as u128 * u128::from(last.eps) / 1000) as u64;
            stretches.push(Stretch { first, at_ms, eps });
        }
        // A stretch without events (a pause, or one too short to hold an
        // event) only moves time on: its successor starts at the same event.
        let mut kept: Vec<Stretch> = Vec::with_capacity(stretches.len());
        for (k, s) in stretches.iter().enumerate() {
            let next_first = stretches.get(k + 1).map_or(u64::MAX, |n| n.first);
            if s.eps > 0 && next_first > s.first {
                kept.push(*s);
            }
        }
        if kept.is_empty() {
            // Nothing is ever due; event time is never asked for.
            kept.push(Stretch {
                first: 0,
                at_ms: 0,
                eps: eps.max(1),
            });
        }
        Timeline { stretches: kept }
    }

    /// The stretch event `i` lies in, by its position.
    fn stretch(&self, i: u64) -> usize {
        self.stretches.partition_point(|s| s.first <= i).max(1) - 1
    }

    /// Milliseconds after the start at which event `i` is due.
    pub(crate) fn offset_ms(&self, i: u64) -> i64 {
        let s = self.stretches[self.stretch(i)];
        // NEXMark asks per event: a 64-bit division unless it overflows.
        let ms = match (i - s.first).checked_mul(1000) {
            Some(n) => n / s.eps,
            None => ((i - s.first) as u128 * 1000 / u128::from(s.eps)) as u64,
        };
        s.at_ms + ms as i64
    }

    /// The offsets of events `first, first + step, ..` (`n` of them) in
    /// turn: one division per stretch the events cross, not per event.
    pub(crate) fn offsets(&self, first: u64, step: u64) -> Offsets<'_> {
        let mut o = Offsets {
            timeline: self,
            i: first,
            step,
            at_ms: 0,
            next_first: 0,
            ratio: FloorRatio::new(0, 0, 1000, 1),
        };
        o.enter_stretch();
        o
    }
}

/// See [`Timeline::offsets`].
pub(crate) struct Offsets<'a> {
    timeline: &'a Timeline,
    i: u64,
    step: u64,
    /// The current stretch's start, and the first event of the next one
    /// (`u64::MAX` for the last): the per-event work is an add and a
    /// compare.
    at_ms: i64,
    next_first: u64,
    ratio: FloorRatio,
}

impl Offsets<'_> {
    /// The current event's offset in ms.
    #[inline(always)]
    pub(crate) fn get(&self) -> i64 {
        self.at_ms + self.ratio.get() as i64
    }

    #[inline(always)]
    pub(crate) fn advance(&mut self) {
        self.i = self.i.wrapping_add(self.step);
        self.ratio.advance();
        if self.i >= self.next_first {
            self.enter_stretch();
        }
    }

    /// Starts counting in the stretch the current event lies in.
    #[cold]
    fn enter_stretch(&mut self) {
        let t = self.timeline;
        let k = t.stretch(self.i);
        let s = t.stretches[k];
        self.at_ms = s.at_ms;
        self.next_first = t.stretches.get(k + 1).map_or(u64::MAX, |n| n.first);
        self.ratio = FloorRatio::new(self.i - s.first, self.step, 1000, s.eps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(s: &[(u64, u64)]) -> Vec<RateStep> {
        s.iter()
            .map(|&(ms, eps)| RateStep {
                at: std::time::Duration::from_millis(ms),
                events_per_second: eps,
            })
            .collect()
    }

    #[test]
    fn one_rate_spaces_events_evenly() {
        let t = Timeline::new(4, &[]);
        let got: Vec<i64> = (0..6).map(|i| t.offset_ms(i)).collect();
        assert_eq!(got, vec![0, 250, 500, 750, 1000, 1250]);
    }

    #[test]
    fn each_step_continues_where_the_one_before_left_off() {
        // 10/s for 1 s (events 0..10), paused for 1 s, then 100/s.
        let t = Timeline::new(10, &steps(&[(1000, 0), (2000, 100)]));
        assert_eq!(t.offset_ms(0), 0);
        assert_eq!(t.offset_ms(9), 900);
        assert_eq!(t.offset_ms(10), 2000, "the pause moves time on");
        assert_eq!(t.offset_ms(11), 2010);
        assert_eq!(t.offset_ms(110), 3000);
        // Time keeps in step with the schedule: a second of it at 100/s
        // is 100 events, not 1000 ms / 10 per event.
        assert_eq!(t.offset_ms(10 + 1000), 12_000);
    }

    #[test]
    fn offsets_in_strides_equal_the_offsets_one_by_one() {
        let t = Timeline::new(7, &steps(&[(300, 50), (900, 3), (1000, 0), (4000, 1000)]));
        for (first, step) in [(0, 1), (1, 3), (5, 256), (40, 17)] {
            let mut it = t.offsets(first, step);
            for k in 0..400u64 {
                let i = first + k * step;
                assert_eq!(it.get(), t.offset_ms(i), "first {first} step {step} i {i}");
                it.advance();
            }
        }
        assert!((1..400).all(|i| t.offset_ms(i) >= t.offset_ms(i - 1)));
    }
}
