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

/// The operator `op` of a pipeline reading two int-keyed files.
type Make = Box<dyn Fn() -> Box<dyn Operator>>;

fn operator(op_toml: &str) -> (Make, Vec<SchemaRef>) {
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
    let plan = crate::plan::build(&config, &mut d).unwrap_or_else(|| panic!("{}", d.render()));
    let node = plan.nodes.iter().find(|n| n.id == "op").expect("op");
    let schemas = node
        .inputs
        .iter()
        .map(|i| plan.nodes[i.from].outputs[i.from_port].schema.clone())
        .collect();
    let make: Make = match &node.op {
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
struct Harness {
    dead: DeadLetter,
    metrics: OpMetrics,
    rows: Vec<String>,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            dead: DeadLetter::new(std::env::temp_dir().join("eddy-migrate-tests-dead")),
            metrics: OpMetrics::default(),
            rows: Vec::new(),
        }
    }

    fn with(&mut self, f: impl FnOnce(&mut OpCtx<'_>)) {
        let mut out = Vec::new();
        let mut ctx = OpCtx {
            out: &mut out,
            component: "op",
            metrics: &self.metrics,
            dead_letter: &self.dead,
            blocked_ns: 0,
            failure: None,
        };
        f(&mut ctx);
        assert_eq!(ctx.failure, None);
        for (port, b) in out {
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

/// `skew`: how many watermarks the new instance is behind (negative:
/// ahead) the old one when the bins move.
fn check(op_toml: &str, ports: usize, skew: i64) {
    let (make, schemas) = operator(op_toml);
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
        reference.apply(op.as_mut(), s, &schemas, &keys);
    }
    finish(&mut reference, op.as_mut());

    let mut moved = Harness::new();
    let mut old = make();
    let mut new = make();
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
        moved.apply(old.as_mut(), s, &schemas, &keys);
    }
    for s in steps[cut..resume].iter().filter(|s| !is_wm(s)) {
        moved.apply(old.as_mut(), s, &schemas, &keys);
    }
    // The new instance has seen the watermarks only (it owned no bins).
    for s in steps[..new_wm].iter().filter(is_wm) {
        moved.apply(new.as_mut(), s, &schemas, &keys);
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
        moved.apply(old.as_mut(), s, &schemas, &keys);
    }
    finish(&mut moved, old.as_mut());
    assert_eq!(
        moved.rows.len(),
        before,
        "the exporter emitted after export"
    );
    // The new one gets the watermarks it missed, then the rest.
    for s in steps[new_wm.min(resume)..resume].iter().filter(is_wm) {
        moved.apply(new.as_mut(), s, &schemas, &keys);
    }
    for s in &steps[resume..] {
        moved.apply(new.as_mut(), s, &schemas, &keys);
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
