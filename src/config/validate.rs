//! Checks of the component graph as a whole: ids, inputs, cycles.

use std::collections::HashMap;

use super::diag::{Context, Diagnostics, suggest};
use super::model::{Config, Section};

/// Runs every graph check, adding all problems to `d`.
pub(crate) fn check_graph(config: &Config, d: &mut Diagnostics) {
    let streams = check_ids(config, d);
    check_inputs(config, &streams, d);
    check_cycles(config, &streams, d);
    check_ends(config, d);
    check_unused(config, &streams, d);
}

/// The index of the component that produces each stream name.
fn check_ids(config: &Config, d: &mut Diagnostics) -> HashMap<String, usize> {
    let mut streams: HashMap<String, usize> = HashMap::new();
    let mut declare =
        |name: &str, span: std::ops::Range<usize>, index: usize, d: &mut Diagnostics| {
            if let Some(&first) = streams.get(name) {
                let c = &config.components[first];
                let ctx = Context {
                    component: Some(config.components[index].qualified_id()),
                    field: None,
                };
                d.error(
                    span,
                    &ctx,
                    format!("the id `{name}` is already used by {}", c.qualified_id()),
                );
            } else {
                streams.insert(name.to_string(), index);
            }
        };
    for (i, c) in config.components.iter().enumerate() {
        declare(&c.id.value, c.id.span.clone(), i, d);
    }
    for (i, c) in config.components.iter().enumerate() {
        if let Some(late) = c.late_output() {
            declare(&late.value, late.span.clone(), i, d);
        }
    }
    streams
}

fn check_inputs(config: &Config, streams: &HashMap<String, usize>, d: &mut Diagnostics) {
    for c in &config.components {
        let ctx = Context {
            component: Some(c.qualified_id()),
            field: Some("inputs".into()),
        };
        for (k, input) in c.inputs.iter().enumerate() {
            if c.inputs[..k]
                .iter()
                .any(|earlier| earlier.value == input.value)
            {
                d.error(
                    input.span.clone(),
                    &ctx,
                    format!("`{}` is listed twice", input.value),
                );
                continue;
            }
            match streams.get(&input.value).map(|&i| &config.components[i]) {
                Some(p) if p.section == Section::Sink => {
                    d.error(
                        input.span.clone(),
                        &ctx,
                        format!("`{}` is a sink; sinks have no output", input.value),
                    );
                }
                Some(p) if p.id.value == c.id.value && p.section == c.section => {
                    d.error(
                        input.span.clone(),
                        &ctx,
                        "a component cannot be its own input",
                    );
                }
                Some(_) => {}
                None => {
                    let names = streams
                        .iter()
                        .filter(|(_, i)| config.components[**i].section != Section::Sink)
                        .map(|(n, _)| n.as_str());
                    let hint = suggest(&input.value, names)
                        .map(|s| format!(" (did you mean `{s}`?)"))
                        .unwrap_or_default();
                    d.error(
                        input.span.clone(),
                        &ctx,
                        format!("unknown input `{}`{hint}", input.value),
                    );
                }
            }
        }
    }
}

fn check_cycles(config: &Config, streams: &HashMap<String, usize>, d: &mut Diagnostics) {
    // Colours: 0 unvisited, 1 on the current path, 2 done.
    let n = config.components.len();
    let mut colour = vec![0u8; n];
    let mut path = Vec::new();
    fn visit(
        i: usize,
        config: &Config,
        streams: &HashMap<String, usize>,
        colour: &mut [u8],
        path: &mut Vec<usize>,
        d: &mut Diagnostics,
    ) {
        colour[i] = 1;
        path.push(i);
        for input in &config.components[i].inputs {
            let Some(&j) = streams.get(&input.value) else {
                continue;
            };
            if j == i {
                continue; // reported as "its own input"
            }
            if colour[j] == 1 {
                let start = path.iter().position(|&p| p == j).unwrap_or(0);
                let ids: Vec<&str> = path[start..]
                    .iter()
                    .map(|&p| config.components[p].id.value.as_str())
                    .collect();
                let c = &config.components[i];
                let ctx = Context {
                    component: Some(c.qualified_id()),
                    field: Some("inputs".into()),
                };
                d.error(
                    input.span.clone(),
                    &ctx,
                    format!(
                        "cycle: {} -> {}",
                        ids.join(" -> "),
                        config.components[j].id.value
                    ),
                );
            } else if colour[j] == 0 {
                visit(j, config, streams, colour, path, d);
            }
        }
        path.pop();
        colour[i] = 2;
    }
    for i in 0..n {
        if colour[i] == 0 {
            visit(i, config, streams, &mut colour, &mut path, d);
        }
    }
}

fn check_ends(config: &Config, d: &mut Diagnostics) {
    let has = |s: Section| config.components.iter().any(|c| c.section == s);
    if !config.components.is_empty() {
        if !has(Section::Source) {
            d.error(
                0..0,
                &Context::default(),
                "the pipeline has no source; add a [sources.NAME] table",
            );
        }
        if !has(Section::Sink) {
            d.error(
                0..0,
                &Context::default(),
                "the pipeline has no sink; add a [sinks.NAME] table (type \"blackhole\" discards)",
            );
        }
    }
}

fn check_unused(config: &Config, streams: &HashMap<String, usize>, d: &mut Diagnostics) {
    let mut used = vec![false; config.components.len()];
    for c in &config.components {
        for input in &c.inputs {
            if let Some(&i) = streams.get(&input.value) {
                used[i] = true;
            }
        }
    }
    for (i, c) in config.components.iter().enumerate() {
        if c.section != Section::Sink && !used[i] {
            let ctx = Context {
                component: Some(c.qualified_id()),
                field: None,
            };
            d.warning(
                c.id.span.clone(),
                &ctx,
                "its output is not used by any transform or sink",
            );
        }
    }
}
