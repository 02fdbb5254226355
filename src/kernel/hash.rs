//! Stable key hashing and the key→bin mapping.
//!
//! The hash must never change between versions or machines: bins are what
//! state is stored, checkpointed and migrated by, so a different hash would
//! put keys in other bins than the ones their state lives in. The pinned
//! values in the tests guard it.
//!
//! A key is hashed field by field from typed values (one multiply-fold per
//! number, XXH3 for strings) rather than from an encoded byte string: on the
//! hot path this avoids writing bytes only to read them back as words,
//! which costs more than the hash itself.

const SEED: u64 = 0x243F_6A88_85A3_08D3;
const FOLD: u64 = 0x9E37_79B9_7F4A_7C15;
const NULL_WORD: u64 = 0x6E75_6C6C_6E75_6C6C;

/// Hashes the fields of one key, in order.
#[derive(Clone, Copy, Debug)]
pub struct KeyHasher(u64);

impl Default for KeyHasher {
    fn default() -> Self {
        KeyHasher::new()
    }
}

impl KeyHasher {
    #[inline]
    pub const fn new() -> Self {
        KeyHasher(SEED)
    }

    #[inline]
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(FOLD).rotate_left(29);
    }

    #[inline]
    pub fn null(&mut self) {
        self.word(NULL_WORD)
    }

    #[inline]
    pub fn int(&mut self, v: i64) {
        self.word(v as u64)
    }

    /// Equal floats hash equally: `-0.0` as `0.0`, every NaN as one.
    #[inline]
    pub fn float(&mut self, v: f64) {
        self.word(canonical_float_bits(v))
    }

    #[inline]
    pub fn bool(&mut self, b: bool) {
        self.word(b as u64 + 0xB001)
    }

    #[inline]
    pub fn str(&mut self, s: &[u8]) {
        self.word(hash_bytes(s))
    }

    /// The key's hash, avalanched so that its top bits (the bin) depend on
    /// every input bit.
    #[inline]
    pub fn finish(self) -> u64 {
        fmix64(self.0)
    }
}

/// The bits a float key is compared and hashed by.
#[inline]
pub fn canonical_float_bits(v: f64) -> u64 {
    if v == 0.0 {
        0
    } else if v.is_nan() {
        f64::NAN.to_bits()
    } else {
        v.to_bits()
    }
}

/// The stable 64-bit hash of a byte string (XXH3-64, seed 0).
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// MurmurHash3's 64-bit finaliser.
#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
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

    fn one_int(v: i64) -> u64 {
        let mut h = KeyHasher::new();
        h.int(v);
        h.finish()
    }

    #[test]
    fn hash_is_stable_across_builds() {
        // Pinned values: changing them means every stored bin is wrong.
        assert_eq!(hash_bytes(b""), 0x2d06800538d394c2);
        assert_eq!(one_int(0), PINNED[0]);
        assert_eq!(one_int(17), PINNED[1]);
        let mut h = KeyHasher::new();
        h.str(b"s17");
        h.null();
        h.float(-0.0);
        h.bool(true);
        assert_eq!(h.finish(), PINNED[2]);
    }

    const PINNED: [u64; 3] = [
        0x969c_56ef_d660_4ca3,
        0xeb50_e7bf_d943_dfce,
        0x958a_a39b_ba08_f393,
    ];

    #[test]
    fn equal_floats_hash_equally_and_fields_are_ordered() {
        let f = |v: f64| {
            let mut h = KeyHasher::new();
            h.float(v);
            h.finish()
        };
        assert_eq!(f(0.0), f(-0.0));
        assert_eq!(f(f64::NAN), f(-f64::NAN));
        let (mut a, mut b) = (KeyHasher::new(), KeyHasher::new());
        a.int(1);
        a.int(2);
        b.int(2);
        b.int(1);
        assert_ne!(a.finish(), b.finish());
    }

    #[test]
    fn consecutive_ints_spread_over_bins() {
        let mut counts = [0u32; 16];
        for v in 0..16_000 {
            counts[bin_of(one_int(v), 16) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
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
