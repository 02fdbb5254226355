//! NEXMark bids (Beam's `BidGenerator`, with the Flink suite's channels).

use super::strings::{CHANNELS_NUMBER, HOT_CHANNELS, HOT_CHANNELS_RATIO, Tables, tables};
use super::*;
use crate::data::BatchBuilder;
use crate::io::generator::Generator;

pub(crate) struct Bids {
    clock: Clock,
    time_field: usize,
    tables: &'static Tables,
}

impl Bids {
    pub(crate) fn new(spec: &GeneratorSpec) -> Bids {
        Bids {
            clock: Clock::new(spec),
            time_field: spec.event_time_field,
            tables: tables(),
        }
    }
}

/// The auction a bid at event `g` is for: with probability
/// `1 - 1/HOT_AUCTION_RATIO` the first of the current batch of 100
/// auctions (the hot one), else one of the auctions in flight.
#[inline]
pub(crate) fn bid_auction(g: u64, rng: &mut EventRng) -> i64 {
    let base0 = if rng.below(HOT_AUCTION_RATIO) > 0 {
        last_base0_auction_id(g) / HOT_BATCH * HOT_BATCH
    } else {
        next_base0_auction_id(g, rng)
    };
    base0 + FIRST_AUCTION_ID
}

impl Generator for Bids {
    fn fill(&mut self, first: u64, step: u64, n: usize, out: &mut BatchBuilder, ingest_ns: u64) {
        let t = self.tables;
        for k in 0..n as u64 {
            let g = bid_event(first.wrapping_add(k.wrapping_mul(step)));
            let date_time = self.clock.time_of(g);
            let mut rng = self.clock.rng(g);
            let auction = bid_auction(g, &mut rng);
            // The second person of the batch, so hot bidders and hot
            // sellers differ.
            let bidder = if rng.below(HOT_BIDDERS_RATIO) > 0 {
                last_base0_person_id(g) / HOT_BATCH * HOT_BATCH + 1
            } else {
                next_base0_person_id(g, &mut rng)
            } + FIRST_PERSON_ID;
            let price = next_price(&mut rng);
            let (channel, url) = if rng.below(HOT_CHANNELS_RATIO) > 0 {
                let c = rng.below(HOT_CHANNELS.len() as u64) as usize;
                (HOT_CHANNELS[c], t.hot_urls.get(c))
            } else {
                let c = rng.below(CHANNELS_NUMBER) as usize;
                (t.channels.get(c), t.channel_urls.get(c))
            };
            out.column_mut(0).push_int(auction);
            out.column_mut(1).push_int(bidder);
            out.column_mut(2).push_int(price);
            out.column_mut(3).push_str(channel);
            out.column_mut(4).push_str(url);
            out.column_mut(5).push_int(date_time);
            out.column_mut(6).push_str("");
            out.finish_row_from(self.time_field, ingest_ns);
        }
    }
}
