//! One `wcount` run through the real engine, small enough for
//! `valgrind --tool=callgrind` (instruction counts are repeatable on a
//! shared machine, wall-clock figures are not):
//! `cargo build --profile bench --example wcount_once`, then
//! `valgrind --tool=callgrind target/release/examples/wcount_once 1000000 1`.

fn main() {
    let mut args = std::env::args().skip(1);
    let events: u64 = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("events"));
    let workers: usize = args.next().map_or(1, |a| a.parse().expect("workers"));
    let r = eddy::wcount(events, workers).expect("wcount runs");
    r.verify().expect("wcount totals are exact");
    println!(
        "{events} events, {workers} worker(s): {:.1} M events/s",
        r.events_per_s / 1e6
    );
}
