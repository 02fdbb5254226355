//! A rough timing of compiled predicates, run on demand:
//! `cargo test --release --lib plan::expr::tests::bench -- --ignored --nocapture`

use std::hint::black_box;
use std::time::Instant;

use super::super::BoolFn;
use super::*;

fn sensors(n: usize) -> (Schema, Batch) {
    let schema = Schema::new(vec![
        Field::new("sensor", DataType::Str),
        Field::new("temp", DataType::Float),
        Field::new("humidity", DataType::Float),
    ]);
    let names = ["a17", "b3", "alpha", "c9", "a", "zeta"];
    let data: Vec<Vec<ValueRef<'_>>> = (0..n)
        .map(|i| {
            vec![
                ValueRef::Str(names[i % names.len()]),
                ValueRef::Float(20.0 + (i % 23) as f64),
                ValueRef::Float(60.0 + (i % 37) as f64),
            ]
        })
        .collect();
    let batch = rows(schema.clone(), &data);
    (schema, batch)
}

/// Nanoseconds per evaluation of `text`, best of a few rounds.
fn ns_per_eval(text: &str) -> f64 {
    let (schema, _) = sensors(0);
    let Compiled::Bool(f) = compile(text, &schema).expect("compiles") else {
        panic!("not a predicate")
    };
    ns_per_call(&f)
}

fn ns_per_call(f: &BoolFn) -> f64 {
    let (_, batch) = sensors(1024);
    let rounds = 500;
    let mut best = f64::MAX;
    for _ in 0..15 {
        let start = Instant::now();
        let mut hits = 0usize;
        for _ in 0..rounds {
            for row in 0..batch.len() {
                if let Ok(Some(true)) = f(black_box(&batch), row) {
                    hits += 1;
                }
            }
        }
        black_box(hits);
        let ns = start.elapsed().as_nanos() as f64 / (rounds * batch.len()) as f64;
        best = best.min(ns);
    }
    best
}

#[test]
#[ignore = "timing; run with --release --ignored --nocapture"]
fn predicate_timing() {
    for text in [
        "temp > 30 AND sensor LIKE 'a%' AND humidity < 80",
        "temp > 30",
        "sensor LIKE 'a%'",
        "sensor LIKE '%a_' AND temp BETWEEN 25 AND 35",
        "sensor LIKE '%a_'",
        "temp BETWEEN 25 AND 35",
        "sensor ILIKE 'A%'",
        "sensor IN ('a', 'b3', 'zeta') OR humidity * 2 > 150",
    ] {
        println!("{:>7.2} ns/eval  {text}", ns_per_eval(text));
    }
    // The same 3-term predicate written by hand as one closure: the floor
    // for a boxed closure over these columns.
    let by_hand: BoolFn = Box::new(|b, r| {
        let temp = b.column(1).float(r);
        let sensor = b.column(0).str(r);
        let humidity = b.column(2).float(r);
        Ok(
            match (
                temp.map(|t| t > 30.0),
                sensor.map(|s| s.starts_with('a')),
                humidity.map(|h| h < 80.0),
            ) {
                (Some(false), _, _) | (_, Some(false), _) | (_, _, Some(false)) => Some(false),
                (Some(true), Some(true), Some(true)) => Some(true),
                _ => None,
            },
        )
    });
    println!(
        "{:>7.2} ns/eval  (hand-written closure for the first)",
        ns_per_call(&by_hand)
    );
}
