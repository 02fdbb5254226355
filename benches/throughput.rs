//! eddy's throughput and latency benchmarks, run with `cargo bench`.
//!
//! Every figure is measured side by side in one run (the machine is shared
//! and noisy, so ratios from one run say more than absolute numbers from
//! different runs): eddy's engine against the same `wcount` written
//! directly on timely dataflow, NEXMark Q0/Q1/Q2/Q5 on the real engine, and
//! end-to-end latency at half the measured maximum rate.
//!
//! `cargo bench --bench throughput -- [--quick] [--only wcount|nexmark|latency]`

mod timely_wcount;

use std::time::Instant;

const WCOUNT_EVENTS: u64 = 10_000_000;
const NEXMARK_EVENTS: u64 = 10_000_000;

struct Args {
    quick: bool,
    only: Option<String>,
}

fn args() -> Args {
    let argv: Vec<String> = std::env::args().collect();
    let only = argv
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| argv.get(i + 1).cloned());
    Args {
        quick: argv.iter().any(|a| a == "--quick"),
        only,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = args();
    let runs = if args.quick { 3 } else { 5 };
    let scale = if args.quick { 10 } else { 1 };
    let want = |what: &str| args.only.as_deref().is_none_or(|o| o == what);
    println!("# eddy benchmarks ({} run(s) each, median)\n", runs);
    if want("wcount") {
        wcount_vs_timely(runs, WCOUNT_EVENTS / scale);
    }
    if want("nexmark") {
        nexmark(runs, NEXMARK_EVENTS / scale);
    }
    if want("latency") {
        latency(NEXMARK_EVENTS / scale);
    }
}

/// `wcount` on eddy's engine and on timely, alternating so that both see
/// the same machine load; reports the ratio of the medians.
fn wcount_vs_timely(runs: usize, events: u64) {
    println!("## wcount ({events} events, 10k keys, 1 s tumbling windows)\n");
    println!("| workers | eddy M events/s | timely M events/s | eddy / timely |");
    println!("|---|---|---|---|");
    for workers in [1, 2] {
        let (mut eddy, mut timely) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let e = eddy::wcount(events, workers).expect("eddy wcount runs");
            e.verify().expect("eddy wcount totals are exact");
            eddy.push(e.events_per_s / 1e6);
            let t = timely_wcount::run(events, workers);
            assert_eq!(
                (t.rows, t.count_total, t.sum_total),
                eddy::wcount_expected(events),
                "timely totals are exact"
            );
            timely.push(events as f64 / t.seconds / 1e6);
        }
        let (e, t) = (median(eddy), median(timely));
        println!("| {workers} | {e:.1} | {t:.1} | {:.2} |", e / t);
    }
    println!();
}

/// The NEXMark queries as eddy pipelines over the bid stream.
fn queries() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Q0 pass-through", ""),
        (
            "Q1 currency map",
            "[transforms.q]\ntype = \"map\"\ninputs = [\"bids\"]\nfields = { price = \"0.908 * price\" }\n",
        ),
        (
            "Q2 selection",
            "[transforms.f]\ntype = \"filter\"\ninputs = [\"bids\"]\ncondition = \"auction % 123 = 0\"\n[transforms.q]\ntype = \"select\"\ninputs = [\"f\"]\nfields = [\"auction\", \"price\"]\n",
        ),
        (
            "Q5 hot items (hopping 10 s / 2 s count by auction)",
            "[transforms.q]\ntype = \"window\"\ninputs = [\"bids\"]\nkey = [\"auction\"]\nwindow = { kind = \"hopping\", size = \"10s\", slide = \"2s\" }\naggregates = { num = \"count(*)\" }\n",
        ),
    ]
}

fn nexmark_pipeline(query: &str, events: u64, rate: Option<u64>) -> String {
    let rate = rate.map(|r| format!("rate = {r}\n")).unwrap_or_default();
    let into = if query.is_empty() { "bids" } else { "q" };
    format!(
        "[node]\nworkers = 1\n[checkpoint]\nenabled = false\n[sources.bids]\ntype = \"generator\"\nschema = \"nexmark\"\nevents = \"bid\"\ncount = {events}\n{rate}{query}[sinks.out]\ntype = \"blackhole\"\ninputs = [\"{into}\"]\n"
    )
}

fn nexmark(runs: usize, events: u64) {
    println!("## NEXMark on the bid stream ({events} bids, 1 worker)\n");
    println!("| query | M events/s |");
    println!("|---|---|");
    for (name, query) in queries() {
        let toml = nexmark_pipeline(query, events, None);
        let rates: Vec<f64> = (0..runs)
            .map(|_| {
                let r = eddy::run_pipeline_str(&toml).expect("query runs");
                assert_eq!(r.component("bids").unwrap().records_out, events);
                events as f64 / r.seconds / 1e6
            })
            .collect();
        println!("| {name} | {:.1} |", median(rates));
    }
    println!();
}

/// End-to-end latency (ingestion to sink) of Q1 at half its maximum rate.
fn latency(events: u64) {
    let query = queries()[1].1;
    let max = {
        let r = eddy::run_pipeline_str(&nexmark_pipeline(query, events, None)).expect("runs");
        events as f64 / r.seconds
    };
    let rate = (max / 2.0) as u64;
    let seconds = 5;
    let started = Instant::now();
    let r =
        eddy::run_pipeline_str(&nexmark_pipeline(query, rate * seconds, Some(rate))).expect("runs");
    let p = r
        .component("out")
        .unwrap()
        .latency_us
        .expect("the sink measured latency");
    println!("## Latency of Q1 at half load ({rate} events/s for {seconds} s, 1 worker)\n");
    println!("| p50 ms | p99 ms | p99.9 ms | max ms |");
    println!("|---|---|---|---|");
    let ms = |us: u64| us as f64 / 1000.0;
    println!(
        "| {:.3} | {:.3} | {:.3} | {:.3} |",
        ms(p.p50),
        ms(p.p99),
        ms(p.p999),
        ms(p.max)
    );
    println!(
        "\n(maximum measured first: {:.1} M events/s; paced run took {:.1} s)",
        max / 1e6,
        started.elapsed().as_secs_f64()
    );
}
