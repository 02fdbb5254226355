//! `file` and `stdin` sources: a reader thread splits the input into lines,
//! decodes them into batches and hands the batches to the owning worker
//! through a bounded channel (so a slow pipeline slows the reader, and a
//! blocking read never blocks a worker).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::Thread;
use std::time::Duration;

use crate::data::{Batch, BatchBuilder};
use crate::exec::clock::now_ns;
use crate::exec::live::BatchSize;
use crate::exec::metrics::OpMetrics;
use crate::exec::operator::{SourcePoll, SourceTask};
use crate::io::codec::Decoder;
use crate::io::dead_letter::DeadLetter;
use crate::plan::LineSourcePlan;

/// Where a file source is: the byte offset and line number after the
/// last line handed to the pipeline (decoded, dead-lettered or blank).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FilePosition {
    pub(crate) offset: u64,
    pub(crate) line: u64,
}

/// The worker side: batches from the reader thread.
pub(crate) struct LineSource {
    rx: flume::Receiver<(Batch, FilePosition)>,
    /// After the last batch taken; `None` for stdin, which cannot replay.
    position: Option<FilePosition>,
    /// Whether a stop still hands over what the readers sent (network
    /// sources, whose records cannot be read again): the source then ends
    /// when every reader has ended.
    drain: bool,
}

impl LineSource {
    /// Hands over everything the readers sent, also after a stop.
    pub(crate) fn draining(mut self) -> LineSource {
        self.drain = true;
        self
    }
}

impl SourceTask for LineSource {
    fn poll(&mut self, stop: bool) -> SourcePoll {
        if stop && !self.drain {
            return SourcePoll::Ended;
        }
        match self.rx.try_recv() {
            Ok((b, at)) => {
                if let Some(p) = &mut self.position {
                    *p = at;
                }
                SourcePoll::Batch(b)
            }
            Err(flume::TryRecvError::Empty) => SourcePoll::Pending(None),
            Err(flume::TryRecvError::Disconnected) => SourcePoll::Ended,
        }
    }

    fn position(&self) -> Vec<(u32, Vec<u8>)> {
        self.position
            .map(|p| (0, postcard::to_stdvec(&p).expect("a position encodes")))
            .into_iter()
            .collect()
    }
}

/// The channel from a reader thread to its worker; `resume` is where a
/// file source starts (`None`: the beginning, or stdin).
pub(crate) fn line_channel(
    capacity: usize,
    replayable: bool,
    resume: Option<FilePosition>,
) -> (flume::Sender<(Batch, FilePosition)>, LineSource) {
    let (tx, rx) = flume::bounded(capacity);
    (
        tx,
        LineSource {
            rx,
            position: replayable.then(|| resume.unwrap_or_default()),
            drain: false,
        },
    )
}

/// Decodes a position saved by [`LineSource::position`].
pub(crate) fn decode_file_position(bytes: &[u8]) -> Option<FilePosition> {
    postcard::from_bytes(bytes).ok()
}

/// Everything the reader thread needs.
pub(crate) struct LineReaderArgs {
    pub(crate) component: String,
    pub(crate) plan: Arc<LineSourcePlan>,
    pub(crate) input: Box<dyn Read + Send>,
    /// Where to start in a file (a restored checkpoint's position).
    pub(crate) resume: Option<FilePosition>,
    pub(crate) batch_size: BatchSize,
    pub(crate) tx: flume::Sender<(Batch, FilePosition)>,
    pub(crate) worker: Thread,
    pub(crate) dead_letter: Arc<DeadLetter>,
    pub(crate) metrics: Arc<OpMetrics>,
    pub(crate) stop: Arc<AtomicBool>,
    /// Called with a message when the input cannot be read at all.
    pub(crate) fail: Arc<dyn Fn(String) + Send + Sync>,
    /// A longer line goes to the dead-letter output, truncated, instead of
    /// being held (network input: a peer that never sends a newline).
    pub(crate) max_line_bytes: Option<usize>,
}

/// Opens the input of a line source: the file at `resume`, or stdin.
pub(crate) fn open_input(
    plan: &LineSourcePlan,
    resume: Option<FilePosition>,
) -> std::io::Result<Box<dyn Read + Send>> {
    let Some(path) = &plan.path else {
        return Ok(Box::new(std::io::stdin()));
    };
    let mut file = File::open(path)?;
    if let Some(at) = resume {
        file.seek(SeekFrom::Start(at.offset))?;
    }
    Ok(Box::new(file))
}

/// The first line of `path`: a CSV header, when a file is resumed past it.
fn first_line(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::new();
    std::io::BufRead::read_until(
        &mut std::io::BufReader::new(File::open(path)?),
        b'\n',
        &mut line,
    )?;
    let end = line.strip_suffix(b"\n").unwrap_or(&line);
    Ok(end.strip_suffix(b"\r").unwrap_or(end).to_vec())
}

/// Starts the reader thread.
pub(crate) fn spawn_line_reader(
    args: LineReaderArgs,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let name = format!("eddy-read-{}", args.component);
    std::thread::Builder::new()
        .name(name)
        .spawn(move || LineReader::new(args).run())
}

struct LineReader {
    args: LineReaderArgs,
    tx: flume::Sender<(Batch, FilePosition)>,
    decoder: Decoder,
    builder: BatchBuilder,
    /// Bytes of an unfinished last line, carried to the next read.
    pending: Vec<u8>,
    line: u64,
    /// Byte offset of the start of the next line.
    offset: u64,
    /// Discarding the rest of a line over `max_line_bytes`.
    skipping: bool,
    /// With `rate`: when the first batch went, and lines sent since.
    paced: Option<(std::time::Instant, u64)>,
}

const READ_CHUNK: usize = 64 * 1024;
const FOLLOW_POLL: Duration = Duration::from_millis(100);

impl LineReader {
    /// Lines per batch: the batch size in force, or 10 ms of lines when
    /// paced (`rate`) if fewer.
    fn batch_lines(&self) -> usize {
        let most = self.args.batch_size.get();
        match self.args.plan.rate {
            Some(r) => most.min((r / 100).max(1) as usize),
            None => most,
        }
    }

    fn new(args: LineReaderArgs) -> LineReader {
        let tx = args.tx.clone();
        let decoder = Decoder::new(
            args.plan.format,
            args.plan.schema.clone(),
            args.plan.event_time,
        );
        let builder = BatchBuilder::new(
            args.plan.schema.clone(),
            args.batch_size.get(),
            args.plan.event_time.is_some(),
        );
        let at = args.resume.unwrap_or_default();
        LineReader {
            paced: None,
            args,
            tx,
            decoder,
            builder,
            pending: Vec::new(),
            line: at.line,
            offset: at.offset,
            skipping: false,
        }
    }

    /// A CSV file resumed past its header still needs the header.
    fn read_header_if_resumed(&mut self) -> Result<(), String> {
        let (Some(path), true) = (
            &self.args.plan.path,
            self.offset > 0 && self.decoder.needs_header(),
        ) else {
            return Ok(());
        };
        let line = first_line(path)
            .map_err(|e| format!("cannot read the header of {}: {e}", path.display()))?;
        self.decoder
            .header(&line)
            .map_err(|e| format!("{}:1: bad CSV header: {e}", path.display()))
    }

    fn run(mut self) {
        if let Err(e) = self.read_header_if_resumed() {
            (self.args.fail)(format!("sources.{}: {e}", self.args.component));
            return;
        }
        let mut input = std::mem::replace(&mut self.args.input, Box::new(std::io::empty()));
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            if self.args.stop.load(Relaxed) {
                return;
            }
            let n = match input.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    (self.args.fail)(format!(
                        "sources.{}: cannot read {}: {e}",
                        self.args.component,
                        self.input_name()
                    ));
                    return;
                }
            };
            if n == 0 {
                if self.args.plan.follow {
                    if !self.flush() {
                        return;
                    }
                    match self.wait_for_growth(&mut input) {
                        Some(reopened) => input = reopened,
                        None => continue,
                    }
                    continue;
                }
                // End of input: a last line without a newline still counts.
                if !self.pending.is_empty() {
                    let last = std::mem::take(&mut self.pending);
                    self.line_done(&last);
                }
                self.flush();
                return;
            }
            if !self.split_lines(&buf[..n]) {
                return;
            }
            // A short read means the input has nothing more right now: send
            // what we have instead of waiting to fill a batch.
            if n < buf.len() && !self.flush() {
                return;
            }
        }
    }

    fn input_name(&self) -> String {
        self.args
            .plan
            .path
            .as_ref()
            .map_or("stdin".to_string(), |p| p.display().to_string())
    }

    /// Decodes every complete line in `chunk`; returns false if the
    /// pipeline is gone.
    fn split_lines(&mut self, mut chunk: &[u8]) -> bool {
        // Once per read, not per line: a change applies from the next read.
        let batch_lines = self.batch_lines();
        while let Some(nl) = memchr::memchr(b'\n', chunk) {
            let line_bytes = &chunk[..nl];
            if self.skipping {
                self.skipping = false;
                self.offset += line_bytes.len() as u64;
            } else if self.pending.is_empty() {
                self.line_done(line_bytes);
            } else {
                let mut whole = std::mem::take(&mut self.pending);
                whole.extend_from_slice(line_bytes);
                self.line_done(&whole);
            }
            self.offset += 1; // the newline
            chunk = &chunk[nl + 1..];
            if self.builder.len() >= batch_lines && !self.flush() {
                return false;
            }
        }
        if self.skipping {
            self.offset += chunk.len() as u64;
        } else {
            self.pending.extend_from_slice(chunk);
            if self
                .args
                .max_line_bytes
                .is_some_and(|max| self.pending.len() > max)
            {
                let long = std::mem::take(&mut self.pending);
                self.line_done(&long);
                self.skipping = true;
            }
        }
        true
    }

    fn line_done(&mut self, raw: &[u8]) {
        self.line += 1;
        let start = self.offset;
        self.offset += raw.len() as u64;
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if let Some(max) = self.args.max_line_bytes
            && line.len() > max
        {
            OpMetrics::add(&self.args.metrics.errors, 1);
            let reason = format!(
                "the line is longer than {max} bytes (max_line_bytes); its first 1024 bytes are kept here"
            );
            self.args.dead_letter.record_line(
                &self.args.component,
                self.args.plan.path.as_deref(),
                self.line,
                start,
                &reason,
                &line[..line.len().min(1024)],
            );
            return;
        }
        if self.decoder.needs_header() {
            if let Err(reason) = self.decoder.header(line) {
                (self.args.fail)(format!(
                    "sources.{}: {}:{}: bad CSV header: {reason}",
                    self.args.component,
                    self.input_name(),
                    self.line
                ));
                self.args.stop.store(true, Relaxed);
            }
            return;
        }
        if let Err(reason) = self.decoder.decode(line, &mut self.builder, now_ns()) {
            OpMetrics::add(&self.args.metrics.errors, 1);
            let path = self.args.plan.path.as_deref();
            self.args.dead_letter.record_line(
                &self.args.component,
                path,
                self.line,
                start,
                &reason,
                line,
            );
        }
    }

    /// Sends the rows decoded so far; returns false if the pipeline is gone.
    fn flush(&mut self) -> bool {
        if self.builder.is_empty() {
            return true;
        }
        if let Some(rate) = self.args.plan.rate
            && !self.pace(rate, self.builder.len() as u64)
        {
            return false;
        }
        let batch = self.builder.take();
        let at = FilePosition {
            offset: self.offset,
            line: self.line,
        };
        let ok = self.tx.send((batch, at)).is_ok();
        self.args.worker.unpark();
        ok
    }

    /// Waits until `lines` more are due at `rate` per second; false if the
    /// run stops meanwhile.
    fn pace(&mut self, rate: u64, lines: u64) -> bool {
        let (start, sent) = *self
            .paced
            .get_or_insert_with(|| (std::time::Instant::now(), 0));
        let due = start + Duration::from_secs_f64(sent as f64 / rate as f64);
        loop {
            if self.args.stop.load(Relaxed) {
                return false;
            }
            let now = std::time::Instant::now();
            if now >= due {
                break;
            }
            std::thread::sleep((due - now).min(FOLLOW_POLL));
        }
        self.paced = Some((start, sent + lines));
        true
    }

    /// `follow = true` at the end of the file: wait until it grows. A file
    /// that got shorter was truncated or replaced, so read it again from
    /// the start. Returns a new input when the file was reopened.
    fn wait_for_growth(
        &mut self,
        _current: &mut Box<dyn Read + Send>,
    ) -> Option<Box<dyn Read + Send>> {
        std::thread::sleep(FOLLOW_POLL);
        let path = self.args.plan.path.clone()?;
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let consumed = self.offset + self.pending.len() as u64;
        if len >= consumed {
            return None;
        }
        tracing::warn!(source = %self.args.component, path = %path.display(), "the followed file got shorter; reading it again from the start");
        let mut f = File::open::<&PathBuf>(&path).ok()?;
        f.seek(SeekFrom::Start(0)).ok()?;
        self.pending.clear();
        self.offset = 0;
        self.line = 0;
        self.decoder = Decoder::new(
            self.args.plan.format,
            self.args.plan.schema.clone(),
            self.args.plan.event_time,
        );
        Some(Box::new(f))
    }
}
