//! How long a profiling run must last: its latency is that of the sinks'
//! output, and a windowed pipeline outputs nothing until its windows
//! close. A run shorter than that measured CPU and memory but no latency,
//! so every run failed and the tuner never learnt anything (a 10 s window
//! against the 5 s default). Left out, `[tune] profile_duration` is
//! derived from the windows; written shorter, it is an error.

use std::collections::HashMap;

use super::diag::{Context, Diagnostics};
use super::model::{Config, JoinMode, Spec, WindowKind};
use super::tune::fmt_ms;

/// Time a run needs besides its windows: its start (a few hundred ms),
/// the watermark's way downstream and the first output's way to the sink.
const MARGIN_MS: u64 = 1_000;

/// Until the last window of the pipeline first closes in a run started
/// at an arbitrary moment, and the component it is: along a path from a
/// source to a sink the windows' lengths add up (a window's output is the
/// next one's input), and the watermark trails event time by the sources'
/// largest out-of-orderness. `None` without windows.
fn first_output_ms(config: &Config) -> Option<(u64, String)> {
    let by_stream: HashMap<&str, usize> = config
        .components
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            std::iter::once((c.id.value.as_str(), i))
                .chain(c.late_output().map(|l| (l.value.as_str(), i)))
        })
        .collect();
    // Longest path into each component, memoised; a cycle (reported
    // elsewhere) counts as no path.
    fn longest(
        config: &Config,
        by_stream: &HashMap<&str, usize>,
        memo: &mut Vec<Option<(u64, Option<usize>)>>,
        on_stack: &mut Vec<bool>,
        i: usize,
    ) -> (u64, Option<usize>) {
        if let Some(v) = memo[i] {
            return v;
        }
        if on_stack[i] {
            return (0, None);
        }
        on_stack[i] = true;
        let c = &config.components[i];
        let own = window_ms(&c.spec);
        let mut best = (0, None);
        for input in &c.inputs {
            if let Some(&j) = by_stream.get(input.value.as_str()) {
                let up = longest(config, by_stream, memo, on_stack, j);
                if up.0 > best.0 {
                    best = up;
                }
            }
        }
        on_stack[i] = false;
        let v = if own > 0 {
            (best.0 + own, Some(i))
        } else {
            best
        };
        memo[i] = Some(v);
        v
    }
    let n = config.components.len();
    let (mut memo, mut on_stack) = (vec![None; n], vec![false; n]);
    let (ms, last) = (0..n)
        .map(|i| longest(config, &by_stream, &mut memo, &mut on_stack, i))
        .max_by_key(|v| v.0)?;
    let last = last?;
    let out_of_order = config
        .components
        .iter()
        .filter_map(|c| event_time(&c.spec))
        .max()
        .unwrap_or(0);
    Some((
        ms + out_of_order + MARGIN_MS,
        config.components[last].qualified_id(),
    ))
}

/// How long a window of this component may stay open after a run starts.
fn window_ms(spec: &Spec) -> u64 {
    let ms = match spec {
        Spec::Window(w) => match w.kind {
            WindowKind::Tumbling { size_ms } => size_ms,
            // A window ends every slide.
            WindowKind::Hopping { slide_ms, .. } => slide_ms,
            WindowKind::Session { gap_ms } => gap_ms,
        },
        Spec::Join(j) => match j.mode {
            JoinMode::Tumbling { size_ms } => size_ms,
            JoinMode::Interval { .. } => 0,
        },
        _ => 0,
    };
    ms.max(0) as u64
}

/// A timed source's out-of-orderness bound.
fn event_time(spec: &Spec) -> Option<u64> {
    let t = match spec {
        Spec::Generator(g) => &g.event_time,
        Spec::File(f) => &f.event_time,
        Spec::Stdin(s) => &s.event_time,
        _ => return None,
    };
    t.field
        .as_ref()
        .map(|_| t.max_out_of_orderness_ms.max(0) as u64)
}

/// With the tuner on: derives `profile_duration` when it was left out,
/// and says so when it was written too short for any window to close.
pub(crate) fn settle(config: &mut Config, d: &mut Diagnostics) {
    let tune = &config.node.tune;
    if !tune.enabled || !tune.profile {
        return;
    }
    let Some((needed, which)) = first_output_ms(config) else {
        return;
    };
    let tune = &mut config.node.tune;
    match tune.profile_duration_span.clone() {
        Some(span) if tune.profile_duration_ms < needed => d.error(
            span,
            &Context {
                component: Some("tune".into()),
                field: Some("profile_duration".into()),
            },
            format!(
                "is {}, but a run needs {} for {which}'s windows to close (its windows, those \
                 upstream, the sources' out-of-orderness and {} to start): shorter runs measure \
                 no latency; make it at least {}, or leave it out to have it derived",
                fmt_ms(tune.profile_duration_ms),
                fmt_ms(needed),
                fmt_ms(MARGIN_MS),
                fmt_ms(needed),
            ),
        ),
        Some(_) => {}
        None => tune.profile_duration_ms = tune.profile_duration_ms.max(needed),
    }
}

#[cfg(test)]
mod tests {
    fn tuned(extra_tune: &str, rest: &str) -> (u64, String) {
        let text = format!(
            "[tune]\nenabled = true\n{extra_tune}\n[sources.g]\ntype = \"generator\"\nschema = \"readings\"\n\
             rate = 100\nmax_out_of_orderness = \"500ms\"\n{rest}"
        );
        let (config, d) = crate::config::parse("p.toml", &text);
        (config.node.tune.profile_duration_ms, d.render())
    }

    const WINDOWS: &str = "[transforms.w]\ntype = \"window\"\ninputs = [\"g\"]\nkey = [\"sensor\"]\n\
        window = { kind = \"tumbling\", size = \"10s\" }\naggregates = { n = \"count(*)\" }\n\
        [transforms.h]\ntype = \"window\"\ninputs = [\"w\"]\nkey = [\"sensor\"]\n\
        window = { kind = \"hopping\", size = \"1m\", slide = \"3s\" }\naggregates = { m = \"count(*)\" }\n\
        [sinks.b]\ntype = \"blackhole\"\ninputs = [\"h\", \"g\"]\n";

    #[test]
    fn a_run_lasts_until_the_windows_on_the_longest_path_close() {
        // 10 s, then a window every 3 s of its output, 0.5 s of disorder
        // and 1 s to start: 14.5 s, more than the 5 s default.
        let (ms, out) = tuned("", WINDOWS);
        assert!(out.is_empty(), "{out}");
        assert_eq!(ms, 14_500);
        // Without windows the default stands; longer is kept.
        let (ms, out) = tuned("", "[sinks.b]\ntype = \"blackhole\"\ninputs = [\"g\"]\n");
        assert_eq!((ms, out.as_str()), (5_000, ""));
        let (ms, out) = tuned("profile_duration = \"20s\"", WINDOWS);
        assert_eq!((ms, out.as_str()), (20_000, ""));
    }

    #[test]
    fn a_run_written_too_short_for_its_windows_is_an_error() {
        let (_, out) = tuned("profile_duration = \"11s\"", WINDOWS);
        assert!(
            out.contains(
                "p.toml:3:20: error: tune: field `profile_duration`: is 11s, but a run needs \
                 14s 500ms for transforms.h's windows to close"
            ) && out.contains("make it at least 14s 500ms, or leave it out"),
            "{out}"
        );
    }
}
