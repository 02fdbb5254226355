//! The writer thread of a `stdout` or `file` sink.
//!
//! Every worker's instance of the sink encodes its batches itself and sends
//! the bytes here, so encoding runs in parallel and only the write is
//! serial. The channel is bounded: a slow disk or a slow reader of stdout
//! slows the workers down instead of filling memory.
//!
//! An exactly-once file sink stages what it receives. At checkpoint N, once
//! every live instance has sealed N, the staged bytes become N's *piece*
//! (the file length before them, and the bytes), which goes into the
//! checkpoint itself; when the checkpoint is committed the piece is
//! appended. On restart the file is repaired to the length the restored
//! checkpoint says, re-appending its piece if a crash cut the append
//! short, so the file only ever holds committed lines, each once.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::exec::checkpoint::{Checkpoints, FINAL};

/// What a sink instance (or the checkpoint) tells its writer.
pub(crate) enum WriterMsg {
    Data(Vec<u8>),
    /// The instance passed barrier N: what it sent before belongs to N.
    Seal(u64),
    /// The instance ended: nothing more from it.
    Ended,
    /// Checkpoint N is committed: its pieces can be appended.
    Commit(u64),
    /// The run is over.
    Shutdown,
}

/// The sending side, cloned into every worker's sink instance.
pub(crate) type SinkWriter = flume::Sender<WriterMsg>;

pub(crate) enum Target {
    Stdout,
    File(PathBuf),
}

/// How an exactly-once file sink starts.
pub(crate) struct ExactlyOnce {
    pub(crate) node: usize,
    pub(crate) checkpoints: Arc<Checkpoints>,
    /// The sink's piece in the checkpoint restored from, if any; `None`
    /// starts the file afresh.
    pub(crate) restored: Option<Vec<u8>>,
    /// Instances that will send seals (one per worker).
    pub(crate) instances: usize,
}

/// A checkpoint's share of an exactly-once file: where it starts, and the
/// bytes.
#[derive(serde::Serialize, serde::Deserialize)]
struct Piece {
    len_before: u64,
    bytes: Vec<u8>,
}

/// What a writer thread tells the run: that it cannot write (`fail`), or
/// that its reader went away, which ends the run quietly (`stop`).
pub(crate) struct WriterHooks {
    pub(crate) fail: Arc<dyn Fn(String) + Send + Sync>,
    pub(crate) stop: Arc<dyn Fn() + Send + Sync>,
}

/// Opens the target and starts its writer thread. `header` is written
/// first, unless the file already has content (appending to it).
pub(crate) fn spawn_writer(
    component: &str,
    target: Target,
    header: Vec<u8>,
    capacity: usize,
    flush_interval_ms: Arc<AtomicU64>,
    hooks: WriterHooks,
    exactly_once: Option<ExactlyOnce>,
) -> std::io::Result<(SinkWriter, JoinHandle<()>)> {
    let WriterHooks { fail, stop } = hooks;
    let (tx, rx) = flume::bounded::<WriterMsg>(capacity);
    let component = component.to_string();
    let name = match &target {
        Target::Stdout => "stdout".to_string(),
        Target::File(path) => path.display().to_string(),
    };
    let body: Box<dyn FnOnce() -> std::io::Result<()> + Send> = match (target, exactly_once) {
        (Target::File(path), Some(exact)) => {
            let mut file = open_file(&path)?;
            let committed = repair(&mut file, &header, exact.restored.as_deref())?;
            let listener = tx.clone();
            exact.checkpoints.register_sink(
                exact.node,
                Box::new(move |id| {
                    let _ = listener.send(WriterMsg::Commit(id));
                }),
            );
            Box::new(move || {
                Staged {
                    file,
                    committed,
                    exact,
                    staged: Vec::new(),
                    seals: BTreeMap::new(),
                    ended: 0,
                    pieces: BTreeMap::new(),
                }
                .run(rx)
            })
        }
        (target, _) => {
            let mut out: Box<dyn Write + Send> = match target {
                Target::Stdout => {
                    let mut out = std::io::stdout();
                    out.write_all(&header)?;
                    Box::new(out)
                }
                Target::File(path) => {
                    let mut f = open_file(&path)?;
                    if f.metadata()?.len() == 0 {
                        f.write_all(&header)?;
                    }
                    Box::new(f)
                }
            };
            Box::new(move || direct(&mut out, rx, &flush_interval_ms))
        }
    };
    let handle = std::thread::Builder::new()
        .name(format!("eddy-write-{component}"))
        .spawn(move || match body() {
            Ok(()) => {}
            // A reader that went away (`eddy run ... | head`) ends the run the
            // way it ends a Unix pipeline: quietly.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                tracing::info!(
                    "sinks.{component}: {name} was closed by its reader; stopping the sources"
                );
                stop();
            }
            Err(e) => fail(format!("sinks.{component}: cannot write to {name}: {e}")),
        })?;
    Ok((tx, handle))
}

fn open_file(path: &std::path::Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(path)?;
    cut_torn_line(&file, path)?;
    Ok(file)
}

/// A process killed mid-write leaves half a line at the end of the file;
/// the run that resumes would append after it and glue two records into
/// one bad line. The half line's record is replayed from the last
/// checkpoint (it was not committed), so it is cut, with a warning.
fn cut_torn_line(file: &File, path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if end == len && chunk.last() == Some(&b'\n') {
            return Ok(());
        }
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            end = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    tracing::warn!(
        "{}: cutting {} bytes of an unfinished last line (a previous run stopped mid-write)",
        path.display(),
        len - end
    );
    file.set_len(end)
}

/// At-least-once: write as it comes. With no flush interval, flush
/// whenever nothing else waits (prompt at low rates, large writes at high
/// ones); with one, hold lines up to that long (or until 256 KiB wait), so
/// a steady trickle of small batches costs one write per interval — what
/// Fluent Bit's `Flush` and Flink's buffer timeout trade: latency for CPU.
/// The interval is read as it goes: the tuner may change it.
fn direct(
    out: &mut Box<dyn Write + Send>,
    rx: flume::Receiver<WriterMsg>,
    flush_interval_ms: &AtomicU64,
) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(256 * 1024, out);
    // When the oldest line not yet handed to the OS was written.
    let mut held_since: Option<Instant> = None;
    loop {
        let flush_interval = Duration::from_millis(flush_interval_ms.load(Relaxed));
        let msg = match held_since {
            Some(t) if !flush_interval.is_zero() => match rx.recv_deadline(t + flush_interval) {
                Ok(msg) => Some(msg),
                Err(flume::RecvTimeoutError::Timeout) => None,
                Err(flume::RecvTimeoutError::Disconnected) => break,
            },
            _ => match rx.recv() {
                Ok(msg) => Some(msg),
                Err(_) => break,
            },
        };
        match msg {
            Some(WriterMsg::Data(bytes)) => {
                out.write_all(&bytes)?;
                if out.buffer().is_empty() {
                    held_since = None; // a full buffer was just written
                } else {
                    held_since.get_or_insert_with(Instant::now);
                }
            }
            Some(WriterMsg::Shutdown) => break,
            Some(WriterMsg::Seal(_) | WriterMsg::Ended | WriterMsg::Commit(_)) => {}
            None => {}
        }
        let due = match held_since {
            None => false,
            Some(_) if flush_interval.is_zero() => rx.is_empty(),
            Some(t) => t.elapsed() >= flush_interval,
        };
        if due {
            out.flush()?;
            held_since = None;
        }
    }
    out.flush()
}

/// Brings the file to what the restored checkpoint committed and returns
/// its length: cut back what is beyond it, re-append the checkpoint's
/// piece if its append was cut short. Without a checkpoint, the file
/// starts empty (with its header).
fn repair(file: &mut File, header: &[u8], restored: Option<&[u8]>) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    let Some(piece) = restored else {
        file.set_len(0)?;
        file.write_all(header)?;
        file.sync_all()?;
        return Ok(header.len() as u64);
    };
    let piece: Piece = postcard::from_bytes(piece).map_err(|e| {
        std::io::Error::other(format!(
            "the checkpoint's record of this file is damaged: {e}"
        ))
    })?;
    let target = piece.len_before + piece.bytes.len() as u64;
    if len < target {
        file.set_len(piece.len_before)?;
        file.seek(SeekFrom::End(0))?;
        file.write_all(&piece.bytes)?;
    } else if len > target {
        file.set_len(target)?;
    }
    file.sync_all()?;
    Ok(target)
}

struct Staged {
    file: File,
    /// The file's committed length.
    committed: u64,
    exact: ExactlyOnce,
    /// Bytes received since the last sealed checkpoint.
    staged: Vec<u8>,
    /// Seals received per checkpoint.
    seals: BTreeMap<u64, usize>,
    ended: usize,
    /// Sealed pieces waiting for their checkpoint to commit.
    pieces: BTreeMap<u64, Piece>,
}

impl Staged {
    fn run(mut self, rx: flume::Receiver<WriterMsg>) -> std::io::Result<()> {
        while let Ok(msg) = rx.recv() {
            match msg {
                WriterMsg::Data(bytes) => self.staged.extend_from_slice(&bytes),
                WriterMsg::Seal(id) => {
                    *self.seals.entry(id).or_default() += 1;
                    self.seal_complete();
                }
                WriterMsg::Ended => {
                    self.ended += 1;
                    self.seal_complete();
                    if self.ended == self.exact.instances {
                        self.seal(FINAL);
                    }
                }
                WriterMsg::Commit(id) => self.append_through(id)?,
                WriterMsg::Shutdown => break,
            }
        }
        Ok(())
    }

    /// Seals every checkpoint that all live instances have sealed.
    fn seal_complete(&mut self) {
        let live = self.exact.instances - self.ended;
        let ready: Vec<u64> = self
            .seals
            .iter()
            .filter(|&(_, &n)| n >= live && live > 0)
            .map(|(&id, _)| id)
            .collect();
        for id in ready {
            self.seals.remove(&id);
            self.seal(id);
        }
    }

    fn seal(&mut self, id: u64) {
        let len_before = self.committed
            + self
                .pieces
                .values()
                .map(|p| p.bytes.len() as u64)
                .sum::<u64>();
        let piece = Piece {
            len_before,
            bytes: std::mem::take(&mut self.staged),
        };
        let encoded = postcard::to_stdvec(&piece).expect("a piece encodes");
        self.pieces.insert(id, piece);
        self.exact
            .checkpoints
            .submit_piece(self.exact.node, id, encoded);
    }

    /// Appends the pieces of every checkpoint up to `id` (a FINAL piece
    /// goes with the first commit after it).
    fn append_through(&mut self, id: u64) -> std::io::Result<()> {
        let due: Vec<u64> = self
            .pieces
            .keys()
            .copied()
            .filter(|&k| k <= id || k == FINAL)
            .collect();
        for k in due {
            let piece = self.pieces.remove(&k).expect("listed above");
            self.file.write_all(&piece.bytes)?;
            self.committed += piece.bytes.len() as u64;
        }
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn contents(f: &mut File) -> Vec<u8> {
        let mut v = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut v).unwrap();
        v
    }

    fn piece(len_before: u64, bytes: &[u8]) -> Vec<u8> {
        postcard::to_stdvec(&Piece {
            len_before,
            bytes: bytes.to_vec(),
        })
        .unwrap()
    }

    /// Runs `direct` on a file with `interval`; returns its sender, the
    /// path and the thread.
    fn direct_writer(
        interval: Duration,
    ) -> (
        flume::Sender<WriterMsg>,
        tempfile::TempDir,
        std::path::PathBuf,
        std::thread::JoinHandle<()>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut out: Box<dyn Write + Send> = Box::new(open_file(&path).unwrap());
        let (tx, rx) = flume::bounded(16);
        let ms = AtomicU64::new(interval.as_millis() as u64);
        let h = std::thread::spawn(move || direct(&mut out, rx, &ms).unwrap());
        (tx, dir, path, h)
    }

    fn appears(path: &std::path::Path, want: &[u8]) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if std::fs::read(path).unwrap() == want {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn lines_are_held_no_longer_than_the_flush_interval() {
        // No interval: a line is written as soon as nothing else waits.
        let (tx, _dir, path, h) = direct_writer(Duration::ZERO);
        tx.send(WriterMsg::Data(b"a\n".to_vec())).unwrap();
        assert!(appears(&path, b"a\n"));
        drop(tx);
        h.join().unwrap();

        // An interval: the line is held, then written without more input.
        let (tx, _dir, path, h) = direct_writer(Duration::from_millis(50));
        tx.send(WriterMsg::Data(b"b\n".to_vec())).unwrap();
        assert!(appears(&path, b"b\n"));
        drop(tx);
        h.join().unwrap();

        // An hour: held until shutdown (or a full buffer), never lost.
        let (tx, _dir, path, h) = direct_writer(Duration::from_secs(3600));
        tx.send(WriterMsg::Data(b"c\n".to_vec())).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(std::fs::read(&path).unwrap(), b"");
        let big = vec![b'x'; 300 * 1024];
        tx.send(WriterMsg::Data(big.clone())).unwrap();
        let mut want = b"c\n".to_vec();
        want.extend_from_slice(&big);
        assert!(appears(&path, &want), "a full buffer is written at once");
        tx.send(WriterMsg::Data(b"d\n".to_vec())).unwrap();
        tx.send(WriterMsg::Shutdown).unwrap();
        h.join().unwrap();
        want.extend_from_slice(b"d\n");
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    #[test]
    fn a_fresh_start_leaves_only_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = open_file(&dir.path().join("out.csv")).unwrap();
        f.write_all(b"old run\n").unwrap();
        assert_eq!(repair(&mut f, b"a,b\n", None).unwrap(), 4);
        assert_eq!(contents(&mut f), b"a,b\n");
    }

    #[test]
    fn lines_beyond_the_checkpoint_are_cut_and_a_cut_short_append_is_redone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        // Checkpoint said: 5 bytes ("a\nbb\n") committed before, then "c\nd\n".
        let record = piece(5, b"c\nd\n");
        // The append of the checkpoint's lines was cut short by a crash.
        let mut f = open_file(&path).unwrap();
        f.write_all(b"a\nbb\nc").unwrap();
        assert_eq!(repair(&mut f, b"", Some(&record)).unwrap(), 9);
        assert_eq!(contents(&mut f), b"a\nbb\nc\nd\n");
        // Lines of a checkpoint that never completed are cut off.
        f.write_all(b"uncommitted\n").unwrap();
        assert_eq!(repair(&mut f, b"", Some(&record)).unwrap(), 9);
        assert_eq!(contents(&mut f), b"a\nbb\nc\nd\n");
        // Already right: nothing changes.
        assert_eq!(repair(&mut f, b"", Some(&record)).unwrap(), 9);
        assert_eq!(contents(&mut f), b"a\nbb\nc\nd\n");
    }
}

#[cfg(test)]
mod torn_line_tests {
    use super::*;

    #[test]
    fn an_unfinished_last_line_is_cut_and_whole_lines_stay() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.jsonl");
        for (before, after) in [
            ("", ""),
            ("{\"a\":1}\n", "{\"a\":1}\n"),
            ("{\"a\":1}\n{\"a\":", "{\"a\":1}\n"),
            ("{\"a\":", ""),
        ] {
            std::fs::write(&path, before).expect("write");
            drop(open_file(&path).expect("open"));
            assert_eq!(
                std::fs::read_to_string(&path).expect("read"),
                after,
                "{before:?}"
            );
        }
    }
}
