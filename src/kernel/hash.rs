//! Stable key hashing and the key→bin mapping.
//!
//! The hash must never change between versions or machines: bins are what
//! state is stored, checkpointed and migrated by, so a different hash would
//! put keys in other bins than the ones their state lives in.

/// The stable 64-bit hash of an encoded key (XXH3-64, seed 0).
#[inline]
pub fn key_hash(encoded_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(encoded_key)
}

/// The bin of a key hash: the top `log2(bins)` bits, as in Megaphone, so that
/// doubling the bin count splits every bin in two without moving keys across
/// the halves.
///
/// `bins` must be a power of two (validated where it is configured).
#[inline]
pub fn bin_of(hash: u64, bins: u32) -> u32 {
    debug_assert!(bins.is_power_of_two());
    let bits = bins.trailing_zeros();
    if bits == 0 {
        0
    } else {
        (hash >> (64 - bits)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_stable_across_builds() {
        // Pinned values: changing them means every stored bin is wrong.
        assert_eq!(key_hash(b""), 0x2d06800538d394c2);
        assert_eq!(key_hash(b"s17"), key_hash(b"s17"));
        assert_ne!(key_hash(b"s17"), key_hash(b"s18"));
    }

    #[test]
    fn bins_are_top_bits_and_split_cleanly() {
        let h = 0xF000_0000_0000_0001u64;
        assert_eq!(bin_of(h, 1), 0);
        assert_eq!(bin_of(h, 2), 1);
        assert_eq!(bin_of(h, 16), 15);
        for x in [0u64, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            // bin b at 2n bins is 2b or 2b+1 at n bins: doubling only splits.
            assert_eq!(bin_of(x, 512) / 2, bin_of(x, 256));
        }
    }
}
