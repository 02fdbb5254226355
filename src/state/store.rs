//! The sled store: committing checkpoints, finding the newest good one,
//! reading and writing bins, garbage-collecting old versions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::BinEntries;
use super::chunk::{Chunk, decode_chunk, decode_chunk_entries, encode_entries, seal, verify};
use super::chunk_log::{ChunkLog, Loc};
use super::lock::DataDirLock;
use super::record::{BinRecord, CheckpointRecord, OperatorRecord};

/// A store failure, with the data dir and what was being done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreError(pub(crate) String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One bin's complete state in a checkpoint.
pub(crate) struct BinWrite {
    pub(crate) op: String,
    pub(crate) bin: u32,
    pub(crate) content: BinContent,
}

pub(crate) enum BinContent {
    /// Write these entries.
    Entries(BinEntries),
    /// The state was spilled already ([`Store::spill`]): adopt that version.
    Spilled(BinRecord),
}

/// The checkpoint to restore from, and what was wrong with newer ones.
#[derive(Debug)]
pub(crate) struct Restored {
    pub(crate) record: Option<CheckpointRecord>,
    pub(crate) warnings: Vec<String>,
}

/// What a commit wrote.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CommitStats {
    pub(crate) bins: usize,
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
}

/// Checkpoints kept; older ones are collected after each commit.
const RETAINED: usize = 2;
/// Most bytes of entries in one chunk: what bounds memory when a bin is
/// exported or restored chunk by chunk.
pub(crate) const CHUNK_BYTES: usize = 256 * 1024;

pub(crate) struct Store {
    db: sled::Db,
    checkpoints: sled::Tree,
    dir: PathBuf,
    /// The chunks' bytes; sled holds where each one is.
    chunks: ChunkLog,
    /// Versions are numbered by one counter for checkpoint writes, spills
    /// and imports alike.
    next_version: std::sync::atomic::AtomicU64,
    /// Spilled versions not yet part of a checkpoint: kept by garbage
    /// collection until a checkpoint adopts them or they are released.
    pending: Mutex<BTreeSet<(String, u32, u64)>>,
    /// The newest committed record, the base of the next one.
    latest: Mutex<Option<CheckpointRecord>>,
    chunk_bytes: usize,
    _lock: DataDirLock,
}

fn chunk_key(bin: u32, version: u64, chunk: u32) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..4].copy_from_slice(&bin.to_be_bytes());
    k[4..12].copy_from_slice(&version.to_be_bytes());
    k[12..].copy_from_slice(&chunk.to_be_bytes());
    k
}

fn parse_chunk_key(k: &[u8]) -> Option<(u32, u64, u32)> {
    if k.len() != 16 {
        return None;
    }
    Some((
        u32::from_be_bytes(k[..4].try_into().ok()?),
        u64::from_be_bytes(k[4..12].try_into().ok()?),
        u32::from_be_bytes(k[12..].try_into().ok()?),
    ))
}

fn tree_name(op: &str) -> String {
    format!("op:{op}")
}

/// Garbage collection and spills are not flushed one by one (a checkpoint
/// flushes what it needs); flushing on close keeps the files from carrying
/// versions that were already dropped into the next run.
impl Drop for Store {
    fn drop(&mut self) {
        if let Err(e) = self.db.flush() {
            tracing::warn!("cannot flush the state in {}: {e}", self.dir.display());
        }
    }
}

/// How long an open waits for sled's lock on its files.
const SLED_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens sled in `dir`. The data dir's own lock is already held, so a
/// process holding sled's lock on the files is this one: a store just
/// dropped, whose flusher thread lets the lock go a moment after the drop
/// (a test reopening a store at once failed on it now and then). So a
/// lock held elsewhere is waited for, briefly.
pub(crate) fn open_sled(dir: &Path, cache_bytes: u64) -> sled::Result<sled::Db> {
    let started = std::time::Instant::now();
    loop {
        let opened = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes.max(1 << 20))
            .open();
        match opened {
            // sled says so only in the message (an `Other` error).
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && started.elapsed() < SLED_LOCK_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Where every chunk sled refers to is, for the chunk log to keep.
fn chunk_locs(db: &sled::Db) -> Result<Vec<Loc>, StoreError> {
    let mut locs = Vec::new();
    for name in db.tree_names() {
        if !name.starts_with(b"op:") {
            continue;
        }
        let tree = db
            .open_tree(&name)
            .map_err(|e| StoreError(format!("cannot open an operator's tree: {e}")))?;
        for item in tree.iter().values() {
            let v = item.map_err(|e| StoreError(format!("cannot scan an operator's tree: {e}")))?;
            locs.extend(Loc::decode(&v));
        }
    }
    Ok(locs)
}

impl Store {
    /// Opens the store in `DATA_DIR/state`, locking the data dir. Leftovers
    /// of a checkpoint that did not complete are removed.
    pub(crate) fn open(data_dir: &Path, cache_bytes: u64) -> Result<Store, StoreError> {
        let lock = DataDirLock::acquire(data_dir).map_err(StoreError)?;
        let dir = data_dir.join("state");
        let err = |what: &str, e: sled::Error| {
            StoreError(format!("state in {}: {what}: {e}", dir.display()))
        };
        let db = open_sled(&dir, cache_bytes).map_err(|e| err("cannot open", e))?;
        let checkpoints = db
            .open_tree("checkpoints")
            .map_err(|e| err("cannot open the checkpoint list", e))?;
        let chunks = ChunkLog::open(&dir.join("chunks"), chunk_locs(&db)?)
            .map_err(|e| StoreError(format!("state in {}: {e}", dir.display())))?;
        let store = Store {
            db,
            checkpoints,
            dir,
            chunks,
            next_version: std::sync::atomic::AtomicU64::new(1),
            pending: Mutex::new(BTreeSet::new()),
            latest: Mutex::new(None),
            chunk_bytes: CHUNK_BYTES,
            _lock: lock,
        };
        Ok(store)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn err(&self, what: impl std::fmt::Display, e: impl std::fmt::Display) -> StoreError {
        StoreError(format!("state in {}: {what}: {e}", self.dir.display()))
    }

    /// A chunk's bytes, from the chunk log or, as earlier versions wrote
    /// them, from sled itself.
    fn chunk_bytes(&self, value: &[u8]) -> Result<Vec<u8>, String> {
        match Loc::decode(value) {
            Some(loc) => self.chunks.read(loc),
            None => Ok(value.to_vec()),
        }
    }

    fn tree(&self, op: &str) -> Result<sled::Tree, StoreError> {
        self.db
            .open_tree(tree_name(op))
            .map_err(|e| self.err(format!("operator {op}: cannot open its tree"), e))
    }

    /// Every checkpoint record, newest first, each decoded or with why not.
    pub(crate) fn records(&self) -> Vec<(u64, Result<CheckpointRecord, String>, usize)> {
        let mut out = Vec::new();
        for item in self.checkpoints.iter().rev() {
            let Ok((k, v)) = item else { continue };
            let id = k.as_ref().try_into().map(u64::from_be_bytes).unwrap_or(0);
            let decoded = verify(&v).and_then(|p| {
                postcard::from_bytes::<CheckpointRecord>(p).map_err(|e| format!("undecodable: {e}"))
            });
            out.push((id, decoded, v.len()));
        }
        out
    }

    /// The newest checkpoint whose record and chunks all verify (`None`
    /// when there is none). A bad one is reported in `warnings` and the one
    /// before it is tried.
    pub(crate) fn restore_point(&self) -> Result<Restored, StoreError> {
        let mut warnings = Vec::new();
        for (id, record, _) in self.records() {
            let checked = record.and_then(|r| self.verify_chunks(&r).map(|()| r));
            match checked {
                Ok(record) => {
                    *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(record.clone());
                    self.collect_garbage()?;
                    return Ok(Restored {
                        record: Some(record),
                        warnings,
                    });
                }
                Err(e) => warnings.push(format!(
                    "checkpoint {id} in {} is damaged ({e}); trying the one before it",
                    self.dir.display()
                )),
            }
        }
        self.collect_garbage()?;
        Ok(Restored {
            record: None,
            warnings,
        })
    }

    /// The newest good checkpoint not newer than `limit`, as
    /// [`Store::restore_point`]; every newer record is dropped. A member
    /// of a distributed run goes back to the newest checkpoint all members
    /// hold, and a record past it must not be taken for a later one.
    pub(crate) fn restore_point_upto(&self, limit: u64) -> Result<Restored, StoreError> {
        for (id, _, _) in self.records() {
            if id > limit {
                self.checkpoints
                    .remove(id.to_be_bytes())
                    .map_err(|e| self.err(format!("cannot drop checkpoint {id}"), e))?;
            }
        }
        self.checkpoints
            .flush()
            .map_err(|e| self.err("cannot flush the checkpoint list", e))?;
        self.restore_point()
    }

    /// `(id, completed)` of every checkpoint record that decodes, newest
    /// first (what a member of a distributed run tells the others).
    pub(crate) fn marks(&self) -> Vec<(u64, bool)> {
        self.records()
            .into_iter()
            .filter_map(|(id, r, _)| r.ok().map(|r| (id, r.completed)))
            .collect()
    }

    /// Keeps `bytes` with checkpoint `id` (a distributed run's bin
    /// assignment). Call before committing `id`; dropped with its record.
    pub(crate) fn put_cluster_meta(&self, id: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.cluster_tree()?
            .insert(id.to_be_bytes(), bytes)
            .map_err(|e| self.err(format!("cannot write checkpoint {id}'s assignment"), e))?;
        Ok(())
    }

    pub(crate) fn cluster_meta(&self, id: u64) -> Option<Vec<u8>> {
        self.cluster_tree()
            .ok()?
            .get(id.to_be_bytes())
            .ok()
            .flatten()
            .map(|v| v.to_vec())
    }

    fn cluster_tree(&self) -> Result<sled::Tree, StoreError> {
        self.db
            .open_tree("cluster")
            .map_err(|e| self.err("cannot open the assignment list", e))
    }

    /// Forgets every checkpoint and all state: the next run starts over.
    pub(crate) fn reset(&self) -> Result<(), StoreError> {
        for name in self.db.tree_names() {
            if name.starts_with(b"op:") {
                self.db
                    .drop_tree(&name)
                    .map_err(|e| self.err("cannot drop old state", e))?;
            }
        }
        self.checkpoints
            .clear()
            .map_err(|e| self.err("cannot drop old checkpoints", e))?;
        self.cluster_tree()?
            .clear()
            .map_err(|e| self.err("cannot drop old assignments", e))?;
        self.db.flush().map_err(|e| self.err("cannot flush", e))?;
        self.chunks.clear().map_err(StoreError)?;
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    fn verify_chunks(&self, record: &CheckpointRecord) -> Result<(), String> {
        for op in &record.operators {
            let tree = self.tree(&op.id).map_err(|e| e.0)?;
            for b in &op.bins {
                for c in 0..b.chunks {
                    match tree.get(chunk_key(b.bin, b.version, c)) {
                        Ok(Some(v)) => self
                            .chunk_bytes(&v)
                            .and_then(|bytes| verify(&bytes).map(|_| ()))
                            .map_err(|e| {
                                format!("operator {} bin {} chunk {c}: {e}", op.id, b.bin)
                            })?,
                        Ok(None) => {
                            return Err(format!(
                                "operator {} bin {} chunk {c} is missing",
                                op.id, b.bin
                            ));
                        }
                        Err(e) => return Err(format!("operator {} bin {}: {e}", op.id, b.bin)),
                    }
                }
            }
        }
        Ok(())
    }

    /// The newest committed checkpoint.
    /// The id of the newest committed checkpoint (0 for none).
    pub(crate) fn latest_id(&self) -> u64 {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, |r| r.id)
    }

    /// One bin's record in the newest committed checkpoint.
    pub(crate) fn committed_bin(&self, op: &str, bin: u32) -> Option<BinRecord> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest
            .as_ref()?
            .operator(op)?
            .bins
            .iter()
            .find(|b| b.bin == bin)
            .copied()
    }

    /// Makes `record` the base that the next checkpoint builds on in place
    /// of the newest committed one: `record` is that one without what the
    /// running pipeline cannot use (see `exec::start`).
    pub(crate) fn rebase(&self, record: CheckpointRecord) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(record);
    }

    pub(crate) fn latest(&self) -> Option<CheckpointRecord> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The raw chunks of one bin as recorded, one at a time (for export:
    /// memory is bounded by one chunk).
    pub(crate) fn raw_chunks<'a>(
        &'a self,
        op: &str,
        bin: &BinRecord,
    ) -> impl Iterator<Item = Result<Vec<u8>, StoreError>> + 'a {
        let tree = self.tree(op);
        let (bin, op) = (*bin, op.to_string());
        (0..bin.chunks).map(move |c| {
            let tree = tree.as_ref().map_err(|e| e.clone())?;
            match tree.get(chunk_key(bin.bin, bin.version, c)) {
                Ok(Some(v)) => self
                    .chunk_bytes(&v)
                    .map_err(|e| self.err(format!("operator {op} bin {} chunk {c}", bin.bin), e)),
                Ok(None) => Err(self.err(
                    format!("operator {op} bin {} chunk {c}", bin.bin),
                    "missing",
                )),
                Err(e) => Err(self.err(format!("operator {op} bin {}", bin.bin), e)),
            }
        })
    }

    /// One bin's state as recorded, chunk by chunk.
    pub(crate) fn read_bin<'a>(
        &'a self,
        op: &'a str,
        bin: &BinRecord,
    ) -> impl Iterator<Item = Result<Chunk, StoreError>> + 'a {
        self.decoded_chunks(op, bin, decode_chunk)
    }

    /// One bin's state as recorded, chunk by chunk, each in one buffer.
    pub(crate) fn read_bin_entries<'a>(
        &'a self,
        op: &'a str,
        bin: &BinRecord,
    ) -> impl Iterator<Item = Result<BinEntries, StoreError>> + 'a {
        self.decoded_chunks(op, bin, decode_chunk_entries)
    }

    fn decoded_chunks<'a, T: 'a>(
        &'a self,
        op: &'a str,
        bin: &BinRecord,
        decode: fn(&[u8]) -> Result<T, String>,
    ) -> impl Iterator<Item = Result<T, StoreError>> + 'a {
        let b = bin.bin;
        self.raw_chunks(op, bin).map(move |raw| {
            raw.and_then(|bytes| {
                decode(&bytes).map_err(|e| self.err(format!("operator {op} bin {b}"), e))
            })
        })
    }

    /// A new version number, above every version in the store.
    fn allocate(&self) -> u64 {
        self.next_version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }

    /// A new version of `bin`, claimed as pending before any of its chunks
    /// is written, under one lock with the allocation, so garbage
    /// collection never sees its chunks unclaimed. Until [`release`]d,
    /// collection keeps them.
    ///
    /// [`release`]: Self::release
    fn claim(&self, op: &str, bin: u32) -> u64 {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let version = self.allocate();
        pending.insert((op.to_string(), bin, version));
        version
    }

    /// Writes `entries` as the chunks of version `version` of `bin`: their
    /// bytes to the chunk log, where they are to sled in one batch.
    /// Returns the bin's record; on failure nothing of it is left.
    fn write_bin(
        &self,
        op: &str,
        bin: u32,
        version: u64,
        entries: &BinEntries,
    ) -> Result<BinRecord, StoreError> {
        let mut rec = BinRecord {
            bin,
            version,
            ..Default::default()
        };
        let mut locs = Vec::new();
        let mut batch = sled::Batch::default();
        let written = self
            .append_chunks(&mut rec, entries, &mut batch, &mut locs)
            .and_then(|()| {
                self.tree(op)
                    .map_err(|e| e.0)?
                    .apply_batch(batch)
                    .map_err(|e| format!("cannot write where its chunks are: {e}"))
            });
        if let Err(e) = written {
            for loc in locs {
                self.chunks.free(loc);
            }
            return Err(self.err(format!("operator {op}: cannot write bin {bin}"), e));
        }
        Ok(rec)
    }

    /// Appends `entries` to the chunk log in chunks of about
    /// `chunk_bytes`, with where each one is into `batch` (and `locs`, to
    /// free them if the bin cannot be written whole).
    fn append_chunks(
        &self,
        rec: &mut BinRecord,
        entries: &BinEntries,
        batch: &mut sled::Batch,
        locs: &mut Vec<Loc>,
    ) -> Result<(), String> {
        let mut entries = entries.iter().peekable();
        let mut chunk: Vec<(&[u8], &[u8])> = Vec::new();
        while entries.peek().is_some() {
            chunk.clear();
            let mut size = 0;
            for (k, v) in entries.by_ref() {
                size += Chunk::entry_size(k, v);
                chunk.push((k, v));
                if size >= self.chunk_bytes {
                    break;
                }
            }
            let bytes = encode_entries(&chunk);
            let loc = self.chunks.append(&bytes)?;
            locs.push(loc);
            batch.insert(&chunk_key(rec.bin, rec.version, rec.chunks), &loc.encode());
            rec.entries += chunk.len() as u64;
            rec.bytes += bytes.len() as u64;
            rec.chunks += 1;
        }
        Ok(())
    }

    /// Writes one bin's current state outside a checkpoint, so an operator
    /// can drop it from memory. It is durable only once a checkpoint adopts
    /// it ([`BinContent::Spilled`]); until then garbage collection keeps it.
    pub(crate) fn spill(
        &self,
        op: &str,
        bin: u32,
        entries: &BinEntries,
    ) -> Result<BinRecord, StoreError> {
        let version = self.claim(op, bin);
        self.write_bin(op, bin, version, entries)
    }

    /// A spilled version is superseded: garbage collection may drop it
    /// once no checkpoint refers to it.
    pub(crate) fn release(&self, op: &str, bin: u32, version: u64) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(op.to_string(), bin, version));
    }

    /// Commits checkpoint `id`: the bins in `writes` get their new state,
    /// the bins in `emptied` are dropped, every other bin keeps the
    /// version it had. Atomic: the chunks are flushed before the record
    /// that makes them part of a checkpoint.
    ///
    /// Each bin is written as a batch of its own and its entries dropped
    /// right after, so the encoded checkpoint is never in memory whole
    /// next to the snapshot. (Held at 100 k records/s over a million keys
    /// this did not move the daemon's peak RSS beyond run-to-run noise:
    /// the peak is the open state, not the commit.)
    pub(crate) fn commit(
        &self,
        record: CheckpointRecord,
        writes: Vec<BinWrite>,
        emptied: &[(String, u32)],
    ) -> Result<(CheckpointRecord, CommitStats), StoreError> {
        // The versions written here stay claimed until the record that
        // refers to them is written, or the commit failed and they are
        // garbage. Spilled versions it adopts stay claimed on failure: the
        // operator still counts on them.
        let (mut claimed, mut adopted) = (Vec::new(), Vec::new());
        let committed = self.commit_claiming(record, writes, emptied, &mut claimed, &mut adopted);
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for c in &claimed {
                pending.remove(c);
            }
            if committed.is_ok() {
                for a in &adopted {
                    pending.remove(a);
                }
            }
        }
        let committed = committed?;
        self.collect_garbage()?;
        Ok(committed)
    }

    fn commit_claiming(
        &self,
        mut record: CheckpointRecord,
        writes: Vec<BinWrite>,
        emptied: &[(String, u32)],
        claimed: &mut Vec<(String, u32, u64)>,
        adopted: &mut Vec<(String, u32, u64)>,
    ) -> Result<(CheckpointRecord, CommitStats), StoreError> {
        let previous = self.latest();
        // Carry over the bins nobody wrote.
        let mut ops: BTreeMap<String, BTreeMap<u32, BinRecord>> = BTreeMap::new();
        if let Some(prev) = &previous {
            for op in &prev.operators {
                ops.insert(op.id.clone(), op.bins.iter().map(|b| (b.bin, *b)).collect());
            }
        }
        for op in &record.operators {
            ops.entry(op.id.clone()).or_default();
        }
        for (op, bin) in emptied {
            ops.entry(op.clone()).or_default().remove(bin);
        }
        let mut stats = CommitStats::default();
        for w in writes {
            let bin = match w.content {
                BinContent::Entries(entries) => {
                    let version = self.claim(&w.op, w.bin);
                    claimed.push((w.op.clone(), w.bin, version));
                    let rec = self.write_bin(&w.op, w.bin, version, &entries)?;
                    drop(entries);
                    stats.bins += 1;
                    stats.entries += rec.entries;
                    stats.bytes += rec.bytes;
                    rec
                }
                BinContent::Spilled(rec) => {
                    adopted.push((w.op.clone(), rec.bin, rec.version));
                    rec
                }
            };
            let bins = ops.entry(w.op).or_default();
            if bin.entries == 0 {
                bins.remove(&bin.bin);
            } else {
                bins.insert(bin.bin, bin);
            }
        }
        // Chunks first: sled may have flushed where they are already, but
        // only the record makes them part of a checkpoint.
        self.chunks.sync().map_err(StoreError)?;
        self.db
            .flush()
            .map_err(|e| self.err("cannot flush the checkpoint's state", e))?;
        let watermarks: BTreeMap<String, i64> = record
            .operators
            .iter()
            .map(|o| (o.id.clone(), o.watermark))
            .collect();
        record.operators = ops
            .into_iter()
            .map(|(id, bins)| OperatorRecord {
                watermark: watermarks.get(&id).copied().unwrap_or(i64::MIN),
                id,
                bins: bins.into_values().collect(),
            })
            .collect();
        let bytes = seal(
            postcard::to_stdvec(&record)
                .map_err(|e| self.err("cannot encode the checkpoint record", e))?,
        );
        self.checkpoints
            .insert(record.id.to_be_bytes(), bytes)
            .map_err(|e| self.err(format!("cannot write checkpoint {}", record.id), e))?;
        self.db
            .flush()
            .map_err(|e| self.err(format!("cannot flush checkpoint {}", record.id), e))?;
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(record.clone());
        Ok((record, stats))
    }

    /// Installs a bin's state from exported chunks as a new checkpoint
    /// (the newest one with that bin replaced). Chunks are verified and
    /// written one at a time, under a version from the store's allocator
    /// (call [`restore_point`](Self::restore_point) first, which sets the
    /// base and moves the allocator above every version kept). On failure
    /// the chunks written are removed again: no checkpoint refers to them.
    pub(crate) fn import_bin(
        &self,
        op: &str,
        bin: u32,
        chunks: impl Iterator<Item = Vec<u8>>,
    ) -> Result<BinRecord, StoreError> {
        // Claimed until the record refers to it, as in `commit`.
        let version = self.claim(op, bin);
        let imported = self.import_claimed(op, bin, version, chunks);
        self.release(op, bin, version);
        let rec = imported?;
        self.collect_garbage()?;
        Ok(rec)
    }

    fn import_claimed(
        &self,
        op: &str,
        bin: u32,
        version: u64,
        chunks: impl Iterator<Item = Vec<u8>>,
    ) -> Result<BinRecord, StoreError> {
        let base = self.latest().unwrap_or_default();
        // Above every record, a damaged newer one included: never replace one.
        let id = self
            .records()
            .iter()
            .map(|(id, _, _)| *id)
            .max()
            .unwrap_or(0)
            .max(base.id)
            + 1;
        let tree = self.tree(op)?;
        let mut rec = BinRecord {
            bin,
            version,
            ..Default::default()
        };
        let mut locs = Vec::new();
        let written = (|| {
            for raw in chunks {
                let chunk = decode_chunk(&raw).map_err(|e| {
                    self.err(
                        format!("operator {op} bin {bin}: imported chunk {}", rec.chunks),
                        e,
                    )
                })?;
                rec.entries += chunk.entries.len() as u64;
                rec.bytes += raw.len() as u64;
                let cannot = |e| self.err(format!("operator {op}: cannot write bin {bin}"), e);
                let loc = self.chunks.append(&raw).map_err(cannot)?;
                locs.push(loc);
                tree.insert(chunk_key(bin, version, rec.chunks), &loc.encode())
                    .map_err(|e| cannot(e.to_string()))?;
                rec.chunks += 1;
            }
            self.chunks.sync().map_err(StoreError)?;
            self.db
                .flush()
                .map_err(|e| self.err("cannot flush an imported bin", e))
        })();
        if let Err(e) = written {
            let mut batch = sled::Batch::default();
            for c in 0..=rec.chunks {
                batch.remove(&chunk_key(bin, version, c));
            }
            let _ = tree.apply_batch(batch).and_then(|()| self.db.flush());
            for loc in locs {
                self.chunks.free(loc);
            }
            return Err(e);
        }
        let mut record = base.clone();
        record.id = id;
        record.time_ms = now_ms();
        let operator = match record.operators.iter_mut().find(|o| o.id == op) {
            Some(o) => o,
            None => {
                record.operators.push(OperatorRecord {
                    id: op.to_string(),
                    watermark: i64::MIN,
                    bins: Vec::new(),
                });
                record.operators.last_mut().expect("just pushed")
            }
        };
        operator.bins.retain(|b| b.bin != bin);
        if rec.entries > 0 {
            operator.bins.push(rec);
            operator.bins.sort_by_key(|b| b.bin);
        }
        let bytes = seal(
            postcard::to_stdvec(&record)
                .map_err(|e| self.err("cannot encode the checkpoint record", e))?,
        );
        self.checkpoints
            .insert(id.to_be_bytes(), bytes)
            .map_err(|e| self.err(format!("cannot write checkpoint {id}"), e))?;
        self.db
            .flush()
            .map_err(|e| self.err(format!("cannot flush checkpoint {id}"), e))?;
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(record);
        Ok(rec)
    }

    /// Drops checkpoint records beyond the newest [`RETAINED`], and every
    /// chunk no retained record refers to (including leftovers of a
    /// checkpoint that never completed).
    fn collect_garbage(&self) -> Result<(), StoreError> {
        let records = self.records();
        let mut referenced: BTreeMap<String, BTreeSet<(u32, u64)>> = BTreeMap::new();
        let mut kept = 0;
        for (id, record, _) in &records {
            if kept < RETAINED
                && let Ok(r) = record
            {
                kept += 1;
                for op in &r.operators {
                    let refs = referenced.entry(op.id.clone()).or_default();
                    refs.extend(op.bins.iter().map(|b| (b.bin, b.version)));
                }
                continue;
            }
            // Beyond the retained ones, or undecodable and older than a
            // good one: no restore will use it.
            if kept > 0 {
                self.checkpoints
                    .remove(id.to_be_bytes())
                    .map_err(|e| self.err(format!("cannot drop checkpoint {id}"), e))?;
            }
        }
        let cluster = self.cluster_tree()?;
        for key in cluster.iter().keys().flatten() {
            if !self.checkpoints.contains_key(&key).unwrap_or(true) {
                let _ = cluster.remove(key);
            }
        }
        // Held throughout: a spill claims its version before writing, so
        // every chunk seen here unclaimed is garbage.
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        // Versions a retained record names count even if their chunks are
        // gone (a damaged checkpoint): a new version must not revive them.
        let mut highest = referenced
            .values()
            .flat_map(|r| r.iter().map(|(_, v)| *v))
            .max()
            .unwrap_or(0);
        for name in self.db.tree_names() {
            let Some(op) = std::str::from_utf8(&name)
                .ok()
                .and_then(|n| n.strip_prefix("op:"))
            else {
                continue;
            };
            let refs = referenced.get(op);
            let tree = self.tree(op)?;
            let mut batch = sled::Batch::default();
            let mut dropped = Vec::new();
            for item in tree.iter() {
                let (key, value) =
                    item.map_err(|e| self.err(format!("operator {op}: cannot scan"), e))?;
                let parsed = parse_chunk_key(&key);
                let keep = parsed.is_some_and(|(bin, version, _)| {
                    refs.is_some_and(|r| r.contains(&(bin, version)))
                        || pending.contains(&(op.to_string(), bin, version))
                });
                if keep {
                    highest = highest.max(parsed.map_or(0, |(_, v, _)| v));
                } else {
                    batch.remove(key);
                    dropped.push(Loc::decode(&value));
                }
            }
            if !dropped.is_empty() {
                tree.apply_batch(batch)
                    .map_err(|e| self.err(format!("operator {op}: cannot drop old state"), e))?;
                for loc in dropped.into_iter().flatten() {
                    self.chunks.free(loc);
                }
            }
        }
        // New versions go above every one still kept.
        self.next_version
            .fetch_max(highest + 1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Flips bits of one chunk on disk, wherever it is.
    #[cfg(test)]
    pub(crate) fn damage_chunk(&self, op: &str, bin: u32, version: u64, chunk: u32, at: usize) {
        let key = chunk_key(bin, version, chunk);
        let value = self.tree(op).unwrap().get(key).unwrap().unwrap();
        self.chunks
            .damage(Loc::decode(&value).expect("in the chunk log"), at);
    }

    /// The store's size on disk.
    pub(crate) fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0) + self.chunks.size_on_disk()
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sled lets its file lock go a moment after its last handle drops:
    /// `eddy state import` and tests reopen a store at once.
    #[test]
    fn a_store_reopens_at_once_after_a_drop() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..100 {
            let store =
                Store::open(dir.path(), 1 << 20).unwrap_or_else(|e| panic!("open {i}: {e:?}"));
            drop(store);
        }
    }

    fn record(id: u64, ops: &[&str]) -> CheckpointRecord {
        CheckpointRecord {
            id,
            time_ms: now_ms(),
            bins: 256,
            completed: false,
            operators: ops
                .iter()
                .map(|o| OperatorRecord {
                    id: o.to_string(),
                    watermark: id as i64 * 10,
                    bins: Vec::new(),
                })
                .collect(),
            sources: vec![("src".into(), id.to_le_bytes().to_vec())],
            sinks: Vec::new(),
            signatures: Vec::new(),
        }
    }

    /// One encoded key and its encoded value, as a restore reads them.
    type Entry = (Vec<u8>, Vec<u8>);

    fn entries(bin: u32, n: usize, tag: u8) -> Vec<Entry> {
        (0..n)
            .map(|i| (format!("{bin}-{i}").into_bytes(), vec![tag; 20]))
            .collect()
    }

    /// Commits checkpoint `id` of operator `win` with one bin written.
    fn commit_bin(
        store: &Store,
        id: u64,
        bin: u32,
        entries: Vec<Entry>,
    ) -> (CheckpointRecord, CommitStats) {
        let write = BinWrite {
            op: "win".into(),
            bin,
            content: BinContent::Entries(entries.into_iter().collect()),
        };
        store
            .commit(record(id, &["win"]), vec![write], &[])
            .unwrap()
    }

    fn read_all(store: &Store, op: &str, rec: &CheckpointRecord) -> BTreeMap<u32, Vec<Entry>> {
        let mut out = BTreeMap::new();
        for b in &rec.operator(op).unwrap().bins {
            let e: Vec<_> = store
                .read_bin(op, b)
                .flat_map(|c| c.unwrap().entries)
                .collect();
            out.insert(b.bin, e);
        }
        out
    }

    #[test]
    fn unwritten_bins_carry_over_and_emptied_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 8 << 20).unwrap();
        let w = |bin, n, tag| BinWrite {
            op: "win".into(),
            bin,
            content: BinContent::Entries(entries(bin, n, tag).into_iter().collect()),
        };
        let (r1, stats) = store
            .commit(record(1, &["win"]), vec![w(0, 5, 1), w(7, 20_000, 1)], &[])
            .unwrap();
        assert_eq!(stats.entries, 20_005);
        assert!(
            r1.operator("win").unwrap().bins[1].chunks > 1,
            "a large bin spans several chunks"
        );
        let (r2, _) = store
            .commit(record(2, &["win"]), vec![w(3, 2, 2)], &[("win".into(), 0)])
            .unwrap();
        let bins: Vec<u32> = r2
            .operator("win")
            .unwrap()
            .bins
            .iter()
            .map(|b| b.bin)
            .collect();
        assert_eq!(bins, vec![3, 7]);
        let state = read_all(&store, "win", &r2);
        assert_eq!(state[&7], entries(7, 20_000, 1));
        assert_eq!(state[&3], entries(3, 2, 2));
        drop(store);

        // Reopened: the newest checkpoint is restored whole.
        let store = Store::open(dir.path(), 8 << 20).unwrap();
        let restored = store.restore_point().unwrap();
        assert!(restored.warnings.is_empty());
        let record = restored.record.unwrap();
        assert_eq!(record, r2);
        assert_eq!(record.source("src"), Some(&2u64.to_le_bytes()[..]));
    }

    #[test]
    fn a_damaged_newest_checkpoint_falls_back_to_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 8 << 20).unwrap();
        let (r1, _) = commit_bin(&store, 1, 1, entries(1, 10, 1));
        let (r2, _) = commit_bin(&store, 2, 1, entries(1, 10, 2));
        // Flip a byte of checkpoint 2's chunk, as a failing disk would.
        store.damage_chunk("win", 1, 2, 0, 3);
        drop(store);
        let store = Store::open(dir.path(), 8 << 20).unwrap();
        let restored = store.restore_point().unwrap();
        let record = restored.record.unwrap();
        assert_eq!(record, r1);
        assert!(
            restored.warnings[0].contains("checkpoint 2")
                && restored.warnings[0].contains("checksum mismatch"),
            "{:?}",
            restored.warnings
        );
        assert_eq!(read_all(&store, "win", &record)[&1], entries(1, 10, 1));
        let _ = r2;
    }

    #[test]
    fn only_the_newest_two_checkpoints_and_their_chunks_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 8 << 20).unwrap();
        for id in 1..=5u64 {
            commit_bin(&store, id, (id % 2) as u32, entries(0, 3, id as u8));
        }
        let ids: Vec<u64> = store.records().iter().map(|(id, _, _)| *id).collect();
        assert_eq!(ids, vec![5, 4]);
        let versions: BTreeSet<u64> = store
            .tree("win")
            .unwrap()
            .iter()
            .keys()
            .map(|k| parse_chunk_key(&k.unwrap()).unwrap().1)
            .collect();
        // Checkpoint 5: bin 1 at v5, bin 0 at v4; checkpoint 4: bin 0 at v4,
        // bin 1 at v3. Versions 1 and 2 are unreferenced and gone.
        assert_eq!(versions, BTreeSet::from([3, 4, 5]));
    }

    #[test]
    fn uncommitted_leftovers_are_dropped_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 8 << 20).unwrap();
        commit_bin(&store, 1, 1, entries(1, 3, 1));
        // A crash after writing checkpoint 2's chunks, before its record.
        store
            .tree("win")
            .unwrap()
            .insert(chunk_key(1, 2, 0), Chunk::default().encode())
            .unwrap();
        drop(store);
        let store = Store::open(dir.path(), 8 << 20).unwrap();
        assert_eq!(store.restore_point().unwrap().record.unwrap().id, 1);
        assert!(
            store
                .tree("win")
                .unwrap()
                .get(chunk_key(1, 2, 0))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_bin_exported_from_one_store_imports_into_another() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let src = Store::open(a.path(), 8 << 20).unwrap();
        let (rec, _) = commit_bin(&src, 1, 9, entries(9, 30_000, 7));
        let bin = rec.operator("win").unwrap().bins[0];
        let dst = Store::open(b.path(), 8 << 20).unwrap();
        let imported = dst
            .import_bin("win", 9, src.raw_chunks("win", &bin).map(Result::unwrap))
            .unwrap();
        assert_eq!(
            (imported.entries, imported.chunks),
            (bin.entries, bin.chunks)
        );
        let got: Vec<_> = dst
            .read_bin("win", &imported)
            .flat_map(|c| c.unwrap().entries)
            .collect();
        assert_eq!(got, entries(9, 30_000, 7));
    }

    /// sled keeps its values in memory: it holds only where chunks are.
    #[test]
    fn chunks_are_in_the_chunk_log_and_sled_holds_where() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let (r1, stats) = commit_bin(&store, 1, 4, entries(4, 50_000, 3));
        let spilled = store
            .spill("win", 5, &entries(5, 1000, 4).into_iter().collect())
            .unwrap();
        let in_sled: usize = store
            .tree("win")
            .unwrap()
            .iter()
            .values()
            .map(|v| {
                let v = v.unwrap();
                assert!(Loc::decode(&v).is_some(), "a chunk inline in sled");
                v.len()
            })
            .sum();
        let chunks = r1.operator("win").unwrap().bins[0].chunks + spilled.chunks;
        assert_eq!(in_sled, chunks as usize * 20);
        assert!(store.chunks.size_on_disk() >= stats.bytes);
        assert_eq!(read_all(&store, "win", &r1)[&4], entries(4, 50_000, 3));
    }

    /// Data dirs of earlier versions hold chunks in sled: they restore,
    /// and their chunks go like any other once superseded.
    #[test]
    fn chunks_stored_inline_by_earlier_versions_still_restore() {
        let dir = tempfile::tempdir().unwrap();
        let mut r1 = record(1, &["win"]);
        let chunk = Chunk {
            entries: entries(6, 10, 1),
        }
        .encode();
        r1.operators[0].bins.push(BinRecord {
            bin: 6,
            version: 1,
            chunks: 1,
            entries: 10,
            bytes: chunk.len() as u64,
        });
        {
            let db = sled::open(dir.path().join("state")).unwrap();
            db.open_tree("op:win")
                .unwrap()
                .insert(chunk_key(6, 1, 0), chunk)
                .unwrap();
            let bytes = seal(postcard::to_stdvec(&r1).unwrap());
            db.open_tree("checkpoints")
                .unwrap()
                .insert(1u64.to_be_bytes(), bytes)
                .unwrap();
            db.flush().unwrap();
        }
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let restored = store.restore_point().unwrap();
        assert!(restored.warnings.is_empty(), "{:?}", restored.warnings);
        assert_eq!(restored.record.as_ref(), Some(&r1));
        assert_eq!(read_all(&store, "win", &r1)[&6], entries(6, 10, 1));
        // Superseded twice (two checkpoints are kept): the inline chunk goes.
        for id in 2..=3 {
            commit_bin(&store, id, 6, entries(6, 10, 2));
        }
        let tree = store.tree("win").unwrap();
        assert!(tree.get(chunk_key(6, 1, 0)).unwrap().is_none());
        assert!(
            tree.iter()
                .values()
                .all(|v| Loc::decode(&v.unwrap()).is_some())
        );
    }

    /// A crash after a spill and before the checkpoint that would adopt
    /// it: the spilled chunks are garbage on restart, and their space is
    /// given back.
    #[test]
    fn spilled_chunks_no_checkpoint_adopted_are_freed_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        commit_bin(&store, 1, 1, entries(1, 10, 1));
        let before = store.chunks.size_on_disk();
        let spilled = store
            .spill("win", 2, &entries(2, 100_000, 2).into_iter().collect())
            .unwrap();
        store.chunks.sync().unwrap();
        assert!(store.chunks.size_on_disk() > before + (1 << 20));
        drop(store);
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.restore_point().unwrap().record.unwrap().id, 1);
        let tree = store.tree("win").unwrap();
        assert!(
            tree.get(chunk_key(2, spilled.version, 0))
                .unwrap()
                .is_none()
        );
        let after = store.chunks.size_on_disk();
        assert!(after <= before + (64 << 10), "{before} -> {after} bytes");
    }
}
