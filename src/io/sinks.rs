//! The sink operators: record latency, encode, hand bytes to a writer.

use std::sync::Arc;
use std::time::Instant;

use super::codec::{Encoder, Format};
use super::writer::{SinkWriter, WriterMsg};
use crate::data::Batch;
use crate::exec::checkpoint::{FINAL, Snapshot};
use crate::exec::clock::now_ns;
use crate::exec::metrics::Latency;
use crate::exec::operator::{OpCtx, Operator};

/// `stdout` and `file` sinks on one worker.
pub(crate) struct WriterSink {
    encoder: Encoder,
    writer: SinkWriter,
    latency: Arc<Latency>,
}

impl WriterSink {
    pub(crate) fn new(format: Format, writer: SinkWriter, latency: Arc<Latency>) -> WriterSink {
        WriterSink {
            encoder: Encoder::new(format),
            writer,
            latency,
        }
    }
}

impl Operator for WriterSink {
    fn on_batch(&mut self, _port: usize, batch: Batch, ctx: &mut OpCtx<'_>) {
        self.latency.record_batch(batch.ingest_ns(), now_ns());
        let mut bytes = Vec::with_capacity(batch.len() * 64);
        self.encoder.encode(&batch, &mut bytes);
        let waited = Instant::now();
        // The writer thread only ends on a write error, which it reports.
        let _ = self.writer.send(WriterMsg::Data(bytes));
        ctx.blocked_ns += waited.elapsed().as_nanos() as u64;
    }

    fn on_end(&mut self, _ctx: &mut OpCtx<'_>) {
        let _ = self.writer.send(WriterMsg::Ended);
    }

    fn snapshot(&mut self, checkpoint: u64) -> Snapshot {
        // After `on_end` the writer already knows this instance is done.
        if checkpoint != FINAL {
            let _ = self.writer.send(WriterMsg::Seal(checkpoint));
        }
        Snapshot::default()
    }
}

/// A function that sees every batch reaching a sink (benchmarks use it to
/// verify totals without writing anything).
pub(crate) type Tap = Arc<dyn Fn(&Batch) + Send + Sync>;

/// `blackhole`: counts and measures, writes nothing.
pub(crate) struct BlackholeSink {
    latency: Arc<Latency>,
    tap: Option<Tap>,
}

impl BlackholeSink {
    pub(crate) fn new(latency: Arc<Latency>, tap: Option<Tap>) -> BlackholeSink {
        BlackholeSink { latency, tap }
    }
}

impl Operator for BlackholeSink {
    fn on_batch(&mut self, _port: usize, batch: Batch, _ctx: &mut OpCtx<'_>) {
        self.latency.record_batch(batch.ingest_ns(), now_ns());
        if let Some(tap) = &self.tap {
            tap(&batch);
        }
    }
}
