//! Durable state, measured side by side in one run:
//!
//! 1. the keyed window count (`wcount`: 10k keys, 1 s tumbling windows) with
//!    state in memory only, with state in sled and a cache that fits, and
//!    with a cache far smaller than the state (bins out of memory take
//!    partial aggregates, merged when windows fire and at checkpoints),
//!    alternating so that all three see the same machine load;
//! 2. the store's checkpoint path at 10k, 1M and 10M keys: the first full
//!    checkpoint, then 10 % of the keys dirty (spread over every bin, and
//!    clustered in 10 % of the bins), and recovery of all of it.
//!
//! `cargo bench --bench state -- [--quick] [--only window|checkpoint]`

use std::time::Instant;

const EVENTS: u64 = 20_000_000;
/// Enough that one open window's state (about 5 MiB) is well above the
/// small cache below.
const KEYS: u64 = 100_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pipeline(events: u64, state: Option<(&std::path::Path, &str)>) -> String {
    let state = match state {
        None => "[checkpoint]\nenabled = false\n".to_string(),
        Some((dir, cache)) => format!(
            "[node]\ndata_dir = \"{}\"\n[state]\ncache_bytes = \"{cache}\"\n[checkpoint]\ninterval = \"1s\"\n",
            dir.display()
        ),
    };
    format!(
        "{state}[sources.g]\ntype = \"generator\"\nschema = \"wcount\"\ncount = {events}\nkeys = {KEYS}\n\
         [transforms.w]\ntype = \"window\"\ninputs = [\"g\"]\nkey = [\"key\"]\n\
         window = {{ kind = \"tumbling\", size = \"1s\" }}\n\
         aggregates = {{ n = \"count(*)\", total = \"sum(value)\" }}\n\
         [sinks.out]\ntype = \"blackhole\"\ninputs = [\"w\"]\n"
    )
}

fn window(runs: usize, events: u64) {
    println!("## Keyed window count ({KEYS} keys, 1 s tumbling)\n");
    // Keys are uniform, so every batch touches nearly every bin: with a
    // cache below the state, bins leave memory as runs of partial
    // aggregates on nearly every batch (the worst case for spilling).
    let regimes: [(&str, Option<&str>, u64); 3] = [
        ("state in memory, no checkpoints", None, events),
        (
            "sled, cache fits (256 MiB), checkpoint every 1 s",
            Some("256MiB"),
            events,
        ),
        (
            "sled, cache 1 MiB (a fifth of the state), checkpoint every 1 s",
            Some("1MiB"),
            events,
        ),
    ];
    let mut rates = vec![Vec::new(); regimes.len()];
    let mut moved = vec![(0u64, 0u64); regimes.len()];
    for _ in 0..runs {
        for (i, &(_, cache, events)) in regimes.iter().enumerate() {
            let dir = tempfile::tempdir().expect("a temp dir");
            let toml = pipeline(events, cache.map(|c| (dir.path(), c)));
            let r = eddy::run_pipeline_str(&toml).expect("the pipeline runs");
            let w = r.component("w").expect("the window reports");
            assert_eq!(w.records_in, events, "every event reached the window");
            moved[i] = (w.state_evictions, w.state_loads);
            assert_eq!(
                cache == Some("1MiB"),
                w.state_evictions > 0,
                "only the small cache evicts"
            );
            rates[i].push(events as f64 / r.seconds / 1e6);
        }
    }
    let base = median(rates[0].clone());
    println!("| state | events | M events/s | vs in memory | bins evicted / loaded |");
    println!("|---|---|---|---|---|");
    for (i, (name, _, events)) in regimes.iter().enumerate() {
        let m = median(rates[i].clone());
        println!(
            "| {name} | {events} | {m:.2} | {:.3} | {} / {} |",
            m / base,
            moved[i].0,
            moved[i].1
        );
    }
    println!();
}

fn checkpoint(quick: bool) {
    let sizes: &[u64] = if quick {
        &[10_000, 1_000_000]
    } else {
        &[10_000, 1_000_000, 10_000_000]
    };
    println!("## Checkpoints and recovery (256 bins; window entries of 9 + 12 bytes)\n");
    println!(
        "| keys | full: ms / MB | 10 % dirty, spread: ms / bins / MB | 10 % dirty, clustered: ms / bins / MB | recovery ms | on disk MB |"
    );
    println!("|---|---|---|---|---|---|");
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    for &keys in sizes {
        let dir = tempfile::tempdir().expect("a temp dir");
        let started = Instant::now();
        let f = eddy::checkpoint_figures(dir.path(), keys, 256).expect("the scenarios run");
        println!(
            "| {keys} | {:.0} / {:.1} | {:.0} / {} / {:.1} | {:.0} / {} / {:.1} | {:.0} | {:.1} |",
            f.full.ms,
            mb(f.full.bytes),
            f.dirty_spread.ms,
            f.dirty_spread.bins,
            mb(f.dirty_spread.bytes),
            f.dirty_clustered.ms,
            f.dirty_clustered.bins,
            mb(f.dirty_clustered.bytes),
            f.recovery_ms,
            mb(f.disk_bytes),
        );
        eprintln!("({keys} keys: {:.1} s)", started.elapsed().as_secs_f64());
    }
    println!();
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let quick = argv.iter().any(|a| a == "--quick");
    let only = argv
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| argv.get(i + 1).cloned());
    let want = |what: &str| only.as_deref().is_none_or(|o| o == what);
    let (runs, scale) = if quick { (3, 10) } else { (5, 1) };
    println!("# eddy durable state benchmarks ({runs} run(s) each, median)\n");
    if want("window") {
        window(runs, EVENTS / scale);
    }
    if want("checkpoint") {
        checkpoint(quick);
    }
}
