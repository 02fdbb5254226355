//! NEXMark auctions (Beam's `AuctionGenerator`).

use super::strings::{Tables, tables};
use super::*;
use crate::data::BatchBuilder;
use crate::io::generator::Generator;

pub(crate) struct Auctions {
    clock: Clock,
    time_field: usize,
    tables: &'static Tables,
}

impl Auctions {
    pub(crate) fn new(spec: &GeneratorSpec) -> Auctions {
        Auctions {
            clock: Clock::new(spec),
            time_field: spec.event_time_field,
            tables: tables(),
        }
    }

    /// Beam's `nextAuctionLengthMs`: uniform with a mean of the time until
    /// `NUM_IN_FLIGHT_AUCTIONS` more auctions have been created, so about
    /// that many are open at any time.
    #[inline]
    fn length_ms(&self, g: u64, date_time: i64, rng: &mut EventRng) -> i64 {
        let events_for_auctions =
            NUM_IN_FLIGHT_AUCTIONS as u64 * PROPORTION_DENOMINATOR / AUCTION_PROPORTION;
        let horizon_ms = self.clock.time_of(g + events_for_auctions) - date_time;
        1 + rng.below((horizon_ms * 2).max(1) as u64) as i64
    }
}

impl Generator for Auctions {
    fn fill(&mut self, first: u64, step: u64, n: usize, out: &mut BatchBuilder, ingest_ns: u64) {
        let t = self.tables;
        for k in 0..n as u64 {
            let g = auction_event(first.wrapping_add(k.wrapping_mul(step)));
            let date_time = self.clock.time_of(g);
            let mut rng = self.clock.rng(g);
            let id = last_base0_auction_id(g) + FIRST_AUCTION_ID;
            // The first person of the batch is the hot seller.
            let seller = if rng.below(HOT_SELLERS_RATIO) > 0 {
                last_base0_person_id(g) / HOT_BATCH * HOT_BATCH
            } else {
                next_base0_person_id(g, &mut rng)
            } + FIRST_PERSON_ID;
            let category = FIRST_CATEGORY_ID + rng.below(NUM_CATEGORIES) as i64;
            let initial_bid = next_price(&mut rng);
            let expires = date_time + self.length_ms(g, date_time, &mut rng);
            let item_name = t.next_string(&mut rng, 20);
            let description = t.next_string(&mut rng, 100);
            let reserve = initial_bid + next_price(&mut rng);
            out.column_mut(0).push_int(id);
            out.column_mut(1).push_str(item_name);
            out.column_mut(2).push_str(description);
            out.column_mut(3).push_int(initial_bid);
            out.column_mut(4).push_int(reserve);
            out.column_mut(5).push_int(date_time);
            out.column_mut(6).push_int(expires);
            out.column_mut(7).push_int(seller);
            out.column_mut(8).push_int(category);
            out.column_mut(9).push_str("");
            out.finish_row_from(self.time_field, ingest_ns);
        }
    }
}
