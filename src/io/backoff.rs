//! Exponential backoff between retries of the network sinks.

use std::time::Duration;

/// Waits that double from `initial` up to `max`.
pub(crate) struct Backoff {
    initial: Duration,
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            next: initial,
            max,
        }
    }

    /// The wait before the next retry; each call doubles the one after.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// After a success: the next failure starts from `initial` again.
    pub(crate) fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(350));
        let waits: Vec<Duration> = (0..4).map(|_| b.next_wait()).collect();
        assert_eq!(waits, [ms(100), ms(200), ms(350), ms(350)]);
        b.reset();
        assert_eq!(b.next_wait(), ms(100));
    }
}
