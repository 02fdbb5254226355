//! Running a plan: worker threads, each with an instance of every operator,
//! records exchanged between them by key bin over bounded channels,
//! watermarks, end of input, and the intrinsic metrics.

mod align;
mod bin_wire;
pub(crate) mod checkpoint;
pub(crate) mod clock;
pub(crate) mod cluster_checkpoint;
mod committer;
pub(crate) mod heartbeat;
mod held;
pub(crate) mod join;
pub(crate) mod live;
pub(crate) mod recorder;

pub(crate) mod metrics;
mod migration;
mod migration_mesh;
pub(crate) mod operator;
mod ops;
pub(crate) mod remote;
mod start;
#[cfg(test)]
mod watermark_interval_tests;
mod worker;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::io::dead_letter::DeadLetter;
use crate::kernel::counters::Counters;
use crate::plan::{NodeKind, Plan};
use metrics::{Latency, OpMetrics};

pub(crate) use migration::RebalanceError;
pub(crate) use remote::Cluster;
pub(crate) use start::{start, start_with};

/// What every worker of a run shares.
pub(crate) struct Shared {
    /// Workers of this node.
    pub(crate) workers: usize,
    /// Workers of the whole run: `workers` alone, or every member's in a
    /// distributed run. Exchanges and ports index senders by global worker.
    pub(crate) global_workers: usize,
    /// Global index of this node's worker 0.
    pub(crate) first_worker: usize,
    pub(crate) bins: u32,
    /// The global worker that owns each bin.
    pub(crate) assignment: Vec<u16>,
    pub(crate) channel_capacity: usize,
    /// `[node] watermark_interval`.
    pub(crate) watermark_interval: Duration,
    pub(crate) dead_letter: Arc<DeadLetter>,
    /// Set to end the sources (a signal, or a failure).
    pub(crate) stop: Arc<AtomicBool>,
    /// Set when the run cannot go on; workers return at once.
    pub(crate) failed: AtomicBool,
    failure: Mutex<Option<String>>,
    /// Set after a final checkpoint when stopping: workers return at once,
    /// leaving open windows to the checkpoint.
    pub(crate) halted: AtomicBool,
    /// The final checkpoint's id (`u64::MAX` until one is asked for):
    /// sources stop reading once they injected its barrier, so the
    /// checkpoint is exactly where the next run (or a reload) resumes and
    /// no sink sees a record twice.
    pub(crate) last_barrier: AtomicU64,
    /// Worker thread handles, for wakeups; set before any work starts.
    pub(crate) threads: OnceLock<Vec<Thread>>,
    /// `None` when checkpoints are off.
    pub(crate) checkpoints: Option<Arc<checkpoint::Checkpoints>>,
    /// The checkpoint this run resumes from.
    pub(crate) restored: Option<Arc<crate::state::CheckpointRecord>>,
    /// Closes the network sources before a final checkpoint.
    pub(crate) ingest: crate::io::IngestControl,
    /// Live bin migration between the run's workers (this node's, and
    /// the other members' in a distributed run).
    pub(crate) migration: Option<Arc<migration::Control>>,
    /// Rows the workers spilled to disk while holding them for a bin whose
    /// state was on its way (`[migration] hold_memory`).
    pub(crate) held_spilled: Arc<AtomicU64>,
    /// A latency probe on one node (`eddy bench migration`); unset, it
    /// costs one load per delivered batch.
    pub(crate) probe: OnceLock<Arc<Probe>>,
    /// Workers about to return (every instance ended); a migration does
    /// not start while one is, and none returns while one runs.
    pub(crate) finishing: std::sync::atomic::AtomicUsize,
    /// This member drained (SIGTERM) and left the run: its workers end
    /// every instance and return without waiting for the other members'
    /// `End`, and its streams closing is no failure.
    pub(crate) left: AtomicBool,
    /// Some worker of this member sent `End` on an exchange: its input
    /// ended by itself, and a bin can no longer leave on that stream, so
    /// SIGTERM cannot drain it.
    pub(crate) ended_exchange: AtomicBool,
    /// SIGTERM drains this member: `End` on exchanges waits until it
    /// leaves.
    pub(crate) draining: AtomicBool,
    /// Workers of the whole run now: `global_workers` grows when a node
    /// joins (`join.rs`); the workers' own view grows with their senders.
    pub(crate) total_workers: std::sync::atomic::AtomicUsize,
    /// What adding a member that joins needs (a distributed run).
    pub(crate) join: OnceLock<Arc<join::Hook>>,
    /// The checkpoint interval and cache size, changed while running.
    pub(crate) live: Arc<live::LiveSettings>,
    /// Recent records of the sources a profiling run replays, by id.
    pub(crate) recorders: std::collections::BTreeMap<String, Arc<recorder::Recorder>>,
    /// In a distributed run: the run's id and this member's checkpoints
    /// when it began, for its gossip (`NodeSummary::run`).
    pub(crate) run_stamp: Option<(u64, cluster_checkpoint::Marks)>,
}

/// Records, for batches that `node` has applied, when (since `origin`)
/// and how long after its oldest record was emitted by a source.
pub(crate) struct Probe {
    pub(crate) node: usize,
    pub(crate) origin: Instant,
    /// Per local worker: (ns since origin, latency ns).
    pub(crate) samples: Vec<Mutex<Vec<(u64, u64)>>>,
}

impl Shared {
    /// Asks the sources to end; the pipeline then drains.
    pub(crate) fn request_stop(&self) {
        self.stop.store(true, Relaxed);
        if let Some(threads) = self.threads.get() {
            threads.iter().for_each(Thread::unpark);
        }
    }

    /// Wakes global worker `w` if it is on this node.
    pub(crate) fn wake(&self, w: usize) {
        if let Some(local) = w.checked_sub(self.first_worker)
            && local < self.workers
            && let Some(threads) = self.threads.get()
        {
            threads[local].unpark();
        }
    }

    pub(crate) fn wake_workers(&self) {
        if let Some(threads) = self.threads.get() {
            threads.iter().for_each(Thread::unpark);
        }
    }

    /// Ends the run with an error; the first message wins.
    pub(crate) fn fail(&self, message: String) {
        tracing::error!("{message}");
        let mut slot = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(message);
        self.failed.store(true, Relaxed);
        self.stop.store(true, Relaxed);
        if let Some(threads) = self.threads.get() {
            threads.iter().for_each(Thread::unpark);
        }
    }
}

/// Bins spread evenly over workers in contiguous ranges.
pub(crate) fn even_assignment(bins: u32, workers: usize) -> Vec<u16> {
    (0..bins as usize)
        .map(|b| (b * workers / bins as usize) as u16)
        .collect()
}

/// Reads a run's counters, also while it runs (the local API's
/// `/metrics`).
#[derive(Clone)]
pub(crate) struct Reporter {
    plan: Arc<Plan>,
    shared: Arc<Shared>,
    started: Instant,
    /// `[node][worker]`
    metrics: Vec<Vec<Arc<OpMetrics>>>,
    /// Per node; sinks only.
    latency: Vec<Option<Arc<Latency>>>,
}

/// A started run.
pub(crate) struct Running {
    shared: Arc<Shared>,
    reporter: Reporter,
    workers: Vec<JoinHandle<()>>,
    /// Reader and writer threads.
    helpers: Vec<JoinHandle<()>>,
    /// The periodic checkpoint thread, and how to stop it.
    committer: Option<JoinHandle<()>>,
    committer_quit: Arc<AtomicBool>,
    /// Every sink writer, to end it once the workers are done.
    shutdowns: Vec<crate::io::SinkWriterHandle>,
    /// The exchanges with other nodes, in a distributed run.
    remote: Option<remote::RemoteExchange>,
}

/// The counters of one component over all workers.
#[derive(Clone, Debug)]
pub(crate) struct ComponentReport {
    pub(crate) id: String,
    pub(crate) kind: NodeKind,
    pub(crate) type_name: String,
    pub(crate) counters: Counters,
    pub(crate) errors: u64,
    pub(crate) late: u64,
    /// Bins evicted to the store and loaded back (state over the cache).
    pub(crate) state_evictions: u64,
    pub(crate) state_loads: u64,
    /// Sinks: end-to-end latency in microseconds.
    pub(crate) latency_us: Option<hdrhistogram::Histogram<u64>>,
    /// Per worker of this node (index = its local number): the instance's
    /// watermark, if it has one (untimed streams and ended ones have none).
    pub(crate) watermarks_ms: Vec<Option<i64>>,
}

/// A keyed component's per-bin counters on this node, summed over its
/// workers (index = bin).
#[derive(Clone, Debug)]
pub(crate) struct BinCounters {
    /// Index into the plan's nodes.
    pub(crate) component: usize,
    /// Records received per bin so far.
    pub(crate) received: Vec<u64>,
    /// State bytes per bin (windows; 0 for the others).
    pub(crate) state_bytes: Vec<u64>,
}

/// How a run went.
pub(crate) struct Report {
    pub(crate) elapsed: Duration,
    pub(crate) components: Vec<ComponentReport>,
    pub(crate) dead_letters: u64,
    pub(crate) dead_letter_path: std::path::PathBuf,
    /// Set when the run failed.
    pub(crate) failure: Option<String>,
    /// `None` without checkpoints.
    pub(crate) checkpoints: Option<checkpoint::CheckpointStats>,
    /// Keyed components' per-bin counters.
    pub(crate) bins: Vec<BinCounters>,
    /// Whether this node's workers own each bin.
    pub(crate) owned_bins: Vec<bool>,
    /// See [`Shared::held_spilled`].
    pub(crate) held_spilled_rows: u64,
    /// The live settings in force (see `live`).
    pub(crate) live: LiveView,
}

/// The live settings in force: the tuner may have changed them since the
/// run started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveView {
    pub(crate) checkpoint_interval_ms: u64,
    pub(crate) cache_bytes: u64,
    pub(crate) batch_size: usize,
}

impl Reporter {
    /// The run's shared state (`POST /rebalance`).
    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The plan this run executes.
    pub(crate) fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// The rate plan node `node` is offered now, where it is known: a
    /// paced generator's schedule at this moment, this node's share of
    /// it. A backlogged pipeline takes less out of its sources than they
    /// are offered, so their output rate hides the demand.
    pub(crate) fn offered_per_s(&self, node: usize) -> Option<f64> {
        let crate::plan::OpSpec::Generator(g) = &self.plan.nodes.get(node)?.op else {
            return None;
        };
        let share = self.shared.workers as f64 / self.shared.global_workers.max(1) as f64;
        g.rate_at(self.started.elapsed()).map(|r| r as f64 * share)
    }

    /// The counters of every instance, `[component][local worker]` (the
    /// controller's gossip reads per-instance rates from them).
    pub(crate) fn instances(&self) -> Vec<Vec<Counters>> {
        self.metrics
            .iter()
            .map(|ws| ws.iter().map(|m| m.counters()).collect())
            .collect()
    }

    /// Workers on this node and the bins they own.
    pub(crate) fn workers_and_bins(&self) -> (usize, u32) {
        let s = &self.shared;
        let mine = s.first_worker..s.first_worker + s.workers;
        let bins = s
            .assignment
            .iter()
            .filter(|&&w| mine.contains(&usize::from(w)))
            .count();
        (s.workers, bins as u32)
    }

    /// Every keyed component's per-bin counters on this node.
    pub(crate) fn bins(&self) -> Vec<BinCounters> {
        let mut out = Vec::new();
        for (i, instances) in self.metrics.iter().enumerate() {
            let mut sum: Option<BinCounters> = None;
            for m in instances {
                let (received, bytes) = m.bins();
                if received.is_empty() {
                    continue;
                }
                let s = sum.get_or_insert_with(|| BinCounters {
                    component: i,
                    received: vec![0; received.len()],
                    state_bytes: vec![0; bytes.len()],
                });
                s.received
                    .iter_mut()
                    .zip(received)
                    .for_each(|(a, b)| *a += b);
                s.state_bytes
                    .iter_mut()
                    .zip(bytes)
                    .for_each(|(a, b)| *a += b);
            }
            out.extend(sum);
        }
        out
    }

    /// Whether this node's workers own each bin: in the assignment in
    /// force, or, while a migration runs, the one the run started with.
    pub(crate) fn owned_bins(&self) -> Vec<bool> {
        let s = &self.shared;
        let mine = s.first_worker..s.first_worker + s.workers;
        match s.assignment_in_force() {
            Some((_, owners)) => owners
                .iter()
                .map(|&w| mine.contains(&(w as usize)))
                .collect(),
            None => s
                .assignment
                .iter()
                .map(|&w| mine.contains(&usize::from(w)))
                .collect(),
        }
    }

    pub(crate) fn report(&self) -> Report {
        let components = self
            .plan
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut total = Counters::default();
                let (mut errors, mut late, mut evictions, mut loads) = (0, 0, 0, 0);
                for m in &self.metrics[i] {
                    let c = m.counters();
                    total.records_in += c.records_in;
                    total.records_out += c.records_out;
                    total.useful_ns += c.useful_ns;
                    total.waiting_ns += c.waiting_ns;
                    total.blocked_ns += c.blocked_ns;
                    errors += m.errors.load(Relaxed);
                    late += m.late.load(Relaxed);
                    evictions += m.state_evictions.load(Relaxed);
                    loads += m.state_loads.load(Relaxed);
                }
                ComponentReport {
                    id: n.id.clone(),
                    kind: n.kind,
                    type_name: n.type_name.clone(),
                    counters: total,
                    errors,
                    late,
                    state_evictions: evictions,
                    state_loads: loads,
                    latency_us: self.latency[i].as_ref().map(|l| l.snapshot()),
                    watermarks_ms: self.metrics[i].iter().map(|m| m.watermark.get()).collect(),
                }
            })
            .collect();
        Report {
            elapsed: self.started.elapsed(),
            components,
            dead_letters: self.shared.dead_letter.count(),
            dead_letter_path: self.shared.dead_letter.path().to_path_buf(),
            checkpoints: self.shared.checkpoints.as_ref().map(|c| c.stats()),
            bins: self.bins(),
            owned_bins: self.owned_bins(),
            held_spilled_rows: self.shared.held_spilled.load(Relaxed),
            live: LiveView {
                checkpoint_interval_ms: self.shared.live.checkpoint_interval_ms(),
                cache_bytes: self.shared.live.cache_bytes(),
                batch_size: self.shared.live.batch_size.get(),
            },
            failure: self
                .shared
                .failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

impl Running {
    pub(crate) fn is_finished(&self) -> bool {
        self.workers.iter().all(JoinHandle::is_finished)
    }

    /// Asks the sources to end; the pipeline then drains.
    pub(crate) fn stop(&self) {
        self.shared.request_stop();
    }

    pub(crate) fn has_checkpoints(&self) -> bool {
        self.shared.checkpoints.is_some()
    }

    /// Stops with a checkpoint: takes one now, then lets the workers return
    /// without firing open windows, which the next run restores.
    /// If the checkpoint cannot complete within `timeout` (a stalled
    /// sink), the workers stop anyway and the next run resumes from the
    /// checkpoint before.
    pub(crate) fn checkpoint_and_halt(&mut self, timeout: Duration) -> Result<u64, String> {
        let cp = self
            .shared
            .checkpoints
            .clone()
            .ok_or("checkpoints are off")?;
        self.stop_committer();
        // `take` requests this id, after any checkpoint still in flight.
        self.shared.last_barrier.store(cp.requested() + 1, Relaxed);
        let deadline = Instant::now() + timeout;
        // Records that network sources took exist nowhere else: let them
        // enter the pipeline before the barrier, so the checkpoint covers
        // them.
        self.shared.ingest.close();
        self.shared.wake_workers();
        while !self.shared.ingest.drained() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !self.shared.ingest.drained() {
            tracing::warn!(
                "the network sources did not hand over what they took in time; the final checkpoint goes on without it"
            );
        }
        let taken = committer::take(&self.shared, &cp, &|| Instant::now() < deadline);
        self.shared.halted.store(true, Relaxed);
        self.shared.wake_workers();
        match taken? {
            Some(c) => Ok(c.id),
            None => Err(format!(
                "it did not complete within {timeout:?}; the next run resumes from the one before"
            )),
        }
    }

    fn stop_committer(&mut self) {
        self.committer_quit.store(true, Relaxed);
        if let Some(h) = self.committer.take() {
            let _ = h.join();
        }
    }

    /// The run's shared state (to trigger a migration, set a probe).
    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    pub(crate) fn reporter(&self) -> Reporter {
        self.reporter.clone()
    }

    pub(crate) fn report(&self) -> Report {
        self.reporter.report()
    }

    /// Waits for the run to end (every source ended and drained, or a
    /// failure) and reports.
    pub(crate) fn wait(mut self) -> Report {
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(r) = self.remote.take() {
            r.finish(&self.shared);
        }
        let elapsed = self.reporter.started.elapsed();
        self.stop_committer();
        let finished = !self.shared.failed.load(Relaxed) && !self.shared.halted.load(Relaxed);
        if let (Some(cp), true) = (self.shared.checkpoints.clone(), finished) {
            // Every instance has ended: this checkpoint records the run as
            // complete, and commits what exactly-once sinks still hold.
            let id = cp.requested() + 1;
            match cp.commit(id, true, &|| true) {
                Ok(_) => tracing::debug!(checkpoint = id, "the run is complete"),
                Err(e) => self.shared.fail(e),
            }
        }
        for tx in self.shutdowns.drain(..) {
            let _ = tx.send(crate::io::WriterMsg::Shutdown);
        }
        // Operators are gone, so sink writers see their channels close and
        // flush. Readers may block on stdin forever: do not wait for those.
        // Network sources (`eddy-net-*`) have stopped taking input by now
        // and end within their poll interval, releasing their ports.
        for h in self.helpers.drain(..) {
            if h.thread()
                .name()
                .is_some_and(|n| n.starts_with("eddy-write") || n.starts_with("eddy-net"))
            {
                let _ = h.join();
            }
        }
        let mut report = self.report();
        report.elapsed = elapsed;
        report
    }
}
