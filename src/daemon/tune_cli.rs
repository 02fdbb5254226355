//! `eddy tune`: the tuner of a running node (its `GET /tune`): the
//! forecast against the actual rate, the Pareto front of the profiling
//! runs, the chosen configuration and why; `--plot` draws both as SVG.

use std::fmt::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use super::status::{parse_api_target, request};
use super::tune::{ObservationView, TuneState};

pub(crate) fn tune(api: &str, json: bool, plot: Option<&Path>) -> ExitCode {
    let addrs = match parse_api_target(api) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("eddy tune: --api: {e}");
            return ExitCode::FAILURE;
        }
    };
    let body = match request(&addrs, api, "GET", "/tune", "", Duration::from_secs(30)) {
        Ok((200, body)) => body,
        Ok((code, body)) => {
            eprintln!(
                "eddy tune: {api} answered {code}: {}",
                String::from_utf8_lossy(&body).trim()
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("eddy tune: {e}");
            return ExitCode::FAILURE;
        }
    };
    let state: TuneState = match serde_json::from_slice(&body) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("eddy tune: {api} answered something other than GET /tune's JSON: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = plot {
        if let Err(e) = std::fs::write(path, super::tune_svg::svg(&state)) {
            eprintln!("eddy tune: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        if !json {
            eprintln!("eddy tune: plot written to {}", path.display());
        }
    }
    if json {
        println!("{}", String::from_utf8_lossy(&body).trim());
    } else {
        print!("{}", text(&state));
    }
    ExitCode::SUCCESS
}

/// The human-readable view.
pub(crate) fn text(s: &TuneState) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rate (records/s, every {} ms; goals: p99 latency <= {} ms, recovery <= {} s)",
        s.step_ms, s.goals.latency_p99_ms, s.goals.max_recovery_s
    );
    match s.history.last() {
        None => out.push_str("  no samples yet\n"),
        Some(last) => {
            let _ = writeln!(
                out,
                "  {} samples shown, latest {:.1}",
                s.history.len(),
                last.rate
            );
            let _ = writeln!(
                out,
                "  {:>16} {:>12} {:>12}",
                "unix ms", "actual", "forecast"
            );
            for x in s.history.iter().rev().take(8).rev() {
                let p = x.predicted.map_or("-".into(), |p| format!("{p:.1}"));
                let _ = writeln!(out, "  {:>16} {:>12.1} {:>12}", x.unix_ms, x.rate, p);
            }
        }
    }
    match &s.forecast {
        None => out.push_str("forecast: none yet\n"),
        Some(f) => {
            let min = f.points.iter().copied().fold(f64::INFINITY, f64::min);
            let _ = writeln!(
                out,
                "forecast ({}): next {} steps from {}: min {min:.1}, peak {:.1}",
                f.model,
                f.points.len(),
                f.from_unix_ms,
                f.peak
            );
        }
    }
    match &s.error {
        None => out.push_str("forecast error: nothing scored yet\n"),
        Some(e) => {
            let _ = writeln!(
                out,
                "forecast error (MAPE over {} steps): {:.1} %, last value {:.1} %",
                e.scored, e.model_mape_pct, e.last_value_mape_pct
            );
        }
    }
    let o = &s.optimizer;
    let names: Vec<&str> = s.space.iter().map(|r| r.name.as_str()).collect();
    let _ = writeln!(
        out,
        "Pareto front ({} of {} profiling runs; feasible runs no other beats in both CPU per record/s and memory):",
        o.front.len(),
        o.observations.len()
    );
    if !o.front.is_empty() {
        let mut header = String::new();
        for n in &names {
            let _ = write!(header, " {n:>19}");
        }
        let _ = writeln!(
            out,
            " {header} {:>10} {:>8} {:>12} {:>8} {:>10}",
            "rate", "cpu_s", "memory", "p99 ms", "recovery s"
        );
        for &i in &o.front {
            if let Some(ob) = o.observations.get(i) {
                let _ = writeln!(out, " {}", row(&names, s, ob));
            }
        }
    }
    match &o.choice {
        None => out.push_str("chosen: none\n"),
        Some(c) => {
            let settings: Vec<String> = names
                .iter()
                .map(|n| format!("{n} = {}", shown(s, n, c.settings.get(*n).copied())))
                .collect();
            let _ = writeln!(
                out,
                "chosen for {:.0} records/s: {}\n  expected: cpu {:.2} s, memory {}, p99 {:.1} ms, recovery {:.1} s",
                c.rate,
                settings.join(", "),
                c.expected_cpu_s,
                bytes(c.expected_peak_memory_bytes),
                c.expected_latency_p99_ms,
                c.expected_recovery_s
            );
        }
    }
    let _ = writeln!(out, "  why: {}", o.why);
    let p = &s.profiling;
    if p.enabled {
        let _ = writeln!(
            out,
            "profiling: {} run{} of {} ms every {} ms (profile_on = {}: {} on peers{}), {:.2} CPU s{}{}",
            p.runs,
            if p.runs == 1 { "" } else { "s" },
            p.duration_ms,
            p.interval_ms,
            p.on,
            p.runs_on_peers,
            p.last_place
                .as_ref()
                .map(|w| format!(", the last on {w}"))
                .unwrap_or_default(),
            p.cpu_s,
            if p.failed > 0 {
                format!(
                    "; {} attempt{} failed",
                    p.failed,
                    if p.failed == 1 { "" } else { "s" }
                )
            } else {
                String::new()
            },
            p.last_error
                .as_ref()
                .map(|e| format!("; the last attempt made none: {e}"))
                .unwrap_or_default()
        );
        if p.budget > 0.0 {
            let _ = writeln!(
                out,
                "profiling budget: {:.0} % of this node's CPU over the season; the runs took {:.1} %{}",
                100.0 * p.budget,
                100.0 * p.used,
                p.held
                    .as_ref()
                    .map(|h| format!("\n  held: {h}"))
                    .unwrap_or_default()
            );
        }
    } else {
        out.push_str("profiling: off ([tune] profile = false)\n");
    }
    let served = &p.served;
    if served.runs > 0 || served.last_error.is_some() {
        let _ = writeln!(
            out,
            "made for peers: {} run{}, {:.2} CPU s{}{}",
            served.runs,
            if served.runs == 1 { "" } else { "s" },
            served.cpu_s,
            served
                .last_asker
                .as_ref()
                .map(|a| format!(", the last for {a}"))
                .unwrap_or_default(),
            served
                .last_error
                .as_ref()
                .map(|e| format!("; it failed: {e}"))
                .unwrap_or_default()
        );
    }
    let a = &s.apply;
    match &a.applied {
        _ if !a.enabled => out.push_str("applied: off ([tune] apply = false)\n"),
        None => {
            let _ = writeln!(
                out,
                "applied: nothing yet{}",
                a.waiting
                    .as_ref()
                    .map(|w| format!(" (waiting: {w})"))
                    .unwrap_or_default()
            );
        }
        Some(applied) => {
            let _ = writeln!(
                out,
                "applied for {:.0} records/s (again once the forecast peak moves by more than {:.0} %):",
                applied.rate,
                a.threshold * 100.0
            );
            for (name, how) in &applied.outcome {
                let _ = writeln!(
                    out,
                    "  {name} = {}: {how}",
                    shown(s, name, applied.settings.get(name).copied())
                );
            }
        }
    }
    if let Some(next) = &o.next_profile {
        let settings: Vec<String> = names
            .iter()
            .map(|n| format!("{n} = {}", shown(s, n, next.get(*n).copied())))
            .collect();
        let _ = writeln!(out, "next profiling run: {}", settings.join(", "));
        if let Some(why) = &o.next_profile_why {
            let _ = writeln!(out, "  because it is {why}");
        }
    }
    out
}

fn row(names: &[&str], s: &TuneState, o: &ObservationView) -> String {
    let mut line = String::new();
    for n in names {
        let _ = write!(
            line,
            " {:>19}",
            shown(s, n, o.measured.settings.get(*n).copied())
        );
    }
    // A run that fell behind measured its backlog, a lower bound.
    let latency = if o.measured.fell_behind {
        format!(">{:.0}", o.measured.latency_p99_ms)
    } else {
        format!("{:.1}", o.measured.latency_p99_ms)
    };
    let recovery = o
        .measured
        .recovery_s
        .map_or("-".to_string(), |r| format!("{r:.1}"));
    // Measured on the pipeline itself rather than by a profiling run.
    let place = if o.measured.in_place { " in place" } else { "" };
    format!(
        "{line} {:>10.0} {:>8.2} {:>12} {:>8} {:>10}{place}",
        o.measured.rate,
        o.measured.cpu_s,
        bytes(o.measured.peak_memory_bytes),
        latency,
        recovery
    )
}

/// A setting's value in its unit, as the pipeline file writes it.
fn shown(s: &TuneState, name: &str, v: Option<u64>) -> String {
    let Some(v) = v else {
        return "-".into();
    };
    match s
        .space
        .iter()
        .find(|r| r.name == name)
        .map(|r| r.unit.as_str())
    {
        Some("bytes") => bytes(v as f64),
        Some("ms") => humantime::format_duration(Duration::from_millis(v)).to_string(),
        _ => v.to_string(),
    }
}

fn bytes(b: f64) -> String {
    bytesize::ByteSize::b(b.max(0.0) as u64)
        .display()
        .iec()
        .to_string()
}
