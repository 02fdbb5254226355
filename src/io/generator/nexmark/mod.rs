//! A port of the standard NEXMark generator (Apache Beam's
//! `org.apache.beam.sdk.nexmark.sources.generator`, with the `channel` and
//! `url` bid fields of the nexmark/nexmark Flink suite), with Beam's default
//! configuration.
//!
//! The global stream numbers its events `g = 0, 1, 2, ..`; in every group of
//! 50, event 0 is a person, 1..=3 are auctions and 4..=49 are bids. Each of
//! the three generators numbers only its own kind (`i`) and maps `i` to `g`,
//! so three sources with the same seed agree on every id: a bid's auction
//! and bidder are the ones the auction and person sources make.
//!
//! Differences from Beam, on purpose:
//! - Beam draws from `java.util.Random(eventId)`; here every draw comes from
//!   a counter-based hash of `(seed, g)` ([`EventRng`]), so the values differ
//!   from Beam's while the distributions and id relations are the same.
//! - `extra` is empty: Beam pads each record with random letters to an
//!   average size (100/500/200 bytes); that only costs bandwidth, and no
//!   query reads it.
//! - Event time is `start_ms + g * 1000 / events_per_second` (Beam's fixed
//!   inter-event delay with one generator, `outOfOrderGroupSize` 1).
//! - `item_name`, `description` and email parts are slices of a fixed
//!   random text (same letters-and-spaces distribution and lengths as
//!   Beam's `nextString`) instead of fresh characters per event.
//! - The Flink suite adds `FIRST_PERSON_ID` to the bidder twice (a bug);
//!   we add it once, as Beam does.
//! - The channel table and hot urls are fixed (Flink builds them from an
//!   unseeded `Random`, so they differ between runs).

pub(crate) mod auction;
pub(crate) mod bid;
pub(crate) mod person;
mod strings;

use super::GeneratorSpec;
use super::mix::{EventRng, event_hash, seed_key};
use super::timeline::Timeline;

/// Beam's default `firstEventRate`.
pub(crate) const EVENTS_PER_SECOND: u64 = 10_000;

pub(crate) const PERSON_PROPORTION: u64 = 1;
pub(crate) const AUCTION_PROPORTION: u64 = 3;
pub(crate) const BID_PROPORTION: u64 = 46;
pub(crate) const PROPORTION_DENOMINATOR: u64 =
    PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION;

pub(crate) const FIRST_AUCTION_ID: i64 = 1000;
pub(crate) const FIRST_PERSON_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: u64 = 5;

/// How many not-yet-created persons / auctions a random reference may name
/// (Beam's `PERSON_ID_LEAD`, `AUCTION_ID_LEAD`).
pub(crate) const PERSON_ID_LEAD: i64 = 10;
pub(crate) const AUCTION_ID_LEAD: i64 = 10;

/// Hot sellers, bidders and auctions are the first of each batch of this
/// many recent ids (Beam's `HOT_*_RATIO` constants in the model classes).
pub(crate) const HOT_BATCH: i64 = 100;

/// Beam's `NexmarkConfiguration` defaults: a reference is hot with
/// probability `1 - 1 / ratio`.
pub(crate) const HOT_AUCTION_RATIO: u64 = 2;
const HOT_SELLERS_RATIO: u64 = 4;
const HOT_BIDDERS_RATIO: u64 = 4;
const NUM_ACTIVE_PEOPLE: i64 = 1000;
const NUM_IN_FLIGHT_AUCTIONS: i64 = 100;

/// The global number of the `i`-th person.
#[inline]
pub(crate) fn person_event(i: u64) -> u64 {
    i * PROPORTION_DENOMINATOR
}

/// The global number of the `i`-th auction.
#[inline]
pub(crate) fn auction_event(i: u64) -> u64 {
    i / AUCTION_PROPORTION * PROPORTION_DENOMINATOR + PERSON_PROPORTION + i % AUCTION_PROPORTION
}

/// The global number of the `i`-th bid.
#[inline]
pub(crate) fn bid_event(i: u64) -> u64 {
    i / BID_PROPORTION * PROPORTION_DENOMINATOR
        + PERSON_PROPORTION
        + AUCTION_PROPORTION
        + i % BID_PROPORTION
}

/// The last person id (base 0) generated at or before event `g`: the
/// current one if `g` is a person (Beam's `lastBase0PersonId`).
#[inline]
pub(crate) fn last_base0_person_id(g: u64) -> i64 {
    let epoch = g / PROPORTION_DENOMINATOR;
    let mut offset = g % PROPORTION_DENOMINATOR;
    if offset >= PERSON_PROPORTION {
        // An auction or bid: the last person of this epoch.
        offset = PERSON_PROPORTION - 1;
    }
    (epoch * PERSON_PROPORTION + offset) as i64
}

/// The last auction id (base 0) generated at or before event `g`; -1
/// before the first auction (Beam's `lastBase0AuctionId`).
#[inline]
pub(crate) fn last_base0_auction_id(g: u64) -> i64 {
    let mut epoch = (g / PROPORTION_DENOMINATOR) as i64;
    let mut offset = g % PROPORTION_DENOMINATOR;
    if offset < PERSON_PROPORTION {
        // A person: the last auction is the last one of the previous epoch.
        epoch -= 1;
        offset = AUCTION_PROPORTION - 1;
    } else if offset >= PERSON_PROPORTION + AUCTION_PROPORTION {
        // A bid: the last auction of this epoch.
        offset = AUCTION_PROPORTION - 1;
    } else {
        offset -= PERSON_PROPORTION;
    }
    epoch * AUCTION_PROPORTION as i64 + offset as i64
}

/// A random person among the active ones, plus a few not created yet
/// (Beam's `nextBase0PersonId`).
#[inline]
fn next_base0_person_id(g: u64, rng: &mut EventRng) -> i64 {
    let num_people = last_base0_person_id(g) + 1;
    let active = num_people.min(NUM_ACTIVE_PEOPLE);
    let n = rng.below((active + PERSON_ID_LEAD) as u64) as i64;
    num_people - active + n
}

/// A random auction among those likely still in flight, plus a few not
/// created yet (Beam's `nextBase0AuctionId`).
#[inline]
fn next_base0_auction_id(g: u64, rng: &mut EventRng) -> i64 {
    let max_auction = last_base0_auction_id(g);
    let min_auction = (max_auction - NUM_IN_FLIGHT_AUCTIONS).max(0);
    min_auction + rng.below((max_auction - min_auction + 1 + AUCTION_ID_LEAD) as u64) as i64
}

/// A price in cents, log-uniform in `[100, 10^8)` (Beam's `nextPrice`:
/// `round(10^(6u) * 100)`).
///
/// `10^(6u)` is read from a table of 1025 points with linear interpolation
/// (relative error below 3e-5): `exp` per bid was a third of the cost of a
/// pass-through query.
#[inline]
fn next_price(rng: &mut EventRng) -> i64 {
    const STEPS: usize = 1024;
    static POWERS: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    let powers = POWERS.get_or_init(|| {
        (0..=STEPS)
            .map(|i| 10f64.powf(6.0 * i as f64 / STEPS as f64) * 100.0)
            .collect()
    });
    let x = rng.unit_f64() * STEPS as f64;
    let i = (x as usize).min(STEPS - 1);
    let frac = x - i as f64;
    (powers[i] + (powers[i + 1] - powers[i]) * frac).round() as i64
}

/// What all three generators share: the seed key and the clock.
#[derive(Clone, Debug)]
pub(crate) struct Clock {
    key: u64,
    start_ms: i64,
    timeline: Timeline,
}

impl Clock {
    pub(crate) fn new(spec: &GeneratorSpec) -> Clock {
        Clock {
            key: seed_key(spec.seed),
            start_ms: spec.start_ms,
            timeline: Timeline::new(spec.events_per_second, &spec.rate_steps),
        }
    }

    /// Event time of global event `g`.
    #[inline]
    pub(crate) fn time_of(&self, g: u64) -> i64 {
        self.start_ms.wrapping_add(self.timeline.offset_ms(g))
    }

    /// The random draws of global event `g`.
    #[inline]
    pub(crate) fn rng(&self, g: u64) -> EventRng {
        EventRng::new(event_hash(self.key, g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_interleaves_one_three_forty_six() {
        let mut kinds = Vec::new();
        for g in 0..100u64 {
            let persons = (0..2).filter(|&i| person_event(i) == g).count();
            let auctions = (0..6).filter(|&i| auction_event(i) == g).count();
            let bids = (0..92).filter(|&i| bid_event(i) == g).count();
            assert_eq!(
                persons + auctions + bids,
                1,
                "event {g} has exactly one kind"
            );
            kinds.push(if persons == 1 {
                'p'
            } else if auctions == 1 {
                'a'
            } else {
                'b'
            });
        }
        let first: String = kinds[..6].iter().collect();
        assert_eq!(first, "paaabb");
        assert_eq!(kinds[50], 'p');
    }

    #[test]
    fn last_ids_follow_beam() {
        assert_eq!(last_base0_auction_id(0), -1);
        assert_eq!(last_base0_auction_id(1), 0);
        assert_eq!(last_base0_auction_id(3), 2);
        assert_eq!(last_base0_auction_id(4), 2);
        assert_eq!(last_base0_auction_id(50), 2);
        assert_eq!(last_base0_auction_id(51), 3);
        assert_eq!(last_base0_person_id(0), 0);
        assert_eq!(last_base0_person_id(49), 0);
        assert_eq!(last_base0_person_id(50), 1);
        for i in 0..1000 {
            assert_eq!(last_base0_person_id(person_event(i)), i as i64);
            assert_eq!(last_base0_auction_id(auction_event(i)), i as i64);
        }
    }
}
