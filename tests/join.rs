//! Windowed stream–stream joins through the real binary equal a nested-loop
//! reference, whatever the number of workers and bins.

mod common;

use common::*;
use serde_json::{Value, json};

const BASE: i64 = 1_767_225_600_000;

struct Inputs {
    auctions: Vec<(i64, i64, i64)>, // id, seller, ts
    bids: Vec<(i64, i64, i64)>,     // auction, price, ts
}

fn inputs(seed: u64) -> Inputs {
    let mut rng = Rng::new(seed);
    let auctions = (0..1500)
        .map(|i| {
            (
                i as i64,
                rng.below(200) as i64,
                BASE + i as i64 * 20 - rng.below(500) as i64,
            )
        })
        .collect();
    let bids = (0..15_000)
        .map(|i| {
            (
                rng.below(1500) as i64,
                rng.below(10_000) as i64,
                BASE + i as i64 * 2 - rng.below(500) as i64,
            )
        })
        .collect();
    Inputs { auctions, bids }
}

fn config(s: &Scratch, join: &str, workers: usize, bins: usize, out: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[node]
workers = {workers}
bins = {bins}
data_dir = "{data}"
[sources.auctions]
type = "file"
path = "{a}"
schema = {{ id = "int", seller = "int", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "500ms"
[sources.bids]
type = "file"
path = "{b}"
schema = {{ auction = "int", price = "int", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "500ms"
[transforms.j]
type = "join"
inputs = ["auctions", "bids"]
left_on = ["id"]
right_on = ["auction"]
{join}
[sinks.out]
type = "file"
inputs = ["j"]
path = "{out}"
"#,
        data = s.path("data").display(),
        a = s.path("auctions.jsonl").display(),
        b = s.path("bids.jsonl").display(),
        out = s.path(out).display()
    );
    s.write(&format!("{out}.toml"), &text)
}

fn run_join(join: &str, expected: impl Fn(&Inputs) -> Vec<Value>) {
    let s = Scratch::new();
    let inp = inputs(11);
    let a: String = inp
        .auctions
        .iter()
        .map(|(id, seller, ts)| format!("{}\n", json!({"id": id, "seller": seller, "ts": ts})))
        .collect();
    let b: String = inp
        .bids
        .iter()
        .map(|(auction, price, ts)| {
            format!(
                "{}\n",
                json!({"auction": auction, "price": price, "ts": ts})
            )
        })
        .collect();
    s.write("auctions.jsonl", &a);
    s.write("bids.jsonl", &b);
    let want = multiset(&expected(&inp));
    assert!(
        want.len() > 500,
        "the reference should have many pairs, has {}",
        want.len()
    );
    for (workers, bins) in [(1, 1), (2, 16), (4, 256)] {
        let out = format!("out-{workers}.jsonl");
        run_ok(&config(&s, join, workers, bins, &out));
        let got = multiset(&json_lines(&s.read(&out)));
        assert_eq!(
            got.len(),
            want.len(),
            "{join} with {workers} workers: row count"
        );
        assert_eq!(got, want, "{join} with {workers} workers");
    }
}

#[test]
fn tumbling_window_join_matches_reference() {
    run_join(r#"window = { kind = "tumbling", size = "2s" }"#, |inp| {
        let mut out = Vec::new();
        for &(id, seller, at) in &inp.auctions {
            for &(auction, price, bt) in &inp.bids {
                let (wa, wb) = (at.div_euclid(2000), bt.div_euclid(2000));
                if auction == id && wa == wb {
                    out.push(json!({"id": id, "seller": seller, "auctions_ts": at, "auction": auction, "price": price, "bids_ts": bt, "window_start": wa * 2000, "window_end": wa * 2000 + 2000}));
                }
            }
        }
        out
    });
}

#[test]
fn interval_join_matches_reference() {
    run_join(r#"within = "1s""#, |inp| {
        let mut out = Vec::new();
        for &(id, seller, at) in &inp.auctions {
            for &(auction, price, bt) in &inp.bids {
                if auction == id && (at - bt).abs() <= 1000 {
                    out.push(json!({"id": id, "seller": seller, "auctions_ts": at, "auction": auction, "price": price, "bids_ts": bt}));
                }
            }
        }
        out
    });
}
