//! The controller's driver: once a second it turns the running pipeline's
//! intrinsic counters into this node's [`NodeSummary`], publishes it in
//! the mesh payload, and feeds the member table into the [`ClusterState`];
//! every decision interval it runs the [`Planner`] on that view and logs
//! what the announcer decides. On the announcer of a distributed run, a
//! reconfiguring decision is executed by live migration on a thread of its
//! own (the tick never waits for it); a migration refused because another
//! holds the cluster-wide lock is retried at the next decision interval.
//! `GET /cluster` shows the view and the last decision with its outcome;
//! `/metrics` adds the cluster's rates labelled by node.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::http::{Response, Router};
use crate::config::ControllerSettings;
use crate::control::OperatorSpec;
use crate::control::announcer::{DecisionRecord, Execution, Planner};
use crate::control::view::{
    BinRates, ClusterState, InForce, MemberDoc, NodeSummary, Observed, OperatorShape,
    OperatorSummary, summarize,
};
use crate::exec::{RebalanceError, Reporter, Shared};
use crate::kernel::counters::Counters;
use crate::mesh::driver::MeshNode;
use crate::mesh::membership::{MemberState, MembershipConfig};
use crate::migrate::Strategy;
use crate::plan::NodeKind;

/// How often a node measures and publishes its summary.
pub(crate) const PUBLISH_INTERVAL: Duration = Duration::from_secs(1);

/// Reconfiguring decisions kept for `GET /cluster`.
const DECISIONS_KEPT: usize = 16;

/// Raises the sources' offered rates (`source[i]`: operator `i` is one)
/// to the forecast peak of their sum, split by what each produced (evenly
/// when none did): DS2 then sizes for the larger of the present and the
/// forecast.
fn offer_forecast(operators: &mut [OperatorSummary], source: &[bool], peak: f64) {
    let sources: Vec<usize> = (0..operators.len())
        .filter(|&i| source.get(i) == Some(&true))
        .collect();
    let total: f64 = sources
        .iter()
        .map(|&i| f64::from(operators[i].observed_out_per_s))
        .sum();
    for &i in &sources {
        let o = &mut operators[i];
        let share = if total > 0.0 {
            f64::from(o.observed_out_per_s) / total
        } else {
            1.0 / sources.len() as f64
        };
        let now = f64::from(o.offered_per_s.unwrap_or(o.observed_out_per_s));
        o.offered_per_s = Some(now.max(peak * share) as f32);
    }
}

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
    /// Every bin as the planner sees it now (empty before it can plan).
    #[serde(default)]
    pub(crate) bins: Vec<BinDoc>,
}

/// One bin in `GET /cluster`: its owner and gossiped rate and state.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct BinDoc {
    pub(crate) bin: u32,
    pub(crate) owner: String,
    pub(crate) records_per_s: f64,
    pub(crate) state_bytes: u64,
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
    /// Idle ticks of this process's cores at `prev`.
    prev_idle_ticks: u64,
    /// Records received per bin at the keyed operators, at `prev`.
    prev_bins: Vec<u64>,
    next_decision: Option<Instant>,
    decision: Option<DecisionRecord>,
    decisions: VecDeque<DecisionRecord>,
    planner_status: Option<String>,
    announcer: Option<String>,
    /// The run's migration control, `[controller]` and `[migration]
    /// strategy`.
    shared: Option<Arc<Shared>>,
    settings: ControllerSettings,
    strategy: Option<Strategy>,
    /// The last assignment in force seen (epoch, global worker per bin).
    in_force: Option<(u64, Vec<u32>)>,
    /// A decision to execute (again): made at, from epoch, target.
    pending: Option<(u64, u64, Vec<u32>)>,
    /// The tuner's forecast peak of this node's input (`[tune] apply`):
    /// DS2's source target is at least that, so decisions size the run
    /// for the load to come (Demeter through the controller).
    forecast: Option<Arc<dyn Fn() -> Option<f64> + Send + Sync>>,
}

/// What the thread executing a decision hands back.
#[derive(Default)]
struct Executor {
    running: AtomicBool,
    /// (decision made at, outcome, the epoch it started from).
    done: Mutex<Option<(u64, Execution, u64)>>,
}

/// What the driver thread updates and the API reads.
pub(crate) struct ClusterSource {
    node: String,
    mesh: Option<Arc<MeshNode>>,
    inner: Mutex<Inner>,
    executor: Arc<Executor>,
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
                prev_idle_ticks: 0,
                prev_bins: Vec::new(),
                next_decision: None,
                decision: None,
                decisions: VecDeque::new(),
                planner_status: Some("the pipeline is starting".into()),
                announcer: None,
                shared: None,
                settings: ControllerSettings::default(),
                strategy: None,
                in_force: None,
                pending: None,
                forecast: None,
            }),
            node,
            mesh,
            executor: Arc::default(),
        }
    }

    /// Takes the tuner's forecast peak of this node's input as a floor of
    /// its sources' offered rate from now on.
    pub(crate) fn set_forecast(&self, forecast: Arc<dyn Fn() -> Option<f64> + Send + Sync>) {
        self.lock().forecast = Some(forecast);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Measures the running pipeline from now on (`None` between the two
    /// pipelines of a reload); the planner starts afresh with it.
    pub(crate) fn attach(&self, reporter: Option<Reporter>) {
        let mut g = self.lock();
        g.prev = None;
        g.prev_bins = Vec::new();
        g.planner = None;
        g.next_decision = None;
        g.shared = reporter.as_ref().map(Reporter::shared);
        g.in_force = None;
        g.pending = None;
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
            g.settings = plan.node.controller.clone();
            g.strategy = Some(plan.node.migration.strategy);
            let ops = g.shapes.iter().map(OperatorShape::spec).collect();
            g.planner = Some(Planner::new(
                g.settings.planner(),
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
        if let Some(a) = g.shared.as_ref().and_then(|s| s.assignment_in_force()) {
            g.in_force = Some(a);
        }
        self.collect_execution(g);
        if let Some(r) = g.reporter.clone() {
            let counters = r.instances();
            let (received, state_bytes) = bin_totals(&r.bins(), g.bins_total as usize);
            if let Some((at, before)) = g.prev.take() {
                let interval = now.saturating_duration_since(at);
                let (workers, mut bins_held) = r.workers_and_bins();
                let shared = r.shared();
                let mut owned = r.owned_bins();
                if let Some((_, owners)) = &g.in_force {
                    let mine = shared.first_worker..shared.first_worker + shared.workers;
                    owned = owners
                        .iter()
                        .map(|&w| mine.contains(&(w as usize)))
                        .collect();
                    bins_held = owned.iter().filter(|&&o| o).count() as u32;
                }
                let bins = BinRates::measure(
                    &g.prev_bins,
                    &received,
                    &state_bytes,
                    &owned,
                    interval.as_nanos() as u64,
                );
                let mut operators =
                    summarize(&g.shapes, &before, &counters, interval.as_nanos() as u64);
                // A generator's scheduled rate is what is offered: this
                // member generates its workers' share of it.
                for (i, o) in operators.iter_mut().enumerate() {
                    if let Some(offered) = r.offered_per_s(i) {
                        o.offered_per_s = Some(offered as f32);
                    }
                }
                if let Some(peak) = g.forecast.as_ref().and_then(|f| f()) {
                    let source: Vec<bool> = r
                        .plan()
                        .nodes
                        .iter()
                        .map(|n| n.kind == crate::plan::NodeKind::Source)
                        .collect();
                    offer_forecast(&mut operators, &source, peak);
                }
                let (run, checkpoints) = r.shared().run_stamp.clone().unwrap_or_default();
                let summary = NodeSummary {
                    workers: workers as u16,
                    pipeline: g.pipeline,
                    checkpoints,
                    run,
                    cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as u16,
                    rss_bytes: super::procfs::status_bytes("self", "VmRSS").unwrap_or(0),
                    bins_held,
                    bins_total: g.bins_total,
                    epoch: g.in_force.as_ref().map_or(0, |a| a.0),
                    interval_ms: interval.as_millis() as u32,
                    operators,
                    truncated: 0,
                    bins,
                    idle_cores: super::tune_cap::idle_ticks().saturating_sub(g.prev_idle_ticks)
                        as f32
                        / 100.0
                        / interval.as_secs_f32().max(1e-3),
                };
                if let Some(mesh) = &self.mesh {
                    let bytes = summary.encode(MembershipConfig::default().max_payload_bytes);
                    mesh.set_payload(bytes);
                }
                let addr = self.mesh.as_ref().map(|m| m.identity().addr.to_string());
                g.view.handle_local(now_ms, addr, summary);
                g.next_decision
                    .get_or_insert(now + g.settings.decision_interval);
            }
            g.prev = Some((now, counters));
            g.prev_idle_ticks = super::tune_cap::idle_ticks();
            g.prev_bins = received;
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
        let in_force = self.in_force(g);
        if due {
            self.retry_pending(g);
        }
        let planned = match (due, g.planner.as_mut()) {
            (true, Some(planner)) => Some(planner.handle_tick(now_ms, &g.view, in_force.as_ref())),
            _ => None,
        };
        if let Some(planned) = planned {
            g.next_decision = Some(now + g.settings.decision_interval);
            match planned {
                Ok(mut record) => {
                    if record.announced_here && record.action != "hold" {
                        self.execute(g, &mut record);
                    }
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

    /// The mesh, when this node has one.
    pub(crate) fn mesh(&self) -> Option<&Arc<MeshNode>> {
        self.mesh.as_ref()
    }

    /// The members whose summary the view holds, with their idle cores:
    /// where the tuner finds spare capacity.
    pub(crate) fn spare(&self) -> Vec<super::tune_remote::Spare> {
        self.lock()
            .view
            .snapshot(unix_ms())
            .into_iter()
            .filter_map(|m| {
                let s = m.summary?;
                Some(super::tune_remote::Spare {
                    addr: m.addr.and_then(|a| a.parse().ok()),
                    idle_cores: s.idle_cores,
                    local: m.local,
                    alive: m.state == "alive",
                    name: m.name,
                })
            })
            .collect()
    }

    pub(crate) fn doc(&self) -> ClusterDoc {
        let g = self.lock();
        let ops: Vec<OperatorSpec> = g.shapes.iter().map(OperatorShape::spec).collect();
        let in_force = self.in_force(&g);
        let bins = match g.view.planner_view(&ops, g.pipeline, in_force.as_ref()) {
            Ok((view, names)) => (view.assignment.owner.iter().zip(&view.bins))
                .enumerate()
                .map(|(bin, (o, b))| BinDoc {
                    bin: bin as u32,
                    owner: names.get(o).cloned().unwrap_or_default(),
                    records_per_s: b.records_per_s,
                    state_bytes: b.state_bytes,
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        ClusterDoc {
            bins,
            node: self.node.clone(),
            announcer: g.view.announcer().map(str::to_string),
            publish_interval_ms: PUBLISH_INTERVAL.as_millis() as u64,
            decision_interval_ms: g.settings.decision_interval.as_millis() as u64,
            members: g.view.snapshot(unix_ms()),
            decision: g.decision.clone(),
            decisions: g.decisions.iter().cloned().collect(),
            planner: g.planner_status.clone(),
        }
    }

    /// The assignment in force by member, when this is a distributed run
    /// with migration control.
    fn in_force(&self, g: &Inner) -> Option<InForce> {
        let (epoch, owners) = g.in_force.as_ref()?;
        let members = g.shared.as_ref()?.members_in_run()?;
        let member_of = |w: u32| {
            members
                .iter()
                .find(|(_, r)| r.contains(&(w as usize)))
                .map(|(n, _)| n.clone())
        };
        let owner: Option<Vec<String>> = owners.iter().map(|&w| member_of(w)).collect();
        let mut workers_used = std::collections::BTreeMap::new();
        for (name, range) in &members {
            let used = range
                .clone()
                .filter(|&w| owners.contains(&(w as u32)))
                .count();
            workers_used.insert(name.clone(), used as u16);
        }
        Some(InForce {
            epoch: *epoch,
            owner: owner?,
            workers_used,
        })
    }

    /// Starts executing `record` (made here, reconfiguring), or says in it
    /// why it is not.
    fn execute(&self, g: &mut Inner, record: &mut DecisionRecord) {
        let skip = |detail: &str| Execution {
            status: "skipped".into(),
            detail: Some(detail.into()),
            ..Default::default()
        };
        let members = g.shared.as_ref().and_then(|s| s.members_in_run());
        let target = match (&members, &g.in_force, &record.target) {
            _ if !g.settings.execute => {
                record.execution = Some(skip("execution is off ([controller] execute = false)"));
                return;
            }
            (None, _, _) => {
                record.execution = Some(skip("a single-node run: nothing to execute"));
                return;
            }
            (Some(m), _, _) if m.len() < 2 => {
                record.execution = Some(skip("a single-node run: nothing to execute"));
                return;
            }
            (_, None, _) | (_, _, None) => {
                record.execution = Some(skip("the assignment in force is not known yet"));
                return;
            }
            (Some(m), Some((_, current)), Some(owner)) => {
                crate::control::execute::target_workers(owner, &record.workers, m, current)
            }
        };
        match target {
            Ok(t) => {
                if let Some((at, ..)) = g.pending.take() {
                    Self::set_execution(
                        g,
                        at,
                        Execution {
                            status: "superseded".into(),
                            detail: Some(format!("by the decision made at {}", record.at_ms)),
                            ..Default::default()
                        },
                    );
                }
                g.pending = Some((record.at_ms, record.epoch, t));
                record.execution = Some(Execution {
                    status: "pending".into(),
                    ..Default::default()
                });
                if let Some(e) = self.start_pending(g) {
                    record.execution = Some(e);
                }
            }
            Err(e) => record.execution = Some(skip(&e)),
        }
    }

    /// At a decision interval: a decision refused as busy runs again, if
    /// the assignment it was made from is still in force.
    fn retry_pending(&self, g: &mut Inner) {
        let Some((at, from, _)) = &g.pending else {
            return;
        };
        let (at, from) = (*at, *from);
        if g.in_force.as_ref().is_some_and(|a| a.0 != from) {
            g.pending = None;
            Self::set_execution(
                g,
                at,
                Execution {
                    status: "superseded".into(),
                    detail: Some(format!("the assignment moved on from epoch {from}")),
                    ..Default::default()
                },
            );
            return;
        }
        if let Some(e) = self.start_pending(g) {
            Self::set_execution(g, at, e);
        }
    }

    /// Runs the pending decision's migration on a thread of its own unless
    /// one runs; returns its state then.
    fn start_pending(&self, g: &mut Inner) -> Option<Execution> {
        let (at, from, target) = g.pending.clone()?;
        let (Some(shared), Some(strategy)) = (g.shared.clone(), g.strategy) else {
            return None;
        };
        let last = g
            .decisions
            .iter()
            .find(|r| r.at_ms == at)
            .and_then(|r| r.execution.clone());
        // Started already, and its outcome not collected yet.
        if last
            .as_ref()
            .is_some_and(|e| e.status != "busy" && e.status != "pending")
        {
            return None;
        }
        if self.executor.running.swap(true, Ordering::SeqCst) {
            return None;
        }
        let attempts = last.map_or(0, |e| e.attempts) + 1;
        let executor = self.executor.clone();
        let spawned = std::thread::Builder::new()
            .name("eddy-ctl-exec".into())
            .spawn(move || {
                let result = shared.rebalance(Some(target), strategy);
                let mut e = Execution {
                    attempts,
                    ..Default::default()
                };
                match result {
                    Ok(r) => {
                        tracing::info!(
                            epoch = r.epoch,
                            bins = r.bins,
                            bytes = r.bytes,
                            duration_ms = r.duration.as_secs_f64() * 1e3,
                            "decision executed: epoch {from} → {}, {} bins moved ({} bytes) in {} steps, {:.1?}",
                            r.epoch,
                            r.bins,
                            r.bytes,
                            r.steps,
                            r.duration
                        );
                        e.status = "done".into();
                        e.epoch_after = Some(r.epoch);
                        e.steps = r.steps;
                        e.bins_moved = r.bins;
                        e.bytes = r.bytes;
                        e.duration_ms = r.duration.as_secs_f64() * 1e3;
                    }
                    Err(RebalanceError::Busy(m)) => {
                        tracing::info!(
                            "decision not executed yet, retried at the next interval: {m}"
                        );
                        e.status = "busy".into();
                        e.detail = Some(m);
                    }
                    Err(RebalanceError::Failed(m)) => {
                        tracing::warn!("executing the decision from epoch {from} failed: {m}");
                        e.status = "failed".into();
                        e.detail = Some(m);
                    }
                }
                *executor.done.lock().unwrap_or_else(|e| e.into_inner()) = Some((at, e, from));
                executor.running.store(false, Ordering::SeqCst);
            });
        match spawned {
            Ok(_) => Some(Execution {
                status: "running".into(),
                attempts,
                ..Default::default()
            }),
            Err(e) => {
                self.executor.running.store(false, Ordering::SeqCst);
                Some(Execution {
                    status: "failed".into(),
                    attempts,
                    detail: Some(format!("cannot start a thread: {e}")),
                    ..Default::default()
                })
            }
        }
    }

    /// Takes a finished execution's outcome into its record.
    fn collect_execution(&self, g: &mut Inner) {
        let done = self
            .executor
            .done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some((at, e, _)) = done else {
            return;
        };
        if e.status != "busy" && g.pending.as_ref().is_some_and(|p| p.0 == at) {
            g.pending = None;
        }
        Self::set_execution(g, at, e);
    }

    fn set_execution(g: &mut Inner, at: u64, e: Execution) {
        let records = g.decisions.iter_mut().chain(g.decision.as_mut());
        for r in records.filter(|r| r.at_ms == at) {
            r.executed = e.status == "done";
            r.execution = Some(e.clone());
        }
    }

    /// The cluster's rates in the Prometheus text format, labelled by
    /// `node` (the member) and `component_id`.
    pub(crate) fn render_prometheus(&self) -> String {
        render_prometheus(&self.doc())
    }
}

/// Records received and state bytes per bin, summed over the keyed
/// components (`bins` slots each).
fn bin_totals(counters: &[crate::exec::BinCounters], bins: usize) -> (Vec<u64>, Vec<u64>) {
    let (mut received, mut bytes) = (vec![0; bins], vec![0; bins]);
    for c in counters {
        received
            .iter_mut()
            .zip(&c.received)
            .for_each(|(a, b)| *a += b);
        bytes
            .iter_mut()
            .zip(&c.state_bytes)
            .for_each(|(a, b)| *a += b);
    }
    (received, bytes)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn op(id: &str, out: f32, offered: Option<f32>) -> OperatorSummary {
        OperatorSummary {
            id: id.into(),
            instances: 1,
            true_processing_per_s: out,
            true_output_per_s: out,
            observed_in_per_s: out,
            observed_out_per_s: out,
            backlog: 0,
            useful_permille: 0,
            backpressure_permille: 0,
            offered_per_s: offered,
        }
    }

    #[test]
    fn the_forecast_peak_raises_the_sources_targets_by_their_shares() {
        let mut ops = vec![
            op("mqtt", 300.0, None),
            op("gen", 100.0, Some(1000.0)),
            op("window", 400.0, None),
        ];
        offer_forecast(&mut ops, &[true, true, false], 800.0);
        // 3/4 and 1/4 of 800; a schedule above its share stays.
        assert_eq!(ops[0].offered_per_s, Some(600.0));
        assert_eq!(ops[1].offered_per_s, Some(1000.0));
        assert_eq!(ops[2].offered_per_s, None);
        // Nothing produced yet: even shares.
        let mut idle = vec![op("a", 0.0, None), op("b", 0.0, None)];
        offer_forecast(&mut idle, &[true, true], 10.0);
        assert_eq!(idle[0].offered_per_s, Some(5.0));
    }
}
