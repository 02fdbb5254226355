//! Properties every generator must keep: exact formulas, independence from
//! the partitioning, determinism, and NEXMark's id relations.

use std::collections::HashMap;

use super::nexmark::{AUCTION_ID_LEAD, HOT_BATCH, PERSON_ID_LEAD, PROPORTION_DENOMINATOR};
use super::*;
use crate::data::{Batch, ValueRef};

const ALL_KINDS: [GeneratorKind; 5] = [
    GeneratorKind::Readings,
    GeneratorKind::Wcount,
    GeneratorKind::Nexmark(NexmarkEvents::Bid),
    GeneratorKind::Nexmark(NexmarkEvents::Auction),
    GeneratorKind::Nexmark(NexmarkEvents::Person),
];

/// Events `first, first + step, ..` (`n` of them), filled in chunks of
/// `chunk` as a source would.
fn generate(spec: &GeneratorSpec, first: u64, step: u64, n: usize, chunk: usize) -> Batch {
    let mut g = new_generator(spec);
    let mut out = BatchBuilder::new(schema(spec.kind), chunk, true);
    let mut done = 0;
    while done < n {
        let m = chunk.min(n - done);
        g.fill(first + done as u64 * step, step, m, &mut out, 7);
        done += m;
    }
    out.take()
}

/// Every row as text (fields and event time), for multiset comparisons.
fn rows(batch: &Batch) -> Vec<String> {
    (0..batch.len())
        .map(|r| {
            let fields: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| format!("{:?}", c.get(r)))
                .collect();
            format!("{} @{}", fields.join(","), batch.event_time()[r])
        })
        .collect()
}

fn int(batch: &Batch, name: &str, row: usize) -> i64 {
    let i = batch.schema().index_of(name).unwrap();
    batch.column(i).int(row).unwrap()
}

#[test]
fn wcount_matches_the_workload_formula() {
    let spec = GeneratorSpec::defaults(GeneratorKind::Wcount);
    let points = [
        0u64,
        1,
        99,
        100,
        12_345,
        9_999_999,
        6_949_000_000,
        6_949_350_000,
        1 << 40,
    ];
    for &i in &points {
        let b = generate(&spec, i, 1, 3, 3);
        for r in 0..3 {
            let i = i + r as u64;
            assert_eq!(
                int(&b, "key", r),
                (i.wrapping_mul(2_654_435_761) % 10_000) as i64,
                "key of {i}"
            );
            assert_eq!(int(&b, "value", r), (i % 100) as i64, "value of {i}");
            assert_eq!(int(&b, "ts", r), (i / 100) as i64, "ts of {i}");
            assert_eq!(b.event_time()[r], (i / 100) as i64);
        }
    }
    // A long strided slice on the carried-forward path, and one across the
    // point where `i * 2654435761` wraps (the direct path).
    for (first, step) in [(3u64, 7u64), (6_949_999_000, 3)] {
        let b = generate(&spec, first, step, 5000, 1000);
        for r in 0..5000 {
            let i = first + r as u64 * step;
            assert_eq!(
                int(&b, "key", r),
                (i.wrapping_mul(2_654_435_761) % 10_000) as i64,
                "key of {i}"
            );
            assert_eq!(int(&b, "value", r), (i % 100) as i64);
            assert_eq!(int(&b, "ts", r), (i / 100) as i64);
        }
    }
}

#[test]
fn defaults_name_the_time_field() {
    for kind in ALL_KINDS {
        let spec = GeneratorSpec::defaults(kind);
        let schema = schema(kind);
        let name = &schema.fields()[spec.event_time_field].name;
        assert!(name == "ts" || name == "date_time", "{kind:?}: {name}");
    }
    assert_eq!(
        GeneratorSpec::defaults(GeneratorKind::Readings).start_ms,
        1_767_225_600_000
    );
}

#[test]
fn any_partitioning_gives_the_same_multiset() {
    const N: usize = 10_000;
    for kind in ALL_KINDS {
        let mut spec = GeneratorSpec::defaults(kind);
        spec.seed = 42;
        spec.disorder_ms = if kind == GeneratorKind::Readings {
            500
        } else {
            0
        };
        let mut whole = rows(&generate(&spec, 0, 1, N, 1024));
        whole.sort();
        for (workers, chunk) in [(2u64, 1000), (3, 17), (7, 256)] {
            let mut parts = Vec::new();
            for w in 0..workers {
                let n = (N as u64 - w).div_ceil(workers) as usize;
                parts.extend(rows(&generate(&spec, w, workers, n, chunk)));
            }
            parts.sort();
            assert_eq!(parts, whole, "{kind:?} with {workers} workers");
        }
    }
}

#[test]
fn same_seed_same_events_other_seed_other_events() {
    for kind in ALL_KINDS {
        let mut spec = GeneratorSpec::defaults(kind);
        let a = rows(&generate(&spec, 0, 1, 1000, 100));
        assert_eq!(
            a,
            rows(&generate(&spec, 0, 1, 1000, 1000)),
            "{kind:?} is deterministic"
        );
        spec.seed = 1;
        let b = rows(&generate(&spec, 0, 1, 1000, 100));
        if kind == GeneratorKind::Wcount {
            assert_eq!(a, b, "wcount has no randomness");
        } else {
            let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
            assert!(
                same < 100,
                "{kind:?}: {same} of 1000 rows equal across seeds"
            );
        }
    }
}

#[test]
fn readings_look_like_readings_and_disorder_is_bounded() {
    let mut spec = GeneratorSpec::defaults(GeneratorKind::Readings);
    let exact = generate(&spec, 0, 1, 5000, 1000);
    spec.disorder_ms = 250;
    let late = generate(&spec, 0, 1, 5000, 1000);
    let mut sensors = std::collections::HashSet::new();
    let mut moved = 0;
    for r in 0..5000 {
        let base = spec.start_ms + r as i64; // 1000 events/s: one per ms
        assert_eq!(int(&exact, "ts", r), base);
        let ts = int(&late, "ts", r);
        assert!((base - 250..=base).contains(&ts), "row {r}: {ts} vs {base}");
        assert_eq!(late.event_time()[r], ts);
        moved += (ts != base) as usize;
        let temp = late.column(1).float(r).unwrap();
        let humidity = late.column(2).float(r).unwrap();
        assert!((15.0..=35.0).contains(&temp) && (20.0..=90.0).contains(&humidity));
        assert!(
            format!("{temp}").split('.').nth(1).map_or(0, str::len) <= 1,
            "{temp}"
        );
        let sensor = late.column(0).str(r).unwrap();
        let k: u64 = sensor.strip_prefix('s').unwrap().parse().unwrap();
        assert!(k < 100);
        sensors.insert(k);
        // Disorder moves time only: the other fields are the same.
        assert_eq!(exact.column(0).str(r), Some(sensor));
        assert_eq!(exact.column(1).float(r), Some(temp));
    }
    assert_eq!(sensors.len(), 100);
    assert!(moved > 4500, "{moved}");
}

#[test]
fn readings_name_sensors_past_the_name_table() {
    // Above 2^16 keys names are formatted per event instead of looked up.
    for keys in [1 << 16, (1 << 16) + 1, 1 << 20, u64::MAX] {
        let spec = GeneratorSpec {
            keys,
            ..GeneratorSpec::defaults(GeneratorKind::Readings)
        };
        let b = generate(&spec, 0, 1, 2000, 500);
        for r in 0..b.len() {
            let name = b.column(0).str(r).unwrap();
            let k: u64 = name.strip_prefix('s').unwrap().parse().unwrap();
            assert!(k < keys && format!("s{k}") == name, "{name}");
        }
    }
}

/// The three NEXMark sources over the first `epochs * 50` global events,
/// with one event per ms so that `date_time` is the global number.
fn nexmark_world(epochs: u64) -> [Batch; 3] {
    let spec = |e| GeneratorSpec {
        start_ms: 0,
        events_per_second: 1000,
        seed: 9,
        ..GeneratorSpec::defaults(GeneratorKind::Nexmark(e))
    };
    [
        generate(&spec(NexmarkEvents::Person), 0, 1, epochs as usize, 4096),
        generate(
            &spec(NexmarkEvents::Auction),
            0,
            1,
            3 * epochs as usize,
            4096,
        ),
        generate(&spec(NexmarkEvents::Bid), 0, 1, 46 * epochs as usize, 4096),
    ]
}

#[test]
fn nexmark_kinds_interleave_one_three_forty_six() {
    let world = nexmark_world(1000);
    let mut seen = vec![0u8; 50_000];
    for (kind, batch) in world.iter().enumerate() {
        for r in 0..batch.len() {
            let g = int(batch, "date_time", r) as usize;
            let expect = match g as u64 % PROPORTION_DENOMINATOR {
                0 => 0,
                1..=3 => 1,
                _ => 2,
            };
            assert_eq!(kind, expect, "event {g}");
            seen[g] += 1;
        }
    }
    assert!(
        seen.iter().all(|&c| c == 1),
        "every global event made exactly once"
    );
}

#[test]
fn nexmark_ids_are_consistent_across_kinds() {
    let epochs = 2000;
    let [persons, auctions, bids] = nexmark_world(epochs);
    // Ids are dense from 1000 in creation order.
    let person_time: HashMap<i64, i64> = (0..persons.len())
        .map(|r| (int(&persons, "id", r), int(&persons, "date_time", r)))
        .collect();
    let auction_time: HashMap<i64, i64> = (0..auctions.len())
        .map(|r| (int(&auctions, "id", r), int(&auctions, "date_time", r)))
        .collect();
    assert_eq!(person_time.len(), epochs as usize);
    assert!((1000..1000 + epochs as i64).all(|id| person_time.contains_key(&id)));
    assert!((1000..1000 + 3 * epochs as i64).all(|id| auction_time.contains_key(&id)));

    // Beam lets a random reference name up to 10 ids not created yet (its
    // `*_ID_LEAD`): at most that many auctions (3 per 50 events) or persons
    // (1 per 50) ahead.
    let auction_lead_ms = (AUCTION_ID_LEAD / 3 + 1) * 50;
    let person_lead_ms = (PERSON_ID_LEAD + 1) * 50;
    let (mut bids_checked, mut auction_ahead, mut bidder_ahead) = (0, 0, 0);
    for r in 0..bids.len() {
        let t = int(&bids, "date_time", r);
        if t >= (epochs as i64 - 20) * 50 {
            continue; // references may point past the generated range
        }
        bids_checked += 1;
        let a = auction_time[&int(&bids, "auction", r)];
        assert!(
            a <= t + auction_lead_ms,
            "bid at {t} names an auction of {a}"
        );
        auction_ahead += (a > t) as usize;
        let p = person_time[&int(&bids, "bidder", r)];
        assert!(p <= t + person_lead_ms, "bid at {t} names a bidder of {p}");
        bidder_ahead += (p > t) as usize;
    }
    // Hot auctions always exist; only some random ones are ahead.
    assert!(
        auction_ahead * 20 < bids_checked,
        "{auction_ahead} of {bids_checked} bids ahead"
    );
    assert!(
        bidder_ahead * 10 < bids_checked,
        "{bidder_ahead} of {bids_checked} bidders ahead"
    );
    for r in 0..auctions.len() {
        let t = int(&auctions, "date_time", r);
        if t < (epochs as i64 - 20) * 50 {
            let p = person_time[&int(&auctions, "seller", r)];
            assert!(p <= t + person_lead_ms);
        }
        assert!(int(&auctions, "expires", r) > t);
        assert!((10..15).contains(&int(&auctions, "category", r)));
        assert!(int(&auctions, "reserve", r) >= int(&auctions, "initial_bid", r));
    }
}

#[test]
fn nexmark_bids_are_skewed_to_hot_auctions_and_channels() {
    let [_, _, bids] = nexmark_world(2000);
    let n = bids.len();
    let mut per_auction: HashMap<i64, usize> = HashMap::new();
    let mut hot = 0;
    let mut hot_channel = 0;
    for r in 0..n {
        let a = int(&bids, "auction", r);
        *per_auction.entry(a).or_default() += 1;
        hot += ((a - 1000) % HOT_BATCH == 0) as usize;
        let channel = bids.column(3).get(r);
        hot_channel += matches!(
            channel,
            ValueRef::Str("Google" | "Facebook" | "Baidu" | "Apple")
        ) as usize;
        let price = int(&bids, "price", r);
        assert!((100..=100_000_000).contains(&price), "{price}");
    }
    // hotAuctionRatio 2: half the bids go to the hot auction of the batch.
    let share = hot as f64 / n as f64;
    assert!((0.48..0.55).contains(&share), "hot share {share}");
    let top = *per_auction.values().max().unwrap();
    let mean = n as f64 / per_auction.len() as f64;
    assert!(
        top as f64 > 20.0 * mean,
        "top auction {top} bids, mean {mean}"
    );
    let channel_share = hot_channel as f64 / n as f64;
    assert!(
        (0.47..0.53).contains(&channel_share),
        "hot channel share {channel_share}"
    );
}

/// `cargo test --release -- --ignored --nocapture generator_speed`
#[test]
#[ignore]
fn generator_speed() {
    for kind in ALL_KINDS {
        let spec = GeneratorSpec::defaults(kind);
        let mut g = new_generator(&spec);
        let mut out = BatchBuilder::new(schema(kind), 1024, true);
        let n: u64 = if matches!(kind, GeneratorKind::Wcount) {
            100_000_000
        } else {
            20_000_000
        };
        let start = std::time::Instant::now();
        let mut i = 0;
        let mut rows = 0;
        while i < n {
            g.fill(i, 1, 1024, &mut out, 0);
            i += 1024;
            rows += out.take().len();
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{kind:?}: {:.1} M events/s ({rows} rows)",
            rows as f64 / secs / 1e6
        );
    }
}

#[test]
fn hot_key_percent_puts_that_share_on_the_first_key_and_stays_partition_free() {
    const N: usize = 20_000;
    for kind in [GeneratorKind::Readings, GeneratorKind::Wcount] {
        let spec = GeneratorSpec {
            keys: 1000,
            hot_key_percent: 40,
            ..GeneratorSpec::defaults(kind)
        };
        let b = generate(&spec, 0, 1, N, 1024);
        let hot = (0..b.len())
            .filter(|&r| match kind {
                GeneratorKind::Readings => b.column(0).str(r) == Some("s0"),
                _ => b.column(0).int(r) == Some(0),
            })
            .count();
        // 40 % hot, plus the first key's own share of the rest (0.1 %).
        let share = hot as f64 / N as f64;
        assert!((0.38..0.43).contains(&share), "{kind:?}: {share}");
        // Still a pure function of the index: two workers' slices make
        // the same events as one.
        let mut split = rows(&generate(&spec, 0, 2, N / 2, 500));
        split.extend(rows(&generate(&spec, 1, 2, N / 2, 700)));
        split.sort();
        let mut whole = rows(&b);
        whole.sort();
        assert!(split == whole, "{kind:?}");
    }
}

#[test]
fn event_time_keeps_in_step_with_a_rate_schedule() {
    // 10 events/s for the first second, then 100/s: event 10 is at 1 s
    // and each one after it 10 ms later, for readings and NEXMark alike.
    for kind in [
        GeneratorKind::Readings,
        GeneratorKind::Nexmark(NexmarkEvents::Bid),
    ] {
        let spec = GeneratorSpec {
            start_ms: 0,
            events_per_second: 10,
            rate_steps: vec![crate::config::RateStep {
                at: std::time::Duration::from_secs(1),
                events_per_second: 100,
            }],
            ..GeneratorSpec::defaults(kind)
        };
        let b = generate(&spec, 0, 1, 200, 7);
        let field = spec.event_time_field;
        let ts: Vec<i64> = (0..b.len())
            .map(|r| b.column(field).int(r).unwrap())
            .collect();
        if kind == GeneratorKind::Readings {
            assert_eq!(&ts[8..13], &[800, 900, 1000, 1010, 1020], "{kind:?}");
            assert_eq!(ts[199], 1000 + 189 * 10, "{kind:?}");
        } else {
            // A bid's time is that of its global event number.
            assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{kind:?}");
            assert!(ts[199] < 10_000 && ts[199] > 1000, "{kind:?}: {}", ts[199]);
        }
    }
}
