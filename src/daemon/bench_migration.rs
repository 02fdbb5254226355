//! `eddy bench migration` and `eddy bench bins`: live bin migration under
//! load, and what the bin interface costs.
//!
//! Migration: one process, two workers standing for two nodes, a keyed
//! count over ~1M keys fed at about half of the capacity measured with
//! every bin on worker 0, where each measured move starts. All
//! bins start on worker 0; per strategy, half of them move to worker 1
//! (then back, all at once, unmeasured). The latency probe records, per
//! batch the keyed window applies, the time from the source emitting its
//! oldest record (the ingestion timestamp every record carries) to the
//! operator having applied it; held records count from their emission,
//! so holding shows. The probe is one pointer test per delivered batch
//! when off, one clock read per batch when on.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::migration_api::{CountRun, CountSpec, Move, Target, keyed_count};

const STRATEGIES: [&str; 3] = ["all_at_once", "fluid", "batched"];

/// The steady state a move is compared with: this long before it, with no
/// move running. About as long as a fluid move at 256 to 4096 bins, so
/// its max is over as many chances for a stall as the move's.
const STEADY: Duration = Duration::from_millis(1500);

struct Row {
    strategy: String,
    max_ms: f64,
    p99_ms: f64,
    steady_p99_ms: f64,
    steady_max_ms: f64,
    duration_ms: f64,
    peak_extra_bytes: u64,
    lost: u64,
    duplicated: u64,
    bins: u32,
    bytes: u64,
    steps: u32,
}

fn percentile(mut v: Vec<u64>, q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

pub(crate) fn migration(json: bool, keys: u64, bins: u32, plot: &Path) -> ExitCode {
    match run_migration(keys, bins, plot) {
        Ok((rows, rate, capacity)) => {
            if json {
                let list: Vec<_> = rows
                    .iter()
                    .map(|r| {
                        serde_json::json!({
                            "strategy": r.strategy,
                            "max_latency_ms": r.max_ms,
                            "p99_latency_ms": r.p99_ms,
                            "steady_p99_ms": r.steady_p99_ms,
                            "steady_max_ms": r.steady_max_ms,
                            "duration_ms": r.duration_ms,
                            "peak_extra_bytes": r.peak_extra_bytes,
                            "lost": r.lost,
                            "duplicated": r.duplicated,
                        })
                    })
                    .collect();
                println!("{}", serde_json::json!({ "strategies": list }));
            } else {
                println!(
                    "migration: {keys} keys in {bins} bins, 2 workers, half the bins from worker 0 to worker 1; input {:.2} M ev/s (capacity {:.2} M ev/s)",
                    rate as f64 / 1e6,
                    capacity / 1e6
                );
                println!(
                    "{:<12} {:>9} {:>9} {:>10} {:>10} {:>11} {:>6} {:>10} {:>12} {:>5} {:>5}",
                    "strategy",
                    "max ms",
                    "p99 ms",
                    "steady p99",
                    "steady max",
                    "duration ms",
                    "steps",
                    "bins",
                    "peak extra",
                    "lost",
                    "dup"
                );
                for r in &rows {
                    println!(
                        "{:<12} {:>9.2} {:>9.2} {:>10.2} {:>10.2} {:>11.1} {:>6} {:>10} {:>11.1}M {:>5} {:>5}",
                        r.strategy,
                        r.max_ms,
                        r.p99_ms,
                        r.steady_p99_ms,
                        r.steady_max_ms,
                        r.duration_ms,
                        r.steps,
                        format!("{} ({:.0}M)", r.bins, r.bytes as f64 / 1e6),
                        r.peak_extra_bytes as f64 / 1e6,
                        r.lost,
                        r.duplicated
                    );
                }
                println!("latency over time: {}", plot.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("eddy bench migration: {e}");
            ExitCode::FAILURE
        }
    }
}

fn spec(keys: u64, bins: u32, events: u64, rate: u64, probe: bool) -> CountSpec {
    CountSpec {
        events,
        workers: 2,
        bins,
        keys,
        rate,
        // No window fires during the run: the state only grows to the
        // keys, and firing does not blur the latency.
        window: "1h".into(),
        probe,
        keep_rows: probe,
        stop_after_moves: probe,
        hold: None,
    }
}

fn run_migration(keys: u64, bins: u32, plot: &Path) -> Result<(Vec<Row>, u64, f64), String> {
    // Capacity: the same workload unpaced, with every bin on worker 0 as
    // before each measured move (the sources still run on both workers).
    // Half of the even split's capacity would load worker 0 fully, and the
    // steady p99 would be a queue's.
    let events = 6_000_000;
    let on_worker_0 = [Move {
        pause: Duration::ZERO,
        target: Target::Over(vec![0]),
        strategy: "all_at_once".into(),
    }];
    let free = keyed_count(&spec(keys, bins, events, 0, false), &on_worker_0)?;
    let capacity = events as f64 / free.seconds;
    let rate = (capacity / 2.0) as u64;
    // After each all-at-once move back the worker catches up on the
    // records it held (as long again as the move at this load); the
    // steady window, the last `STEADY` before the next move, starts
    // after that.
    let settle = Duration::from_millis(3000);
    let mut moves = vec![Move {
        pause: Duration::from_millis(1000),
        target: Target::Over(vec![0]),
        strategy: "all_at_once".into(),
    }];
    for s in STRATEGIES {
        moves.push(Move {
            pause: settle,
            target: Target::Even,
            strategy: s.into(),
        });
        moves.push(Move {
            pause: settle,
            target: Target::Over(vec![0]),
            strategy: "all_at_once".into(),
        });
    }
    // Far more than needed: the input stops once the moves are done.
    let events = rate * 600;
    let run = keyed_count(&spec(keys, bins, events, rate, true), &moves)?;
    if run.moves.len() != moves.len() {
        return Err("not every migration ran before the input ended".into());
    }
    let (lost, duplicated) = check(&run, run.emitted);
    let mut rows = Vec::new();
    for (i, s) in STRATEGIES.iter().enumerate() {
        let m = &run.moves[1 + 2 * i];
        let from = m.started.as_nanos() as u64;
        let to = (m.started + m.duration).as_nanos() as u64;
        // Held records are applied when their bin is installed: a little
        // after the last step, the latency is back.
        let during: Vec<u64> = run
            .latency
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to + 50_000_000)
            .map(|&(_, l)| l)
            .collect();
        let before: Vec<u64> = run
            .latency
            .iter()
            .filter(|(t, _)| *t + STEADY.as_nanos() as u64 >= from && *t < from)
            .map(|&(_, l)| l)
            .collect();
        let base = run.rss.iter().rfind(|(t, _)| *t <= from).map_or(0, |r| r.1);
        let peak = run
            .rss
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to + 50_000_000)
            .map(|r| r.1)
            .max()
            .unwrap_or(base);
        rows.push(Row {
            strategy: s.to_string(),
            max_ms: during.iter().copied().max().unwrap_or(0) as f64 / 1e6,
            p99_ms: percentile(during, 0.99) as f64 / 1e6,
            steady_max_ms: before.iter().copied().max().unwrap_or(0) as f64 / 1e6,
            steady_p99_ms: percentile(before, 0.99) as f64 / 1e6,
            duration_ms: m.duration.as_secs_f64() * 1e3,
            peak_extra_bytes: peak.saturating_sub(base),
            lost,
            duplicated,
            bins: m.bins,
            bytes: m.bytes,
            steps: m.steps,
        });
    }
    std::fs::write(plot, svg(&run)).map_err(|e| format!("cannot write {}: {e}", plot.display()))?;
    Ok((rows, rate, capacity))
}

/// Records lost and applied twice, from the result rows: every event
/// counts once in its key's window.
fn check(run: &CountRun, events: u64) -> (u64, u64) {
    let total: i64 = run.rows.iter().map(|r| r.2).sum();
    let repeated = run
        .rows
        .windows(2)
        .filter(|w| (w[0].0, w[0].1) == (w[1].0, w[1].1))
        .count() as u64;
    let total = total.max(0) as u64;
    (
        events.saturating_sub(total),
        total.saturating_sub(events) + repeated,
    )
}

/// Latency over time (max per 20 ms), migrations shaded.
fn svg(run: &CountRun) -> String {
    let (w, h, left, bottom) = (1000.0, 400.0, 60.0, 30.0);
    let end = run.latency.last().map_or(1, |l| l.0).max(1) as f64;
    let bucket = 20_000_000u64;
    let mut points: Vec<(u64, u64)> = Vec::new();
    for &(t, l) in &run.latency {
        let b = t / bucket;
        match points.last_mut() {
            Some(p) if p.0 == b => p.1 = p.1.max(l),
            _ => points.push((b, l)),
        }
    }
    let top = points.iter().map(|p| p.1).max().unwrap_or(1).max(1) as f64 / 1e6;
    // Log scale: the steady latency and the all-at-once pause differ by
    // orders of magnitude.
    let lo = 0.01f64;
    let y = |ms: f64| {
        let f = (ms.max(lo) / lo).ln() / (top.max(lo * 10.0) / lo).ln();
        h - bottom - f * (h - bottom - 10.0)
    };
    let x = |t: f64| left + t / end * (w - left - 10.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">
<rect width="{w}" height="{h}" fill="white"/>
"#
    );
    for (i, m) in run.moves.iter().enumerate() {
        let (a, b) = (
            m.started.as_nanos() as f64,
            (m.started + m.duration).as_nanos() as f64,
        );
        let measured = i % 2 == 1;
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="10" width="{:.1}" height="{:.1}" fill="{}"/><text x="{:.1}" y="22">{}</text>"#,
            x(a),
            (x(b) - x(a)).max(1.0),
            h - bottom - 10.0,
            if measured { "#fde2c8" } else { "#e8e8e8" },
            x(a) + 2.0,
            if measured { m.strategy.as_str() } else { "" }
        );
    }
    let path: Vec<String> = points
        .iter()
        .map(|&(b, l)| format!("{:.1},{:.1}", x((b * bucket) as f64), y(l as f64 / 1e6)))
        .collect();
    let _ = writeln!(
        s,
        r##"<polyline fill="none" stroke="#1f5fa8" stroke-width="1" points="{}"/>"##,
        path.join(" ")
    );
    let mut tick = lo;
    while tick <= top * 1.0001 {
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#ccc"/><text x="2" y="{:.1}">{} ms</text>"##,
            w - 10.0,
            y(tick),
            y(tick),
            y(tick) + 4.0,
            tick
        );
        tick *= 10.0;
    }
    let secs = (end / 1e9).ceil() as u64;
    for sec in 0..=secs {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}">{sec} s</text>"#,
            x(sec as f64 * 1e9),
            h - 10.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// `eddy bench bins`: throughput of the same keyed count at 1, 2^8, 2^12
/// and 2^16 bins (two workers, so records cross the exchange).
pub(crate) fn bins(events: u64, json: bool) -> ExitCode {
    // The baseline is one bin per worker: keys partitioned straight by
    // hash, as an engine without bins does (one bin for two workers would
    // put every key on one of them). Rounds alternate the bin counts so
    // that drift on a shared machine hits all of them alike; best of 3.
    const WORKERS: usize = 2;
    let counts = [WORKERS as u32, 1 << 8, 1 << 12, 1 << 16];
    let mut best = [0.0f64; 4];
    for _ in 0..3 {
        for (i, &bins) in counts.iter().enumerate() {
            let spec = CountSpec {
                events,
                workers: WORKERS,
                bins,
                keys: 10_000,
                rate: 0,
                window: "1s".into(),
                probe: false,
                keep_rows: false,
                stop_after_moves: false,
                hold: None,
            };
            match keyed_count(&spec, &[]) {
                Ok(r) => best[i] = best[i].max(events as f64 / r.seconds),
                Err(e) => {
                    eprintln!("eddy bench bins: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let base = best[0];
    if json {
        let list: Vec<_> = counts
            .iter()
            .zip(best)
            .map(|(b, r)| serde_json::json!({"bins": b, "events_per_s": r, "vs_bin_per_worker": r / base}))
            .collect();
        println!("{}", serde_json::json!({ "bins": list }));
    } else {
        println!(
            "bins: {events} events, {WORKERS} workers, keyed 1 s count (best of 3, rounds alternate)"
        );
        for (b, r) in counts.iter().zip(best) {
            println!(
                "{:>6} bins: {:>6.2} M ev/s ({:+.1} % vs one bin per worker)",
                b,
                r / 1e6,
                (r / base - 1.0) * 100.0
            );
        }
    }
    ExitCode::SUCCESS
}
