//! The tuner beside a running pipeline (`[tune] enabled = true`): every
//! `step` it samples the input rate (records out of every source), keeps
//! it in sled, forecasts the next `horizon` with `tune::forecast`, scores
//! the earlier forecasts against what came, and asks the optimiser for the
//! configuration to run at the forecast peak. `GET /tune` shows all of it;
//! `POST /tune/observe` tells the optimiser what a profiling run measured.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::gossip::ClusterSource;
use super::http::{Response, Router};
use super::tune_apply::{AppliedView, Retry};
use super::tune_budget::Budget;
use super::tune_in_place::{InPlace, Reading};
use super::tune_profile::Recorded;
use super::tune_remote::Place;
use super::tune_store::{Measured, TuneStore};
use crate::config::{NodeConfig, ProfileOn, TuneConfig};
use crate::exec::Reporter;
use crate::plan::NodeKind;
use crate::tune::forecast::{self, Accuracy, Forecast};
use crate::tune::optimizer::{MIN_DISTANCE, Observation, Optimizer, SWITCH_COST};
use crate::tune::space;

/// Points of the initial space-filling design before the models steer.
const INITIAL_DESIGN: usize = 5;
/// Standard deviations of margin a choice must meet the goals by.
const MARGIN: f64 = 1.0;
/// The latency a run that fell behind is told to the models as, at least,
/// relative to the goal: clearly over it, however short its backlog.
const FELL_BEHIND: f64 = 2.0;
/// Without two seasons of history, AutoETS is fitted to at most this many
/// of the latest points.
const ETS_WINDOW: usize = 2000;
/// Objectives, minimised, in order.
const OBJECTIVES: [&str; 2] = ["cpu_s", "peak_memory_bytes"];

/// What `GET /tune` answers (and `eddy tune` reads).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct TuneState {
    pub(crate) step_ms: u64,
    pub(crate) horizon_ms: u64,
    pub(crate) goals: Goals,
    /// The search space, in the optimiser's order.
    pub(crate) space: Vec<Range>,
    /// The latest samples, oldest first.
    pub(crate) history: Vec<Sample>,
    /// The latest forecast, from the step after the last sample.
    pub(crate) forecast: Option<ForecastView>,
    /// How wrong the forecasts were, once their steps came.
    pub(crate) error: Option<ErrorView>,
    pub(crate) optimizer: OptimizerView,
    #[serde(default)]
    pub(crate) profiling: ProfilingView,
    #[serde(default)]
    pub(crate) apply: ApplyView,
}

/// The choice applied to the running pipeline (`[tune] apply`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ApplyView {
    pub(crate) enabled: bool,
    /// `[tune] apply_threshold`.
    pub(crate) threshold: f64,
    pub(crate) applied: Option<AppliedView>,
    /// Why the choice is not applied yet, while it waits (a migration
    /// runs).
    pub(crate) waiting: Option<String>,
}

/// The profiling runs this node starts itself.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ProfilingView {
    /// `[tune] profile`.
    pub(crate) enabled: bool,
    pub(crate) interval_ms: u64,
    pub(crate) duration_ms: u64,
    /// Runs this node made since it started, and their CPU seconds.
    pub(crate) runs: u64,
    pub(crate) cpu_s: f64,
    /// Attempts that made no run (the child failed or was starved), whose
    /// CPU the budget still counts.
    #[serde(default)]
    pub(crate) failed: u64,
    /// Why the last attempt made no run, if it did not.
    pub(crate) last_error: Option<String>,
    /// What the last run was allowed: its cores, memory and CPU time,
    /// and the peer it ran on if not this node.
    #[serde(default)]
    pub(crate) cap: Option<String>,
    /// `[tune] profile_on`: `auto`, `local` or `peers`.
    #[serde(default)]
    pub(crate) on: String,
    /// Of `runs`, those made on peers.
    #[serde(default)]
    pub(crate) runs_on_peers: u64,
    /// Where the last run was made: `local` or a peer's name.
    #[serde(default)]
    pub(crate) last_place: Option<String>,
    /// The runs this node made for peers.
    #[serde(default)]
    pub(crate) served: super::tune_remote::ServedView,
    /// `[tune] profile_budget`, and the share of this node's CPU the runs
    /// took over the last season (those served to peers included).
    #[serde(default)]
    pub(crate) budget: f64,
    #[serde(default)]
    pub(crate) used: f64,
    /// Why no run starts now, while the budget holds them back.
    #[serde(default)]
    pub(crate) held: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Goals {
    pub(crate) latency_p99_ms: f64,
    pub(crate) max_recovery_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Range {
    pub(crate) name: String,
    pub(crate) min: u64,
    pub(crate) max: u64,
    /// `count`, `bytes` or `ms`.
    pub(crate) unit: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Sample {
    pub(crate) unix_ms: u64,
    /// Records per second from all sources over the step before.
    pub(crate) rate: f64,
    /// What the forecast of the step before predicted for this one.
    pub(crate) predicted: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ForecastView {
    /// The time of the first point; the others follow every step.
    pub(crate) from_unix_ms: u64,
    /// `mstl+ets`, `ets` or `last value`.
    pub(crate) model: String,
    pub(crate) points: Vec<f64>,
    pub(crate) peak: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ErrorView {
    /// Mean absolute percentage error of the forecasts, over `scored`
    /// forecast steps.
    pub(crate) model_mape_pct: f64,
    /// The same of the last-value forecast, the baseline to beat.
    pub(crate) last_value_mape_pct: f64,
    pub(crate) scored: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ObservationView {
    #[serde(flatten)]
    pub(crate) measured: Measured,
    /// Met both goals.
    pub(crate) feasible: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct OptimizerView {
    pub(crate) observations: Vec<ObservationView>,
    /// Indices into `observations` of the Pareto front (feasible runs no
    /// other beats in both CPU per record/s and memory), by the first.
    pub(crate) front: Vec<usize>,
    /// The settings the next profiling run should try.
    pub(crate) next_profile: Option<BTreeMap<String, u64>>,
    /// Why those: a point of the initial design, a challenger of the
    /// choice, or the optimiser's proposal.
    #[serde(default)]
    pub(crate) next_profile_why: Option<String>,
    pub(crate) choice: Option<ChoiceView>,
    /// Why this choice, or why there is none.
    pub(crate) why: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ChoiceView {
    pub(crate) settings: BTreeMap<String, u64>,
    /// The rate it is chosen for: the forecast peak.
    pub(crate) rate: f64,
    pub(crate) expected_cpu_s: f64,
    pub(crate) expected_peak_memory_bytes: f64,
    /// Expected value of each goal, margin included.
    pub(crate) expected_latency_p99_ms: f64,
    pub(crate) expected_recovery_s: f64,
}

/// The running tuner: its thread stops when this is dropped.
pub(crate) struct TuneService {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    profiler: Option<std::thread::JoinHandle<()>>,
}

pub(crate) struct Shared {
    config: TuneConfig,
    /// The running pipeline, with a generation that changes on reload (its
    /// counters start again from zero).
    reporter: Mutex<(u64, Option<Reporter>)>,
    inner: Mutex<Inner>,
}

struct Inner {
    store: TuneStore,
    optimizer: Optimizer,
    measured: Vec<Measured>,
    accuracy: Accuracy,
    /// The latest forecast and the step it was made at.
    forecast: Option<(u64, Forecast)>,
    /// One-step-ahead predictions of recent steps, by unix ms.
    predicted: VecDeque<(u64, f64)>,
    next_profile: Option<Vec<f64>>,
    /// Why `next_profile` (see [`OptimizerView::next_profile_why`]).
    next_why: String,
    /// The cache the last profiling run was raised to at least
    /// (`raise_cache_as_applied`): the optimiser proposes from there up.
    cache_floor: Option<u64>,
    choice: Option<ChoiceView>,
    why: String,
    profiling: ProfilingView,
    /// The choice in force, and the pipeline generation it was applied
    /// to (a reload starts a pipeline from its file: it is applied again).
    applied: Option<(u64, AppliedView)>,
    apply_waiting: Option<String>,
}

impl TuneService {
    /// Opens the tuner's store in the data dir and starts its thread, and
    /// with `profile` the profiling runs' (of the pipeline in `pipeline`).
    pub(crate) fn start(
        node: &NodeConfig,
        pipeline: &Path,
        cluster: Arc<ClusterSource>,
    ) -> Result<TuneService, String> {
        let config = node.tune.clone();
        if config.profile && config.profile_on == ProfileOn::Peers && cluster.mesh().is_none() {
            return Err(
                "[tune] profile_on = \"peers\" needs a [mesh] section: without one this node has \
                 no peers to profile on (use \"auto\" or \"local\")"
                    .into(),
            );
        }
        let store = TuneStore::open(&node.data_dir)?;
        let mut optimizer =
            Optimizer::new(config.settings.len(), true, 2, INITIAL_DESIGN, 1).log_objectives();
        let mut measured = Vec::new();
        for m in store.observations().into_iter().chain(store.in_place()) {
            // A run outside a range changed since is kept on disk, but the
            // models fit the space as it is configured now.
            match observation(&config, &m) {
                Ok(o) => {
                    if optimizer.observe(o).is_ok() {
                        measured.push(m);
                    }
                }
                Err(e) => tracing::warn!("tuner: a stored profiling run is left out: {e}"),
            }
        }
        optimizer.skip_design(measured.iter().filter(|m| !m.in_place).count());
        let accuracy = store.accuracy();
        let kept = store.rate_count();
        tracing::info!(
            "tuner: {kept} rate samples and {} profiling runs restored; sampling every {} ms",
            measured.len(),
            config.step_ms
        );
        let mut inner = Inner {
            store,
            optimizer,
            measured,
            accuracy,
            forecast: None,
            predicted: VecDeque::new(),
            next_profile: None,
            next_why: String::new(),
            cache_floor: None,
            choice: None,
            why: String::new(),
            profiling: ProfilingView {
                enabled: config.profile,
                interval_ms: config.profile_interval_ms,
                duration_ms: config.profile_duration_ms,
                on: match config.profile_on {
                    ProfileOn::Auto => "auto",
                    ProfileOn::Local => "local",
                    ProfileOn::Peers => "peers",
                }
                .into(),
                budget: config.profile_budget,
                ..ProfilingView::default()
            },
            applied: None,
            apply_waiting: None,
        };
        inner.decide(&config);
        let shared = Arc::new(Shared {
            config,
            reporter: Mutex::new((0, None)),
            inner: Mutex::new(inner),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name("eddy-tune".into())
                .spawn(move || sample_loop(&shared, &stop))
                .map_err(|e| format!("tuner: cannot start its thread: {e}"))?
        };
        let mut service = TuneService {
            shared: shared.clone(),
            stop: stop.clone(),
            thread: Some(thread),
            profiler: None,
        };
        if shared.config.profile {
            let pipeline = pipeline.to_path_buf();
            let scratch = node.data_dir.join("tune-profile");
            let h = std::thread::Builder::new()
                .name("eddy-profile".into())
                .spawn(move || profile_loop(&shared, &stop, &pipeline, scratch, &cluster))
                .map_err(|e| format!("tuner: cannot start the profiling thread: {e}"))?;
            service.profiler = Some(h);
        }
        Ok(service)
    }

    pub(crate) fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Samples `reporter`'s sources from now on (`None` between two
    /// pipelines of a reload).
    pub(crate) fn attach(&self, reporter: Option<Reporter>) {
        let mut r = lock(&self.shared.reporter);
        r.0 += 1;
        r.1 = reporter;
    }
}

impl Drop for TuneService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in [self.thread.take(), self.profiler.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Shared {
    /// The forecast peak of this node's input, with `[tune] apply` (the
    /// controller then sizes the run for it).
    pub(crate) fn forecast_peak(&self) -> Option<f64> {
        if !self.config.apply {
            return None;
        }
        let inner = lock(&self.inner);
        inner.forecast.as_ref().map(|(_, f)| f.peak())
    }
}

/// Samples on the step's wall-clock grid, so that a sample's step number
/// (unix ms / step) is consecutive and survives a restart.
fn sample_loop(shared: &Shared, stop: &AtomicBool) {
    let step = shared.config.step_ms;
    // (generation, when, records out of each source so far)
    let mut baseline: Option<(u64, Instant, Vec<u64>)> = None;
    let mut in_place = InPlace::new(Duration::from_millis(shared.config.profile_duration_ms));
    while !stop.load(Ordering::Relaxed) {
        let now = unix_ms();
        let next = (now / step + 1) * step;
        let wait = Duration::from_millis(next - now);
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
        }
        let (generation, totals, offered, latency_us) = {
            let r = lock(&shared.reporter);
            let Some(reporter) = r.1.clone() else {
                baseline = None;
                continue;
            };
            let report = reporter.report();
            let (totals, offered): (Vec<u64>, Vec<Option<f64>>) = report
                .components
                .iter()
                .enumerate()
                .filter(|(_, c)| c.kind == NodeKind::Source)
                .map(|(i, c)| (c.counters.records_out, reporter.offered_per_s(i)))
                .unzip();
            // Only measures in place read the latency (merged per step).
            let latency = shared
                .config
                .apply
                .then(|| sinks_latency(&report.components))
                .flatten();
            (r.0, totals, offered, latency)
        };
        let records = totals.iter().sum();
        let at = Instant::now();
        // The demand: what the sources gave, or what a paced generator is
        // offered when it is more. A pipeline that falls behind (settings
        // too lean for the rate) takes less than it is offered, and a rate
        // forecast from its output alone would keep those settings.
        let rate = match &baseline {
            Some((g, t, before)) if *g == generation && before.len() == totals.len() => {
                let secs = at.duration_since(*t).as_secs_f64().max(1e-3);
                Some(
                    totals
                        .iter()
                        .zip(before)
                        .zip(&offered)
                        .map(|((&now, &then), offered)| {
                            let out = now.saturating_sub(then) as f64 / secs;
                            offered.map_or(out, |o| o.max(out))
                        })
                        .sum(),
                )
            }
            _ => None,
        };
        baseline = Some((generation, at, totals));
        if let Some(rate) = rate {
            let due = {
                let mut inner = lock(&shared.inner);
                if let Err(e) = inner.sample(&shared.config, next, rate) {
                    tracing::warn!("{e}");
                }
                inner.apply_due(&shared.config, generation)
            };
            if let Some(choice) = due {
                apply(shared, generation, &choice);
            }
            keep_cache(shared, generation);
        }
        measure_in_place(shared, &mut in_place, generation, records, latency_us);
    }
}

/// Every sink's end-to-end latency so far, in one histogram.
fn sinks_latency(components: &[crate::exec::ComponentReport]) -> Option<Histogram<u64>> {
    let mut sinks = components.iter().filter_map(|c| c.latency_us.as_ref());
    let mut all = sinks.next()?.clone();
    for h in sinks {
        all.add(h).ok()?;
    }
    Some(all)
}

/// Reads the process and its pipeline for `meter`, and tells the
/// optimiser what a span with the tuner's settings in force measured.
fn measure_in_place(
    shared: &Shared,
    meter: &mut InPlace,
    generation: u64,
    records: u64,
    latency_us: Option<Histogram<u64>>,
) {
    if !shared.config.apply {
        return;
    }
    let me = std::process::id();
    let (Ok(cpu_s), Ok(rss_bytes)) = (
        super::procfs::cpu_seconds(me),
        super::procfs::status_bytes(&me.to_string(), "VmRSS"),
    ) else {
        return;
    };
    let applied = lock(&shared.inner)
        .applied
        .as_ref()
        .filter(|(g, _)| *g == generation)
        .map(|(_, a)| a.settings.clone());
    let reading = Reading {
        generation,
        applied,
        cpu_s,
        records,
        rss_bytes,
        latency_us,
    };
    if let Some(m) = meter.read(Instant::now(), reading)
        && let Err(e) = lock(&shared.inner).observe_in_place(&shared.config, m)
    {
        tracing::warn!("tuner: a measure of the pipeline in place is left out: {e}");
    }
}

/// Between two choices, the cache the tuner set stays ahead of the open
/// state as it grows (see `tune_apply::keep_cache_above_state`).
fn keep_cache(shared: &Shared, generation: u64) {
    let set_by_tuner = lock(&shared.inner)
        .applied
        .as_ref()
        .is_some_and(|(g, a)| *g == generation && a.settings.contains_key("cache_bytes"));
    let Some(reporter) = running(shared, generation).filter(|_| set_by_tuner) else {
        return;
    };
    if reporter.plan().node.checkpoint_interval_ms.is_none() {
        return;
    }
    if let Some((bytes, how)) = super::tune_apply::keep_cache_above_state(&reporter) {
        tracing::info!("tuner: cache_bytes {how}");
        if let Some((_, a)) = &mut lock(&shared.inner).applied {
            a.settings.insert("cache_bytes".into(), bytes);
            a.outcome.insert("cache_bytes".into(), how);
        }
    }
}

/// The pipeline of `generation`, if it still runs.
fn running(shared: &Shared, generation: u64) -> Option<Reporter> {
    let r = lock(&shared.reporter);
    r.1.clone().filter(|_| r.0 == generation)
}

/// Applies `choice` to the pipeline of `generation`, if it still runs.
fn apply(shared: &Shared, generation: u64, choice: &ChoiceView) {
    let Some(reporter) = running(shared, generation) else {
        return;
    };
    let outcome = super::tune_apply::apply(&reporter, &choice.settings);
    let mut inner = lock(&shared.inner);
    match outcome {
        Ok(outcome) => {
            let applied = AppliedView {
                at_unix_ms: unix_ms(),
                rate: choice.rate,
                settings: choice.settings.clone(),
                outcome,
            };
            tracing::info!(
                "tuner: applied the choice for a forecast peak of {:.0} records/s: {}",
                choice.rate,
                applied
                    .outcome
                    .iter()
                    .map(|(name, how)| format!(
                        "{name} = {} ({how})",
                        applied.settings.get(name).copied().unwrap_or_default()
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            inner.applied = Some((generation, applied));
            inner.apply_waiting = None;
        }
        Err(Retry(why)) => {
            tracing::debug!("tuner: the choice waits: {why}");
            inner.apply_waiting = Some(why);
        }
    }
}

/// Makes `profile` on this node: what it measured, its cap, and no peer.
fn profile_here(
    shared: &Shared,
    profile: &super::tune_profile::Profile<'_>,
    stop: &AtomicBool,
) -> Result<(Measured, String, Option<String>), String> {
    let workers = profile.settings.get("workers").copied().unwrap_or(1) as usize;
    let memory = shared.config.profile_memory_bytes;
    let cap = super::tune_cap::Cap::for_run(workers, memory, profile.duration);
    lock(&shared.inner).profiling.cap = Some(cap.describe());
    super::tune_profile::run(profile, &cap, stop).map(|m| (m, cap.describe(), None))
}

/// A profiling run every `profile_interval` (from start to start) of the
/// settings the optimiser proposes, at the forecast peak, where
/// `[tune] profile_on` places it (`tune_remote::choose`).
fn profile_loop(
    shared: &Shared,
    stop: &AtomicBool,
    pipeline: &Path,
    scratch: PathBuf,
    cluster: &ClusterSource,
) {
    let config = &shared.config;
    let interval = Duration::from_millis(config.profile_interval_ms);
    let mut next = Instant::now() + interval.min(Duration::from_secs(60));
    // This process's CPU seconds and its reaped children's (the runs);
    // without /proc the budget is not kept.
    let me = std::process::id();
    let cpu = || {
        super::procfs::cpu_seconds(me)
            .and_then(|own| Ok((own, super::procfs::children_cpu_seconds(me)?)))
            .ok()
    };
    let mut budget = cpu().map(|(own, children)| {
        let season = Duration::from_millis(config.season_ms);
        Budget::new(config.profile_budget, season, Instant::now(), own, children)
    });
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() < next {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
            continue;
        }
        next = Instant::now() + interval;
        if let (Some(b), Some((own, children))) = (budget.as_mut(), cpu()) {
            let verdict = b.check(Instant::now(), own, children);
            let mut inner = lock(&shared.inner);
            inner.profiling.used = verdict.used;
            inner.profiling.held = verdict.held;
            if inner.profiling.held.is_some() {
                continue;
            }
        }
        let job = {
            let inner = lock(&shared.inner);
            let rate = inner.forecast.as_ref().map(|(_, f)| f.peak());
            let recent = inner.store.rates(4);
            let now = recent.iter().map(|&(_, r)| r).sum::<f64>() / recent.len().max(1) as f64;
            inner.next_profile.as_ref().zip(rate).map(|(x, r)| {
                (
                    named(config, &space::denormalise(&config.settings, x)),
                    r,
                    now,
                )
            })
        };
        let Some((mut settings, rate, now)) = job else {
            continue;
        };
        let floor = raise_cache_as_applied(shared, config, &mut settings, rate / now.max(1.0));
        lock(&shared.inner).cache_floor = floor;
        if rate < 1.0 {
            lock(&shared.inner).profiling.last_error =
                Some("the forecast rate is below 1 record/s: nothing to profile at".into());
            continue;
        }
        // The records each non-generator source saw lately, to replay.
        let recorded: BTreeMap<String, Recorded> = lock(&shared.reporter)
            .1
            .as_ref()
            .map(|r| {
                r.shared()
                    .recorders
                    .iter()
                    .map(|(id, rec)| (id.clone(), Recorded::from(rec.recording())))
                    .collect()
            })
            .unwrap_or_default();
        let profile = super::tune_profile::Profile {
            pipeline,
            settings: &settings,
            rate,
            duration: Duration::from_millis(config.profile_duration_ms),
            scratch: scratch.clone(),
            recorded: &recorded,
        };
        let place = match cluster.mesh() {
            Some(_) => super::tune_remote::choose(config.profile_on, &cluster.spare()),
            None => Ok(Place::Local),
        };
        let outcome = match place {
            Err(e) => Err(e),
            Ok(Place::Local) => profile_here(shared, &profile, stop),
            Ok(Place::Peer { name, addr }) => {
                let mesh = cluster.mesh().expect("peers are chosen only with a mesh");
                let memory = config.profile_memory_bytes;
                match super::tune_remote::ask(mesh, (&name, addr), &profile, memory, stop) {
                    Ok((m, cap)) => Ok((m, cap, Some(name))),
                    // On its own cores, rather than not at all.
                    Err(e)
                        if config.profile_on == ProfileOn::Auto
                            && !stop.load(Ordering::Relaxed) =>
                    {
                        tracing::info!("tuner: {e}; profiling on this node instead");
                        profile_here(shared, &profile, stop)
                    }
                    Err(e) => Err(e),
                }
            }
        };
        let mut inner = lock(&shared.inner);
        let told = outcome.and_then(|(m, cap, peer)| {
            let cpu = m.cpu_s;
            inner.observe(config, m).map(|_| (cpu, cap, peer))
        });
        match told {
            Ok((cpu, cap, peer)) => {
                inner.profiling.runs += 1;
                inner.profiling.cpu_s += cpu;
                inner.profiling.last_error = None;
                inner.profiling.cap = Some(cap);
                inner.profiling.runs_on_peers += u64::from(peer.is_some());
                inner.profiling.last_place = Some(peer.unwrap_or_else(|| "local".into()));
            }
            Err(e) => {
                if !stop.load(Ordering::Relaxed) {
                    tracing::warn!("tuner: no profiling run: {e}");
                }
                inner.profiling.failed += 1;
                inner.profiling.last_error = Some(e);
            }
        }
    }
}

/// A profiling run measures settings as they would run: applied, the
/// cache is kept above the open state (`tune_apply::cache_floor`) where a
/// cache the state outgrows sends bins through sled on every batch. A
/// run with a smaller one measured that thrashing instead (in `eddy bench
/// tune` one worker fell behind at half the peak with a 32 MiB cache), and
/// the models took it against the workers and batch size it ran with.
/// The open state is scaled by `scale`, the run's rate over the mean of
/// the last samples: more than it will hold where keys repeat, which costs nothing,
/// as a cache is a limit, not an allocation. At most half the run's
/// `profile_memory`, where spilling is what lets it run at all. Returns
/// the floor, when there is one.
fn raise_cache_as_applied(
    shared: &Shared,
    config: &TuneConfig,
    settings: &mut BTreeMap<String, u64>,
    scale: f64,
) -> Option<u64> {
    let range = config.settings.iter().find(|s| s.name == "cache_bytes")?;
    let reporter = lock(&shared.reporter);
    let (Some(reporter), Some(cache)) = (reporter.1.as_ref(), settings.get_mut("cache_bytes"))
    else {
        return None;
    };
    let floor = super::tune_apply::cache_floor(reporter, scale.max(1.0))?;
    let floor = floor.min(range.max.min(config.profile_memory_bytes / 2));
    *cache = (*cache).max(floor);
    Some(floor)
}

impl Inner {
    /// A new sample at `unix_ms`: store it, score the forecasts made for
    /// it, forecast again and choose again.
    fn sample(&mut self, config: &TuneConfig, unix_ms: u64, rate: f64) -> Result<(), String> {
        let step = unix_ms / config.step_ms;
        self.store.push_rate(unix_ms, rate)?;
        if let Some((at, f)) = &self.forecast
            && *at + 1 == step
            && let Some(&p) = f.point.first()
        {
            self.predicted.push_back((unix_ms, p));
            while self.predicted.len() > 1000 {
                self.predicted.pop_front();
            }
        }
        self.accuracy.actual(step, rate);
        let period = (config.season_ms / config.step_ms) as usize;
        let have = self.store.rate_count();
        let window = if have >= 2 * period {
            have.min(3 * period)
        } else {
            have.min(ETS_WINDOW)
        };
        let history: Vec<f64> = self
            .store
            .rates(window)
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        let f = forecast::forecast(&history, period, config.horizon_steps());
        self.accuracy.forecasted(step, rate, &f);
        self.store.save_accuracy(&self.accuracy)?;
        self.forecast = Some((step, f));
        self.decide(config);
        Ok(())
    }

    /// The choice to apply now, if any (`tune_apply::due`).
    fn apply_due(&self, config: &TuneConfig, generation: u64) -> Option<ChoiceView> {
        let choice = self.choice.as_ref().filter(|_| config.apply)?;
        super::tune_apply::due(
            choice,
            self.applied.as_ref(),
            generation,
            &self.measured,
            config.apply_threshold,
            config.latency_p99_ms,
        )
    }

    /// The settings applied last, normalised, while they are all within
    /// the [tune] ranges.
    fn in_force(&self, config: &TuneConfig) -> Option<Vec<f64>> {
        let (_, applied) = self.applied.as_ref()?;
        let values: Option<Vec<u64>> = config
            .settings
            .iter()
            .map(|s| applied.settings.get(s.name).copied())
            .collect();
        space::normalise(&config.settings, &values?).ok()
    }

    /// The least value each setting runs at in a profiling run,
    /// normalised: the cache's floor, every other setting's minimum.
    fn floor(&self, config: &TuneConfig) -> Vec<f64> {
        let values: Vec<u64> = config
            .settings
            .iter()
            .map(|s| match self.cache_floor {
                Some(f) if s.name == "cache_bytes" => f.clamp(s.min, s.max),
                _ => s.min,
            })
            .collect();
        space::normalise(&config.settings, &values).unwrap_or_default()
    }

    /// The configuration for the forecast peak, or why there is none.
    fn decide(&mut self, config: &TuneConfig) {
        let peak = self.forecast.as_ref().map(|(_, f)| f.peak());
        let Some(peak) = peak else {
            self.choice = None;
            self.why =
                "no forecast yet: the first rate samples come one step after the pipeline starts"
                    .into();
            return;
        };
        // The next run to profile: at the rate the pipeline is heading for,
        // a challenger of the choice (below) every other run.
        let floor = self.floor(config);
        let challenge = self.next_profile.is_none() && self.optimizer.challenge_due();
        if self.next_profile.is_none() && !challenge {
            self.next_profile = Some(self.suggested(peak, &floor));
        }
        let n = self.measured.len();
        if n < 2 {
            if challenge {
                self.next_profile = Some(self.suggested(peak, &floor));
            }
            self.choice = None;
            let how = if config.profile {
                format!(
                    "this node makes one every {} ms",
                    config.profile_interval_ms
                )
            } else {
                "[tune] profile = false: POST /tune/observe tells them one".to_string()
            };
            self.why = format!(
                "{n} profiling run{} so far; the models need at least 2 ({how})",
                if n == 1 { "" } else { "s" }
            );
            return;
        }
        let goals = format!(
            "latency_p99_ms {} and max_recovery_s {}",
            config.latency_p99_ms, config.max_recovery_s
        );
        let in_force = self.in_force(config);
        let chosen = match self
            .optimizer
            .choose(space::rate(peak), MARGIN, in_force.as_deref())
        {
            Some(c) if c.in_force => {
                self.why = format!(
                    "the settings in force: the models expect them to meet {goals} with {MARGIN} standard \
                     deviation of margin at the forecast peak of {peak:.0} records/s, from {n} profiling runs, \
                     and expect no other settings to cost {SWITCH_COST} less (the logarithms of CPU and memory, each \
                     with the margin, summed), which a change would have to be worth"
                );
                Some(c)
            }
            Some(c) => {
                self.why = format!(
                    "the least CPU and memory (the logarithms of each with the margin, summed) of the settings the models expect to meet \
                     {goals} with {MARGIN} standard deviation of margin at the forecast peak of {peak:.0} \
                     records/s, from {n} profiling runs"
                );
                Some(c)
            }
            // Keeping what was chosen for a lower rate would run the peak
            // on settings the models expect to miss it.
            None => self.optimizer.closest(space::rate(peak), MARGIN).inspect(|_| {
                self.why = format!(
                    "no settings in the [tune] ranges are expected to meet {goals} with {MARGIN} standard \
                     deviation of margin at the forecast peak of {peak:.0} records/s ({n} profiling runs), \
                     so these are the ones expected to come closest; widen the ranges or relax the goals"
                );
            }),
        };
        if challenge {
            let rate = space::rate(peak);
            let challenger = chosen
                .as_ref()
                .and_then(|c| self.optimizer.challenger(rate, &floor, c));
            self.next_profile = Some(match (challenger, &chosen) {
                (Some(x), Some(c)) => {
                    self.next_why = challenge_why(config, &c.x, &x);
                    tracing::debug!("tuner: the next run is {}", self.next_why);
                    x
                }
                _ => self.suggested(peak, &floor),
            });
        }
        let applied = self.applied.as_ref().map(|(_, a)| &a.settings);
        self.choice = chosen.map(|c| ChoiceView {
            settings: match applied {
                Some(settings) if c.in_force => settings.clone(),
                _ => named(config, &space::denormalise(&config.settings, &c.x)),
            },
            rate: peak,
            expected_cpu_s: c.objectives[0] * peak.max(1.0),
            expected_peak_memory_bytes: c.objectives[1],
            expected_latency_p99_ms: c.constraints[0] * config.latency_p99_ms,
            expected_recovery_s: c.constraints[1] * config.max_recovery_s,
        });
    }

    /// The optimiser's next proposal at the forecast `peak`, saying why.
    fn suggested(&mut self, peak: f64, floor: &[f64]) -> Vec<f64> {
        let design = self.optimizer.design_left();
        let x = self.optimizer.suggest(space::rate(peak), floor);
        self.next_why = if design > 0 {
            format!(
                "a point of the initial space-filling design ({} more after it)",
                design - 1
            )
        } else {
            format!(
                "where the models expect the most improvement at the forecast peak of {peak:.0} records/s, \
                 for one weighting of CPU against memory (ParEGO)"
            )
        };
        x
    }

    fn view(&mut self, config: &TuneConfig) -> TuneState {
        let tail = (4 * config.horizon_steps()).clamp(60, 1000);
        let history = self
            .store
            .rates(tail)
            .into_iter()
            .map(|(unix_ms, rate)| Sample {
                unix_ms,
                rate,
                predicted: self
                    .predicted
                    .iter()
                    .find(|(t, _)| *t == unix_ms)
                    .map(|&(_, p)| p),
            })
            .collect();
        let forecast = self.forecast.as_ref().map(|(at, f)| ForecastView {
            from_unix_ms: (at + 1) * config.step_ms,
            model: f.model.name().to_string(),
            points: f.point.clone(),
            peak: f.peak(),
        });
        let error = self.accuracy.mape().map(|(m, n)| ErrorView {
            model_mape_pct: m,
            last_value_mape_pct: n,
            scored: self.accuracy.scored(),
        });

        let observations = self
            .measured
            .iter()
            .zip(self.optimizer.observations())
            .map(|(m, o)| ObservationView {
                measured: m.clone(),
                feasible: o.feasible(),
            })
            .collect();
        let all = self.optimizer.observations();
        let front = self
            .optimizer
            .front()
            .into_iter()
            .filter_map(|f| all.iter().position(|o| std::ptr::eq(o, f)))
            .collect();
        TuneState {
            step_ms: config.step_ms,
            horizon_ms: config.horizon_ms,
            goals: Goals {
                latency_p99_ms: config.latency_p99_ms,
                max_recovery_s: config.max_recovery_s,
            },
            space: config
                .settings
                .iter()
                .map(|s| Range {
                    name: s.name.to_string(),
                    min: s.min,
                    max: s.max,
                    unit: match s.unit {
                        crate::config::Unit::Count => "count",
                        crate::config::Unit::Bytes => "bytes",
                        crate::config::Unit::Millis => "ms",
                    }
                    .to_string(),
                })
                .collect(),
            history,
            forecast,
            error,
            optimizer: OptimizerView {
                observations,
                front,
                next_profile: self
                    .next_profile
                    .as_ref()
                    .map(|x| named(config, &space::denormalise(&config.settings, x))),
                next_profile_why: self.next_profile.as_ref().map(|_| self.next_why.clone()),
                choice: self.choice.clone(),
                why: self.why.clone(),
            },
            profiling: ProfilingView {
                served: super::tune_remote::served(),
                ..self.profiling.clone()
            },
            apply: ApplyView {
                enabled: config.apply,
                threshold: config.apply_threshold,
                applied: self.applied.as_ref().map(|(_, a)| a.clone()),
                waiting: self.apply_waiting.clone(),
            },
        }
    }

    /// A measure of the pipeline in place: it takes the place of an
    /// earlier one of the same settings at about the same rate (the same
    /// step of `MIN_DISTANCE` on the rate's scale), so that a day of
    /// measures adds a few points to the models, not thousands.
    fn observe_in_place(&mut self, config: &TuneConfig, m: Measured) -> Result<(), String> {
        let o = observation(config, &m)?;
        let key = in_place_key(&m);
        let earlier = self
            .measured
            .iter()
            .position(|e| e.in_place && in_place_key(e) == key);
        match earlier {
            Some(i) => {
                self.optimizer.replace(i, o)?;
                self.measured[i] = m.clone();
            }
            None => {
                self.optimizer.observe(o)?;
                self.measured.push(m.clone());
            }
        }
        self.store.put_in_place(&key, &m)?;
        tracing::debug!(
            "tuner: in place at {:.0} records/s: {:.2} CPU s per {} ms, {} MiB, p99 {:.1} ms",
            m.rate,
            m.cpu_s,
            config.profile_duration_ms,
            m.peak_memory_bytes as u64 >> 20,
            m.latency_p99_ms
        );
        self.next_profile = None;
        self.decide(config);
        Ok(())
    }

    fn observe(&mut self, config: &TuneConfig, m: Measured) -> Result<usize, String> {
        let o = observation(config, &m)?;
        self.optimizer.observe(o)?;
        self.store.push_observation(&m)?;
        self.measured.push(m);
        self.next_profile = None;
        self.decide(config);
        Ok(self.measured.len())
    }
}

/// Why a challenger `to` of the choice `from` (both normalised): which
/// setting it moves, when it moves one.
fn challenge_why(config: &TuneConfig, from: &[f64], to: &[f64]) -> String {
    let from = space::denormalise(&config.settings, from);
    let to = space::denormalise(&config.settings, to);
    let moved: Vec<usize> = (0..to.len())
        .filter(|&i| from.get(i) != to.get(i))
        .collect();
    match moved[..] {
        [i] => {
            let s = &config.settings[i];
            format!(
                "the choice with one setting moved, {} from {} to {}, to find out what that saves",
                s.name,
                crate::config::tune_fmt(from[i], s.unit),
                crate::config::tune_fmt(to[i], s.unit)
            )
        }
        _ => {
            "the settings the models expect to cost least that no run has tried, to test the choice"
                .into()
        }
    }
}

/// Which in-place measures replace each other: the same settings, at a
/// rate in the same step of `MIN_DISTANCE` on the models' scale of rates.
fn in_place_key(m: &Measured) -> String {
    let step = (space::rate(m.rate) / MIN_DISTANCE).floor() as u64;
    let settings: Vec<String> = m.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{} @{step}", settings.join(","))
}

fn named(config: &TuneConfig, values: &[u64]) -> BTreeMap<String, u64> {
    config
        .settings
        .iter()
        .zip(values)
        .map(|(s, &v)| (s.name.to_string(), v))
        .collect()
}

/// A measured run as the optimiser sees it, or why it cannot.
fn observation(config: &TuneConfig, m: &Measured) -> Result<Observation, String> {
    let mut values = Vec::new();
    for s in &config.settings {
        match m.settings.get(s.name) {
            Some(&v) => values.push(v),
            None => return Err(format!("`settings` has no `{}`", s.name)),
        }
    }
    if let Some(extra) = m
        .settings
        .keys()
        .find(|k| !config.settings.iter().any(|s| s.name == k.as_str()))
    {
        return Err(format!(
            "`settings` has `{extra}`, which [tune] does not search"
        ));
    }
    if m.recovery_s.is_none() && !m.in_place {
        return Err("`recovery_s` is missing: a profiling run times its recovery".into());
    }
    let numbers = [
        ("rate", m.rate),
        (OBJECTIVES[0], m.cpu_s),
        (OBJECTIVES[1], m.peak_memory_bytes),
        ("latency_p99_ms", m.latency_p99_ms),
        ("recovery_s", m.recovery_s.unwrap_or_default()),
    ];
    if let Some((name, v)) = numbers.iter().find(|(_, v)| !v.is_finite() || *v < 0.0) {
        return Err(format!("`{name}` must be a number of at least 0, not {v}"));
    }
    if let Some((name, v)) = numbers[1..3].iter().find(|(_, v)| *v <= 0.0) {
        return Err(format!(
            "`{name}` must be above 0, not {v}: every run takes some CPU and memory"
        ));
    }
    let mut x = space::normalise(&config.settings, &values)?;
    x.push(space::rate(m.rate));
    let mut latency = m.latency_p99_ms / config.latency_p99_ms;
    if m.fell_behind {
        // Whatever the goal, a backlog that grows misses it in the end.
        latency = latency.max(FELL_BEHIND);
    }
    Ok(Observation {
        x,
        // CPU per record/s: settings that save a share of the CPU save it
        // at any rate, and the models carry that across the rates the
        // runs were made at (profiling runs all last as long).
        objectives: [m.cpu_s / m.rate.max(1.0), m.peak_memory_bytes],
        constraints: vec![
            Some(latency),
            m.recovery_s.map(|r| r / config.max_recovery_s),
        ],
        in_place: m.in_place,
    })
}

/// `GET /tune` and `POST /tune/observe`; without a tuner both say how to
/// turn it on.
pub(crate) fn routes(router: Router, tuner: Option<Arc<Shared>>) -> Router {
    const OFF: &str = "the tuner is off: set [tune] enabled = true in the pipeline file";
    let get = tuner.clone();
    router
        .get("/tune", move |_| match &get {
            None => Response::text(404, OFF),
            Some(s) => {
                let state = lock(&s.inner).view(&s.config);
                Response::json(200, &state)
            }
        })
        .route("POST", "/tune/observe", move |r| {
            let tuner = tuner.clone();
            Box::pin(async move {
                let Some(s) = tuner else {
                    return Response::text(404, OFF);
                };
                let m: Measured = match serde_json::from_slice(&r.body) {
                    Ok(m) => m,
                    Err(e) => {
                        return Response::text(
                            400,
                            &format!(
                                "POST /tune/observe: the body must be {{\"settings\": {{\"workers\": N, ...}}, \
                                 \"rate\", \"cpu_s\", \"peak_memory_bytes\", \"latency_p99_ms\", \"recovery_s\"}} ({e})"
                            ),
                        );
                    }
                };
                // Fitting the models takes milliseconds: not on the
                // server's executor.
                let outcome = smol::unblock(move || lock(&s.inner).observe(&s.config, m)).await;
                match outcome {
                    Ok(n) => Response::json(200, &serde_json::json!({ "observations": n })),
                    Err(e) => Response::text(422, &format!("POST /tune/observe: {e}")),
                }
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenger_says_which_setting_it_moves() {
        let config = TuneConfig::default();
        let from = space::normalise(&config.settings, &[2, 48 << 20, 15_000, 1024, 8]).unwrap();
        let mut to = from.clone();
        to[2] = 1.0;
        assert_eq!(
            challenge_why(&config, &from, &to),
            "the choice with one setting moved, checkpoint_interval from 15s to 1m, \
             to find out what that saves"
        );
        to[1] = 0.0;
        assert!(challenge_why(&config, &from, &to).starts_with("the settings the models expect"));
    }
}
