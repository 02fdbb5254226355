//! A window's analysis on two cores: the lanes of the graph are built in
//! two halves, message ends are scattered and matched in two halves, the
//! forward and backward path counts run side by side, and the edges are
//! weighed and summed into the report's tables in two halves.
//! A million-event window took about 60 ms on one core here, over the 50 ms
//! it may take; the small devices eddy runs on have two to four cores, and
//! the collector is idle between windows. The second thread is the
//! collector's own, so on Linux it keeps the collector's low priority (a
//! new thread inherits its creator's nice value).

/// How many cores an analysis may use, and from what size it splits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cores {
    two: bool,
    /// Below this many events (or graph points) the work stays on one
    /// core: a thread's start (tens of microseconds) would cost more than
    /// half of it saves.
    from: usize,
}

impl Cores {
    pub(crate) const ONE: Cores = Cores {
        two: false,
        from: usize::MAX,
    };

    /// Two where the machine has them, for windows of some size.
    pub(crate) fn here() -> Cores {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        Cores {
            two: n >= 2,
            from: 50_000,
        }
    }

    /// Two whatever the size, so tests reach the split on small graphs.
    #[cfg(test)]
    pub(crate) const TWO: Cores = Cores { two: true, from: 0 };

    /// Whether this analysis uses a second core at all.
    pub(crate) fn two(self) -> bool {
        self.two
    }

    /// Whether work of `size` is split.
    pub(crate) fn split(self, size: usize) -> bool {
        self.two && size >= self.from
    }
}

impl Default for Cores {
    fn default() -> Cores {
        Cores::here()
    }
}

/// Runs `a` here and `b` on a second thread when `split`, else one after
/// the other. A panic in `b` goes on in the caller.
pub(crate) fn both<A, B: Send>(
    split: bool,
    a: impl FnOnce() -> A,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if !split {
        return (a(), b());
    }
    std::thread::scope(|s| {
        let other = s.spawn(b);
        let here = a();
        match other.join() {
            Ok(there) => (here, there),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
