//! `udp` source: datagrams of newline-delimited JSON records (one datagram
//! may carry several lines; a line never spans datagrams).
//!
//! UDP has no flow control and no acknowledgements: when the pipeline is
//! slower than the senders, the reader thread waits on the bounded channel
//! to the worker and the kernel drops datagrams once the socket's receive
//! buffer is full (counted by the kernel, `netstat -su`, not by eddy).
//! Use `tcp` or `http` when every record matters.

use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::Arc;

use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use super::line_source::FilePosition;
use crate::data::{Batch, BatchBuilder};
use crate::exec::clock::now_ns;
use crate::exec::live::BatchSize;
use crate::exec::metrics::OpMetrics;
use crate::io::codec::Decoder;
use crate::io::dead_letter::DeadLetter;
use crate::io::ingest::IngestControl;
use crate::plan::NetSourcePlan;

/// Longest a decoded record waits for its batch to fill.
const FLUSH_AFTER: Duration = Duration::from_millis(20);
/// The largest UDP payload.
const MAX_DATAGRAM: usize = 65_536;

/// Everything a `udp` source needs once its worker runs.
pub(crate) struct UdpSourceArgs {
    pub(crate) component: String,
    pub(crate) plan: Arc<NetSourcePlan>,
    pub(crate) socket: UdpSocket,
    pub(crate) batch_size: BatchSize,
    pub(crate) tx: flume::Sender<(Batch, FilePosition)>,
    pub(crate) worker: Thread,
    pub(crate) dead_letter: Arc<DeadLetter>,
    pub(crate) metrics: Arc<OpMetrics>,
    /// Says when to stop taking input.
    pub(crate) control: IngestControl,
}

/// Binds the socket (so a taken port fails the start).
pub(crate) fn bind_udp_source(plan: &NetSourcePlan) -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind(plan.settings.address)?;
    socket.set_read_timeout(Some(FLUSH_AFTER))?;
    Ok(socket)
}

/// Starts the reader thread.
pub(crate) fn spawn_udp_source(args: UdpSourceArgs) -> std::io::Result<JoinHandle<()>> {
    if let Ok(a) = args.socket.local_addr() {
        tracing::info!(source = %args.component, "listening for lines on udp://{a}");
    }
    std::thread::Builder::new()
        .name(format!("eddy-net-{}", args.component))
        .spawn(move || UdpReader::new(args).run())
}

struct UdpReader {
    args: UdpSourceArgs,
    decoder: Decoder,
    builder: BatchBuilder,
    /// When the oldest unsent record was decoded.
    first_pending: Option<Instant>,
}

impl UdpReader {
    fn new(args: UdpSourceArgs) -> UdpReader {
        let plan = &args.plan.lines;
        UdpReader {
            decoder: Decoder::new(plan.format, plan.schema.clone(), plan.event_time),
            builder: BatchBuilder::new(
                plan.schema.clone(),
                args.batch_size.get(),
                plan.event_time.is_some(),
            ),
            args,
            first_pending: None,
        }
    }

    fn run(mut self) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        while !self.args.control.should_close() {
            match self.args.socket.recv_from(&mut buf) {
                Ok((n, peer)) => {
                    self.datagram(&buf[..n], &format!("udp://{peer}"));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    tracing::warn!(source = %self.args.component, "receiving: {e}");
                    std::thread::sleep(FLUSH_AFTER);
                }
            }
            let due = self
                .first_pending
                .is_some_and(|t| t.elapsed() >= FLUSH_AFTER);
            if (due || self.builder.len() >= self.args.batch_size.get()) && !self.flush() {
                return;
            }
        }
        self.flush();
    }

    fn datagram(&mut self, data: &[u8], peer: &str) {
        let ingest = now_ns();
        let max = self.args.plan.settings.max_line_bytes as usize;
        let mut offset = 0u64;
        for (i, raw) in data.split(|&b| b == b'\n').enumerate() {
            let start = offset;
            offset += raw.len() as u64 + 1;
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let result = if line.len() > max {
                Err(format!(
                    "the line is longer than {max} bytes (max_line_bytes)"
                ))
            } else {
                self.decoder.decode(line, &mut self.builder, ingest)
            };
            match result {
                Ok(()) => {
                    self.first_pending.get_or_insert_with(Instant::now);
                }
                Err(reason) => {
                    OpMetrics::add(&self.args.metrics.errors, 1);
                    let place = PathBuf::from(peer);
                    self.args.dead_letter.record_line(
                        &self.args.component,
                        Some(&place),
                        i as u64 + 1,
                        start,
                        &reason,
                        line,
                    );
                }
            }
            if self.builder.len() >= self.args.batch_size.get() && !self.flush() {
                return;
            }
        }
    }

    /// Sends the records decoded so far; false if the pipeline is gone.
    fn flush(&mut self) -> bool {
        self.first_pending = None;
        if self.builder.is_empty() {
            return true;
        }
        let ok = self
            .args
            .tx
            .send((self.builder.take(), FilePosition::default()))
            .is_ok();
        self.args.worker.unpark();
        ok
    }
}
