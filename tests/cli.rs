//! The command line as users meet it: version, the quick start, `--stats`,
//! signals, and bounded memory under backpressure.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn version_is_printed() {
    let out = eddy().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("eddy {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bench_scaling_prints_both_policies_for_every_scenario_as_json() {
    let out = eddy()
        .args(["bench", "scaling", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = doc["scenarios"].as_array().unwrap();
    assert_eq!(rows.len(), 16, "8 scenarios × 2 policies: {doc}");
    assert!(
        rows.iter().any(|r| r["scenario"] == "hot-bin"),
        "the hot-bin scenario: {doc}"
    );
    for r in rows {
        assert!(
            matches!(r["policy"].as_str(), Some("ds2" | "threshold")),
            "{r}"
        );
        assert!(r["scenario"].is_string(), "{r}");
        for k in ["oscillations", "over_provisioned_s", "under_provisioned_s"] {
            assert!(r[k].is_u64(), "{k} in {r}");
        }
        if r["policy"] == "ds2" {
            let d = r["decisions_to_converge"].as_u64().unwrap();
            assert!((1..=3).contains(&d), "{r}");
            assert_eq!(r["oscillations"], 0, "{r}");
        }
    }
}

#[test]
fn quickstart_prints_windows_and_ends_by_itself() {
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/quickstart.toml");
    let start = Instant::now();
    let out = eddy()
        .arg("run")
        .arg(&config)
        .arg("--stats")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(30));
    let rows = json_lines(&String::from_utf8_lossy(&out.stdout));
    // 5 s of event time, 4 sensors: one row per sensor and second (and the
    // disorder can add an edge window).
    assert!((20..=24).contains(&rows.len()), "{} rows", rows.len());
    for r in &rows {
        assert!(r["sensor"].as_str().unwrap().starts_with('s'));
        assert!(r["readings"].as_i64().unwrap() > 0);
        assert!(
            r["avg_f"].as_f64().unwrap() > 68.0,
            "only readings above 20 °C pass: {r}"
        );
        assert_eq!(
            r["window_end"].as_i64().unwrap() - r["window_start"].as_i64().unwrap(),
            1000
        );
    }
    let total: i64 = rows.iter().map(|r| r["readings"].as_i64().unwrap()).sum();
    let stats = String::from_utf8_lossy(&out.stderr);
    assert!(
        stats.contains("p99 ms"),
        "--stats prints the table:\n{stats}"
    );
    for component in ["readings", "warm", "fahrenheit", "per_sensor", "console"] {
        assert!(
            stats.lines().any(|l| l.starts_with(component)),
            "{component} missing from stats:\n{stats}"
        );
    }
    let warm_out: i64 = stats
        .lines()
        .find(|l| l.starts_with("warm"))
        .unwrap()
        .split_whitespace()
        .nth(3)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        total, warm_out,
        "every warm reading is counted in exactly one window"
    );
}

fn endless(s: &Scratch, rate: Option<u64>, sink: &str) -> std::path::PathBuf {
    let rate = rate.map(|r| format!("rate = {r}")).unwrap_or_default();
    s.write(
        "endless.toml",
        &format!(
            r#"
[node]
workers = 2
data_dir = "{data}"
[sources.readings]
type = "generator"
{rate}
[transforms.per_sensor]
type = "window"
inputs = ["readings"]
key = ["sensor"]
window = {{ kind = "tumbling", size = "1s" }}
aggregates = {{ n = "count(*)" }}
{sink}
"#,
            data = s.path("data").display()
        ),
    )
}

/// Runs `config` until `after`, sends SIGTERM, and returns the exit status
/// and stderr.
fn terminate_after(
    config: &std::path::Path,
    after: Duration,
) -> (std::process::ExitStatus, String) {
    let mut child = eddy()
        .arg("run")
        .arg(config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    signal(child.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "eddy did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

fn counted(rows: &[serde_json::Value]) -> i64 {
    rows.iter().map(|r| r["n"].as_i64().unwrap()).sum()
}

#[test]
fn sigterm_takes_a_final_checkpoint_and_the_next_run_continues_exactly() {
    let s = Scratch::new();
    let sink = |name: &str| {
        format!(
            "[sinks.out]\ntype = \"file\"\ninputs = [\"per_sensor\"]\npath = \"{}\"\ndelivery = \"exactly_once\"",
            s.path(name).display()
        )
    };
    // 3 s of readings at 20 000 a second.
    let finite = |name: &str| {
        let text = std::fs::read_to_string(endless(&s, Some(20_000), &sink(name))).unwrap();
        s.write(
            &format!("{name}.toml"),
            &text
                .replace(
                    "type = \"generator\"",
                    "type = \"generator\"\ncount = 60000",
                )
                .replace(
                    &s.path("data").display().to_string(),
                    &s.path(&format!("{name}-data")).display().to_string(),
                ),
        )
    };
    let reference = finite("reference.jsonl");
    run_ok(&reference);
    let want = multiset(&json_lines(&s.read("reference.jsonl")));

    let config = finite("stopped.jsonl");
    let (status, stderr) = terminate_after(&config, Duration::from_millis(1500));
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(stderr.contains("final checkpoint committed"), "{stderr}");
    let before = json_lines(&s.read("stopped.jsonl"));
    assert!(
        counted(&before) < 60_000,
        "the first run should stop part way"
    );
    let out = run_ok(&config);
    assert!(String::from_utf8_lossy(&out.stderr).contains("restoring checkpoint"));
    let got = multiset(&json_lines(&s.read("stopped.jsonl")));
    assert_eq!(
        got, want,
        "stop + restart gives the uninterrupted run's rows, each once"
    );
}

#[test]
fn without_checkpoints_sigterm_drains_and_fires_open_windows() {
    let s = Scratch::new();
    let sink = format!(
        "[sinks.out]\ntype = \"file\"\ninputs = [\"per_sensor\"]\npath = \"{}\"\n[checkpoint]\nenabled = false",
        s.path("out.jsonl").display()
    );
    let config = endless(&s, Some(20_000), &sink);
    let (status, stderr) = terminate_after(&config, Duration::from_millis(1500));
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(stderr.contains("draining"), "{stderr}");
    let produced: i64 = stderr
        .lines()
        .find_map(|l| l.split("finished: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary in {stderr}"));
    assert!(produced > 10_000);
    assert_eq!(
        counted(&json_lines(&s.read("out.jsonl"))),
        produced,
        "draining fires every open window: nothing produced is lost"
    );
}

#[test]
fn a_stalled_reader_of_stdout_slows_eddy_instead_of_filling_memory() {
    let s = Scratch::new();
    let sink = "[sinks.out]\ntype = \"stdout\"\ninputs = [\"readings\"]";
    let config = endless(&s, None, sink);
    // Nobody reads stdout: the pipe fills, then the writer, the channels,
    // and the workers must all wait.
    let mut child = eddy()
        .arg("run")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    std::thread::sleep(Duration::from_millis(1500));
    let early = rss(child.id());
    std::thread::sleep(Duration::from_millis(2500));
    let late = rss(child.id());
    assert!(
        child.try_wait().unwrap().is_none(),
        "eddy exited while blocked"
    );
    child.kill().unwrap();
    let _ = child.wait();
    assert!(
        late < 200 * 1024,
        "RSS {late} KiB: memory grows while output is blocked"
    );
    assert!(
        late < early + 20 * 1024,
        "RSS grew from {early} KiB to {late} KiB while blocked"
    );
}

#[test]
fn a_followed_file_is_tailed_until_sigterm() {
    let s = Scratch::new();
    let input = s.write("in.jsonl", "{\"n\": 1}\n{\"n\": 2}\n");
    let config = s.write(
        "p.toml",
        &format!(
            "[node]\ndata_dir = \"{}\"\n[sources.in]\ntype = \"file\"\npath = \"{}\"\nfollow = true\nschema = {{ n = \"int\" }}\n[sinks.out]\ntype = \"file\"\ninputs = [\"in\"]\npath = \"{}\"\n",
            s.path("data").display(),
            input.display(),
            s.path("out.jsonl").display()
        ),
    );
    let mut child = eddy()
        .arg("run")
        .arg(&config)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let wait_for = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while json_lines(&s.read("out.jsonl")).len() < n {
            assert!(
                Instant::now() < deadline,
                "only {:?} arrived",
                s.read("out.jsonl")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(2);
    // Appended lines arrive while eddy runs, including one written in two
    // parts (the first read sees half a line).
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&input)
        .unwrap();
    f.write_all(b"{\"n\": 3}\n{\"n\"").unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    f.write_all(b": 4}\n").unwrap();
    wait_for(4);
    signal(child.id(), "TERM");
    let status = child.wait().unwrap();
    assert!(status.success());
    let got: Vec<i64> = json_lines(&s.read("out.jsonl"))
        .iter()
        .map(|r| r["n"].as_i64().unwrap())
        .collect();
    assert_eq!(got, vec![1, 2, 3, 4]);
}

#[test]
fn a_missing_input_file_is_named_and_nothing_starts() {
    let s = Scratch::new();
    let config = s.write(
        "p.toml",
        &format!("[node]\ndata_dir = \"{}\"\n[sources.in]\ntype = \"file\"\npath = \"/nonexistent/in.jsonl\"\nschema = {{ n = \"int\" }}\n[sinks.out]\ntype = \"stdout\"\ninputs = [\"in\"]\n",
            s.path("data").display()
        ),
    );
    let out = eddy().arg("run").arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sources.in: cannot open /nonexistent/in.jsonl"),
        "{err}"
    );
}

#[test]
fn a_closed_stdout_stops_an_endless_pipeline() {
    let s = Scratch::new();
    let config = endless(
        &s,
        None,
        "[sinks.out]\ntype = \"stdout\"\ninputs = [\"readings\"]",
    );
    let mut child = eddy()
        .arg("run")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read one line, then close the pipe, as `eddy run ... | head -1` does.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("eddy kept running after its stdout was closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}
