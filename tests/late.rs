//! Late records: within `allowed_lateness` they update their window (which
//! fires again with the new result); beyond it they are counted and sent to
//! `late_output`. With one record per batch and the watermark sent with
//! every batch (`watermark_interval = "0s"`) the watermark is exact, so the
//! test can replay it.

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::json;

#[test]
fn late_records_update_within_lateness_and_go_to_late_output_beyond() {
    let s = Scratch::new();
    let mut rng = Rng::new(5);
    // Mostly in order; every 10th record is 0–3 s behind.
    let events: Vec<(String, i64)> = (0..3000)
        .map(|i| {
            let behind = if i % 10 == 9 {
                rng.below(3000) as i64
            } else {
                0
            };
            (format!("k{}", rng.below(5)), 1_000_000 + i * 10 - behind)
        })
        .collect();
    let text: String = events
        .iter()
        .map(|(k, ts)| format!("{}\n", json!({"k": k, "ts": ts})))
        .collect();
    let input = s.write("in.jsonl", &text);
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
workers = 2
batch_size = 1
watermark_interval = "0s"
data_dir = "{data}"
[sources.in]
type = "file"
path = "{input}"
schema = {{ k = "string", ts = "int" }}
event_time = "ts"
[transforms.w]
type = "window"
inputs = ["in"]
key = ["k"]
window = {{ kind = "tumbling", size = "1s", allowed_lateness = "1s" }}
aggregates = {{ n = "count(*)" }}
late_output = "too_late"
[sinks.rows]
type = "file"
inputs = ["w"]
path = "{rows}"
[sinks.late]
type = "file"
inputs = ["too_late"]
path = "{late}"
"#,
            data = s.path("data").display(),
            input = input.display(),
            rows = s.path("rows.jsonl").display(),
            late = s.path("late.jsonl").display()
        ),
    );
    let out = eddy()
        .arg("run")
        .arg(&config)
        .arg("--stats")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Replay: the watermark before record i is the largest earlier ts - 1.
    let lateness = 1000;
    let mut wm = i64::MIN;
    let mut accepted: BTreeMap<(String, i64), i64> = BTreeMap::new();
    let mut late = Vec::new();
    for (k, ts) in &events {
        let start = ts.div_euclid(1000) * 1000;
        if start + 999 + lateness <= wm {
            late.push(json!({"k": k, "ts": ts}));
        } else {
            *accepted.entry((k.clone(), start)).or_default() += 1;
        }
        wm = wm.max(ts - 1);
    }
    assert!(
        late.len() > 50 && late.len() < 300,
        "the input should have some late records: {}",
        late.len()
    );
    assert_eq!(
        multiset(&json_lines(&s.read("late.jsonl"))),
        multiset(&late)
    );

    // A window may be emitted several times (late updates); the last
    // (largest) count is the final one and must match.
    let mut final_counts: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for r in json_lines(&s.read("rows.jsonl")) {
        let key = (
            r["k"].as_str().unwrap().to_string(),
            r["window_start"].as_i64().unwrap(),
        );
        let n = r["n"].as_i64().unwrap();
        let slot = final_counts.entry(key).or_default();
        *slot = (*slot).max(n);
    }
    assert_eq!(final_counts, accepted);
    let stats = String::from_utf8_lossy(&out.stderr);
    let late_column: u64 = stats
        .lines()
        .find(|l| l.starts_with("w "))
        .unwrap()
        .split_whitespace()
        .nth(5)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        late_column as usize,
        late.len(),
        "--stats counts the late records"
    );
}
