//! Throughput benchmarks (placeholder: runs the timely wcount baseline).

mod timely_wcount;

/// `sum(i mod 100)` for `i < n`.
fn expected_sum(n: u64) -> u64 {
    let full = n / 100 * (99 * 100 / 2);
    let rest = n % 100;
    full + rest * rest.saturating_sub(1) / 2
}

/// Runs per configuration; the machine is shared, so the median and the
/// best run say more than one sample.
const RUNS: usize = 5;

fn main() {
    let n: u64 = 10_000_000;
    for workers in [1, 2] {
        let mut rates = Vec::new();
        for _ in 0..RUNS {
            let r = timely_wcount::run(n, workers);
            assert_eq!(r.count_total, n, "count_total");
            assert_eq!(r.sum_total, expected_sum(n), "sum_total");
            assert_eq!(r.rows, 1_000_000, "rows");
            rates.push(n as f64 / r.seconds / 1e6);
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "timely wcount, {workers} worker(s), N = {n}: median {:.1} M events/s, best {:.1} (rows 1000000, count_total {n}, sum_total {})",
            rates[RUNS / 2],
            rates[RUNS - 1],
            expected_sum(n)
        );
    }
}
