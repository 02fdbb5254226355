//! `[node] watermark_interval`: a source's advancing watermark goes
//! downstream at most once per interval, so windows fire in groups as
//! Flink's periodic watermarks make them, and with `"0s"` one by one.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::io::Tap;

/// Runs 0.6 s of paced events into 20 ms tumbling windows; returns the
/// distinct windows of each result batch.
fn firings(interval: &str) -> Vec<usize> {
    let toml = format!(
        r#"
[node]
workers = 1
watermark_interval = "{interval}"
[checkpoint]
enabled = false
[sources.events]
type = "generator"
schema = "readings"
count = 1800
rate = 3000
[transforms.counts]
type = "window"
inputs = ["events"]
key = ["sensor"]
window = {{ kind = "tumbling", size = "20ms" }}
aggregates = {{ count = "count(*)" }}
[sinks.rows]
type = "blackhole"
inputs = ["counts"]
"#
    );
    let (config, mut d) = crate::config::parse("<watermark interval>", &toml);
    let plan = crate::plan::build(&config, &mut d).unwrap_or_else(|| panic!("{}", d.render()));
    let schema = plan
        .nodes
        .iter()
        .find(|n| n.id == "counts")
        .map(|n| n.outputs[0].schema.clone())
        .expect("window");
    let start = schema.index_of("window_start").expect("window_start");
    let batches = Arc::new(Mutex::new(Vec::new()));
    let b = batches.clone();
    let tap: Tap = Arc::new(move |batch| {
        let windows: BTreeSet<i64> = batch.column(start).ints().iter().copied().collect();
        b.lock().expect("tap").push(windows.len());
    });
    let running = super::start(
        Arc::new(plan),
        Arc::new(AtomicBool::new(false)),
        HashMap::from([("rows".to_string(), tap)]),
    )
    .expect("starts");
    let report = running.wait();
    assert_eq!(report.failure, None);
    let v = batches.lock().expect("tap").clone();
    v.into_iter().filter(|&w| w > 0).collect()
}

#[test]
fn windows_fire_once_per_watermark_interval() {
    // 0.6 s of input is 30 windows. Every 250 ms the watermark passes
    // ~12 of them at once, and the end of input the rest; not all at the
    // end.
    let grouped = firings("250ms");
    let windows: usize = grouped.iter().sum();
    assert!(windows >= 29, "{windows} windows");
    assert!(
        (2..=6).contains(&grouped.len()),
        "{} firings: {grouped:?}",
        grouped.len()
    );
    // With every batch, each window fires as the watermark passes it.
    let each = firings("0s");
    assert!(each.len() >= 20, "{} firings: {each:?}", each.len());
}
