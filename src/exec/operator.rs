//! The interface between the worker loop and the code of one operator.

use std::sync::atomic::AtomicU64;

use super::checkpoint::Snapshot;
use super::metrics::OpMetrics;
use crate::data::Batch;
use crate::io::dead_letter::DeadLetter;

pub(crate) use crate::state::BinEntries;

/// One instance of a transform or sink on one worker.
///
/// The worker calls these methods; none of them may block on IO (sinks hand
/// their bytes to a writer thread) and none may panic on bad data (bad
/// records go to [`OpCtx::dead_letter`]).
pub(crate) trait Operator: Send {
    /// A batch arrived on input `port`.
    fn on_batch(&mut self, port: usize, batch: Batch, ctx: &mut OpCtx<'_>);

    /// The minimum watermark over all inputs advanced to `watermark`. Called
    /// with `WATERMARK_END` once every input has ended.
    fn on_watermark(&mut self, _watermark: i64, _ctx: &mut OpCtx<'_>) {}

    /// Every input has ended (after the final watermark); flush.
    fn on_end(&mut self, _ctx: &mut OpCtx<'_>) {}

    /// Barrier `checkpoint` has arrived on every input (or `FINAL`, after
    /// `on_end`): returns the full state of every bin changed since the
    /// last snapshot. Exactly-once sinks seal what belongs to the
    /// checkpoint here. Stateless operators keep the default.
    fn snapshot(&mut self, _checkpoint: u64) -> Snapshot {
        Snapshot::default()
    }

    /// Before any input: installs one bin's state from a checkpoint. An
    /// error says why the state does not fit this operator (a changed
    /// config).
    fn restore(&mut self, _bin: u32, _entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        Ok(())
    }

    /// Before any input: the watermark the operator had at the checkpoint.
    fn restore_watermark(&mut self, _watermark: i64) {}

    /// While running (a live migration): removes the whole state of each
    /// of `bins` (open windows, pending timers) and returns it, per bin
    /// in the order asked, as [`Operator::install_bin`] takes it (the
    /// same entries [`Operator::restore`] takes as pairs). One call for many bins, so that
    /// operators whose state spans bins scan it once. Stateless operators
    /// keep the default.
    fn export_bins(&mut self, bins: &[u32]) -> Result<Vec<BinEntries>, String> {
        Ok(bins.iter().map(|_| BinEntries::new()).collect())
    }

    /// While running: installs a bin another instance exported. What is
    /// already due at this instance's watermark (windows whose end it
    /// passed, timers) happens now, through `ctx`; what the exporter had
    /// already emitted is not emitted again.
    fn install_bin(
        &mut self,
        bin: u32,
        entries: BinEntries,
        ctx: &mut OpCtx<'_>,
    ) -> Result<(), String> {
        self.restore(bin, entries.to_pairs())?;
        self.installed(bin, ctx);
        Ok(())
    }

    /// After the default [`Operator::install_bin`] restored `bin`: what
    /// is due at this instance's watermark (operators whose `restore`
    /// schedules the bin's timers fire them here).
    fn installed(&mut self, _bin: u32, _ctx: &mut OpCtx<'_>) {}
}

/// Batches an operator call holds before they go downstream in the middle
/// of the call: a window firing 600k keys would otherwise build every
/// result row (~45 MB) before the first one leaves.
pub(crate) const FORWARD_AT: usize = 8;

/// Sends an operator's collected output downstream, leaving the buffer
/// empty.
pub(crate) type Forward<'a> = &'a mut dyn FnMut(&mut Vec<(usize, Batch)>);

/// What an operator may do while it runs.
pub(crate) struct OpCtx<'a> {
    pub(crate) out: &'a mut Vec<(usize, Batch)>,
    /// Where `out` goes once it holds [`FORWARD_AT`] batches (`None`: it
    /// all goes when the call returns).
    pub(crate) forward: Option<Forward<'a>>,
    pub(crate) component: &'a str,
    pub(crate) metrics: &'a OpMetrics,
    pub(crate) dead_letter: &'a DeadLetter,
    /// Time the operator spent waiting (on a writer), not working.
    pub(crate) blocked_ns: u64,
    /// Set when the operator cannot go on (its state cannot be read): the
    /// run fails with this message.
    pub(crate) failure: Option<String>,
}

impl OpCtx<'_> {
    /// Emits a batch on the main output.
    #[inline]
    pub(crate) fn emit(&mut self, batch: Batch) {
        self.emit_to(0, batch);
    }

    /// Emits a batch on output `port` (1: late records).
    #[inline]
    pub(crate) fn emit_to(&mut self, port: usize, batch: Batch) {
        if batch.is_empty() {
            return;
        }
        self.out.push((port, batch));
        if self.out.len() >= FORWARD_AT
            && let Some(forward) = self.forward.as_mut()
        {
            forward(self.out);
        }
    }

    /// Sends row `row` of `batch` to the dead-letter output with `reason`.
    pub(crate) fn dead_letter(&self, batch: &Batch, row: usize, reason: &str) {
        OpMetrics::add(&self.metrics.errors, 1);
        self.dead_letter
            .record_row(self.component, batch, row, reason);
    }

    /// Ends the run with `message` (after this call returns).
    pub(crate) fn fail(&mut self, message: String) {
        self.failure.get_or_insert(message);
    }

    pub(crate) fn count(&self, counter: &AtomicU64, n: u64) {
        OpMetrics::add(counter, n);
    }
}

/// What a source task produced when polled.
pub(crate) enum SourcePoll {
    Batch(Batch),
    /// Nothing now; poll again at the given time (or when woken).
    Pending(Option<std::time::Instant>),
    Ended,
}

/// One instance of a source on one worker.
pub(crate) trait SourceTask: Send {
    /// Produces the next batch if one is ready. `stop` asks the source to
    /// end (SIGINT/SIGTERM).
    fn poll(&mut self, stop: bool) -> SourcePoll;

    /// Where the source is: everything it produced so far, as
    /// `(split, position)` pairs that a restarted source resumes from.
    /// Empty for sources that cannot be replayed.
    fn position(&self) -> Vec<(u32, Vec<u8>)> {
        Vec::new()
    }
}
