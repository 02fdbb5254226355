//! Checkpoints: requesting barriers, collecting what every operator
//! instance snapshots when the barrier reaches it, and committing it all to
//! the store in one step.
//!
//! Alignment needs no buffering: a worker injects barrier N at its sources
//! and then produces nothing until every instance has passed N
//! ([`Checkpoints::aligned`]). So no record produced after a barrier
//! exists anywhere while an operator still waits for barriers, and the
//! per-sender FIFO channels deliver every record produced before it
//! first. Sources pause only for the time in-flight batches take to drain.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::state::{BinContent, BinWrite, CheckpointRecord, OperatorRecord, Store, StoreError};

/// The barrier id of the checkpoint taken when a run completes.
pub(crate) const FINAL: u64 = u64::MAX;

/// What one operator instance contributes to a checkpoint.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Full state of every bin changed since the last snapshot.
    pub(crate) bins: Vec<(u32, crate::state::BinEntries)>,
    /// Bins that became empty since the last snapshot.
    pub(crate) emptied: Vec<u32>,
    /// Bins whose state was spilled to the store unchanged since: the
    /// checkpoint adopts the spilled version.
    pub(crate) spilled: Vec<(u32, crate::state::BinRecord)>,
    /// Sources: their position, as `(split, position)` pairs.
    pub(crate) position: Vec<(u32, Vec<u8>)>,
    pub(crate) watermark: i64,
    /// The operator could not take its snapshot: the pipeline fails, and
    /// this checkpoint never completes.
    pub(crate) failure: Option<String>,
}

/// Told the id of every committed checkpoint.
pub(crate) type CommitListener = Box<dyn Fn(u64) + Send + Sync>;

/// A source's `(split, position)` pairs.
type Positions = Vec<(u32, Vec<u8>)>;
/// Every source node's positions in one checkpoint.
type NodePositions = Vec<(usize, Positions)>;

/// Told a source's positions in every committed checkpoint (an MQTT
/// source acknowledges what they cover).
pub(crate) type SourceListener = Box<dyn Fn(&[(u32, Vec<u8>)]) + Send + Sync>;

/// One node of the plan as the collector sees it.
pub(crate) struct NodeInfo {
    pub(crate) id: String,
    pub(crate) stateful: bool,
    pub(crate) source: bool,
    /// An exactly-once sink, which hands over a piece per checkpoint.
    pub(crate) exact_sink: bool,
    /// What its state means (`plan::state_signature`).
    pub(crate) signature: u64,
}

#[derive(Default)]
struct Collector {
    /// Per instance (`node * workers + worker`): the newest checkpoint it
    /// has passed; `FINAL` once it has ended.
    passed: Vec<u64>,
    /// Snapshots waiting to be committed, per checkpoint id.
    snapshots: BTreeMap<u64, Vec<(usize, Snapshot)>>,
    /// Final snapshots of instances that ended, not yet committed.
    finals: Vec<(usize, Snapshot)>,
    /// Exactly-once sink pieces per checkpoint id, per node.
    pieces: BTreeMap<u64, BTreeMap<usize, Vec<u8>>>,
    /// Exactly-once sinks whose instances all ended: they have handed over
    /// everything (their FINAL piece, perhaps committed already).
    finished: std::collections::BTreeSet<usize>,
    /// The newest position each source instance reported (an ended
    /// source's final position stays here).
    positions: BTreeMap<usize, Vec<(u32, Vec<u8>)>>,
    /// The newest watermark of each stateful instance.
    watermarks: BTreeMap<usize, i64>,
    /// The newest checkpoint id committed.
    committed: u64,
}

pub(crate) struct Checkpoints {
    store: std::sync::Arc<Store>,
    nodes: Vec<NodeInfo>,
    workers: usize,
    bins: u32,
    requested: AtomicU64,
    /// What workers wait for: `local_aligned`, held back in a distributed
    /// run to `cluster_aligned` (see [`Checkpoints::into_cluster`]).
    aligned: AtomicU64,
    /// The newest checkpoint every instance of this node has passed.
    local_aligned: AtomicU64,
    /// In a distributed run: the newest checkpoint every instance of every
    /// member has passed, as the checkpoint leader announced it.
    /// `u64::MAX` outside one.
    cluster_aligned: AtomicU64,
    /// In a distributed run: what committed checkpoints tell sinks and
    /// sources, held until every member committed them.
    held_announcements: Mutex<Option<BTreeMap<u64, NodePositions>>>,
    /// In a distributed run: the assignment each checkpoint in flight is
    /// taken at, stored with it.
    cluster_meta: Mutex<BTreeMap<u64, Vec<u8>>>,
    collector: Mutex<Collector>,
    changed: Condvar,
    /// Exactly-once sink writers, told when a checkpoint is committed.
    commits: Mutex<BTreeMap<usize, CommitListener>>,
    /// Sources told their committed positions, by node.
    source_commits: Mutex<BTreeMap<usize, SourceListener>>,
    /// When the checkpoint in flight was requested.
    requested_at: Mutex<Option<Instant>>,
    stats: Mutex<CheckpointStats>,
}

/// The checkpoints of this run so far, for `--stats` and `/metrics`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CheckpointStats {
    pub(crate) completed: u64,
    pub(crate) last_id: u64,
    /// From the request of its barriers to its commit.
    pub(crate) last_duration: Duration,
    pub(crate) max_duration: Duration,
    /// Bytes of state written.
    pub(crate) last_bytes: u64,
    pub(crate) bytes_total: u64,
}

/// The outcome of one commit, for logs and benchmarks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Committed {
    pub(crate) id: u64,
    pub(crate) bins: usize,
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
    pub(crate) duration: Duration,
}

impl Checkpoints {
    pub(crate) fn new(
        store: std::sync::Arc<Store>,
        nodes: Vec<NodeInfo>,
        workers: usize,
        bins: u32,
        last_id: u64,
    ) -> Checkpoints {
        let instances = nodes.len() * workers;
        Checkpoints {
            store,
            nodes,
            workers,
            bins,
            requested: AtomicU64::new(last_id),
            aligned: AtomicU64::new(last_id),
            local_aligned: AtomicU64::new(last_id),
            cluster_aligned: AtomicU64::new(u64::MAX),
            held_announcements: Mutex::new(None),
            cluster_meta: Mutex::new(BTreeMap::new()),
            collector: Mutex::new(Collector {
                passed: vec![last_id; instances],
                committed: last_id,
                ..Default::default()
            }),
            changed: Condvar::new(),
            commits: Mutex::new(BTreeMap::new()),
            source_commits: Mutex::new(BTreeMap::new()),
            requested_at: Mutex::new(None),
            stats: Mutex::new(CheckpointStats::default()),
        }
    }

    /// Makes these the checkpoints of one member of a distributed run.
    /// Every member injects the same barrier ids, on the checkpoint
    /// leader's word (`exec::cluster_checkpoint`), and two things wait for
    /// the other members:
    /// - Sources produce again only once every instance of *every* member
    ///   has passed the barrier ([`Checkpoints::open_gate`]): a record
    ///   produced after it could otherwise reach another member's operator
    ///   still waiting for barriers, and be counted in its snapshot.
    /// - Sinks and sources hear of a commit only once every member has
    ///   committed it ([`Checkpoints::announce`]): until then a restart may
    ///   go back to the checkpoint before.
    pub(crate) fn into_cluster(self) -> Checkpoints {
        self.cluster_aligned.store(self.aligned(), SeqCst);
        *self
            .held_announcements
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(BTreeMap::new());
        self
    }

    /// The newest checkpoint every instance of this node has passed.
    pub(crate) fn local_aligned(&self) -> u64 {
        self.local_aligned.load(SeqCst)
    }

    /// Every member has passed barrier `id`: this node's sources go on.
    pub(crate) fn open_gate(&self, id: u64) {
        self.cluster_aligned.fetch_max(id, SeqCst);
        self.publish_aligned();
        self.changed.notify_all();
    }

    fn publish_aligned(&self) {
        let open = self.local_aligned().min(self.cluster_aligned.load(SeqCst));
        self.aligned.fetch_max(open, SeqCst);
    }

    /// Waits until `ready` or until `alive` turns false (then false).
    pub(crate) fn wait_until(
        &self,
        ready: &dyn Fn(&Self) -> bool,
        alive: &dyn Fn() -> bool,
    ) -> bool {
        let mut c = self.lock();
        loop {
            if ready(self) {
                return true;
            }
            if !alive() {
                return false;
            }
            c = self
                .changed
                .wait_timeout(c, Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Stores `meta` with checkpoint `id` when it commits.
    pub(crate) fn hold_cluster_meta(&self, id: u64, meta: Vec<u8>) {
        self.cluster_meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, meta);
    }

    /// Every member committed checkpoint `id`: tells the sinks and sources
    /// what it and those before it hold.
    pub(crate) fn announce(&self, id: u64) {
        let due: Vec<(u64, NodePositions)> = {
            let mut held = self
                .held_announcements
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let Some(held) = held.as_mut() else {
                return;
            };
            let later = held.split_off(&(id + 1));
            std::mem::replace(held, later).into_iter().collect()
        };
        for (id, positions) in due {
            self.tell(id, &positions);
        }
    }

    fn tell(&self, id: u64, positions: &[(usize, Positions)]) {
        for listener in self
            .commits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            listener(id);
        }
        let sources = self
            .source_commits
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (n, all) in positions {
            if let Some(listener) = sources.get(n) {
                listener(all);
            }
        }
    }

    pub(crate) fn stats(&self) -> CheckpointStats {
        *self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The newest checkpoint whose barriers sources should inject.
    #[inline]
    pub(crate) fn requested(&self) -> u64 {
        self.requested.load(SeqCst)
    }

    /// The newest checkpoint every instance has passed; a worker that
    /// injected a newer barrier waits for this to catch up.
    #[inline]
    pub(crate) fn aligned(&self) -> u64 {
        self.aligned.load(SeqCst)
    }

    /// Registers how an exactly-once sink's writer hears of commits.
    pub(crate) fn register_sink(&self, node: usize, commits: CommitListener) {
        self.commits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node, commits);
    }

    /// Registers a source that hears its positions once committed.
    pub(crate) fn register_source(&self, node: usize, listener: SourceListener) {
        self.source_commits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node, listener);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Collector> {
        self.collector.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An instance passed barrier `id` with this snapshot.
    pub(crate) fn submit(&self, node: usize, worker: usize, id: u64, snapshot: Snapshot) {
        let mut c = self.lock();
        let i = node * self.workers + worker;
        self.remember(&mut c, i, &snapshot);
        c.passed[i] = c.passed[i].max(id);
        c.snapshots.entry(id).or_default().push((i, snapshot));
        self.update_aligned(&c);
        self.changed.notify_all();
    }

    /// An instance ended; this is its final state.
    pub(crate) fn submit_end(&self, node: usize, worker: usize, snapshot: Snapshot) {
        let mut c = self.lock();
        let i = node * self.workers + worker;
        self.remember(&mut c, i, &snapshot);
        c.passed[i] = FINAL;
        c.finals.push((i, snapshot));
        self.update_aligned(&c);
        self.changed.notify_all();
    }

    fn remember(&self, c: &mut Collector, i: usize, snapshot: &Snapshot) {
        let node = &self.nodes[i / self.workers];
        if node.source {
            c.positions.insert(i, snapshot.position.clone());
        }
        if node.stateful {
            c.watermarks.insert(i, snapshot.watermark);
        }
    }

    /// An exactly-once sink's writer sealed checkpoint `id`: `piece` is
    /// its pending commit.
    pub(crate) fn submit_piece(&self, node: usize, id: u64, piece: Vec<u8>) {
        let mut c = self.lock();
        if id == FINAL {
            c.finished.insert(node);
        }
        c.pieces.entry(id).or_default().insert(node, piece);
        self.changed.notify_all();
    }

    fn update_aligned(&self, c: &Collector) {
        let min = c.passed.iter().copied().min().unwrap_or(FINAL);
        let requested = self.requested();
        self.local_aligned.fetch_max(min.min(requested), SeqCst);
        self.publish_aligned();
    }

    /// Asks for checkpoint `id` (the next one); returns false if the
    /// previous one is still in progress.
    pub(crate) fn request(&self, id: u64) -> bool {
        if self.requested() != self.aligned() {
            return false;
        }
        self.requested.store(id, SeqCst);
        *self.requested_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        // Every instance may have passed `id` already: in a distributed
        // run another member's barriers can arrive (on the data streams)
        // before the leader's request (on the control stream), and an
        // instance whose local sources ended passes on them alone. No
        // later submit would then come to count it.
        let c = self.lock();
        self.update_aligned(&c);
        self.changed.notify_all();
        true
    }

    /// Waits until every instance passed `id` and every exactly-once sink
    /// delivered its piece; then commits it. `completed` marks the final
    /// checkpoint of a run that ran to its end.
    ///
    /// Returns `Ok(None)` if `alive` turns false before it can commit.
    pub(crate) fn commit(
        &self,
        id: u64,
        completed: bool,
        alive: &dyn Fn() -> bool,
    ) -> Result<Option<Committed>, String> {
        let exact: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].exact_sink)
            .collect();
        let mut c = self.lock();
        loop {
            let passed = if completed {
                c.passed.iter().all(|&p| p == FINAL)
            } else {
                c.passed.iter().all(|&p| p >= id)
            };
            // A sink whose instances all ended has handed over everything
            // as its FINAL piece, which then serves any later checkpoint.
            let pieces = exact.iter().all(|n| {
                c.finished.contains(n) || c.pieces.get(&id).is_some_and(|p| p.contains_key(n))
            });
            if passed && pieces {
                break;
            }
            if !alive() {
                return Ok(None);
            }
            c = self
                .changed
                .wait_timeout(c, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        // Everything up to `id` goes in: an instance's newer snapshot of a
        // bin supersedes an older one.
        let ids: Vec<u64> = c.snapshots.range(..=id).map(|(k, _)| *k).collect();
        let mut writes: BTreeMap<(usize, u32), BinContent> = BTreeMap::new();
        let mut emptied: BTreeMap<(usize, u32), ()> = BTreeMap::new();
        let mut take = |i: usize, s: Snapshot| {
            let node = i / self.workers;
            for (bin, entries) in s.bins {
                emptied.remove(&(node, bin));
                writes.insert((node, bin), BinContent::Entries(entries));
            }
            for (bin, rec) in s.spilled {
                emptied.remove(&(node, bin));
                writes.insert((node, bin), BinContent::Spilled(rec));
            }
            for bin in s.emptied {
                writes.remove(&(node, bin));
                emptied.insert((node, bin), ());
            }
        };
        for k in ids {
            for (i, s) in c.snapshots.remove(&k).unwrap_or_default() {
                take(i, s);
            }
        }
        for (i, s) in std::mem::take(&mut c.finals) {
            take(i, s);
        }
        let mut pieces = c.pieces.remove(&id).unwrap_or_default();
        // A sink that ended goes into every later checkpoint with its FINAL
        // piece (restoring it is idempotent): a checkpoint without it
        // would restore that sink as new and cut its file back to nothing.
        for n in &exact {
            if !pieces.contains_key(n)
                && let Some(p) = c.pieces.get(&FINAL).and_then(|f| f.get(n))
            {
                pieces.insert(*n, p.clone());
            }
        }
        let positions: Vec<(usize, Positions)> = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].source)
            .map(|n| {
                let mut all: Vec<(u32, Vec<u8>)> = (0..self.workers)
                    .flat_map(|w| {
                        c.positions
                            .get(&(n * self.workers + w))
                            .cloned()
                            .unwrap_or_default()
                    })
                    .collect();
                crate::cold_sort::sort(&mut all);
                (n, all)
            })
            .collect();
        let record = CheckpointRecord {
            id,
            time_ms: crate::state::now_ms(),
            bins: self.bins,
            completed,
            operators: (0..self.nodes.len())
                .filter(|&n| self.nodes[n].stateful)
                .map(|n| OperatorRecord {
                    id: self.nodes[n].id.clone(),
                    watermark: (0..self.workers)
                        .filter_map(|w| c.watermarks.get(&(n * self.workers + w)).copied())
                        .min()
                        .unwrap_or(i64::MIN),
                    bins: Vec::new(),
                })
                .collect(),
            sources: positions
                .iter()
                .map(|(n, all)| {
                    (
                        self.nodes[*n].id.clone(),
                        postcard::to_stdvec(all).expect("positions encode"),
                    )
                })
                .collect(),
            sinks: pieces
                .into_iter()
                .map(|(n, p)| (self.nodes[n].id.clone(), p))
                .collect(),
            signatures: self
                .nodes
                .iter()
                .map(|n| (n.id.clone(), n.signature))
                .collect(),
        };
        drop(c);
        let writes: Vec<BinWrite> = writes
            .into_iter()
            .map(|((n, bin), content)| BinWrite {
                op: self.nodes[n].id.clone(),
                bin,
                content,
            })
            .collect();
        let emptied: Vec<(String, u32)> = emptied
            .into_keys()
            .map(|(n, bin)| (self.nodes[n].id.clone(), bin))
            .collect();
        let commit_started = Instant::now();
        let meta = self
            .cluster_meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        if let Some(meta) = meta {
            self.store
                .put_cluster_meta(id, &meta)
                .map_err(|StoreError(e)| e)?;
        }
        let (_, stats) = self
            .store
            .commit(record, writes, &emptied)
            .map_err(|StoreError(e)| e)?;
        self.lock().committed = id;
        let took = self
            .requested_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(commit_started)
            .elapsed();
        {
            let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
            s.completed += 1;
            s.last_id = id;
            s.last_duration = took;
            s.max_duration = s.max_duration.max(took);
            s.last_bytes = stats.bytes;
            s.bytes_total += stats.bytes;
        }
        // The final checkpoint of a member whose run completed is told at
        // once: every member's input has ended by then, and a restart after
        // another member's crash goes back to a checkpoint all of them
        // hold, which cuts this member's sinks back to it.
        {
            let mut held = self
                .held_announcements
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match held.as_mut() {
                Some(held) if !completed => {
                    held.insert(id, positions);
                }
                _ => {
                    drop(held);
                    self.tell(id, &positions);
                }
            }
        }
        Ok(Some(Committed {
            id,
            bins: stats.bins,
            entries: stats.entries,
            bytes: stats.bytes,
            duration: commit_started.elapsed(),
        }))
    }
}

/// Decodes a source position from a checkpoint record.
pub(crate) fn decode_positions(bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    postcard::from_bytes(bytes).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A member of a distributed run with two workers: source `s` into
    /// `o`, an exactly-once sink or a stateful operator. The directory
    /// holds its store.
    fn member(o_is_exact_sink: bool) -> (tempfile::TempDir, Checkpoints) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let node = |id: &str, source: bool| NodeInfo {
            id: id.into(),
            stateful: !source && !o_is_exact_sink,
            source,
            exact_sink: !source && o_is_exact_sink,
            signature: 0,
        };
        let nodes = vec![node("s", true), node("o", false)];
        let cp = Checkpoints::new(Arc::new(store), nodes, 2, 16, 0).into_cluster();
        (dir, cp)
    }

    /// A member of a distributed run: its sources wait for every member
    /// to pass the barrier (not just its own instances), and its sinks hear
    /// of a commit only once every member committed; a completed run's
    /// final checkpoint is told at once.
    #[test]
    fn a_cluster_member_waits_for_the_others_before_going_on_and_telling() {
        let (_dir, cp) = member(true);
        let told = Arc::new(Mutex::new(Vec::new()));
        let t = told.clone();
        cp.register_sink(1, Box::new(move |id| t.lock().unwrap().push(id)));
        let alive = || true;
        assert!(cp.request(1));
        for w in 0..2 {
            cp.submit(0, w, 1, Snapshot::default());
            cp.submit(1, w, 1, Snapshot::default());
        }
        cp.submit_piece(1, 1, b"lines".to_vec());
        assert_eq!((cp.local_aligned(), cp.aligned()), (1, 0), "the gate holds");
        assert!(!cp.request(2), "one checkpoint at a time");
        cp.open_gate(1);
        assert_eq!(cp.aligned(), 1);
        cp.commit(1, false, &alive)
            .unwrap()
            .expect("committed here");
        assert_eq!(cp.store().latest().map(|r| r.id), Some(1));
        assert!(told.lock().unwrap().is_empty(), "not before every member");
        cp.announce(1);
        assert_eq!(*told.lock().unwrap(), vec![1]);
        cp.announce(1);
        assert_eq!(*told.lock().unwrap(), vec![1], "told once");
        // The end of the run.
        for w in 0..2 {
            cp.submit_end(0, w, Snapshot::default());
            cp.submit_end(1, w, Snapshot::default());
        }
        cp.submit_piece(1, FINAL, b"last".to_vec());
        cp.commit(2, true, &alive).unwrap().expect("the final one");
        assert_eq!(*told.lock().unwrap(), vec![1, 2]);
    }

    /// Here the local sources had ended, and the operators passed barrier
    /// 1 on another member's barriers before this member's request for it
    /// arrived: the request itself finds the node aligned (it used to wait
    /// for a submit that never came, and the run hung at its end).
    #[test]
    fn instances_that_passed_a_barrier_before_its_request_count_as_aligned() {
        let (_dir, cp) = member(false);
        for w in 0..2 {
            cp.submit_end(0, w, Snapshot::default());
            cp.submit(1, w, 1, Snapshot::default());
        }
        assert_eq!(cp.local_aligned(), 0, "not asked for yet");
        assert!(cp.request(1));
        assert_eq!(cp.local_aligned(), 1);
        assert!(cp.wait_until(&|cp| cp.local_aligned() >= 1, &|| false));
    }

    /// Two exactly-once sinks; `a` ends early. Every checkpoint after that
    /// must still carry `a`'s final piece, or a restart from it would take
    /// `a` for a new sink and cut its file back to nothing.
    #[test]
    fn an_ended_sink_stays_in_every_later_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let sink = |id: &str| NodeInfo {
            id: id.into(),
            stateful: false,
            source: false,
            exact_sink: true,
            signature: 0,
        };
        let cp = Checkpoints::new(Arc::new(store), vec![sink("a"), sink("b")], 1, 16, 0);
        let alive = || true;
        cp.submit_piece(0, FINAL, b"a's last lines".to_vec());
        for id in 1..=3 {
            assert!(cp.request(id));
            cp.submit(0, 0, id, Snapshot::default());
            cp.submit(1, 0, id, Snapshot::default());
            cp.submit_piece(1, id, format!("b{id}").into_bytes());
            cp.commit(id, false, &alive).unwrap().expect("committed");
            let record = cp.store().latest().unwrap();
            assert_eq!(
                record.sink("a"),
                Some(&b"a's last lines"[..]),
                "checkpoint {id}"
            );
            assert_eq!(record.sink("b"), Some(format!("b{id}").as_bytes()));
        }
    }
}
