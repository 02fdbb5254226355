//! Reporting a run: a summary log line, and the `--stats` table.

use std::fmt::Write;

use crate::exec::Report;
use crate::plan::NodeKind;

pub(crate) fn log_summary(report: &Report) {
    let source_records: u64 = report
        .components
        .iter()
        .filter(|c| c.kind == NodeKind::Source)
        .map(|c| c.counters.records_out)
        .sum();
    let secs = report.elapsed.as_secs_f64();
    tracing::info!(
        "finished: {source_records} records from sources in {secs:.3} s ({:.0} records/s)",
        source_records as f64 / secs.max(1e-9)
    );
    if report.dead_letters > 0 {
        tracing::warn!(
            "{} record{} could not be read or evaluated; they are in {}",
            report.dead_letters,
            if report.dead_letters == 1 { "" } else { "s" },
            report.dead_letter_path.display()
        );
    }
}

/// Per component: records in and out, errors, late records, the true
/// processing rate (records per second of useful time), and for sinks the
/// end-to-end latency percentiles.
pub(crate) fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:<10} {:>12} {:>12} {:>8} {:>8} {:>14} {:>10} {:>10} {:>10}",
        "component",
        "type",
        "in",
        "out",
        "errors",
        "late",
        "true rate/s",
        "p50 ms",
        "p99 ms",
        "p999 ms"
    );
    for c in &report.components {
        let rate = match c.kind {
            NodeKind::Source => c.counters.true_output_rate(),
            _ => c.counters.true_processing_rate(),
        };
        let (p50, p99, p999) = match &c.latency_us {
            Some(h) if !h.is_empty() => {
                let ms = |q: f64| format!("{:.3}", h.value_at_quantile(q) as f64 / 1000.0);
                (ms(0.5), ms(0.99), ms(0.999))
            }
            _ => ("-".into(), "-".into(), "-".into()),
        };
        let dash_if = |cond: bool, v: u64| if cond { "-".to_string() } else { v.to_string() };
        let _ = writeln!(
            out,
            "{:<20} {:<10} {:>12} {:>12} {:>8} {:>8} {:>14} {:>10} {:>10} {:>10}",
            c.id,
            c.type_name,
            dash_if(c.kind == NodeKind::Source, c.counters.records_in),
            dash_if(c.kind == NodeKind::Sink, c.counters.records_out),
            c.errors,
            c.late,
            rate.map_or("-".into(), |r| format!("{r:.0}")),
            p50,
            p99,
            p999
        );
    }
    let _ = writeln!(
        out,
        "elapsed {:.3} s; dead letters {}",
        report.elapsed.as_secs_f64(),
        report.dead_letters
    );
    for c in report.components.iter().filter(|c| c.state_evictions > 0) {
        let _ = writeln!(
            out,
            "{}: state over the cache: {} bin evictions to the store, {} loads back",
            c.id, c.state_evictions, c.state_loads
        );
    }
    if let Some(cp) = report.checkpoints.filter(|c| c.completed > 0) {
        let _ = writeln!(
            out,
            "checkpoints: {} committed, the last (#{}) in {:.1} ms with {} bytes of state; slowest {:.1} ms; {} bytes in all",
            cp.completed,
            cp.last_id,
            cp.last_duration.as_secs_f64() * 1e3,
            cp.last_bytes,
            cp.max_duration.as_secs_f64() * 1e3,
            cp.bytes_total
        );
    }
    out
}

/// This process's CPU seconds and peak resident memory so far, as the
/// last line of `--stats` (see [`process_figures`]).
pub(crate) fn process_line() -> String {
    let cpu = super::procfs::cpu_seconds(std::process::id()).unwrap_or(f64::NAN);
    let peak = super::procfs::status_bytes("self", "VmHWM").unwrap_or(0);
    format!("process: {cpu:.2} CPU s, peak memory {peak} bytes\n")
}

/// The CPU seconds and peak memory bytes of a `--stats` output's process
/// line, if it has one.
pub(crate) fn process_figures(stats: &str) -> Option<(f64, f64)> {
    let line = stats
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("process: "))?;
    let (cpu, rest) = line.split_once(" CPU s, peak memory ")?;
    let bytes = rest.strip_suffix(" bytes")?;
    let cpu: f64 = cpu.parse().ok().filter(|c: &f64| c.is_finite())?;
    Some((cpu, bytes.parse().ok()?))
}
