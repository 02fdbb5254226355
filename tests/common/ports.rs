//! Ports for the daemons a test starts. A test asks for a free port and
//! the daemon binds it a moment later; a port the kernel hands out for
//! `bind(0)` lies in its ephemeral range, where any outgoing connection of
//! any process (the tests make thousands) may take it in that moment
//! ("Address already in use" in CI). So ports come from just below that
//! range, each once per test process, and only if both TCP and UDP can
//! bind them now.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

const SPAN: u32 = 12_000;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A port free for TCP and UDP on `ip`.
pub fn free_on(ip: [u8; 4]) -> SocketAddr {
    let first = first_port();
    // Test binaries start at different places, so a daemon an earlier
    // binary left behind is rarely even asked about.
    let start = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let addr = SocketAddr::from((ip, (first + (start + n) % SPAN) as u16));
        if TcpListener::bind(addr).is_ok() && UdpSocket::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no free port on {ip:?} in {first}..{}", first + SPAN);
}

/// A port free for TCP and UDP on 127.0.0.1.
pub fn free_port() -> u16 {
    free_on([127, 0, 0, 1]).port()
}

/// The ports just below the ephemeral range (32768..60999 unless the
/// machine says otherwise).
fn first_port() -> u32 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    assert!(
        low >= 1_024 + SPAN,
        "the ephemeral port range starts at {low}: no room below it for test ports"
    );
    low - SPAN
}
