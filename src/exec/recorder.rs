//! A recent sample of a source's records, kept so the tuner's profiling
//! runs can replay the pipeline's own input (Demeter replays recorded
//! input; a generator's stream says nothing about real keys and values).
//! Whole batches are taken, at most [`BATCHES_PER_SECOND`] per source and
//! worker, encoded as JSON lines, and the oldest dropped beyond a byte
//! budget: the cost on the data path is one clock read per batch between
//! samples, and memory is bounded whatever the rate.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::data::{Batch, SchemaRef};
use crate::io::codec::{Encoder, Format};

/// Batches sampled per second, at most, by each worker of a source.
const BATCHES_PER_SECOND: u64 = 20;

pub(crate) struct Recorder {
    schema: SchemaRef,
    budget_bytes: usize,
    /// Per worker: when its next batch may be taken (ns, `clock::now_ns`).
    next_ns: Vec<AtomicU64>,
    kept: Mutex<Kept>,
}

struct Kept {
    encoder: Encoder,
    /// Encoded batches, oldest first.
    chunks: VecDeque<Vec<u8>>,
    bytes: usize,
}

/// What a recorder holds: the schema and JSON lines, oldest first.
pub(crate) struct Recording {
    pub(crate) schema: SchemaRef,
    pub(crate) lines: Vec<u8>,
}

impl Recorder {
    pub(crate) fn new(schema: SchemaRef, workers: usize, budget_bytes: usize) -> Recorder {
        Recorder {
            schema,
            budget_bytes,
            next_ns: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            kept: Mutex::new(Kept {
                encoder: Encoder::new(Format::Json),
                chunks: VecDeque::new(),
                bytes: 0,
            }),
        }
    }

    /// Keeps `batch` from local worker `worker` if its turn has come.
    pub(crate) fn offer(&self, worker: usize, batch: &Batch, now_ns: u64) {
        let Some(next) = self.next_ns.get(worker) else {
            return;
        };
        if now_ns < next.load(Relaxed) || batch.is_empty() {
            return;
        }
        next.store(now_ns + 1_000_000_000 / BATCHES_PER_SECOND, Relaxed);
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let mut chunk = Vec::new();
        kept.encoder.encode(batch, &mut chunk);
        kept.bytes += chunk.len();
        kept.chunks.push_back(chunk);
        while kept.bytes > self.budget_bytes && kept.chunks.len() > 1 {
            let old = kept.chunks.pop_front().expect("more than one");
            kept.bytes -= old.len();
        }
    }

    pub(crate) fn recording(&self) -> Recording {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = Vec::with_capacity(kept.bytes);
        kept.chunks.iter().for_each(|c| lines.extend_from_slice(c));
        Recording {
            schema: self.schema.clone(),
            lines,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{BatchBuilder, DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(schema: &SchemaRef, from: i64, n: i64) -> Batch {
        let mut b = BatchBuilder::new(schema.clone(), n as usize, false);
        for i in from..from + n {
            b.column_mut(0).push_int(i);
            b.finish_row(0, 0);
        }
        b.take()
    }

    #[test]
    fn samples_batches_at_a_bounded_pace_and_keeps_the_newest_within_budget() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("v", DataType::Int)]));
        let r = Recorder::new(schema.clone(), 2, 40);
        r.offer(0, &batch(&schema, 0, 2), 1);
        // Too soon after the last one on worker 0; worker 1 has its own turn.
        r.offer(0, &batch(&schema, 100, 2), 2);
        r.offer(1, &batch(&schema, 200, 2), 2);
        assert_eq!(
            String::from_utf8(r.recording().lines).unwrap(),
            "{\"v\":0}\n{\"v\":1}\n{\"v\":200}\n{\"v\":201}\n"
        );
        // Over 40 bytes: the oldest batch goes.
        r.offer(0, &batch(&schema, 300, 2), 1_000_000_000);
        assert_eq!(
            String::from_utf8(r.recording().lines).unwrap(),
            "{\"v\":200}\n{\"v\":201}\n{\"v\":300}\n{\"v\":301}\n"
        );
    }
}
