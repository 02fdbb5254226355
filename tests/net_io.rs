//! The network connectors on a real `eddy run` over loopback sockets: the
//! HTTP ingest source under overload (503s, and no accepted record lost),
//! the HTTP sink against a peer that fails at first, TCP and UDP round
//! trips, and malformed lines counted in the dead-letter output.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Starts `eddy run` with its log in `log`.
fn start(config: &Path, log: &Path) -> Running {
    let err = std::fs::File::create(log).unwrap();
    Running(Some(
        eddy()
            .arg("run")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap(),
    ))
}

/// Waits until the log of a run contains `text`.
fn wait_for_log(log: &Path, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = std::fs::read_to_string(log).unwrap_or_default();
        if got.contains(text) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "`{text}` never appeared in the log:\n{got}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `done` holds, or fails with `what` after `secs`.
fn wait_until(secs: u64, what: impl Fn() -> String, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {}", what());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops a run with SIGTERM and asserts it exits 0.
fn stop(mut run: Running, log: &Path) {
    let mut child = run.0.take().unwrap();
    signal(child.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "eddy did not stop; log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "eddy exited with {status}; log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// An HTTP answer: status, headers (lower-case names), body.
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

/// One `POST` on its own connection; `None` if the connection failed.
fn post(port: u16, path: &str, body: &[u8]) -> Option<Answer> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    // The server may answer before the body (413) and close.
    let _ = s.write_all(body);
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Answer {
        status,
        headers,
        body: body.to_string(),
    })
}

/// A small HTTP/1.1 server that keeps connections alive, answers the
/// first `fail_first` requests 500 and the others 200 after `delay`, and
/// keeps the lines of the bodies it answered 200.
struct TestServer {
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
    requests: Arc<AtomicU64>,
}

impl TestServer {
    fn start(fail_first: u64, delay: Duration) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicU64::new(0));
        let (l, r) = (lines.clone(), requests.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (l, r) = (l.clone(), r.clone());
                std::thread::spawn(move || serve_test(conn, fail_first, delay, &l, &r));
            }
        });
        TestServer {
            port,
            lines,
            requests,
        }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

fn serve_test(
    conn: TcpStream,
    fail_first: u64,
    delay: Duration,
    lines: &Mutex<Vec<String>>,
    requests: &AtomicU64,
) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut length = 0usize;
        let mut first = true;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if first {
                assert!(h.starts_with("POST /in HTTP/1.1"), "request line {h:?}");
                first = false;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':')
                && n.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0u8; length];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let n = requests.fetch_add(1, SeqCst);
        std::thread::sleep(delay);
        let status = if n < fail_first { 500 } else { 200 };
        if status == 200 {
            let text = String::from_utf8(body).unwrap();
            lines
                .lock()
                .unwrap()
                .extend(text.lines().map(str::to_string));
        }
        let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok");
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// The `id` fields of JSON lines.
fn ids(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}"));
            v["id"].as_str().expect("an id").to_string()
        })
        .collect()
}

#[test]
fn http_ingest_under_overload_answers_503_and_loses_no_accepted_record() {
    // SIGTERM takes a final checkpoint: the source closes and hands over
    // its queue before the barrier.
    overload("[checkpoint]\ninterval = \"300ms\"");
}

#[test]
fn http_ingest_without_checkpoints_drains_its_queue_when_stopped() {
    // SIGTERM stops the sources: the source closes, drains, then ends.
    overload("[checkpoint]\nenabled = false");
}

/// Posts far more than the pipeline can take, stops eddy as soon as the
/// posting is done, and checks that every accepted record was delivered.
fn overload(checkpoint: &str) {
    let s = Scratch::new();
    let port = free_port();
    // The sink's peer takes 20 records per 20 ms: about 1000 records/s,
    // far less than the posting threads send.
    let peer = TestServer::start(0, Duration::from_millis(20));
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
workers = 1
batch_size = 16
channel_capacity = 1
data_dir = "{data}"
[api]
enabled = false
{checkpoint}
[sources.ingest]
type = "http"
address = "127.0.0.1:{port}"
path = "/ingest"
schema = {{ id = "string", n = "int" }}
queue_records = 200
queue_bytes = "64KiB"
max_body_bytes = "16KiB"
[sinks.out]
type = "http"
inputs = ["ingest"]
url = "http://127.0.0.1:{peer}/in"
batch_records = 20
batch_timeout = "50ms"
"#,
            data = s.path("data").display(),
            peer = peer.port
        ),
    );
    let log = s.path("eddy.log");
    let run = start(&config, &log);
    wait_for_log(&log, "listening for POST");

    let (threads, requests, per_request) = (8, 40, 20);
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(AtomicU64::new(0));
    let posters: Vec<_> = (0..threads)
        .map(|t| {
            let (accepted, refused) = (accepted.clone(), refused.clone());
            std::thread::spawn(move || {
                for r in 0..requests {
                    let ids: Vec<String> =
                        (0..per_request).map(|k| format!("{t}-{r}-{k}")).collect();
                    let body: String = ids
                        .iter()
                        .enumerate()
                        .map(|(k, id)| format!("{{\"id\":\"{id}\",\"n\":{k}}}\n"))
                        .collect();
                    let a = post(port, "/ingest", body.as_bytes()).expect("an answer");
                    match a.status {
                        200 => {
                            let v: Value = serde_json::from_str(&a.body).unwrap();
                            assert_eq!(v["accepted"], per_request, "{}", a.body);
                            assert_eq!(v["rejected"], 0, "{}", a.body);
                            accepted.lock().unwrap().extend(ids);
                        }
                        503 => {
                            assert_eq!(
                                a.headers.get("retry-after").map(String::as_str),
                                Some("1"),
                                "a 503 says when to retry"
                            );
                            refused.fetch_add(1, SeqCst);
                            // Back off a little (less than asked, to keep
                            // the pressure on).
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        other => panic!("unexpected answer {other}: {}", a.body),
                    }
                }
            })
        })
        .collect();
    for p in posters {
        p.join().unwrap();
    }
    let accepted: BTreeSet<String> = accepted.lock().unwrap().iter().cloned().collect();
    let refused = refused.load(SeqCst);
    println!(
        "{} requests accepted, {refused} refused with 503",
        accepted.len() / per_request
    );
    assert!(refused > 0, "the overload was never refused");
    assert!(!accepted.is_empty(), "nothing was accepted");

    // A body over max_body_bytes is refused whole, before it is sent.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        c,
        "POST /ingest HTTP/1.1\r\nHost: x\r\nContent-Length: 20480\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // Only POST to the configured path.
    assert_eq!(post(port, "/other", b"{}\n").unwrap().status, 404);

    // Stop at once: what was accepted but is still queued must be handed
    // over and delivered before eddy exits.
    stop(run, &log);
    // Every record of every accepted request reached the sink's peer.
    let missing = || -> Vec<String> {
        let got: BTreeSet<String> = ids(&peer.lines()).into_iter().collect();
        accepted.difference(&got).cloned().collect()
    };
    let m = missing();
    assert!(
        m.is_empty(),
        "{} of {} accepted records never arrived, such as {:?}; log:\n{}",
        m.len(),
        accepted.len(),
        &m[..m.len().min(5)],
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let got = ids(&peer.lines());
    let extra: Vec<&String> = got.iter().filter(|i| !accepted.contains(*i)).collect();
    assert!(
        extra.is_empty(),
        "records of refused requests arrived: {:?}",
        &extra[..extra.len().min(5)]
    );
}

#[test]
fn http_sink_retries_until_the_peer_takes_every_record() {
    let s = Scratch::new();
    let peer = TestServer::start(3, Duration::ZERO);
    let n = 500;
    let input: String = (0..n)
        .map(|i| format!("{{\"id\":\"r{i}\",\"n\":{i}}}\n"))
        .collect();
    s.write("in.jsonl", &input);
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
workers = 2
data_dir = "{data}"
[api]
enabled = false
[checkpoint]
enabled = false
[sources.lines]
type = "file"
path = "{input}"
schema = {{ id = "string", n = "int" }}
[sinks.out]
type = "http"
inputs = ["lines"]
url = "http://127.0.0.1:{peer}/in"
batch_records = 100
batch_timeout = "100ms"
retry_initial_backoff = "20ms"
retry_max_backoff = "100ms"
max_retries = 10
"#,
            data = s.path("data").display(),
            input = s.path("in.jsonl").display(),
            peer = peer.port
        ),
    );
    // The file source ends, so the run ends after the sink has delivered.
    let out = run_ok(&config);
    let log = String::from_utf8_lossy(&out.stderr);
    let got: BTreeSet<String> = ids(&peer.lines()).into_iter().collect();
    let expected: BTreeSet<String> = (0..n).map(|i| format!("r{i}")).collect();
    assert_eq!(
        got, expected,
        "every record arrives once the peer recovers; log:\n{log}"
    );
    let requests = peer.requests.load(SeqCst);
    assert!(
        requests >= 3 + 5,
        "{requests} requests: 3 failed, then at least 5 batches of 100"
    );
    assert!(log.contains("answered 500; retry 1 of 10"), "{log}");
}

#[test]
fn tcp_round_trip_keeps_every_line_in_order() {
    let s = Scratch::new();
    let (src_port, sink_port) = (free_port(), free_port());
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
workers = 2
data_dir = "{data}"
[api]
enabled = false
[checkpoint]
enabled = false
[sources.tcp_in]
type = "tcp"
address = "127.0.0.1:{src_port}"
schema = {{ id = "string", c = "int", i = "int" }}
[sinks.tcp_out]
type = "tcp"
inputs = ["tcp_in"]
address = "127.0.0.1:{sink_port}"
retry_initial_backoff = "20ms"
retry_max_backoff = "200ms"
max_retries = 1000
"#,
            data = s.path("data").display()
        ),
    );
    let log = s.path("eddy.log");
    let run = start(&config, &log);
    wait_for_log(&log, "listening for lines on tcp://");
    // Two senders at once; the sink's peer is not listening yet, so the
    // sink has to reconnect with backoff.
    let per_conn = 5000;
    let senders: Vec<_> = (0..2)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", src_port)).unwrap();
                let mut text = String::new();
                for i in 0..per_conn {
                    text.push_str(&format!("{{\"id\":\"c{c}-{i}\",\"c\":{c},\"i\":{i}}}\n"));
                }
                for piece in text.as_bytes().chunks(7_777) {
                    s.write_all(piece).unwrap();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let listener = TcpListener::bind(("127.0.0.1", sink_port)).unwrap();
    let (conn, _) = listener.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(conn);
    let mut next = [0i64; 2];
    let mut seen = 0;
    while seen < 2 * per_conn {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the sink closed after {seen} lines"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        let (c, i) = (v["c"].as_i64().unwrap() as usize, v["i"].as_i64().unwrap());
        assert_eq!(i, next[c], "connection {c}'s lines arrive in order: {line}");
        next[c] += 1;
        seen += 1;
    }
    for t in senders {
        t.join().unwrap();
    }
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(log_text.contains("cannot send"), "{log_text}");
    stop(run, &log);
}

#[test]
fn udp_round_trip_at_a_moderate_rate_delivers_every_line() {
    let s = Scratch::new();
    let src_port = free_port();
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let sink_port = receiver.local_addr().unwrap().port();
    let api = free_port();
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
workers = 1
data_dir = "{data}"
[api]
address = "127.0.0.1:{api}"
[checkpoint]
enabled = false
[sources.udp_in]
type = "udp"
address = "127.0.0.1:{src_port}"
schema = {{ id = "string", i = "int" }}
[sinks.udp_out]
type = "udp"
inputs = ["udp_in"]
address = "127.0.0.1:{sink_port}"
max_datagram_bytes = 512
"#,
            data = s.path("data").display()
        ),
    );
    let log = s.path("eddy.log");
    let run = start(&config, &log);
    wait_for_log(&log, "listening for lines on udp://");
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    // 2000 lines, 10 to a datagram, 200 datagrams spread over ~0.4 s: far
    // below what loopback and the default socket buffers hold, so nothing
    // is dropped (UDP could drop under load; this rate is not load).
    let n = 2000;
    for d in 0..n / 10 {
        let datagram: String = (d * 10..d * 10 + 10)
            .map(|i| format!("{{\"id\":\"u{i}\",\"i\":{i}}}\n"))
            .collect();
        sender
            .send_to(datagram.as_bytes(), ("127.0.0.1", src_port))
            .unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut got = BTreeSet::new();
    let mut buf = vec![0u8; 65_536];
    let mut datagrams = 0;
    while got.len() < n {
        let Ok(k) = receiver.recv(&mut buf) else {
            break;
        };
        datagrams += 1;
        assert!(
            k <= 512,
            "a datagram of {k} bytes exceeds max_datagram_bytes"
        );
        for line in String::from_utf8_lossy(&buf[..k]).lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            got.insert(v["i"].as_i64().unwrap());
        }
    }
    println!(
        "{} of {n} lines arrived in {datagrams} datagrams",
        got.len()
    );
    assert_eq!(got.len(), n, "loopback at this rate drops nothing");
    let metrics = get_metrics(api);
    assert_eq!(
        metric(&metrics, "component_received_events_total", "udp_in"),
        2000.0
    );
    assert_eq!(
        metric(&metrics, "component_sent_events_total", "udp_out"),
        2000.0
    );
    assert_eq!(metric(&metrics, "component_errors_total", "udp_out"), 0.0);
    stop(run, &log);
}

#[test]
fn malformed_lines_are_rejected_counted_and_dead_lettered() {
    let s = Scratch::new();
    let (port, api, tcp_port) = (free_port(), free_port(), free_port());
    let dl = s.path("dead.jsonl");
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
workers = 2
data_dir = "{data}"
dead_letter = "{dl}"
[api]
address = "127.0.0.1:{api}"
[checkpoint]
enabled = false
[sources.ingest]
type = "http"
address = "127.0.0.1:{port}"
schema = {{ id = "string", n = "int" }}
[sources.tcp_in]
type = "tcp"
address = "127.0.0.1:{tcp_port}"
schema = {{ id = "string", n = "int" }}
max_line_bytes = 100
[sinks.out]
type = "file"
inputs = ["ingest", "tcp_in"]
path = "{out}"
"#,
            data = s.path("data").display(),
            dl = dl.display(),
            out = s.path("out.jsonl").display()
        ),
    );
    let log = s.path("eddy.log");
    let run = start(&config, &log);
    wait_for_log(&log, "listening for POST");
    wait_for_log(&log, "listening for lines on tcp://");
    let body = "{\"id\":\"a\",\"n\":1}\nnot json\n{\"id\":\"b\",\"n\":2}\n{\"id\":\"c\",\"n\":\"x\"}\n\n{\"id\":\"d\",\"n\":4}\n";
    let a = post(port, "/", body.as_bytes()).unwrap();
    assert_eq!(a.status, 200, "{}", a.body);
    let v: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(v["accepted"], 3, "{}", a.body);
    assert_eq!(v["rejected"], 2, "{}", a.body);
    assert_eq!(v["errors"][0]["line"], 2, "{}", a.body);
    assert_eq!(v["errors"][1]["line"], 4, "{}", a.body);
    // Every line bad: the request itself is wrong.
    let all_bad = post(port, "/", b"nope\n").unwrap();
    assert_eq!(all_bad.status, 400, "{}", all_bad.body);
    // Over TCP: one bad line and one over max_line_bytes.
    let mut t = TcpStream::connect(("127.0.0.1", tcp_port)).unwrap();
    let long = format!("{{\"id\":\"{}\",\"n\":0}}", "z".repeat(200));
    write!(
        t,
        "{{\"id\":\"e\",\"n\":5}}\n{{bad\n{long}\n{{\"id\":\"f\",\"n\":6}}\n"
    )
    .unwrap();
    drop(t);

    let out = s.path("out.jsonl");
    wait_until(
        30,
        || {
            format!(
                "output: {}",
                std::fs::read_to_string(&out).unwrap_or_default()
            )
        },
        || json_lines(&std::fs::read_to_string(&out).unwrap_or_default()).len() == 5,
    );
    let dead = json_lines(&std::fs::read_to_string(&dl).unwrap_or_default());
    assert_eq!(dead.len(), 5, "{dead:?}");
    let http_dead: Vec<&Value> = dead.iter().filter(|d| d["component"] == "ingest").collect();
    assert_eq!(http_dead.len(), 3, "{dead:?}");
    assert!(
        http_dead
            .iter()
            .all(|d| d["file"].as_str().unwrap().starts_with("http://127.0.0.1:")),
        "{dead:?}"
    );
    assert_eq!(http_dead[0]["record"], "not json");
    let tcp_dead: Vec<&Value> = dead.iter().filter(|d| d["component"] == "tcp_in").collect();
    assert_eq!(tcp_dead.len(), 2, "{dead:?}");
    assert!(
        tcp_dead[1]["reason"]
            .as_str()
            .unwrap()
            .contains("max_line_bytes"),
        "{dead:?}"
    );

    // The counters name both sources.
    let metrics = get_metrics(api);
    let value = |name: &str, id: &str| metric(&metrics, name, id);
    assert_eq!(value("component_errors_total", "ingest"), 3.0);
    assert_eq!(value("component_received_events_total", "ingest"), 6.0);
    assert_eq!(value("component_sent_events_total", "ingest"), 3.0);
    assert_eq!(value("component_errors_total", "tcp_in"), 2.0);
    assert_eq!(value("component_sent_events_total", "tcp_in"), 2.0);
    stop(run, &log);
}

/// The value of `name` for component `id` in a `/metrics` text.
fn metric(metrics: &str, name: &str, id: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l.contains(&format!("component_id=\"{id}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} for {id}:\n{metrics}"))
}

fn get_metrics(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            if text.starts_with("HTTP/1.1 200")
                && let Some((_, body)) = text.split_once("\r\n\r\n")
            {
                return body.to_string();
            }
        }
        assert!(Instant::now() < deadline, "no /metrics on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn http_source_takes_requests_again_after_a_reload() {
    let s = Scratch::new();
    let port = free_port();
    let out = s.path("out.jsonl");
    let pipeline = |condition: &str| {
        format!(
            r#"
[node]
workers = 2
data_dir = "{data}"
[api]
enabled = false
[checkpoint]
interval = "500ms"
[sources.ingest]
type = "http"
address = "127.0.0.1:{port}"
schema = {{ id = "string", n = "int" }}
[transforms.keep]
type = "filter"
inputs = ["ingest"]
condition = "{condition}"
[sinks.out]
type = "file"
inputs = ["keep"]
path = "{out}"
"#,
            data = s.path("data").display(),
            out = out.display()
        )
    };
    let config = s.write("p.toml", &pipeline("n >= 0"));
    let log = s.path("eddy.log");
    let run = start(&config, &log);
    wait_for_log(&log, "listening for POST");
    let body = |from: i64| -> String {
        (from..from + 10)
            .map(|n| format!("{{\"id\":\"r{n}\",\"n\":{n}}}\n"))
            .collect()
    };
    assert_eq!(post(port, "/", body(0).as_bytes()).unwrap().status, 200);
    // The reload halts the pipeline through a checkpoint; the source hands
    // over what it accepted, frees its port, and listens again.
    s.write("p.toml", &pipeline("n >= 5"));
    signal(run.0.as_ref().unwrap().id(), "HUP");
    wait_for_log(&log, "reloaded ");
    let answer = post(port, "/", body(100).as_bytes()).expect("listening again");
    assert_eq!(answer.status, 200, "{}", answer.body);
    stop(run, &log);
    let got: BTreeSet<String> = ids(&std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect::<Vec<_>>())
    .into_iter()
    .collect();
    let expected: BTreeSet<String> = (0..10).chain(100..110).map(|n| format!("r{n}")).collect();
    assert_eq!(got, expected);
}
