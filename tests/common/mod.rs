//! Shared helpers for the integration tests: run the real `eddy` binary on
//! real files and compare outputs as multisets.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod cluster;
mod notify;
mod ports;
// Each test binary uses some of these: the rest would warn as unused.
#[allow(unused_imports)]
pub use cluster::*;
#[allow(unused_imports)]
pub use notify::*;
pub use ports::free_port;

pub fn eddy() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_eddy"));
    c.env_remove("RUST_LOG").env_remove("STATE_DIRECTORY");
    c
}

/// A scratch directory removed at the end of the test.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, contents).expect("write");
        p
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }
}

/// How long one `eddy run` of a test may take before it counts as hung.
/// Generous: a loaded 2-core CI machine runs these in seconds.
pub const RUN_LIMIT: Duration = Duration::from_secs(240);

/// `Command::output`, but a child still running after `limit` is a failure,
/// not a CI run that never ends: the panic carries every thread's stack
/// (from gdb, where it is installed) and what the child printed so far.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn eddy");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for eddy") {
            break status;
        }
        if started.elapsed() > limit {
            let stacks = Command::new("gdb")
                .args(["-batch", "-p", &child.id().to_string()])
                .args(["-ex", "thread apply all bt"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_else(|e| format!("(no gdb: {e})"));
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr.join().unwrap_or_default();
            panic!(
                "eddy hung: still running after {limit:?}\nstderr:\n{}\nthreads:\n{stacks}",
                String::from_utf8_lossy(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Runs `eddy run` on a config file; panics with its output if it fails.
pub fn run_ok(config: &Path) -> Output {
    let out = output_within(
        eddy().arg("run").arg(config).stdin(Stdio::null()),
        RUN_LIMIT,
    );
    assert!(
        out.status.success(),
        "eddy run {} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        config.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Parses JSON lines.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// Rows as sorted canonical strings: equal multisets give equal vectors.
pub fn multiset(rows: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = rows
        .iter()
        .map(|r| {
            let sorted: BTreeMap<&String, &Value> = r.as_object().expect("object").iter().collect();
            serde_json::to_string(&sorted).expect("serialise")
        })
        .collect();
    v.sort();
    v
}

/// A small deterministic RNG (xorshift64*), so inputs are reproducible
/// from their seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Whether two JSON numbers agree (floats to a relative 1e-9).
pub fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                return x == y;
            }
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        _ => a == b,
    }
}

/// Asserts two sets of rows agree, matching rows by `key_fields` and
/// comparing every field with [`close`].
pub fn assert_rows_match(got: &[Value], expected: &[Value], key_fields: &[&str], what: &str) {
    let key = |r: &Value| -> String {
        key_fields
            .iter()
            .map(|k| r[*k].to_string())
            .collect::<Vec<_>>()
            .join("|")
    };
    let mut got_by: BTreeMap<String, &Value> = BTreeMap::new();
    for r in got {
        assert!(
            got_by.insert(key(r), r).is_none(),
            "{what}: duplicate output row for {}: {r}",
            key(r)
        );
    }
    let exp_by: BTreeMap<String, &Value> = expected.iter().map(|r| (key(r), r)).collect();
    let missing: Vec<&String> = exp_by
        .keys()
        .filter(|k| !got_by.contains_key(*k))
        .take(5)
        .collect();
    let extra: Vec<&String> = got_by
        .keys()
        .filter(|k| !exp_by.contains_key(*k))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: rows differ; missing {missing:?}, extra {extra:?} (got {}, expected {})",
        got.len(),
        expected.len()
    );
    for (k, e) in &exp_by {
        let g = got_by[k];
        for (field, ev) in e.as_object().unwrap() {
            assert!(
                close(&g[field], ev),
                "{what}: row {k}: field {field}: got {}, expected {ev}",
                g[field]
            );
        }
        assert_eq!(
            g.as_object().unwrap().len(),
            e.as_object().unwrap().len(),
            "{what}: row {k}: fields {g} vs {e}"
        );
    }
}

/// Sends `sig` (such as `"TERM"`, `"HUP"`) to a process, with `kill`.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(ok.success());
}

/// A child that is killed and reaped if the test fails before it stops it.
pub struct Running(pub Option<std::process::Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `eddy run` on `pipeline` with `{port}` (its API) and `{data}`
/// (`data` in the scratch dir) filled in and its stderr to `stderr`;
/// returns once the API answers.
pub fn start_with_api(s: &Scratch, port: u16, pipeline: &str, stderr: Stdio) -> Running {
    let text = pipeline
        .replace("{port}", &port.to_string())
        .replace("{data}", &s.path("data").display().to_string());
    let file = s.write("pipeline.toml", &text);
    let child = eddy()
        .arg("run")
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn eddy run");
    let daemon = Running(Some(child));
    wait_for_api(port);
    daemon
}

/// Waits up to 30 s for a daemon's local API on 127.0.0.1:`port` to
/// answer `GET /health`.
pub fn wait_for_api(port: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while http(port, "GET", "/health").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the API on port {port} did not come up"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// One HTTP/1.1 request without a body to 127.0.0.1:`port`; returns the
/// status code and the body, or `None` if nothing answered.
pub fn http(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    http_with(port, method, path, "")
}

/// One HTTP/1.1 request with a JSON `body` to 127.0.0.1:`port`; returns
/// the status code and the body, or `None` if nothing answered.
pub fn http_with(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(200)))
        .ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The rows of two multisets that differ (the first few of each side),
/// for a failure message.
pub fn row_diff(got: &[String], want: &[String]) -> String {
    use std::collections::BTreeMap;
    let mut n: BTreeMap<&String, i64> = BTreeMap::new();
    for g in got {
        *n.entry(g).or_default() += 1;
    }
    for w in want {
        *n.entry(w).or_default() -= 1;
    }
    let (more, less): (Vec<String>, Vec<String>) = n
        .into_iter()
        .filter(|(_, c)| *c != 0)
        .map(|(r, c)| format!("{c:+} {r}"))
        .partition(|l| l.starts_with('+'));
    format!(
        "{} rows too many, {} missing; first: {:#?} {:#?}",
        more.len(),
        less.len(),
        &more[..more.len().min(6)],
        &less[..less.len().min(6)]
    )
}
