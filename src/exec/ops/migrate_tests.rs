//! Moving bins between live instances: for every keyed operator, exporting
//! every bin mid-stream and installing it into a fresh instance (behind,
//! level with, or ahead of the exporter's watermark) gives exactly the
//! output of the run without the move.

use crate::data::{Batch, BatchBuilder, SchemaRef};
use crate::exec::metrics::OpMetrics;
use crate::exec::operator::{OpCtx, Operator};
use crate::io::dead_letter::DeadLetter;
use crate::kernel::watermark::WATERMARK_END;
use crate::plan::OpSpec;

const BINS: u32 = 16;

type Make = Box<dyn Fn() -> Box<dyn Operator>>;

/// The plan of operator `op` in a pipeline reading two int-keyed files.
fn spec(op_toml: &str) -> (OpSpec, Vec<SchemaRef>) {
    let toml = format!(
        r#"
[node]
bins = {BINS}
[checkpoint]
enabled = false
[sources.a]
type = "file"
path = "/nonexistent/a"
schema = {{ key = "int", value = "int", ts = "int" }}
event_time = "ts"
[sources.b]
type = "file"
path = "/nonexistent/b"
schema = {{ key = "int", value = "int", ts = "int" }}
event_time = "ts"
{op_toml}
[sinks.out]
type = "blackhole"
inputs = ["op"]
"#
    );
    let (config, mut d) = crate::config::parse("<test>", &toml);
    let mut plan = crate::plan::build(&config, &mut d).unwrap_or_else(|| panic!("{}", d.render()));
    let at = plan.nodes.iter().position(|n| n.id == "op").expect("op");
    let schemas = plan.nodes[at]
        .inputs
        .iter()
        .map(|i| plan.nodes[i.from].outputs[i.from_port].schema.clone())
        .collect();
    (plan.nodes.swap_remove(at).op, schemas)
}

/// The operator `op` of a pipeline reading two int-keyed files.
fn operator(op_toml: &str) -> (Make, Vec<SchemaRef>) {
    let (op, schemas) = spec(op_toml);
    let make: Make = match &op {
        OpSpec::Window(w) if matches!(w.kind, crate::config::WindowKind::Session { .. }) => {
            let w = w.clone();
            Box::new(move || Box::new(super::SessionWindow::new(w.clone(), BINS, 64)))
        }
        OpSpec::Window(w) => {
            let w = w.clone();
            Box::new(move || {
                Box::new(super::Window::<crate::data::WordKey<1>>::new(
                    w.clone(),
                    BINS,
                    64,
                    None,
                ))
            })
        }
        OpSpec::Join(j) => {
            let j = j.clone();
            Box::new(move || Box::new(super::Join::new(j.clone(), BINS, 64)))
        }
        _ => unreachable!("keyed operators only"),
    };
    (make, schemas)
}

/// One step of the input: a batch on a port, or a watermark.
#[derive(Clone)]
enum Step {
    Rows(usize, Vec<(i64, i64, i64)>),
    Watermark(i64),
}

/// Pseudo-random rows in time order with some disorder, a watermark after
/// every batch (behind by the disorder), and late rows within a lateness
/// of 300 ms.
fn input(ports: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for b in 0..60i64 {
        let base = b * 97;
        let port = (b as usize) % ports;
        let rows = (0..40)
            .map(|_| {
                let key = next(37) as i64;
                // No late rows around the move (see `check`).
                let late = if next(10) == 0 && !(24..36).contains(&b) {
                    250
                } else {
                    0
                };
                (key, next(100) as i64, base + next(90) as i64 - late)
            })
            .collect();
        steps.push(Step::Rows(port, rows));
        steps.push(Step::Watermark(base - 100));
    }
    steps
}

fn batch(schema: &SchemaRef, key: &crate::data::KeySpec, rows: &[(i64, i64, i64)]) -> Batch {
    let mut b = BatchBuilder::new(schema.clone(), rows.len(), true);
    for &(k, v, ts) in rows {
        b.column_mut(0).push_int(k);
        b.column_mut(1).push_int(v);
        b.column_mut(2).push_int(ts);
        b.finish_row(ts, 0);
    }
    let mut batch = b.take();
    let hashes = key.hash_rows(&batch);
    batch.set_key_hash(hashes);
    batch
}

/// Runs the operator calls and collects every output row as text.
/// As the worker does, it takes the output downstream during a call once
/// it holds `FORWARD_AT` batches.
struct Harness {
    dead: DeadLetter,
    metrics: OpMetrics,
    rows: Vec<String>,
    /// Times output went downstream during a call, and the most batches
    /// a call held at once.
    forwards: usize,
    most_held: usize,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            dead: DeadLetter::new(std::env::temp_dir().join("eddy-migrate-tests-dead")),
            metrics: OpMetrics::default(),
            rows: Vec::new(),
            forwards: 0,
            most_held: 0,
        }
    }

    fn with(&mut self, f: impl FnOnce(&mut OpCtx<'_>)) {
        let mut out = Vec::new();
        let mut sent = Vec::new();
        let (mut forwards, mut most_held) = (0, 0);
        let mut forward = |batches: &mut Vec<(usize, Batch)>| {
            forwards += 1;
            most_held = batches.len().max(most_held);
            sent.append(batches);
        };
        let mut ctx = OpCtx {
            out: &mut out,
            forward: Some(&mut forward),
            component: "op",
            metrics: &self.metrics,
            dead_letter: &self.dead,
            blocked_ns: 0,
            failure: None,
        };
        f(&mut ctx);
        assert_eq!(ctx.failure, None);
        most_held = most_held.max(out.len());
        self.forwards += forwards;
        self.most_held = self.most_held.max(most_held);
        sent.append(&mut out);
        for (port, b) in sent {
            for r in 0..b.len() {
                let cols: Vec<String> = b
                    .columns()
                    .iter()
                    .map(|c| format!("{:?}", c.get(r)))
                    .collect();
                self.rows.push(format!("{port}:{}", cols.join(",")));
            }
        }
    }

    fn apply(
        &mut self,
        op: &mut dyn Operator,
        step: &Step,
        schemas: &[SchemaRef],
        keys: &[crate::data::KeySpec],
    ) {
        match step {
            Step::Rows(port, rows) => {
                let b = batch(&schemas[*port], &keys[*port], rows);
                self.with(|ctx| op.on_batch(*port, b, ctx));
            }
            Step::Watermark(wm) => self.with(|ctx| op.on_watermark(*wm, ctx)),
        }
    }
}

/// A store in a temporary directory (kept by the `TempDir`) for windows
/// to spill to.
fn spill_store() -> (
    tempfile::TempDir,
    std::sync::Arc<crate::exec::checkpoint::Checkpoints>,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = crate::state::Store::open(dir.path(), 1 << 20).expect("store");
    let checkpoints = crate::exec::checkpoint::Checkpoints::new(
        std::sync::Arc::new(store),
        Vec::new(),
        1,
        BINS,
        0,
    );
    (dir, std::sync::Arc::new(checkpoints))
}

/// Windows of `op_toml` whose state is far over a 1 KiB cache, each
/// instance under its own name in one store (kept by the `TempDir`).
fn spilling(op_toml: &str) -> (tempfile::TempDir, Make) {
    let (op, _) = spec(op_toml);
    let OpSpec::Window(plan) = op else {
        unreachable!("a window")
    };
    let (dir, checkpoints) = spill_store();
    let made = std::cell::Cell::new(0);
    let make: Make = Box::new(move || {
        made.set(made.get() + 1);
        let state = super::StateAccess {
            checkpoints: checkpoints.clone(),
            op: format!("op{}", made.get()),
            budget: crate::exec::live::CacheBudget::fixed(1 << 10),
        };
        Box::new(super::Window::<crate::data::WordKey<1>>::new(
            plan.clone(),
            BINS,
            64,
            Some(state),
        ))
    });
    (dir, make)
}

/// `skew`: how many watermarks the new instance is behind (negative:
/// ahead) the old one when the bins move.
fn check(op_toml: &str, ports: usize, skew: i64) {
    let (make, schemas) = operator(op_toml);
    check_made(op_toml, &make, &make, &schemas, ports, skew);
}

/// [`check`], with the instances that move the bins made by `moving`.
fn check_made(
    op_toml: &str,
    make: &Make,
    moving: &Make,
    schemas: &[SchemaRef],
    ports: usize,
    skew: i64,
) {
    let keys: Vec<crate::data::KeySpec> = schemas
        .iter()
        .map(|s| {
            crate::data::KeySpec::new(
                vec![s.index_of("key").expect("key")],
                vec![crate::data::DataType::Int],
            )
        })
        .collect();
    let steps = input(ports);
    let finish = |h: &mut Harness, op: &mut dyn Operator| {
        h.with(|ctx| op.on_watermark(WATERMARK_END, ctx));
        h.with(|ctx| op.on_end(ctx));
    };

    let mut reference = Harness::new();
    let mut op = make();
    for s in &steps {
        reference.apply(op.as_mut(), s, schemas, &keys);
    }
    finish(&mut reference, op.as_mut());

    let mut moved = Harness::new();
    let mut old = moving();
    let mut new = moving();
    // Every row before `cut` reached the old owner. Behind: the new
    // instance has not seen the last `skew` watermarks before `cut`.
    // Ahead: it has seen `-skew` more after `cut`, while the rows sent
    // before those still went to the old owner (no row there is late).
    let cut = steps.len() / 2;
    let is_wm = |s: &&Step| matches!(s, Step::Watermark(_));
    let wm_at: Vec<usize> = (0..steps.len())
        .filter(|&i| matches!(steps[i], Step::Watermark(_)))
        .collect();
    let first_after = wm_at.partition_point(|&i| i < cut);
    let (new_wm, resume) = if skew >= 0 {
        (wm_at[first_after - skew as usize], cut)
    } else {
        let end = wm_at[first_after + (-skew) as usize - 1] + 1;
        (end, end)
    };
    let new_wm = if skew == 0 { cut } else { new_wm };
    for s in &steps[..cut] {
        moved.apply(old.as_mut(), s, schemas, &keys);
    }
    for s in steps[cut..resume].iter().filter(|s| !is_wm(s)) {
        moved.apply(old.as_mut(), s, schemas, &keys);
    }
    // The new instance has seen the watermarks only (it owned no bins).
    for s in steps[..new_wm].iter().filter(is_wm) {
        moved.apply(new.as_mut(), s, schemas, &keys);
    }
    let bins: Vec<u32> = (0..BINS).collect();
    let exported = old.export_bins(&bins).expect("exports");
    assert!(exported.iter().any(|e| !e.is_empty()), "some state moved");
    for (bin, entries) in bins.iter().zip(exported) {
        moved.with(|ctx| new.install_bin(*bin, entries, ctx).expect("installs"));
    }
    // The old instance keeps getting watermarks, and must emit nothing.
    let before = moved.rows.len();
    for s in steps[cut..].iter().filter(is_wm) {
        moved.apply(old.as_mut(), s, schemas, &keys);
    }
    finish(&mut moved, old.as_mut());
    assert_eq!(
        moved.rows.len(),
        before,
        "the exporter emitted after export"
    );
    // The new one gets the watermarks it missed, then the rest.
    for s in steps[new_wm.min(resume)..resume].iter().filter(is_wm) {
        moved.apply(new.as_mut(), s, schemas, &keys);
    }
    for s in &steps[resume..] {
        moved.apply(new.as_mut(), s, schemas, &keys);
    }
    finish(&mut moved, new.as_mut());

    reference.rows.sort();
    moved.rows.sort();
    assert!(!reference.rows.is_empty());
    if moved.rows != reference.rows {
        let only = |a: &[String], b: &[String]| -> Vec<String> {
            a.iter()
                .filter(|r| !b.contains(r))
                .take(5)
                .cloned()
                .collect()
        };
        panic!(
            "{op_toml} (skew {skew}): {} rows moved, {} reference; only moved: {:?}; only reference: {:?}",
            moved.rows.len(),
            reference.rows.len(),
            only(&moved.rows, &reference.rows),
            only(&reference.rows, &moved.rows)
        );
    }
}

const TUMBLING: &str = r#"[transforms.op]
type = "window"
inputs = ["a"]
key = ["key"]
window = { kind = "tumbling", size = "500ms", allowed_lateness = "300ms" }
aggregates = { n = "count(*)", s = "sum(value)", l = "last(value)" }"#;

const HOPPING: &str = r#"[transforms.op]
type = "window"
inputs = ["a"]
key = ["key"]
window = { kind = "hopping", size = "600ms", slide = "200ms" }
aggregates = { n = "count(*)", s = "sum(value)" }"#;

const SESSION: &str = r#"[transforms.op]
type = "window"
inputs = ["a"]
key = ["key"]
window = { kind = "session", gap = "150ms", allowed_lateness = "300ms" }
aggregates = { n = "count(*)", s = "sum(value)" }"#;

const TUMBLING_JOIN: &str = r#"[transforms.op]
type = "join"
inputs = ["a", "b"]
left_on = ["key"]
right_on = ["key"]
window = { kind = "tumbling", size = "500ms" }"#;

const INTERVAL_JOIN: &str = r#"[transforms.op]
type = "join"
inputs = ["a", "b"]
left_on = ["key"]
right_on = ["key"]
within = "200ms""#;

#[test]
fn tumbling_window_bins_move_without_changing_the_output() {
    for skew in [0, 1, 3, -1, -3] {
        check(TUMBLING, 1, skew);
    }
}

/// A window without allowed lateness over bins far over its cache.
const TUMBLING_SPILLED: &str = r#"[transforms.op]
type = "window"
inputs = ["a"]
key = ["key"]
window = { kind = "tumbling", size = "500ms" }
aggregates = { n = "count(*)", s = "sum(value)", l = "last(value)" }"#;

/// Bins move between instances whose state is far over their cache: keys
/// the exporter had emitted and records for them since (as partial
/// aggregates, or reloaded whole with allowed lateness) give the rows an
/// instance that kept everything in memory gives.
#[test]
fn window_bins_move_without_changing_the_output_with_state_spilled() {
    for op_toml in [TUMBLING_SPILLED, TUMBLING, HOPPING] {
        let (make, schemas) = operator(op_toml);
        for skew in [0, 1, 3, -1, -3] {
            let (_dir, moving) = spilling(op_toml);
            check_made(op_toml, &make, &moving, &schemas, 1, skew);
        }
    }
}

#[test]
fn hopping_window_bins_move_without_changing_the_output() {
    for skew in [0, 2, -2] {
        check(HOPPING, 1, skew);
    }
}

#[test]
fn session_bins_move_without_changing_the_output() {
    for skew in [0, 2, -2] {
        check(SESSION, 1, skew);
    }
}

#[test]
fn join_bins_move_without_changing_the_output() {
    for skew in [0, 2, -2] {
        check(TUMBLING_JOIN, 2, skew);
        check(INTERVAL_JOIN, 2, skew);
    }
}

/// A window over two int-keyed windows' worth of rows whose state is far
/// over its cache budget, so most bins are spilled to the store (and come
/// back, reusing the key slots evicted ones left).
struct Spilled {
    plan: std::sync::Arc<crate::plan::WindowPlan>,
    schema: SchemaRef,
    _dir: tempfile::TempDir,
    checkpoints: std::sync::Arc<crate::exec::checkpoint::Checkpoints>,
}

impl Spilled {
    fn new() -> Spilled {
        let (op, schemas) = spec(TUMBLING);
        let OpSpec::Window(plan) = op else {
            unreachable!("a window")
        };
        let (dir, checkpoints) = spill_store();
        Spilled {
            plan,
            schema: schemas[0].clone(),
            _dir: dir,
            checkpoints,
        }
    }

    /// A window instance; with `budget`, its state spills beyond that.
    fn window(&self, op: &str, budget: Option<u64>) -> super::Window<crate::data::WordKey<1>> {
        let state = budget.map(|bytes| super::StateAccess {
            checkpoints: self.checkpoints.clone(),
            op: op.into(),
            budget: crate::exec::live::CacheBudget::fixed(bytes),
        });
        super::Window::new(self.plan.clone(), BINS, 64, state)
    }

    /// Feeds 2000 keys in each of two windows (4000 entries).
    fn feed(&self, op: &mut dyn Operator, h: &mut Harness) {
        let rows: Vec<(i64, i64, i64)> = (0..4000)
            .map(|i| (i % 2000, i, (i / 2000) * 500 + 10))
            .collect();
        for chunk in rows.chunks(100) {
            let b = batch(&self.schema, &self.plan.key, chunk);
            h.with(|ctx| op.on_batch(0, b, ctx));
        }
    }

    /// A window fed over a 64 KiB budget (it spills, checked) and the same
    /// fed in memory, each with the harness that saw its output.
    fn fed(&self) -> [(super::Window<crate::data::WordKey<1>>, Harness); 2] {
        [Some(64 << 10), None].map(|budget| {
            let (mut op, mut h) = (self.window("op", budget), Harness::new());
            self.feed(&mut op, &mut h);
            let evictions = h
                .metrics
                .state_evictions
                .load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(budget.is_some(), evictions > 16, "{evictions} evictions");
            (op, h)
        })
    }
}

#[test]
fn spilled_window_state_fires_as_in_memory_state_does() {
    let [(mut spilled, mut a), (mut reference, mut r)] = Spilled::new().fed();
    same_rows_at_end((&mut spilled, &mut a), (&mut reference, &mut r));
}

/// Far over its budget, a window takes records for bins out of memory as
/// partial aggregates and never reads a bin back for a record. A
/// checkpoint merges every such bin's pieces into one version; an
/// instance restored from that checkpoint fires the rows the in-memory
/// state does.
#[test]
fn partial_aggregates_merge_into_one_version_per_bin_at_a_checkpoint() {
    use std::sync::atomic::Ordering::Relaxed;
    let s = Spilled::new();
    let [(mut spilled, a), (mut reference, mut r)] = s.fed();
    assert_eq!(a.metrics.state_loads.load(Relaxed), 0, "no bin read back");
    let snapshot = spilled.snapshot(1);
    assert!(snapshot.failure.is_none());
    assert!(
        snapshot.spilled.len() > BINS as usize / 2,
        "{} bins adopted",
        snapshot.spilled.len()
    );
    let store = s.checkpoints.store();
    let mut restored = s.window("restored", None);
    let mut bins = std::collections::BTreeSet::new();
    for (bin, record) in &snapshot.spilled {
        assert!(bins.insert(*bin), "bin {bin} twice");
        let entries: Vec<(Vec<u8>, Vec<u8>)> = store
            .read_bin("op", record)
            .flat_map(|c| c.expect("a chunk reads").entries)
            .collect();
        restored.restore(*bin, entries).expect("restores");
    }
    for (bin, entries) in snapshot.bins {
        assert!(bins.insert(bin), "bin {bin} twice");
        let entries = entries
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        restored.restore(bin, entries).expect("restores");
    }
    let mut h = Harness::new();
    same_rows_at_end((&mut restored, &mut h), (&mut reference, &mut r));
}

/// A firing's rows go downstream while it builds them: a call never holds
/// more than `FORWARD_AT` batches, in memory or with the state spilled.
#[test]
fn a_firing_hands_its_rows_downstream_as_it_builds_them() {
    use crate::exec::operator::FORWARD_AT;
    for (mut op, mut h) in Spilled::new().fed() {
        let before = h.forwards;
        h.with(|ctx| op.on_watermark(WATERMARK_END, ctx));
        // 4000 rows in batches of 64: 63 batches.
        assert!(
            h.forwards - before >= 63 / FORWARD_AT,
            "{} forwards",
            h.forwards
        );
        assert!(h.most_held <= FORWARD_AT, "{} batches held", h.most_held);
        assert_eq!(h.rows.len(), 4000);
    }
}

/// `[state] cache_bytes` bounds the memory a window's state takes, not
/// only its count of keys: its tables and per-key arrays, as allocated,
/// stay within the budget after every batch, while a window far over it
/// fills, the next one opens beside it, and both fire. Keys counted at a
/// full table's size let the tables reach three times the budget (a
/// 64 MiB cache held 112 MiB of window state, at 100 k records/s over 1 M
/// keys).
#[test]
fn window_state_memory_stays_within_the_cache_budget() {
    const BUDGET: u64 = 256 << 10;
    const KEYS: i64 = 20_000;
    let s = Spilled::new();
    let mut op = s.window("op", Some(BUDGET));
    let mut reference = s.window("reference", None);
    let (mut h, mut r) = (Harness::new(), Harness::new());
    // Two windows of KEYS keys each (`[0, 500)` and `[500, 1000)`), fed
    // in turns so both are open and filling at once.
    let rows: Vec<(i64, i64, i64)> = (0..2 * KEYS)
        .map(|i| ((i / 2 * 7919) % KEYS, i, (i % 2) * 500 + 10))
        .collect();
    let mut most = 0;
    for chunk in rows.chunks(200) {
        let b = batch(&s.schema, &s.plan.key, chunk);
        h.with(|ctx| op.on_batch(0, b.clone(), ctx));
        r.with(|ctx| reference.on_batch(0, b, ctx));
        most = most.max(op.heap_bytes());
        assert!(
            op.heap_bytes() <= BUDGET,
            "{} bytes of window state over a budget of {BUDGET}",
            op.heap_bytes()
        );
    }
    assert!(most > BUDGET / 4, "the budget was used: {most} bytes");
    let [got, want] = [(&mut op, &mut h), (&mut reference, &mut r)].map(|(op, h)| {
        h.with(|ctx| op.on_watermark(WATERMARK_END, ctx));
        let mut rows = std::mem::take(&mut h.rows);
        rows.sort();
        rows
    });
    assert_eq!(want.len(), 2 * KEYS as usize);
    assert!(got == want, "the spilled window's rows differ");
}

/// Both operators fire everything; `got` emits the 4000 rows `want` does.
fn same_rows_at_end<'a>(
    got: (&'a mut dyn Operator, &'a mut Harness),
    want: (&'a mut dyn Operator, &'a mut Harness),
) {
    let [got, want] = [got, want].map(|(op, h)| {
        h.with(|ctx| op.on_watermark(WATERMARK_END, ctx));
        let mut rows = std::mem::take(&mut h.rows);
        rows.sort();
        rows
    });
    assert_eq!(want.len(), 4000);
    assert_eq!(got, want);
}

/// Exporting bins of a window whose state is mostly spilled returns
/// exactly those bins' keys, each once: one bin at a time (through the
/// bin's list of keys) and half the bins at once (one pass over the
/// table). Installed elsewhere, they give the rows the whole state gives,
/// and the exporter is left with nothing.
#[test]
fn window_export_returns_exactly_the_bins_keys_with_state_spilled() {
    let s = Spilled::new();
    let [(mut spilled, mut a), (mut reference, mut r)] = s.fed();

    let mut exported = Vec::new();
    for bin in 0..BINS / 2 {
        let mut one = spilled.export_bins(&[bin]).expect("exports");
        assert_eq!(one.len(), 1);
        exported.push((bin, one.pop().expect("one bin")));
    }
    let rest: Vec<u32> = (BINS / 2..BINS).collect();
    let many = spilled.export_bins(&rest).expect("exports");
    exported.extend(rest.iter().copied().zip(many));

    let mut seen = std::collections::HashSet::new();
    let mut installed = s.window("other", None);
    let mut moved = Harness::new();
    for (bin, entries) in exported {
        assert!(!entries.is_empty(), "bin {bin} holds keys");
        for (key, _) in entries.iter() {
            let hash = s.plan.key.hash_encoded(&key[8..]);
            assert_eq!(
                crate::kernel::hash::bin_of(hash, BINS),
                bin,
                "bin {bin} exported a key of another bin"
            );
            assert!(seen.insert(key.to_vec()), "a key exported twice");
        }
        moved.with(|ctx| installed.install_bin(bin, entries, ctx).expect("installs"));
    }
    assert_eq!(seen.len(), 4000, "every key of both windows, once");
    a.with(|ctx| spilled.on_watermark(WATERMARK_END, ctx));
    assert_eq!(a.rows, Vec::<String>::new(), "the exporter kept no state");
    same_rows_at_end((&mut installed, &mut moved), (&mut reference, &mut r));
}

/// Keys an exporter had emitted stay emitted through the importer's
/// store: installed where their window has not fired, evicted there to
/// the store, read back to be exported again and installed a third time,
/// they are not emitted again when their window fires there.
#[test]
fn keys_emitted_before_a_move_stay_emitted_through_the_store() {
    let s = Spilled::new();
    let all: Vec<u32> = (0..BINS).collect();
    let (mut first, mut f) = (s.window("first", None), Harness::new());
    s.feed(&mut first, &mut f);
    // The first of the two windows fires (it stays open for lateness).
    f.with(|ctx| first.on_watermark(499, ctx));
    assert_eq!(f.rows.len(), 2000, "the first window fired");

    let (mut second, mut g) = (s.window("second", Some(64 << 10)), Harness::new());
    for (bin, entries) in all.iter().zip(first.export_bins(&all).expect("exports")) {
        g.with(|ctx| second.install_bin(*bin, entries, ctx).expect("installs"));
    }
    let evicted = g
        .metrics
        .state_evictions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(evicted > 0, "the importer spilled bins");

    let (mut third, mut t) = (s.window("third", None), Harness::new());
    for (bin, entries) in all.iter().zip(second.export_bins(&all).expect("exports")) {
        t.with(|ctx| third.install_bin(*bin, entries, ctx).expect("installs"));
    }
    g.with(|ctx| second.on_watermark(WATERMARK_END, ctx));
    t.with(|ctx| third.on_watermark(WATERMARK_END, ctx));
    assert_eq!(g.rows, Vec::<String>::new(), "the second kept nothing");

    let (mut reference, mut r) = (s.window("reference", None), Harness::new());
    s.feed(&mut reference, &mut r);
    r.with(|ctx| reference.on_watermark(499, ctx));
    r.with(|ctx| reference.on_watermark(WATERMARK_END, ctx));
    let mut got = [f.rows, t.rows].concat();
    got.sort();
    r.rows.sort();
    assert_eq!(r.rows.len(), 4000);
    assert_eq!(got, r.rows, "every key emitted once");
}

/// The per-bin state size the controller reads (`eddy_bin_state_bytes`)
/// follows keys as they arrive, as bins leave and as they are installed
/// elsewhere: the bytes of a bin are its keys (summed over open windows)
/// times the operator's bytes per key.
#[test]
fn bin_state_bytes_follow_keys_and_moves() {
    let s = Spilled::new();
    let published = |op: &mut super::Window<crate::data::WordKey<1>>, h: &mut Harness| {
        // Tests count on every watermark (`RECOUNT_INTERVAL`); this one
        // fires nothing.
        h.with(|ctx| op.on_watermark(-1, ctx));
        h.metrics
            .bin_state_bytes
            .iter()
            .map(|b| b.load(std::sync::atomic::Ordering::Relaxed))
            .collect::<Vec<u64>>()
    };
    let keys_per_bin = |keys: std::ops::Range<i64>| {
        let mut n = vec![0u64; BINS as usize];
        for k in keys {
            let mut b = BatchBuilder::new(s.schema.clone(), 1, true);
            b.column_mut(0).push_int(k);
            b.column_mut(1).push_int(0);
            b.column_mut(2).push_int(0);
            b.finish_row(0, 0);
            let hash = s.plan.key.hash_rows(&b.take())[0];
            n[crate::kernel::hash::bin_of(hash, BINS) as usize] += 1;
        }
        n
    };

    let mut op = s.window("op", None);
    let mut h = Harness::new();
    h.metrics = OpMetrics::keyed(BINS);
    s.feed(&mut op, &mut h);
    let bytes = published(&mut op, &mut h);
    // 2000 keys in each of two open windows.
    let want = keys_per_bin(0..2000);
    let per_key = bytes[0] / (2 * want[0]);
    assert!(per_key > 0);
    let twice: Vec<u64> = want.iter().map(|n| 2 * n * per_key).collect();
    assert_eq!(bytes, twice);

    let mut other = s.window("other", None);
    let mut o = Harness::new();
    o.metrics = OpMetrics::keyed(BINS);
    // One bin at a time (through its list), then a quarter at once (one
    // pass over the table).
    let mut moves: Vec<Vec<u32>> = (0..BINS / 4).map(|b| vec![b]).collect();
    moves.push((BINS / 4..BINS / 2).collect());
    for moved in moves {
        for (bin, entries) in moved.iter().zip(op.export_bins(&moved).expect("exports")) {
            o.with(|ctx| other.install_bin(*bin, entries, ctx).expect("installs"));
        }
    }
    let (left, arrived) = (published(&mut op, &mut h), published(&mut other, &mut o));
    for bin in 0..BINS as usize {
        let (here, there) = if bin < (BINS / 2) as usize {
            (0, twice[bin])
        } else {
            (twice[bin], 0)
        };
        assert_eq!((left[bin], arrived[bin]), (here, there), "bin {bin}");
    }
}
