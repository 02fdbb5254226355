//! Codec tests. Helpers here; one file per concern below.

mod decode_csv;
mod decode_json;
mod encode;
mod robustness;
mod round_trip;
mod throughput;
mod time;

use std::sync::Arc;

use super::*;
use crate::data::{Batch, BatchBuilder, DataType, Field, Schema, SchemaRef, ValueRef};

pub(super) fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields.iter().map(|&(n, t)| Field::new(n, t)).collect(),
    ))
}

/// sensor: string, temp: float, n: int, ok: bool
pub(super) fn sensors() -> SchemaRef {
    schema(&[
        ("sensor", DataType::Str),
        ("temp", DataType::Float),
        ("n", DataType::Int),
        ("ok", DataType::Bool),
    ])
}

/// sensor: string, ts: <ts_type>, v: float
pub(super) fn timed(ts_type: DataType) -> SchemaRef {
    schema(&[
        ("sensor", DataType::Str),
        ("ts", ts_type),
        ("v", DataType::Float),
    ])
}

/// Decodes `lines` (the first is the header for CSV) and returns the batch
/// and each line's result.
pub(super) fn decode_all(
    format: Format,
    schema: &SchemaRef,
    event_time: Option<usize>,
    lines: &[&[u8]],
) -> (Batch, Vec<Result<(), String>>) {
    let mut dec = Decoder::new(format, schema.clone(), event_time);
    let mut out = BatchBuilder::new(schema.clone(), 4, event_time.is_some());
    let mut results = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if dec.needs_header() {
            dec.header(line).expect("header");
            continue;
        }
        results.push(dec.decode(line, &mut out, i as u64));
        assert_builder_consistent(&mut out);
    }
    (out.take(), results)
}

pub(super) fn decode_json(schema: &SchemaRef, lines: &[&str]) -> (Batch, Vec<Result<(), String>>) {
    let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    decode_all(Format::Json, schema, None, &lines)
}

/// The reason one bad line is rejected.
pub(super) fn reject(
    format: Format,
    schema: &SchemaRef,
    event_time: Option<usize>,
    header: Option<&str>,
    line: &[u8],
) -> String {
    let mut lines: Vec<&[u8]> = header.map(str::as_bytes).into_iter().collect();
    lines.push(line);
    let (batch, results) = decode_all(format, schema, event_time, &lines);
    assert_eq!(
        batch.len(),
        0,
        "{:?} was accepted",
        String::from_utf8_lossy(line)
    );
    results.into_iter().next().unwrap().unwrap_err()
}

pub(super) fn assert_builder_consistent(out: &mut BatchBuilder) {
    let len = out.len();
    assert!(
        out.columns_mut().iter().all(|c| c.len() == len),
        "a column holds part of a row"
    );
}

pub(super) fn row(batch: &Batch, r: usize) -> Vec<ValueRef<'_>> {
    (0..batch.schema().len())
        .map(|c| batch.column(c).get(r))
        .collect()
}

pub(super) fn build(schema: &SchemaRef, rows: &[Vec<ValueRef<'_>>]) -> Batch {
    let mut b = BatchBuilder::new(schema.clone(), rows.len(), false);
    for (i, r) in rows.iter().enumerate() {
        for (c, v) in r.iter().enumerate() {
            b.column_mut(c).push_value(*v);
        }
        b.finish_row(0, i as u64);
    }
    b.take()
}

pub(super) fn encode(format: Format, batch: &Batch) -> String {
    let mut enc = Encoder::new(format);
    let mut out = Vec::new();
    enc.header(batch.schema(), &mut out);
    enc.encode(batch, &mut out);
    String::from_utf8(out).unwrap()
}

/// Columns equal, with floats compared by bits (so -0.0 ≠ 0.0).
pub(super) fn assert_same_columns(a: &Batch, b: &Batch) {
    assert_eq!(a.len(), b.len());
    for c in 0..a.schema().len() {
        for r in 0..a.len() {
            match (a.column(c).get(r), b.column(c).get(r)) {
                (ValueRef::Float(x), ValueRef::Float(y)) => {
                    assert_eq!(x.to_bits(), y.to_bits(), "row {r} col {c}: {x} vs {y}")
                }
                (x, y) => assert_eq!(x, y, "row {r} col {c}"),
            }
        }
    }
}
