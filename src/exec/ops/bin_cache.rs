//! The state cache of a window operator: which bins are in memory, about
//! how many bytes they take, and which to evict when over the budget.
//!
//! An evicted bin's state is in the store: in the newest committed
//! checkpoint when it has not changed since, else in a version spilled on
//! eviction, which the next checkpoint adopts. A record for an evicted bin
//! loads it back first; firing windows read evicted bins from the store.

use std::sync::Arc;

use crate::exec::checkpoint::Checkpoints;
use crate::state::{BinRecord, Chunk, StoreError};

/// Where an operator's spilled state lives.
pub(crate) struct StateAccess {
    pub(crate) checkpoints: Arc<Checkpoints>,
    /// The operator's component id (its tree in the store).
    pub(crate) op: String,
    /// This instance's share of `[state] cache_bytes`, live.
    pub(crate) budget: crate::exec::live::CacheBudget,
}

pub(super) struct BinCache {
    access: StateAccess,
    /// Estimated bytes of one key in memory.
    entry_bytes: u64,
    resident: Vec<bool>,
    /// Keys in memory, per bin (summed over windows).
    keys: Vec<u64>,
    last_used: Vec<u64>,
    tick: u64,
    total_keys: u64,
    /// Bins whose newest state is a spilled (not yet adopted, or adopted
    /// and unchanged since) version.
    spilled: std::collections::BTreeMap<u32, BinRecord>,
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
            resident: vec![true; n],
            keys: vec![0; n],
            last_used: vec![0; n],
            tick: 0,
            total_keys: 0,
            spilled: std::collections::BTreeMap::new(),
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
        let bins = self.resident.len() as u64;
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
                                "the state of {}'s open windows (at least {:.1} MiB on this worker) does not fit its cache share ({:.2} MiB): {} bins came back from the store in {:.1} s, so bins cycle through sled on every batch and throughput falls sharply; raise [state] cache_bytes (at least {:.1}x)",
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
    pub(super) fn is_resident(&self, bin: u32) -> bool {
        self.resident[bin as usize]
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

    pub(super) fn over_budget(&self) -> bool {
        self.resident_bytes() > self.access.budget.bytes()
    }

    /// Resident bins to evict, least recently used first, until the rest
    /// fits in 90 % of the budget.
    pub(super) fn victims(&self) -> Vec<u32> {
        if !self.over_budget() {
            return Vec::new();
        }
        let mut candidates: Vec<u32> = (0..self.resident.len() as u32)
            .filter(|&b| self.resident[b as usize] && self.keys[b as usize] > 0)
            .collect();
        candidates.sort_by_key(|&b| self.last_used[b as usize]);
        let target = self.access.budget.bytes() / 10 * 9;
        let mut bytes = self.resident_bytes();
        let mut out = Vec::new();
        for b in candidates {
            if bytes <= target {
                break;
            }
            bytes -= self.keys[b as usize] * self.entry_bytes;
            out.push(b);
        }
        out.sort_unstable();
        out
    }

    pub(super) fn evicted(&mut self, bin: u32) {
        let n = self.keys[bin as usize];
        self.removed(bin, n);
        self.resident[bin as usize] = false;
    }

    pub(super) fn loaded(&mut self, bin: u32) {
        self.resident[bin as usize] = true;
        self.thrash.loads += 1;
    }

    /// Bins not in memory.
    pub(super) fn evicted_bins(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.resident.len() as u32).filter(|&b| !self.resident[b as usize])
    }

    /// An evicted bin's state, chunk by chunk: its spilled version if it
    /// has one, else the committed one.
    pub(super) fn read(&self, bin: u32) -> Result<Vec<Chunk>, StoreError> {
        let Some(record) = self.spilled.get(&bin).copied().or_else(|| self.stored(bin)) else {
            return Ok(Vec::new());
        };
        self.access
            .checkpoints
            .store()
            .read_bin(&self.access.op, &record)
            .collect()
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

    /// Writes a bin's state to the store before it leaves memory.
    pub(super) fn spill(
        &mut self,
        bin: u32,
        entries: &crate::state::BinEntries,
    ) -> Result<(), StoreError> {
        let rec = self
            .access
            .checkpoints
            .store()
            .spill(&self.access.op, bin, entries)?;
        if let Some(old) = self.spilled.insert(bin, rec) {
            self.access
                .checkpoints
                .store()
                .release(&self.access.op, bin, old.version);
        }
        Ok(())
    }

    /// The bin changed and will be written whole: its spilled version is
    /// superseded.
    pub(super) fn superseded(&mut self, bin: u32) {
        if let Some(old) = self.spilled.remove(&bin) {
            self.access
                .checkpoints
                .store()
                .release(&self.access.op, bin, old.version);
        }
    }

    /// Spilled bins for the checkpoint to adopt (those not `changed`).
    pub(super) fn spilled_for_checkpoint(&self, changed: &[u32]) -> Vec<(u32, BinRecord)> {
        self.spilled
            .iter()
            .filter(|(b, _)| changed.binary_search(b).is_err())
            .map(|(b, r)| (*b, *r))
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
        assert!(!c.is_resident(2) && c.is_resident(0));
        assert_eq!(c.evicted_bins().collect::<Vec<_>>(), vec![1, 2, 3]);
    }
}
