extern crate std;

use std::collections::BTreeMap;
use std::vec::Vec;

use super::*;
use crate::kernel::agg::{AggValue, NumAgg};
use crate::kernel::watermark::WATERMARK_END;
use crate::kernel::window::Window;

/// `count(*), sum(x), min(x), max(x), avg(x)` of a float `x`: the kinds the
/// daemon's planner picks for them.
const AGGS: [NumAgg; 5] = [
    NumAgg::Count,
    NumAgg::SumFloat,
    NumAgg::MinFloat,
    NumAgg::MaxFloat,
    NumAgg::AvgFloat,
];
const WORDS: usize = row_words(&AGGS);

type Win = KeyedTumbling<4, 3, WORDS>;

/// An owned copy of a fired row.
#[derive(Clone, Debug, PartialEq)]
struct Out {
    key: i64,
    window: Window,
    update: bool,
    values: Vec<AggValue>,
}

fn collect(out: &mut Vec<Out>) -> impl FnMut(Fired<'_>) + '_ {
    |f| {
        out.push(Out {
            key: f.key,
            window: f.window,
            update: f.update,
            values: f.values().collect(),
        })
    }
}

fn floats(v: &[AggValue]) -> Vec<f64> {
    v.iter()
        .map(|v| match *v {
            AggValue::Int(i) => i as f64,
            AggValue::Float(f) => f,
            AggValue::Null => f64::NAN,
        })
        .collect()
}

#[test]
fn row_words_matches_the_layout() {
    assert_eq!(WORDS, 7);
    let w = Win::new(1000, 0, &AGGS).unwrap();
    assert_eq!(w.layout().words(), WORDS);
    assert_eq!(row_words(&[]), 0);
}

#[test]
fn a_window_fires_when_the_watermark_reaches_its_last_millisecond() {
    let mut w = Win::new(1000, 0, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    w.handle_record(7, 1_500, 2.5.into(), &mut emit).unwrap();
    w.handle_record(7, 1_999, 4.0.into(), &mut emit).unwrap();
    w.handle_record(8, 1_000, (-1.0).into(), &mut emit).unwrap();
    w.handle_watermark(1_998, &mut emit);
    drop(emit);
    assert!(out.is_empty(), "[1000, 2000) must not fire at 1998");
    let mut emit = collect(&mut out);
    w.handle_watermark(1_999, &mut emit);
    drop(emit);
    let window = Window {
        start: 1_000,
        end: 2_000,
    };
    assert_eq!(
        out,
        [
            Out {
                key: 7,
                window,
                update: false,
                values: std::vec![
                    AggValue::Int(2),
                    AggValue::Float(6.5),
                    AggValue::Float(2.5),
                    AggValue::Float(4.0),
                    AggValue::Float(3.25),
                ],
            },
            Out {
                key: 8,
                window,
                update: false,
                values: std::vec![
                    AggValue::Int(1),
                    AggValue::Float(-1.0),
                    AggValue::Float(-1.0),
                    AggValue::Float(-1.0),
                    AggValue::Float(-1.0),
                ],
            },
        ]
    );
    assert_eq!(w.open_windows(), 0, "no lateness: a fired window is freed");
}

#[test]
fn windows_fire_in_order_of_their_start() {
    let mut w = Win::new(10, 0, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    for ts in [25, 5, 15] {
        w.handle_record(1, ts, 1.0.into(), &mut emit).unwrap();
    }
    w.handle_watermark(WATERMARK_END, &mut emit);
    drop(emit);
    let starts: Vec<i64> = out.iter().map(|o| o.window.start).collect();
    assert_eq!(starts, [0, 10, 20]);
}

#[test]
fn records_behind_the_watermark_are_late_and_counted() {
    let mut w = Win::new(1000, 0, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    w.handle_record(1, 500, 1.0.into(), &mut emit).unwrap();
    w.handle_watermark(999, &mut emit);
    assert_eq!(
        w.handle_record(1, 999, 1.0.into(), &mut emit),
        Ok(Accepted::Late)
    );
    assert_eq!(
        w.handle_record(1, 1_000, 1.0.into(), &mut emit),
        Ok(Accepted::Folded)
    );
    assert_eq!(w.late(), 1);
    w.handle_watermark(500, &mut emit);
    assert_eq!(w.watermark(), 999, "a watermark never goes back");
}

#[test]
fn negative_times_fall_in_epoch_aligned_windows() {
    let mut w = Win::new(1000, 0, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    w.handle_record(1, -1, 1.0.into(), &mut emit).unwrap();
    w.handle_record(1, -1_000, 3.0.into(), &mut emit).unwrap();
    w.handle_watermark(-1, &mut emit);
    drop(emit);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].window,
        Window {
            start: -1_000,
            end: 0
        }
    );
    assert_eq!(out[0].values[1], AggValue::Float(4.0));
}

#[test]
fn a_full_window_is_an_error_that_changes_nothing() {
    let mut w = Win::new(1000, 0, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    for key in 0..4 {
        w.handle_record(key, 10, 1.0.into(), &mut emit).unwrap();
    }
    assert_eq!(
        w.handle_record(99, 20, 1.0.into(), &mut emit),
        Err(FixedError::KeysFull {
            window_start: 0,
            key: 99
        })
    );
    // Known keys still fold, and other windows still take new keys.
    w.handle_record(3, 30, 1.0.into(), &mut emit).unwrap();
    w.handle_record(99, 1_030, 1.0.into(), &mut emit).unwrap();
    assert_eq!(w.keys_in(0), Some(4));
    w.handle_watermark(WATERMARK_END, &mut emit);
    drop(emit);
    let counts: Vec<(i64, i64, AggValue)> = out
        .iter()
        .map(|o| (o.window.start, o.key, o.values[0]))
        .collect();
    assert_eq!(
        counts,
        [
            (0, 0, AggValue::Int(1)),
            (0, 1, AggValue::Int(1)),
            (0, 2, AggValue::Int(1)),
            (0, 3, AggValue::Int(2)),
            (1_000, 99, AggValue::Int(1)),
        ]
    );
}

#[test]
fn running_out_of_window_slots_is_an_error_that_changes_nothing() {
    let mut w = Win::new(10, 0, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    for ts in [0, 10, 20] {
        w.handle_record(1, ts, 1.0.into(), &mut emit).unwrap();
    }
    assert_eq!(
        w.handle_record(1, 30, 1.0.into(), &mut emit),
        Err(FixedError::WindowsFull { window_start: 30 })
    );
    assert_eq!(w.open_windows(), 3);
    // Once the oldest fires its slot is free again.
    w.handle_watermark(9, &mut emit);
    assert_eq!(
        w.handle_record(1, 30, 1.0.into(), &mut emit),
        Ok(Accepted::Folded)
    );
    w.handle_watermark(WATERMARK_END, &mut emit);
    drop(emit);
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(|o| o.values[0] == AggValue::Int(1)));
}

#[test]
fn allowed_lateness_refires_updated_rows_then_expires() {
    let mut w = Win::new(1000, 500, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    w.handle_record(1, 100, 1.0.into(), &mut emit).unwrap();
    w.handle_record(2, 200, 5.0.into(), &mut emit).unwrap();
    w.handle_watermark(999, &mut emit);
    assert_eq!(w.open_windows(), 1, "kept for its allowed lateness");
    // Within lateness: key 1's row is emitted again, updated; key 2's not.
    assert_eq!(
        w.handle_record(1, 300, 3.0.into(), &mut emit),
        Ok(Accepted::Folded)
    );
    w.handle_watermark(1_498, &mut emit);
    assert_eq!(
        w.handle_record(1, 400, 2.0.into(), &mut emit),
        Ok(Accepted::Folded)
    );
    w.handle_watermark(1_499, &mut emit);
    assert_eq!(w.open_windows(), 0, "expired at end - 1 + lateness");
    assert_eq!(
        w.handle_record(1, 500, 9.0.into(), &mut emit),
        Ok(Accepted::Late)
    );
    drop(emit);
    let rows: Vec<(i64, bool, Vec<f64>)> = out
        .iter()
        .map(|o| (o.key, o.update, floats(&o.values)))
        .collect();
    assert_eq!(
        rows,
        [
            (1, false, std::vec![1.0, 1.0, 1.0, 1.0, 1.0]),
            (2, false, std::vec![1.0, 5.0, 5.0, 5.0, 5.0]),
            (1, true, std::vec![2.0, 4.0, 1.0, 3.0, 2.0]),
            (1, true, std::vec![3.0, 6.0, 1.0, 3.0, 2.0]),
        ]
    );
}

#[test]
fn value_types_follow_the_aggregates() {
    const INTS: [NumAgg; 4] = [
        NumAgg::Count,
        NumAgg::SumInt,
        NumAgg::MaxInt,
        NumAgg::AvgInt,
    ];
    let mut w = KeyedTumbling::<2, 2, { row_words(&INTS) }>::new(10, 0, &INTS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    assert_eq!(
        w.handle_record(1, 0, 1.5.into(), &mut emit),
        Err(FixedError::FloatIntoIntAggregate)
    );
    w.handle_record(1, 0, 3i64.into(), &mut emit).unwrap();
    w.handle_record(1, 1, (-8i64).into(), &mut emit).unwrap();
    w.handle_watermark(WATERMARK_END, &mut emit);
    drop(emit);
    assert_eq!(
        out[0].values,
        [
            AggValue::Int(2),
            AggValue::Int(-5),
            AggValue::Int(3),
            AggValue::Float(-2.5)
        ]
    );
    // Integers fold into float aggregates as floats.
    let mut w = Win::new(10, 0, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    w.handle_record(1, 0, 2i64.into(), &mut emit).unwrap();
    w.handle_watermark(WATERMARK_END, &mut emit);
    drop(emit);
    assert_eq!(out[0].values[1], AggValue::Float(2.0));
}

#[test]
fn configurations_that_cannot_work_are_refused() {
    assert_eq!(
        KeyedTumbling::<2, 2, 6>::new(10, 0, &AGGS).err(),
        Some(FixedError::RowTooSmall { needed: 7, have: 6 })
    );
    assert_eq!(Win::new(0, 0, &AGGS).err(), Some(FixedError::BadDuration));
    assert_eq!(Win::new(10, -1, &AGGS).err(), Some(FixedError::BadDuration));
    assert!(matches!(
        KeyedTumbling::<2, 2, 200>::new(10, 0, &[NumAgg::Count; 65]),
        Err(FixedError::TooManyAggregates { .. })
    ));
    let keep_all = |_: &Record| true;
    assert!(matches!(
        FilterWindow::<Record, _, 2, 2, WORDS>::new(keep_all, 10, -5, 0, &AGGS),
        Err(FixedError::BadDuration)
    ));
}

#[test]
fn frames_round_trip_within_their_capacity() {
    let mut w = Win::new(1000, 0, &AGGS).unwrap();
    let mut frames = Vec::new();
    let mut buf = [0u8; frame_capacity(5)];
    let mut emit = |f: Fired<'_>| {
        let frame = Frame::<5>::Row(WindowRow::from_fired(&f).unwrap());
        let bytes = frame.encode(&mut buf).unwrap();
        frames.push((frame.clone(), bytes.to_vec()));
    };
    w.handle_record(i64::MIN / 2, -1_000_000_000_000, f64::MAX.into(), &mut emit)
        .unwrap();
    w.handle_record(3, i64::MAX / 2, f64::MIN_POSITIVE.into(), &mut emit)
        .unwrap();
    w.handle_watermark(WATERMARK_END, &mut emit);
    let end = Frame::<5>::End(PipelineCounts {
        records_in: u64::MAX,
        filtered_out: u64::MAX,
        late: u64::MAX,
        refused: u64::MAX,
        rows_out: u64::MAX,
    });
    let bytes = end.encode(&mut buf).unwrap().to_vec();
    frames.push((end, bytes));
    assert_eq!(frames.len(), 3);
    for (frame, bytes) in &frames {
        assert!(bytes.len() <= frame_capacity(5));
        assert_eq!(&Frame::<5>::decode(bytes).unwrap(), frame);
    }
    // A row of a window with more aggregates than the frame holds is refused.
    let mut w = Win::new(1000, 0, &AGGS).unwrap();
    let mut result = None;
    let mut emit = |f: Fired<'_>| result = Some(WindowRow::<4>::from_fired(&f));
    w.handle_record(1, 0, 1.0.into(), &mut emit).unwrap();
    w.handle_watermark(WATERMARK_END, &mut emit);
    assert!(matches!(
        result,
        Some(Err(FixedError::TooManyAggregates {
            aggregates: 5,
            max: 4
        }))
    ));
}

fn warm(r: &Record) -> bool {
    matches!(r.value, Num::Float(t) if t > 20.0)
}

#[test]
fn the_pipeline_filters_and_every_record_moves_the_watermark() {
    let mut p = FilterWindow::<Record, _, 4, 3, WORDS>::new(warm, 1000, 100, 0, &AGGS).unwrap();
    let mut rows = 0;
    let mut emit = |_: Fired<'_>| rows += 1;
    let rec = |key, ts, t: f64| Record {
        key,
        ts,
        value: t.into(),
    };
    assert_eq!(
        p.handle_record(&rec(1, 500, 25.0), &mut emit),
        Ok(Outcome::Folded)
    );
    assert_eq!(
        p.handle_record(&rec(1, 950, 20.0), &mut emit),
        Ok(Outcome::Filtered)
    );
    // Within the bound: not late even though a newer time was seen.
    assert_eq!(
        p.handle_record(&rec(2, 900, 21.0), &mut emit),
        Ok(Outcome::Folded)
    );
    // A filtered record's time (1100) moves the watermark to 999: fires.
    assert_eq!(
        p.handle_record(&rec(1, 1_100, 3.0), &mut emit),
        Ok(Outcome::Filtered)
    );
    assert_eq!(p.counts().rows_out, 2);
    assert_eq!(
        p.handle_record(&rec(1, 998, 30.0), &mut emit),
        Ok(Outcome::Late)
    );
    p.handle_end(&mut emit);
    assert_eq!(rows, 2);
    assert_eq!(
        p.counts(),
        PipelineCounts {
            records_in: 5,
            filtered_out: 2,
            late: 1,
            refused: 0,
            rows_out: 2,
        }
    );
}

#[test]
fn refused_records_are_counted_and_still_move_the_watermark() {
    let mut p = FilterWindow::<Record, _, 2, 2, WORDS>::new(warm, 1000, 0, 0, &AGGS).unwrap();
    let mut out = Vec::new();
    let mut emit = collect(&mut out);
    for key in 0..2 {
        p.handle_record(
            &Record {
                key,
                ts: 10,
                value: 21.0.into(),
            },
            &mut emit,
        )
        .unwrap();
    }
    let third = Record {
        key: 2,
        ts: 1_000,
        value: 21.0.into(),
    };
    // [1000, 2000) needs a second slot: fine. Its key set is independent.
    p.handle_record(&third, &mut emit).unwrap();
    let overflow = Record {
        key: 9,
        ts: 1_500,
        value: 22.0.into(),
    };
    let keys_full = Record { key: 8, ..overflow };
    p.handle_record(&keys_full, &mut emit).unwrap();
    assert_eq!(
        p.handle_record(&overflow, &mut emit),
        Err(FixedError::KeysFull {
            window_start: 1_000,
            key: 9
        })
    );
    assert_eq!(p.counts().refused, 1);
    assert_eq!(p.window().watermark(), 1_499);
    drop(emit);
    assert_eq!(out.len(), 2, "[0, 1000) fired for its two keys");
}

/// A tiny deterministic generator for the randomized test.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

#[test]
fn matches_a_plain_reference_on_disordered_streams() {
    const SIZE: i64 = 100;
    const DISORDER: i64 = 250;
    for seed in 0..20 {
        let mut rng = Lcg(seed);
        let mut recs = Vec::new();
        let mut base = -5_000 + (rng.next() % 1000) as i64;
        for _ in 0..3_000 {
            base += (rng.next() % 7) as i64;
            let ts = base - (rng.next() % (DISORDER as u64 + 1)) as i64;
            let key = (rng.next() % 16) as i64;
            let t = (rng.next() % 600) as f64 / 10.0 - 10.0;
            recs.push(Record {
                key,
                ts,
                value: t.into(),
            });
        }
        // (DISORDER / SIZE) + 2 windows are always enough.
        let mut p =
            FilterWindow::<Record, _, 16, 5, WORDS>::new(warm, SIZE, DISORDER, 0, &AGGS).unwrap();
        let mut got = BTreeMap::new();
        let mut emit = |f: Fired<'_>| {
            let prev = got.insert((f.window.start, f.key), floats_of(&f));
            assert!(prev.is_none(), "a window fired twice");
        };
        for r in &recs {
            assert_ne!(p.handle_record(r, &mut emit), Ok(Outcome::Late));
        }
        p.handle_end(&mut emit);

        let mut want: BTreeMap<(i64, i64), (u64, f64, f64, f64)> = BTreeMap::new();
        for r in recs.iter().filter(|r| warm(r)) {
            let Num::Float(t) = r.value else {
                unreachable!()
            };
            let w = want
                .entry((r.ts - r.ts.rem_euclid(SIZE), r.key))
                .or_insert((0, 0.0, f64::INFINITY, f64::NEG_INFINITY));
            w.0 += 1;
            w.1 += t;
            w.2 = w.2.min(t);
            w.3 = w.3.max(t);
        }
        let want: BTreeMap<(i64, i64), Vec<u64>> = want
            .into_iter()
            .map(|(k, (n, sum, lo, hi))| {
                let v = [n as f64, sum, lo, hi, sum / n as f64];
                (k, v.iter().map(|f| f.to_bits()).collect())
            })
            .collect();
        assert_eq!(got, want, "seed {seed}");
        assert_eq!(p.counts().rows_out as usize, want.len());
    }
}

fn floats_of(f: &Fired<'_>) -> Vec<u64> {
    f.values()
        .map(|v| match v {
            AggValue::Int(i) => (i as f64).to_bits(),
            AggValue::Float(x) => x.to_bits(),
            AggValue::Null => panic!("no aggregate here is NULL"),
        })
        .collect()
}
