//! The systemd watchdog is gated on progress: a real `eddy run` under a
//! real notify socket stops sending `WATCHDOG=1` once a worker is held
//! inside an operator for longer than half `WATCHDOG_USEC`, and names that
//! operator in its log and `STATUS=`; an idle, healthy pipeline keeps
//! pinging (a worker waiting on an empty inbox is alive).

mod common;

use std::io::BufRead;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// Starts `eddy run` on `pipeline` under the notify socket `socket`, with
/// `WATCHDOG_USEC=usec`; its stderr is collected into the returned buffer
/// as it comes.
fn start(
    s: &Scratch,
    pipeline: &str,
    socket: &std::path::Path,
    usec: u64,
) -> (Running, Arc<Mutex<String>>) {
    let config = s.write("p.toml", pipeline);
    let mut child = eddy()
        .arg("run")
        .arg(&config)
        .env("NOTIFY_SOCKET", socket)
        .env("WATCHDOG_USEC", usec.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let mut l = sink.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    (Running(Some(child)), log)
}

/// A generator into a map (with `cost`, the test-only busy time per
/// record) into a blackhole, on one worker.
fn pipeline(s: &Scratch, rate: u32, cost: Option<&str>) -> String {
    let cost = cost.map_or(String::new(), |c| format!("cost_per_record = \"{c}\"\n"));
    format!(
        "[node]\ndata_dir = \"{}\"\nworkers = 1\n[api]\nenabled = false\n\
         [checkpoint]\ninterval = \"200ms\"\n\
         [sources.g]\ntype = \"generator\"\nrate = {rate}\n\
         [transforms.slow_map]\ntype = \"map\"\ninputs = [\"g\"]\n\
         fields = {{ t2 = \"temp + 1\" }}\n{cost}\
         [sinks.out]\ntype = \"blackhole\"\ninputs = [\"slow_map\"]\n",
        s.path("data").display()
    )
}

#[test]
fn a_worker_stuck_in_an_operator_stops_the_pings_and_is_named() {
    let s = Scratch::new();
    let socket_path = s.path("notify.sock");
    let socket = notify_socket(&socket_path);
    // 10 s of busy time per record: the map's first batch holds the
    // worker far longer than the 2 s this test watches (with less, a
    // small batch can end inside that window and the worker beats, and
    // pings, once between batches).
    // WATCHDOG_USEC = 400 ms: a ping every 200 ms while healthy.
    let (mut run, log) = start(&s, &pipeline(&s, 1000, Some("10s")), &socket_path, 400_000);
    let mut got = Vec::new();
    let ready = receive_until(&socket, Duration::from_secs(20), &mut got, |g| {
        has_line(g, "READY=1")
    });
    assert!(ready, "no READY=1; got {got:?}");
    // The watchdog was on (it pings once as it starts, before any beat
    // could be late; that may come just after READY): what follows is a
    // change, not a watchdog that never ran.
    let pinged = receive_until(&socket, Duration::from_secs(5), &mut got, |g| pings(g) >= 1);
    assert!(pinged, "no first WATCHDOG=1: {got:?}");

    let stuck = receive_until(&socket, Duration::from_secs(20), &mut got, |g| {
        g.iter().any(|m| m.starts_with("STATUS=stuck: "))
    });
    assert!(stuck, "no STATUS=stuck in 20 s: {got:?}");
    let status = got
        .iter()
        .find(|m| m.starts_with("STATUS=stuck: "))
        .unwrap();
    assert!(
        status.contains("eddy-worker-0") && status.contains("`slow_map`"),
        "{status:?}"
    );

    // While it is stuck (each further batch takes longer), no pings: over
    // 2 s a healthy daemon sends 10.
    got.clear();
    receive_until(&socket, Duration::from_secs(2), &mut got, |_| false);
    assert_eq!(pings(&got), 0, "pinged while stuck: {got:?}");
    let child = run.0.as_mut().unwrap();
    assert!(child.try_wait().unwrap().is_none(), "eddy exited");
    let log = log.lock().unwrap().clone();
    assert!(
        log.contains("watchdog: no progress")
            && log.contains("eddy-worker-0 (inside component `slow_map`)"),
        "{log}"
    );
}

#[test]
fn an_idle_healthy_pipeline_keeps_pinging() {
    let s = Scratch::new();
    let socket_path = s.path("notify.sock");
    let socket = notify_socket(&socket_path);
    // One record a second: the worker waits on its source most of the
    // time, which must count as alive.
    // WATCHDOG_USEC = 2 s: a ping every second. Not less: on a loaded
    // machine a checkpoint's sled flush was seen to take ~0.5 s, slow but
    // not stuck.
    let (mut run, log) = start(&s, &pipeline(&s, 1, None), &socket_path, 2_000_000);
    let mut got = Vec::new();
    let ready = receive_until(&socket, Duration::from_secs(20), &mut got, |g| {
        has_line(g, "READY=1")
    });
    assert!(ready, "no READY=1; got {got:?}");
    got.clear();
    receive_until(&socket, Duration::from_secs(4), &mut got, |_| false);
    // 4 expected in 4 s; a loaded machine may delay one.
    assert!(pings(&got) >= 3, "too few WATCHDOG=1 in 4 s: {got:?}");
    assert!(
        !got.iter().any(|m| m.contains("stuck")),
        "reported stuck while idle: {got:?}"
    );
    let child = run.0.as_mut().unwrap();
    assert!(child.try_wait().unwrap().is_none(), "eddy exited");
    signal(child.id(), "TERM");
    let status = run.0.take().unwrap().wait().unwrap();
    let log = log.lock().unwrap().clone();
    assert!(status.success(), "{status}: {log}");
    assert!(!log.contains("watchdog: no progress"), "{log}");
}
