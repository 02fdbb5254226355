//! Helpers for the tests that run several real eddy nodes: free ports on
//! a loopback address, `eddy` subcommands that must succeed, and a cluster
//! CA with a certificate per node made by `eddy cluster init/issue`.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;

use super::eddy;

/// A UDP port free on `ip` (free when asked; the test binds it soon).
pub fn free_udp(ip: [u8; 4]) -> SocketAddr {
    UdpSocket::bind(SocketAddr::from((ip, 0)))
        .and_then(|s| s.local_addr())
        .expect("free UDP port")
}

/// A TCP port free on `ip` (free when asked; the test binds it soon).
pub fn free_tcp(ip: [u8; 4]) -> SocketAddr {
    TcpListener::bind(SocketAddr::from((ip, 0)))
        .and_then(|s| s.local_addr())
        .expect("free TCP port")
}

/// Runs `eddy ARGS…` and fails the test, with its stderr, unless it
/// succeeds.
pub fn run_eddy(args: &[&str]) {
    let out = eddy().args(args).output().expect("run eddy");
    assert!(
        out.status.success(),
        "eddy {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A cluster CA (cluster `blue`) in `dir/ca` and a certificate per node
/// name in `dir/certs`.
pub fn make_certs(dir: &Path, names: &[impl AsRef<str>]) {
    make_certs_in(&dir.join("ca"), &dir.join("certs"), names);
}

/// `eddy cluster init` of `ca` (cluster `blue`), then a certificate per
/// node name in `certs`.
pub fn make_certs_in(ca: &Path, certs: &Path, names: &[impl AsRef<str>]) {
    let ca = ca.to_str().expect("utf8");
    run_eddy(&["cluster", "init", ca, "--cluster", "blue"]);
    for n in names {
        run_eddy(&[
            "cluster",
            "issue",
            "--ca",
            ca,
            "--out",
            certs.to_str().expect("utf8"),
            n.as_ref(),
        ]);
    }
}
