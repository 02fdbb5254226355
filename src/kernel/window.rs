//! Event-time window assignment: which windows a timestamp belongs to.
//!
//! Times are epoch milliseconds (`i64`). Windows are half-open `[start, end)`
//! and aligned to the epoch, as in Flink and the `wcount` workload.

/// A half-open event-time interval `[start, end)` in epoch milliseconds.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

impl Window {
    /// The largest timestamp inside the window; a window fires once the
    /// watermark reaches it.
    #[inline]
    pub fn max_timestamp(&self) -> i64 {
        self.end - 1
    }

    /// Whether the two windows overlap or touch, i.e. a session would merge them.
    #[inline]
    pub fn touches(&self, other: &Window) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The smallest window covering both.
    #[inline]
    pub fn cover(&self, other: &Window) -> Window {
        Window {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// The start of the tumbling window of `size_ms` that holds `ts`.
#[inline]
pub fn tumbling_start(ts: i64, size_ms: i64) -> i64 {
    ts - ts.rem_euclid(size_ms)
}

/// The windows of a hopping assigner (`size_ms`, `slide_ms`) that hold `ts`,
/// newest first. There are `ceil(size / slide)` of them at most.
#[inline]
pub fn hopping_windows(ts: i64, size_ms: i64, slide_ms: i64) -> HoppingWindows {
    HoppingWindows {
        next_start: tumbling_start(ts, slide_ms),
        ts,
        size_ms,
        slide_ms,
    }
}

/// Iterator returned by [`hopping_windows`].
pub struct HoppingWindows {
    next_start: i64,
    ts: i64,
    size_ms: i64,
    slide_ms: i64,
}

impl Iterator for HoppingWindows {
    type Item = Window;

    #[inline]
    fn next(&mut self) -> Option<Window> {
        if self.next_start > self.ts - self.size_ms {
            let start = self.next_start;
            self.next_start -= self.slide_ms;
            Some(Window {
                start,
                end: start + self.size_ms,
            })
        } else {
            None
        }
    }
}

/// The window a single event opens in a session assigner with `gap_ms`;
/// sessions that touch are merged by the operator holding them.
#[inline]
pub fn session_window(ts: i64, gap_ms: i64) -> Window {
    Window {
        start: ts,
        end: ts.saturating_add(gap_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumbling_aligns_to_epoch_including_negative_times() {
        assert_eq!(tumbling_start(0, 1000), 0);
        assert_eq!(tumbling_start(999, 1000), 0);
        assert_eq!(tumbling_start(1000, 1000), 1000);
        assert_eq!(tumbling_start(-1, 1000), -1000);
    }

    #[test]
    fn hopping_lists_every_window_holding_the_timestamp() {
        let w: heapless::Vec<Window, 8> = hopping_windows(10_500, 10_000, 2_000).collect();
        let starts: heapless::Vec<i64, 8> = w.iter().map(|w| w.start).collect();
        assert_eq!(&starts[..], &[10_000, 8_000, 6_000, 4_000, 2_000]);
        for win in &w {
            assert!(win.start <= 10_500 && 10_500 < win.end);
        }
        // Slide equal to size degenerates to tumbling.
        assert_eq!(hopping_windows(1_234, 1_000, 1_000).count(), 1);
    }

    #[test]
    fn windows_travel_as_postcard_without_allocation() {
        let w = Window {
            start: -1_000,
            end: 9_000,
        };
        let mut buf = [0u8; 32];
        let bytes = postcard::to_slice(&w, &mut buf).unwrap();
        assert!(
            bytes.len() <= 6,
            "varints keep it small: {} bytes",
            bytes.len()
        );
        assert_eq!(postcard::from_bytes::<Window>(bytes).unwrap(), w);
    }

    #[test]
    fn sessions_touch_when_gaps_overlap() {
        let a = session_window(0, 10);
        let b = session_window(10, 10);
        let c = session_window(21, 10);
        assert!(a.touches(&b));
        assert!(!a.touches(&c));
        assert_eq!(a.cover(&b), Window { start: 0, end: 20 });
    }
}
