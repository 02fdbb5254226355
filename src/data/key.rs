//! Grouping keys: encoding a record's key fields into bytes, hashing them to
//! a bin, and decoding them back into output columns.
//!
//! The encoding is canonical (equal keys give equal bytes, `-0.0` equals
//! `0.0`, all NaNs are one) so bytes can be compared and hashed directly.

use super::{Batch, Column, DataType, ValueRef};
use crate::kernel::hash::key_hash;

const NULL: u8 = 0;
const PRESENT: u8 = 1;

/// Which columns of a stream form its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeySpec {
    columns: Vec<usize>,
    types: Vec<DataType>,
}

impl KeySpec {
    pub(crate) fn new(columns: Vec<usize>, types: Vec<DataType>) -> KeySpec {
        debug_assert_eq!(columns.len(), types.len());
        KeySpec { columns, types }
    }

    pub(crate) fn types(&self) -> &[DataType] {
        &self.types
    }

    /// Appends the encoded key of `row` to `out`.
    #[inline]
    pub(crate) fn encode(&self, batch: &Batch, row: usize, out: &mut Vec<u8>) {
        for &c in &self.columns {
            encode_value(batch.column(c).get(row), out);
        }
    }

    /// The stable hash of every row's key, reusing `scratch`.
    pub(crate) fn hash_rows(&self, batch: &Batch, scratch: &mut Vec<u8>) -> Vec<u64> {
        let mut hashes = Vec::with_capacity(batch.len());
        // A single non-null int key is the common case (ids, sensors); skip
        // the generic walk for it.
        if let [c] = self.columns[..] {
            let col = batch.column(c);
            if self.types[0] == DataType::Int && !col.has_nulls() {
                let mut buf = [0u8; 9];
                buf[0] = PRESENT;
                for &v in col.ints() {
                    buf[1..].copy_from_slice(&v.to_le_bytes());
                    hashes.push(key_hash(&buf));
                }
                return hashes;
            }
        }
        for row in 0..batch.len() {
            scratch.clear();
            self.encode(batch, row, scratch);
            hashes.push(key_hash(scratch));
        }
        hashes
    }

    /// Appends the key fields encoded in `key` to `columns` (one per key
    /// field, of the key's types).
    pub(crate) fn decode_into(&self, mut key: &[u8], columns: &mut [&mut Column]) {
        for (ty, col) in self.types.iter().zip(columns.iter_mut()) {
            let (tag, rest) = key.split_first().expect("truncated key");
            key = rest;
            if *tag == NULL {
                col.push_null();
                continue;
            }
            match ty {
                DataType::Bool => {
                    col.push_bool(key[0] != 0);
                    key = &key[1..];
                }
                DataType::Int => {
                    col.push_int(i64::from_le_bytes(key[..8].try_into().unwrap()));
                    key = &key[8..];
                }
                DataType::Float => {
                    col.push_float(f64::from_bits(u64::from_le_bytes(
                        key[..8].try_into().unwrap(),
                    )));
                    key = &key[8..];
                }
                DataType::Str => {
                    let n = u32::from_le_bytes(key[..4].try_into().unwrap()) as usize;
                    let s = std::str::from_utf8(&key[4..4 + n]).expect("key holds utf-8");
                    col.push_str(s);
                    key = &key[4 + n..];
                }
            }
        }
    }
}

/// Appends one value in the canonical key encoding.
#[inline]
pub(crate) fn encode_value(v: ValueRef<'_>, out: &mut Vec<u8>) {
    match v {
        ValueRef::Null => out.push(NULL),
        ValueRef::Bool(b) => out.extend_from_slice(&[PRESENT, b as u8]),
        ValueRef::Int(x) => {
            out.push(PRESENT);
            out.extend_from_slice(&x.to_le_bytes());
        }
        ValueRef::Float(x) => {
            let canonical = if x == 0.0 {
                0.0f64
            } else if x.is_nan() {
                f64::NAN
            } else {
                x
            };
            out.push(PRESENT);
            out.extend_from_slice(&canonical.to_bits().to_le_bytes());
        }
        ValueRef::Str(s) => {
            out.push(PRESENT);
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{BatchBuilder, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn keys_round_trip_and_int_fast_path_matches_generic() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int),
            Field::new("s", DataType::Str),
            Field::new("f", DataType::Float),
        ]));
        let mut b = BatchBuilder::new(schema, 4, false);
        for (k, s, f) in [(1, Some("a"), -0.0), (-7, None, 2.5)] {
            b.column_mut(0).push_int(k);
            match s {
                Some(s) => b.column_mut(1).push_str(s),
                None => b.column_mut(1).push_null(),
            }
            b.column_mut(2).push_float(f);
            b.finish_row(0, 0);
        }
        let batch = b.take();
        let spec = KeySpec::new(
            vec![0, 1, 2],
            vec![DataType::Int, DataType::Str, DataType::Float],
        );
        let mut cols = [
            Column::new(DataType::Int, 2),
            Column::new(DataType::Str, 2),
            Column::new(DataType::Float, 2),
        ];
        for row in 0..2 {
            let mut key = Vec::new();
            spec.encode(&batch, row, &mut key);
            let [a, b, c] = &mut cols;
            spec.decode_into(&key, &mut [a, b, c]);
        }
        assert_eq!(cols[0].ints(), &[1, -7]);
        assert_eq!(cols[1].get(0), ValueRef::Str("a"));
        assert!(cols[1].is_null(1));
        assert_eq!(cols[2].float(0), Some(0.0));

        let single = KeySpec::new(vec![0], vec![DataType::Int]);
        let fast = single.hash_rows(&batch, &mut Vec::new());
        for (row, h) in fast.iter().enumerate() {
            let mut key = Vec::new();
            single.encode(&batch, row, &mut key);
            assert_eq!(*h, key_hash(&key));
        }
    }
}
