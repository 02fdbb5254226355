//! The `wcount` workload of WORKLOADS.md written on timely dataflow 0.32,
//! as a competent timely user would: the baseline eddy's figures are
//! compared with.
//!
//! Dataflow: a source operator per worker generates its share of the events
//! (`i = worker, worker + peers, ..`) in batches of 1024, stamped with the
//! event's 1 s window as the timely timestamp; an exchange by key; a keyed
//! count+sum per window that holds a capability per open window and emits
//! the window's rows once the input frontier has passed it; a sink that
//! counts rows and sums `count` and `sum`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use hashbrown::HashMap;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::Capability;
use timely::dataflow::operators::generic::operator::{Operator, source};
use timely::worker::Worker;

/// What the sink saw, and the wall time of the whole run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WcountResult {
    pub rows: u64,
    pub count_total: u64,
    pub sum_total: u64,
    pub seconds: f64,
}

const KEYS: u64 = 10_000;
const KEY_MULTIPLIER: u64 = 2_654_435_761;
const VALUES: u64 = 100;
/// `ts = i / 100` and windows of 1000 ms: window `w` holds events
/// `w * 100_000 .. (w + 1) * 100_000`.
const EVENTS_PER_WINDOW: u64 = 100 * 1000;
const WINDOW_MS: u64 = 1000;
/// Records per message, as timely's own buffers use (~1000).
const BATCH: usize = 1024;
/// Events generated per source activation before yielding to the
/// downstream operators, so in-flight data stays in cache.
const EVENTS_PER_ACTIVATION: usize = 32 * BATCH;

/// `(key, value)`; the event time travels as the timely timestamp (the
/// window index), which is how timely carries time.
type Event = (u64, u64);
/// `(key, window_start_ms, count, sum)`.
type Row = (u64, u64, u64, u64);
type Counts = HashMap<u64, (u64, u64)>;

/// Runs `events` events of wcount on `workers` threads and returns the
/// sink's totals.
pub fn run(events: u64, workers: usize) -> WcountResult {
    assert!(
        events.checked_mul(KEY_MULTIPLIER).is_some(),
        "the carried-forward key needs i * 2654435761 not to wrap (events < 6.9e9)"
    );
    let start = Instant::now();
    let per_worker: Vec<(u64, u64, u64)> = if workers == 1 {
        vec![timely::execute_directly(move |w| worker(w, events))]
    } else {
        timely::execute(timely::Config::process(workers), move |w| worker(w, events))
            .expect("timely starts")
            .join()
            .into_iter()
            .map(|r| r.expect("worker finishes"))
            .collect()
    };
    let seconds = start.elapsed().as_secs_f64();
    let (rows, count_total, sum_total) = per_worker
        .into_iter()
        .fold((0, 0, 0), |(r, c, s), (r2, c2, s2)| {
            (r + r2, c + c2, s + s2)
        });
    WcountResult {
        rows,
        count_total,
        sum_total,
        seconds,
    }
}

/// One worker's events, `i = first, first + step, ..` below `end`, with the
/// key and value carried forward (an add and a compare instead of two
/// divisions per event, the same trick eddy's generator uses, so both
/// sides pay the same for generation).
struct Events {
    next: u64,
    step: u64,
    end: u64,
    key: u64,
    key_step: u64,
    value: u64,
    value_step: u64,
}

impl Events {
    fn new(first: u64, step: u64, end: u64) -> Events {
        Events {
            next: first,
            step,
            end,
            key: first * KEY_MULTIPLIER % KEYS,
            key_step: step * KEY_MULTIPLIER % KEYS,
            value: first % VALUES,
            value_step: step % VALUES,
        }
    }

    #[inline(always)]
    fn advance(&mut self) -> Event {
        let event = (self.key, self.value);
        self.next += self.step;
        self.key += self.key_step;
        if self.key >= KEYS {
            self.key -= KEYS;
        }
        self.value += self.value_step;
        if self.value >= VALUES {
            self.value -= VALUES;
        }
        event
    }
}

/// Builds the dataflow on one worker, runs it to completion and returns
/// this worker's `(rows, count_total, sum_total)`.
fn worker(worker: &mut Worker, events: u64) -> (u64, u64, u64) {
    let index = worker.index() as u64;
    let peers = worker.peers() as u64;
    let totals = Rc::new(Cell::new((0u64, 0u64, 0u64)));
    let sink_totals = Rc::clone(&totals);

    worker.dataflow::<u64, _, _>(|scope| {
        source(scope, "Generate", |cap, info| {
            let activator = scope.activator_for(info.address);
            let mut cap = Some(cap);
            let mut mine = Events::new(index, peers, events);
            let mut batch: Vec<Event> = Vec::with_capacity(BATCH);
            move |output| {
                let Some(c) = cap.as_mut() else { return };
                let mut budget = EVENTS_PER_ACTIVATION;
                while budget > 0 && mine.next < mine.end {
                    let window = mine.next / EVENTS_PER_WINDOW;
                    if window > *c.time() {
                        // No more events of earlier windows from here:
                        // this is what lets their windows fire downstream.
                        c.downgrade(&window);
                    }
                    let window_end = ((window + 1) * EVENTS_PER_WINDOW).min(mine.end);
                    let mut session = output.session(c);
                    while budget > 0 && mine.next < window_end {
                        let n = ((window_end - mine.next).div_ceil(mine.step) as usize)
                            .min(BATCH)
                            .min(budget);
                        if batch.capacity() < BATCH {
                            // The channel kept the last buffer.
                            batch.reserve(BATCH);
                        }
                        for _ in 0..n {
                            batch.push(mine.advance());
                        }
                        budget -= n;
                        session.give_container(&mut batch);
                        batch.clear();
                    }
                }
                if mine.next >= mine.end {
                    cap = None;
                } else {
                    activator.activate();
                }
            }
        })
        .container::<Vec<Event>>()
        .unary_frontier(
            Exchange::new(|e: &Event| e.0),
            "WindowCountSum",
            |_cap, _info| {
                // Open windows by index, each with the capability to emit it
                // and its per-key (count, sum).
                let mut windows: BTreeMap<u64, (Capability<u64>, Counts)> = BTreeMap::new();
                // Drained maps keep their capacity for the next window.
                let mut spare: Vec<Counts> = Vec::new();
                move |(input, frontier), output| {
                    let port = output.output_index();
                    input.for_each_stamp(|cap, data| {
                        let Some(&window) = cap.least() else { return };
                        let (_, counts) = windows.entry(window).or_insert_with(|| {
                            (cap.delayed(&window, port), spare.pop().unwrap_or_default())
                        });
                        for batch in data {
                            for &(key, value) in batch.iter() {
                                let slot = counts.entry(key).or_insert((0, 0));
                                slot.0 += 1;
                                slot.1 += value;
                            }
                        }
                    });
                    // Fire every window the frontier has passed: no event of it
                    // can arrive any more.
                    while let Some(entry) = windows.first_entry() {
                        if frontier.less_equal(entry.key()) {
                            break;
                        }
                        let (cap, mut counts) = entry.remove();
                        let window_start = *cap.time() * WINDOW_MS;
                        let mut session = output.session(&cap);
                        for (key, (count, sum)) in counts.drain() {
                            session.give((key, window_start, count, sum));
                        }
                        spare.push(counts);
                    }
                }
            },
        )
        .container::<Vec<Row>>()
        .sink(Pipeline, "Sink", move |(input, _frontier)| {
            let (mut rows, mut count_total, mut sum_total) = sink_totals.get();
            input.for_each(|_cap, data| {
                for &(_, _, count, sum) in data.iter() {
                    rows += 1;
                    count_total += count;
                    sum_total += sum;
                }
            });
            sink_totals.set((rows, count_total, sum_total));
        });
    });

    while worker.has_dataflows() {
        worker.step_or_park(None);
    }
    totals.get()
}

/// Exact totals for a size that is not a whole number of windows
/// (`cargo test --bench timely_wcount`).
#[test]
fn totals_are_exact() {
    let n = 250_123u64;
    let sum: u64 = (0..n).map(|i| i % 100).sum();
    // Windows 0 and 1 are full; window 2 holds the keys of its 50 123 events.
    let keys_in_last: std::collections::HashSet<u64> =
        (200_000..n).map(|i| i * KEY_MULTIPLIER % KEYS).collect();
    for workers in [1, 2, 3] {
        let r = run(n, workers);
        assert_eq!((r.count_total, r.sum_total), (n, sum), "{workers} workers");
        assert_eq!(
            r.rows,
            2 * KEYS + keys_in_last.len() as u64,
            "{workers} workers"
        );
    }
}
