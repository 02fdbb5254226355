//! The `[tune]` section: the search space of the tuner (Demeter: forecast
//! the input rate, choose several settings together), its goals and its
//! forecast.
//!
//! ```toml
//! [tune]
//! enabled = true
//! workers = [1, 4]
//! cache_bytes = ["16MiB", "256MiB"]
//! checkpoint_interval = ["1s", "60s"]
//! batch_size = [256, 8192]
//! flush_interval = ["1ms", "100ms"]
//! latency_p99_ms = 100
//! max_recovery_s = 30
//! horizon = "10m"
//! step = "30s"
//! ```

use toml::de::DeValue;

use super::diag::Diagnostics;
use super::table::{TableReader, describe, parse_duration};

/// How the values of a setting are written and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// A plain integer (workers, records).
    Count,
    /// A size such as `"64MiB"` or a number of bytes.
    Bytes,
    /// A duration such as `"10s"`, held in milliseconds.
    Millis,
}

/// One dimension of the search space: a setting and its range.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Setting {
    pub(crate) name: &'static str,
    pub(crate) unit: Unit,
    pub(crate) min: u64,
    pub(crate) max: u64,
    /// Searched on a log scale: a range spanning decades (16 MiB to
    /// 256 MiB, 1 ms to 100 ms) matters by ratio, not by difference.
    pub(crate) log: bool,
}

/// A setting's name, unit, default range, the widest range the engine
/// accepts, and whether it is searched on a log scale.
type SettingDefault = (&'static str, Unit, [u64; 2], [u64; 2], bool);

/// The settings, in the order of the optimiser's coordinates.
const SETTINGS: [SettingDefault; 5] = [
    ("workers", Unit::Count, [1, 4], [1, 1024], false),
    (
        "cache_bytes",
        Unit::Bytes,
        [16 << 20, 256 << 20],
        [1 << 20, 1 << 40],
        true,
    ),
    (
        "checkpoint_interval",
        Unit::Millis,
        [1_000, 60_000],
        [100, 86_400_000],
        true,
    ),
    ("batch_size", Unit::Count, [256, 8192], [1, 1 << 16], true),
    ("flush_interval", Unit::Millis, [1, 100], [1, 60_000], true),
];

/// Where a node makes its profiling runs (`[tune] profile_on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProfileOn {
    /// On the member of the mesh with the most idle cores: this node
    /// unless a peer has half a core more (or this node if it has no mesh).
    Auto,
    /// Always on this node.
    Local,
    /// Only on peers (a device that must not spend its own cores).
    Peers,
}

/// `[tune]`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TuneConfig {
    /// Default `false`: the node records no rates and forecasts nothing.
    pub(crate) enabled: bool,
    /// The search space, in [`SETTINGS`] order.
    pub(crate) settings: Vec<Setting>,
    /// Goal: p99 end-to-end latency at most this. Default 100 ms.
    pub(crate) latency_p99_ms: f64,
    /// Goal: a restart restores its checkpoint within this. Default 30 s.
    pub(crate) max_recovery_s: f64,
    /// How far ahead the rate is forecast. Default 10 min.
    pub(crate) horizon_ms: u64,
    /// How often the rate is sampled, and the forecast's step. Default 30 s.
    pub(crate) step_ms: u64,
    /// `season`: the period of the input rate the forecast models. Default
    /// a day (`eddy bench tune` compresses one into minutes).
    pub(crate) season_ms: u64,
    /// `profile`: whether the node starts profiling runs itself. Default
    /// `true`.
    pub(crate) profile: bool,
    /// `profile_duration`: how long a profiling run is driven. Left out,
    /// 5 s or the time the pipeline's windows need to close, if longer
    /// (see `tune_duration`).
    pub(crate) profile_duration_ms: u64,
    /// Where `profile_duration` is written, if it is.
    pub(crate) profile_duration_span: Option<std::ops::Range<usize>>,
    /// `profile_interval`: time between the starts of two profiling runs.
    /// Default 5 min.
    pub(crate) profile_interval_ms: u64,
    /// `profile_memory`: a profiling run's data memory at most
    /// (`RLIMIT_DATA`). Default 1 GiB.
    pub(crate) profile_memory_bytes: u64,
    /// `profile_on`: where profiling runs are made. Default `auto`.
    pub(crate) profile_on: ProfileOn,
    /// `profile_budget`: the share of this node's CPU (its pipeline's and
    /// the runs') that profiling runs may take over the last `season`; a
    /// run that would pass it waits. Default 0.1.
    pub(crate) profile_budget: f64,
    /// `apply`: whether the choice is applied to the running pipeline.
    /// Default `true`.
    pub(crate) apply: bool,
    /// `apply_threshold`: a new choice is applied once the forecast peak
    /// moved by more than this fraction from the rate the one in force was
    /// chosen for. Default 0.2.
    pub(crate) apply_threshold: f64,
}

impl Default for TuneConfig {
    fn default() -> TuneConfig {
        TuneConfig {
            enabled: false,
            settings: SETTINGS
                .iter()
                .map(|&(name, unit, [min, max], _, log)| Setting {
                    name,
                    unit,
                    min,
                    max,
                    log,
                })
                .collect(),
            latency_p99_ms: 100.0,
            max_recovery_s: 30.0,
            horizon_ms: 600_000,
            step_ms: 30_000,
            season_ms: 24 * 3600 * 1000,
            profile: true,
            profile_duration_ms: 5_000,
            profile_duration_span: None,
            profile_interval_ms: 300_000,
            profile_memory_bytes: 1 << 30,
            profile_on: ProfileOn::Auto,
            profile_budget: 0.1,
            apply: true,
            apply_threshold: 0.2,
        }
    }
}

impl TuneConfig {
    /// Forecast steps in the horizon.
    pub(crate) fn horizon_steps(&self) -> usize {
        (self.horizon_ms / self.step_ms.max(1)).max(1) as usize
    }
}

/// The most steps a horizon may have: each is a forecast point the node
/// computes, and scores later, every step (so its cost grows as the square).
const MAX_HORIZON_STEPS: u64 = 240;

/// Reads `[tune]`; fields with errors keep their defaults (every problem
/// is in `d`).
pub(crate) fn read_tune(d: &mut Diagnostics, mut t: TableReader<'_, '_>) -> TuneConfig {
    let mut c = TuneConfig::default();
    if let Some(b) = t.boolean(d, "enabled") {
        c.enabled = b.value;
    }
    for (i, &(name, unit, _, [lo, hi], _)) in SETTINGS.iter().enumerate() {
        if let Some([min, max]) = read_range(d, &mut t, name, unit, lo, hi) {
            c.settings[i].min = min;
            c.settings[i].max = max;
        }
    }
    if let Some(v) = read_goal(d, &mut t, "latency_p99_ms") {
        c.latency_p99_ms = v;
    }
    if let Some(v) = read_goal(d, &mut t, "max_recovery_s") {
        c.max_recovery_s = v;
    }
    let step = t.duration_ms(d, "step", false);
    if let Some(s) = &step {
        if s.value < 100 {
            d.error(
                s.span.clone(),
                &t.ctx("step"),
                "must be at least 100ms (the rate is sampled every step)",
            );
        } else {
            c.step_ms = s.value as u64;
        }
    }
    if let Some(s) = t.duration_ms(d, "season", false) {
        if (s.value as u64) < 4 * c.step_ms {
            d.error(
                s.span,
                &t.ctx("season"),
                format!(
                    "is shorter than four steps ({}); a season needs points to model",
                    fmt_ms(4 * c.step_ms)
                ),
            );
        } else {
            c.season_ms = s.value as u64;
        }
    }
    if let Some(h) = t.duration_ms(d, "horizon", false) {
        let steps = h.value as u64 / c.step_ms;
        if (h.value as u64) < c.step_ms {
            d.error(
                h.span,
                &t.ctx("horizon"),
                format!(
                    "is shorter than one step ({}); the forecast has at least one step",
                    fmt_ms(c.step_ms)
                ),
            );
        } else if steps > MAX_HORIZON_STEPS {
            d.error(
                h.span,
                &t.ctx("horizon"),
                format!(
                    "is {steps} steps of {}; at most {MAX_HORIZON_STEPS} are forecast (lengthen `step`)",
                    fmt_ms(c.step_ms)
                ),
            );
        } else {
            c.horizon_ms = h.value as u64;
        }
    }
    if let Some(b) = t.boolean(d, "profile") {
        c.profile = b.value;
    }
    if let Some(ms) = t.duration_ms(d, "profile_duration", false) {
        c.profile_duration_ms = ms.value as u64;
        c.profile_duration_span = Some(ms.span);
    }
    if let Some(ms) = t.duration_ms(d, "profile_interval", false) {
        c.profile_interval_ms = ms.value as u64;
    }
    if let Some(bytes) = t.size_bytes(d, "profile_memory") {
        if bytes < MIN_PROFILE_MEMORY {
            d.error(
                t.raw("profile_memory").map_or(0..0, |v| v.span()),
                &t.ctx("profile_memory"),
                "must be at least 128MiB: a run reserves about 70 MiB of data memory (thread \
                 stacks, IO buffers) before it reads a record",
            );
        } else {
            c.profile_memory_bytes = bytes;
        }
    }
    if let Some(on) = t.choice(d, "profile_on", &["auto", "local", "peers"]) {
        c.profile_on = match on.value {
            "local" => ProfileOn::Local,
            "peers" => ProfileOn::Peers,
            _ => ProfileOn::Auto,
        };
    }
    if let Some(v) = read_goal(d, &mut t, "profile_budget") {
        if v > 1.0 {
            d.error(
                t.raw("profile_budget").map_or(0..0, |v| v.span()),
                &t.ctx("profile_budget"),
                format!("is {v}, but it is a share of the node's CPU: at most 1 (0.1 is 10 %)"),
            );
        } else {
            c.profile_budget = v;
        }
    }
    if let Some(b) = t.boolean(d, "apply") {
        c.apply = b.value;
    }
    if let Some(v) = read_goal(d, &mut t, "apply_threshold") {
        c.apply_threshold = v;
    }
    t.finish(d, "[tune]");
    c
}

/// The least `profile_memory` a run can start with.
const MIN_PROFILE_MEMORY: u64 = 128 << 20;

/// `key = [min, max]`, each in `unit` and within `[lo, hi]`.
fn read_range(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    key: &'static str,
    unit: Unit,
    lo: u64,
    hi: u64,
) -> Option<[u64; 2]> {
    let v = t.raw(key)?;
    let example = match unit {
        Unit::Count => "[1, 4]",
        Unit::Bytes => "[\"16MiB\", \"256MiB\"]",
        Unit::Millis => "[\"1s\", \"60s\"]",
    };
    let items = match v.get_ref() {
        DeValue::Array(items) if items.len() == 2 => items,
        other => {
            d.error(
                v.span(),
                &t.ctx(key),
                format!(
                    "expected a range [min, max] such as {example}, found {}",
                    describe(other)
                ),
            );
            return None;
        }
    };
    let mut out = [0u64; 2];
    let mut ok = true;
    for (slot, item) in out.iter_mut().zip(items.iter()) {
        match read_value(item.get_ref(), unit) {
            Ok(n) if (lo..=hi).contains(&n) => *slot = n,
            Ok(_) => {
                d.error(
                    item.span(),
                    &t.ctx(key),
                    format!("must be from {} to {}", fmt(lo, unit), fmt(hi, unit)),
                );
                ok = false;
            }
            Err(e) => {
                d.error(item.span(), &t.ctx(key), format!("{e}, e.g. {example}"));
                ok = false;
            }
        }
    }
    if ok && out[0] > out[1] {
        d.error(
            v.span(),
            &t.ctx(key),
            format!(
                "the range is empty: its min {} is above its max {}",
                fmt(out[0], unit),
                fmt(out[1], unit)
            ),
        );
        ok = false;
    }
    ok.then_some(out)
}

fn read_value(v: &DeValue<'_>, unit: Unit) -> Result<u64, String> {
    let int = |v: &DeValue<'_>| match v {
        DeValue::Integer(i) => u64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok(),
        _ => None,
    };
    match unit {
        Unit::Count => int(v).ok_or_else(|| format!("expected an integer, found {}", describe(v))),
        Unit::Bytes => match v {
            DeValue::String(s) => s
                .trim()
                .parse::<bytesize::ByteSize>()
                .map(|b| b.as_u64())
                .map_err(|_| format!("`{s}` is not a size")),
            _ => int(v).ok_or_else(|| format!("expected a size, found {}", describe(v))),
        },
        Unit::Millis => match v {
            DeValue::String(s) => match parse_duration(s) {
                Ok(dur) if dur.subsec_nanos() % 1_000_000 == 0 => Ok(dur.as_millis() as u64),
                Ok(_) => Err(format!("`{s}` is not whole milliseconds")),
                Err(e) => Err(format!("`{s}` is not a duration ({e})")),
            },
            _ => Err(format!("expected a duration, found {}", describe(v))),
        },
    }
}

/// A goal: a positive number (integer or float).
fn read_goal(d: &mut Diagnostics, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<f64> {
    let v = t.raw(key)?;
    let parsed = match v.get_ref() {
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .ok()
            .map(|n| n as f64),
        DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
        _ => None,
    };
    match parsed {
        Some(x) if x.is_finite() && x > 0.0 => Some(x),
        _ => {
            d.error(
                v.span(),
                &t.ctx(key),
                format!("expected a number above 0, found {}", describe(v.get_ref())),
            );
            None
        }
    }
}

/// A value as the file writes it.
pub(crate) fn fmt(v: u64, unit: Unit) -> String {
    match unit {
        Unit::Count => v.to_string(),
        Unit::Bytes => bytesize::ByteSize::b(v).display().iec().to_string(),
        Unit::Millis => fmt_ms(v),
    }
}

pub(super) fn fmt_ms(ms: u64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPELINE: &str =
        "[sources.g]\ntype = \"generator\"\n\n[sinks.b]\ntype = \"blackhole\"\ninputs = [\"g\"]\n";

    fn parse(tune: &str) -> (TuneConfig, String) {
        let text = format!("{tune}\n{PIPELINE}");
        let (config, d) = crate::config::parse("p.toml", &text);
        (config.node.tune, d.render())
    }

    #[test]
    fn defaults_and_values() {
        let (c, out) = parse("");
        assert!(out.is_empty(), "{out}");
        assert_eq!(c, TuneConfig::default());
        assert!(!c.enabled);
        assert_eq!(c.horizon_steps(), 20);
        let (c, out) = parse(
            "[tune]\nenabled = true\nworkers = [2, 8]\ncache_bytes = [\"1MiB\", 33554432]\n\
             checkpoint_interval = [\"500ms\", \"2m\"]\nbatch_size = [1, 65536]\n\
             flush_interval = [\"5ms\", \"5ms\"]\nlatency_p99_ms = 2.5\nmax_recovery_s = 4\n\
                          horizon = \"2s\"\nstep = \"200ms\"\nprofile = false\nprofile_duration = \"1s\"\n\
             profile_interval = \"3s\"\nprofile_memory = \"256MiB\"\napply = false\napply_threshold = 0.5\n\
             profile_on = \"peers\"\nprofile_budget = 0.05",
        );
        assert!(out.is_empty(), "{out}");
        assert_eq!(c.profile_budget, 0.05);
        assert!(c.enabled);
        let ranges: Vec<[u64; 2]> = c.settings.iter().map(|s| [s.min, s.max]).collect();
        assert_eq!(
            ranges,
            [
                [2, 8],
                [1 << 20, 32 << 20],
                [500, 120_000],
                [1, 65536],
                [5, 5]
            ]
        );
        assert_eq!((c.latency_p99_ms, c.max_recovery_s), (2.5, 4.0));
        assert_eq!(
            (c.horizon_ms, c.step_ms, c.horizon_steps()),
            (2000, 200, 10)
        );
        assert_eq!(
            (c.profile, c.profile_duration_ms, c.profile_interval_ms),
            (false, 1000, 3000)
        );
        assert_eq!(c.profile_memory_bytes, 256 << 20);
        assert_eq!((c.apply, c.apply_threshold), (false, 0.5));
        assert_eq!(c.profile_on, ProfileOn::Peers);
    }

    #[test]
    fn errors_name_the_field_and_place() {
        let (_, out) = parse(
            "[tune]\nworkers = [4, 1]\ncache_bytes = \"16MiB\"\ncheckpoint_interval = [\"1s\", \"soon\"]\n\
             batch_size = [0, 10]\nlatency_p99_ms = -1\nstep = \"10ms\"\nhorizon = \"1000h\"\nwokers = 1\n\
             profile_memory = \"64MiB\"\napply_threshold = 0\nprofile_on = \"idle\"\nprofile_budget = 10",
        );
        for want in [
            "p.toml:2:11: error: tune: field `workers`: the range is empty: its min 4 is above its max 1",
            "p.toml:3:15: error: tune: field `cache_bytes`: expected a range [min, max]",
            "p.toml:4:30: error: tune: field `checkpoint_interval`: `soon` is not a duration",
            "p.toml:5:15: error: tune: field `batch_size`: must be from 1 to 65536",
            "p.toml:6:18: error: tune: field `latency_p99_ms`: expected a number above 0",
            "p.toml:7:8: error: tune: field `step`: must be at least 100ms",
            "p.toml:8:11: error: tune: field `horizon`: is 120000 steps of 30s",
            "p.toml:9:1: error: tune: field `wokers`: unknown field `wokers` (did you mean `workers`?)",
            "p.toml:10:18: error: tune: field `profile_memory`: must be at least 128MiB",
            "p.toml:11:19: error: tune: field `apply_threshold`: expected a number above 0",
            "p.toml:12:14: error: tune: field `profile_on`:",
            "p.toml:13:18: error: tune: field `profile_budget`: is 10, but it is a share of the \
             node's CPU: at most 1 (0.1 is 10 %)",
        ] {
            assert!(out.contains(want), "missing\n{want}\nin\n{out}");
        }
    }
}
