//! The daemon's memory after a burst: state that the busy minutes needed
//! and that was freed goes back to the kernel while the daemon runs on,
//! instead of staying with the process until it restarts.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// How long the burst lasts before the rate falls to a trickle.
const BURST: Duration = Duration::from_secs(8);
/// Below this high-water mark the burst proves nothing about giving back
/// (the idle daemon holds about 20 MiB). It was 64 MiB until the heap
/// maps big blocks on their own and the generator stopped keeping a name
/// table: the burst, then over 300k keys, peaked at 48 MiB.
const LEAST_PEAK_KIB: u64 = 40 << 10;

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn memory_freed_after_a_burst_goes_back_to_the_kernel() {
    let s = Scratch::new();
    let config = s.write(
        "pipeline.toml",
        &format!(
            r#"
[node]
data_dir = "{data}"
workers = 2

[checkpoint]
interval = "1s"

[sources.readings]
type = "generator"
schema = "readings"
keys = 1000000
rate = 100000
rate_steps = [{{ at = "{burst}s", events_per_second = 10 }}]

[transforms.per_sensor]
type = "window"
inputs = ["readings"]
key = ["sensor"]
window = {{ kind = "tumbling", size = "2s" }}
aggregates = {{ n = "count(*)", avg = "avg(temp)" }}

[sinks.out]
type = "blackhole"
inputs = ["per_sensor"]
"#,
            data = s.path("data").display(),
            burst = BURST.as_secs(),
        ),
    );
    let child = eddy()
        .args(["run", "--log-level", "warn"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn eddy");
    let pid = child.id();
    let _daemon = Running(Some(child));
    let started = Instant::now();
    let mut trace = Vec::new();
    // The burst, two windows to close its panes, and room for a trim and
    // a slow machine.
    let settled = BURST + Duration::from_secs(6);
    while started.elapsed() < settled + Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(500));
        let (Some(rss), Some(peak)) = (status_kib(pid, "VmRSS"), status_kib(pid, "VmHWM")) else {
            panic!("the daemon exited: {trace:?}");
        };
        trace.push((started.elapsed().as_secs(), rss >> 10));
        if started.elapsed() >= settled && peak >= LEAST_PEAK_KIB && rss <= peak / 2 {
            return;
        }
    }
    let peak = status_kib(pid, "VmHWM").unwrap_or(0);
    assert!(
        peak >= LEAST_PEAK_KIB,
        "the burst peaked at {} MiB, too little to show memory given back; \
         (s, RSS MiB): {trace:?}",
        peak >> 10
    );
    panic!(
        "the daemon kept more than half of its {} MiB peak a minute after the burst; \
         (s, RSS MiB): {trace:?}",
        peak >> 10
    );
}
