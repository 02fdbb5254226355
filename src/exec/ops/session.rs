//! `window` with session windows: per key, events closer than `gap` form
//! one session; a session fires when the watermark passes its last event
//! plus the gap. Sessions that come to touch are merged, as in Flink.

use std::sync::Arc;

use hashbrown::HashMap;

use super::dirty::{DirtyBins, SnapshotBins};
use super::timers::KeyTimers;
use super::window_state::{AccState, Aggregates};
use crate::config::WindowKind;
use crate::data::{Batch, BatchBuilder};
use crate::exec::checkpoint::Snapshot;
use crate::exec::operator::{OpCtx, Operator};
use crate::kernel::hash::bin_of;
use crate::kernel::window::{Window as Span, session_window};
use crate::plan::WindowPlan;

pub(crate) struct SessionWindow {
    plan: Arc<WindowPlan>,
    aggs: Aggregates,
    bins: u32,
    gap_ms: i64,
    /// Per bin: key → its open sessions, ordered by start.
    state: Vec<HashMap<Box<[u8]>, Vec<Session>>>,
    /// When to look at a key again: fire time or purge time → keys.
    /// Entries may be stale (the session moved); they are checked when due.
    timers: KeyTimers,
    /// Bins changed since the last checkpoint.
    dirty: DirtyBins,
    watermark: i64,
    last_ingest_ns: u64,
    batch_size: usize,
    key_scratch: Vec<u8>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Session {
    span: Span,
    num: Vec<u64>,
    other: Vec<AccState>,
    /// Whether the current contents were emitted.
    fired: bool,
}

impl SessionWindow {
    pub(crate) fn new(plan: Arc<WindowPlan>, bins: u32, batch_size: usize) -> SessionWindow {
        let WindowKind::Session { gap_ms } = plan.kind else {
            unreachable!("only session windows come here")
        };
        SessionWindow {
            aggs: Aggregates::new(&plan.aggregates),
            plan,
            bins,
            gap_ms,
            state: (0..bins).map(|_| HashMap::new()).collect(),
            timers: KeyTimers::default(),
            dirty: DirtyBins::new(bins),
            watermark: i64::MIN,
            last_ingest_ns: 0,
            batch_size,
            key_scratch: Vec::new(),
        }
    }

    fn purge_time(&self, span: &Span) -> i64 {
        span.max_timestamp()
            .saturating_add(self.plan.allowed_lateness_ms)
    }

    fn emit(
        plan: &WindowPlan,
        aggs: &Aggregates,
        key: &[u8],
        s: &Session,
        ingest_ns: u64,
        out: &mut BatchBuilder,
    ) {
        let n_keys = plan.key.types().len();
        let cols = out.columns_mut();
        let (key_cols, rest) = cols.split_at_mut(n_keys);
        plan.key.decode_into(key, key_cols);
        let (agg_cols, bounds) = rest.split_at_mut(plan.aggregates.len());
        aggs.finish(&s.num, &s.other, agg_cols);
        bounds[0].push_int(s.span.start);
        bounds[1].push_int(s.span.end);
        out.finish_row(s.span.max_timestamp(), ingest_ns);
    }

    fn flush(&self, out: &mut BatchBuilder, ctx: &mut OpCtx<'_>, force: bool) {
        if (force && !out.is_empty()) || out.len() >= self.batch_size {
            ctx.emit(out.take());
        }
    }
}

impl Operator for SessionWindow {
    fn on_batch(&mut self, _port: usize, mut batch: Batch, ctx: &mut OpCtx<'_>) {
        if batch.key_hash().is_empty() {
            let hashes = self.plan.key.hash_rows(&batch);
            batch.set_key_hash(hashes);
        }
        let plan = self.plan.clone();
        let aggs = &self.aggs;
        let args = aggs.eval(&plan.aggregates, &batch, |row, reason| {
            ctx.dead_letter(&batch, row, reason)
        });
        let inputs = aggs.inputs(&batch, &args);
        self.last_ingest_ns = self
            .last_ingest_ns
            .max(batch.ingest_ns().iter().copied().max().unwrap_or(0));
        let mut late = Vec::new();
        let mut out = BatchBuilder::new(plan.output.clone(), 16, true);
        for row in 0..batch.len() {
            if args.any_failed && args.failed[row] {
                continue;
            }
            let ts = batch.event_time()[row];
            let opened = session_window(ts, self.gap_ms);
            if self.purge_time(&opened) <= self.watermark {
                late.push(row as u32);
                continue;
            }
            let bin = bin_of(batch.key_hash()[row], self.bins);
            self.key_scratch.clear();
            plan.key.encode(&batch, row, &mut self.key_scratch);
            let sessions = match self.state[bin as usize].get_mut(self.key_scratch.as_slice()) {
                Some(s) => s,
                None => self.state[bin as usize]
                    .entry(self.key_scratch.clone().into_boxed_slice())
                    .or_default(),
            };
            // Merge every session the new event touches into one.
            let mut merged = Session {
                span: opened,
                num: Vec::new(),
                other: Vec::new(),
                fired: false,
            };
            aggs.init(&mut merged.num, &mut merged.other);
            aggs.update(&mut merged.num, &mut merged.other, &inputs, row, ts);
            let mut i = 0;
            while i < sessions.len() {
                if sessions[i].span.touches(&merged.span) {
                    let old = sessions.remove(i);
                    merged.span = merged.span.cover(&old.span);
                    aggs.merge(&mut merged.num, &mut merged.other, &old.num, &old.other);
                } else {
                    i += 1;
                }
            }
            let at = sessions.partition_point(|s| s.span.start < merged.span.start);
            let fire_at = merged.span.max_timestamp();
            let fire_now = fire_at <= self.watermark;
            if fire_now {
                // A late event updated a session that is already due: emit
                // the updated result at once.
                merged.fired = true;
                Self::emit(
                    &plan,
                    aggs,
                    &self.key_scratch,
                    &merged,
                    self.last_ingest_ns,
                    &mut out,
                );
            }
            let timer = if fire_now {
                fire_at.saturating_add(plan.allowed_lateness_ms)
            } else {
                fire_at
            };
            sessions.insert(at, merged);
            self.timers.schedule(timer, bin, &self.key_scratch);
            self.dirty.mark_bin(bin);
            self.flush(&mut out, ctx, false);
        }
        self.flush(&mut out, ctx, true);
        if !late.is_empty() {
            ctx.count(&ctx.metrics.late, late.len() as u64);
            if plan.has_late_output {
                ctx.emit_to(1, batch.take_rows(&late));
            }
        }
    }

    fn on_watermark(&mut self, watermark: i64, ctx: &mut OpCtx<'_>) {
        self.watermark = watermark;
        let plan = self.plan.clone();
        let mut out = BatchBuilder::new(plan.output.clone(), self.batch_size, true);
        for (bin, key) in self.timers.pop_until(watermark) {
            let Some(sessions) = self.state[bin as usize].get_mut(&key) else {
                continue;
            };
            self.dirty.mark_bin(bin);
            let mut retry = Vec::new();
            for s in sessions.iter_mut() {
                if !s.fired && s.span.max_timestamp() <= watermark {
                    s.fired = true;
                    Self::emit(&plan, &self.aggs, &key, s, self.last_ingest_ns, &mut out);
                    if out.len() >= self.batch_size {
                        ctx.emit(out.take());
                    }
                    retry.push(
                        s.span
                            .max_timestamp()
                            .saturating_add(plan.allowed_lateness_ms),
                    );
                }
            }
            sessions.retain(|s| {
                s.span
                    .max_timestamp()
                    .saturating_add(plan.allowed_lateness_ms)
                    > watermark
            });
            if sessions.is_empty() {
                self.state[bin as usize].remove(&key);
            } else {
                for t in retry.into_iter().filter(|&t| t > watermark) {
                    self.timers.schedule(t, bin, &key);
                }
            }
        }
        if !out.is_empty() {
            ctx.emit(out.take());
        }
    }

    fn snapshot(&mut self, _checkpoint: u64) -> Snapshot {
        let dirty = self.dirty.take();
        if dirty.is_empty() {
            return Snapshot::default();
        }
        let mut out = SnapshotBins::new(self.bins, dirty);
        for (bin, keys) in self.state.iter().enumerate() {
            let Some(slot) = out.slot(bin as u32) else {
                continue;
            };
            for (key, sessions) in keys {
                slot.push_with(
                    |b| b.extend_from_slice(key),
                    |b| {
                        postcard::to_io(sessions, b).expect("sessions encode");
                    },
                );
            }
        }
        out.finish()
    }

    fn restore(&mut self, bin: u32, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        let lateness = self.plan.allowed_lateness_ms;
        for (key, value) in entries {
            let sessions: Vec<Session> = postcard::from_bytes(&value)
                .map_err(|e| format!("undecodable session state: {e}"))?;
            if sessions.iter().any(|s| {
                s.num.len() != self.aggs.num_len() || s.other.len() != self.aggs.other_len()
            }) {
                return Err("the sessions hold other aggregates than the window computes".into());
            }
            for s in &sessions {
                // The timer that would have been pending: fire, or purge.
                let at = if s.fired {
                    s.span.max_timestamp().saturating_add(lateness)
                } else {
                    s.span.max_timestamp()
                };
                self.timers.schedule(at, bin, &key);
            }
            self.state[bin as usize].insert(key.into_boxed_slice(), sessions);
        }
        Ok(())
    }

    fn restore_watermark(&mut self, watermark: i64) {
        self.watermark = watermark;
    }

    /// A bin's keys leave with their sessions; their timers stay behind,
    /// stale and harmless (a due timer finds no state).
    fn export_bins(
        &mut self,
        bins: &[u32],
    ) -> Result<Vec<crate::exec::operator::BinEntries>, String> {
        Ok(bins
            .iter()
            .map(|&bin| {
                self.dirty.unmark(bin);
                let mut out = crate::exec::operator::BinEntries::new();
                for (key, sessions) in std::mem::take(&mut self.state[bin as usize]) {
                    out.push_with(
                        |b| b.extend_from_slice(&key),
                        |b| {
                            *b = postcard::to_extend(&sessions, std::mem::take(b))
                                .expect("sessions encode")
                        },
                    );
                }
                out
            })
            .collect())
    }

    /// A bin installed while running (as a restore does, which schedules
    /// each session's timer) is new here, and the timers already due at
    /// this watermark fire now.
    fn installed(&mut self, bin: u32, ctx: &mut OpCtx<'_>) {
        self.dirty.mark_bin(bin);
        self.on_watermark(self.watermark, ctx);
    }
}
