//! `GET /metrics`: the run's counters in the Prometheus text format
//! (version 0.0.4), named as Vector names them where Vector has a name
//! (`component_received_events_total`, ...), as Flink does for the
//! per-second times (`busy_time_ms_per_second`, ...), and `eddy_...` for
//! the rest. Every component series carries `component_id`,
//! `component_kind`, `component_type` and `host`.

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::http::{Response, Router};
use crate::exec::{Report, Reporter};
use crate::kernel::counters::Counters;
use crate::plan::NodeKind;

/// Upper bounds of the latency histogram buckets, in seconds.
pub(crate) const LATENCY_BUCKETS: [f64; 11] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
];

/// Per-second times are computed over at least this long, so two scrapes
/// close together do not make noisy gauges.
const MIN_WINDOW_S: f64 = 1.0;

/// What `/metrics` reads: the running pipeline, once it has started.
pub(crate) struct MetricsSource {
    host: String,
    /// The running pipeline's; replaced on a reload.
    reporter: Mutex<Option<Reporter>>,
    window: Mutex<Window>,
    /// The gossiped cluster view, rendered after this node's own series.
    cluster: std::sync::OnceLock<Arc<super::gossip::ClusterSource>>,
}

/// The counters at the start of the current per-second window, and the
/// gauges of the last complete window.
#[derive(Default)]
struct Window {
    start: Option<(Instant, Vec<Counters>)>,
    per_second: Vec<PerSecond>,
}

#[derive(Clone, Copy, Default)]
struct PerSecond {
    busy_ms: f64,
    backpressured_ms: f64,
    idle_ms: f64,
}

impl MetricsSource {
    pub(crate) fn new(host: String) -> MetricsSource {
        MetricsSource {
            host,
            reporter: Mutex::new(None),
            window: Mutex::new(Window::default()),
            cluster: std::sync::OnceLock::new(),
        }
    }

    /// Adds the cluster view's series (labelled by `node`) to `/metrics`.
    pub(crate) fn set_cluster(&self, cluster: Arc<super::gossip::ClusterSource>) {
        let _ = self.cluster.set(cluster);
    }

    /// Reads `reporter` from now on; `None` between two pipelines of a
    /// reload, so the old one's state can close.
    pub(crate) fn attach(&self, reporter: Option<Reporter>) {
        *self.reporter.lock().unwrap_or_else(|e| e.into_inner()) = reporter;
    }

    fn render(&self, now: Instant) -> Option<String> {
        let reporter = self
            .reporter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        let report = reporter.report();
        let per_second = self.per_second(&report, now);
        let mut text = render(&report, &self.host, &per_second);
        if let Some(c) = self.cluster.get() {
            text.push_str(&c.render_prometheus());
        }
        Some(text)
    }

    fn per_second(&self, report: &Report, now: Instant) -> Vec<PerSecond> {
        let counters: Vec<Counters> = report.components.iter().map(|c| c.counters).collect();
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        match &w.start {
            Some((at, before)) if before.len() == counters.len() => {
                let seconds = now.saturating_duration_since(*at).as_secs_f64();
                if seconds >= MIN_WINDOW_S {
                    let ms = |ns: u64| ns as f64 / 1e6 / seconds;
                    w.per_second = counters
                        .iter()
                        .zip(before)
                        .map(|(c, b)| {
                            let d = c.since(b);
                            PerSecond {
                                busy_ms: ms(d.useful_ns),
                                backpressured_ms: ms(d.blocked_ns),
                                idle_ms: ms(d.waiting_ns),
                            }
                        })
                        .collect();
                    w.start = Some((now, counters));
                }
            }
            _ => {
                // The first scrape: the run's whole life is the window.
                let seconds = report.elapsed.as_secs_f64().max(1e-3);
                let ms = |ns: u64| ns as f64 / 1e6 / seconds;
                w.per_second = counters
                    .iter()
                    .map(|c| PerSecond {
                        busy_ms: ms(c.useful_ns),
                        backpressured_ms: ms(c.blocked_ns),
                        idle_ms: ms(c.waiting_ns),
                    })
                    .collect();
                w.start = Some((now, counters));
            }
        }
        w.per_second.clone()
    }
}

/// Escapes a label value as the text format asks.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn kind_name(k: NodeKind) -> &'static str {
    match k {
        NodeKind::Source => "source",
        NodeKind::Transform => "transform",
        NodeKind::Sink => "sink",
    }
}

/// One metric family: its `# HELP` and `# TYPE` lines, then its samples.
struct Family<'a> {
    out: &'a mut String,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out }
    }

    fn sample(&mut self, name: &str, labels: &str, value: f64) {
        let _ = if value.is_finite() && value == value.trunc() && value.abs() < 1e15 {
            writeln!(self.out, "{name}{{{labels}}} {}", value as i64)
        } else {
            writeln!(self.out, "{name}{{{labels}}} {value}")
        };
    }
}

/// Which per-bin counter a series shows.
type BinSeries = fn(&crate::exec::BinCounters) -> &[u64];

fn render(report: &Report, host: &str, per_second: &[PerSecond]) -> String {
    let mut out = String::new();
    let host_label = format!("host=\"{}\"", escape(host));
    let labels: Vec<String> = report
        .components
        .iter()
        .map(|c| {
            format!(
                "component_id=\"{}\",component_kind=\"{}\",component_type=\"{}\",{host_label}",
                escape(&c.id),
                kind_name(c.kind),
                escape(&c.type_name)
            )
        })
        .collect();
    type Pick = fn(&crate::exec::ComponentReport) -> Option<f64>;
    let counters: [(&str, &str, Pick); 6] = [
        (
            "component_received_events_total",
            "Records that reached the component (sources: records read, including malformed ones).",
            |c| match c.kind {
                // A source's records are those it emitted and those it
                // rejected to the dead-letter output.
                NodeKind::Source => Some((c.counters.records_out + c.errors) as f64),
                _ => Some(c.counters.records_in as f64),
            },
        ),
        (
            "component_sent_events_total",
            "Records the component emitted (network sinks: records the peer took).",
            |c| {
                let network_sink = c.kind == NodeKind::Sink
                    && matches!(c.type_name.as_str(), "http" | "tcp" | "udp");
                (c.kind != NodeKind::Sink || network_sink).then_some(c.counters.records_out as f64)
            },
        ),
        (
            "component_errors_total",
            "Records the component could not handle (sent to the dead-letter output).",
            |c| Some(c.errors as f64),
        ),
        (
            "component_late_events_total",
            "Records that arrived after their window's allowed lateness.",
            |c| (c.kind == NodeKind::Transform).then_some(c.late as f64),
        ),
        (
            "eddy_state_evictions_total",
            "Bins of state evicted from the cache to the store.",
            |c| (c.kind == NodeKind::Transform).then_some(c.state_evictions as f64),
        ),
        (
            "eddy_state_loads_total",
            "Bins of state loaded back from the store into the cache.",
            |c| (c.kind == NodeKind::Transform).then_some(c.state_loads as f64),
        ),
    ];
    for (name, help, pick) in counters {
        let mut f = Family::new(&mut out, name, "counter", help);
        for (c, l) in report.components.iter().zip(&labels) {
            if let Some(v) = pick(c) {
                f.sample(name, l, v);
            }
        }
    }
    type Time = fn(&PerSecond) -> f64;
    let times: [(&str, &str, Time); 3] = [
        (
            "busy_time_ms_per_second",
            "Milliseconds per second spent in the component's code (useful time), summed over workers.",
            |p| p.busy_ms,
        ),
        (
            "backpressured_time_ms_per_second",
            "Milliseconds per second blocked on a full output channel, summed over workers.",
            |p| p.backpressured_ms,
        ),
        (
            "idle_time_ms_per_second",
            "Milliseconds per second waiting for input, summed over workers.",
            |p| p.idle_ms,
        ),
    ];
    for (name, help, pick) in times {
        let mut f = Family::new(&mut out, name, "gauge", help);
        for (p, l) in per_second.iter().zip(&labels) {
            f.sample(name, l, (pick(p) * 1e3).round() / 1e3);
        }
    }
    {
        let name = "eddy_watermark_ms";
        let mut f = Family::new(
            &mut out,
            name,
            "gauge",
            "Event time (epoch milliseconds) up to which the component's instance on a worker has its input complete; none before its first watermark and after its input ended.",
        );
        for (c, l) in report.components.iter().zip(&labels) {
            for (w, wm) in c.watermarks_ms.iter().enumerate() {
                if let Some(wm) = wm {
                    f.sample(name, &format!("{l},worker=\"{w}\""), *wm as f64);
                }
            }
        }
    }
    {
        let name = "eddy_true_processing_rate";
        let mut f = Family::new(
            &mut out,
            name,
            "gauge",
            "Records per second of useful time (DS2's true rate; sources: records produced).",
        );
        for (c, l) in report.components.iter().zip(&labels) {
            let rate = if c.kind == NodeKind::Source {
                c.counters.true_output_rate()
            } else {
                c.counters.true_processing_rate()
            };
            if let Some(r) = rate {
                f.sample(name, l, r.round());
            }
        }
    }
    {
        let name = "component_latency_seconds";
        let mut f = Family::new(
            &mut out,
            name,
            "histogram",
            "End-to-end latency of records, from ingestion at the source to the sink.",
        );
        for (c, l) in report.components.iter().zip(&labels) {
            let Some(h) = &c.latency_us else { continue };
            for le in LATENCY_BUCKETS {
                let n = h.count_between(0, (le * 1e6) as u64);
                f.sample(
                    &format!("{name}_bucket"),
                    &format!("{l},le=\"{le}\""),
                    n as f64,
                );
            }
            f.sample(
                &format!("{name}_bucket"),
                &format!("{l},le=\"+Inf\""),
                h.len() as f64,
            );
            f.sample(&format!("{name}_sum"), l, h.mean() * h.len() as f64 / 1e6);
            f.sample(&format!("{name}_count"), l, h.len() as f64);
        }
    }
    // Per bin, for the bins this node owns (keyed components only).
    let per_bin: [(&str, &str, &str, BinSeries); 2] = [
        (
            "eddy_bin_received_events_total",
            "counter",
            "Records the keyed component received in the bin on this node.",
            |b| &b.received,
        ),
        (
            "eddy_bin_state_bytes",
            "gauge",
            "About how many bytes the bin's state takes in the component (windows).",
            |b| &b.state_bytes,
        ),
    ];
    for (name, kind, help, pick) in per_bin {
        let mut f = Family::new(&mut out, name, kind, help);
        for b in &report.bins {
            let Some(c) = report.components.get(b.component) else {
                continue;
            };
            for (bin, &v) in pick(b).iter().enumerate() {
                if report.owned_bins.get(bin) == Some(&true) {
                    let labels = format!(
                        "component_id=\"{}\",bin=\"{bin}\",{host_label}",
                        escape(&c.id)
                    );
                    f.sample(name, &labels, v as f64);
                }
            }
        }
    }
    let node = |out: &mut String, name: &str, kind: &str, help: &str, v: f64| {
        Family::new(out, name, kind, help).sample(name, &host_label, v);
    };
    node(
        &mut out,
        "eddy_dead_letters_total",
        "counter",
        "Records written to the dead-letter output.",
        report.dead_letters as f64,
    );
    node(
        &mut out,
        "eddy_migration_spilled_records_total",
        "counter",
        "Records held for a bin still moving here that went to disk past `[migration] hold_memory`.",
        report.held_spilled_rows as f64,
    );
    node(
        &mut out,
        "eddy_uptime_seconds",
        "gauge",
        "Seconds since the pipeline started.",
        (report.elapsed.as_secs_f64() * 1e3).round() / 1e3,
    );
    if let Some(cp) = report.checkpoints {
        node(
            &mut out,
            "eddy_checkpoints_total",
            "counter",
            "Checkpoints committed by this run.",
            cp.completed as f64,
        );
        node(
            &mut out,
            "eddy_checkpoint_last_id",
            "gauge",
            "The id of the newest committed checkpoint.",
            cp.last_id as f64,
        );
        node(
            &mut out,
            "eddy_checkpoint_last_duration_seconds",
            "gauge",
            "From the request of the newest checkpoint's barriers to its commit.",
            cp.last_duration.as_secs_f64(),
        );
        node(
            &mut out,
            "eddy_checkpoint_max_duration_seconds",
            "gauge",
            "The slowest checkpoint of this run.",
            cp.max_duration.as_secs_f64(),
        );
        node(
            &mut out,
            "eddy_checkpoint_last_bytes",
            "gauge",
            "Bytes of state the newest checkpoint wrote.",
            cp.last_bytes as f64,
        );
        node(
            &mut out,
            "eddy_checkpoint_written_bytes_total",
            "counter",
            "Bytes of state written by checkpoints of this run.",
            cp.bytes_total as f64,
        );
        // In force now: the tuner may have changed them since the start.
        node(
            &mut out,
            "eddy_checkpoint_interval_seconds",
            "gauge",
            "The checkpoint interval in force.",
            report.live.checkpoint_interval_ms as f64 / 1e3,
        );
        node(
            &mut out,
            "eddy_state_cache_bytes",
            "gauge",
            "The state cache size in force ([state] cache_bytes, per worker).",
            report.live.cache_bytes as f64,
        );
    }
    node(
        &mut out,
        "eddy_batch_size",
        "gauge",
        "The most records a source puts in one batch, in force ([node] batch_size).",
        report.live.batch_size as f64,
    );
    out
}

/// `GET /metrics`; 503 until the pipeline has started.
pub(crate) fn routes(router: Router, source: Arc<MetricsSource>) -> Router {
    router.get("/metrics", move |_| match source.render(Instant::now()) {
        Some(text) => Response {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            headers: Vec::new(),
            body: text.into_bytes(),
        },
        None => Response::text(503, "the pipeline is starting"),
    })
}
