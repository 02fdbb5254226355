//! `join`: windowed stream–stream equi-join of two inputs (port 0 left,
//! port 1 right).
//!
//! - Tumbling: pairs with equal keys in the same window are emitted when the
//!   window fires (as Flink's window join), with `window_start`/`window_end`.
//! - Interval (`within`): pairs with equal keys at most `within` apart are
//!   emitted as soon as the second of them arrives (as Flink's interval
//!   join); a row is kept until the watermark is `within` past it.
//!
//! Records behind the watermark cannot be joined reliably and are counted
//! as late and dropped, as Flink does.

use std::collections::BTreeMap;
use std::sync::Arc;

use hashbrown::HashMap;

use super::dirty::{DirtyBins, SnapshotBins};
use super::timers::KeyTimers;
use super::window_state::Owned;
use crate::config::JoinMode;
use crate::data::{Batch, BatchBuilder, ValueRef};
use crate::exec::checkpoint::Snapshot;
use crate::exec::operator::{OpCtx, Operator};
use crate::kernel::hash::bin_of;
use crate::kernel::window::tumbling_start;
use crate::plan::JoinPlan;

/// A stored input row.
#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    ts: i64,
    /// On the process clock, so it does not survive a restart: restored
    /// rows count from when they were restored.
    #[serde(skip, default = "crate::exec::clock::now_ns")]
    ingest_ns: u64,
    values: Box<[Option<Owned>]>,
}

/// The rows of one key, per side.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Sides {
    rows: [Vec<Row>; 2],
}

type KeyMap = HashMap<Box<[u8]>, Sides>;

pub(crate) struct Join {
    plan: Arc<JoinPlan>,
    bins: u32,
    /// Interval joins: per bin, key → rows.
    by_bin: Vec<KeyMap>,
    /// Tumbling joins: window start → per bin, key → rows.
    by_window: BTreeMap<i64, Vec<KeyMap>>,
    /// Interval joins: when keys may have rows to drop → (bin, key).
    expiry: KeyTimers,
    /// Bins changed since the last checkpoint.
    dirty: DirtyBins,
    watermark: i64,
    batch_size: usize,
    key_scratch: Vec<u8>,
}

impl Join {
    pub(crate) fn new(plan: Arc<JoinPlan>, bins: u32, batch_size: usize) -> Join {
        let by_bin = match plan.mode {
            JoinMode::Interval { .. } => (0..bins).map(|_| KeyMap::new()).collect(),
            JoinMode::Tumbling { .. } => Vec::new(),
        };
        Join {
            plan,
            bins,
            by_bin,
            by_window: BTreeMap::new(),
            expiry: KeyTimers::default(),
            dirty: DirtyBins::new(bins),
            watermark: i64::MIN,
            batch_size,
            key_scratch: Vec::new(),
        }
    }

    /// Appends the joined row of `left` and `right` to `out`.
    fn emit_pair(
        plan: &JoinPlan,
        left: &Row,
        right: &Row,
        window: Option<(i64, i64)>,
        out: &mut BatchBuilder,
    ) {
        let cols = out.columns_mut();
        for (i, &(side, c)) in plan.columns.iter().enumerate() {
            let row = if side == 0 { left } else { right };
            match &row.values[c] {
                Some(v) => cols[i].push_value(owned_ref(v)),
                None => cols[i].push_null(),
            }
        }
        let ts = match window {
            Some((start, end)) => {
                let n = plan.columns.len();
                cols[n].push_int(start);
                cols[n + 1].push_int(end);
                end - 1
            }
            None => left.ts.max(right.ts),
        };
        out.finish_row(ts, left.ingest_ns.max(right.ingest_ns));
    }
}

fn owned_ref(v: &Owned) -> ValueRef<'_> {
    match v {
        Owned::Bool(b) => ValueRef::Bool(*b),
        Owned::Int(i) => ValueRef::Int(*i),
        Owned::Float(f) => ValueRef::Float(*f),
        Owned::Str(s) => ValueRef::Str(s),
    }
}

fn capture(batch: &Batch, row: usize) -> Row {
    let values = batch
        .columns()
        .iter()
        .map(|c| Owned::from_value(c.get(row)))
        .collect();
    Row {
        ts: batch.event_time()[row],
        ingest_ns: batch.ingest_ns()[row],
        values,
    }
}

impl Operator for Join {
    fn on_batch(&mut self, port: usize, mut batch: Batch, ctx: &mut OpCtx<'_>) {
        let plan = self.plan.clone();
        let key = if port == 0 {
            &plan.left_key
        } else {
            &plan.right_key
        };
        if batch.key_hash().is_empty() {
            let hashes = key.hash_rows(&batch);
            batch.set_key_hash(hashes);
        }
        let mut out = BatchBuilder::new(plan.output.clone(), 16, true);
        let mut late = 0u64;
        for row in 0..batch.len() {
            let ts = batch.event_time()[row];
            let bin = bin_of(batch.key_hash()[row], self.bins) as usize;
            self.key_scratch.clear();
            key.encode(&batch, row, &mut self.key_scratch);
            // SQL equi-joins never match NULL keys.
            if key_has_null(&self.key_scratch, key.types()) {
                continue;
            }
            match plan.mode {
                JoinMode::Tumbling { size_ms } => {
                    let start = tumbling_start(ts, size_ms);
                    if start + size_ms - 1 <= self.watermark {
                        late += 1;
                        continue;
                    }
                    let bins = self.bins as usize;
                    let maps = self
                        .by_window
                        .entry(start)
                        .or_insert_with(|| (0..bins).map(|_| KeyMap::new()).collect());
                    let sides = entry(&mut maps[bin], &self.key_scratch);
                    sides.rows[port].push(capture(&batch, row));
                    self.dirty.mark_bin(bin as u32);
                }
                JoinMode::Interval { within_ms } => {
                    if ts < self.watermark {
                        late += 1;
                        continue;
                    }
                    let sides = entry(&mut self.by_bin[bin], &self.key_scratch);
                    let new = capture(&batch, row);
                    for other in &sides.rows[1 - port] {
                        if (other.ts - new.ts).abs() <= within_ms {
                            let (l, r) = if port == 0 {
                                (&new, other)
                            } else {
                                (other, &new)
                            };
                            Self::emit_pair(&plan, l, r, None, &mut out);
                        }
                    }
                    sides.rows[port].push(new);
                    self.dirty.mark_bin(bin as u32);
                    let expires = ts.saturating_add(within_ms);
                    self.expiry.schedule(expires, bin as u32, &self.key_scratch);
                    if out.len() >= self.batch_size {
                        ctx.emit(out.take());
                    }
                }
            }
        }
        if !out.is_empty() {
            ctx.emit(out.take());
        }
        if late > 0 {
            ctx.count(&ctx.metrics.late, late);
        }
    }

    fn on_watermark(&mut self, watermark: i64, ctx: &mut OpCtx<'_>) {
        self.watermark = watermark;
        let plan = self.plan.clone();
        let mut out = BatchBuilder::new(plan.output.clone(), self.batch_size, true);
        match plan.mode {
            JoinMode::Tumbling { size_ms } => {
                while let Some(entry) = self.by_window.first_entry() {
                    let start = *entry.key();
                    let end = start + size_ms;
                    if end - 1 > watermark {
                        break;
                    }
                    for (bin, map) in entry.remove().into_iter().enumerate() {
                        if !map.is_empty() {
                            self.dirty.mark_bin(bin as u32);
                        }
                        for sides in map.values() {
                            for l in &sides.rows[0] {
                                for r in &sides.rows[1] {
                                    Self::emit_pair(&plan, l, r, Some((start, end)), &mut out);
                                    if out.len() >= self.batch_size {
                                        ctx.emit(out.take());
                                    }
                                }
                            }
                        }
                    }
                }
            }
            JoinMode::Interval { within_ms } => {
                // A row at `ts` can still match rows up to `ts + within`;
                // once the watermark is past that, no on-time row can.
                for (bin, key) in self.expiry.pop_until(watermark.saturating_sub(1)) {
                    let map = &mut self.by_bin[bin as usize];
                    let Some(sides) = map.get_mut(&key) else {
                        continue;
                    };
                    self.dirty.mark_bin(bin);
                    for rows in &mut sides.rows {
                        rows.retain(|r| r.ts.saturating_add(within_ms) >= watermark);
                    }
                    if sides.rows.iter().all(Vec::is_empty) {
                        map.remove(&key);
                    }
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
        let encode = |sides: &Sides, to: &mut Vec<u8>| {
            postcard::to_io(sides, to).expect("join state encodes");
        };
        for (bin, map) in self.by_bin.iter().enumerate() {
            if let Some(slot) = out.slot(bin as u32) {
                for (k, sides) in map {
                    slot.push_with(|b| b.extend_from_slice(k), |b| encode(sides, b));
                }
            }
        }
        for (start, maps) in &self.by_window {
            for (bin, map) in maps.iter().enumerate() {
                if let Some(slot) = out.slot(bin as u32) {
                    for (k, sides) in map {
                        slot.push_with(
                            |b| {
                                b.extend_from_slice(&start.to_be_bytes());
                                b.extend_from_slice(k);
                            },
                            |b| encode(sides, b),
                        );
                    }
                }
            }
        }
        out.finish()
    }

    fn restore(&mut self, bin: u32, entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), String> {
        let widths = [self.plan.left_width, self.plan.right_width];
        for (key, value) in entries {
            let sides: Sides =
                postcard::from_bytes(&value).map_err(|e| format!("undecodable join state: {e}"))?;
            if sides
                .rows
                .iter()
                .zip(widths)
                .any(|(rows, w)| rows.iter().any(|r| r.values.len() != w))
            {
                return Err("stored rows have other fields than the join's inputs".into());
            }
            match self.plan.mode {
                JoinMode::Interval { within_ms } => {
                    for r in sides.rows.iter().flatten() {
                        self.expiry
                            .schedule(r.ts.saturating_add(within_ms), bin, &key);
                    }
                    self.by_bin[bin as usize].insert(key.into_boxed_slice(), sides);
                }
                JoinMode::Tumbling { .. } => {
                    let (start, group) = key
                        .split_at_checked(8)
                        .ok_or("a join window key is too short")?;
                    let start = i64::from_be_bytes(start.try_into().expect("8 bytes"));
                    let bins = self.bins as usize;
                    let maps = self
                        .by_window
                        .entry(start)
                        .or_insert_with(|| (0..bins).map(|_| KeyMap::new()).collect());
                    maps[bin as usize].insert(group.into(), sides);
                }
            }
        }
        Ok(())
    }

    fn restore_watermark(&mut self, watermark: i64) {
        self.watermark = watermark;
    }

    /// A bin's keys leave with their rows (every open window's, for
    /// tumbling joins); expiry timers stay behind, stale and harmless.
    fn export_bins(
        &mut self,
        bins: &[u32],
    ) -> Result<Vec<crate::exec::operator::BinEntries>, String> {
        let push = |out: &mut crate::exec::operator::BinEntries,
                    prefix: &[u8],
                    key: &[u8],
                    sides: &Sides| {
            out.push_with(
                |b| {
                    b.extend_from_slice(prefix);
                    b.extend_from_slice(key);
                },
                |b| *b = postcard::to_extend(sides, std::mem::take(b)).expect("join state encodes"),
            );
        };
        Ok(bins
            .iter()
            .map(|&bin| {
                self.dirty.unmark(bin);
                let mut out = crate::exec::operator::BinEntries::new();
                if let Some(map) = self.by_bin.get_mut(bin as usize) {
                    for (k, sides) in std::mem::take(map).iter() {
                        push(&mut out, &[], &k[..], sides);
                    }
                }
                for (start, maps) in &mut self.by_window {
                    for (k, sides) in std::mem::take(&mut maps[bin as usize]).iter() {
                        push(&mut out, &start.to_be_bytes(), &k[..], sides);
                    }
                }
                out
            })
            .collect())
    }

    /// A bin installed while running (as a restore does) is new here, and
    /// what is due at this watermark happens now (a tumbling window
    /// already past its end joins now).
    fn installed(&mut self, bin: u32, ctx: &mut OpCtx<'_>) {
        self.dirty.mark_bin(bin);
        self.on_watermark(self.watermark, ctx);
    }
}

/// The rows of `key`, allocating the key only when it is new.
fn entry<'m>(map: &'m mut KeyMap, key: &[u8]) -> &'m mut Sides {
    if !map.contains_key(key) {
        map.insert(key.into(), Sides::default());
    }
    map.get_mut(key).expect("inserted above")
}

/// Whether an encoded key has a NULL part.
fn key_has_null(mut key: &[u8], types: &[crate::data::DataType]) -> bool {
    use crate::data::DataType;
    for ty in types {
        let Some((&tag, rest)) = key.split_first() else {
            return false;
        };
        if tag == 0 {
            return true;
        }
        let len = match ty {
            DataType::Bool => 1,
            DataType::Int | DataType::Float => 8,
            DataType::Str => {
                4 + u32::from_le_bytes(rest[..4].try_into().unwrap_or_default()) as usize
            }
        };
        key = &rest[len..];
    }
    false
}
