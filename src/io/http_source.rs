//! `http` source: records `POST`ed as lines (JSON lines, or CSV with a
//! header line per request) to one path.
//!
//! The local API's small HTTP/1.1 server takes the requests; each body goes
//! to this source's decoder thread, which decodes it into batches and puts
//! them on a queue the owning worker takes from. The queue is bounded by
//! records and by body bytes: a request whose records do not fit is
//! answered 503 with `Retry-After` and nothing of it is kept, so memory
//! stays bounded (at most `max_connections` bodies being read, plus the
//! queue). A request answered 200 is *accepted*: its records are on the
//! queue, and the source does not end (on SIGINT/SIGTERM) before the
//! worker has taken all of them. Malformed lines go to the dead-letter
//! output, and the answer says how many there were.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use crate::daemon::http::{HttpServer, Limits, Request, Response, Router};
use crate::data::{Batch, BatchBuilder};
use crate::exec::clock::now_ns;
use crate::exec::live::BatchSize;
use crate::exec::metrics::OpMetrics;
use crate::exec::operator::{SourcePoll, SourceTask};
use crate::io::codec::Decoder;
use crate::io::dead_letter::DeadLetter;
use crate::io::ingest::IngestControl;
use crate::plan::NetSourcePlan;

/// Seconds a refused client is asked to wait (`Retry-After`).
const RETRY_AFTER_S: u32 = 1;
/// How often the decoder thread looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);
/// Malformed lines described in one answer (all go to the dead letters).
const ERRORS_IN_ANSWER: usize = 10;

/// Records waiting between the decoder thread and the worker, bounded by
/// count and by the body bytes they came from.
struct Queue {
    /// `(records, bytes)` on the queue.
    used: Mutex<(u64, u64)>,
    max_records: u64,
    max_bytes: u64,
    /// The owning worker, woken when batches arrive.
    worker: OnceLock<Thread>,
    /// Set by the decoder thread when it has stopped taking requests.
    closed: AtomicBool,
}

impl Queue {
    /// Whether `bytes` more could fit now (a cheap check before decoding).
    fn has_room_for(&self, bytes: u64) -> bool {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        used.0 == 0 || (used.0 < self.max_records && used.1 + bytes <= self.max_bytes)
    }

    /// Takes room for a request's records, or says there is none. An empty
    /// queue takes any one request, so one larger than `queue_records` is
    /// not refused forever.
    fn reserve(&self, records: u64, bytes: u64) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let fits = used.0 + records <= self.max_records && used.1 + bytes <= self.max_bytes;
        if fits || used.0 == 0 {
            used.0 += records;
            used.1 += bytes;
            true
        } else {
            false
        }
    }

    fn release(&self, records: u64, bytes: u64) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        used.0 = used.0.saturating_sub(records);
        used.1 = used.1.saturating_sub(bytes);
    }

    fn wake_worker(&self) {
        if let Some(t) = self.worker.get() {
            t.unpark();
        }
    }
}

/// A batch on the queue and the body bytes it accounts for.
type Queued = (Batch, u64);

/// The worker side of an `http` source.
pub(crate) struct HttpSourceTask {
    rx: flume::Receiver<Queued>,
    queue: Arc<Queue>,
}

impl SourceTask for HttpSourceTask {
    fn poll(&mut self, _stop: bool) -> SourcePoll {
        // Read `closed` before looking at the queue: once it is set, no
        // more batches arrive, so an empty queue then is really the end.
        let closed = self.queue.closed.load(Relaxed);
        match self.rx.try_recv() {
            Ok((batch, bytes)) => {
                self.queue.release(batch.len() as u64, bytes);
                SourcePoll::Batch(batch)
            }
            Err(flume::TryRecvError::Empty) if closed => SourcePoll::Ended,
            Err(flume::TryRecvError::Empty) => SourcePoll::Pending(None),
            Err(flume::TryRecvError::Disconnected) => SourcePoll::Ended,
        }
    }
}

/// A started `http` source: set its worker once the worker thread exists.
pub(crate) struct HttpSource {
    queue: Arc<Queue>,
}

impl HttpSource {
    pub(crate) fn set_worker(&self, worker: Thread) {
        let _ = self.queue.worker.set(worker);
        self.queue.wake_worker();
    }
}

/// Everything an `http` source needs.
pub(crate) struct HttpSourceArgs {
    pub(crate) component: String,
    pub(crate) plan: Arc<NetSourcePlan>,
    pub(crate) batch_size: BatchSize,
    pub(crate) dead_letter: Arc<DeadLetter>,
    pub(crate) metrics: Arc<OpMetrics>,
    /// Once it says so, the source answers 503 and ends when its queue is
    /// empty.
    pub(crate) control: IngestControl,
}

/// One request body for the decoder thread, and where to send the answer.
struct Job {
    body: Vec<u8>,
    peer: SocketAddr,
    reply: flume::Sender<Response>,
}

/// Binds the listening socket (so a taken port fails the start) and starts
/// the decoder thread, which owns the server.
pub(crate) fn start_http_source(
    args: HttpSourceArgs,
) -> std::io::Result<(HttpSourceTask, HttpSource, std::thread::JoinHandle<()>)> {
    let s = &args.plan.settings;
    let queue = Arc::new(Queue {
        used: Mutex::new((0, 0)),
        max_records: s.queue_records,
        max_bytes: s.queue_bytes,
        worker: OnceLock::new(),
        closed: AtomicBool::new(false),
    });
    let (jobs_tx, jobs_rx) = flume::bounded::<Job>(s.max_connections as usize);
    let router = {
        let queue = queue.clone();
        let stop = args.control.clone();
        let path: &'static str = Box::leak(s.path.clone().into_boxed_str());
        Router::new().route("POST", path, move |r| {
            let (queue, stop, jobs) = (queue.clone(), stop.clone(), jobs_tx.clone());
            Box::pin(async move { handle(r, &queue, &stop, &jobs).await })
        })
    };
    let limits = Limits {
        max_body_bytes: s.max_body_bytes as usize,
        max_connections: s.max_connections as usize,
        read_timeout: Duration::from_secs(30),
        write_timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    let server = HttpServer::bind(s.address, router, limits)?;
    let local = server.local_addr();
    tracing::info!(source = %args.component, "listening for POST http://{local}{}", s.path);
    let (tx, rx) = flume::unbounded();
    let decoder = DecoderThread {
        args,
        queue: queue.clone(),
        tx,
    };
    let handle = std::thread::Builder::new()
        .name(format!("eddy-net-{}", decoder.args.component))
        .spawn(move || decoder.run(jobs_rx, server))?;
    Ok((
        HttpSourceTask {
            rx,
            queue: queue.clone(),
        },
        HttpSource { queue },
        handle,
    ))
}

fn unavailable(why: &str) -> Response {
    let mut r = Response::text(503, why);
    r.headers.push(("Retry-After", RETRY_AFTER_S.to_string()));
    r
}

async fn handle(
    r: Request,
    queue: &Queue,
    stop: &IngestControl,
    jobs: &flume::Sender<Job>,
) -> Response {
    if stop.should_close() {
        return unavailable("eddy is stopping; send this request again later");
    }
    if let Some(enc) = r.header("content-encoding")
        && !enc.eq_ignore_ascii_case("identity")
    {
        return Response::text(
            415,
            &format!("Content-Encoding `{enc}` is not supported; send the body uncompressed"),
        );
    }
    if !queue.has_room_for(r.body.len() as u64) {
        return unavailable("the ingest queue is full; send this request again later");
    }
    let (reply, answer) = flume::bounded(1);
    let job = Job {
        body: r.body,
        peer: r.peer,
        reply,
    };
    if jobs.send_async(job).await.is_err() {
        return unavailable("eddy is stopping; send this request again later");
    }
    answer
        .recv_async()
        .await
        .unwrap_or_else(|_| unavailable("eddy is stopping; send this request again later"))
}

struct DecoderThread {
    args: HttpSourceArgs,
    queue: Arc<Queue>,
    tx: flume::Sender<Queued>,
}

/// A line that did not decode.
struct Rejected {
    line: u64,
    offset: u64,
    reason: String,
}

impl DecoderThread {
    fn run(self, jobs: flume::Receiver<Job>, server: HttpServer) {
        loop {
            if self.args.control.should_close() {
                break;
            }
            match jobs.recv_timeout(STOP_POLL) {
                Ok(job) => {
                    let answer = self.decode(&job.body, job.peer);
                    let _ = job.reply.send(answer);
                }
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => break,
            }
        }
        // Stop listening first, then refuse what was waiting: nothing more
        // can be accepted once `closed` is set.
        drop(server);
        self.queue.closed.store(true, Relaxed);
        for job in jobs.drain() {
            let _ = job.reply.send(unavailable(
                "eddy is stopping; send this request again later",
            ));
        }
        self.queue.wake_worker();
    }

    /// Decodes one body and queues its records, or refuses it whole.
    fn decode(&self, body: &[u8], peer: SocketAddr) -> Response {
        let plan = &self.args.plan.lines;
        let mut decoder = Decoder::new(plan.format, plan.schema.clone(), plan.event_time);
        // One request's batches are all of the size in force as it came.
        let batch_size = self.args.batch_size.get();
        let mut builder =
            BatchBuilder::new(plan.schema.clone(), batch_size, plan.event_time.is_some());
        let mut batches = Vec::new();
        let mut rejected = Vec::new();
        let (mut line_no, mut offset) = (0u64, 0u64);
        let ingest = now_ns();
        let mut header_error = None;
        for raw in body.split(|&b| b == b'\n') {
            line_no += 1;
            let start = offset;
            offset += raw.len() as u64 + 1;
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if decoder.needs_header() {
                if let Err(e) = decoder.header(line) {
                    header_error = Some(format!("line {line_no}: bad CSV header: {e}"));
                    break;
                }
                continue;
            }
            if let Err(reason) = decoder.decode(line, &mut builder, ingest) {
                rejected.push(Rejected {
                    line: line_no,
                    offset: start,
                    reason,
                });
            }
            if builder.len() >= batch_size {
                batches.push(builder.take());
            }
        }
        if let Some(e) = header_error {
            return Response::text(400, &e);
        }
        if !builder.is_empty() {
            batches.push(builder.take());
        }
        let accepted: u64 = batches.iter().map(|b| b.len() as u64).sum();
        let bytes = body.len() as u64;
        if accepted > 0 && !self.queue.reserve(accepted, bytes) {
            return unavailable("the ingest queue is full; send this request again later");
        }
        let n = batches.len();
        for (i, b) in batches.into_iter().enumerate() {
            // The body's bytes ride on its last batch: released when the
            // worker has taken all of it.
            let _ = self.tx.send((b, if i + 1 == n { bytes } else { 0 }));
        }
        self.queue.wake_worker();
        if !rejected.is_empty() {
            OpMetrics::add(&self.args.metrics.errors, rejected.len() as u64);
            let place =
                std::path::PathBuf::from(format!("http://{peer}{}", self.args.plan.settings.path));
            for r in &rejected {
                let raw = line_at(body, r.offset);
                self.args.dead_letter.record_line(
                    &self.args.component,
                    Some(&place),
                    r.line,
                    r.offset,
                    &r.reason,
                    raw,
                );
            }
        }
        let errors: Vec<serde_json::Value> = rejected
            .iter()
            .take(ERRORS_IN_ANSWER)
            .map(|r| serde_json::json!({ "line": r.line, "reason": r.reason }))
            .collect();
        let answer = serde_json::json!({
            "accepted": accepted,
            "rejected": rejected.len(),
            "errors": errors,
        });
        // Every line bad and none good: the client sent the wrong thing.
        let status = if accepted == 0 && !rejected.is_empty() {
            400
        } else {
            200
        };
        Response::json(status, &answer)
    }
}

/// The line of `body` starting at `offset`, without its terminator.
fn line_at(body: &[u8], offset: u64) -> &[u8] {
    let rest = &body[(offset as usize).min(body.len())..];
    let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
    let line = &rest[..end];
    line.strip_suffix(b"\r").unwrap_or(line)
}
