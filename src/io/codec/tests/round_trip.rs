//! Encode → decode gives the same columns.

use super::*;

/// Values that survive both formats exactly. Strings avoid line breaks (CSV
/// records must not span lines here); floats avoid values that serde_json's
/// default (not correctly rounded) parser may land one ulp off.
fn round_trip_batch() -> Batch {
    let s = schema(&[
        ("s", DataType::Str),
        ("f", DataType::Float),
        ("i", DataType::Int),
        ("b", DataType::Bool),
    ]);
    let strings = [
        "",
        "plain",
        "a,b",
        "q\"uote\"",
        " pad ",
        "tab\there",
        "\\back\\",
        "é日本😀",
        "\u{1}\u{1f}\u{7f}",
        "null",
        "\"\"",
    ];
    let floats = [
        0.0, -0.0, 21.5, 2.0, -1.25, 1e-7, 1e21, 1e22, -3.5e-21, 123456.789, 0.1, 5e-324, 1e300,
    ];
    let ints = [0, 1, -1, i64::MIN, i64::MAX, 1 << 53, (1 << 53) + 1, -1000];
    let mut rows = Vec::new();
    for k in 0..40 {
        let v = |n: usize, null_every: usize| k % null_every != n % null_every;
        rows.push(vec![
            if v(0, 7) {
                ValueRef::Str(strings[k % strings.len()])
            } else {
                ValueRef::Null
            },
            if v(1, 5) {
                ValueRef::Float(floats[k % floats.len()])
            } else {
                ValueRef::Null
            },
            if v(2, 6) {
                ValueRef::Int(ints[k % ints.len()])
            } else {
                ValueRef::Null
            },
            if v(3, 4) {
                ValueRef::Bool(k % 3 == 0)
            } else {
                ValueRef::Null
            },
        ]);
    }
    build(&s, &rows)
}

#[test]
fn round_trips_json_and_csv() {
    let batch = round_trip_batch();
    for format in [Format::Json, Format::Csv] {
        let text = encode(format, &batch);
        let lines: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
        let (back, results) = decode_all(format, batch.schema(), None, &lines);
        assert!(results.iter().all(Result::is_ok), "{format:?}: {results:?}");
        assert_same_columns(&batch, &back);
        // and encoding again gives the same text
        assert_eq!(encode(format, &back), text, "{format:?}");
    }
}

#[test]
fn round_trips_arbitrary_floats() {
    // Shortest round-trip text parsed by CSV (std's correctly rounded parser)
    // comes back bit-exact. serde_json, built without its `float_roundtrip`
    // feature, may land a few ulps off for 17-digit or extreme values.
    let s = schema(&[("f", DataType::Float)]);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rows = Vec::new();
    while rows.len() < 20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // every other value a "sensor-like" one: a computed mean, say
        let f = if rows.len() % 2 == 0 {
            f64::from_bits(x)
        } else {
            (x % 100_000) as f64 / 3.0
        };
        if f.is_finite() {
            rows.push(vec![ValueRef::Float(f)]);
        }
    }
    let batch = build(&s, &rows);
    for format in [Format::Json, Format::Csv] {
        let text = encode(format, &batch);
        let lines: Vec<&[u8]> = text.lines().map(str::as_bytes).collect();
        let (back, results) = decode_all(format, &s, None, &lines);
        assert!(results.iter().all(Result::is_ok), "{format:?}");
        let (mut inexact, mut worst) = ([0; 2], 0);
        for r in 0..batch.len() {
            let (a, b) = (batch.column(0).floats()[r], back.column(0).floats()[r]);
            let ulps = a.to_bits().abs_diff(b.to_bits());
            inexact[r % 2] += (ulps != 0) as usize;
            worst = worst.max(ulps);
            match format {
                Format::Csv => assert_eq!(ulps, 0, "{a:e} came back as {b:e}"),
                Format::Json => assert!(ulps <= 4, "{a:e} came back as {b:e}"),
            }
        }
        println!(
            "{format:?}: inexact random bits {}/10000, inexact means {}/10000, worst {worst} ulps",
            inexact[0], inexact[1]
        );
    }
}
