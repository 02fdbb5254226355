//! The keys of one open window of a keyed `window`, findable by key and by
//! bin.
//!
//! One flat hash table holds every key (of all the bins this worker owns),
//! with its hash and its numeric accumulators inline, so the per-record
//! lookup is the control bytes and one entry (per-bin tables cost four
//! dependent cache misses a record). Beside it, every bin threads a list
//! through its keys' indices, so exporting, spilling or checkpointing one
//! bin touches that bin's keys only: with 1M keys in 256 bins a migration
//! step used to scan (and compact) all of them for the ~4k that moved.

use hashbrown::HashTable;

use super::window_state::{AccState, Aggregates, Inputs};
use crate::data::GroupKey;
use crate::kernel::hash::bin_of;

/// Numeric accumulator words kept in the entry itself; windows with more
/// keep them all in the pane's `spill` array instead. Five hold the
/// presence bits, `count`, `avg` and one `min` or `max` (the usual
/// per-sensor summary), or `count`, `sum`, `min` and `max`. With three,
/// such a window kept its words in `spill` (40 bytes a key, and up to as
/// much again as the array grew) beside 24 unused bytes in every slot;
/// a window of one `count` now has 24 unused bytes a slot instead of 8.
pub(super) const INLINE_WORDS: usize = 5;

/// One key of a window: the key, its numeric accumulators, and its index
/// (into the per-key arrays of [`Slots`], which also hold its hash). An
/// index stays the key's while it is in the pane. The hash is not kept
/// here too: a slot is paid for at every empty place of the table (at
/// 1M keys, 1/2 to 7/8 full), the hashes array per key only, and the
/// table needs a key's hash only to grow.
pub(super) struct Entry<K> {
    pub(super) key: K,
    pub(super) index: u32,
    pub(super) num: [u64; INLINE_WORDS],
}

/// The keys of one window.
pub(super) struct Pane<K> {
    pub(super) table: HashTable<Entry<K>>,
    slots: Slots,
}

/// What a pane keeps per key index and per bin, beside the table.
struct Slots {
    /// Per bin: 1 + the index of the key added to it last, 0 for none
    /// (so that a new pane's heads are zeroed memory).
    heads: Vec<u32>,
    /// Per bin: how many keys it has here, so the per-bin state size the
    /// controller reads each second costs a pass over the bins, not over
    /// every key (with 1M keys that pass stalled the worker ~20 ms).
    keys: Vec<u32>,
    /// Per key index: 1 + the index of the next key of the same bin, 0 at
    /// the end of the list.
    links: Vec<u32>,
    /// Per key index: the key's hash, which finds its entry in the table.
    hashes: Vec<u64>,
    /// Indices of dropped keys, taken before new ones; they hold fresh
    /// accumulators.
    free: Vec<u32>,
    /// Numeric accumulators when they do not fit inline, per key index.
    spill: Vec<u64>,
    /// Accumulators that own values, `Aggregates::other_len` per key index.
    other: Vec<AccState>,
}

/// Whether to reach `picked` of `bins` bins through their lists rather
/// than by one pass over the table: a list step is a few cache misses, a
/// table step a sequential read, so lists win for a small share of bins.
fn by_lists(picked: usize, bins: u32) -> bool {
    picked * 8 <= bins as usize
}

impl Slots {
    /// An index with fresh accumulators for a new key of hash `hash`,
    /// put on its bin's list. Out of line: inlined, it made `update` too
    /// big to inline into the per-record loop (+2.6 % instructions on
    /// `wcount`, measured with callgrind).
    #[inline(never)]
    fn add(&mut self, hash: u64, aggs: &Aggregates) -> u32 {
        let bin = bin_of(hash, self.heads.len() as u32) as usize;
        let head = self.heads[bin];
        let index = match self.free.pop() {
            Some(i) => {
                self.links[i as usize] = head;
                self.hashes[i as usize] = hash;
                i
            }
            None => {
                let i = self.hashes.len() as u32;
                self.links.push(head);
                self.hashes.push(hash);
                let n = aggs.num_len();
                if n > INLINE_WORDS {
                    self.spill.resize(self.spill.len() + n, 0);
                }
                aggs.init_other(&mut self.other);
                i
            }
        };
        self.heads[bin] = index + 1;
        self.keys[bin] += 1;
        index
    }

    /// Gives index `i` back, with fresh accumulators (which also frees
    /// what the old ones owned). Its list is the caller's to mend.
    fn release(&mut self, i: u32, aggs: &Aggregates) {
        let (n, o) = (aggs.num_len(), aggs.other_len());
        let i = i as usize;
        if n > INLINE_WORDS {
            self.spill[i * n..(i + 1) * n].fill(0);
        }
        aggs.reset_other(&mut self.other[i * o..(i + 1) * o]);
        self.free.push(i as u32);
    }
}

impl<K: GroupKey> Pane<K> {
    pub(super) fn with_capacity(keys: usize, bins: u32) -> Pane<K> {
        Pane {
            table: HashTable::with_capacity(keys),
            slots: Slots {
                heads: vec![0; bins as usize],
                keys: vec![0; bins as usize],
                links: Vec::with_capacity(keys),
                hashes: Vec::with_capacity(keys),
                free: Vec::new(),
                spill: Vec::new(),
                other: Vec::new(),
            },
        }
    }

    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    /// Keys the table takes before it must grow or rehash (empty slots
    /// left).
    pub(super) fn room(&self) -> usize {
        self.table.capacity() - self.table.len()
    }

    /// Keys the table holds at most at its size (7/8 of its slots).
    pub(super) fn full_capacity(&self) -> usize {
        // The allocation is the slots (entry and control byte each) and
        // one group of control bytes more: the slots are the power of two
        // below the allocation over a slot's size.
        let fits = self.table.allocation_size() / (std::mem::size_of::<Entry<K>>() + 1);
        let buckets = match fits {
            0 => return 0,
            n => 1usize << (usize::BITS - 1 - n.leading_zeros()),
        };
        if buckets < 8 {
            buckets - 1
        } else {
            buckets / 8 * 7
        }
    }

    /// Bytes of the table's allocation.
    pub(super) fn table_bytes(&self) -> u64 {
        self.table.allocation_size() as u64
    }

    /// Gives back half the table or more when a quarter of its room or
    /// less is taken, keeping room for as many keys again. Not sooner: a
    /// table evicted to half full to rehash in place (see
    /// `Window::make_room`) was halved here and doubled again by the next
    /// batch, two rehashes of every key it held per eviction.
    pub(super) fn shrink(&mut self) {
        let len = self.table.len();
        if len > self.full_capacity() / 4 {
            return;
        }
        let hashes = &self.slots.hashes;
        self.table.shrink_to(2 * len, |e| hashes[e.index as usize]);
    }

    /// Bytes the pane has allocated: its table, whatever its load, and the
    /// per-key arrays, whatever their fill.
    pub(super) fn heap_bytes(&self) -> u64 {
        let s = &self.slots;
        let vec = |len: usize, size: usize| (len * size) as u64;
        self.table.allocation_size() as u64
            + vec(
                s.heads.capacity() + s.keys.capacity() + s.links.capacity(),
                4,
            )
            + vec(s.hashes.capacity() + s.spill.capacity(), 8)
            + vec(s.free.capacity(), 4)
            + vec(s.other.capacity(), std::mem::size_of::<AccState>())
    }

    /// How many keys each bin has in this pane.
    pub(super) fn keys_per_bin(&self) -> &[u32] {
        &self.slots.keys
    }

    /// Folds row `row` into the probed key's accumulators, creating them if
    /// the key is new; returns the key's index and whether it is new.
    #[inline(always)]
    pub(super) fn update(
        &mut self,
        hash: u64,
        probe: &K::Probe<'_>,
        aggs: &Aggregates,
        inputs: &Inputs<'_>,
        row: usize,
        ts: i64,
    ) -> (u32, bool) {
        let (n, o) = (aggs.num_len(), aggs.other_len());
        let mut new = false;
        let hashes = &self.slots.hashes;
        let entry =
            match self
                .table
                .entry(hash, |e| e.key.matches(probe), |e| hashes[e.index as usize])
            {
                hashbrown::hash_table::Entry::Occupied(found) => found.into_mut(),
                hashbrown::hash_table::Entry::Vacant(vacant) => {
                    // The index is taken here, not before the probe: the probe
                    // loop needs the registers.
                    new = true;
                    let index = self.slots.add(hash, aggs);
                    vacant
                        .insert(Entry {
                            key: K::store(probe),
                            index,
                            num: [0; INLINE_WORDS],
                        })
                        .into_mut()
                }
            };
        let i = entry.index as usize;
        let num = if n > INLINE_WORDS {
            &mut self.slots.spill[i * n..(i + 1) * n]
        } else {
            &mut entry.num[..]
        };
        aggs.update(
            num,
            &mut self.slots.other[i * o..(i + 1) * o],
            inputs,
            row,
            ts,
        );
        (entry.index, new)
    }

    /// Adds a key with the given accumulators (restored or migrated);
    /// returns its index.
    pub(super) fn insert(
        &mut self,
        hash: u64,
        key: K,
        num: &[u64],
        other: Vec<AccState>,
        aggs: &Aggregates,
    ) -> u32 {
        let index = self.slots.add(hash, aggs);
        let i = index as usize;
        let mut entry = Entry {
            key,
            index,
            num: [0; INLINE_WORDS],
        };
        if num.len() > INLINE_WORDS {
            self.slots.spill[i * num.len()..(i + 1) * num.len()].copy_from_slice(num);
        } else {
            entry.num[..num.len()].copy_from_slice(num);
        }
        let o = other.len();
        for (slot, acc) in self.slots.other[i * o..(i + 1) * o].iter_mut().zip(other) {
            *slot = acc;
        }
        let hashes = &self.slots.hashes;
        self.table
            .insert_unique(hash, entry, |e| hashes[e.index as usize]);
        index
    }

    /// Merges stored accumulators into the key's, or adds the key if it is
    /// not here; returns its index and whether it is new.
    pub(super) fn merge_or_insert(
        &mut self,
        hash: u64,
        key: K,
        num: &[u64],
        other: Vec<AccState>,
        aggs: &Aggregates,
    ) -> (u32, bool) {
        let Some(entry) = self.table.find_mut(hash, |e| e.key == key) else {
            return (self.insert(hash, key, num, other, aggs), true);
        };
        let (i, n, o) = (entry.index as usize, num.len(), other.len());
        let into = if n > INLINE_WORDS {
            &mut self.slots.spill[i * n..(i + 1) * n]
        } else {
            &mut entry.num[..n]
        };
        aggs.merge(into, &mut self.slots.other[i * o..(i + 1) * o], num, &other);
        (entry.index, false)
    }

    /// Calls `visit(bin, entry)` for every key of `bins`.
    pub(super) fn for_bins(&self, bins: &[u32], mut visit: impl FnMut(u32, &Entry<K>)) {
        let n = self.slots.heads.len() as u32;
        if by_lists(bins.len(), n) {
            for &bin in bins {
                let mut at = self.slots.heads[bin as usize];
                while at != 0 {
                    let i = at - 1;
                    let entry = self
                        .get(self.slots.hashes[i as usize], i)
                        .expect("a key on a bin's list is in the table");
                    visit(bin, entry);
                    at = self.slots.links[i as usize];
                }
            }
        } else {
            let mut picked = vec![false; n as usize];
            for &b in bins {
                picked[b as usize] = true;
            }
            for entry in self.table.iter() {
                let bin = bin_of(self.hash(entry), n);
                if picked[bin as usize] {
                    visit(bin, entry);
                }
            }
        }
    }

    /// Drops every key of `bins`; `prefired` (sorted indices) loses the
    /// dropped ones.
    pub(super) fn remove_bins(&mut self, bins: &[u32], aggs: &Aggregates, prefired: &mut Vec<u32>) {
        let n = self.slots.heads.len() as u32;
        let first_freed = self.slots.free.len();
        let Pane { table, slots } = self;
        if by_lists(bins.len(), n) {
            for &bin in bins {
                let mut at = std::mem::take(&mut slots.heads[bin as usize]);
                slots.keys[bin as usize] = 0;
                while at != 0 {
                    let i = at - 1;
                    let Ok(found) = table.find_entry(slots.hashes[i as usize], |e| e.index == i)
                    else {
                        unreachable!("a key on a bin's list is in the table")
                    };
                    found.remove();
                    slots.release(i, aggs);
                    at = slots.links[i as usize];
                }
            }
        } else {
            let mut picked = vec![false; n as usize];
            for &b in bins {
                picked[b as usize] = true;
                slots.heads[b as usize] = 0;
                slots.keys[b as usize] = 0;
            }
            table.retain(|e| {
                let keep = !picked[bin_of(slots.hashes[e.index as usize], n) as usize];
                if !keep {
                    slots.release(e.index, aggs);
                }
                keep
            });
        }
        if !prefired.is_empty() {
            let mut freed = self.slots.free[first_freed..].to_vec();
            freed.sort_unstable();
            prefired.retain(|i| freed.binary_search(i).is_err());
        }
    }

    /// The hash of `entry`'s key.
    pub(super) fn hash(&self, entry: &Entry<K>) -> u64 {
        self.slots.hashes[entry.index as usize]
    }

    /// The key of hash `hash` and index `index`.
    pub(super) fn get(&self, hash: u64, index: u32) -> Option<&Entry<K>> {
        self.table.find(hash, |e| e.index == index)
    }

    /// The numeric accumulators of `entry`.
    pub(super) fn num<'a>(&'a self, entry: &'a Entry<K>, words: usize) -> &'a [u64] {
        let i = entry.index as usize;
        if words > INLINE_WORDS {
            &self.slots.spill[i * words..(i + 1) * words]
        } else {
            &entry.num[..words]
        }
    }

    /// The value-owning accumulators of `entry`.
    pub(super) fn other(&self, entry: &Entry<K>, o: usize) -> &[AccState] {
        let i = entry.index as usize;
        &self.slots.other[i * o..(i + 1) * o]
    }
}
