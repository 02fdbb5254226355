//! The `[controller]` section: how often the scaling controller decides
//! and how much hysteresis it applies (see `control::controller`), and
//! whether the announcer executes its decisions by live migration.

use std::time::Duration;

use super::diag::Diagnostics;
use super::model::ControllerSettings;
use super::table::TableReader;

/// Reads `[controller]`; fields with errors keep their defaults (every
/// problem is in `d`).
pub(crate) fn read_controller(
    d: &mut Diagnostics,
    mut t: TableReader<'_, '_>,
) -> ControllerSettings {
    let mut c = ControllerSettings::default();
    let ms = |v: i64| Duration::from_millis(v as u64);
    if let Some(v) = t.duration_ms(d, "decision_interval", false) {
        c.decision_interval = ms(v.value);
    }
    if let Some(v) = t.integer(d, "warm_up", 0, 1000) {
        c.warm_up = v.value as u32;
    }
    if let Some(v) = t.integer(d, "activation", 1, 1000) {
        c.activation = v.value as u32;
    }
    if let Some(v) = t.duration_ms(d, "stabilization", true) {
        c.stabilization = ms(v.value);
    }
    let down = t.duration_ms(d, "scale_down_after", true);
    if let Some(v) = &down {
        c.scale_down_after = ms(v.value);
    }
    if let Some(v) = t.boolean(d, "execute") {
        c.execute = v.value;
    }
    if let Some(v) = down
        && c.scale_down_after < c.stabilization
    {
        d.warning(
            v.span,
            &t.ctx("scale_down_after"),
            "is shorter than `stabilization`, which every change waits for anyway",
        );
    }
    t.finish(d, "[controller]");
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPELINE: &str =
        "[sources.g]\ntype = \"generator\"\n\n[sinks.b]\ntype = \"blackhole\"\ninputs = [\"g\"]\n";

    fn parse(section: &str) -> (ControllerSettings, String) {
        let text = format!("{section}\n{PIPELINE}");
        let (config, d) = crate::config::parse("p.toml", &text);
        (config.node.controller, d.render())
    }

    #[test]
    fn defaults_and_values() {
        let (c, out) = parse("");
        assert!(out.is_empty(), "{out}");
        assert_eq!(c, ControllerSettings::default());
        assert_eq!(c.decision_interval, Duration::from_secs(5));
        assert!(c.execute);
        let (c, out) = parse(
            "[controller]\ndecision_interval = \"2s\"\nwarm_up = 0\nactivation = 2\n\
             stabilization = \"4s\"\nscale_down_after = \"10s\"\nexecute = false",
        );
        assert!(out.is_empty(), "{out}");
        assert_eq!(c.decision_interval, Duration::from_secs(2));
        assert_eq!((c.warm_up, c.activation), (0, 2));
        assert_eq!(c.stabilization, Duration::from_secs(4));
        assert_eq!(c.scale_down_after, Duration::from_secs(10));
        assert!(!c.execute);
    }

    #[test]
    fn errors_name_the_field() {
        let (_, out) = parse("[controller]\ndecision_interval = \"0s\"");
        assert!(
            out.contains("controller: field `decision_interval`: must be longer than zero"),
            "{out}"
        );
        let (_, out) = parse("[controller]\nactivation = 0");
        assert!(
            out.contains("field `activation`: must be an integer"),
            "{out}"
        );
        let (_, out) = parse("[controller]\ninterval = \"1s\"");
        assert!(out.contains("unknown field `interval`"), "{out}");
        let (_, out) = parse("[controller]\nstabilization = \"30s\"\nscale_down_after = \"10s\"");
        assert!(
            out.contains("warning: controller: field `scale_down_after`"),
            "{out}"
        );
    }
}
