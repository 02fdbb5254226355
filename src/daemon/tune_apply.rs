//! The tuner's choice applied to the running pipeline (`[tune] apply`):
//! the checkpoint interval, the state cache's size and the sinks' flush
//! interval live (`exec/live.rs`); the workers by live migration, as the
//! controller executes its decisions: the keyed bins move, step by step
//! under `[migration] strategy`, onto as many of the node's worker
//! threads as the choice names. The sources' batch size is live too; the
//! batches windows and joins emit keep the size set at the start.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::exec::{RebalanceError, Reporter};

/// What the tuner applied last, and how each setting went.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AppliedView {
    pub(crate) at_unix_ms: u64,
    /// The forecast peak the settings were chosen for.
    pub(crate) rate: f64,
    pub(crate) settings: BTreeMap<String, u64>,
    /// Per setting: how it was applied, or why it was not.
    pub(crate) outcome: BTreeMap<String, String>,
}

/// Why an application must be tried again later.
pub(crate) struct Retry(pub(crate) String);

/// Applies `settings` to the run `reporter` reads. `Err` when the workers
/// could not move now (another migration runs): nothing is recorded as
/// applied, and the caller tries again at its next step.
pub(crate) fn apply(
    reporter: &Reporter,
    settings: &BTreeMap<String, u64>,
) -> Result<BTreeMap<String, String>, Retry> {
    let shared = reporter.shared();
    let plan = reporter.plan();
    let mut outcome = BTreeMap::new();
    // Workers first: a migration that must wait leaves everything as is,
    // so the settings in force always belong to one choice.
    if let Some(&w) = settings.get("workers") {
        outcome.insert("workers".into(), workers(reporter, w as usize)?);
    }
    let stateful = plan.node.checkpoint_interval_ms.is_some();
    for (name, &v) in settings {
        let how = match name.as_str() {
            "workers" => continue,
            "checkpoint_interval" if stateful => {
                shared.live.set_checkpoint_interval_ms(v);
                "live: the next checkpoint is taken this long after the last".to_string()
            }
            "cache_bytes" if stateful => {
                let state = open_state_bytes(reporter);
                let floor = if reloads_whole_bins(plan) {
                    (state as f64 * CACHE_HEADROOM) as u64
                } else {
                    0
                };
                shared.live.set_cache_bytes(v.max(floor));
                if v < floor {
                    raised(floor, state)
                } else {
                    "live: window state beyond it spills at the next batch, as partial \
                     aggregates merged when windows fire and at checkpoints"
                        .to_string()
                }
            }
            "checkpoint_interval" | "cache_bytes" => {
                "not applied: checkpoints are off ([checkpoint] enabled = false), so state is \
                 in memory only"
                    .to_string()
            }
            "flush_interval" => {
                shared.live.set_flush_interval_ms(v);
                "live: stdout and file sinks hold lines, and paced generators partial batches, up to this long"
                    .to_string()
            }
            "batch_size" => {
                shared.live.batch_size.set(v as usize);
                "live: each source's next batch holds at most this many records".to_string()
            }
            _ => "not applied: unknown to this version".to_string(),
        };
        outcome.insert(name.clone(), how);
    }
    Ok(outcome)
}

/// How much more cache than open state the tuner keeps where a cache the
/// state outgrows sends bins through sled on every batch
/// ([`reloads_whole_bins`]): the state grows between two of its steps and
/// with the rate (in `eddy bench tune` a 23 MiB choice made at a tenth of
/// the peak took 4 GiB of RSS and stopped the output at the peak, before
/// windows spilled partial aggregates).
const CACHE_HEADROOM: f64 = 1.5;
/// Re-checked every step: raised once the state passes this share of it.
const CACHE_HIGH_WATER: f64 = 0.8;

/// The open state of this node's keyed operators now.
fn open_state_bytes(reporter: &Reporter) -> u64 {
    reporter
        .bins()
        .iter()
        .flat_map(|b| b.state_bytes.iter())
        .sum()
}

/// Whether a window of the plan brings spilled bins back whole for a
/// record: a tumbling or hopping window with allowed lateness, where a
/// late record re-emits its key's whole result. Every other window takes
/// records for spilled bins as partial aggregates, so any cache works
/// (what a small one costs, profiling runs measure).
pub(crate) fn reloads_whole_bins(plan: &crate::plan::Plan) -> bool {
    plan.nodes.iter().any(|n| match &n.op {
        crate::plan::OpSpec::Window(w) => {
            w.allowed_lateness_ms > 0
                && !matches!(w.kind, crate::config::WindowKind::Session { .. })
        }
        _ => false,
    })
}

/// The cache [`apply`] keeps at least, for open state `scale` times this
/// node's now; `None` where any cache works ([`reloads_whole_bins`]).
pub(crate) fn cache_floor(reporter: &Reporter, scale: f64) -> Option<u64> {
    reloads_whole_bins(reporter.plan())
        .then(|| (open_state_bytes(reporter) as f64 * scale * CACHE_HEADROOM) as u64)
}

fn raised(to: u64, state: u64) -> String {
    format!(
        "live, raised to {} MiB: the open state holds {} MiB now, and a cache it outgrows \
         sends bins through sled on every batch",
        to >> 20,
        state >> 20,
    )
}

/// Once the tuner has set the cache: raises it when the open state
/// passed [`CACHE_HIGH_WATER`] of it since, and says how.
pub(crate) fn keep_cache_above_state(reporter: &Reporter) -> Option<(u64, String)> {
    let shared = reporter.shared();
    let state = open_state_bytes(reporter);
    if !reloads_whole_bins(reporter.plan())
        || state as f64 <= shared.live.cache_bytes() as f64 * CACHE_HIGH_WATER
    {
        return None;
    }
    let to = (state as f64 * CACHE_HEADROOM) as u64;
    shared.live.set_cache_bytes(to);
    Some((to, raised(to, state)))
}

/// Moves the bins of every keyed operator onto `want` of this node's
/// worker threads (clamped to them), keeping bins where they are when
/// their worker stays.
fn workers(reporter: &Reporter, want: usize) -> Result<String, Retry> {
    let shared = reporter.shared();
    let threads = shared.workers;
    if shared.members_in_run().is_some() {
        return Ok(
            "not applied here: in a distributed run the controller sizes every member's \
             workers, with the forecast peak as DS2's target rate"
                .into(),
        );
    }
    let Some((_, current)) = shared.assignment_in_force() else {
        return Err(Retry("a migration is running".into()));
    };
    let used = want.clamp(1, threads);
    let more = if want > threads {
        format!(" ({want} asked: the others need a restart with [node] workers = {want})")
    } else {
        String::new()
    };
    let me = [("local".to_string(), 0..threads)];
    let owner = vec!["local".to_string(); current.len()];
    let count = BTreeMap::from([("local".to_string(), used as u16)]);
    let target =
        crate::control::execute::target_workers(&owner, &count, &me, &current).map_err(Retry)?;
    if target == current {
        return Ok(format!(
            "the bins are already on {used} of {threads} worker threads{more}"
        ));
    }
    let strategy = reporter.plan().node.migration.strategy;
    match shared.rebalance(Some(target), strategy) {
        Ok(r) => Ok(format!(
            "bins on {used} of {threads} worker threads by live migration ({}): epoch {}, \
             {} bins, {} bytes in {} steps, {:.1} ms{more}",
            strategy.name(),
            r.epoch,
            r.bins,
            r.bytes,
            r.steps,
            r.duration.as_secs_f64() * 1e3
        )),
        Err(RebalanceError::Busy(m)) => Err(Retry(m)),
        Err(RebalanceError::Failed(m)) => Ok(format!("not applied: the migration failed: {m}")),
    }
}

#[cfg(test)]
mod tests {
    fn plan(window: &str) -> crate::plan::Plan {
        let toml = format!(
            r#"
[sources.g]
type = "generator"
schema = "readings"
[transforms.w]
type = "window"
inputs = ["g"]
key = ["sensor"]
window = {window}
aggregates = {{ n = "count(*)" }}
[sinks.out]
type = "blackhole"
inputs = ["w"]
"#
        );
        let (config, mut d) = crate::config::parse("<test>", &toml);
        crate::plan::build(&config, &mut d).unwrap_or_else(|| panic!("{}", d.render()))
    }

    /// Only a tumbling or hopping window with allowed lateness needs the
    /// cache above its open state.
    #[test]
    fn only_windows_with_allowed_lateness_bring_bins_back_whole() {
        for (window, reloads) in [
            (r#"{ kind = "tumbling", size = "10s" }"#, false),
            (r#"{ kind = "hopping", size = "10s", slide = "1s" }"#, false),
            (r#"{ kind = "session", gap = "1s" }"#, false),
            (
                r#"{ kind = "tumbling", size = "10s", allowed_lateness = "1s" }"#,
                true,
            ),
            (
                r#"{ kind = "hopping", size = "10s", slide = "1s", allowed_lateness = "1s" }"#,
                true,
            ),
        ] {
            assert_eq!(
                super::reloads_whole_bins(&plan(window)),
                reloads,
                "{window}"
            );
        }
    }
}
