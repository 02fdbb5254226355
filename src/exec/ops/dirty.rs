//! Which bins changed since the last checkpoint: a bitset over bins.

use crate::kernel::hash::bin_of;
use crate::state::BinEntries;

pub(super) struct DirtyBins {
    bins: u32,
    words: Vec<u64>,
    any: bool,
}

impl DirtyBins {
    pub(super) fn new(bins: u32) -> DirtyBins {
        DirtyBins {
            bins,
            words: vec![0; (bins as usize).div_ceil(64)],
            any: false,
        }
    }

    pub(super) fn bins(&self) -> u32 {
        self.bins
    }

    /// Marks the bin of a key hash.
    #[inline]
    pub(super) fn mark(&mut self, hash: u64) {
        self.mark_bin(bin_of(hash, self.bins));
    }

    #[inline]
    pub(super) fn mark_bin(&mut self, bin: u32) {
        self.words[bin as usize / 64] |= 1 << (bin % 64);
        self.any = true;
    }

    #[inline]
    pub(super) fn contains(&self, bin: u32) -> bool {
        self.words[bin as usize / 64] >> (bin % 64) & 1 == 1
    }

    pub(super) fn unmark(&mut self, bin: u32) {
        self.words[bin as usize / 64] &= !(1 << (bin % 64));
    }

    /// The marked bins, in order; clears the marks.
    pub(super) fn take(&mut self) -> Vec<u32> {
        if !std::mem::take(&mut self.any) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (w, word) in self.words.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                out.push(w as u32 * 64 + bits.trailing_zeros());
                bits &= bits - 1;
            }
        }
        out
    }
}

/// Groups a snapshot's entries by dirty bin: `slot(bin)` is where a bin's
/// entries go (`None` for clean bins); `finish` splits written from
/// emptied bins. A bin's entries are one buffer, not a pair of `Vec`s per
/// key: a checkpoint holds every changed key until it is written, and a
/// pair is 48 bytes and two heap blocks (each with malloc's header, and
/// rounded up to 16 bytes) besides the encoded bytes; the buffer adds 8.
pub(super) struct SnapshotBins {
    slots: Vec<Option<BinEntries>>,
    dirty: Vec<u32>,
}

impl SnapshotBins {
    pub(super) fn new(bins: u32, dirty: Vec<u32>) -> SnapshotBins {
        let mut slots: Vec<Option<BinEntries>> = (0..bins).map(|_| None).collect();
        for &b in &dirty {
            slots[b as usize] = Some(BinEntries::new());
        }
        SnapshotBins { slots, dirty }
    }

    #[inline]
    pub(super) fn slot(&mut self, bin: u32) -> Option<&mut BinEntries> {
        self.slots[bin as usize].as_mut()
    }

    /// `(written bins with their entries, emptied bins)`.
    pub(super) fn finish(mut self) -> crate::exec::checkpoint::Snapshot {
        let mut snapshot = crate::exec::checkpoint::Snapshot::default();
        for b in self.dirty {
            match self.slots[b as usize].take() {
                Some(e) if !e.is_empty() => snapshot.bins.push((b, e)),
                _ => snapshot.emptied.push(b),
            }
        }
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_come_back_in_order_once() {
        let mut d = DirtyBins::new(256);
        assert!(d.take().is_empty());
        for b in [200, 3, 64, 3, 255] {
            d.mark_bin(b);
        }
        assert_eq!(d.take(), vec![3, 64, 200, 255]);
        assert!(d.take().is_empty());
    }
}
