//! `eddy tune --plot FILE.svg`: two panels written by hand (a plotting
//! crate would cost more binary than the whole tuner): the input rate
//! (actual, the one-step-ahead forecast of each sample, the forecast of
//! the horizon ahead), and the profiling runs by CPU and memory with the
//! Pareto front and the chosen configuration.

use std::fmt::Write;

use super::tune::TuneState;

const W: f64 = 520.0;
const H: f64 = 320.0;
const PAD: f64 = 50.0;

/// Linear map of `[lo, hi]` onto `[a, b]`, with a flat range centred.
fn scale(v: f64, lo: f64, hi: f64, a: f64, b: f64) -> f64 {
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        return (a + b) / 2.0;
    }
    a + (v - lo) / (hi - lo) * (b - a)
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A panel's frame, title and axis labels, at horizontal offset `x0`.
fn frame(out: &mut String, x0: f64, title: &str, x_label: &str, y: (f64, f64), y_label: &str) {
    let _ = write!(
        out,
        r##"<g transform="translate({x0},0)"><rect x="{PAD}" y="{PAD}" width="{}" height="{}" fill="none" stroke="#444"/><text x="{}" y="{}" text-anchor="middle" font-size="14">{}</text><text x="{}" y="{}" text-anchor="middle" font-size="11">{}</text><text x="12" y="{}" font-size="11" transform="rotate(-90 12 {})" text-anchor="middle">{}</text><text x="{}" y="{}" font-size="10" text-anchor="end">{}</text><text x="{}" y="{}" font-size="10" text-anchor="end">{}</text></g>"##,
        W - 2.0 * PAD,
        H - 2.0 * PAD,
        W / 2.0,
        PAD - 15.0,
        escape(title),
        W / 2.0,
        H - 12.0,
        escape(x_label),
        H / 2.0,
        H / 2.0,
        escape(y_label),
        PAD - 4.0,
        H - PAD,
        short(y.0),
        PAD - 4.0,
        PAD + 8.0,
        short(y.1),
    );
}

fn short(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{:.1}G", v / 1e9),
        a if a >= 1e6 => format!("{:.1}M", v / 1e6),
        a if a >= 1e3 => format!("{:.1}k", v / 1e3),
        _ => format!("{v:.2}"),
    }
}

fn polyline(out: &mut String, points: &[(f64, f64)], style: &str) {
    if points.is_empty() {
        return;
    }
    let pts: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    let _ = write!(
        out,
        r#"<polyline fill="none" {style} points="{}"/>"#,
        pts.join(" ")
    );
}

fn legend(out: &mut String, x: f64, y: f64, colour: &str, dash: &str, label: &str) {
    let _ = write!(
        out,
        r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="2" {dash}/><text x="{}" y="{}" font-size="10">{}</text>"#,
        x + 18.0,
        x + 22.0,
        y + 3.0,
        escape(label)
    );
}

/// The whole SVG document.
pub(crate) fn svg(s: &TuneState) -> String {
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{H}" viewBox="0 0 {} {H}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>"#,
        2.0 * W,
        2.0 * W
    );
    rate_panel(&mut out, s);
    front_panel(&mut out, s);
    out.push_str("</svg>\n");
    out
}

fn rate_panel(out: &mut String, s: &TuneState) {
    let step = s.step_ms as f64;
    let forecast: Vec<(f64, f64)> = s
        .forecast
        .iter()
        .flat_map(|f| {
            f.points
                .iter()
                .enumerate()
                .map(move |(i, &p)| (f.from_unix_ms as f64 + i as f64 * step, p))
        })
        .collect();
    let actual: Vec<(f64, f64)> = s
        .history
        .iter()
        .map(|x| (x.unix_ms as f64, x.rate))
        .collect();
    let predicted: Vec<(f64, f64)> = s
        .history
        .iter()
        .filter_map(|x| x.predicted.map(|p| (x.unix_ms as f64, p)))
        .collect();
    let all = || actual.iter().chain(&predicted).chain(&forecast);
    let (t0, t1) = bounds(all().map(|p| p.0));
    let (_, r1) = bounds(all().map(|p| p.1));
    let (r0, r1) = (0.0, r1.max(1.0) * 1.05);
    let model = s.forecast.as_ref().map_or("none", |f| f.model.as_str());
    let span_s = (t1 - t0) / 1000.0;
    frame(
        out,
        0.0,
        &format!("input rate: actual and forecast ({model})"),
        &format!("time (the last {span_s:.0} s and the horizon)"),
        (r0, r1),
        "records/s",
    );
    let map = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        pts.iter()
            .map(|&(t, r)| {
                (
                    scale(t, t0, t1, PAD, W - PAD),
                    scale(r, r0, r1, H - PAD, PAD),
                )
            })
            .collect()
    };
    polyline(out, &map(&actual), r##"stroke="#1f77b4" stroke-width="2""##);
    polyline(
        out,
        &map(&predicted),
        r##"stroke="#ff7f0e" stroke-width="1.5" stroke-dasharray="4 3""##,
    );
    polyline(
        out,
        &map(&forecast),
        r##"stroke="#d62728" stroke-width="2""##,
    );
    legend(out, PAD + 8.0, PAD + 12.0, "#1f77b4", "", "actual");
    legend(
        out,
        PAD + 8.0,
        PAD + 26.0,
        "#ff7f0e",
        r#"stroke-dasharray="4 3""#,
        "forecast one step before",
    );
    legend(out, PAD + 8.0, PAD + 40.0, "#d62728", "", "forecast ahead");
}

/// CPU seconds per 1 000 records/s: runs at different rates compare by
/// what their settings cost, as the optimiser compares them.
fn per_krate(cpu_s: f64, rate: f64) -> f64 {
    cpu_s / rate.max(1.0) * 1000.0
}

fn front_panel(out: &mut String, s: &TuneState) {
    let o = &s.optimizer;
    let points: Vec<(f64, f64)> = o
        .observations
        .iter()
        .map(|x| {
            let m = &x.measured;
            (per_krate(m.cpu_s, m.rate), m.peak_memory_bytes)
        })
        .chain(o.choice.iter().map(|c| {
            (
                per_krate(c.expected_cpu_s, c.rate),
                c.expected_peak_memory_bytes,
            )
        }))
        .collect();
    let (c0, c1) = bounds(points.iter().map(|p| p.0));
    let (m0, m1) = bounds(points.iter().map(|p| p.1));
    let (c0, c1) = (c0 - 0.05 * (c1 - c0), c1 + 0.05 * (c1 - c0));
    let (m0, m1) = (m0 - 0.05 * (m1 - m0), m1 + 0.05 * (m1 - m0));
    out.push_str(&format!(r#"<g transform="translate({W},0)">"#));
    let mut inner = String::new();
    frame(
        &mut inner,
        0.0,
        &format!(
            "profiling runs: {} on the Pareto front of {}",
            o.front.len(),
            o.observations.len()
        ),
        &format!(
            "CPU seconds per 1000 records/s ({} to {})",
            short(c0),
            short(c1)
        ),
        (m0, m1),
        "peak memory (bytes)",
    );
    out.push_str(&inner);
    let at = |c: f64, m: f64| {
        (
            scale(c, c0, c1, PAD, W - PAD),
            scale(m, m0, m1, H - PAD, PAD),
        )
    };
    for x in &o.observations {
        let m = &x.measured;
        let (px, py) = at(per_krate(m.cpu_s, m.rate), m.peak_memory_bytes);
        let fill = if x.feasible { "#2ca02c" } else { "#bbbbbb" };
        let _ = write!(
            out,
            r##"<circle cx="{px:.1}" cy="{py:.1}" r="4" fill="{fill}" stroke="#333"><title>{} records/s, p99 {:.1} ms, {}</title></circle>"##,
            x.measured.rate,
            x.measured.latency_p99_ms,
            x.measured
                .recovery_s
                .map_or("in place".to_string(), |r| format!("recovery {r:.1} s"))
        );
    }
    let front: Vec<(f64, f64)> = o
        .front
        .iter()
        .filter_map(|&i| o.observations.get(i))
        .map(|x| {
            let m = &x.measured;
            at(per_krate(m.cpu_s, m.rate), m.peak_memory_bytes)
        })
        .collect();
    polyline(out, &front, r##"stroke="#2ca02c" stroke-width="2""##);
    if let Some(c) = &o.choice {
        let (px, py) = at(
            per_krate(c.expected_cpu_s, c.rate),
            c.expected_peak_memory_bytes,
        );
        let _ = write!(
            out,
            r##"<path d="M{:.1},{:.1} L{:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1}" stroke="#d62728" stroke-width="2.5"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#d62728">chosen (expected)</text>"##,
            px - 6.0,
            py - 6.0,
            px + 6.0,
            py + 6.0,
            px - 6.0,
            py + 6.0,
            px + 6.0,
            py - 6.0,
            px + 8.0,
            py - 8.0
        );
    }
    legend(
        out,
        PAD + 8.0,
        PAD + 12.0,
        "#2ca02c",
        "",
        "front (feasible)",
    );
    out.push_str("</g>");
}
