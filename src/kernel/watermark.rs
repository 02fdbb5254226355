//! Watermarks with bounded out-of-orderness, and the minimum over inputs.

/// The watermark before any event: nothing is known yet.
pub const WATERMARK_START: i64 = i64::MIN;
/// The final watermark: the input has ended, every window may fire.
pub const WATERMARK_END: i64 = i64::MAX;

/// Flink's bounded-out-of-orderness strategy: after seeing event time `t`,
/// no event older than `t - delay` is expected, so the watermark is
/// `max_seen - delay - 1`.
#[derive(Clone, Copy, Debug)]
pub struct BoundedOutOfOrderness {
    max_seen: i64,
    delay_ms: i64,
}

impl BoundedOutOfOrderness {
    pub fn new(delay_ms: i64) -> Self {
        Self {
            max_seen: WATERMARK_START,
            delay_ms,
        }
    }

    /// Records an event's time.
    #[inline]
    pub fn observe(&mut self, ts: i64) {
        if ts > self.max_seen {
            self.max_seen = ts;
        }
    }

    /// The current watermark.
    #[inline]
    pub fn watermark(&self) -> i64 {
        if self.max_seen == WATERMARK_START {
            WATERMARK_START
        } else {
            self.max_seen
                .saturating_sub(self.delay_ms)
                .saturating_sub(1)
        }
    }
}

/// Tracks one watermark per input and yields their minimum, which is the
/// watermark of an operator with several inputs (or several upstream workers).
#[derive(Clone, Debug)]
pub struct MinWatermark<const N: usize> {
    inputs: heapless::Vec<i64, N>,
    current: i64,
}

impl<const N: usize> MinWatermark<N> {
    /// `inputs` must be at most `N`.
    pub fn new(inputs: usize) -> Self {
        let mut v = heapless::Vec::new();
        for _ in 0..inputs.min(N) {
            let _ = v.push(WATERMARK_START);
        }
        Self {
            inputs: v,
            current: WATERMARK_START,
        }
    }

    /// Updates input `i`; returns the new minimum if it advanced.
    /// A watermark never moves backwards: an older value is ignored.
    #[inline]
    pub fn update(&mut self, i: usize, wm: i64) -> Option<i64> {
        let slot = &mut self.inputs[i];
        if wm <= *slot {
            return None;
        }
        *slot = wm;
        let min = self.inputs.iter().copied().min().unwrap_or(WATERMARK_END);
        if min > self.current {
            self.current = min;
            Some(min)
        } else {
            None
        }
    }

    pub fn current(&self) -> i64 {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_out_of_orderness_lags_by_delay() {
        let mut w = BoundedOutOfOrderness::new(100);
        assert_eq!(w.watermark(), WATERMARK_START);
        w.observe(1_000);
        w.observe(900);
        assert_eq!(w.watermark(), 899);
        let mut strict = BoundedOutOfOrderness::new(0);
        strict.observe(1_000);
        // A window [0, 1000) fires exactly when an event at 1000 has been seen.
        assert_eq!(strict.watermark(), 999);
    }

    #[test]
    fn minimum_advances_only_when_the_slowest_input_does() {
        let mut m = MinWatermark::<4>::new(2);
        assert_eq!(m.update(0, 10), None);
        assert_eq!(m.update(1, 5), Some(5));
        assert_eq!(m.update(1, 3), None, "watermarks never go back");
        assert_eq!(m.update(1, 20), Some(10));
        assert_eq!(m.update(0, WATERMARK_END), Some(20));
        assert_eq!(m.current(), 20);
    }
}
