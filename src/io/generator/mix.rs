//! Counter-based randomness: every value is a hash of `(seed, event number)`,
//! never the next output of a sequential generator, so any worker can make
//! any event without replaying the ones before it.

/// Odd 64-bit constant (2^64 / golden ratio): the SplitMix64 increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 / MurmurHash3 finaliser: a bijection of `u64` with full
/// avalanche, so neighbouring inputs give unrelated outputs.
#[inline(always)]
pub(crate) fn fmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whether event `i` carries the hot key, for `percent` % of the events:
/// a hash of the index, independent of the other fields' hashes.
#[inline]
pub(crate) fn is_hot(i: u64, percent: u8) -> bool {
    percent > 0 && ((fmix64(i ^ 0x5851_F42D_4C95_7F2D) >> 32) * 100) >> 32 < u64::from(percent)
}

/// The per-seed key mixed into every event hash. Hashing the seed first
/// keeps seeds 0, 1, 2.. from giving shifted copies of one sequence.
#[inline]
pub(crate) fn seed_key(seed: u64) -> u64 {
    fmix64(seed ^ 0x6A09_E667_F3BC_C908)
}

/// The hash of event `i` under `key` (from [`seed_key`]). Multiplying by
/// `GAMMA` spreads consecutive counters over all bits before the xor, so the
/// seed key cannot line up with a shift of the counter.
#[inline(always)]
pub(crate) fn event_hash(key: u64, i: u64) -> u64 {
    fmix64(i.wrapping_mul(GAMMA) ^ key)
}

/// `x` scaled to `[0, n)` by a multiply-high (Lemire): unbiased enough for
/// test data and much cheaper than `%`.
#[inline(always)]
pub(crate) fn below(x: u64, n: u64) -> u64 {
    ((x as u128 * n as u128) >> 64) as u64
}

/// A short SplitMix64 stream seeded by one event's hash, for events that
/// need many random draws (NEXMark). It lives for one event only, so the
/// event is still a pure function of `(seed, event number)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EventRng(u64);

impl EventRng {
    #[inline(always)]
    pub(crate) fn new(hash: u64) -> EventRng {
        EventRng(hash)
    }

    #[inline(always)]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        fmix64(self.0)
    }

    /// Uniform in `[0, n)`, like Java's `Random.nextInt(n)` / Beam's
    /// `LongGenerator.nextLong(random, n)`.
    #[inline(always)]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        below(self.next_u64(), n)
    }

    /// Uniform in `[0, 1)` with 53 random bits, like `Random.nextDouble()`.
    #[inline(always)]
    pub(crate) fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// `floor(i * num / den)` for `i = first, first + step, ..` without a
/// division per step: the quotient and remainder are carried forward.
/// Used for event times (`i * 1000 / events_per_second`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FloorRatio {
    q: u64,
    r: u64,
    dq: u64,
    dr: u64,
    den: u64,
}

impl FloorRatio {
    pub(crate) fn new(first: u64, step: u64, num: u64, den: u64) -> FloorRatio {
        debug_assert!(den > 0);
        let start = first as u128 * num as u128;
        let delta = step as u128 * num as u128;
        FloorRatio {
            q: (start / den as u128) as u64,
            r: (start % den as u128) as u64,
            dq: (delta / den as u128) as u64,
            dr: (delta % den as u128) as u64,
            den,
        }
    }

    /// The current value.
    #[inline(always)]
    pub(crate) fn get(&self) -> u64 {
        self.q
    }

    #[inline(always)]
    pub(crate) fn advance(&mut self) {
        self.q = self.q.wrapping_add(self.dq);
        self.r += self.dr;
        if self.r >= self.den {
            self.r -= self.den;
            self.q = self.q.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_ratio_matches_division() {
        for (first, step, num, den) in [
            (0, 1, 1000, 1000),
            (7, 3, 1000, 100_000),
            (5, 100, 1000, 7),
            (1 << 40, 13, 1000, 3),
        ] {
            let mut f = FloorRatio::new(first, step, num, den);
            for k in 0..10_000u64 {
                let i = first + k * step;
                assert_eq!(
                    f.get(),
                    (i as u128 * num as u128 / den as u128) as u64,
                    "i={i}"
                );
                f.advance();
            }
        }
    }

    #[test]
    fn below_stays_in_range_and_spreads() {
        let key = seed_key(0);
        let mut seen = [0u32; 10];
        for i in 0..100_000 {
            let x = below(event_hash(key, i), 10);
            seen[x as usize] += 1;
        }
        assert!(
            seen.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{seen:?}"
        );
    }
}
