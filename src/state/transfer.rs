//! Bin transfer: one bin's state of one operator as a stream of chunks,
//! out of one store and into another (and, with live migration, between
//! running nodes over the mesh).
//!
//! The stream format (version 1):
//!
//! ```text
//! stream = magic header chunk* end
//! magic  = "EDDYBIN" 0x01                    8 bytes; the last is the format version
//! frame  = tag:u8 | length:u32 LE | payload  header, chunk and end are frames
//! header = 'H' frame; payload: postcard BinHeader + CRC-32 (LE)
//! chunk  = 'C' frame; payload: one raw chunk exactly as the store keeps it
//!          (postcard Chunk { entries } + CRC-32 (LE))
//! end    = 'E' frame; payload: postcard End { totals, digest } + CRC-32 (LE)
//! ```
//!
//! A chunk frame is at most [`MAX_FRAME_BYTES`]. The end frame's totals
//! (chunks, entries, bytes of chunk payloads) and digest (CRC-32 over every
//! chunk payload in order) catch a lost, repeated or reordered chunk; a
//! stream without its end frame is truncated. Nothing may follow the end.
//!
//! The core is sans-IO, as the mesh will carry these streams:
//! [`BinStreamEncoder`] turns a header and raw chunks into bytes, and
//! [`BinStreamDecoder`] takes bytes as they arrive and hands back verified
//! events. [`write_stream`] and [`StreamReader`] drive them over
//! `std::io`; [`export_bin`] and [`import_stream`] connect them to a
//! [`Store`]. At every step one chunk is in memory, never the whole bin.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use super::chunk::{Chunk, seal, verify};
use super::record::{BinRecord, CheckpointRecord, OperatorRecord};
use super::store::{Store, now_ms};

/// The first 7 bytes of every stream; the 8th is [`FORMAT`].
pub(crate) const MAGIC: [u8; 7] = *b"EDDYBIN";
/// The stream format this eddy writes and reads.
pub(crate) const FORMAT: u8 = 1;
/// Frame tags.
const HEADER: u8 = b'H';
const CHUNK: u8 = b'C';
const END: u8 = b'E';
/// Bytes before every frame's payload: tag and length.
pub(crate) const FRAME_PREFIX: usize = 5;
/// The largest frame a decoder accepts (a chunk holds at least one entry,
/// so one huge entry makes one huge chunk). It bounds what a damaged or
/// hostile length can make a receiver allocate.
pub(crate) const MAX_FRAME_BYTES: u32 = 1 << 30;

/// What a stream carries: whose bin, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BinHeader {
    /// The operator's component id.
    pub(crate) operator: String,
    pub(crate) bin: u32,
    /// The bin count keys were hashed into: a bin means the same keys only
    /// under the same count.
    pub(crate) bins: u32,
    /// The checkpoint the state was read from (0: not from a checkpoint).
    pub(crate) checkpoint: u64,
    /// The store version holding this bin's state: checkpoint writes,
    /// spills and imports draw from one counter per store, so it only
    /// identifies the state within the store it came from (0: not from a
    /// store). Informational: an import allocates its own.
    pub(crate) version: u64,
    /// The operator's watermark at that point (`i64::MIN`: none yet).
    pub(crate) watermark: i64,
    /// What the sender will send, when it knows in advance (a store does);
    /// the receiver checks the end against it and can show progress.
    pub(crate) expected: Option<Totals>,
}

/// How much a stream carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Totals {
    pub(crate) chunks: u32,
    /// `(key, value)` entries in all chunks.
    pub(crate) entries: u64,
    /// Bytes of chunk payloads (the chunks as stored).
    pub(crate) bytes: u64,
}

impl Totals {
    fn of(bin: &BinRecord) -> Totals {
        Totals {
            chunks: bin.chunks,
            entries: bin.entries,
            bytes: bin.bytes,
        }
    }
}

/// The end frame's payload.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct End {
    totals: Totals,
    /// CRC-32 over every chunk payload, in order.
    digest: u32,
}

/// A stream that cannot be read, or a chunk that fails its check. The
/// message names the chunk (counted from 0) where there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StreamError(pub(crate) String);

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The entry count of a raw chunk whose checksum matches (postcard puts
/// the entry count first, as a varint).
pub(super) fn chunk_entries(raw: &[u8]) -> Result<u64, String> {
    let payload = verify(raw)?;
    let (n, _) =
        postcard::take_from_bytes::<u64>(payload).map_err(|e| format!("undecodable chunk: {e}"))?;
    Ok(n)
}

fn frame_prefix(tag: u8, len: usize) -> [u8; FRAME_PREFIX] {
    let mut p = [0u8; FRAME_PREFIX];
    p[0] = tag;
    p[1..].copy_from_slice(&(len as u32).to_le_bytes());
    p
}

/// The sending side, sans-IO. Call [`start`](Self::start) once and send
/// its bytes, then [`chunk`](Self::chunk) for every raw chunk (send the
/// returned prefix, then the chunk itself), then [`finish`](Self::finish)
/// and send its bytes.
pub(crate) struct BinStreamEncoder {
    expected: Option<Totals>,
    sent: Totals,
    digest: crc32fast::Hasher,
}

impl BinStreamEncoder {
    /// Starts a stream: the encoder, and the magic and header frame.
    pub(crate) fn start(header: &BinHeader) -> (BinStreamEncoder, Vec<u8>) {
        let payload = seal(postcard::to_stdvec(header).expect("a header always encodes"));
        let mut bytes = Vec::with_capacity(8 + FRAME_PREFIX + payload.len());
        bytes.extend_from_slice(&MAGIC);
        bytes.push(FORMAT);
        bytes.extend_from_slice(&frame_prefix(HEADER, payload.len()));
        bytes.extend_from_slice(&payload);
        let encoder = BinStreamEncoder {
            expected: header.expected,
            sent: Totals::default(),
            digest: crc32fast::Hasher::new(),
        };
        (encoder, bytes)
    }

    /// The frame prefix to send before `raw`, a chunk as the store keeps
    /// it. Checks its checksum first, so a damaged chunk is never sent.
    pub(crate) fn chunk(&mut self, raw: &[u8]) -> Result<[u8; FRAME_PREFIX], String> {
        if raw.len() > MAX_FRAME_BYTES as usize {
            return Err(format!(
                "{} bytes, more than a frame can hold ({MAX_FRAME_BYTES})",
                raw.len()
            ));
        }
        let entries = chunk_entries(raw)?;
        self.sent.chunks += 1;
        self.sent.entries += entries;
        self.sent.bytes += raw.len() as u64;
        self.digest.update(raw);
        Ok(frame_prefix(CHUNK, raw.len()))
    }

    /// The end frame, and what was sent. Fails if the header promised
    /// other totals.
    pub(crate) fn finish(self) -> Result<(Vec<u8>, Totals), String> {
        if let Some(expected) = self.expected
            && expected != self.sent
        {
            return Err(format!(
                "the header promised {expected:?} but {:?} were sent",
                self.sent
            ));
        }
        let end = End {
            totals: self.sent,
            digest: self.digest.finalize(),
        };
        let payload = seal(postcard::to_stdvec(&end).expect("an end always encodes"));
        let mut bytes = frame_prefix(END, payload.len()).to_vec();
        bytes.extend_from_slice(&payload);
        Ok((bytes, self.sent))
    }
}

/// What a decoder hands back, in stream order: one header, any number of
/// chunks, one end.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StreamEvent {
    Header(BinHeader),
    /// A raw chunk whose checksum matched (`index` counts from 0).
    Chunk {
        index: u32,
        raw: Vec<u8>,
    },
    /// The end frame matched everything received.
    End(Totals),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Magic,
    Header,
    Chunks,
    Ended,
}

/// The receiving side, sans-IO. Feed bytes with
/// [`handle_bytes`](Self::handle_bytes) as they arrive, in pieces of any
/// size; after each, call [`poll_event`](Self::poll_event) until it gives
/// `Ok(None)` (it needs more bytes). When the input ends, call
/// [`finish`](Self::finish). After an error the stream is unusable.
///
/// It buffers at most one frame plus the last piece fed.
pub(crate) struct BinStreamDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed.
    pos: usize,
    /// Bytes dropped from the front of `buf`: `drained + pos` is the
    /// stream offset of the next unconsumed byte.
    drained: u64,
    stage: Stage,
    header: Option<BinHeader>,
    received: Totals,
    digest: crc32fast::Hasher,
}

impl Default for BinStreamDecoder {
    fn default() -> Self {
        BinStreamDecoder::new()
    }
}

impl BinStreamDecoder {
    pub(crate) fn new() -> BinStreamDecoder {
        BinStreamDecoder {
            buf: Vec::new(),
            pos: 0,
            drained: 0,
            stage: Stage::Magic,
            header: None,
            received: Totals::default(),
            digest: crc32fast::Hasher::new(),
        }
    }

    /// Takes the next bytes of the stream.
    pub(crate) fn handle_bytes(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.drained += self.pos as u64;
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// What was received so far.
    pub(crate) fn received(&self) -> Totals {
        self.received
    }

    /// The stream offset of the next unconsumed byte.
    fn offset(&self) -> u64 {
        self.drained + self.pos as u64
    }

    /// Where the next frame is, for error messages: which frame and its
    /// byte offset in the stream.
    fn at(&self) -> String {
        let offset = self.offset();
        match self.stage {
            Stage::Magic | Stage::Header => format!("the header (at byte {offset})"),
            Stage::Chunks => format!("chunk {} (at byte {offset})", self.received.chunks),
            Stage::Ended => format!("the end (at byte {offset})"),
        }
    }

    /// The next event, `Ok(None)` if more bytes are needed.
    pub(crate) fn poll_event(&mut self) -> Result<Option<StreamEvent>, StreamError> {
        let avail = &self.buf[self.pos..];
        match self.stage {
            Stage::Magic => {
                let n = avail.len().min(MAGIC.len());
                if avail[..n] != MAGIC[..n] {
                    return Err(StreamError(
                        "not a bin stream (it does not start with EDDYBIN)".into(),
                    ));
                }
                if avail.len() < 8 {
                    return Ok(None);
                }
                if avail[7] != FORMAT {
                    return Err(StreamError(format!(
                        "a bin stream of format {}; this eddy reads format {FORMAT}",
                        avail[7]
                    )));
                }
                self.pos += 8;
                self.stage = Stage::Header;
                self.poll_event()
            }
            Stage::Ended => {
                if avail.is_empty() {
                    Ok(None)
                } else {
                    Err(StreamError(format!(
                        "{} bytes follow the end of the stream",
                        avail.len()
                    )))
                }
            }
            Stage::Header | Stage::Chunks => {
                if avail.len() < FRAME_PREFIX {
                    return Ok(None);
                }
                let tag = avail[0];
                let len = u32::from_le_bytes(avail[1..5].try_into().expect("4 bytes"));
                let expected: &[u8] = if self.stage == Stage::Header {
                    &[HEADER]
                } else {
                    &[CHUNK, END]
                };
                if !expected.contains(&tag) {
                    return Err(StreamError(format!(
                        "{}: unknown frame tag 0x{tag:02x}",
                        self.at()
                    )));
                }
                if len > MAX_FRAME_BYTES {
                    return Err(StreamError(format!(
                        "{}: a frame of {len} bytes, more than {MAX_FRAME_BYTES}",
                        self.at()
                    )));
                }
                let (len, have) = (len as usize, avail.len());
                if have < FRAME_PREFIX + len {
                    // Reserve now so the rest arrives without reallocating.
                    self.buf.reserve(FRAME_PREFIX + len - have);
                    return Ok(None);
                }
                let at = self.at();
                let start = self.pos + FRAME_PREFIX;
                self.pos = start + len;
                let payload = self.buf[start..start + len].to_vec();
                let event = match tag {
                    HEADER => self.header_frame(&payload)?,
                    CHUNK => self.chunk_frame(payload, &at)?,
                    _ => self.end_frame(&payload)?,
                };
                Ok(Some(event))
            }
        }
    }

    fn header_frame(&mut self, payload: &[u8]) -> Result<StreamEvent, StreamError> {
        let header = verify(payload)
            .and_then(|p| {
                postcard::from_bytes::<BinHeader>(p).map_err(|e| format!("undecodable: {e}"))
            })
            .map_err(|e| StreamError(format!("the header: {e}")))?;
        self.header = Some(header.clone());
        self.stage = Stage::Chunks;
        Ok(StreamEvent::Header(header))
    }

    /// `at` names the chunk and its frame's offset.
    fn chunk_frame(&mut self, raw: Vec<u8>, at: &str) -> Result<StreamEvent, StreamError> {
        let index = self.received.chunks;
        let entries = chunk_entries(&raw).map_err(|e| StreamError(format!("{at}: {e}")))?;
        self.received.chunks += 1;
        self.received.entries += entries;
        self.received.bytes += raw.len() as u64;
        self.digest.update(&raw);
        Ok(StreamEvent::Chunk { index, raw })
    }

    fn end_frame(&mut self, payload: &[u8]) -> Result<StreamEvent, StreamError> {
        let end = verify(payload)
            .and_then(|p| postcard::from_bytes::<End>(p).map_err(|e| format!("undecodable: {e}")))
            .map_err(|e| StreamError(format!("the end frame: {e}")))?;
        let got = self.received;
        if end.totals != got {
            return Err(StreamError(format!(
                "the stream ends saying it sent {} chunks, {} entries, {} bytes, but {} chunks, {} entries, {} bytes arrived",
                end.totals.chunks,
                end.totals.entries,
                end.totals.bytes,
                got.chunks,
                got.entries,
                got.bytes
            )));
        }
        if end.digest != self.digest.clone().finalize() {
            return Err(StreamError(
                "the chunks arrived out of order or altered (the digest differs)".into(),
            ));
        }
        if let Some(expected) = self.header.as_ref().and_then(|h| h.expected)
            && expected != got
        {
            return Err(StreamError(format!(
                "the header promised {} chunks, {} entries, {} bytes, but {} chunks, {} entries, {} bytes arrived",
                expected.chunks,
                expected.entries,
                expected.bytes,
                got.chunks,
                got.entries,
                got.bytes
            )));
        }
        self.stage = Stage::Ended;
        Ok(StreamEvent::End(got))
    }

    /// The input ended: `Ok` only if the stream was complete.
    pub(crate) fn finish(&self) -> Result<Totals, StreamError> {
        match self.stage {
            Stage::Ended => Ok(self.received),
            Stage::Magic | Stage::Header => Err(StreamError(
                "the stream ends before its header is complete".into(),
            )),
            Stage::Chunks => {
                let end = self.drained + self.buf.len() as u64;
                let n = self.received.chunks;
                let partial = &self.buf[self.pos..];
                let place = match partial.first() {
                    None => format!("after {n} complete chunks"),
                    Some(&END) => format!(
                        "in its end frame (at byte {}), after {n} chunks",
                        self.offset()
                    ),
                    Some(_) => format!(
                        "in chunk {n} (at byte {}), after {n} complete chunks",
                        self.offset()
                    ),
                };
                Err(StreamError(format!(
                    "the stream is truncated: it ends at byte {end} {place}, without its end frame"
                )))
            }
        }
    }
}

/// Writes a whole stream to `out`: the header, every chunk of `chunks`
/// (one in memory at a time), the end. Returns what was sent. An error
/// names the chunk; what was written before it is not a valid stream.
pub(crate) fn write_stream<W: Write>(
    out: &mut W,
    header: &BinHeader,
    chunks: impl Iterator<Item = Result<Vec<u8>, String>>,
) -> Result<Totals, String> {
    let io = |e: std::io::Error| format!("cannot write the stream: {e}");
    let (mut encoder, start) = BinStreamEncoder::start(header);
    out.write_all(&start).map_err(io)?;
    for (index, raw) in chunks.enumerate() {
        let raw = raw.map_err(|e| format!("chunk {index}: {e}"))?;
        let prefix = encoder
            .chunk(&raw)
            .map_err(|e| format!("chunk {index}: {e}"))?;
        out.write_all(&prefix).map_err(io)?;
        out.write_all(&raw).map_err(io)?;
    }
    let (end, totals) = encoder.finish()?;
    out.write_all(&end).map_err(io)?;
    out.flush().map_err(io)?;
    Ok(totals)
}

/// Reads a stream from `input`, one chunk in memory at a time. Open it
/// (which reads the header), then take chunks until `Ok(None)`: that is a
/// complete, verified stream.
pub(crate) struct StreamReader<R> {
    input: R,
    decoder: BinStreamDecoder,
    header: BinHeader,
    scratch: Vec<u8>,
    end: Option<Totals>,
}

/// Bytes read from the input at a time.
const READ_BYTES: usize = 64 * 1024;

impl<R: Read> StreamReader<R> {
    /// Reads up to the end of the header.
    pub(crate) fn open(input: R) -> Result<StreamReader<R>, StreamError> {
        let mut reader = StreamReader {
            input,
            decoder: BinStreamDecoder::new(),
            header: BinHeader {
                operator: String::new(),
                bin: 0,
                bins: 0,
                checkpoint: 0,
                version: 0,
                watermark: i64::MIN,
                expected: None,
            },
            scratch: vec![0; READ_BYTES],
            end: None,
        };
        match reader.next_event()? {
            StreamEvent::Header(h) => reader.header = h,
            other => unreachable!("a decoder starts with the header, not {other:?}"),
        }
        Ok(reader)
    }

    pub(crate) fn header(&self) -> &BinHeader {
        &self.header
    }

    /// What was received so far (everything, once the stream has ended).
    pub(crate) fn received(&self) -> Totals {
        self.decoder.received()
    }

    fn next_event(&mut self) -> Result<StreamEvent, StreamError> {
        loop {
            if let Some(event) = self.decoder.poll_event()? {
                return Ok(event);
            }
            let n = loop {
                match self.input.read(&mut self.scratch) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(StreamError(format!(
                            "cannot read the stream after {} chunks: {e}",
                            self.decoder.received().chunks
                        )));
                    }
                }
            };
            if n == 0 {
                self.decoder.finish()?;
                unreachable!("a finished decoder has nothing left to poll");
            }
            self.decoder.handle_bytes(&self.scratch[..n]);
        }
    }

    /// The next verified raw chunk, or `Ok(None)` after a complete stream
    /// (its end frame matched and nothing followed it).
    pub(crate) fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, StreamError> {
        if self.end.is_some() {
            return Ok(None);
        }
        match self.next_event()? {
            StreamEvent::Chunk { raw, .. } => Ok(Some(raw)),
            StreamEvent::End(totals) => {
                // Nothing may follow the end frame.
                let mut extra = [0u8; 1];
                loop {
                    match self.input.read(&mut extra) {
                        Ok(0) => break,
                        Ok(_) => {
                            return Err(StreamError("bytes follow the end of the stream".into()));
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            return Err(StreamError(format!(
                                "cannot read the stream after its end: {e}"
                            )));
                        }
                    }
                }
                self.decoder.poll_event()?;
                self.end = Some(totals);
                Ok(None)
            }
            StreamEvent::Header(_) => Err(StreamError("a second header".into())),
        }
    }
}

/// Cuts `(key, value)` entries into raw chunks of about `chunk_bytes`, as
/// a checkpoint does: the sending side of a bin that lives in memory (live
/// migration) rather than in a store. Lazy: one chunk at a time.
#[cfg_attr(
    not(test),
    expect(dead_code, reason = "the in-memory side of live migration")
)]
pub(crate) fn chunks_of(
    entries: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
    chunk_bytes: usize,
) -> impl Iterator<Item = Vec<u8>> {
    let mut entries = entries.into_iter().peekable();
    std::iter::from_fn(move || {
        entries.peek()?;
        let mut chunk = Chunk::default();
        let mut size = 0;
        for (k, v) in entries.by_ref() {
            size += Chunk::entry_size(&k, &v);
            chunk.entries.push((k, v));
            if size >= chunk_bytes {
                break;
            }
        }
        Some(chunk.encode())
    })
}

/// Which bin of which checkpoint an export reads.
#[derive(Clone, Debug)]
pub(crate) struct ExportPlan {
    pub(crate) header: BinHeader,
    /// `None`: the bin is empty (a valid stream of no chunks).
    pub(crate) bin: Option<BinRecord>,
}

/// Finds `bin` of operator `op` in `record`, or says what there is.
pub(crate) fn plan_export(
    record: &CheckpointRecord,
    op: &str,
    bin: u32,
) -> Result<ExportPlan, String> {
    let Some(operator) = record.operator(op) else {
        let names: Vec<&str> = record.operators.iter().map(|o| o.id.as_str()).collect();
        return Err(format!(
            "checkpoint {} has no operator {op:?} (it has {})",
            record.id,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    if bin >= record.bins {
        return Err(format!(
            "there is no bin {bin}: the state is partitioned into {} bins (0 to {})",
            record.bins,
            record.bins.saturating_sub(1)
        ));
    }
    let found = operator.bins.iter().find(|b| b.bin == bin).copied();
    Ok(ExportPlan {
        header: BinHeader {
            operator: op.to_string(),
            bin,
            bins: record.bins,
            checkpoint: record.id,
            version: found.map_or(0, |b| b.version),
            watermark: operator.watermark,
            expected: Some(found.map(|b| Totals::of(&b)).unwrap_or_default()),
        },
        bin: found,
    })
}

/// Streams a planned bin out of `store` into `out`, one chunk in memory
/// at a time. Every chunk is verified before it is written.
pub(crate) fn export_bin<W: Write>(
    store: &Store,
    plan: &ExportPlan,
    out: &mut W,
) -> Result<Totals, String> {
    let op = &plan.header.operator;
    match &plan.bin {
        Some(bin) => write_stream(
            out,
            &plan.header,
            store.raw_chunks(op, bin).map(|c| c.map_err(|e| e.0)),
        ),
        None => write_stream(out, &plan.header, std::iter::empty()),
    }
}

/// What [`import_stream`] installed.
#[derive(Clone, Debug)]
pub(crate) struct Imported {
    /// The new checkpoint's id.
    pub(crate) checkpoint: u64,
    /// The bin as the new checkpoint records it (under a version from the
    /// store's allocator).
    pub(crate) bin: BinRecord,
    pub(crate) totals: Totals,
    /// Warnings from finding the store's newest good checkpoint.
    pub(crate) warnings: Vec<String>,
}

/// Installs a stream into `store` as bin `bin` of operator `op`: a new
/// checkpoint, the newest one with that bin replaced. The header must name
/// `op` and `bin` and the store's bin count, and the store's newest good
/// checkpoint must know `op`. Nothing becomes visible unless the whole
/// stream verifies: a failure leaves the store's checkpoints, and the
/// state they name, as they were (garbage a restart would drop anyway,
/// such as chunks of a checkpoint that never completed, may be dropped).
///
/// Into a store with no checkpoint, an empty checkpoint holding the
/// stream's bin count and the operator's watermark is committed first
/// (and removed again on failure).
pub(crate) fn import_stream<R: Read>(
    store: &Store,
    op: &str,
    bin: u32,
    mut reader: StreamReader<R>,
) -> Result<Imported, String> {
    let header = reader.header().clone();
    if header.operator != op || header.bin != bin {
        return Err(format!(
            "the stream holds operator {:?} bin {}, not operator {op:?} bin {bin}",
            header.operator, header.bin
        ));
    }
    if header.bin >= header.bins {
        return Err(format!(
            "the stream is damaged: its header names bin {} of {} bins",
            header.bin, header.bins
        ));
    }
    // Sets the base checkpoint and moves the version allocator above every
    // version the store keeps (spilled ones included).
    let restored = store.restore_point().map_err(|e| e.0)?;
    let fresh = match &restored.record {
        Some(base) if base.bins != header.bins => {
            return Err(format!(
                "the stream's state is partitioned into {} bins, this data dir's into {}: bin {bin} holds other keys here",
                header.bins, base.bins
            ));
        }
        Some(base) if base.completed => {
            return Err(format!(
                "the newest checkpoint ({}) is of a run that completed, and the next run starts over from nothing, imported bins included; import into a fresh data dir, or remove {} first",
                base.id,
                store.dir().display()
            ));
        }
        Some(base) if base.operator(op).is_none() => {
            let names: Vec<&str> = base.operators.iter().map(|o| o.id.as_str()).collect();
            return Err(format!(
                "checkpoint {} has no operator {op:?} (it has {}): the state belongs to another pipeline",
                base.id,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        }
        Some(_) => false,
        None if !store.records().is_empty() => {
            return Err(format!(
                "{} holds checkpoints but none of them verifies ({}); see `eddy state inspect`, or remove it to start over",
                store.dir().display(),
                restored.warnings.join("; ")
            ));
        }
        None => {
            let base = CheckpointRecord {
                id: 1,
                time_ms: now_ms(),
                bins: header.bins,
                completed: false,
                operators: vec![OperatorRecord {
                    id: op.to_string(),
                    watermark: header.watermark,
                    bins: Vec::new(),
                }],
                sources: Vec::new(),
                sinks: Vec::new(),
                signatures: Vec::new(),
            };
            store.commit(base, Vec::new(), &[]).map_err(|e| e.0)?;
            true
        }
    };
    // `Store::import_bin` takes plain chunks; a stream error stops it with
    // a chunk that cannot verify, before its record is written.
    let mut failure: Option<StreamError> = None;
    let chunks = std::iter::from_fn(|| {
        if failure.is_some() {
            return None;
        }
        match reader.next_chunk() {
            Ok(chunk) => chunk,
            Err(e) => {
                failure = Some(e);
                Some(Vec::new())
            }
        }
    });
    let result = store.import_bin(op, bin, chunks);
    let outcome = match (failure, result) {
        (Some(e), _) => Err(e.0),
        (None, Err(e)) => Err(e.0),
        (None, Ok(rec)) => Ok(rec),
    };
    match outcome {
        Ok(rec) => Ok(Imported {
            checkpoint: store.latest_id(),
            bin: rec,
            totals: reader.received(),
            warnings: restored.warnings,
        }),
        Err(e) => {
            // Drop what was written, as restart would: unreferenced chunks,
            // and the empty checkpoint made for this import.
            let cleanup = if fresh {
                store.reset()
            } else {
                store.restore_point().map(|_| ())
            };
            match cleanup {
                Ok(()) => Err(e),
                Err(c) => Err(format!("{e} (and cleaning up failed: {c})")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::store::{BinContent, BinWrite};

    fn header(expected: Option<Totals>) -> BinHeader {
        BinHeader {
            operator: "win".into(),
            bin: 3,
            bins: 16,
            checkpoint: 9,
            version: 8,
            watermark: 1234,
            expected,
        }
    }

    fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| (format!("key-{i}").into_bytes(), vec![i as u8; 30]))
            .collect()
    }

    fn stream(n: usize, chunk_bytes: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
        let chunks: Vec<Vec<u8>> = chunks_of(entries(n), chunk_bytes).collect();
        let mut out = Vec::new();
        write_stream(&mut out, &header(None), chunks.iter().cloned().map(Ok)).unwrap();
        (out, chunks)
    }

    fn read_all(bytes: &[u8]) -> Result<(BinHeader, Vec<Vec<u8>>), StreamError> {
        let mut r = StreamReader::open(bytes)?;
        let mut chunks = Vec::new();
        while let Some(c) = r.next_chunk()? {
            chunks.push(c);
        }
        Ok((r.header().clone(), chunks))
    }

    #[test]
    fn chunks_of_cuts_like_a_checkpoint_and_keeps_every_entry() {
        let chunks: Vec<Vec<u8>> = chunks_of(entries(1000), 4096).collect();
        assert!(chunks.len() > 5);
        let back: Vec<_> = chunks
            .iter()
            .flat_map(|c| super::super::chunk::decode_chunk(c).unwrap().entries)
            .collect();
        assert_eq!(back, entries(1000));
        assert_eq!(chunks_of(Vec::new(), 4096).count(), 0);
    }

    #[test]
    fn a_stream_round_trips_fed_in_pieces_of_any_size() {
        let (bytes, chunks) = stream(2000, 8192);
        assert_eq!(read_all(&bytes).unwrap(), (header(None), chunks.clone()));
        for piece in [1, 7, 4096, bytes.len()] {
            let mut d = BinStreamDecoder::new();
            let mut got = Vec::new();
            let mut end = None;
            for part in bytes.chunks(piece) {
                d.handle_bytes(part);
                while let Some(ev) = d.poll_event().unwrap() {
                    match ev {
                        StreamEvent::Header(h) => assert_eq!(h, header(None)),
                        StreamEvent::Chunk { index, raw } => {
                            assert_eq!(index as usize, got.len());
                            got.push(raw);
                        }
                        StreamEvent::End(t) => end = Some(t),
                    }
                }
            }
            assert_eq!(got, chunks, "pieces of {piece}");
            let totals = d.finish().unwrap();
            assert_eq!(end, Some(totals));
            assert_eq!(totals.entries, 2000);
            assert_eq!(totals.chunks as usize, chunks.len());
        }
    }

    #[test]
    fn every_damage_is_refused_and_named() {
        let (bytes, chunks) = stream(300, 2048);
        assert!(chunks.len() >= 3);
        let err = |b: &[u8]| read_all(b).unwrap_err().0;
        let header_len =
            8 + FRAME_PREFIX + u32::from_le_bytes(bytes[9..13].try_into().unwrap()) as usize;
        let first_chunk = header_len + FRAME_PREFIX;
        let second_chunk = first_chunk + chunks[0].len() + FRAME_PREFIX;

        assert!(err(b"GARBAGE!").contains("not a bin stream"));
        let mut v2 = bytes.clone();
        v2[7] = 2;
        assert!(err(&v2).contains("format 2"), "{}", err(&v2));
        // A flipped bit in each part.
        let chunk_1 = format!(
            "chunk 1 (at byte {}): checksum mismatch",
            second_chunk - FRAME_PREFIX
        );
        for (at, what) in [
            (header_len - 3, "the header"),
            (second_chunk + 10, chunk_1.as_str()),
            (bytes.len() - 3, "the end frame"),
        ] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(err(&bad).contains(what), "{what}: {}", err(&bad));
        }
        // Truncated anywhere.
        for cut in [3, header_len - 1, first_chunk + 5, bytes.len() - 1] {
            let e = err(&bytes[..cut]);
            assert!(
                e.contains("truncated") || e.contains("before its header"),
                "cut at {cut}: {e}"
            );
        }
        // A cut names the chunk it falls in, and where.
        let e = err(&bytes[..first_chunk + 5]);
        assert!(
            e.contains(&format!(
                "ends at byte {} in chunk 0 (at byte {header_len})",
                first_chunk + 5
            )),
            "{e}"
        );
        let e = err(&bytes[..second_chunk]);
        assert!(e.contains("in chunk 1 (at byte"), "{e}");
        // Bytes after the end.
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(err(&longer).contains("follow the end"));
        // A chunk left out, or two swapped: the end catches them.
        let frame = |i: usize| {
            let mut f = frame_prefix(CHUNK, chunks[i].len()).to_vec();
            f.extend_from_slice(&chunks[i]);
            f
        };
        let all: Vec<u8> = (0..chunks.len()).flat_map(frame).collect();
        let end = &bytes[header_len + all.len()..];
        let rebuild = |order: &[usize]| {
            let mut b = bytes[..header_len].to_vec();
            for &i in order {
                b.extend_from_slice(&frame(i));
            }
            b.extend_from_slice(end);
            b
        };
        let mut order: Vec<usize> = (0..chunks.len()).collect();
        assert!(read_all(&rebuild(&order)).is_ok());
        order.swap(0, 1);
        assert!(err(&rebuild(&order)).contains("out of order"));
        order.swap(0, 1);
        order.remove(1);
        assert!(err(&rebuild(&order)).contains("but"));
        // A length beyond the limit is refused before anything is allocated.
        let mut huge = bytes[..header_len].to_vec();
        huge.extend_from_slice(&frame_prefix(CHUNK, 0));
        huge[header_len + 1..header_len + 5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(&huge).contains("more than"));
    }

    #[test]
    fn the_encoder_refuses_a_damaged_chunk_and_a_broken_promise() {
        let chunks: Vec<Vec<u8>> = chunks_of(entries(100), 512).collect();
        let mut bad = chunks.clone();
        bad[1][4] ^= 1;
        let e = write_stream(&mut Vec::new(), &header(None), bad.into_iter().map(Ok)).unwrap_err();
        assert!(e.starts_with("chunk 1: checksum mismatch"), "{e}");
        let promise = Totals {
            chunks: 1,
            entries: 100,
            bytes: 1,
        };
        let e = write_stream(
            &mut Vec::new(),
            &header(Some(promise)),
            chunks.into_iter().map(Ok),
        )
        .unwrap_err();
        assert!(e.contains("promised"), "{e}");
    }

    fn record(id: u64) -> CheckpointRecord {
        CheckpointRecord {
            id,
            time_ms: now_ms(),
            bins: 16,
            completed: false,
            operators: vec![OperatorRecord {
                id: "win".into(),
                watermark: 1234,
                bins: Vec::new(),
            }],
            sources: Vec::new(),
            sinks: Vec::new(),
            signatures: Vec::new(),
        }
    }

    #[test]
    fn a_store_bin_exports_and_imports_and_a_bad_stream_changes_nothing() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let src = Store::open(a.path(), 1 << 20).unwrap();
        let (rec, _) = src
            .commit(
                record(5),
                vec![BinWrite {
                    op: "win".into(),
                    bin: 3,
                    content: BinContent::Entries(entries(40_000).into_iter().collect()),
                }],
                &[],
            )
            .unwrap();
        let plan = plan_export(&rec, "win", 3).unwrap();
        let mut bytes = Vec::new();
        let sent = export_bin(&src, &plan, &mut bytes).unwrap();
        assert!(sent.chunks > 2);
        assert_eq!(sent.entries, 40_000);

        // Into an empty store: a base checkpoint with the bin count first.
        let dst = Store::open(b.path(), 1 << 20).unwrap();
        let imported =
            import_stream(&dst, "win", 3, StreamReader::open(&bytes[..]).unwrap()).unwrap();
        assert_eq!(imported.totals, sent);
        let latest = dst.latest().unwrap();
        assert_eq!((latest.id, latest.bins), (2, 16));
        assert_eq!(latest.operator("win").unwrap().watermark, 1234);
        let got: Vec<_> = dst
            .read_bin("win", &imported.bin)
            .flat_map(|c| c.unwrap().entries)
            .collect();
        assert_eq!(got, entries(40_000));

        // Wrong bin or operator: refused before anything is read.
        let e = import_stream(&dst, "win", 4, StreamReader::open(&bytes[..]).unwrap()).unwrap_err();
        assert!(e.contains("not operator \"win\" bin 4"), "{e}");

        // A damaged chunk late in the stream: the store is as it was.
        let before = dst.records();
        let mut bad = bytes.clone();
        let at = bad.len() - 200;
        bad[at] ^= 0x01;
        let e = import_stream(&dst, "win", 3, StreamReader::open(&bad[..]).unwrap()).unwrap_err();
        assert!(
            e.contains("checksum mismatch") || e.contains("the end frame"),
            "{e}"
        );
        assert_eq!(dst.records(), before);
        assert_eq!(dst.latest().unwrap().id, 2);

        // A failed import into an empty store leaves no checkpoint.
        let c = tempfile::tempdir().unwrap();
        let empty = Store::open(c.path(), 1 << 20).unwrap();
        let e = import_stream(
            &empty,
            "win",
            3,
            StreamReader::open(&bytes[..bytes.len() - 1]).unwrap(),
        )
        .unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        assert!(empty.records().is_empty());

        // An empty bin is a valid stream of no chunks and empties the bin.
        let plan = plan_export(&rec, "win", 0).unwrap();
        assert!(plan.bin.is_none());
        let mut none = Vec::new();
        export_bin(&src, &plan, &mut none).unwrap();
        let imported =
            import_stream(&dst, "win", 0, StreamReader::open(&none[..]).unwrap()).unwrap();
        assert_eq!(imported.totals, Totals::default());
        assert!(
            plan_export(&rec, "nope", 0)
                .unwrap_err()
                .contains("has win")
        );
        assert!(
            plan_export(&rec, "win", 16)
                .unwrap_err()
                .contains("16 bins")
        );
    }

    #[test]
    fn spilled_bins_travel_like_written_ones_and_imports_never_reuse_a_spilled_version() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        // The source's bin 3 was spilled, then adopted by a checkpoint.
        let src = Store::open(a.path(), 1 << 20).unwrap();
        src.restore_point().unwrap();
        let spilled = src
            .spill("win", 3, &entries(5_000).into_iter().collect())
            .unwrap();
        let (rec, _) = src
            .commit(
                record(1),
                vec![BinWrite {
                    op: "win".into(),
                    bin: 3,
                    content: BinContent::Spilled(spilled),
                }],
                &[],
            )
            .unwrap();
        let plan = plan_export(&rec, "win", 3).unwrap();
        assert_eq!(plan.bin, Some(spilled));
        let mut bytes = Vec::new();
        assert_eq!(export_bin(&src, &plan, &mut bytes).unwrap().entries, 5_000);

        // The target holds a written bin 1 and an adopted spill of bin 2,
        // whose versions are above any checkpoint id.
        {
            let dst = Store::open(b.path(), 1 << 20).unwrap();
            dst.restore_point().unwrap();
            for _ in 0..5 {
                dst.spill("win", 9, &entries(10).into_iter().collect())
                    .unwrap(); // never adopted
            }
            let two = dst
                .spill("win", 2, &entries(700).into_iter().collect())
                .unwrap();
            dst.commit(
                record(1),
                vec![
                    BinWrite {
                        op: "win".into(),
                        bin: 1,
                        content: BinContent::Entries(entries(300).into_iter().collect()),
                    },
                    BinWrite {
                        op: "win".into(),
                        bin: 2,
                        content: BinContent::Spilled(two),
                    },
                ],
                &[],
            )
            .unwrap();
        }
        // Reopened, as `eddy state import` does.
        let dst = Store::open(b.path(), 1 << 20).unwrap();
        let imported =
            import_stream(&dst, "win", 3, StreamReader::open(&bytes[..]).unwrap()).unwrap();
        let latest = dst.latest().unwrap();
        assert_eq!(latest.id, imported.checkpoint);
        let bins = &latest.operator("win").unwrap().bins;
        assert_eq!(bins.iter().map(|b| b.bin).collect::<Vec<_>>(), [1, 2, 3]);
        let others: Vec<u64> = bins
            .iter()
            .filter(|b| b.bin != 3)
            .map(|b| b.version)
            .collect();
        assert!(
            others.iter().all(|&v| v < imported.bin.version),
            "import version {} vs {others:?}",
            imported.bin.version
        );
        let read = |b: &BinRecord| -> Vec<_> {
            dst.read_bin("win", b)
                .flat_map(|c| c.unwrap().entries)
                .collect()
        };
        assert_eq!(read(&bins[0]), entries(300));
        assert_eq!(read(&bins[1]), entries(700));
        assert_eq!(read(&bins[2]), entries(5_000));

        // A spill pending in the same store (a running operator's) keeps
        // its version and its chunks through an import.
        let pending = dst
            .spill("win", 3, &entries(42).into_iter().collect())
            .unwrap();
        let again = import_stream(&dst, "win", 3, StreamReader::open(&bytes[..]).unwrap()).unwrap();
        assert!(again.bin.version > pending.version);
        assert_eq!(read(&pending), entries(42));
        assert_eq!(read(&again.bin), entries(5_000));
    }
}
