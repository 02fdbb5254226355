//! The tuner's choice applied to the running pipeline (`[tune] apply`):
//! the checkpoint interval, the state cache's size and the sinks' flush
//! interval live (`exec/live.rs`); the workers by live migration, as the
//! controller executes its decisions: the keyed bins move, step by step
//! under `[migration] strategy`, onto as many of the node's worker
//! threads as the choice names. The sources' batch size is live too; the
//! batches windows and joins emit keep the size set at the start.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::tune::ChoiceView;
use super::tune_store::Measured;
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

/// The choice to apply now, given what was applied last (in which
/// pipeline generation) and what the optimiser has measured: the first
/// choice; one for a forecast peak that moved beyond `threshold`; the
/// settings in force again after a reload; or, when the settings in force
/// missed the latency goal in place at a rate the peak reaches, a choice
/// that differs from them. Without that last case late windows went on
/// until the rate moved by the threshold, while the models that had
/// learnt of them already chose otherwise.
pub(crate) fn due(
    choice: &ChoiceView,
    applied: Option<&(u64, AppliedView)>,
    generation: u64,
    measured: &[Measured],
    threshold: f64,
    goal_ms: f64,
) -> Option<ChoiceView> {
    let Some((g, a)) = applied else {
        return Some(choice.clone());
    };
    let moved = (choice.rate - a.rate).abs() > threshold * a.rate.max(1.0);
    if *g != generation && !moved {
        // After a reload the settings in force are applied again, not a
        // newer choice for a rate that has not moved.
        return Some(ChoiceView {
            settings: a.settings.clone(),
            rate: a.rate,
            ..choice.clone()
        });
    }
    let missed = || {
        measured.iter().any(|m| {
            m.in_place
                && m.settings == a.settings
                && m.latency_p99_ms > goal_ms
                && m.rate <= choice.rate * (1.0 + threshold)
        })
    };
    (moved || (choice.settings != a.settings && missed())).then(|| choice.clone())
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
    use super::*;

    fn choice(rate: f64, workers: u64) -> ChoiceView {
        ChoiceView {
            settings: BTreeMap::from([("workers".to_string(), workers)]),
            rate,
            expected_cpu_s: 1.0,
            expected_peak_memory_bytes: 1e8,
            expected_latency_p99_ms: 100.0,
            expected_recovery_s: 1.0,
        }
    }

    fn applied(generation: u64, rate: f64, workers: u64) -> (u64, AppliedView) {
        let view = AppliedView {
            at_unix_ms: 0,
            rate,
            settings: BTreeMap::from([("workers".to_string(), workers)]),
            outcome: BTreeMap::new(),
        };
        (generation, view)
    }

    fn in_place(rate: f64, workers: u64, p99_ms: f64) -> Measured {
        Measured {
            settings: BTreeMap::from([("workers".to_string(), workers)]),
            rate,
            cpu_s: 1.0,
            peak_memory_bytes: 1e8,
            latency_p99_ms: p99_ms,
            recovery_s: None,
            fell_behind: false,
            in_place: true,
        }
    }

    fn workers(c: Option<ChoiceView>) -> Option<u64> {
        c.map(|c| c.settings["workers"])
    }

    #[test]
    fn a_choice_is_applied_first_when_the_peak_moves_and_again_after_a_reload() {
        let due = |a: Option<&(u64, AppliedView)>, g, rate, w| {
            workers(super::due(&choice(rate, w), a, g, &[], 0.2, 500.0))
        };
        assert_eq!(due(None, 1, 1000.0, 2), Some(2));
        let a = applied(1, 1000.0, 1);
        // A newer choice for a peak within the threshold waits.
        assert_eq!(due(Some(&a), 1, 1150.0, 2), None);
        assert_eq!(due(Some(&a), 1, 1250.0, 2), Some(2));
        assert_eq!(due(Some(&a), 1, 750.0, 2), Some(2));
        // A reload: the settings in force again, not the newer choice.
        assert_eq!(due(Some(&a), 2, 1150.0, 2), Some(1));
        assert_eq!(due(Some(&a), 2, 1250.0, 2), Some(2));
    }

    /// The settings in force missed the goal in place: a choice that
    /// differs goes in without waiting for the peak to move; one that
    /// does not, or a miss only at a rate the peak does not reach, or
    /// one by other settings, changes nothing.
    #[test]
    fn settings_that_missed_the_goal_in_place_make_way_for_the_choice() {
        let a = applied(1, 1000.0, 1);
        let due = |measured: &[Measured], w| {
            workers(super::due(
                &choice(1100.0, w),
                Some(&a),
                1,
                measured,
                0.2,
                500.0,
            ))
        };
        assert_eq!(due(&[in_place(1000.0, 1, 400.0)], 2), None);
        assert_eq!(due(&[in_place(1000.0, 1, 600.0)], 2), Some(2));
        assert_eq!(due(&[in_place(1000.0, 1, 600.0)], 1), None);
        assert_eq!(due(&[in_place(2000.0, 1, 600.0)], 2), None);
        assert_eq!(due(&[in_place(1000.0, 2, 600.0)], 2), None);
        let run = Measured {
            in_place: false,
            ..in_place(1000.0, 1, 600.0)
        };
        assert_eq!(due(&[run], 2), None);
    }

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
