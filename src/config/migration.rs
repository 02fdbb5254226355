//! The `[migration]` section: how keyed state moves between workers when
//! the bin assignment changes (a node joins, drains, or `eddy rebalance`).

use std::time::Duration;

use super::diag::Diagnostics;
use super::model::MigrationConfig;
use super::table::TableReader;
use crate::migrate::Strategy;

const STRATEGIES: &[&str] = &["all_at_once", "fluid", "batched"];

/// Reads `[migration]`; fields with errors keep their defaults (every
/// problem is in `d`).
pub(crate) fn read_migration(d: &mut Diagnostics, mut t: TableReader<'_, '_>) -> MigrationConfig {
    let mut m = MigrationConfig::default();
    let strategy = t.choice(d, "strategy", STRATEGIES);
    if let Some(gap) = t.duration_ms(d, "gap", true) {
        m.gap = Duration::from_millis(gap.value as u64);
        if strategy.as_ref().is_some_and(|s| s.value != "fluid") && !m.gap.is_zero() {
            d.warning(
                gap.span,
                &t.ctx("gap"),
                "only the `fluid` strategy waits between steps; this gap is ignored",
            );
        }
    }
    if let Some(n) = t.integer(d, "max_bins_per_step", 1, u32::MAX as i64) {
        m.max_bins_per_step = Some(n.value as u32);
        if strategy.as_ref().is_some_and(|s| s.value != "batched") {
            d.warning(
                n.span,
                &t.ctx("max_bins_per_step"),
                "only the `batched` strategy cuts steps by size; this limit is ignored",
            );
        }
    }
    if let Some(ms) = t.duration_ms(d, "drain_timeout", false) {
        m.drain_timeout = Duration::from_millis(ms.value as u64);
    }
    if let Some(bytes) = t.size_bytes(d, "hold_memory") {
        m.hold_memory = bytes;
    }
    if let Some(s) = strategy {
        m.strategy = match s.value {
            "all_at_once" => Strategy::AllAtOnce,
            "fluid" => Strategy::Fluid { gap: m.gap },
            _ => Strategy::Batched {
                max_bins_per_step: m.max_bins_per_step,
            },
        };
    } else {
        m.strategy = Strategy::Batched {
            max_bins_per_step: m.max_bins_per_step,
        };
    }
    t.finish(d, "[migration]");
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPELINE: &str =
        "[sources.g]\ntype = \"generator\"\n\n[sinks.b]\ntype = \"blackhole\"\ninputs = [\"g\"]\n";

    fn parse(migration: &str) -> (MigrationConfig, String) {
        let text = format!("{migration}\n{PIPELINE}");
        let (config, d) = crate::config::parse("p.toml", &text);
        (config.node.migration, d.render())
    }

    #[test]
    fn defaults_and_values() {
        let (m, out) = parse("");
        assert_eq!(m, MigrationConfig::default());
        assert!(out.is_empty(), "{out}");
        assert_eq!(m.drain_timeout, Duration::from_secs(30));
        let (m, out) =
            parse("[migration]\nstrategy = \"fluid\"\ngap = \"250ms\"\ndrain_timeout = \"1m\"");
        assert!(out.is_empty(), "{out}");
        assert_eq!(
            m.strategy,
            Strategy::Fluid {
                gap: Duration::from_millis(250)
            }
        );
        assert_eq!(m.drain_timeout, Duration::from_secs(60));
        assert_eq!(m.hold_memory, 64 << 20);
        let (m, out) = parse("[migration]\nhold_memory = \"4MiB\"");
        assert!(out.is_empty(), "{out}");
        assert_eq!(m.hold_memory, 4 << 20);
        let (_, out) = parse("[migration]\nhold_memory = \"lots\"");
        assert!(
            out.contains("p.toml:2:15: error: migration: field `hold_memory`: expected a size"),
            "{out}"
        );
        let (m, _) = parse("[migration]\nmax_bins_per_step = 4");
        assert_eq!(
            m.strategy,
            Strategy::Batched {
                max_bins_per_step: Some(4)
            }
        );
        let (m, _) = parse("[migration]\nstrategy = \"all_at_once\"");
        assert_eq!(m.strategy, Strategy::AllAtOnce);
    }

    #[test]
    fn a_setting_the_strategy_ignores_is_warned_about() {
        let (_, out) = parse("[migration]\nstrategy = \"batched\"\ngap = \"1s\"");
        assert!(
            out.contains("p.toml:3:7: warning: migration: field `gap`: only the `fluid` strategy"),
            "{out}"
        );
        let (_, out) = parse("[migration]\nstrategy = \"fluid\"\nmax_bins_per_step = 2");
        assert!(
            out.contains("field `max_bins_per_step`: only the `batched`"),
            "{out}"
        );
    }
}
