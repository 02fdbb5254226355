//! The generator source on one worker: its share of the event indices,
//! produced in batches, paced when a `rate` is set, resumable.
//!
//! Event `i` belongs to split `i % SPLITS`. A worker owns a contiguous range
//! of splits and keeps the next index of each, which is its position in a
//! checkpoint. Positions are per split, not per worker, so a checkpoint
//! taken with one number of workers restores with another. A worker
//! produces its splits' events in index order, one round of `SPLITS`
//! indices after another, so its event times only go forward.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::config::RateStep;
use crate::data::BatchBuilder;
use crate::exec::clock::now_ns;
use crate::exec::live::BatchSize;
use crate::exec::operator::{SourcePoll, SourceTask};
use crate::io::generator::{Generator, GeneratorSpec, new_generator, schema};

pub(crate) const SPLITS: u64 = 256;

pub(crate) struct GeneratorTask {
    generator: Box<dyn Generator>,
    builder: BatchBuilder,
    /// The first split this worker owns, and how many it owns.
    first_split: u64,
    splits: u64,
    positions: Positions,
    /// One past the last index of the whole stream, if it ends.
    end: u64,
    batch_size: BatchSize,
    pacer: Option<Pacer>,
    /// `[node] flush_interval`, live: a paced generator's partial batch
    /// waits this long for more (at least [`PACE_TICK`]).
    linger_ms: Option<Arc<AtomicU64>>,
}

/// Where a worker is in its splits.
enum Positions {
    /// The usual case: every owned split is in round `round` except the
    /// first `done`, which have passed it. The next events are then the
    /// owned indices in order from `round * SPLITS + first_split + done`,
    /// produced in runs without looking at each split: a run ends with
    /// the owned range of a round, or never when the worker owns every
    /// split. (Walking the splits one by one for every batch cost a
    /// quarter of `wcount`'s throughput.)
    Lockstep { round: u64, done: u64 },
    /// Anything else (after a checkpoint taken with another number of
    /// workers): the next event index of each owned split.
    Each(Vec<u64>),
}

impl GeneratorTask {
    /// `resume`: the `(split, next index)` positions of a checkpoint;
    /// `steps`: the rates that replace `rate` from their time on.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        spec: &GeneratorSpec,
        rate: Option<u64>,
        steps: &[RateStep],
        count: Option<u64>,
        worker: usize,
        workers: usize,
        batch_size: impl Into<BatchSize>,
        resume: Option<&[(u32, Vec<u8>)]>,
    ) -> Self {
        // Spread each rate so the shares add up to it exactly.
        let share = |r: u64| r / workers as u64 + u64::from((worker as u64) < r % workers as u64);
        let pacer = rate.and_then(|r| {
            let mut segments = vec![(Duration::ZERO, share(r))];
            segments.extend(steps.iter().map(|s| (s.at, share(s.events_per_second))));
            // Without steps, a zero share is unpaced, as it always was.
            (!steps.is_empty() || share(r) > 0).then(|| Pacer::new(segments))
        });
        let batch_size = batch_size.into();
        let (w, n) = (worker as u64, workers as u64);
        let (first, last) = (w * SPLITS / n, (w + 1) * SPLITS / n);
        let resumed = |s: u64| -> Option<u64> {
            let (_, bytes) = resume?.iter().find(|(split, _)| u64::from(*split) == s)?;
            Some(u64::from_le_bytes(bytes.as_slice().try_into().ok()?))
        };
        let next: Vec<u64> = (first..last).map(|s| resumed(s).unwrap_or(s)).collect();
        GeneratorTask {
            generator: new_generator(spec),
            builder: BatchBuilder::new(schema(spec.kind), batch_size.get(), true),
            first_split: first,
            splits: last - first,
            positions: lockstep(first, &next).unwrap_or(Positions::Each(next)),
            end: count.unwrap_or(u64::MAX),
            batch_size,
            pacer,
            linger_ms: None,
        }
    }

    /// Holds a paced generator's partial batches for `flush_interval_ms`
    /// (live), as a network source's would wait in its socket at a
    /// slower read loop: fewer, fuller batches at low rates. At 10 000
    /// records/s over two workers, a batch a millisecond was 1 000 batches
    /// and as many wake-ups of the other worker a second each, most of
    /// their CPU.
    pub(crate) fn lingering(mut self, flush_interval_ms: Arc<AtomicU64>) -> Self {
        self.linger_ms = Some(flush_interval_ms);
        self
    }

    /// How long a partial batch waits after the last one went out.
    fn tick(&self) -> Duration {
        let linger = self.linger_ms.as_ref().map_or(0, |l| l.load(Relaxed));
        PACE_TICK.max(Duration::from_millis(linger))
    }

    /// The next event index of each owned split.
    fn next_indices(&self) -> Vec<u64> {
        match &self.positions {
            Positions::Lockstep { round, done } => (0..self.splits)
                .map(|k| (round + u64::from(k < *done)) * SPLITS + self.first_split + k)
                .collect(),
            Positions::Each(next) => next.clone(),
        }
    }

    fn ended(&self) -> bool {
        match &self.positions {
            Positions::Lockstep { round, done } => {
                self.splits == 0 || round * SPLITS + self.first_split + done >= self.end
            }
            Positions::Each(next) => earliest_round(next, self.end).is_none(),
        }
    }

    /// Appends up to `n` events in lockstep; returns how many.
    fn fill_lockstep(&mut self, n: u64, ingest_ns: u64) -> u64 {
        let Positions::Lockstep { round, done } = &mut self.positions else {
            unreachable!("only in lockstep")
        };
        let mut produced = 0;
        while produced < n {
            let index = *round * SPLITS + self.first_split + *done;
            if index >= self.end {
                break;
            }
            let run = if self.splits == SPLITS {
                u64::MAX
            } else {
                self.splits - *done
            };
            let len = run.min(n - produced).min(self.end - index);
            self.generator
                .fill(index, 1, len as usize, &mut self.builder, ingest_ns);
            produced += len;
            let passed = *done + len;
            *round += passed / self.splits;
            *done = passed % self.splits;
        }
        produced
    }

    /// Appends up to `n` events of the earliest round of `next`, in index
    /// order, advancing `next`; returns how many.
    fn fill_round(
        generator: &mut dyn Generator,
        builder: &mut BatchBuilder,
        next: &mut [u64],
        end: u64,
        n: u64,
        ingest_ns: u64,
    ) -> u64 {
        let Some(round) = earliest_round(next, end) else {
            return 0;
        };
        let mut produced = 0;
        let mut s = 0;
        while s < next.len() && produced < n {
            // A run of consecutive splits due in this round is a run of
            // consecutive event indices.
            let due = |i: u64| i / SPLITS == round && i < end;
            if !due(next[s]) {
                s += 1;
                continue;
            }
            let start = next[s];
            let mut len = 0;
            while s + len < next.len()
                && produced + (len as u64) < n
                && due(next[s + len])
                && next[s + len] == start + len as u64
            {
                len += 1;
            }
            generator.fill(start, 1, len, builder, ingest_ns);
            for k in 0..len {
                next[s + k] += SPLITS;
            }
            produced += len as u64;
            s += len;
        }
        produced
    }
}

/// The earliest round of `next` with an event before `end`, if any.
fn earliest_round(next: &[u64], end: u64) -> Option<u64> {
    next.iter().filter(|&&i| i < end).map(|&i| i / SPLITS).min()
}

/// `next` (the next index of splits `first..`) as `Positions::Lockstep`,
/// if it is in lockstep.
fn lockstep(first: u64, next: &[u64]) -> Option<Positions> {
    let round = *next.last()? / SPLITS;
    let at = |k: usize, r: u64| {
        r.checked_mul(SPLITS)
            .and_then(|i| i.checked_add(first + k as u64))
            == Some(next[k])
    };
    let done = (0..next.len()).take_while(|&k| at(k, round + 1)).count();
    (done..next.len())
        .all(|k| at(k, round))
        .then_some(Positions::Lockstep {
            round,
            done: done as u64,
        })
}

impl SourceTask for GeneratorTask {
    fn poll(&mut self, stop: bool) -> SourcePoll {
        if stop || self.ended() {
            return SourcePoll::Ended;
        }
        let mut n = self.batch_size.get() as u64;
        let tick = self.tick();
        let mut ingest = now_ns();
        if let Some(p) = &mut self.pacer {
            let now = Instant::now();
            let due = p.due(now);
            if due == 0 || (due < n && p.ticked.is_some_and(|t| now < t + tick)) {
                return SourcePoll::Pending(Some(p.next_batch_due(tick)));
            }
            // What the batch's first event waited beyond the pacing's
            // granularity (a longer flush interval, backpressure) is
            // latency, as it would be for a record waiting in a socket.
            let waited = now.saturating_duration_since(p.next_due());
            ingest = ingest.saturating_sub(waited.saturating_sub(PACE_TICK).as_nanos() as u64);
            p.ticked = Some(now);
            n = n.min(due);
        }
        let produced = match &mut self.positions {
            Positions::Lockstep { .. } => self.fill_lockstep(n, ingest),
            Positions::Each(next) => {
                let mut produced = 0;
                while produced < n {
                    let more = Self::fill_round(
                        self.generator.as_mut(),
                        &mut self.builder,
                        next,
                        self.end,
                        n - produced,
                        ingest,
                    );
                    if more == 0 {
                        break;
                    }
                    produced += more;
                }
                // Splits resumed from different rounds catch up with each
                // other; from then on, runs are quick again.
                if let Some(l) = lockstep(self.first_split, next) {
                    self.positions = l;
                }
                produced
            }
        };
        if let Some(p) = &mut self.pacer {
            p.produced += produced;
        }
        SourcePoll::Batch(self.builder.take())
    }

    fn position(&self) -> Vec<(u32, Vec<u8>)> {
        self.next_indices()
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

/// How often a paced generator emits what is due, unless a whole batch
/// is due sooner. Emitting each event as it fell due woke the worker every
/// 20 µs at 50k events/s, and each of its tiny batches woke the worker its
/// keys went to: with 2 workers at 100k events/s, 45 % of their CPU time
/// was futex wake-ups in the kernel. A millisecond is far below any
/// latency goal eddy is run with, and matches what a network source
/// gathers between two reads.
const PACE_TICK: Duration = Duration::from_millis(1);

/// Paces a rate schedule: by time `t` after start, the integral of the
/// rate up to `t` is due (with one rate: `t * rate`). Events that could not
/// go out in time (backpressure) are due at once when it clears.
struct Pacer {
    start: Instant,
    /// (from, events per second), `from` increasing, the first at zero.
    segments: Vec<(Duration, u64)>,
    produced: u64,
    /// When the last batch went out.
    ticked: Option<Instant>,
}

const NS: u128 = 1_000_000_000;

impl Pacer {
    fn new(segments: Vec<(Duration, u64)>) -> Pacer {
        Pacer {
            start: Instant::now(),
            segments,
            produced: 0,
            ticked: None,
        }
    }

    /// When to look again: once the next event is due, but not before a
    /// `tick` after the last batch.
    fn next_batch_due(&self, tick: Duration) -> Instant {
        let next = self.next_due();
        self.ticked.map_or(next, |t| next.max(t + tick))
    }

    /// Segment `k`'s span in ns (`None`: the last, endless).
    fn len_ns(&self, k: usize) -> Option<u128> {
        let from = self.segments[k].0.as_nanos();
        self.segments.get(k + 1).map(|n| n.0.as_nanos() - from)
    }

    /// Events due by `elapsed` after start.
    fn allowed(&self, elapsed: Duration) -> u64 {
        let t = elapsed.as_nanos();
        let mut sum: u128 = 0;
        for (k, &(from, rate)) in self.segments.iter().enumerate() {
            let from = from.as_nanos();
            if t <= from {
                break;
            }
            let span = self.len_ns(k).map_or(t - from, |len| len.min(t - from));
            sum += span * u128::from(rate) / NS;
        }
        sum.min(u128::from(u64::MAX)) as u64
    }

    fn due(&self, now: Instant) -> u64 {
        self.allowed(now.duration_since(self.start))
            .saturating_sub(self.produced)
    }

    /// When the next event is due (far ahead when no rate follows).
    fn next_due(&self) -> Instant {
        let target = u128::from(self.produced) + 1;
        let mut before: u128 = 0;
        for (k, &(from, rate)) in self.segments.iter().enumerate() {
            let whole = self.len_ns(k).map(|len| len * u128::from(rate) / NS);
            if rate > 0 && whole.is_none_or(|w| before + w >= target) {
                let nanos = ((target - before) * NS).div_ceil(u128::from(rate));
                let at = from.as_nanos() + nanos;
                return self.start + Duration::from_nanos(at.min(u128::from(u64::MAX)) as u64);
            }
            before += whole.unwrap_or(0);
        }
        Instant::now() + Duration::from_secs(3600)
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
    fn batches_follow_the_live_batch_size_and_the_stream_stays_whole() {
        let spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
        let count = 10_000;
        let live = BatchSize::from(1000);
        let mut t = GeneratorTask::new(&spec, None, &[], Some(count), 0, 1, live.clone(), None);
        let mut sizes = Vec::new();
        let mut got = Vec::new();
        while let SourcePoll::Batch(b) = t.poll(false) {
            sizes.push(b.len());
            got.extend_from_slice(b.column(2).ints());
            match sizes.len() {
                2 => live.set(10),
                4 => live.set(4000),
                _ => {}
            }
        }
        assert_eq!(sizes[..6], [1000, 1000, 10, 10, 4000, 3980], "{sizes:?}");
        let mut all = GeneratorTask::new(&spec, None, &[], Some(count), 0, 1, 10_000, None);
        assert_eq!(got, keys_of(&mut all));
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
            &[],
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
            let mut t = GeneratorTask::new(&spec, None, &[], Some(count), w, 3, 64, None);
            for _ in 0..(w + 2) {
                if let SourcePoll::Batch(b) = t.poll(false) {
                    seen.extend_from_slice(b.column(2).ints());
                }
            }
            positions.extend(t.position());
        }
        for w in 0..2 {
            let mut t =
                GeneratorTask::new(&spec, None, &[], Some(count), w, 2, 64, Some(&positions));
            seen.extend(keys_of(&mut t));
        }
        seen.sort();
        assert_eq!(seen, one, "every event exactly once across the restart");
    }

    /// What a worker owes, by definition: every index below `count` of
    /// its splits, from each split's position on, in index order.
    fn owed(first: u64, next: &[u64], count: u64) -> Vec<i64> {
        (0..count)
            .filter(|&i| {
                let s = i % SPLITS;
                s >= first && s < first + next.len() as u64 && i >= next[(s - first) as usize]
            })
            .map(|i| i as i64)
            .collect()
    }

    #[test]
    fn runs_and_positions_match_the_per_split_definition() {
        let mut spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
        spec.events_per_second = 1000;
        let count = 5_000;
        for workers in [1, 2, 3, 7] {
            for batch in [1, 100, 1024] {
                for w in 0..workers {
                    let mut t =
                        GeneratorTask::new(&spec, None, &[], Some(count), w, workers, batch, None);
                    let (first, start) = (t.first_split, t.next_indices());
                    assert!(matches!(t.positions, Positions::Lockstep { .. }));
                    let mut got = Vec::new();
                    // Positions after every batch say exactly what is left.
                    while let SourcePoll::Batch(b) = t.poll(false) {
                        got.extend_from_slice(b.column(2).ints());
                        let left: Vec<i64> = owed(first, &t.next_indices(), count);
                        let want = owed(first, &start, count);
                        assert_eq!(left, want[got.len()..], "{w} of {workers}, batch {batch}");
                    }
                    assert_eq!(
                        got,
                        owed(first, &start, count),
                        "{w} of {workers}, batch {batch}"
                    );
                }
            }
        }
    }

    #[test]
    fn splits_resumed_from_different_rounds_catch_up_into_lockstep() {
        let mut spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
        spec.events_per_second = 1000;
        let count = 20_000;
        // Split s resumes s / 10 rounds late of round 40.
        let positions: Vec<(u32, Vec<u8>)> = (0..SPLITS)
            .map(|s| {
                (
                    s as u32,
                    ((40 - s / 10) * SPLITS + s).to_le_bytes().to_vec(),
                )
            })
            .collect();
        let mut t = GeneratorTask::new(&spec, None, &[], Some(count), 0, 1, 500, Some(&positions));
        let start = t.next_indices();
        assert!(matches!(t.positions, Positions::Each(_)));
        let mut got = Vec::new();
        while let SourcePoll::Batch(b) = t.poll(false) {
            got.extend_from_slice(b.column(2).ints());
        }
        assert!(matches!(t.positions, Positions::Lockstep { .. }));
        assert_eq!(got, owed(0, &start, count));
    }

    #[test]
    fn a_worker_produces_in_time_order() {
        let spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
        for (w, n) in [(0, 2), (1, 3), (2, 3)] {
            let ts = keys_of(&mut GeneratorTask::new(
                &spec,
                None,
                &[],
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

    #[test]
    fn a_rate_schedule_is_paced_as_its_integral() {
        let step = |ms: u64, r: u64| (Duration::from_millis(ms), r);
        let p = Pacer::new(vec![
            step(0, 100),
            step(1000, 1000),
            step(2000, 0),
            step(3000, 10),
        ]);
        let at = |ms: u64| p.allowed(Duration::from_millis(ms));
        assert_eq!(at(500), 50);
        assert_eq!(at(1000), 100);
        assert_eq!(at(1500), 600);
        assert_eq!(at(2500), 1100, "a zero rate pauses");
        assert_eq!(at(4000), 1110);
        let mut p = p;
        p.produced = 100;
        let next = p.next_due().duration_since(p.start);
        assert_eq!(next, Duration::from_millis(1001));
        p.produced = 1100;
        let next = p.next_due().duration_since(p.start);
        assert_eq!(next, Duration::from_millis(3100), "skips the pause");
    }

    #[test]
    fn a_flush_interval_holds_partial_batches_and_counts_their_wait() {
        let mut spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
        spec.events_per_second = 10_000;
        let linger = Arc::new(AtomicU64::new(20));
        let mut t = GeneratorTask::new(&spec, Some(10_000), &[], None, 0, 1, 100_000, None)
            .lingering(linger.clone());
        let start = Instant::now();
        let mut batches = Vec::new();
        while start.elapsed() < Duration::from_millis(100) {
            if let SourcePoll::Batch(b) = t.poll(false) {
                batches.push((now_ns(), b));
            }
        }
        // The first at once, then one per 20 ms at most (a batch a tick
        // would be 100).
        assert!(
            (2..=6).contains(&batches.len()),
            "{} batches",
            batches.len()
        );
        for (at, b) in &batches[1..] {
            // Its first event was due just after the last batch went: it
            // waited about 20 ms, less the millisecond of pacing.
            let stamp = b.ingest_ns().iter().copied().min().unwrap();
            assert!(at - stamp >= 15_000_000, "waited {} ns", at - stamp);
            assert!(b.len() >= 150, "{} events", b.len());
        }
        // Live: back to a tick.
        linger.store(0, Relaxed);
        std::thread::sleep(Duration::from_millis(25));
        assert!(matches!(t.poll(false), SourcePoll::Batch(_)));
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(t.poll(false), SourcePoll::Batch(_)));
    }

    #[test]
    fn a_fast_rate_goes_out_once_a_tick_and_nothing_due_is_held_back() {
        let mut spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
        spec.events_per_second = 200_000;
        let mut t = GeneratorTask::new(&spec, Some(200_000), &[], None, 0, 1, 100_000, None);
        let start = Instant::now();
        let mut batches = 0;
        // Polled without a pause, as a busy worker would.
        while start.elapsed() < Duration::from_millis(30) {
            if let SourcePoll::Batch(_) = t.poll(false) {
                batches += 1;
            }
        }
        // One batch at the start, then at most one a tick (each event on
        // its own would be a batch every 5 µs here).
        assert!(batches <= 32, "{batches} batches in 30 ms");
        // A tick after the last batch, everything due goes out at once.
        std::thread::sleep(PACE_TICK);
        let at = Instant::now();
        assert!(matches!(t.poll(false), SourcePoll::Batch(_)));
        let pacer = t.pacer.as_ref().expect("paced");
        assert_eq!(
            pacer.due(at),
            0,
            "events due before the poll were held back"
        );
    }
}
