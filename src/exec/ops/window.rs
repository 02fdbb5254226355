//! `window` with tumbling or hopping windows: keyed event-time aggregation.
//!
//! State is window-major, bin-minor: every open window holds one pane per
//! bin, and a pane holds the keys of that bin with their accumulators in
//! flat arrays (no allocation per key). Moving or checkpointing a bin is
//! taking its pane out of each open window.
//!
//! Semantics follow Flink's event-time windows: a window fires once the
//! watermark reaches its last millisecond; with `allowed_lateness` it is
//! kept that much longer, and a late record within it fires the window
//! again for its key (an updated row). Records for windows past their
//! lateness are late: counted, and sent to `late_output` if set.

use std::collections::BTreeMap;
use std::sync::Arc;

use hashbrown::HashTable;

use super::window_state::{AccState, Aggregates};
use crate::config::WindowKind;
use crate::data::{Batch, BatchBuilder, Column};
use crate::exec::operator::{OpCtx, Operator};
use crate::kernel::hash::bin_of;
use crate::kernel::window::{hopping_windows, tumbling_start};
use crate::plan::WindowPlan;

pub(crate) struct Window {
    plan: Arc<WindowPlan>,
    bins: u32,
    size_ms: i64,
    slide_ms: i64,
    windows: BTreeMap<i64, Panes>,
    watermark: i64,
    /// Ingestion time of the newest input: what fired results are measured
    /// from (the record that moved the watermark came no later than it).
    last_ingest_ns: u64,
    batch_size: usize,
    key_scratch: Vec<u8>,
    late_rows: Vec<u32>,
    /// Already-fired windows updated by late records: (start, bin, entry).
    refire: Vec<(i64, u32, u32)>,
}

/// One open window: a pane per bin.
struct Panes {
    end: i64,
    fired: bool,
    bins: Vec<Option<Box<Pane>>>,
}

/// The keys of one bin in one window.
#[derive(Default)]
struct Pane {
    index: HashTable<u32>,
    hashes: Vec<u64>,
    key_ends: Vec<u32>,
    keys: Vec<u8>,
    /// `aggregates` accumulators per entry, back to back.
    accs: Vec<AccState>,
}

impl Pane {
    fn key(&self, entry: usize) -> &[u8] {
        let start = if entry == 0 {
            0
        } else {
            self.key_ends[entry - 1] as usize
        };
        &self.keys[start..self.key_ends[entry] as usize]
    }

    /// The entry of `key`, created with fresh accumulators if new.
    #[inline]
    fn entry(&mut self, hash: u64, key: &[u8], aggs: &Aggregates<'_>) -> usize {
        let Pane {
            index,
            hashes,
            key_ends,
            keys,
            accs,
        } = self;
        let found = index.find(hash, |&e| {
            let e = e as usize;
            let start = if e == 0 { 0 } else { key_ends[e - 1] as usize };
            hashes[e] == hash && &keys[start..key_ends[e] as usize] == key
        });
        if let Some(&e) = found {
            return e as usize;
        }
        let e = hashes.len();
        hashes.push(hash);
        keys.extend_from_slice(key);
        key_ends.push(keys.len() as u32);
        aggs.init(accs);
        let hashes = &*hashes;
        index.insert_unique(hash, e as u32, |&x| hashes[x as usize]);
        e
    }
}

impl Window {
    pub(crate) fn new(plan: Arc<WindowPlan>, bins: u32, batch_size: usize) -> Window {
        let (size_ms, slide_ms) = match plan.kind {
            WindowKind::Tumbling { size_ms } => (size_ms, size_ms),
            WindowKind::Hopping { size_ms, slide_ms } => (size_ms, slide_ms),
            WindowKind::Session { .. } => unreachable!("sessions have their own operator"),
        };
        Window {
            plan,
            bins,
            size_ms,
            slide_ms,
            windows: BTreeMap::new(),
            watermark: i64::MIN,
            last_ingest_ns: 0,
            batch_size,
            key_scratch: Vec::new(),
            late_rows: Vec::new(),
            refire: Vec::new(),
        }
    }

    /// Whether a window ending at `end` is past its allowed lateness.
    fn expired(end: i64, lateness_ms: i64, watermark: i64) -> bool {
        (end - 1).saturating_add(lateness_ms) <= watermark
    }

    /// Appends one result row per entry of `pane` to `out`.
    fn emit_pane(
        plan: &WindowPlan,
        pane: &Pane,
        entries: impl Iterator<Item = usize>,
        start: i64,
        end: i64,
        ingest_ns: u64,
        out: &mut Output<'_, '_>,
    ) {
        let aggs = Aggregates::new(&plan.aggregates);
        let n_aggs = aggs.len();
        let n_keys = plan.key.types().len();
        for e in entries {
            let cols = out.builder.columns_mut();
            let (key_cols, rest) = cols.split_at_mut(n_keys);
            let mut key_refs: Vec<&mut Column> = key_cols.iter_mut().collect();
            plan.key.decode_into(pane.key(e), &mut key_refs);
            let (agg_cols, bounds) = rest.split_at_mut(n_aggs);
            aggs.finish(&pane.accs[e * n_aggs..(e + 1) * n_aggs], agg_cols);
            bounds[0].push_int(start);
            bounds[1].push_int(end);
            out.builder.finish_row(end - 1, ingest_ns);
            if out.builder.len() >= out.batch_size {
                out.ctx.emit(out.builder.take());
            }
        }
    }
}

struct Output<'a, 'b> {
    builder: BatchBuilder,
    batch_size: usize,
    ctx: &'a mut OpCtx<'b>,
}

impl Output<'_, '_> {
    fn done(mut self) {
        if !self.builder.is_empty() {
            self.ctx.emit(self.builder.take());
        }
    }
}

impl Operator for Window {
    fn on_batch(&mut self, _port: usize, mut batch: Batch, ctx: &mut OpCtx<'_>) {
        if batch.key_hash().is_empty() {
            let hashes = self.plan.key.hash_rows(&batch, &mut self.key_scratch);
            batch.set_key_hash(hashes);
        }
        let plan = self.plan.clone();
        let aggs = Aggregates::new(&plan.aggregates);
        let n_aggs = aggs.len();
        let args = aggs.eval(&batch, |row, reason| ctx.dead_letter(&batch, row, reason));
        self.last_ingest_ns = self
            .last_ingest_ns
            .max(batch.ingest_ns().iter().copied().max().unwrap_or(0));
        self.late_rows.clear();
        let bins = self.bins as usize;
        let tumbling = self.size_ms == self.slide_ms;
        let (lateness, watermark) = (plan.allowed_lateness_ms, self.watermark);
        let expired = |end: i64| Self::expired(end, lateness, watermark);
        // Rows of a batch mostly share a window: remember the last one.
        let mut current: Option<(i64, &mut Panes)> = None;
        for row in 0..batch.len() {
            if args.any_failed && args.failed[row] {
                continue;
            }
            let ts = batch.event_time()[row];
            let hash = batch.key_hash()[row];
            let bin = bin_of(hash, self.bins);
            self.key_scratch.clear();
            plan.key.encode(&batch, row, &mut self.key_scratch);
            let mut accepted = false;
            if tumbling {
                let start = tumbling_start(ts, self.size_ms);
                let end = start + self.size_ms;
                if !expired(end) {
                    accepted = true;
                    if current.as_ref().is_none_or(|(s, _)| *s != start) {
                        let panes = self
                            .windows
                            .entry(start)
                            .or_insert_with(|| Panes::new(end, bins));
                        current = Some((start, panes));
                    }
                    let (_, panes) = current.as_mut().expect("set above");
                    let pane = panes.bins[bin as usize].get_or_insert_with(Box::default);
                    let e = pane.entry(hash, &self.key_scratch, &aggs);
                    aggs.update(&mut pane.accs[e * n_aggs..(e + 1) * n_aggs], &args, row, ts);
                    if panes.fired {
                        self.refire.push((start, bin, e as u32));
                    }
                }
            } else {
                current = None;
                for w in hopping_windows(ts, self.size_ms, self.slide_ms) {
                    if expired(w.end) {
                        continue;
                    }
                    accepted = true;
                    let panes = self
                        .windows
                        .entry(w.start)
                        .or_insert_with(|| Panes::new(w.end, bins));
                    let pane = panes.bins[bin as usize].get_or_insert_with(Box::default);
                    let e = pane.entry(hash, &self.key_scratch, &aggs);
                    aggs.update(&mut pane.accs[e * n_aggs..(e + 1) * n_aggs], &args, row, ts);
                    if panes.fired {
                        self.refire.push((w.start, bin, e as u32));
                    }
                }
            }
            if !accepted {
                self.late_rows.push(row as u32);
            }
        }
        drop(current);
        if !self.late_rows.is_empty() {
            ctx.count(&ctx.metrics.late, self.late_rows.len() as u64);
            if plan.has_late_output {
                ctx.emit_to(1, batch.take_rows(&self.late_rows));
            }
        }
        if !self.refire.is_empty() {
            self.refire.sort_unstable();
            self.refire.dedup();
            let mut out = Output {
                builder: BatchBuilder::new(plan.output.clone(), self.refire.len(), true),
                batch_size: self.batch_size,
                ctx,
            };
            for &(start, bin, e) in &self.refire {
                let panes = &self.windows[&start];
                let pane = panes.bins[bin as usize]
                    .as_ref()
                    .expect("refired pane exists");
                Self::emit_pane(
                    &plan,
                    pane,
                    std::iter::once(e as usize),
                    start,
                    panes.end,
                    self.last_ingest_ns,
                    &mut out,
                );
            }
            out.done();
            self.refire.clear();
        }
    }

    fn on_watermark(&mut self, watermark: i64, ctx: &mut OpCtx<'_>) {
        self.watermark = watermark;
        let plan = self.plan.clone();
        let mut out = Output {
            builder: BatchBuilder::new(plan.output.clone(), self.batch_size, true),
            batch_size: self.batch_size,
            ctx,
        };
        for (&start, panes) in self.windows.iter_mut() {
            if panes.end - 1 > watermark {
                break;
            }
            if !panes.fired {
                panes.fired = true;
                for pane in panes.bins.iter().flatten() {
                    Self::emit_pane(
                        &plan,
                        pane,
                        0..pane.hashes.len(),
                        start,
                        panes.end,
                        self.last_ingest_ns,
                        &mut out,
                    );
                }
            }
        }
        out.done();
        let lateness = plan.allowed_lateness_ms;
        while let Some(entry) = self.windows.first_entry() {
            if !Self::expired(entry.get().end, lateness, watermark) {
                break;
            }
            entry.remove();
        }
    }
}

impl Panes {
    fn new(end: i64, bins: usize) -> Panes {
        Panes {
            end,
            fired: false,
            bins: (0..bins).map(|_| None).collect(),
        }
    }
}
