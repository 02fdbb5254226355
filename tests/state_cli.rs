//! `eddy state inspect|export|import` on the data dir of a real run: a
//! keyed window whose state outgrows a small cache (so bins are spilled
//! and checkpoints adopt spilled versions), stopped by SIGTERM with every
//! window still open.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Distinct keys; all in one hour-long window, so each is one state entry.
const KEYS: u64 = 48_000;
const RECORDS: u64 = 60_000;
/// Few bins, so each holds ~12 000 keys: more than one 256 KiB chunk.
const BINS: u64 = 4;

/// The run that makes a data dir: `keys` keys over `records` records.
#[derive(Clone, Copy)]
struct Shape {
    keys: u64,
    records: u64,
    bins: u64,
    workers: u64,
    cache: &'static str,
}

const SHARED: Shape = Shape {
    keys: KEYS,
    records: RECORDS,
    bins: BINS,
    workers: 2,
    cache: "64KiB",
};

fn config(s: &Scratch, data: &Path, shape: Shape) -> PathBuf {
    let Shape {
        keys,
        records,
        bins,
        workers,
        cache,
    } = shape;
    let mut text = String::with_capacity(records as usize * 48);
    for i in 0..records {
        // 2026-01-01T00:00:00Z onwards, well inside the first hour.
        text.push_str(&format!(
            "{{\"k\":{},\"v\":{},\"ts\":{}}}\n",
            i % keys,
            i % 97,
            1_767_225_600_000 + i as i64 / 20
        ));
    }
    s.write("in.jsonl", &text);
    s.write(
        "p.toml",
        &format!(
            r#"
[node]
workers = {workers}
bins = {bins}
data_dir = "{data}"
[api]
enabled = false
[state]
cache_bytes = "{cache}"
[checkpoint]
interval = "100ms"
[sources.in]
type = "file"
path = "{input}"
follow = true
schema = {{ k = "int", v = "int", ts = "int" }}
event_time = "ts"
[transforms.w]
type = "window"
inputs = ["in"]
key = ["k"]
window = {{ kind = "tumbling", size = "1h" }}
aggregates = {{ n = "count(*)", total = "sum(v)" }}
[sinks.out]
type = "file"
inputs = ["w"]
path = "{out}"
[sinks.raw]
type = "file"
inputs = ["in"]
path = "{raw}"
"#,
            data = data.display(),
            input = s.path("in.jsonl").display(),
            out = s.path("out.jsonl").display(),
            raw = s.path("raw.jsonl").display(),
        ),
    )
}

/// Starts `eddy run` and waits until the source has read every record
/// (the pass-through sink has them all).
fn start(s: &Scratch, data: &Path, shape: Shape) -> Child {
    let child = eddy()
        .arg("run")
        .arg("--stats")
        .arg(config(s, data, shape))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15 + shape.records / 20_000);
    let read = || std::fs::read(s.path("raw.jsonl")).unwrap_or_default();
    while (read().iter().filter(|&&b| b == b'\n').count() as u64) < shape.records {
        assert!(Instant::now() < deadline, "eddy did not read its input");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// SIGTERM (a final checkpoint), then waits; returns stderr.
fn stop(child: Child) -> String {
    let ok = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(ok.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "eddy run: {}\n{stderr}", out.status);
    assert!(stderr.contains("final checkpoint committed"), "{stderr}");
    stderr
}

/// A data dir with checkpoints of a stopped run, made once and copied into
/// each test's scratch (a data dir takes one process at a time).
fn source(s: &Scratch) -> PathBuf {
    static MADE: OnceLock<(Scratch, PathBuf)> = OnceLock::new();
    let (_, made) = MADE.get_or_init(|| {
        let s = Scratch::new();
        let data = s.path("data");
        let stderr = stop(start(&s, &data, SHARED));
        // The state really left the cache, so checkpoints adopted spills.
        assert!(stderr.contains("state over the cache"), "{stderr}");
        (s, data)
    });
    let copy = s.path("source");
    copy_dir(made, &copy);
    copy
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn state(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = eddy();
    c.arg("state").stdin(Stdio::null());
    for a in args {
        c.arg(a);
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "exit {}: {}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
    o
}

/// Exit 1 with a message that contains every one of `parts`.
fn refused(o: Output, parts: &[&str]) -> String {
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    for p in parts {
        assert!(e.contains(p), "{p:?} missing from: {e}");
    }
    e
}

fn inspect_json(data: &Path) -> Value {
    let o = ok(state(&[&"inspect", &data, &"--json"]));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The inspection without what changes by itself (age, sled's file size).
fn stable(mut v: Value) -> Value {
    v["size_on_disk"] = Value::Null;
    for c in v["checkpoints"].as_array_mut().unwrap() {
        c["age_ms"] = Value::Null;
    }
    v
}

/// `(bin, keys, chunks)` of operator `w` in the current checkpoint.
fn bins(v: &Value) -> Vec<(u64, u64, u64)> {
    let op = v["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "w")
        .unwrap_or_else(|| panic!("no operator w in {v}"));
    op["bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["bin"].as_u64().unwrap(),
                b["keys"].as_u64().unwrap(),
                b["chunks"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The chunk payloads of an export stream (magic, then tag | u32 LE
/// length | payload frames; chunks are tagged `C`).
fn chunks(stream: &[u8]) -> Vec<&[u8]> {
    assert_eq!(&stream[..7], b"EDDYBIN");
    let (mut at, mut out) = (8, Vec::new());
    while at < stream.len() {
        let len = u32::from_le_bytes(stream[at + 1..at + 5].try_into().unwrap()) as usize;
        if stream[at] == b'C' {
            out.push(&stream[at + 5..at + 5 + len]);
        }
        at += 5 + len;
    }
    assert_eq!(at, stream.len());
    out
}

/// Byte offset of chunk `i`'s frame.
fn chunk_offset(stream: &[u8], i: usize) -> usize {
    let mut at = 8;
    let mut seen = 0;
    loop {
        let len = u32::from_le_bytes(stream[at + 1..at + 5].try_into().unwrap()) as usize;
        if stream[at] == b'C' {
            if seen == i {
                return at;
            }
            seen += 1;
        }
        at += 5 + len;
    }
}

/// Exports the bin with most keys to `name`; returns it and the bytes.
fn export_largest(s: &Scratch, data: &Path, name: &str) -> (u64, u64, Vec<u8>) {
    let (bin, keys, chunks) = bins(&inspect_json(data))
        .into_iter()
        .max_by_key(|b| b.1)
        .unwrap();
    assert!(chunks >= 2, "bin {bin}: {keys} keys in {chunks} chunks");
    let out = s.path(name);
    let o = ok(state(&[
        &"export",
        &data,
        &"--operator",
        &"w",
        &"--bin",
        &bin.to_string(),
        &"--out",
        &out,
    ]));
    assert!(
        stderr(&o).contains(&format!("{keys} keys")),
        "{}",
        stderr(&o)
    );
    (bin, keys, std::fs::read(out).unwrap())
}

fn import(data: &Path, bin: u64, file: &Path) -> Output {
    state(&[
        &"import",
        &data,
        &"--operator",
        &"w",
        &"--bin",
        &bin.to_string(),
        &file,
    ])
}

#[test]
fn inspect_shows_the_checkpoints_operator_and_key_counts_of_a_real_run() {
    let s = Scratch::new();
    let data = source(&s);
    let v = inspect_json(&data);
    let ids: Vec<u64> = v["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert!(
        !ids.is_empty() && ids.windows(2).all(|w| w[0] > w[1]),
        "{ids:?}"
    );
    for c in v["checkpoints"].as_array().unwrap() {
        assert_eq!(c["ok"], true, "{c}");
        assert_eq!(c["bin_count"], BINS);
        assert!(c["age_ms"].as_i64().unwrap() >= 0);
    }
    assert_eq!(v["current"], ids[0]);
    assert!(v["size_on_disk"].as_u64().unwrap() > 0);
    let b = bins(&v);
    assert_eq!(b.len() as u64, BINS, "{b:?}");
    assert!(b.iter().all(|&(_, keys, _)| keys > 0), "{b:?}");
    assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), KEYS, "one entry a key");
    assert_eq!(v["checkpoints"][0]["keys"], KEYS);

    let text = String::from_utf8(ok(state(&[&"inspect", &data])).stdout).unwrap();
    assert!(
        text.contains(&format!("{} checkpoint", ids.len())),
        "{text}"
    );
    assert!(
        text.contains(&format!("operators in checkpoint {}", ids[0])),
        "{text}"
    );
    assert!(text.contains("w: watermark 2026-01-01T00:"), "{text}");
    assert!(
        text.contains(&format!("{BINS} bins with state, {KEYS} keys")),
        "{text}"
    );
    // The checkpoint table lists the newest first.
    let first = text
        .lines()
        .find_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap();
    assert_eq!(first, ids[0], "{text}");
}

#[test]
fn a_bin_moves_to_a_fresh_data_dir_and_exports_back_unchanged() {
    let s = Scratch::new();
    let data = source(&s);
    let (bin, keys, original) = export_largest(&s, &data, "bin.eddy");
    let target = s.path("target");
    let o = ok(import(&target, bin, &s.path("bin.eddy")));
    assert!(
        stderr(&o).contains(&format!("installed {keys} keys")),
        "{}",
        stderr(&o)
    );

    let v = inspect_json(&target);
    let moved = bins(&v);
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!((moved[0].0, moved[0].1), (bin, keys));
    assert_eq!(v["checkpoints"][0]["ok"], true);
    assert_eq!(v["checkpoints"][0]["bin_count"], BINS);
    // The operator's watermark came along.
    let src = inspect_json(&data);
    assert_eq!(
        v["operators"][0]["watermark_ms"],
        src["operators"][0]["watermark_ms"]
    );

    // Back out of the target, to stdout this time: the same chunks.
    let back = ok(state(&[
        &"export",
        &target,
        &"--operator",
        &"w",
        &"--bin",
        &bin.to_string(),
    ]))
    .stdout;
    let (a, b) = (chunks(&original), chunks(&back));
    assert!(a.len() >= 2);
    assert!(a == b, "{} chunks exported, {} came back", a.len(), b.len());
}

#[test]
fn a_damaged_or_truncated_stream_is_refused_by_chunk_and_changes_nothing() {
    let s = Scratch::new();
    let data = source(&s);
    let (bin, _, stream) = export_largest(&s, &data, "bin.eddy");
    let target = s.path("target");
    ok(import(&target, bin, &s.path("bin.eddy")));
    let before = stable(inspect_json(&target));
    let target_name = target.display().to_string();
    let at = format!("operator w bin {bin}");

    // Cut inside chunk 1.
    let c1 = chunk_offset(&stream, 1);
    let cut = s.path("cut.eddy");
    std::fs::write(&cut, &stream[..c1 + 1000]).unwrap();
    refused(
        import(&target, bin, &cut),
        &[
            &target_name,
            &at,
            "truncated",
            &format!("in chunk 1 (at byte {c1})"),
            "nothing imported",
        ],
    );
    // A flipped bit in chunk 1.
    let mut bad = stream.clone();
    bad[c1 + 500] ^= 0x04;
    let flipped = s.path("flipped.eddy");
    std::fs::write(&flipped, &bad).unwrap();
    refused(
        import(&target, bin, &flipped),
        &[
            &target_name,
            &at,
            &format!("chunk 1 (at byte {c1}): checksum mismatch"),
        ],
    );
    assert_eq!(
        stable(inspect_json(&target)),
        before,
        "a failed import changed the store"
    );

    // Into a data dir that did not exist: none is left behind.
    let fresh = s.path("fresh");
    refused(import(&fresh, bin, &flipped), &["chunk 1"]);
    assert!(!fresh.exists());
    // The intact stream still imports.
    ok(import(&target, bin, &s.path("bin.eddy")));
}

#[test]
fn a_running_eddy_keeps_the_state_commands_out_and_they_name_its_pid() {
    let s = Scratch::new();
    let data = s.path("data");
    let child = start(&s, &data, SHARED);
    let pid = format!("pid {}", child.id());
    let e = refused(state(&[&"inspect", &data]), &[&pid, "in use"]);
    assert!(e.contains(&data.display().to_string()), "{e}");
    refused(state(&[&"inspect", &data, &"--json"]), &[&pid]);
    refused(
        state(&[
            &"export",
            &data,
            &"--operator",
            &"w",
            &"--bin",
            &"0",
            &"--out",
            &s.path("x"),
        ]),
        &[&pid],
    );
    assert!(!s.path("x").exists());
    stop(child);
    // Stopped, it is free again.
    assert!(!bins(&inspect_json(&data)).is_empty());
}

#[test]
fn unknown_operators_and_bins_out_of_range_are_clear_errors() {
    let s = Scratch::new();
    let data = source(&s);
    let export = |op: &str, bin: &str, extra: &[&str]| {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&"export", &data, &"--operator", &op, &"--bin", &bin];
        for e in extra {
            args.push(e);
        }
        args.push(&"--out");
        let out = s.path("out.eddy");
        args.push(&out);
        state(&args)
    };
    refused(
        export("nope", "0", &[]),
        &["operator nope bin 0", "no operator \"nope\" (it has w)"],
    );
    refused(
        export("w", "99", &[]),
        &[
            "there is no bin 99",
            &format!("partitioned into {BINS} bins (0 to {})", BINS - 1),
        ],
    );
    refused(
        export("w", "0", &["--checkpoint", "999999"]),
        &["has no checkpoint 999999"],
    );
    refused(
        state(&[&"inspect", &s.path("missing")]),
        &["no data dir at"],
    );
    assert!(!s.path("out.eddy").exists());

    // A stream imported under another operator or bin than its own, or
    // into a data dir of another pipeline.
    let (bin, _, _) = export_largest(&s, &data, "bin.eddy");
    let file = s.path("bin.eddy");
    let target = s.path("target");
    let other = (bin + 1) % BINS;
    refused(
        import(&target, other, &file),
        &[&format!(
            "holds operator \"w\" bin {bin}, not operator \"w\" bin {other}"
        )],
    );
    refused(
        state(&[
            &"import",
            &target,
            &"--operator",
            &"x",
            &"--bin",
            &bin.to_string(),
            &file,
        ]),
        &["not operator \"x\""],
    );
    assert!(!target.exists(), "a refused import created the data dir");
    // Usage errors are clap's: exit 2.
    let o = state(&[&"export", &data, &"--operator", &"w"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// Runs `eddy state ARGS` and returns its output with its peak resident
/// memory in bytes (from `wait4`, so nothing between two samples is missed).
#[allow(clippy::zombie_processes)] // reaped by wait4, which also gives its rusage
fn state_peak_rss(args: &[&dyn AsRef<std::ffi::OsStr>]) -> (std::process::ExitStatus, u64, String) {
    use std::os::unix::process::ExitStatusExt;
    let mut c = eddy();
    c.arg("state")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for a in args {
        c.arg(a);
    }
    let mut child = c.spawn().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    // Linux reports ru_maxrss in KiB.
    (
        std::process::ExitStatus::from_raw(status),
        usage.ru_maxrss as u64 * 1024,
        err,
    )
}

/// Issue 3's round trip: one bin of an operator holding a million keys is
/// exported, imported into a fresh data dir and exported back unchanged,
/// and the export's peak memory is bounded by its chunks, not the bin.
#[test]
fn a_bin_of_a_million_keys_round_trips_with_export_memory_bounded_by_the_chunk() {
    const MILLION: u64 = 1_000_000;
    let s = Scratch::new();
    let data = s.path("data");
    let shape = Shape {
        keys: MILLION,
        records: MILLION,
        bins: 1,
        workers: 1,
        cache: "1GiB",
    };
    stop(start(&s, &data, shape));
    let b = bins(&inspect_json(&data));
    assert_eq!(b.len(), 1, "{b:?}");
    let (bin, keys, chunk_count) = b[0];
    assert_eq!((bin, keys), (0, MILLION), "every key in the one bin");

    // A baseline for the process: the same binary opening the same store.
    let (st, inspect_rss, err) = state_peak_rss(&[&"inspect", &data]);
    assert!(st.success(), "{err}");
    let out = s.path("bin0.eddybin");
    let (st, export_rss, err) = state_peak_rss(&[
        &"export",
        &data,
        &"--operator",
        &"w",
        &"--bin",
        &"0",
        &"--out",
        &out,
    ]);
    assert!(st.success(), "{err}");
    let original = std::fs::read(&out).unwrap();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "export of {keys} keys: {:.1} MiB in {chunk_count} chunks; peak RSS {:.1} MiB (inspect {:.1} MiB)",
        mib(original.len() as u64),
        mib(export_rss),
        mib(inspect_rss)
    );
    // Chunks hold at most 256 KiB of entries; the encoder, the checksum
    // and the write buffer each hold about one. The bin is ~100 times that.
    assert!(original.len() > 16 << 20, "{} bytes", original.len());
    assert!(
        export_rss <= inspect_rss + (8 << 20),
        "export peaked at {:.1} MiB, inspect of the same store at {:.1} MiB",
        mib(export_rss),
        mib(inspect_rss)
    );

    let target = s.path("target");
    ok(import(&target, 0, &out));
    assert_eq!(
        bins(&inspect_json(&target)),
        vec![(0, MILLION, chunk_count)]
    );
    let back = s.path("back.eddybin");
    ok(state(&[
        &"export",
        &target,
        &"--operator",
        &"w",
        &"--bin",
        &"0",
        &"--out",
        &back,
    ]));
    let back = std::fs::read(back).unwrap();
    let (a, b) = (chunks(&original), chunks(&back));
    assert!(a == b, "{} chunks exported, {} came back", a.len(), b.len());
}
