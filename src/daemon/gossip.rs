//! The controller's driver: once a second it turns the running pipeline's
//! intrinsic counters into this node's [`NodeSummary`], publishes it in
//! the mesh payload, and feeds the member table into the [`ClusterState`];
//! every decision interval it runs the [`Planner`] on that view and logs
//! what the announcer decides. `GET /cluster` shows the view and the last
//! decision; `/metrics` adds the cluster's rates labelled by node.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::http::{Response, Router};
use crate::control::OperatorSpec;
use crate::control::announcer::{DecisionRecord, Planner};
use crate::control::controller::ControllerConfig;
use crate::control::view::{
    ClusterState, MemberDoc, NodeSummary, Observed, OperatorShape, summarize,
};
use crate::exec::Reporter;
use crate::kernel::counters::Counters;
use crate::mesh::driver::MeshNode;
use crate::mesh::membership::{MemberState, MembershipConfig};
use crate::plan::NodeKind;

/// How often a node measures and publishes its summary.
pub(crate) const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);
/// How often the planner runs (DS2's policy interval).
pub(crate) const DECISION_INTERVAL: Duration = Duration::from_secs(5);
/// Reconfiguring decisions kept for `GET /cluster`.
const DECISIONS_KEPT: usize = 16;

/// `GET /cluster`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct ClusterDoc {
    /// The node that answered.
    pub(crate) node: String,
    /// The alive member with the lowest id: it announces decisions.
    pub(crate) announcer: Option<String>,
    pub(crate) publish_interval_ms: u64,
    pub(crate) decision_interval_ms: u64,
    /// Every member this node knows (itself included), lowest id first,
    /// with its latest summary and that summary's age.
    pub(crate) members: Vec<MemberDoc>,
    /// The latest decision this node computed (a hold included).
    pub(crate) decision: Option<DecisionRecord>,
    /// Recent decisions that would reconfigure, oldest first.
    pub(crate) decisions: Vec<DecisionRecord>,
    /// Why there is no decision yet, if there is none.
    pub(crate) planner: Option<String>,
}

struct Inner {
    reporter: Option<Reporter>,
    view: ClusterState,
    /// The local graph and fingerprint of the attached pipeline.
    shapes: Vec<OperatorShape>,
    pipeline: u64,
    bins_total: u32,
    planner: Option<Planner>,
    prev: Option<(Instant, Vec<Vec<Counters>>)>,
    next_decision: Option<Instant>,
    decision: Option<DecisionRecord>,
    decisions: VecDeque<DecisionRecord>,
    planner_status: Option<String>,
    announcer: Option<String>,
}

/// What the driver thread updates and the API reads.
pub(crate) struct ClusterSource {
    node: String,
    mesh: Option<Arc<MeshNode>>,
    inner: Mutex<Inner>,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Resident memory of this process (`VmRSS`), 0 where unknown.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

impl ClusterSource {
    pub(crate) fn new(node: String, mesh: Option<Arc<MeshNode>>) -> ClusterSource {
        ClusterSource {
            inner: Mutex::new(Inner {
                reporter: None,
                view: ClusterState::new(&node),
                shapes: Vec::new(),
                pipeline: 0,
                bins_total: 0,
                planner: None,
                prev: None,
                next_decision: None,
                decision: None,
                decisions: VecDeque::new(),
                planner_status: Some("the pipeline is starting".into()),
                announcer: None,
            }),
            node,
            mesh,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Measures the running pipeline from now on (`None` between the two
    /// pipelines of a reload); the planner starts afresh with it.
    pub(crate) fn attach(&self, reporter: Option<Reporter>) {
        let mut g = self.lock();
        g.prev = None;
        g.planner = None;
        g.next_decision = None;
        if let Some(r) = &reporter {
            let plan = r.plan();
            g.shapes = plan
                .nodes
                .iter()
                .map(|n| OperatorShape {
                    id: n.id.clone(),
                    source: n.kind == NodeKind::Source,
                    upstream: n.inputs.iter().map(|i| i.from).collect(),
                })
                .collect();
            g.pipeline = super::distribute::fingerprint(plan);
            g.bins_total = plan.node.bins;
            let ops = g
                .shapes
                .iter()
                .map(|s| OperatorSpec {
                    name: s.id.clone(),
                    upstream: s.upstream.clone(),
                })
                .collect();
            g.planner = Some(Planner::new(
                ControllerConfig::default(),
                ops,
                g.pipeline,
                unix_ms(),
            ));
        }
        g.reporter = reporter;
    }

    /// One publish interval: measure, publish, read the members, and plan
    /// when a decision interval has passed.
    pub(crate) fn tick(&self, now: Instant) {
        let now_ms = unix_ms();
        let mut g = self.lock();
        let g = &mut *g;
        if let Some(r) = g.reporter.clone() {
            let counters = r.instances();
            if let Some((at, before)) = g.prev.take() {
                let interval = now.saturating_duration_since(at);
                let (workers, bins_held) = r.workers_and_bins();
                let summary = NodeSummary {
                    workers: workers as u16,
                    pipeline: g.pipeline,
                    cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as u16,
                    rss_bytes: rss_bytes(),
                    bins_held,
                    bins_total: g.bins_total,
                    epoch: 1,
                    interval_ms: interval.as_millis() as u32,
                    operators: summarize(&g.shapes, &before, &counters, interval.as_nanos() as u64),
                    truncated: 0,
                };
                if let Some(mesh) = &self.mesh {
                    let bytes = summary.encode(MembershipConfig::default().max_payload_bytes);
                    mesh.set_payload(bytes);
                }
                let addr = self.mesh.as_ref().map(|m| m.identity().addr.to_string());
                g.view.handle_local(now_ms, addr, summary);
                g.next_decision.get_or_insert(now + DECISION_INTERVAL);
            }
            g.prev = Some((now, counters));
        }
        if let Some(mesh) = &self.mesh {
            let observed: Vec<Observed> = mesh
                .members()
                .into_iter()
                .map(|m| Observed {
                    name: m.id.name.clone(),
                    addr: Some(m.id.addr.to_string()),
                    state: match m.state {
                        MemberState::Alive => "alive",
                        MemberState::Suspect => "suspect",
                        MemberState::Down => "down",
                    }
                    .into(),
                    payload: m.payload.map(|(v, bytes)| ((v.incarnation, v.seq), bytes)),
                })
                .collect();
            g.view.handle_members(now_ms, &observed);
        }
        let announcer = g.view.announcer().map(str::to_string);
        if announcer != g.announcer {
            // A node alone announces to itself: not worth a log line.
            if let (Some(a), Some(_)) = (&announcer, &self.mesh) {
                tracing::info!(
                    "decisions are announced by {a}{}",
                    if *a == self.node { " (this node)" } else { "" }
                );
            }
            g.announcer = announcer;
        }
        let due = g.next_decision.is_some_and(|t| now >= t);
        if let (true, Some(planner)) = (due, g.planner.as_mut()) {
            g.next_decision = Some(now + DECISION_INTERVAL);
            match planner.handle_tick(now_ms, &g.view) {
                Ok(record) => {
                    if record.action != "hold" {
                        if record.announced_here {
                            tracing::info!("{}", record.log_line());
                        } else {
                            tracing::debug!("{}", record.log_line());
                        }
                        if g.decisions.len() >= DECISIONS_KEPT {
                            g.decisions.pop_front();
                        }
                        g.decisions.push_back(record.clone());
                    } else {
                        tracing::debug!("{}", record.log_line());
                    }
                    g.decision = Some(record);
                    g.planner_status = None;
                }
                Err(e) => g.planner_status = Some(e),
            }
        } else if g.decision.is_none()
            && g.view
                .snapshot(now_ms)
                .iter()
                .any(|m| m.local && m.summary.is_some())
        {
            g.planner_status = Some("waiting for the first decision interval".into());
        }
    }

    pub(crate) fn doc(&self) -> ClusterDoc {
        let g = self.lock();
        ClusterDoc {
            node: self.node.clone(),
            announcer: g.view.announcer().map(str::to_string),
            publish_interval_ms: PUBLISH_INTERVAL.as_millis() as u64,
            decision_interval_ms: DECISION_INTERVAL.as_millis() as u64,
            members: g.view.snapshot(unix_ms()),
            decision: g.decision.clone(),
            decisions: g.decisions.iter().cloned().collect(),
            planner: g.planner_status.clone(),
        }
    }

    /// The cluster's rates in the Prometheus text format, labelled by
    /// `node` (the member) and `component_id`.
    pub(crate) fn render_prometheus(&self) -> String {
        render_prometheus(&self.doc())
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render_prometheus(doc: &ClusterDoc) -> String {
    let mut out = String::new();
    type Pick = fn(&crate::control::view::OperatorSummary) -> f64;
    let per_op: [(&str, &str, Pick); 6] = [
        (
            "eddy_cluster_true_processing_rate",
            "Records per second of useful time, summed over the member's workers (gossiped).",
            |o| f64::from(o.true_processing_per_s),
        ),
        (
            "eddy_cluster_true_output_rate",
            "Records produced per second of useful time, summed over the member's workers (gossiped).",
            |o| f64::from(o.true_output_per_s),
        ),
        (
            "eddy_cluster_observed_processing_rate",
            "Records taken in per second of wall time on the member (gossiped).",
            |o| f64::from(o.observed_in_per_s),
        ),
        (
            "eddy_cluster_observed_output_rate",
            "Records produced per second of wall time on the member (gossiped).",
            |o| f64::from(o.observed_out_per_s),
        ),
        (
            "eddy_cluster_backlog_records",
            "Records emitted upstream on the member and not yet taken in (gossiped).",
            |o| o.backlog as f64,
        ),
        (
            "eddy_cluster_useful_time_ratio",
            "Useful time over wall time and workers on the member (gossiped).",
            |o| f64::from(o.useful_permille) / 1000.0,
        ),
    ];
    for (name, help, pick) in per_op {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for m in &doc.members {
            let Some(s) = &m.summary else { continue };
            for o in &s.operators {
                let _ = writeln!(
                    out,
                    "{name}{{node=\"{}\",component_id=\"{}\"}} {}",
                    escape(&m.name),
                    escape(&o.id),
                    pick(o)
                );
            }
        }
    }
    type NodePick = fn(&MemberDoc) -> Option<f64>;
    let per_node: [(&str, &str, NodePick); 4] = [
        (
            "eddy_cluster_summary_age_seconds",
            "Seconds since this node got the member's latest summary.",
            |m| m.age_ms.map(|a| a as f64 / 1000.0),
        ),
        ("eddy_cluster_workers", "The member's workers.", |m| {
            m.summary.as_ref().map(|s| f64::from(s.workers))
        }),
        (
            "eddy_cluster_bins",
            "Key bins the member's workers own.",
            |m| m.summary.as_ref().map(|s| f64::from(s.bins_held)),
        ),
        (
            "eddy_cluster_resident_memory_bytes",
            "The member's resident memory.",
            |m| m.summary.as_ref().map(|s| s.rss_bytes as f64),
        ),
    ];
    for (name, help, pick) in per_node {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for m in &doc.members {
            if let Some(v) = pick(m) {
                let _ = writeln!(out, "{name}{{node=\"{}\"}} {v}", escape(&m.name));
            }
        }
    }
    out
}

/// Starts the driver thread; it ticks every [`PUBLISH_INTERVAL`] until
/// `stop` is set.
pub(crate) fn spawn(
    source: Arc<ClusterSource>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("eddy-gossip".into())
        .spawn(move || {
            let mut next = Instant::now() + PUBLISH_INTERVAL;
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now >= next {
                    source.tick(now);
                    next += PUBLISH_INTERVAL;
                    if next < now {
                        next = now + PUBLISH_INTERVAL;
                    }
                }
                std::thread::sleep(
                    next.saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(100)),
                );
            }
        })
}

/// `GET /cluster`: [`ClusterDoc`] as JSON.
pub(crate) fn routes(router: Router, source: Arc<ClusterSource>) -> Router {
    router.get("/cluster", move |_| Response::json(200, &source.doc()))
}
