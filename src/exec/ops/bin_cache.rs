//! The state cache of a window operator: which bins are in memory, about
//! how many bytes they take, and which to evict when over the budget.
//!
//! A bin is [`Residency::Full`] (its whole state in memory),
//! [`Residency::Out`] (none of it), or [`Residency::Partial`]: partial
//! aggregates in memory over a base in the store. The base is a list of
//! pieces whose merge is the rest of the state: the newest committed
//! checkpoint's version, versions spilled whole on eviction (in the
//! store), and runs of partial aggregates spilled from a partial bin (in
//! a [`RunFile`]). A record for a bin that
//! is out starts fresh partial aggregates instead of reading the bin back
//! (external aggregation, as a combiner does): with every key hot and the
//! state over the budget, loading bins back cycled whole bins through the
//! store on every batch, and 30 s of input at 100 k records/s took over
//! 120 s. Firing, exporting and checkpointing merge a bin's pieces one bin
//! at a time; a checkpoint compacts them into one version it can adopt.

use std::sync::Arc;

use crate::exec::checkpoint::Checkpoints;
use crate::state::{BinEntries, BinRecord, Run, RunFile, StoreError};

/// Where an operator's spilled state lives.
pub(crate) struct StateAccess {
    pub(crate) checkpoints: Arc<Checkpoints>,
    /// The operator's component id (its tree in the store).
    pub(crate) op: String,
    /// This instance's share of `[state] cache_bytes`, live.
    pub(crate) budget: crate::exec::live::CacheBudget,
}

/// One piece of a bin's base.
#[derive(Clone, Copy, Debug)]
pub(super) enum Piece {
    /// A version in the store.
    Stored(BinRecord),
    /// Partial aggregates in the run file.
    Run(Run),
}

/// Where a bin's state is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Residency {
    Full,
    /// Partial aggregates in memory, the rest in the base.
    Partial,
    /// All of it in the base.
    Out,
}

pub(super) struct BinCache {
    access: StateAccess,
    /// Estimated bytes of one key in memory.
    entry_bytes: u64,
    mode: Vec<Residency>,
    /// Keys in memory, per bin (summed over windows).
    keys: Vec<u64>,
    last_used: Vec<u64>,
    tick: u64,
    total_keys: u64,
    /// Pieces of a bin spilled since (oldest first; a version not yet
    /// adopted, or adopted and unchanged since, then runs). With none,
    /// the bin's base is its committed version.
    runs: std::collections::BTreeMap<u32, Vec<Piece>>,
    /// Opened at the first run.
    run_file: Option<RunFile>,
    /// Per bin: its committed version is part of its base beneath its runs
    /// (runs of partial aggregates were spilled over it).
    over_committed: Vec<bool>,
    thrash: Thrash,
}

/// Notices a working set above the budget: bins loaded back from the store
/// as fast as they are evicted. Spilling cannot help then, and every batch
/// pays for whole bins going out and coming back; the operator is told
/// once, with the cache size that would fit.
struct Thrash {
    since: std::time::Instant,
    loads: u64,
    /// The most bytes resident before an eviction.
    peak_bytes: u64,
    warned: bool,
}

/// Loads per second, at least, that count as cycling (with at least one
/// load per bin).
const THRASH_LOADS_PER_S: u64 = 64;

impl BinCache {
    pub(super) fn new(access: StateAccess, bins: u32, entry_bytes: u64) -> BinCache {
        let n = bins as usize;
        BinCache {
            access,
            entry_bytes: entry_bytes.max(1),
            mode: vec![Residency::Full; n],
            keys: vec![0; n],
            last_used: vec![0; n],
            tick: 0,
            total_keys: 0,
            runs: std::collections::BTreeMap::new(),
            run_file: None,
            over_committed: vec![false; n],
            thrash: Thrash {
                since: std::time::Instant::now(),
                loads: 0,
                peak_bytes: 0,
                warned: false,
            },
        }
    }

    /// Called before each eviction; warns once if bins are cycling.
    pub(super) fn watch_thrash(&mut self) {
        let resident = self.resident_bytes();
        let budget = self.access.budget.bytes();
        let bins = self.mode.len() as u64;
        let t = &mut self.thrash;
        t.peak_bytes = t.peak_bytes.max(resident);
        let secs = t.since.elapsed().as_secs_f64();
        if secs < 1.0 {
            return;
        }
        if !t.warned && t.loads as f64 >= secs * THRASH_LOADS_PER_S.max(bins) as f64 {
            t.warned = true;
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            tracing::warn!(
                operator = %self.access.op,
                "the state of {}'s open windows (at least {:.1} MiB on this worker) does not fit its cache share ({:.2} MiB) while late records update fired windows: {} bins came back from the store in {:.1} s, so bins cycle through sled and throughput falls sharply; raise [state] cache_bytes (at least {:.1}x)",
                self.access.op,
                mib(t.peak_bytes),
                mib(budget),
                t.loads,
                secs,
                (t.peak_bytes as f64 * 1.25 / budget.max(1) as f64).max(1.5)
            );
        }
        t.since = std::time::Instant::now();
        t.loads = 0;
    }

    #[inline]
    pub(super) fn mode(&self, bin: u32) -> Residency {
        self.mode[bin as usize]
    }

    #[inline]
    pub(super) fn is_full(&self, bin: u32) -> bool {
        self.mode[bin as usize] == Residency::Full
    }

    /// Whether every bin's state is whole in memory.
    pub(super) fn all_full(&self) -> bool {
        self.mode.iter().all(|&m| m == Residency::Full)
    }

    /// A bin that is out takes records as partial aggregates; with nothing
    /// in the store it is whole in memory.
    pub(super) fn take_partial(&mut self, bin: u32) {
        let b = bin as usize;
        debug_assert_eq!(self.mode[b], Residency::Out);
        self.mode[b] = if self.pieces(bin).is_empty() {
            Residency::Full
        } else {
            Residency::Partial
        };
    }

    #[inline]
    pub(super) fn touch(&mut self, bin: u32) {
        self.tick += 1;
        self.last_used[bin as usize] = self.tick;
    }

    #[inline]
    pub(super) fn added(&mut self, bin: u32, keys: u64) {
        self.keys[bin as usize] += keys;
        self.total_keys += keys;
    }

    #[inline]
    pub(super) fn removed(&mut self, bin: u32, keys: u64) {
        let k = &mut self.keys[bin as usize];
        let n = keys.min(*k);
        *k -= n;
        self.total_keys -= n;
    }

    pub(super) fn resident_bytes(&self) -> u64 {
        self.total_keys * self.entry_bytes
    }

    /// How many more keys the budget has room for.
    pub(super) fn room_keys(&self) -> usize {
        let free = self
            .access
            .budget
            .bytes()
            .saturating_sub(self.resident_bytes());
        (free / self.entry_bytes) as usize
    }

    pub(super) fn over_budget(&self) -> bool {
        self.resident_bytes() > self.access.budget.bytes()
    }

    /// Resident bins to evict, least recently used first, until the rest
    /// fits in 90 % of the budget.
    pub(super) fn victims(&self) -> Vec<u32> {
        if !self.over_budget() {
            return Vec::new();
        }
        let target = self.access.budget.bytes() / 10 * 9;
        let excess = self.resident_bytes() - target;
        self.victims_by(|b| self.keys[b as usize] * self.entry_bytes, excess)
    }

    /// Resident bins to evict, least recently used first, until their
    /// `weight` adds up to `excess`.
    pub(super) fn victims_by(&self, weight: impl Fn(u32) -> u64, excess: u64) -> Vec<u32> {
        let mut candidates: Vec<u32> = (0..self.mode.len() as u32)
            .filter(|&b| self.mode[b as usize] != Residency::Out && weight(b) > 0)
            .collect();
        candidates.sort_by_key(|&b| self.last_used[b as usize]);
        let mut freed = 0;
        let mut out = Vec::new();
        for b in candidates {
            if freed >= excess {
                break;
            }
            freed += weight(b);
            out.push(b);
        }
        out.sort_unstable();
        out
    }

    pub(super) fn budget_bytes(&self) -> u64 {
        self.access.budget.bytes()
    }

    pub(super) fn evicted(&mut self, bin: u32) {
        let n = self.keys[bin as usize];
        self.removed(bin, n);
        self.mode[bin as usize] = Residency::Out;
    }

    /// The bin's base was merged into memory: it is whole there now.
    pub(super) fn loaded(&mut self, bin: u32) {
        self.mode[bin as usize] = Residency::Full;
        self.thrash.loads += 1;
    }

    /// Bins not whole in memory.
    pub(super) fn split_bins(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.mode.len() as u32).filter(|&b| self.mode[b as usize] != Residency::Full)
    }

    /// The versions in the store whose merge (with a partial bin's
    /// aggregates in memory) is the bin's state; empty for a whole bin.
    pub(super) fn pieces(&self, bin: u32) -> Vec<Piece> {
        let runs = self.runs.get(&bin).map_or(&[][..], Vec::as_slice);
        let mut out = Vec::with_capacity(runs.len() + 1);
        if runs.is_empty() || self.over_committed[bin as usize] {
            out.extend(self.stored(bin).map(Piece::Stored));
        }
        out.extend_from_slice(runs);
        out
    }

    /// Entries of the bin's pieces in the store (a key in several pieces
    /// counts in each).
    pub(super) fn stored_entries(&self, bin: u32) -> u64 {
        if self.mode[bin as usize] == Residency::Full {
            return 0;
        }
        self.pieces(bin)
            .iter()
            .map(|p| match p {
                Piece::Stored(r) => r.entries,
                Piece::Run(r) => r.entries,
            })
            .sum()
    }

    /// Whether the checkpoint must merge the bin's pieces (and partial
    /// aggregates) into one version before it can adopt it.
    pub(super) fn needs_compaction(&self, bin: u32) -> bool {
        // A whole bin holds its pieces merged already; one loaded from
        // several is dirty, so the checkpoint writes it whole.
        let runs = self.runs.get(&bin).map_or(&[][..], Vec::as_slice);
        match self.mode[bin as usize] {
            Residency::Full => false,
            Residency::Partial => true,
            Residency::Out => match runs {
                [] => false,
                [Piece::Stored(_)] => self.over_committed[bin as usize],
                _ => true,
            },
        }
    }

    /// The bin's pieces in the store, chunk by chunk (each in one buffer:
    /// a pair of `Vec`s per entry made the allocator a tenth of the CPU
    /// with a small cache).
    pub(super) fn read(&self, bin: u32) -> Result<Vec<BinEntries>, StoreError> {
        let store = self.access.checkpoints.store();
        let mut chunks = Vec::new();
        for piece in self.pieces(bin) {
            match piece {
                Piece::Stored(record) => {
                    for chunk in store.read_bin_entries(&self.access.op, &record) {
                        chunks.push(chunk?);
                    }
                }
                Piece::Run(run) => {
                    let file = self.run_file.as_ref().expect("a run is in the file");
                    chunks.push(file.read(run).map_err(StoreError)?);
                }
            }
        }
        Ok(chunks)
    }

    fn stored(&self, bin: u32) -> Option<BinRecord> {
        self.access
            .checkpoints
            .store()
            .committed_bin(&self.access.op, bin)
    }

    /// Whether checkpoint `id` (or a newer one) is committed.
    pub(super) fn committed(&self, id: u64) -> bool {
        self.access.checkpoints.store().latest_id() >= id
    }

    /// Writes a bin's whole state to the store (before it leaves memory):
    /// it replaces the bin's base.
    pub(super) fn spill(&mut self, bin: u32, entries: &BinEntries) -> Result<(), StoreError> {
        let rec = self
            .access
            .checkpoints
            .store()
            .spill(&self.access.op, bin, entries)?;
        self.superseded(bin);
        self.runs.insert(bin, vec![Piece::Stored(rec)]);
        Ok(())
    }

    /// Writes a partial bin's aggregates to the store as one more piece of
    /// its base.
    pub(super) fn spill_run(&mut self, bin: u32, entries: &BinEntries) -> Result<(), StoreError> {
        debug_assert_eq!(self.mode[bin as usize], Residency::Partial);
        if self.run_file.is_none() {
            let store = self.access.checkpoints.store();
            let dir = store.dir().with_file_name("spill");
            self.run_file = Some(RunFile::create(&dir, &self.access.op).map_err(StoreError)?);
        }
        let file = self.run_file.as_mut().expect("opened above");
        let run = file.append(entries).map_err(StoreError)?;
        if self.runs.get(&bin).is_none_or(Vec::is_empty) {
            self.over_committed[bin as usize] = self.stored(bin).is_some();
        }
        self.runs.entry(bin).or_default().push(Piece::Run(run));
        Ok(())
    }

    /// The bin will be written whole: its spilled versions are superseded.
    pub(super) fn superseded(&mut self, bin: u32) {
        self.over_committed[bin as usize] = false;
        for old in self.runs.remove(&bin).unwrap_or_default() {
            match old {
                Piece::Stored(rec) => {
                    self.access
                        .checkpoints
                        .store()
                        .release(&self.access.op, bin, rec.version)
                }
                Piece::Run(run) => {
                    if let Some(f) = &mut self.run_file {
                        f.release(run);
                    }
                }
            }
        }
    }

    /// Spilled bins for the checkpoint to adopt (those not `changed`);
    /// every one is a single whole version after compaction.
    pub(super) fn spilled_for_checkpoint(&self, changed: &[u32]) -> Vec<(u32, BinRecord)> {
        self.runs
            .iter()
            .filter(|(b, _)| changed.binary_search(b).is_err())
            .filter_map(|(b, pieces)| match pieces.as_slice() {
                [Piece::Stored(r)] if !self.over_committed[*b as usize] => Some((*b, *r)),
                _ => {
                    debug_assert!(false, "bin {b} was not compacted");
                    None
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(budget: u64) -> (tempfile::TempDir, BinCache) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::state::Store::open(dir.path(), 1 << 20).unwrap();
        let cp = Checkpoints::new(Arc::new(store), Vec::new(), 1, 16, 0);
        (
            dir,
            BinCache::new(
                StateAccess {
                    checkpoints: Arc::new(cp),
                    op: "w".into(),
                    budget: crate::exec::live::CacheBudget::fixed(budget),
                },
                16,
                100,
            ),
        )
    }

    #[test]
    fn evicts_least_recently_used_clean_bins_until_under_budget() {
        let (_dir, mut c) = cache(1000);
        for b in 0..4 {
            c.added(b, 5); // 500 bytes each
            c.touch(b);
        }
        c.touch(0);
        assert!(c.over_budget());
        // LRU order is 1, 2, 3, 0: evicting 1, 2 and 3 brings 2000 bytes
        // under 900.
        let v = c.victims();
        assert_eq!(v, vec![1, 2, 3]);
        for b in v {
            c.evicted(b);
        }
        assert_eq!(c.resident_bytes(), 500);
        assert!(!c.is_full(2) && c.is_full(0));
        assert_eq!(c.split_bins().collect::<Vec<_>>(), vec![1, 2, 3]);
    }
}
