//! The generator source on one worker: its share of the event indices,
//! produced in batches, paced when a `rate` is set, resumable.
//!
//! Event `i` belongs to split `i % SPLITS`. A worker owns a contiguous range
//! of splits and keeps the next index of each, which is its position in a
//! checkpoint. Positions are per split, not per worker, so a checkpoint
//! taken with one number of workers restores with another. A worker
//! produces its splits' events in index order, one round of `SPLITS`
//! indices after another, so its event times only go forward.

use std::time::{Duration, Instant};

use crate::data::BatchBuilder;
use crate::exec::clock::now_ns;
use crate::exec::operator::{SourcePoll, SourceTask};
use crate::io::generator::{Generator, GeneratorSpec, new_generator, schema};

pub(crate) const SPLITS: u64 = 256;

pub(crate) struct GeneratorTask {
    generator: Box<dyn Generator>,
    builder: BatchBuilder,
    /// The first split this worker owns; it owns `next.len()` of them.
    first_split: u64,
    /// The next event index of each owned split.
    next: Vec<u64>,
    /// One past the last index of the whole stream, if it ends.
    end: u64,
    batch_size: usize,
    pacer: Option<Pacer>,
}

impl GeneratorTask {
    /// `resume`: the `(split, next index)` positions of a checkpoint.
    pub(crate) fn new(
        spec: &GeneratorSpec,
        rate: Option<u64>,
        count: Option<u64>,
        worker: usize,
        workers: usize,
        batch_size: usize,
        resume: Option<&[(u32, Vec<u8>)]>,
    ) -> Self {
        let share = rate.map(|r| {
            // Spread the rate so the shares add up to it exactly.
            let base = r / workers as u64;
            base + u64::from((worker as u64) < r % workers as u64)
        });
        let (w, n) = (worker as u64, workers as u64);
        let (first, last) = (w * SPLITS / n, (w + 1) * SPLITS / n);
        let resumed = |s: u64| -> Option<u64> {
            let (_, bytes) = resume?.iter().find(|(split, _)| u64::from(*split) == s)?;
            Some(u64::from_le_bytes(bytes.as_slice().try_into().ok()?))
        };
        GeneratorTask {
            generator: new_generator(spec),
            builder: BatchBuilder::new(schema(spec.kind), batch_size, true),
            first_split: first,
            next: (first..last).map(|s| resumed(s).unwrap_or(s)).collect(),
            end: count.unwrap_or(u64::MAX),
            batch_size,
            pacer: share.filter(|&r| r > 0).map(Pacer::new),
        }
    }

    /// The earliest round with an event left, if any.
    fn round(&self) -> Option<u64> {
        self.next
            .iter()
            .filter(|&&i| i < self.end)
            .map(|&i| i / SPLITS)
            .min()
    }

    /// Appends up to `n` events of the earliest round, in index order;
    /// returns how many.
    fn fill_round(&mut self, n: u64, ingest_ns: u64) -> u64 {
        let Some(round) = self.round() else { return 0 };
        let mut produced = 0;
        let mut s = 0;
        while s < self.next.len() && produced < n {
            // A run of consecutive splits due in this round is a run of
            // consecutive event indices.
            let due = |i: u64| i / SPLITS == round && i < self.end;
            if !due(self.next[s]) {
                s += 1;
                continue;
            }
            let start = self.next[s];
            let mut len = 0;
            while s + len < self.next.len()
                && produced + (len as u64) < n
                && due(self.next[s + len])
                && self.next[s + len] == start + len as u64
            {
                len += 1;
            }
            self.generator
                .fill(start, 1, len, &mut self.builder, ingest_ns);
            for k in 0..len {
                self.next[s + k] += SPLITS;
            }
            produced += len as u64;
            s += len;
        }
        produced
    }
}

impl SourceTask for GeneratorTask {
    fn poll(&mut self, stop: bool) -> SourcePoll {
        if stop || self.round().is_none() {
            return SourcePoll::Ended;
        }
        let mut n = self.batch_size as u64;
        if let Some(p) = &mut self.pacer {
            let due = p.due(Instant::now());
            if due == 0 {
                return SourcePoll::Pending(Some(p.next_due()));
            }
            n = n.min(due);
        }
        let ingest = now_ns();
        let mut produced = 0;
        while produced < n {
            let more = self.fill_round(n - produced, ingest);
            if more == 0 {
                break;
            }
            produced += more;
        }
        if let Some(p) = &mut self.pacer {
            p.produced += produced;
        }
        SourcePoll::Batch(self.builder.take())
    }

    fn position(&self) -> Vec<(u32, Vec<u8>)> {
        self.next
            .iter()
            .enumerate()
            .map(|(k, i)| {
                (
                    (self.first_split + k as u64) as u32,
                    i.to_le_bytes().to_vec(),
                )
            })
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::generator::{GeneratorKind, GeneratorSpec};

    fn keys_of(task: &mut GeneratorTask) -> Vec<i64> {
        let mut out = Vec::new();
        while let SourcePoll::Batch(b) = task.poll(false) {
            out.extend_from_slice(b.column(2).ints());
        }
        out
    }

    #[test]
    fn workers_cover_every_event_once_and_resume_with_another_worker_count() {
        let spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
        let count = 10_000;
        // `ts` is i / 100: collect indices through it, with a finer clock.
        let mut spec = spec;
        spec.events_per_second = 1000;
        let one: Vec<i64> = keys_of(&mut GeneratorTask::new(
            &spec,
            None,
            Some(count),
            0,
            1,
            100,
            None,
        ));
        assert_eq!(one, (0..count as i64).collect::<Vec<_>>());
        // Three workers stop part way; their positions resume on two.
        let mut seen = Vec::new();
        let mut positions = Vec::new();
        for w in 0..3 {
            let mut t = GeneratorTask::new(&spec, None, Some(count), w, 3, 64, None);
            for _ in 0..(w + 2) {
                if let SourcePoll::Batch(b) = t.poll(false) {
                    seen.extend_from_slice(b.column(2).ints());
                }
            }
            positions.extend(t.position());
        }
        for w in 0..2 {
            let mut t = GeneratorTask::new(&spec, None, Some(count), w, 2, 64, Some(&positions));
            seen.extend(keys_of(&mut t));
        }
        seen.sort();
        assert_eq!(seen, one, "every event exactly once across the restart");
    }

    #[test]
    fn a_worker_produces_in_time_order() {
        let spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
        for (w, n) in [(0, 2), (1, 3), (2, 3)] {
            let ts = keys_of(&mut GeneratorTask::new(
                &spec,
                None,
                Some(50_000),
                w,
                n,
                1024,
                None,
            ));
            assert!(
                ts.windows(2).all(|p| p[0] <= p[1]),
                "worker {w} of {n} goes back in time"
            );
        }
    }
}
