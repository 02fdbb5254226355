//! `tcp` source: newline-delimited records from any number of TCP
//! connections (up to `max_connections` at once).
//!
//! Each connection gets its own reader thread (the `file` source's line
//! reader, with the peer's address as its name), all feeding one bounded
//! channel to the owning worker: a slow pipeline stops the readers, and TCP
//! flow control then slows the senders; nothing is buffered without bound.
//! On SIGINT/SIGTERM the listener closes, every connection's reading side is
//! shut down, and the source ends once the worker has taken what was read.
//! TCP has no acknowledgements of records: lines still in flight when eddy
//! stops, or when the connection breaks, are lost to the sender's
//! knowledge.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use super::line_source::{FilePosition, LineReaderArgs, spawn_line_reader};
use crate::data::Batch;
use crate::exec::live::BatchSize;
use crate::exec::metrics::OpMetrics;
use crate::io::dead_letter::DeadLetter;
use crate::io::ingest::IngestControl;
use crate::plan::NetSourcePlan;

/// How often the accepting thread looks at the stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// Everything a `tcp` source needs once its worker runs.
pub(crate) struct TcpSourceArgs {
    pub(crate) component: String,
    pub(crate) plan: Arc<NetSourcePlan>,
    pub(crate) listener: TcpListener,
    pub(crate) batch_size: BatchSize,
    pub(crate) tx: flume::Sender<(Batch, FilePosition)>,
    pub(crate) worker: Thread,
    pub(crate) dead_letter: Arc<DeadLetter>,
    pub(crate) metrics: Arc<OpMetrics>,
    /// Says when to stop taking input.
    pub(crate) control: IngestControl,
}

/// Binds the listening socket (so a taken port fails the start).
pub(crate) fn bind_tcp_source(plan: &NetSourcePlan) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(plan.settings.address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Starts the accepting thread.
pub(crate) fn spawn_tcp_source(args: TcpSourceArgs) -> std::io::Result<JoinHandle<()>> {
    if let Ok(a) = args.listener.local_addr() {
        tracing::info!(source = %args.component, "listening for lines on tcp://{a}");
    }
    std::thread::Builder::new()
        .name(format!("eddy-net-{}", args.component))
        .spawn(move || accept_loop(args))
}

/// One open connection: its own stop flag, and a handle to shut it down.
struct Conn {
    stop: Arc<AtomicBool>,
    stream: TcpStream,
    reader: JoinHandle<()>,
}

fn accept_loop(args: TcpSourceArgs) {
    let mut conns: Vec<Conn> = Vec::new();
    let max = args.plan.settings.max_connections as usize;
    loop {
        if args.control.should_close() {
            break;
        }
        conns.retain(|c| !c.reader.is_finished());
        match args.listener.accept() {
            Ok((stream, peer)) if conns.len() >= max => {
                tracing::warn!(source = %args.component, %peer, "{max} connections are open (max_connections); closing this one");
                drop(stream);
            }
            Ok((stream, peer)) => match serve(&args, stream, peer) {
                Ok(c) => conns.push(c),
                Err(e) => {
                    tracing::warn!(source = %args.component, %peer, "cannot serve this connection: {e}")
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) => {
                // Out of file descriptors and the like: wait, then go on.
                tracing::warn!(source = %args.component, "accept failed: {e}");
                std::thread::sleep(ACCEPT_POLL * 4);
            }
        }
    }
    // Readers blocked in `read` see the end of their input and flush.
    for c in &conns {
        c.stop.store(true, Relaxed);
        let _ = c.stream.shutdown(std::net::Shutdown::Read);
    }
    for c in conns {
        let _ = c.reader.join();
    }
    // Dropping `args.tx` here lets the worker see the end once the
    // readers' clones are gone too.
}

fn serve(args: &TcpSourceArgs, stream: TcpStream, peer: SocketAddr) -> std::io::Result<Conn> {
    stream.set_nonblocking(false)?;
    let name = format!("tcp://{peer}");
    tracing::debug!(source = %args.component, "{name} connected");
    let mut lines = args.plan.lines.clone();
    lines.path = Some(PathBuf::from(&name));
    let stop = Arc::new(AtomicBool::new(false));
    let fail: Arc<dyn Fn(String) + Send + Sync> = {
        let component = args.component.clone();
        // A broken connection ends that connection, not the run.
        Arc::new(move |m: String| tracing::warn!(source = %component, "{m}"))
    };
    let reader = spawn_line_reader(LineReaderArgs {
        component: args.component.clone(),
        plan: Arc::new(lines),
        input: Box::new(stream.try_clone()?),
        resume: None,
        batch_size: args.batch_size.clone(),
        tx: args.tx.clone(),
        worker: args.worker.clone(),
        dead_letter: args.dead_letter.clone(),
        metrics: args.metrics.clone(),
        stop: stop.clone(),
        fail,
        max_line_bytes: Some(args.plan.settings.max_line_bytes as usize),
    })?;
    Ok(Conn {
        stop,
        stream,
        reader,
    })
}
