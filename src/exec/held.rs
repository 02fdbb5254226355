//! Records of bins whose state is still on its way to this worker (live
//! migration), held per (node, bin) in arrival order until the state is
//! installed. Up to `[migration] hold_memory` bytes per worker stay in
//! memory; past it, batches go to a temporary sled store under the data
//! directory, so a move that takes long at a high rate (a slow link, a
//! large bin) cannot run the node out of memory. Nothing is refused: the
//! state travels on the same channels as these records, so refusing them
//! would stall the move that would release them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::data::{Batch, SchemaRef, wire};

/// Ingestion times go to disk as ages against this one instant and come
/// back against it: exact, and independent of the time spent on disk, so
/// held records still show their whole wait as latency.
const AGE_ORIGIN: u64 = u64::MAX;

/// One held batch, in memory or on disk ([`HeldRecords::load`] gives it
/// back).
pub(crate) enum Held {
    Memory {
        port: usize,
        batch: Batch,
    },
    Disk {
        port: usize,
        seq: u64,
        rows: usize,
        schema: SchemaRef,
    },
}

/// One worker's held records.
pub(crate) struct HeldRecords {
    bins: HashMap<(usize, u32), Vec<Held>>,
    /// Rows held, in memory and on disk.
    rows: usize,
    /// Bytes held in memory ([`Batch::heap_bytes`]).
    memory: usize,
    limit: usize,
    /// Where the spill store goes when first needed.
    dir: PathBuf,
    spill: Option<sled::Db>,
    next_seq: u64,
    /// Whether opening or writing the spill store failed (then records
    /// stay in memory, with one warning).
    spill_failed: bool,
    /// Rows ever spilled by this node's workers (`/metrics`).
    spilled: Arc<AtomicU64>,
    worker: usize,
}

impl HeldRecords {
    /// `worker` (global id) holds up to `limit` bytes in memory, then
    /// spills under `data_dir/held/`.
    pub(crate) fn new(
        worker: usize,
        limit: u64,
        data_dir: &Path,
        spilled: Arc<AtomicU64>,
    ) -> HeldRecords {
        HeldRecords {
            bins: HashMap::new(),
            rows: 0,
            memory: 0,
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            dir: data_dir
                .join("held")
                .join(format!("{}-w{worker}", std::process::id())),
            spill: None,
            next_seq: 0,
            spill_failed: false,
            spilled,
            worker,
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Holds `batch` (rows of `bin` only) for exchange input `(node, port)`,
    /// after whatever is held for the bin already.
    pub(crate) fn hold(&mut self, node: usize, bin: u32, port: usize, batch: Batch) {
        self.rows += batch.len();
        let bytes = batch.heap_bytes();
        let held = if self.memory + bytes > self.limit {
            self.spill_batch(port, &batch)
        } else {
            None
        };
        let held = held.unwrap_or_else(|| {
            self.memory += bytes;
            Held::Memory { port, batch }
        });
        self.bins.entry((node, bin)).or_default().push(held);
    }

    /// What is held for `(node, bin)`, in arrival order; each is loaded
    /// back with [`HeldRecords::load`] when it is applied, so a bin's
    /// spilled records never come back into memory all at once.
    pub(crate) fn take(&mut self, node: usize, bin: u32) -> Vec<Held> {
        self.bins.remove(&(node, bin)).unwrap_or_default()
    }

    /// A taken batch as `(port, batch)`; an error if one on disk cannot be
    /// read back (the run must fail: those records cannot be applied).
    pub(crate) fn load(&mut self, held: Held) -> Result<(usize, Batch), String> {
        match held {
            Held::Memory { port, batch } => {
                self.rows -= batch.len();
                self.memory -= batch.heap_bytes();
                Ok((port, batch))
            }
            Held::Disk {
                port,
                seq,
                rows,
                schema,
            } => {
                self.rows -= rows;
                Ok((port, self.read_spilled(seq, &schema)?))
            }
        }
    }

    /// Writes `batch` to the spill store; `None` (keep it in memory) if
    /// the store cannot be opened or written.
    fn spill_batch(&mut self, port: usize, batch: &Batch) -> Option<Held> {
        if self.spill_failed {
            return None;
        }
        let seq = self.next_seq;
        let written = self.open().and_then(|db| {
            let mut bytes = Vec::new();
            wire::encode(batch, AGE_ORIGIN, &mut bytes);
            db.insert(seq.to_be_bytes(), bytes)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            self.spill_failed = true;
            tracing::warn!(
                "worker {}: cannot spill held records to {}: {e}; they stay in memory",
                self.worker,
                self.dir.display()
            );
            return None;
        }
        if self.spilled.fetch_add(batch.len() as u64, Relaxed) == 0 {
            tracing::info!(
                "worker {}: records held for bins still moving here passed `hold_memory` ({} bytes); spilling them to {}",
                self.worker,
                self.limit,
                self.dir.display()
            );
        }
        self.next_seq += 1;
        Some(Held::Disk {
            port,
            seq,
            rows: batch.len(),
            schema: batch.schema().clone(),
        })
    }

    fn open(&mut self) -> Result<&sled::Db, String> {
        if self.spill.is_none() {
            // A crashed run's spill is of no use: its moves fall back to
            // the last checkpoint.
            let _ = std::fs::remove_dir_all(&self.dir);
            let db = sled::Config::new()
                .path(&self.dir)
                .temporary(true)
                .cache_capacity(1 << 20)
                .flush_every_ms(None)
                .open()
                .map_err(|e| e.to_string())?;
            self.spill = Some(db);
        }
        Ok(self.spill.as_ref().expect("opened above"))
    }

    fn read_spilled(&mut self, seq: u64, schema: &SchemaRef) -> Result<Batch, String> {
        let place = || format!("held record batch {seq} in {}", self.dir.display());
        let db = self
            .spill
            .as_ref()
            .ok_or_else(|| format!("{}: the spill store is gone", place()))?;
        let bytes = db
            .remove(seq.to_be_bytes())
            .map_err(|e| format!("{}: {e}", place()))?
            .ok_or_else(|| format!("{}: missing", place()))?;
        wire::decode(&bytes, schema, AGE_ORIGIN).map_err(|e| format!("{}: {e}", place()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{BatchBuilder, DataType, Field, Schema};

    fn batch(schema: &SchemaRef, first: i64, n: i64) -> Batch {
        let mut b = BatchBuilder::new(schema.clone(), n as usize, true);
        for i in first..first + n {
            b.column_mut(0).push_int(i);
            b.column_mut(1).push_str(&format!("row {i}"));
            b.finish_row(i * 10, 1_000 + i as u64);
        }
        let mut batch = b.take();
        batch.set_key_hash((0..n as u64).map(|h| h * 7).collect());
        batch
    }

    fn release(held: &mut HeldRecords, node: usize, bin: u32) -> Vec<(usize, Batch)> {
        let taken = held.take(node, bin);
        taken.into_iter().map(|h| held.load(h).unwrap()).collect()
    }

    fn same(a: &Batch, b: &Batch) {
        assert_eq!(a.len(), b.len());
        assert_eq!(a.event_time(), b.event_time());
        assert_eq!(a.ingest_ns(), b.ingest_ns());
        assert_eq!(a.key_hash(), b.key_hash());
        for c in 0..a.columns().len() {
            assert_eq!(a.column(c), b.column(c));
        }
    }

    #[test]
    fn past_the_limit_batches_spill_and_come_back_in_order_and_intact() {
        let dir = tempfile::tempdir().unwrap();
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int),
            Field::new("s", DataType::Str),
        ]));
        let spilled = Arc::new(AtomicU64::new(0));
        // The largest batch below; room for two in memory.
        let one = batch(&schema, 900, 100).heap_bytes();
        let mut held = HeldRecords::new(3, 2 * one as u64, dir.path(), spilled.clone());
        let mut sent: HashMap<u32, Vec<(usize, Batch)>> = HashMap::new();
        for i in 0..10 {
            let bin = (i % 2) as u32;
            let b = batch(&schema, i * 100, 100);
            sent.entry(bin)
                .or_default()
                .push((i as usize % 3, b.clone()));
            held.hold(0, bin, i as usize % 3, b);
        }
        assert_eq!(held.rows(), 1000);
        assert!(held.memory <= 2 * one, "{} in memory", held.memory);
        assert_eq!(spilled.load(Relaxed), 800, "eight batches on disk");
        let store = dir.path().join("held");
        assert!(store.exists(), "the spill is under the data dir");
        for bin in [1, 0] {
            let back = release(&mut held, 0, bin);
            let want = &sent[&bin];
            assert_eq!(back.len(), want.len());
            for ((p, b), (wp, wb)) in back.iter().zip(want) {
                assert_eq!(p, wp);
                same(b, wb);
            }
        }
        assert_eq!((held.rows(), held.memory), (0, 0));
        assert!(release(&mut held, 0, 0).is_empty());
        drop(held);
        // sled removes a temporary store when its last handle goes, and
        // its IO threads (a log write, a file truncation) may hold one for
        // a moment after the worker let go.
        let gone = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_dir(&store).unwrap().count() > 0 && std::time::Instant::now() < gone {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            std::fs::read_dir(&store).unwrap().count(),
            0,
            "the spill store goes with the worker"
        );
    }

    #[test]
    fn a_spill_that_cannot_be_written_keeps_records_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the spill directory would go.
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, b"x").unwrap();
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int),
            Field::new("s", DataType::Str),
        ]));
        let mut held = HeldRecords::new(0, 0, &blocked, Arc::new(AtomicU64::new(0)));
        let b = batch(&schema, 0, 10);
        held.hold(1, 5, 0, b.clone());
        held.hold(1, 5, 0, b.clone());
        let back = release(&mut held, 1, 5);
        assert_eq!(back.len(), 2);
        same(&back[1].1, &b);
    }
}
