//! A stand-in for systemd's notify socket: a real datagram socket the
//! daemon under test sends `READY=1`, `WATCHDOG=1`… to.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

/// Binds a notify socket at `path`, reading with a short timeout so
/// `receive_until` can keep to its deadline.
pub fn notify_socket(path: &Path) -> UnixDatagram {
    let socket = UnixDatagram::bind(path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    socket
}

/// Datagrams received on `socket` until `until` says stop or `timeout`.
pub fn receive_until(
    socket: &UnixDatagram,
    timeout: Duration,
    got: &mut Vec<String>,
    until: impl Fn(&[String]) -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            if until(got) {
                return true;
            }
        }
    }
    false
}

/// Whether a datagram has the line `line` (`READY=1`, `STOPPING=1`).
pub fn has_line(got: &[String], line: &str) -> bool {
    got.iter().any(|m| m.lines().any(|l| l == line))
}

/// How many `WATCHDOG=1` pings are in `got`.
pub fn pings(got: &[String]) -> usize {
    got.iter().filter(|m| m.as_str() == "WATCHDOG=1").count()
}
