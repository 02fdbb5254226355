//! Batches on the wire between nodes: postcard, columns as they are (one
//! vector per column, strings back to back), checked against the schema
//! the receiver expects, so a peer running another pipeline is refused with
//! a reason instead of crashing a worker.
//!
//! Ingestion times are on each process's own clock: a batch carries each
//! row's age instead, and the receiver turns it back into a time on its
//! clock (end-to-end latency then counts the time spent in flight, less
//! the clock offset, which is none for ages).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Batch, Column, DataType, SchemaRef};

#[derive(Serialize)]
pub(crate) struct ColumnRef<'a> {
    pub(crate) values: ValuesRef<'a>,
    pub(crate) nulls: Option<&'a [u64]>,
}

#[derive(Serialize)]
pub(crate) enum ValuesRef<'a> {
    Bool(&'a [bool]),
    Int(&'a [i64]),
    Float(&'a [f64]),
    Str { offsets: &'a [u32], data: &'a str },
}

/// Same layout as [`ColumnRef`], owned.
#[derive(Deserialize)]
pub(crate) struct WireColumn {
    pub(crate) values: WireValues,
    pub(crate) nulls: Option<Vec<u64>>,
}

#[derive(Deserialize)]
pub(crate) enum WireValues {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    Float(Vec<f64>),
    Str { offsets: Vec<u32>, data: String },
}

#[derive(Serialize)]
struct BatchRef<'a> {
    len: u32,
    event_time: &'a [i64],
    age_ns: Vec<u64>,
    key_hash: &'a [u64],
    columns: Vec<ColumnRef<'a>>,
}

#[derive(Deserialize)]
struct WireBatch {
    len: u32,
    event_time: Vec<i64>,
    age_ns: Vec<u64>,
    key_hash: Vec<u64>,
    columns: Vec<WireColumn>,
}

/// Appends `batch` to `out`. `now_ns` is the sender's process clock.
pub(crate) fn encode(batch: &Batch, now_ns: u64, out: &mut Vec<u8>) {
    let wire = BatchRef {
        len: batch.len() as u32,
        event_time: batch.event_time(),
        age_ns: batch
            .ingest_ns()
            .iter()
            .map(|&t| now_ns.saturating_sub(t))
            .collect(),
        key_hash: batch.key_hash(),
        columns: batch.columns().iter().map(|c| c.wire()).collect(),
    };
    let taken = std::mem::take(out);
    // Serialising to a Vec fails only when memory does.
    *out = postcard::to_extend(&wire, taken).expect("encoding a batch");
}

/// Decodes a batch of `schema`; `now_ns` is the receiver's process clock.
/// Says what is wrong if the bytes are not such a batch.
pub(crate) fn decode(bytes: &[u8], schema: &SchemaRef, now_ns: u64) -> Result<Batch, String> {
    let wire: WireBatch = postcard::from_bytes(bytes).map_err(|e| format!("not a batch: {e}"))?;
    let len = wire.len as usize;
    if wire.columns.len() != schema.len() {
        return Err(format!(
            "a batch of {} columns where the schema has {} ({})",
            wire.columns.len(),
            schema.len(),
            schema.describe()
        ));
    }
    if wire.age_ns.len() != len
        || !(wire.event_time.is_empty() || wire.event_time.len() == len)
        || !(wire.key_hash.is_empty() || wire.key_hash.len() == len)
    {
        return Err(format!("row metadata does not match the {len} rows"));
    }
    let columns = wire
        .columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            Column::from_wire(c, f.ty, len)
                .map(Arc::new)
                .map_err(|e| format!("field `{}`: {e}", f.name))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ingest = wire
        .age_ns
        .iter()
        .map(|&a| now_ns.saturating_sub(a))
        .collect();
    let mut batch = Batch::new(schema.clone(), columns, wire.event_time, ingest);
    if !wire.key_hash.is_empty() {
        batch.set_key_hash(wire.key_hash);
    }
    Ok(batch)
}

/// The name of a wire column's type, for errors.
pub(crate) fn type_of(v: &WireValues) -> DataType {
    match v {
        WireValues::Bool(_) => DataType::Bool,
        WireValues::Int(_) => DataType::Int,
        WireValues::Float(_) => DataType::Float,
        WireValues::Str { .. } => DataType::Str,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{BatchBuilder, Field, Schema, ValueRef};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("s", DataType::Str),
            Field::new("i", DataType::Int),
            Field::new("f", DataType::Float),
            Field::new("b", DataType::Bool),
        ]))
    }

    fn sample() -> Batch {
        let mut b = BatchBuilder::new(schema(), 4, true);
        for r in 0..100i64 {
            let c = b.columns_mut();
            if r % 7 == 0 {
                c[0].push_null();
            } else {
                c[0].push_str(&format!("key-{r}-é"));
            }
            c[1].push_int(r * 1000 - 5);
            if r % 5 == 0 {
                c[2].push_null();
            } else {
                c[2].push_float(r as f64 / 3.0);
            }
            c[3].push_bool(r % 2 == 0);
            b.finish_row(1_000 + r, 10_000 + r as u64);
        }
        let mut batch = b.take();
        batch.set_key_hash((0..100u64).map(|h| h * 31).collect());
        batch
    }

    #[test]
    fn round_trip_keeps_rows_times_and_hashes() {
        let batch = sample();
        let mut bytes = Vec::new();
        encode(&batch, 20_000, &mut bytes);
        let back = decode(&bytes, &schema(), 50_000).expect("decodes");
        assert_eq!(back.len(), 100);
        for c in 0..4 {
            for r in 0..100 {
                assert_eq!(back.column(c).get(r), batch.column(c).get(r), "{c} {r}");
            }
        }
        assert_eq!(back.event_time(), batch.event_time());
        assert_eq!(back.key_hash(), batch.key_hash());
        // Same age on the receiver's clock.
        assert_eq!(back.ingest_ns()[3], 50_000 - (20_000 - 10_003));
        assert_eq!(back.column(0).get(7), ValueRef::Null);
    }

    #[test]
    fn mismatches_and_garbage_are_refused() {
        let mut bytes = Vec::new();
        encode(&sample(), 0, &mut bytes);
        let other = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Int),
            Field::new("i", DataType::Int),
            Field::new("f", DataType::Float),
            Field::new("b", DataType::Bool),
        ]));
        let e = decode(&bytes, &other, 0).unwrap_err();
        assert!(e.contains("field `s`"), "{e}");
        let narrow = Arc::new(Schema::new(vec![Field::new("s", DataType::Str)]));
        assert!(decode(&bytes, &narrow, 0).unwrap_err().contains("columns"));
        // Random mutations never panic.
        let mut x: u64 = 0x9e37_79b9;
        for _ in 0..2000 {
            let mut m = bytes.clone();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % m.len() as u64) as usize;
                m[i] = (x >> 32) as u8;
            }
            let _ = decode(&m, &schema(), 0);
        }
    }
}
