//! `udp` sink: JSON lines in datagrams of at most `max_datagram_bytes`,
//! several lines to a datagram, a line never split.
//!
//! UDP may drop: nothing tells the sender whether a datagram arrived, and a
//! receiver that is slower than the pipeline loses what overflows its
//! socket buffer. Records are counted as sent when the kernel took their
//! datagram; a line longer than `max_datagram_bytes` cannot be sent and is
//! counted as an error. Use `tcp` or `http` when every record matters.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::writer::WriterMsg;
use crate::config::NetSinkSettings;
use crate::exec::metrics::OpMetrics;
use crate::io::ingest::IngestControl;

/// Wait before resolving the address again after a failure.
const RESOLVE_RETRY: Duration = Duration::from_secs(1);

/// Starts the writer thread; it ends on `Shutdown` or when every sender is
/// gone.
pub(crate) fn spawn_udp_sink(
    component: &str,
    settings: Arc<NetSinkSettings>,
    rx: flume::Receiver<WriterMsg>,
    metrics: Arc<OpMetrics>,
    _control: IngestControl,
) -> std::io::Result<JoinHandle<()>> {
    let mut sink = UdpSink {
        component: component.to_string(),
        settings,
        socket: None,
        metrics,
        oversized_said: false,
    };
    std::thread::Builder::new()
        .name(format!("eddy-write-{component}"))
        .spawn(move || sink.run(rx))
}

struct UdpSink {
    component: String,
    settings: Arc<NetSinkSettings>,
    /// A socket connected to the resolved peer.
    socket: Option<UdpSocket>,
    metrics: Arc<OpMetrics>,
    /// Whether a too-long line was already logged (once, not per line).
    oversized_said: bool,
}

impl UdpSink {
    fn run(&mut self, rx: flume::Receiver<WriterMsg>) {
        while let Ok(msg) = rx.recv() {
            match msg {
                WriterMsg::Data(bytes) => self.send_lines(&bytes),
                WriterMsg::Shutdown => break,
                WriterMsg::Seal(_) | WriterMsg::Ended | WriterMsg::Commit(_) => {}
            }
        }
    }

    /// Packs whole lines into datagrams and sends them.
    fn send_lines(&mut self, bytes: &[u8]) {
        let max = self.settings.max_datagram_bytes as usize;
        let (mut start, mut lines) = (0usize, 0u64);
        let mut at = 0usize;
        for nl in memchr::memchr_iter(b'\n', bytes) {
            let line_len = nl + 1 - at;
            if line_len > max {
                self.send(&bytes[start..at], lines);
                OpMetrics::add(&self.metrics.errors, 1);
                if !self.oversized_said {
                    self.oversized_said = true;
                    tracing::warn!(sink = %self.component, "a line of {line_len} bytes is longer than max_datagram_bytes ({max}) and was dropped (counted in component_errors_total; said once)");
                }
                (start, lines) = (nl + 1, 0);
            } else if nl + 1 - start > max {
                self.send(&bytes[start..at], lines);
                (start, lines) = (at, 1);
            } else {
                lines += 1;
            }
            at = nl + 1;
        }
        self.send(&bytes[start..at], lines);
    }

    fn send(&mut self, datagram: &[u8], lines: u64) {
        if datagram.is_empty() {
            return;
        }
        let result = match self.socket() {
            Ok(s) => s.send(datagram).map(|_| ()),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => OpMetrics::add(&self.metrics.records_out, lines),
            Err(e) => {
                // ECONNREFUSED reports an earlier datagram that found no
                // listener; either way this one is lost.
                OpMetrics::add(&self.metrics.errors, lines);
                tracing::debug!(sink = %self.component, address = %self.settings.address, "datagram of {lines} records not sent: {e}");
                if e.kind() != std::io::ErrorKind::ConnectionRefused {
                    self.socket = None;
                }
            }
        }
    }

    fn socket(&mut self) -> std::io::Result<&UdpSocket> {
        if self.socket.is_none() {
            let peer: SocketAddr = match self.settings.address.to_socket_addrs() {
                Ok(mut a) => a.next().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "resolved to nothing")
                })?,
                Err(e) => {
                    tracing::warn!(sink = %self.component, address = %self.settings.address, "cannot resolve: {e}");
                    std::thread::sleep(RESOLVE_RETRY);
                    return Err(e);
                }
            };
            let local: SocketAddr = if peer.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let s = UdpSocket::bind(local)?;
            s.connect(peer)?;
            self.socket = Some(s);
        }
        Ok(self.socket.as_ref().expect("set above"))
    }
}
