//! `window` with tumbling or hopping windows: keyed event-time aggregation.
//!
//! State: every open window holds a [`Pane`]: one hash table of the keys
//! (of all the bins this worker owns) for the per-record lookup, and per
//! bin a list of its keys, so checkpointing, spilling or moving a bin
//! touches that bin's keys only.
//!
//! Semantics follow Flink's event-time windows: a window fires once the
//! watermark reaches its last millisecond; with `allowed_lateness` it is
//! kept that much longer, and a late record within it fires the window
//! again for its key (an updated row). Records for windows past their
//! lateness are late: counted, and sent to `late_output` if set.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::bin_bytes::BinBytes;
use super::bin_cache::{BinCache, Piece, Residency, StateAccess};
use super::dirty::{DirtyBins, SnapshotBins};
use super::pane::{Entry, INLINE_WORDS, Pane};
use super::window_state::{AccState, Aggregates};
use crate::config::WindowKind;
use crate::data::{Batch, BatchBuilder, GroupKey};
use crate::exec::checkpoint::Snapshot;
use crate::exec::operator::{OpCtx, Operator};
use crate::kernel::hash::bin_of;
use crate::kernel::window::{hopping_windows, tumbling_start};
use crate::plan::WindowPlan;
use crate::state::BinEntries;

pub(crate) struct Window<K: GroupKey> {
    plan: Arc<WindowPlan>,
    aggs: Aggregates,
    /// Keys the last fired window held: new windows start at that size
    /// instead of growing (and rehashing) their way there.
    expected_keys: usize,
    size_ms: i64,
    slide_ms: i64,
    windows: BTreeMap<i64, Panes<K>>,
    watermark: i64,
    /// Ingestion time of the newest input: what fired results are measured
    /// from (the record that moved the watermark came no later than it).
    last_ingest_ns: u64,
    batch_size: usize,
    key_scratch: Vec<u8>,
    late_rows: Vec<u32>,
    /// Already-fired windows updated by late records: (start, hash, index).
    refire: Vec<(i64, u64, u32)>,
    /// Bins changed since the last checkpoint.
    dirty: DirtyBins,
    /// With durable state: which bins are in memory.
    cache: Option<BinCache>,
    /// Bins the last checkpoint wrote, while it may be uncommitted: their
    /// state in the store is not current yet, so eviction spills them.
    unconfirmed: Option<(u64, Vec<u32>)>,
    /// The state bytes per bin the controller reads.
    bin_bytes: BinBytes,
}

/// One key of one window as a checkpoint stores it (the key itself is
/// `window start (BE) | encoded key`).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct StoredEntry {
    fired: bool,
    num: Vec<u64>,
    other: Vec<AccState>,
}

/// A [`StoredEntry`] written from the pane's own accumulators (serde
/// writes a slice as it writes a `Vec`: the bytes are the same).
#[derive(serde::Serialize)]
struct StoredEntryRef<'a> {
    fired: bool,
    num: &'a [u64],
    other: &'a [AccState],
}

/// Stored keys (`window start | key`) of one bin, merged from its pieces,
/// borrowed from the buffers they were read into.
type Merged<'a> = hashbrown::HashMap<&'a [u8], Slot<'a>>;

/// A key's value in [`Merged`]: as stored while the key was seen once
/// (most keys, with a small cache: neither decoded nor encoded again),
/// decoded once it had to be merged.
enum Slot<'a> {
    Stored(&'a [u8]),
    Merged(StoredEntry),
}

impl Slot<'_> {
    /// The key's accumulators, `decode`d if still as stored.
    fn entry(
        &mut self,
        decode: impl Fn(&[u8]) -> Result<StoredEntry, String>,
    ) -> Result<&mut StoredEntry, String> {
        if let Slot::Stored(value) = *self {
            *self = Slot::Merged(decode(value)?);
        }
        match self {
            Slot::Merged(entry) => Ok(entry),
            Slot::Stored(_) => unreachable!("decoded above"),
        }
    }
}

/// Adds a stored key to `merged`, merging it into the one there. With
/// `fresh`, the merged key is marked not emitted (see `fire_split`); a
/// fresh key not there yet keeps its bytes, so it must be encoded as not
/// emitted.
fn merge_stored<'a>(
    aggs: &Aggregates,
    decode: impl Fn(&[u8]) -> Result<StoredEntry, String>,
    merged: &mut Merged<'a>,
    (key, value): (&'a [u8], &'a [u8]),
    fresh: bool,
) -> Result<(), String> {
    match merged.entry(key) {
        hashbrown::hash_map::Entry::Occupied(o) => {
            let entry = decode(value)?;
            let into = o.into_mut().entry(decode)?;
            into.fired = (into.fired || entry.fired) && !fresh;
            aggs.merge(&mut into.num, &mut into.other, &entry.num, &entry.other);
        }
        hashbrown::hash_map::Entry::Vacant(v) => {
            debug_assert!(!fresh || decode(value).is_ok_and(|e| !e.fired));
            v.insert(Slot::Stored(value));
        }
    }
    Ok(())
}

/// Appends `value`'s stored form to `out`.
fn encode_into(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    let extended = postcard::to_extend(value, std::mem::take(out));
    *out = extended.expect("window state encodes");
}

/// One open window.
struct Panes<K> {
    end: i64,
    fired: bool,
    /// Entries (by index) that arrived by migration from an instance that
    /// had already fired this window while this one has not: firing here
    /// skips them, and a late update re-emits them as for a fired window.
    prefired: Vec<u32>,
    /// `fired || !prefired.is_empty()`: the one test the per-row path
    /// makes.
    watch: bool,
    pane: Pane<K>,
}

/// Builds result rows into batches of `batch_size`.
struct Output<'a, 'b> {
    builder: BatchBuilder,
    batch_size: usize,
    /// The ingestion time results are measured from.
    ingest_ns: u64,
    ctx: &'a mut OpCtx<'b>,
}

impl Output<'_, '_> {
    fn row<K: GroupKey>(
        &mut self,
        plan: &WindowPlan,
        aggs: &Aggregates,
        pane: &Pane<K>,
        entry: &Entry<K>,
        start: i64,
        end: i64,
    ) {
        self.row_parts(
            plan,
            aggs,
            &entry.key,
            pane.num(entry, aggs.num_len()),
            pane.other(entry, aggs.other_len()),
            start,
            end,
        );
    }

    /// One result row from a key and its accumulators.
    #[allow(clippy::too_many_arguments)]
    fn row_parts<K: GroupKey>(
        &mut self,
        plan: &WindowPlan,
        aggs: &Aggregates,
        key: &K,
        num: &[u64],
        other: &[AccState],
        start: i64,
        end: i64,
    ) {
        let n_keys = plan.key.types().len();
        let cols = self.builder.columns_mut();
        let (key_cols, rest) = cols.split_at_mut(n_keys);
        key.decode_into(&plan.key, key_cols);
        let (agg_cols, bounds) = rest.split_at_mut(plan.aggregates.len());
        aggs.finish(num, other, agg_cols);
        bounds[0].push_int(start);
        bounds[1].push_int(end);
        self.builder.finish_row(end - 1, self.ingest_ns);
        if self.builder.len() >= self.batch_size {
            self.ctx.emit(self.builder.take());
        }
    }

    fn done(mut self) {
        if !self.builder.is_empty() {
            self.ctx.emit(self.builder.take());
        }
    }
}

impl<K: GroupKey> Window<K> {
    pub(crate) fn new(
        plan: Arc<WindowPlan>,
        bins: u32,
        batch_size: usize,
        state: Option<StateAccess>,
    ) -> Window<K> {
        let (size_ms, slide_ms) = match plan.kind {
            WindowKind::Tumbling { size_ms } => (size_ms, size_ms),
            WindowKind::Hopping { size_ms, slide_ms } => (size_ms, slide_ms),
            WindowKind::Session { .. } => unreachable!("sessions have their own operator"),
        };
        let entry_bytes = Self::entry_bytes(&plan);
        let bound_bytes = Self::entry_bytes_at_most(&plan);
        Window {
            aggs: Aggregates::new(&plan.aggregates),
            plan,
            expected_keys: 0,
            size_ms,
            slide_ms,
            windows: BTreeMap::new(),
            watermark: i64::MIN,
            last_ingest_ns: 0,
            batch_size,
            key_scratch: Vec::new(),
            late_rows: Vec::new(),
            refire: Vec::new(),
            dirty: DirtyBins::new(bins),
            cache: state.map(|s| BinCache::new(s, bins, bound_bytes)),
            unconfirmed: None,
            bin_bytes: BinBytes::new(entry_bytes),
        }
    }

    /// Memory one key of one window takes, about: its table slot at 7/8
    /// load (the entry, then the control byte), and its arrays.
    fn entry_bytes(plan: &WindowPlan) -> u64 {
        let aggs = Aggregates::new(&plan.aggregates);
        // A key of several fields or a string is a `ByteKey`: inline up
        // to 14 bytes encoded (a string of 9), a heap block beyond, which
        // this leaves out.
        (std::mem::size_of::<Entry<K>>() * 8 / 7 + 1 + Self::array_bytes(&aggs)) as u64
    }

    /// Memory one key of one window may take, so that keys counted at
    /// this size fit the cache budget however full the tables are: a
    /// table just grown is 7/16 full (a key pays for 16/7 slots, entry
    /// and control byte), and the per-key arrays just doubled are half
    /// full. Counted at a full table's size ([`Self::entry_bytes`]), a
    /// 64 MiB budget let the window's tables take 112 MiB.
    fn entry_bytes_at_most(plan: &WindowPlan) -> u64 {
        let aggs = Aggregates::new(&plan.aggregates);
        let slot = (std::mem::size_of::<Entry<K>>() + 1) * 16 / 7;
        (slot + 2 * Self::array_bytes(&aggs)) as u64
    }

    /// Bytes of one key in the pane's per-index arrays: its hash and
    /// bin-list link, numeric accumulators that do not fit inline, and
    /// the accumulators that own values.
    fn array_bytes(aggs: &Aggregates) -> usize {
        let spill = if aggs.num_len() > INLINE_WORDS {
            aggs.num_len() * 8
        } else {
            0
        };
        12 + spill + aggs.other_len() * std::mem::size_of::<AccState>()
    }

    /// Makes a bin whole in memory, merging its base from the store: keys
    /// of windows still open, or with `create` of every window not past
    /// its lateness.
    fn load(&mut self, bin: u32, create: bool) -> Result<(), String> {
        let Some(cache) = &mut self.cache else {
            return Ok(());
        };
        let was = cache.mode(bin);
        if was == Residency::Full {
            return Ok(());
        }
        let pieces = cache.pieces(bin);
        let chunks = cache.read(bin).map_err(|e| e.0)?;
        cache.loaded(bin);
        // Several pieces, or partial aggregates in memory, hold a key more
        // than once.
        let merge = was == Residency::Partial || pieces.len() > 1;
        // Nor is a run of partial aggregates a version a checkpoint can
        // adopt.
        let rewrite = merge || matches!(pieces[..], [Piece::Run(_)]);
        let mut keys = 0;
        for chunk in &chunks {
            for (key, value) in chunk.iter() {
                keys += self.install(key, value, create, merge)?;
            }
        }
        if let Some(cache) = &mut self.cache {
            cache.added(bin, keys);
        }
        if rewrite {
            // No one version in the store is its state: the next
            // checkpoint writes it whole.
            self.dirty.mark_bin(bin);
        }
        tracing::trace!(bin, keys, "state loaded from the store");
        Ok(())
    }

    /// Adds one stored key (`window start | key` → accumulators) to its
    /// window, unless the window is over; returns 1 if added. `create`
    /// opens windows that are not open (restoring), else they are skipped
    /// (they were purged while the bin was out of memory). With `merge`,
    /// a key already there takes in the stored accumulators.
    fn install(
        &mut self,
        key: &[u8],
        value: &[u8],
        create: bool,
        merge: bool,
    ) -> Result<u64, String> {
        let (start, group) = key.split_at_checked(8).ok_or("a window key is too short")?;
        let start = i64::from_be_bytes(start.try_into().expect("8 bytes"));
        let end = start + self.size_ms;
        if Self::expired(end, self.plan.allowed_lateness_ms, self.watermark) {
            return Ok(0);
        }
        let stored = self.decode(value)?;
        let emitted = stored.fired;
        let (watermark, bins) = (self.watermark, self.dirty.bins());
        let panes = match (self.windows.get_mut(&start), create) {
            (Some(p), _) => p,
            (None, true) => self
                .windows
                .entry(start)
                .or_insert_with(|| Panes::new(end, 0, bins)),
            (None, false) => return Ok(0),
        };
        // Every instance has the same input watermark at a barrier, so a
        // window has fired exactly when the watermark reached its end.
        panes.fired = end - 1 <= watermark;
        let (_, index, new) = Self::put(
            &self.plan,
            &self.aggs,
            &mut self.expected_keys,
            panes,
            group,
            stored,
            merge,
        );
        // A key an instance that moved it here had emitted before this
        // window fired stays emitted: without this, a bin evicted and
        // read back (or exported again, or restored) lost the mark, and
        // the key was emitted twice. A key merged into records that came
        // since is emitted again when the window fires, as `fire_split`
        // does.
        if emitted
            && new
            && !panes.fired
            && let Err(at) = panes.prefired.binary_search(&index)
        {
            panes.prefired.insert(at, index);
        }
        panes.watch = panes.fired || !panes.prefired.is_empty();
        Ok(new as u64)
    }

    /// A stored key's accumulators, checked against what this window
    /// computes.
    fn decode(&self, value: &[u8]) -> Result<StoredEntry, String> {
        let stored: StoredEntry =
            postcard::from_bytes(value).map_err(|e| format!("undecodable window state: {e}"))?;
        let (words, o) = (self.aggs.num_len(), self.aggs.other_len());
        if stored.num.len() != words || stored.other.len() != o {
            return Err(format!(
                "a key holds {} + {} accumulators, the window computes {} + {}",
                stored.num.len(),
                stored.other.len(),
                words,
                o
            ));
        }
        Ok(stored)
    }

    /// Adds a stored key (`group`, encoded) to a window, or with `merge`
    /// merges it into the key there; returns its hash, its index, and
    /// whether it is new.
    fn put(
        plan: &WindowPlan,
        aggs: &Aggregates,
        expected_keys: &mut usize,
        panes: &mut Panes<K>,
        group: &[u8],
        stored: StoredEntry,
        merge: bool,
    ) -> (u64, u32, bool) {
        let hash = plan.key.hash_encoded(group);
        let key = K::from_encoded(&plan.key, group);
        let (index, new) = if merge {
            panes
                .pane
                .merge_or_insert(hash, key, &stored.num, stored.other, aggs)
        } else {
            let index = panes
                .pane
                .insert(hash, key, &stored.num, stored.other, aggs);
            (index, true)
        };
        *expected_keys = (*expected_keys).max(panes.pane.len());
        (hash, index, new)
    }

    /// Brings the state back within its memory budget: evicts the least
    /// recently used bins, spilling those whose state in the store is not
    /// current.
    /// Returns how many bins it evicted.
    fn shrink(&mut self) -> Result<u64, String> {
        let Some(cache) = &mut self.cache else {
            return Ok(0);
        };
        cache.watch_thrash();
        let victims = cache.victims();
        self.spill_out(victims)
    }

    /// Before a batch of `rows` rows: a table about to grow past the
    /// budget makes room in itself instead. Keys counted within the budget
    /// do not keep a table from growing: evicted keys leave tombstones,
    /// and a table out of empty slots doubles unless at most half its
    /// slots are taken (then it rehashes in place). With a 32 MiB budget
    /// a window's table went from 17 to 34 MiB and back at every eviction.
    /// So when doubling a table would take the panes past the budget, bins
    /// are evicted until that table is at most half full.
    fn make_room(&mut self, rows: usize) -> Result<u64, String> {
        let Some(cache) = &self.cache else {
            return Ok(0);
        };
        let budget = cache.budget_bytes();
        let mut evicted = 0;
        // Tables this batch may make grow (not rehash in place): mostly none.
        let tight: Vec<i64> = self
            .windows
            .iter()
            .filter(|(_, p)| {
                p.pane.room() < rows && p.pane.len() + rows > p.pane.full_capacity() / 2
            })
            .map(|(&start, _)| start)
            .collect();
        for start in tight {
            // Evictions for one table may have shrunk the others.
            let held = self.heap_bytes();
            let Some(panes) = self.windows.get(&start) else {
                continue;
            };
            let pane = &panes.pane;
            if held + pane.table_bytes() <= budget {
                continue;
            }
            let half = pane.full_capacity() / 2;
            let excess = (pane.len() + rows).saturating_sub(half) as u64;
            let per_bin = pane.keys_per_bin();
            let cache = self.cache.as_mut().expect("checked above");
            let victims = cache.victims_by(|bin| u64::from(per_bin[bin as usize]), excess);
            evicted += self.spill_out(victims)?;
        }
        Ok(evicted)
    }

    /// Evicts `victims`, spilling those whose state in the store is not
    /// current; returns how many.
    fn spill_out(&mut self, victims: Vec<u32>) -> Result<u64, String> {
        let Some(cache) = &mut self.cache else {
            return Ok(0);
        };
        if victims.is_empty() {
            return Ok(0);
        }
        if self
            .unconfirmed
            .as_ref()
            .is_some_and(|(id, _)| cache.committed(*id))
        {
            self.unconfirmed = None;
        }
        let unconfirmed = self.unconfirmed.as_ref().map_or(&[][..], |(_, b)| b);
        // Partial aggregates go out as one more run of their bin; a whole
        // bin is written whole if the store's version is not current.
        let (partial, whole): (Vec<u32>, Vec<u32>) = victims
            .iter()
            .copied()
            .filter(|&b| {
                cache.mode(b) == Residency::Partial
                    || self.dirty.contains(b)
                    || unconfirmed.binary_search(&b).is_ok()
            })
            .partition(|&b| cache.mode(b) == Residency::Partial);
        if !partial.is_empty() {
            let runs = self.collect(partial).finish();
            let cache = self.cache.as_mut().expect("checked above");
            for (bin, entries) in runs.bins {
                cache.spill_run(bin, &entries).map_err(|e| e.0)?;
            }
        }
        if !whole.is_empty() {
            let spilled = self.collect(whole).finish();
            let cache = self.cache.as_mut().expect("checked above");
            let emptied = spilled.emptied.into_iter().map(|b| (b, BinEntries::new()));
            for (bin, entries) in spilled.bins.into_iter().chain(emptied) {
                cache.spill(bin, &entries).map_err(|e| e.0)?;
                self.dirty.unmark(bin);
            }
        }
        self.evict(&victims);
        Ok(victims.len() as u64)
    }

    /// Merges the pieces and partial aggregates of every bin that is not
    /// whole in memory into one version per bin, for the checkpoint to
    /// adopt; the bins are out of memory afterwards. Bin by bin, so what
    /// it holds at once is one bin's keys.
    fn compact(&mut self) -> Result<(), String> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let bins: Vec<u32> = cache
            .split_bins()
            .filter(|&b| cache.needs_compaction(b))
            .collect();
        if bins.is_empty() {
            return Ok(());
        }
        for &bin in &bins {
            let entries = self.compacted(bin)?;
            let cache = self.cache.as_mut().expect("checked above");
            cache.spill(bin, &entries).map_err(|e| e.0)?;
            self.dirty.unmark(bin);
        }
        self.evict(&bins);
        Ok(())
    }

    /// One bin's pieces and partial aggregates merged into one version:
    /// its keys of windows not past their lateness. A key in one piece
    /// only is carried over as stored, not decoded: a value that does not
    /// fit the window is found where it is installed or emitted (a
    /// restore decodes every one).
    fn compacted(&self, bin: u32) -> Result<BinEntries, String> {
        let (size, lateness) = (self.size_ms, self.plan.allowed_lateness_ms);
        let cache = self.cache.as_ref().expect("only with a cache");
        let chunks = cache.read(bin).map_err(|e| e.0)?;
        let resident = self.collect(vec![bin]).finish().bins.pop();
        let resident = resident.map(|(_, e)| e).unwrap_or_default();
        let decode = |value: &[u8]| self.decode(value);
        let mut merged = Merged::new();
        for (key, value) in chunks.iter().chain([&resident]).flat_map(|c| c.iter()) {
            let start = key
                .get(..8)
                .ok_or("a window key is too short")?
                .try_into()
                .map(i64::from_be_bytes)
                .expect("8 bytes");
            if Self::expired(start + size, lateness, self.watermark) {
                continue;
            }
            merge_stored(&self.aggs, decode, &mut merged, (key, value), false)?;
        }
        let mut entries = BinEntries::new();
        for (key, slot) in &merged {
            match slot {
                Slot::Stored(value) => {
                    debug_assert!(self.decode(value).is_ok(), "undecodable spilled state");
                    entries.push(key, value)
                }
                Slot::Merged(entry) => {
                    entries.push_with(|k| k.extend_from_slice(key), |v| encode_into(v, entry))
                }
            }
        }
        Ok(entries)
    }

    /// The stored form of every key of `bins`, grouped by bin.
    fn collect(&self, bins: Vec<u32>) -> SnapshotBins {
        let mut out = SnapshotBins::new(self.dirty.bins(), bins.clone());
        self.encode_bins(&bins, |bin, key, value| {
            out.slot(bin).expect("a bin asked for").push(key, value);
        });
        out
    }

    /// Calls `put(bin, key, value)` with the stored form of every key of
    /// `bins`, in every open window (written into buffers reused from one
    /// key to the next).
    fn encode_bins(&self, bins: &[u32], mut put: impl FnMut(u32, &[u8], &[u8])) {
        let (words, o) = (self.aggs.num_len(), self.aggs.other_len());
        let (mut key, mut value) = (Vec::new(), Vec::new());
        for (&start, panes) in &self.windows {
            panes.pane.for_bins(bins, |bin, entry| {
                key.clear();
                key.extend_from_slice(&start.to_be_bytes());
                entry.key.encode(&self.plan.key, &mut key);
                let stored = StoredEntryRef {
                    fired: panes.fired || panes.prefired.binary_search(&entry.index).is_ok(),
                    num: panes.pane.num(entry, words),
                    other: panes.pane.other(entry, o),
                };
                value.clear();
                value = postcard::to_extend(&stored, std::mem::take(&mut value))
                    .expect("window state encodes");
                put(bin, &key, &value);
            });
        }
    }

    /// Drops the keys of `bins` from every open window.
    fn remove_bins(&mut self, bins: &[u32]) {
        for panes in self.windows.values_mut() {
            panes
                .pane
                .remove_bins(bins, &self.aggs, &mut panes.prefired);
            panes.watch = panes.fired || !panes.prefired.is_empty();
        }
    }

    /// Drops the keys of `victims` from memory; their state is in the store.
    fn evict(&mut self, victims: &[u32]) {
        let Some(cache) = &mut self.cache else { return };
        if victims.is_empty() {
            return;
        }
        for &b in victims {
            cache.evicted(b);
        }
        // A table keeps its size when keys leave it: one mostly empty
        // now gives room back.
        for panes in self.windows.values_mut() {
            panes.pane.shrink();
        }
        tracing::debug!(
            bins = victims.len(),
            resident_bytes = cache.resident_bytes(),
            "state evicted to the store"
        );
        self.remove_bins(victims);
    }

    /// Bytes the open windows' panes have allocated.
    pub(super) fn heap_bytes(&self) -> u64 {
        self.windows.values().map(|p| p.pane.heap_bytes()).sum()
    }

    /// Whether a window ending at `end` is past its allowed lateness.
    fn expired(end: i64, lateness_ms: i64, watermark: i64) -> bool {
        (end - 1).saturating_add(lateness_ms) <= watermark
    }

    fn output<'a, 'b>(&self, ctx: &'a mut OpCtx<'b>, capacity: usize) -> Output<'a, 'b> {
        Output {
            builder: BatchBuilder::new(self.plan.output.clone(), capacity, true),
            batch_size: self.batch_size,
            ingest_ns: self.last_ingest_ns,
            ctx,
        }
    }
}

impl<K: GroupKey> Operator for Window<K> {
    fn on_batch(&mut self, _port: usize, mut batch: Batch, ctx: &mut OpCtx<'_>) {
        if batch.key_hash().is_empty() {
            let hashes = self.plan.key.hash_rows(&batch);
            batch.set_key_hash(hashes);
        }
        let plan = self.plan.clone();
        let args = self.aggs.eval(&plan.aggregates, &batch, |row, reason| {
            ctx.dead_letter(&batch, row, reason)
        });
        self.last_ingest_ns = self
            .last_ingest_ns
            .max(batch.ingest_ns().iter().copied().max().unwrap_or(0));
        self.late_rows.clear();
        // Before the bins of the batch's records are made ready for them
        // below (evicting one after would leave records in a bin out).
        match self.make_room(batch.len()) {
            Ok(evicted) => ctx.count(&ctx.metrics.state_evictions, evicted),
            Err(e) => {
                ctx.fail(format!("cannot spill state to the store: {e}"));
                return;
            }
        }
        // A record for a bin out of memory starts partial aggregates over
        // its base in the store. But while a fired window is open, a late
        // record re-emits its key's whole result: its bin comes back whole.
        if let Some(cache) = &mut self.cache {
            let whole = self.windows.values().any(|p| p.watch);
            let mut missing = Vec::new();
            for &h in batch.key_hash() {
                let bin = bin_of(h, self.dirty.bins());
                match cache.mode(bin) {
                    Residency::Full => {}
                    _ if whole => {
                        if !missing.contains(&bin) {
                            missing.push(bin);
                        }
                    }
                    Residency::Out => cache.take_partial(bin),
                    Residency::Partial => {}
                }
                cache.touch(bin);
            }
            ctx.count(&ctx.metrics.state_loads, missing.len() as u64);
            for bin in missing {
                if let Err(e) = self.load(bin, false) {
                    ctx.fail(format!("cannot load bin {bin} of its state: {e}"));
                    return;
                }
            }
        }
        // A new window starts at the last one's size, but within what the
        // budget has room for.
        let expected = self.cache.as_ref().map_or(self.expected_keys, |c| {
            self.expected_keys.min(c.room_keys())
        });
        let (size, slide) = (self.size_ms, self.slide_ms);
        let (lateness, watermark) = (plan.allowed_lateness_ms, self.watermark);
        let expired = |end: i64| Self::expired(end, lateness, watermark);
        let bins = self.dirty.bins();
        let (windows, aggs, scratch, refire, cache, dirty) = (
            &mut self.windows,
            &self.aggs,
            &mut self.key_scratch,
            &mut self.refire,
            &mut self.cache,
            &mut self.dirty,
        );
        // Which bins changed, and how many keys each holds, matter to
        // durable state only (the cache exists exactly when checkpoints are
        // on): without it, no per-record bookkeeping (marking every
        // record's bin cost a tenth of `wcount`'s throughput).
        let durable = cache.is_some();
        let mut counted = |hash: u64, new: bool| {
            if durable {
                dirty.mark(hash);
                if let (true, Some(c)) = (new, cache.as_mut()) {
                    c.added(bin_of(hash, bins), 1);
                }
            }
        };
        let inputs = aggs.inputs(&batch, &args);
        // Rows of a batch mostly share a tumbling window: keep it at hand.
        let mut current: Option<(i64, &mut Panes<K>)> = None;
        for row in 0..batch.len() {
            if args.any_failed && args.failed[row] {
                continue;
            }
            let ts = batch.event_time()[row];
            let hash = batch.key_hash()[row];
            let probe = K::probe(&plan.key, &batch, row, scratch);
            let mut accepted = false;
            if size == slide {
                let start = match &current {
                    Some((s, _)) if ts >= *s && ts < *s + size => *s,
                    _ => tumbling_start(ts, size),
                };
                if !expired(start + size) {
                    accepted = true;
                    if current.as_ref().is_none_or(|(s, _)| *s != start) {
                        current = Some((
                            start,
                            windows
                                .entry(start)
                                .or_insert_with(|| Panes::new(start + size, expected, bins)),
                        ));
                    }
                    let (_, panes) = current.as_mut().expect("set above");
                    let (e, new) = panes.pane.update(hash, &probe, aggs, &inputs, row, ts);
                    counted(hash, new);
                    if panes.watch && (panes.fired || panes.prefired.binary_search(&e).is_ok()) {
                        refire.push((start, hash, e));
                    }
                }
            } else {
                current = None;
                for w in hopping_windows(ts, size, slide) {
                    if expired(w.end) {
                        continue;
                    }
                    accepted = true;
                    let panes = windows
                        .entry(w.start)
                        .or_insert_with(|| Panes::new(w.end, expected, bins));
                    let (e, new) = panes.pane.update(hash, &probe, aggs, &inputs, row, ts);
                    counted(hash, new);
                    if panes.watch && (panes.fired || panes.prefired.binary_search(&e).is_ok()) {
                        refire.push((w.start, hash, e));
                    }
                }
            }
            if !accepted {
                self.late_rows.push(row as u32);
            }
        }
        if !self.late_rows.is_empty() {
            ctx.count(&ctx.metrics.late, self.late_rows.len() as u64);
            if plan.has_late_output {
                ctx.emit_to(1, batch.take_rows(&self.late_rows));
            }
        }
        if !self.refire.is_empty() {
            let mut refire = std::mem::take(&mut self.refire);
            refire.sort_unstable();
            refire.dedup();
            let mut out = self.output(ctx, refire.len());
            for &(start, hash, index) in &refire {
                let panes = &self.windows[&start];
                let entry = panes.pane.get(hash, index).expect("a refired entry exists");
                out.row(&plan, &self.aggs, &panes.pane, entry, start, panes.end);
            }
            out.done();
            refire.clear();
            self.refire = refire;
        }
        if self.cache.as_ref().is_some_and(|c| c.over_budget()) {
            match self.shrink() {
                Ok(evicted) => ctx.count(&ctx.metrics.state_evictions, evicted),
                Err(e) => ctx.fail(format!("cannot spill state to the store: {e}")),
            }
        }
    }

    fn on_watermark(&mut self, watermark: i64, ctx: &mut OpCtx<'_>) {
        self.watermark = watermark;
        let plan = self.plan.clone();
        let bins = self.dirty.bins();
        // Bins not whole in memory are emitted from their merged pieces
        // below, not from the table.
        let full_bins: Option<Vec<bool>> = self
            .cache
            .as_ref()
            .filter(|c| !c.all_full())
            .map(|c| (0..bins).map(|b| c.is_full(b)).collect());
        let mut out = self.output(ctx, self.batch_size);
        let mut firing = Vec::new();
        for (&start, panes) in self.windows.iter_mut() {
            if panes.end - 1 > watermark {
                break;
            }
            if !panes.fired {
                panes.fired = true;
                panes.watch = true;
                firing.push((start, panes.end));
                self.expected_keys = panes.pane.len();
                let prefired = std::mem::take(&mut panes.prefired);
                for entry in panes.pane.table.iter() {
                    if let Some(full) = &full_bins
                        && !full[bin_of(panes.pane.hash(entry), bins) as usize]
                    {
                        continue;
                    }
                    if prefired.is_empty() || prefired.binary_search(&entry.index).is_err() {
                        out.row(&plan, &self.aggs, &panes.pane, entry, start, panes.end);
                    }
                }
            }
        }
        if let (Some(cache), false) = (&self.cache, firing.is_empty()) {
            let split: Vec<u32> = cache.split_bins().collect();
            for bin in split {
                if let Err(e) = self.fire_split(bin, &firing, &mut out) {
                    out.ctx.fail(format!("bin {bin} of its state: {e}"));
                    return;
                }
            }
        }
        out.done();
        let lateness = plan.allowed_lateness_ms;
        while let Some(entry) = self.windows.first_entry() {
            if !Self::expired(entry.get().end, lateness, watermark) {
                break;
            }
            // Its keys leave the (durable) state: their bins change.
            if let Some(c) = &mut self.cache {
                let pane = &entry.get().pane;
                for e in pane.table.iter() {
                    let hash = pane.hash(e);
                    self.dirty.mark(hash);
                    c.removed(bin_of(hash, self.dirty.bins()), 1);
                }
            }
            entry.remove();
        }
        if self.bin_bytes.due(ctx.metrics) {
            let parts = self.windows.values().map(|p| p.pane.keys_per_bin());
            let cache = &self.cache;
            self.bin_bytes.publish(ctx.metrics, parts, |bin| {
                cache.as_ref().map_or(0, |c| c.stored_entries(bin))
            });
        }
    }

    fn snapshot(&mut self, checkpoint: u64) -> Snapshot {
        if let Err(e) = self.compact() {
            return Snapshot {
                failure: Some(format!("cannot merge its state in the store: {e}")),
                ..Default::default()
            };
        }
        let dirty = self.dirty.take();
        let mut snapshot = if dirty.is_empty() {
            Snapshot::default()
        } else {
            self.collect(dirty.clone()).finish()
        };
        if let Some(cache) = &mut self.cache {
            // Written whole now: spilled versions of these bins are stale.
            for &b in &dirty {
                cache.superseded(b);
            }
            snapshot.spilled = cache.spilled_for_checkpoint(&dirty);
            if !dirty.is_empty() {
                self.unconfirmed = Some((checkpoint, dirty));
            }
        }
        snapshot
    }

    fn restore(&mut self, bin: u32, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        let mut keys = 0;
        for (key, value) in entries {
            keys += self.install(&key, &value, true, false)?;
        }
        if let Some(cache) = &mut self.cache {
            cache.added(bin, keys);
            cache.touch(bin);
            self.shrink()?;
        }
        Ok(())
    }

    fn restore_watermark(&mut self, watermark: i64) {
        self.watermark = watermark;
    }

    fn export_bins(
        &mut self,
        bins: &[u32],
    ) -> Result<Vec<crate::exec::operator::BinEntries>, String> {
        self.export(bins)
    }

    fn install_bin(
        &mut self,
        bin: u32,
        entries: crate::exec::operator::BinEntries,
        ctx: &mut OpCtx<'_>,
    ) -> Result<(), String> {
        self.install_running(bin, &entries, ctx)
    }
}

impl<K: GroupKey> Window<K> {
    /// Emits the keys of firing windows (`(start, end)`) in a bin not
    /// whole in memory: its pieces in the store merged with its partial
    /// aggregates in memory, one bin at a time. Keys an instance that
    /// moved them here had fired already are not emitted again, unless
    /// records for them came since.
    fn fire_split(
        &self,
        bin: u32,
        firing: &[(i64, i64)],
        out: &mut Output<'_, '_>,
    ) -> Result<(), String> {
        let cache = self.cache.as_ref().expect("only with a cache");
        let firing_window = |key: &[u8]| {
            firing
                .iter()
                .find(|(s, _)| key.get(..8) == Some(&s.to_be_bytes()[..]))
                .copied()
        };
        let plan = &self.plan;
        let mut emit = |key: &[u8], stored: &StoredEntry, (start, end): (i64, i64)| {
            if !stored.fired {
                let group = K::from_encoded(&plan.key, &key[8..]);
                out.row_parts(
                    plan,
                    &self.aggs,
                    &group,
                    &stored.num,
                    &stored.other,
                    start,
                    end,
                );
            }
        };
        let chunks = cache
            .read(bin)
            .map_err(|e| format!("cannot read it: {e}"))?;
        let stored = chunks.iter().flat_map(|c| c.iter());
        if cache.mode(bin) == Residency::Out && cache.pieces(bin).len() <= 1 {
            // One version: every key once, streamed as read.
            for (key, value) in stored {
                if let Some(w) = firing_window(key) {
                    emit(key, &self.decode(value)?, w);
                }
            }
            return Ok(());
        }
        // Records came since an instance that moved a key here emitted
        // it: it is emitted again, updated, as a late record for a fired
        // window re-emits its key (a bin that is not whole does that
        // here, when the window fires). So the keys in memory go in as
        // not emitted.
        let mut fresh = BinEntries::new();
        let (words, o) = (self.aggs.num_len(), self.aggs.other_len());
        for &(start, _) in firing {
            let Some(panes) = self.windows.get(&start) else {
                continue;
            };
            panes.pane.for_bins(&[bin], |_, entry| {
                let stored = StoredEntryRef {
                    fired: false,
                    num: panes.pane.num(entry, words),
                    other: panes.pane.other(entry, o),
                };
                fresh.push_with(
                    |k| {
                        k.extend_from_slice(&start.to_be_bytes());
                        entry.key.encode(&plan.key, k);
                    },
                    |v| encode_into(v, &stored),
                );
            });
        }
        let decode = |value: &[u8]| self.decode(value);
        let mut merged = Merged::new();
        for entry in stored.filter(|(key, _)| firing_window(key).is_some()) {
            merge_stored(&self.aggs, decode, &mut merged, entry, false)?;
        }
        for entry in fresh.iter() {
            merge_stored(&self.aggs, decode, &mut merged, entry, true)?;
        }
        for (key, slot) in &mut merged {
            let w = firing_window(key).expect("only firing windows' keys");
            emit(key, slot.entry(decode)?, w);
        }
        Ok(())
    }

    /// See [`Operator::export_bins`]. Bins evicted to the store are read
    /// back first; what leaves is no longer this instance's to
    /// checkpoint.
    fn export(&mut self, bins: &[u32]) -> Result<Vec<crate::exec::operator::BinEntries>, String> {
        let n = self.dirty.bins();
        if let Some(cache) = &self.cache {
            let missing: Vec<u32> = bins
                .iter()
                .copied()
                .filter(|&b| !cache.is_full(b))
                .collect();
            for bin in missing {
                self.load(bin, true)?;
            }
        }
        let mut slot_of = vec![u32::MAX; n as usize];
        for (i, &b) in bins.iter().enumerate() {
            slot_of[b as usize] = i as u32;
        }
        let mut out: Vec<crate::exec::operator::BinEntries> =
            bins.iter().map(|_| Default::default()).collect();
        self.encode_bins(bins, |bin, key, value| {
            out[slot_of[bin as usize] as usize].push(key, value);
        });
        self.remove_bins(bins);
        for (&b, entries) in bins.iter().zip(&out) {
            self.dirty.unmark(b);
            if let Some(cache) = &mut self.cache {
                cache.removed(b, entries.len() as u64);
                cache.superseded(b);
            }
        }
        Ok(out)
    }

    /// See [`Operator::install_bin`]: keys of windows this instance has
    /// fired (its watermark passed their end) but the exporter had not
    /// are emitted now; keys the exporter had emitted for windows this
    /// instance has not fired are remembered as already fired.
    fn install_running(
        &mut self,
        bin: u32,
        entries: &crate::exec::operator::BinEntries,
        ctx: &mut OpCtx<'_>,
    ) -> Result<(), String> {
        if let Some(cache) = &mut self.cache {
            // A version of the bin from when this instance owned it
            // before is stale: the incoming state replaces it.
            if !cache.is_full(bin) {
                cache.loaded(bin);
            }
            cache.superseded(bin);
        }
        let (watermark, bins) = (self.watermark, self.dirty.bins());
        let mut due = Vec::new();
        let mut keys = 0;
        let plan = self.plan.clone();
        let mut gone = self.output(ctx, 0);
        for (key, value) in entries.iter() {
            let (start, group) = key.split_at_checked(8).ok_or("a window key is too short")?;
            let start = i64::from_be_bytes(start.try_into().expect("8 bytes"));
            let end = start + self.size_ms;
            let stored = self.decode(value)?;
            if Self::expired(end, plan.allowed_lateness_ms, watermark) {
                // Past this instance's lateness: emitted now if the
                // exporter had not, then gone.
                if !stored.fired {
                    let k = K::from_encoded(&plan.key, group);
                    gone.row_parts(
                        &plan,
                        &self.aggs,
                        &k,
                        &stored.num,
                        &stored.other,
                        start,
                        end,
                    );
                }
                continue;
            }
            let panes = self.windows.entry(start).or_insert_with(|| {
                let mut p = Panes::new(end, 0, bins);
                p.fired = end - 1 <= watermark;
                p.watch = p.fired;
                p
            });
            let fired = stored.fired;
            let (hash, index, _) = Self::put(
                &plan,
                &self.aggs,
                &mut self.expected_keys,
                panes,
                group,
                stored,
                false,
            );
            keys += 1;
            match (fired, panes.fired) {
                (true, false) => {
                    panes.prefired.push(index);
                    panes.watch = true;
                }
                (false, true) => due.push((start, hash, index)),
                _ => {}
            }
        }
        gone.done();
        for panes in self.windows.values_mut() {
            panes.prefired.sort_unstable();
        }
        if let Some(cache) = &mut self.cache {
            cache.added(bin, keys);
            cache.touch(bin);
            self.dirty.mark_bin(bin);
        }
        if !due.is_empty() {
            let mut out = self.output(ctx, due.len().min(self.batch_size));
            for &(start, hash, index) in &due {
                let panes = &self.windows[&start];
                let entry = panes
                    .pane
                    .get(hash, index)
                    .expect("an installed entry exists");
                out.row(&plan, &self.aggs, &panes.pane, entry, start, panes.end);
            }
            out.done();
        }
        if self.cache.as_ref().is_some_and(|c| c.over_budget()) {
            let evicted = self.shrink()?;
            ctx.count(&ctx.metrics.state_evictions, evicted);
        }
        Ok(())
    }
}

impl<K: GroupKey> Panes<K> {
    fn new(end: i64, keys: usize, bins: u32) -> Panes<K> {
        Panes {
            end,
            fired: false,
            prefired: Vec::new(),
            watch: false,
            pane: Pane::with_capacity(keys, bins),
        }
    }
}
