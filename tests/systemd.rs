//! eddy under systemd: the unit file passes `systemd-analyze verify`
//! without a warning, and a real `eddy run` speaks the notify protocol on a
//! real datagram socket: READY once the pipeline runs, WATCHDOG at half
//! `WATCHDOG_USEC`, STOPPING on SIGTERM; SIGHUP with a broken file leaves
//! the pipeline running, with a valid one reloads it (RELOADING, READY).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;

#[test]
fn the_unit_file_verifies_cleanly() {
    let Ok(v) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("SKIPPED: systemd-analyze is not installed");
        return;
    };
    assert!(v.status.success());
    let s = Scratch::new();
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/eddy.service"),
    )
    .unwrap();
    // The unit names the installed binary; verify checks it is executable.
    let unit = unit.replace("/usr/bin/eddy", env!("CARGO_BIN_EXE_eddy"));
    let path = s.write("eddy.service", &unit);
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Unknown settings are only warnings (exit 0): any line about the unit
    // is a failure.
    assert!(
        out.status.success() && !stderr.contains("eddy.service"),
        "systemd-analyze verify: {}\n{stderr}",
        out.status
    );
}

#[test]
fn run_notifies_systemd_ready_watchdog_and_stopping() {
    let s = Scratch::new();
    let socket_path = s.path("notify.sock");
    let socket = notify_socket(&socket_path);
    let pipeline = |rate: &str| {
        format!(
            "[node]\ndata_dir = \"{}\"\n[api]\nenabled = false\n[checkpoint]\ninterval = \"200ms\"\n\
             [sources.g]\ntype = \"generator\"\nrate = {rate}\n\
             [transforms.w]\ntype = \"window\"\ninputs = [\"g\"]\nkey = [\"sensor\"]\n\
             window = {{ kind = \"tumbling\", size = \"1s\" }}\naggregates = {{ n = \"count(*)\" }}\n\
             [sinks.out]\ntype = \"blackhole\"\ninputs = [\"w\"]\n",
            s.path("data").display()
        )
    };
    let config = s.write("p.toml", &pipeline("1000"));
    let mut run = Running(Some(
        eddy()
            .arg("run")
            .arg(&config)
            .env("NOTIFY_SOCKET", &socket_path)
            .env("WATCHDOG_USEC", "200000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let pid = run.0.as_ref().unwrap().id();
    let mut got = Vec::new();
    let ready = receive_until(&socket, Duration::from_secs(20), &mut got, |g| {
        g.iter().any(|m| m.lines().any(|l| l == "READY=1"))
    });
    assert!(ready, "no READY=1; got {got:?}");
    let ready_msg = got.iter().find(|m| m.contains("READY=1")).unwrap();
    assert!(ready_msg.contains("STATUS=running: "), "{ready_msg:?}");

    // WATCHDOG_USEC = 200 ms: a ping every 100 ms, so 5 within a second.
    got.clear();
    let pings = receive_until(&socket, Duration::from_secs(2), &mut got, |g| {
        g.iter().filter(|m| m.as_str() == "WATCHDOG=1").count() >= 5
    });
    assert!(pings, "too few WATCHDOG=1 in 2 s: {got:?}");

    // SIGHUP with a broken file: the pipeline goes on (and keeps pinging).
    s.write("p.toml", "[sources.g]\ntype = \"nope\"\n");
    signal(pid, "HUP");
    got.clear();
    let alive = receive_until(&socket, Duration::from_secs(2), &mut got, |g| {
        g.iter().filter(|m| m.as_str() == "WATCHDOG=1").count() >= 5
    });
    assert!(alive, "no pings after SIGHUP: {got:?}");
    assert!(run.0.as_mut().unwrap().try_wait().unwrap().is_none());

    // SIGHUP with a valid, changed file: a live reload, told to systemd as
    // RELOADING=1, then READY=1 once the new pipeline runs.
    s.write("p.toml", &pipeline("2000"));
    signal(pid, "HUP");
    got.clear();
    let reloaded = receive_until(&socket, Duration::from_secs(20), &mut got, |g| {
        let at = |line: &str| g.iter().position(|m| m.lines().any(|l| l == line));
        matches!((at("RELOADING=1"), at("READY=1")), (Some(a), Some(b)) if a < b)
    });
    assert!(
        reloaded,
        "no RELOADING=1 then READY=1 after SIGHUP: {got:?}"
    );

    signal(pid, "TERM");
    got.clear();
    let stopping = receive_until(&socket, Duration::from_secs(20), &mut got, |g| {
        g.iter().any(|m| m.lines().any(|l| l == "STOPPING=1"))
    });
    assert!(stopping, "no STOPPING=1; got {got:?}");
    let out = run.0.take().unwrap().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(
        stderr.contains("received SIGHUP") && stderr.contains("the running pipeline goes on"),
        "{stderr}"
    );
    assert!(stderr.contains("final checkpoint committed"), "{stderr}");
}
