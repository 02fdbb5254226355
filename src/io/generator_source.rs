//! The generator source on one worker: its share of the event indices,
//! produced in batches, paced when a `rate` is set.

use std::time::{Duration, Instant};

use crate::data::BatchBuilder;
use crate::exec::clock::now_ns;
use crate::exec::operator::{SourcePoll, SourceTask};
use crate::io::generator::{Generator, GeneratorSpec, new_generator, schema};

pub(crate) struct GeneratorTask {
    generator: Box<dyn Generator>,
    builder: BatchBuilder,
    /// The next event index this worker produces; it produces every
    /// `step`-th index, so workers interleave and never overlap.
    next: u64,
    step: u64,
    /// One past the last index of the whole stream, if it ends.
    end: Option<u64>,
    batch_size: usize,
    pacer: Option<Pacer>,
}

impl GeneratorTask {
    pub(crate) fn new(
        spec: &GeneratorSpec,
        rate: Option<u64>,
        count: Option<u64>,
        worker: usize,
        workers: usize,
        batch_size: usize,
    ) -> Self {
        let share = rate.map(|r| {
            // Spread the rate so the shares add up to it exactly.
            let base = r / workers as u64;
            base + u64::from((worker as u64) < r % workers as u64)
        });
        GeneratorTask {
            generator: new_generator(spec),
            builder: BatchBuilder::new(schema(spec.kind), batch_size, true),
            next: worker as u64,
            step: workers as u64,
            end: count,
            batch_size,
            pacer: share.filter(|&r| r > 0).map(Pacer::new),
        }
    }
}

impl SourceTask for GeneratorTask {
    fn poll(&mut self, stop: bool) -> SourcePoll {
        let remaining = match self.end {
            Some(end) if self.next >= end => return SourcePoll::Ended,
            Some(end) => (end - self.next).div_ceil(self.step),
            None => u64::MAX,
        };
        if stop {
            return SourcePoll::Ended;
        }
        let mut n = (self.batch_size as u64).min(remaining);
        if let Some(p) = &mut self.pacer {
            let now = Instant::now();
            let due = p.due(now);
            if due == 0 {
                return SourcePoll::Pending(Some(p.next_due()));
            }
            n = n.min(due);
            p.produced += n;
        }
        self.generator.fill(
            self.next,
            self.step,
            n as usize,
            &mut self.builder,
            now_ns(),
        );
        self.next += n * self.step;
        SourcePoll::Batch(self.builder.take())
    }
}

/// Paces a rate: by time `t` after start, `t * rate` events are due.
struct Pacer {
    start: Instant,
    rate: u64,
    produced: u64,
}

impl Pacer {
    fn new(rate: u64) -> Pacer {
        Pacer {
            start: Instant::now(),
            rate,
            produced: 0,
        }
    }

    fn due(&self, now: Instant) -> u64 {
        let allowed =
            (now.duration_since(self.start).as_nanos() * self.rate as u128 / 1_000_000_000) as u64;
        allowed.saturating_sub(self.produced)
    }

    fn next_due(&self) -> Instant {
        let nanos = (self.produced + 1) as u128 * 1_000_000_000 / self.rate as u128;
        self.start + Duration::from_nanos(nanos as u64)
    }
}
