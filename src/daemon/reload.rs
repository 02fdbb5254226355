//! Live reload (`SIGHUP`, `POST /reload`): the pipeline file is read and
//! checked again; if it is valid, the running pipeline takes a checkpoint
//! and halts, and the new pipeline starts in the same process from that
//! checkpoint. Every component whose state still fits (the same state
//! signature: see `plan::state_signature`) continues with its state and
//! its sources' positions; a changed one whose state no longer fits starts
//! empty; a removed one's state is dropped. An invalid file changes
//! nothing. The mesh, the local API and the process stay up throughout;
//! the pipeline pauses for one checkpoint and a start.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::load::load_with_text;
use super::services::Services;
use crate::exec;
use crate::plan::{OpSpec, Plan};

/// How long the checkpoint before a reload may take.
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(30);

/// A reload asked for over the local API; the reply is the outcome.
pub(crate) struct ReloadRequest {
    pub(crate) reply: flume::Sender<Result<String, String>>,
}

/// The pipeline that is running, and the text it was built from.
pub(crate) struct Current {
    pub(crate) text: String,
    pub(crate) plan: Arc<Plan>,
    pub(crate) running: exec::Running,
}

/// How the components of two pipeline files differ, by id.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ComponentDiff {
    pub(crate) unchanged: Vec<String>,
    pub(crate) changed: Vec<String>,
    pub(crate) added: Vec<String>,
    pub(crate) removed: Vec<String>,
}

impl ComponentDiff {
    /// Compares the component tables of two valid pipeline files; layout,
    /// comments and key order do not count.
    pub(crate) fn between(old: &str, new: &str) -> ComponentDiff {
        let (old, new) = (components(old), components(new));
        let mut diff = ComponentDiff::default();
        for (id, table) in &new {
            match old.get(id) {
                None => diff.added.push(id.clone()),
                Some(t) if t == table => diff.unchanged.push(id.clone()),
                Some(_) => diff.changed.push(id.clone()),
            }
        }
        diff.removed = old.into_keys().filter(|id| !new.contains_key(id)).collect();
        diff
    }

    fn summary(&self) -> String {
        let list = |ids: &[String]| {
            if ids.is_empty() {
                "none".to_string()
            } else {
                ids.join(", ")
            }
        };
        format!(
            "unchanged: {}; changed: {}; added: {}; removed: {}",
            list(&self.unchanged),
            list(&self.changed),
            list(&self.added),
            list(&self.removed)
        )
    }
}

/// `sources.x`, `transforms.y`, `sinks.z` → their tables.
fn components(text: &str) -> BTreeMap<String, toml::Value> {
    let Ok(table) = text.parse::<toml::Table>() else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for section in ["sources", "transforms", "sinks"] {
        if let Some(toml::Value::Table(items)) = table.get(section) {
            for (id, value) in items {
                out.insert(format!("{section}.{id}"), value.clone());
            }
        }
    }
    out
}

/// Reloads `file` into `current`. `Ok` says what changed; `Err` says why
/// nothing did (the old pipeline goes on), except after a failed start of
/// the new pipeline, when the old one has been started again from the
/// checkpoint (also an `Err`).
pub(crate) fn reload(
    file: &Path,
    current: &mut Option<Current>,
    services: &Services,
) -> Result<String, String> {
    let Some(cur) = current.as_ref() else {
        return Err("the pipeline is not running".into());
    };
    let (text, plan, d) = load_with_text(file).map_err(|d| {
        for line in d.render().lines() {
            tracing::error!("{line}");
        }
        format!(
            "{} has {} error(s); the running pipeline goes on unchanged:\n{}",
            file.display(),
            d.errors.len(),
            d.render()
        )
    })?;
    for w in d.render().lines() {
        tracing::warn!("{w}");
    }
    refuse_unreloadable(&cur.plan, &plan)?;
    let diff = ComponentDiff::between(&cur.text, &text);
    if diff.changed.is_empty() && diff.added.is_empty() && diff.removed.is_empty() {
        if cur.text != text {
            tracing::info!(
                "{}: no component changed; [node], [mesh], [api] and [checkpoint] changes need a restart",
                file.display()
            );
        }
        return Ok(format!(
            "{}: no component changed; nothing to reload",
            file.display()
        ));
    }
    let started = Instant::now();
    let Some(Current {
        text: old_text,
        plan: old_plan,
        mut running,
    }) = current.take()
    else {
        unreachable!("checked above");
    };
    services.detach();
    let checkpoint = match running.checkpoint_and_halt(CHECKPOINT_TIMEOUT) {
        Ok(id) => format!("checkpoint {id}"),
        Err(e) => {
            // Halted all the same: the new pipeline resumes from the last
            // checkpoint that completed and replays from there.
            tracing::error!("the checkpoint before the reload failed: {e}");
            "the last completed checkpoint".to_string()
        }
    };
    let report = running.wait();
    super::stats::log_summary(&report);
    let plan = Arc::new(plan);
    match exec::start(
        plan.clone(),
        Arc::new(AtomicBool::new(false)),
        Default::default(),
    ) {
        Ok(running) => {
            services.attach(running.reporter(), &plan.describe());
            let message = format!(
                "reloaded {} from {checkpoint} in {} ms; {}",
                file.display(),
                started.elapsed().as_millis(),
                diff.summary()
            );
            tracing::info!("{message}");
            *current = Some(Current {
                text,
                plan,
                running,
            });
            Ok(message)
        }
        Err(e) => {
            tracing::error!(
                "the reloaded pipeline cannot start: {e}; starting the previous one again"
            );
            let running = exec::start(
                old_plan.clone(),
                Arc::new(AtomicBool::new(false)),
                Default::default(),
            )
            .map_err(|e2| {
                format!("the reloaded pipeline cannot start ({e}), nor can the previous one ({e2})")
            })?;
            services.attach(running.reporter(), &old_plan.describe());
            *current = Some(Current {
                text: old_text,
                plan: old_plan,
                running,
            });
            Err(format!(
                "the reloaded pipeline cannot start ({e}); the previous one runs again from {checkpoint}"
            ))
        }
    }
}

/// What a reload cannot do: it keeps state through a checkpoint in the
/// same data dir, partitioned the same way, and replays sources from it.
fn refuse_unreloadable(old: &Plan, new: &Plan) -> Result<(), String> {
    let restart = "restart eddy to apply the new file; the running pipeline goes on unchanged";
    // Its checkpoints are the whole run's: one member cannot go back to
    // one and start again alone.
    if old
        .node
        .mesh
        .as_ref()
        .is_some_and(|m| m.expect_members.is_some_and(|n| n > 1))
    {
        return Err(
            "a member of a distributed run does not reload live (its checkpoints are taken by every member together); restart every member to apply the new file, and they resume from their last checkpoint; the running pipeline goes on unchanged"
                .to_string(),
        );
    }
    if old.node.checkpoint_interval_ms.is_none() || new.node.checkpoint_interval_ms.is_none() {
        return Err(format!(
            "live reload keeps state through a checkpoint, and checkpoints are off; {restart}"
        ));
    }
    if old.node.data_dir != new.node.data_dir {
        return Err(format!(
            "[node] data_dir changed from {} to {}; {restart}",
            old.node.data_dir.display(),
            new.node.data_dir.display()
        ));
    }
    if old.node.bins != new.node.bins {
        return Err(format!(
            "[node] bins changed from {} to {}; the state is partitioned by it; {restart}",
            old.node.bins, new.node.bins
        ));
    }
    if let Some(n) = old.nodes.iter().find(|n| matches!(n.op, OpSpec::Stdin(_))) {
        return Err(format!(
            "source {} reads stdin, which cannot be replayed from a checkpoint; {restart}",
            n.id
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = r#"
[node]
name = "a"

[sources.gen]
type = "generator"
rate = 10

[transforms.hot]
type = "filter"
inputs = ["gen"]
condition = "temp > 20"

[sinks.out]
type = "stdout"
inputs = ["hot"]
"#;

    #[test]
    fn layout_and_key_order_do_not_count() {
        let new = r#"
[node]
name = "b"   # [node] is not a component

[sources.gen]
rate = 10
type = "generator"

[transforms.hot]
condition = "temp > 20"
inputs = ["gen"]
type = "filter"

[sinks.out]
inputs = ["hot"]
type = "stdout"
"#;
        let d = ComponentDiff::between(OLD, new);
        assert_eq!(d.unchanged, ["sinks.out", "sources.gen", "transforms.hot"]);
        assert!(d.changed.is_empty() && d.added.is_empty() && d.removed.is_empty());
    }

    #[test]
    fn changed_added_and_removed_components() {
        let new = OLD
            .replace("temp > 20", "temp > 25")
            .replace("[sinks.out]", "[sinks.file]");
        let d = ComponentDiff::between(OLD, &new);
        assert_eq!(d.unchanged, ["sources.gen"]);
        assert_eq!(d.changed, ["transforms.hot"]);
        assert_eq!(d.added, ["sinks.file"]);
        assert_eq!(d.removed, ["sinks.out"]);
        assert_eq!(
            d.summary(),
            "unchanged: sources.gen; changed: transforms.hot; added: sinks.file; removed: sinks.out"
        );
    }
}
