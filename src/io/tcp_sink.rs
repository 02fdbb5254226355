//! `tcp` sink: JSON lines over one TCP connection, reconnecting with
//! exponential backoff when it breaks.
//!
//! Every worker's instance of the sink encodes its batches and hands the
//! bytes to this sink's writer thread through a bounded channel, so a slow
//! or absent peer slows the pipeline instead of filling memory. A write
//! that fails is retried on a new connection (`max_retries` times, waits
//! doubling from `retry_initial_backoff` to `retry_max_backoff`); then the
//! bytes are given up and their records counted as errors. Delivery is at
//! least once: a write cut short by a broken connection is sent again in
//! full, so the peer may see a line twice (or a partial line before it).

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::backoff::Backoff;
use super::writer::WriterMsg;
use crate::config::NetSinkSettings;
use crate::exec::metrics::OpMetrics;
use crate::io::ingest::IngestControl;

/// Bytes gathered before a write when more are waiting.
const WRITE_CHUNK: usize = 256 << 10;

/// Starts the writer thread; it ends on `Shutdown` or when every sender is
/// gone, after a last delivery.
pub(crate) fn spawn_tcp_sink(
    component: &str,
    settings: Arc<NetSinkSettings>,
    rx: flume::Receiver<WriterMsg>,
    metrics: Arc<OpMetrics>,
    control: IngestControl,
) -> std::io::Result<JoinHandle<()>> {
    let mut sink = TcpSink {
        component: component.to_string(),
        backoff: Backoff::new(settings.retry_initial_backoff, settings.retry_max_backoff),
        settings,
        conn: None,
        metrics,
        control,
    };
    std::thread::Builder::new()
        .name(format!("eddy-write-{component}"))
        .spawn(move || sink.run(rx))
}

struct TcpSink {
    component: String,
    settings: Arc<NetSinkSettings>,
    conn: Option<TcpStream>,
    backoff: Backoff,
    metrics: Arc<OpMetrics>,
    /// While eddy stops, failed bytes are not retried: a dead peer must
    /// not hold the stop for `max_retries` backoffs.
    control: IngestControl,
}

impl TcpSink {
    fn run(&mut self, rx: flume::Receiver<WriterMsg>) {
        let mut buf = Vec::new();
        loop {
            match rx.recv() {
                Ok(WriterMsg::Data(bytes)) => {
                    buf.extend_from_slice(&bytes);
                    if rx.is_empty() || buf.len() >= WRITE_CHUNK {
                        self.deliver(&buf);
                        buf.clear();
                    }
                }
                Ok(WriterMsg::Shutdown) | Err(_) => break,
                Ok(WriterMsg::Seal(_) | WriterMsg::Ended | WriterMsg::Commit(_)) => {}
            }
        }
        self.deliver(&buf);
        if let Some(c) = self.conn.take() {
            let _ = c.shutdown(std::net::Shutdown::Write);
        }
    }

    /// Writes `bytes`, reconnecting and retrying as configured.
    fn deliver(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let records = memchr::memchr_iter(b'\n', bytes).count() as u64;
        let mut failures = 0u64;
        loop {
            match self.write(bytes) {
                Ok(()) => {
                    self.backoff.reset();
                    OpMetrics::add(&self.metrics.records_out, records);
                    return;
                }
                Err(e) => {
                    self.conn = None;
                    if failures >= self.settings.max_retries || self.control.should_close() {
                        OpMetrics::add(&self.metrics.errors, records);
                        let why = if failures >= self.settings.max_retries {
                            format!("gave up after {} attempts (max_retries)", failures + 1)
                        } else {
                            "not retried because eddy is stopping".to_string()
                        };
                        tracing::error!(sink = %self.component, address = %self.settings.address, "cannot send {records} records: {e}; {why}");
                        return;
                    }
                    failures += 1;
                    let wait = self.backoff.next_wait();
                    tracing::warn!(sink = %self.component, address = %self.settings.address, "cannot send: {e}; retry {failures} of {} in {wait:?}", self.settings.max_retries);
                    std::thread::sleep(wait);
                }
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.conn.as_ref().is_some_and(|c| !is_open(c)) {
            tracing::info!(sink = %self.component, address = %self.settings.address, "the peer closed the connection; reconnecting");
            self.conn = None;
        }
        if self.conn.is_none() {
            self.conn = Some(self.connect()?);
        }
        let conn = self.conn.as_mut().expect("connected above");
        conn.write_all(bytes)?;
        conn.flush()
    }

    fn connect(&self) -> std::io::Result<TcpStream> {
        let mut last = None;
        for addr in self.settings.address.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.settings.timeout) {
                Ok(s) => {
                    s.set_write_timeout(Some(self.settings.timeout))?;
                    s.set_nodelay(true)?;
                    tracing::info!(sink = %self.component, "connected to tcp://{addr}");
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the address resolved to nothing",
            )
        }))
    }
}

/// Whether the peer has not closed the connection. A write into a closed
/// connection succeeds once and its bytes are lost, so look first.
fn is_open(c: &TcpStream) -> bool {
    if c.set_nonblocking(true).is_err() {
        return false;
    }
    let mut probe = [0u8; 1];
    let open = match c.peek(&mut probe) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    };
    c.set_nonblocking(false).is_ok() && open
}
