//! Grouping keys: hashing a record's key fields to a bin, holding keys in
//! operator state, and writing them back into output columns.
//!
//! Two representations, chosen once per operator from the key's types:
//! [`WordKey`] for up to two fixed-width fields (ids, sensors numbered by
//! int), held and compared as machine words; [`ByteKey`] for everything
//! else, a canonical byte encoding (equal keys give equal bytes, `-0.0`
//! equals `0.0`, all NaNs are one).

use super::{Batch, Column, DataType, ValueRef};
use crate::kernel::hash::{KeyHasher, canonical_float_bits};

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

    /// The number of fields if keys fit a [`WordKey`] (fixed-width fields,
    /// at most two), else `None`.
    pub(crate) fn word_fields(&self) -> Option<usize> {
        let fixed = self.types.iter().all(|t| *t != DataType::Str);
        (fixed && self.types.len() <= 2).then_some(self.types.len())
    }

    /// The stable hash of row `row`'s key.
    #[inline]
    pub(crate) fn hash_row(&self, batch: &Batch, row: usize) -> u64 {
        let mut h = KeyHasher::new();
        for &c in &self.columns {
            match batch.column(c).get(row) {
                ValueRef::Null => h.null(),
                ValueRef::Bool(b) => h.bool(b),
                ValueRef::Int(i) => h.int(i),
                ValueRef::Float(f) => h.float(f),
                ValueRef::Str(s) => h.str(s.as_bytes()),
            }
        }
        h.finish()
    }

    /// The stable hash of every row's key.
    pub(crate) fn hash_rows(&self, batch: &Batch) -> Vec<u64> {
        // A single non-null int key is the common case (ids): a tight loop.
        if let [c] = self.columns[..] {
            let col = batch.column(c);
            if self.types[0] == DataType::Int && !col.has_nulls() {
                return col
                    .ints()
                    .iter()
                    .map(|&v| {
                        let mut h = KeyHasher::new();
                        h.int(v);
                        h.finish()
                    })
                    .collect();
            }
        }
        (0..batch.len())
            .map(|row| self.hash_row(batch, row))
            .collect()
    }

    /// The hash of an encoded key: the same as [`KeySpec::hash_row`] of the
    /// row it was encoded from.
    pub(crate) fn hash_encoded(&self, key: &[u8]) -> u64 {
        let mut cols: Vec<Column> = self.types.iter().map(|t| Column::new(*t, 1)).collect();
        self.decode_into(key, &mut cols);
        let mut h = KeyHasher::new();
        for col in &cols {
            match col.get(0) {
                ValueRef::Null => h.null(),
                ValueRef::Bool(b) => h.bool(b),
                ValueRef::Int(i) => h.int(i),
                ValueRef::Float(f) => h.float(f),
                ValueRef::Str(s) => h.str(s.as_bytes()),
            }
        }
        h.finish()
    }

    /// Appends the canonical encoding of row `row`'s key to `out`.
    #[inline]
    pub(crate) fn encode(&self, batch: &Batch, row: usize, out: &mut Vec<u8>) {
        for &c in &self.columns {
            encode_value(batch.column(c).get(row), out);
        }
    }

    /// Appends the key fields encoded in `key` to `columns` (one per key
    /// field, of the key's types).
    pub(crate) fn decode_into(&self, mut key: &[u8], columns: &mut [Column]) {
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
                    col.push_int(i64::from_le_bytes(key[..8].try_into().expect("8 bytes")));
                    key = &key[8..];
                }
                DataType::Float => {
                    col.push_float(f64::from_bits(u64::from_le_bytes(
                        key[..8].try_into().expect("8 bytes"),
                    )));
                    key = &key[8..];
                }
                DataType::Str => {
                    let n = u32::from_le_bytes(key[..4].try_into().expect("4 bytes")) as usize;
                    col.push_str(std::str::from_utf8(&key[4..4 + n]).expect("keys hold UTF-8"));
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
            out.push(PRESENT);
            out.extend_from_slice(&canonical_float_bits(x).to_le_bytes());
        }
        ValueRef::Str(s) => {
            out.push(PRESENT);
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// A key as operator state holds it.
pub(crate) trait GroupKey: Sized + Send + PartialEq + 'static {
    /// A row's key, ready to compare with stored keys.
    type Probe<'a>;

    /// The key of row `row`; `scratch` is reused between rows.
    fn probe<'a>(
        spec: &KeySpec,
        batch: &Batch,
        row: usize,
        scratch: &'a mut Vec<u8>,
    ) -> Self::Probe<'a>;

    fn matches(&self, probe: &Self::Probe<'_>) -> bool;

    fn store(probe: &Self::Probe<'_>) -> Self;

    /// Appends the key's fields to `columns` (one per key field).
    fn decode_into(&self, spec: &KeySpec, columns: &mut [Column]);

    /// Appends the key's canonical encoding (what checkpoints store).
    fn encode(&self, spec: &KeySpec, out: &mut Vec<u8>);

    /// The key from its canonical encoding.
    fn from_encoded(spec: &KeySpec, bytes: &[u8]) -> Self;
}

/// `N` fixed-width fields as words, with a null mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WordKey<const N: usize> {
    words: [u64; N],
    nulls: u8,
}

impl<const N: usize> GroupKey for WordKey<N> {
    type Probe<'a> = WordKey<N>;

    #[inline]
    fn probe(spec: &KeySpec, batch: &Batch, row: usize, _scratch: &mut Vec<u8>) -> WordKey<N> {
        let mut key = WordKey {
            words: [0; N],
            nulls: 0,
        };
        for (i, (&c, ty)) in spec.columns.iter().zip(&spec.types).enumerate() {
            let col = batch.column(c);
            let word = match ty {
                DataType::Int => col.int(row).map(|v| v as u64),
                DataType::Float => col.float(row).map(canonical_float_bits),
                DataType::Bool => col.bool(row).map(u64::from),
                DataType::Str => None,
            };
            match word {
                Some(w) => key.words[i] = w,
                None => key.nulls |= 1 << i,
            }
        }
        key
    }

    #[inline]
    fn matches(&self, probe: &WordKey<N>) -> bool {
        self == probe
    }

    #[inline]
    fn store(probe: &WordKey<N>) -> WordKey<N> {
        *probe
    }

    fn encode(&self, spec: &KeySpec, out: &mut Vec<u8>) {
        for (i, ty) in spec.types.iter().enumerate() {
            let w = self.words[i];
            let v = match (self.nulls >> i & 1 == 1, ty) {
                (true, _) => ValueRef::Null,
                (_, DataType::Int) => ValueRef::Int(w as i64),
                (_, DataType::Float) => ValueRef::Float(f64::from_bits(w)),
                (_, DataType::Bool) => ValueRef::Bool(w != 0),
                (_, DataType::Str) => unreachable!("string keys are byte keys"),
            };
            encode_value(v, out);
        }
    }

    fn from_encoded(spec: &KeySpec, bytes: &[u8]) -> Self {
        let mut cols: Vec<Column> = spec.types.iter().map(|t| Column::new(*t, 1)).collect();
        spec.decode_into(bytes, &mut cols);
        let mut key = WordKey {
            words: [0; N],
            nulls: 0,
        };
        for (i, col) in cols.iter().enumerate() {
            match col.get(0) {
                ValueRef::Int(v) => key.words[i] = v as u64,
                ValueRef::Float(f) => key.words[i] = canonical_float_bits(f),
                ValueRef::Bool(b) => key.words[i] = u64::from(b),
                ValueRef::Null | ValueRef::Str(_) => key.nulls |= 1 << i,
            }
        }
        key
    }

    fn decode_into(&self, spec: &KeySpec, columns: &mut [Column]) {
        for (i, (ty, col)) in spec.types.iter().zip(columns.iter_mut()).enumerate() {
            if self.nulls >> i & 1 == 1 {
                col.push_null();
                continue;
            }
            let w = self.words[i];
            match ty {
                DataType::Int => col.push_int(w as i64),
                DataType::Float => col.push_float(f64::from_bits(w)),
                DataType::Bool => col.push_bool(w != 0),
                DataType::Str => unreachable!("string keys are byte keys"),
            }
        }
    }
}

/// Encodings up to this long are kept in the key itself.
const INLINE_KEY: usize = 14;

/// Any key, as its canonical encoding: short ones (a string field of up
/// to 9 bytes, or two ints) inside the key, in the same 16 bytes a boxed
/// slice takes. Boxed, each key of a window was also a 32-byte heap block
/// and a pointer to follow on every lookup: with a million sensors
/// (`"s123456"`, 12 bytes encoded) about 20 MiB of every open window, and
/// a `malloc` for every new key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ByteKey {
    /// `bytes[len..]` are zero, so that equal keys are equal values.
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    /// Boxed twice so that this variant is a thin pointer and the key
    /// stays 16 bytes.
    Heap(Box<Box<[u8]>>),
}

impl ByteKey {
    fn new(encoded: &[u8]) -> ByteKey {
        if encoded.len() <= INLINE_KEY {
            let mut bytes = [0; INLINE_KEY];
            bytes[..encoded.len()].copy_from_slice(encoded);
            ByteKey::Inline {
                len: encoded.len() as u8,
                bytes,
            }
        } else {
            ByteKey::Heap(Box::new(encoded.into()))
        }
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            ByteKey::Inline { len, bytes } => &bytes[..*len as usize],
            ByteKey::Heap(b) => b,
        }
    }
}

impl GroupKey for ByteKey {
    type Probe<'a> = &'a [u8];

    #[inline]
    fn probe<'a>(spec: &KeySpec, batch: &Batch, row: usize, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        scratch.clear();
        spec.encode(batch, row, scratch);
        scratch
    }

    #[inline]
    fn matches(&self, probe: &&[u8]) -> bool {
        self.bytes() == *probe
    }

    fn store(probe: &&[u8]) -> ByteKey {
        ByteKey::new(probe)
    }

    fn decode_into(&self, spec: &KeySpec, columns: &mut [Column]) {
        spec.decode_into(self.bytes(), columns)
    }

    fn encode(&self, _spec: &KeySpec, out: &mut Vec<u8>) {
        out.extend_from_slice(self.bytes());
    }

    fn from_encoded(_spec: &KeySpec, bytes: &[u8]) -> Self {
        ByteKey::new(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{BatchBuilder, Field, Schema};
    use std::sync::Arc;

    fn batch() -> Batch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int),
            Field::new("s", DataType::Str),
            Field::new("f", DataType::Float),
        ]));
        let mut b = BatchBuilder::new(schema, 4, false);
        for (k, s, f) in [
            (1, Some("a"), -0.0),
            (-7, None, 2.5),
            (1, Some("a"), 0.0),
            (2, Some("a name longer than a key holds inline"), 1.0),
            (2, Some("a name longer than a key holds inline"), 1.0),
        ] {
            b.column_mut(0).push_int(k);
            match s {
                Some(s) => b.column_mut(1).push_str(s),
                None => b.column_mut(1).push_null(),
            }
            b.column_mut(2).push_float(f);
            b.finish_row(0, 0);
        }
        b.take()
    }

    fn round_trip<K: GroupKey>(spec: &KeySpec, batch: &Batch) -> Vec<Column> {
        let mut cols: Vec<Column> = spec.types().iter().map(|t| Column::new(*t, 4)).collect();
        let mut scratch = Vec::new();
        let mut stored: Vec<K> = Vec::new();
        for row in 0..batch.len() {
            let probe = K::probe(spec, batch, row, &mut scratch);
            if !stored.iter().any(|k| k.matches(&probe)) {
                stored.push(K::store(&probe));
            }
        }
        for k in &stored {
            k.decode_into(spec, &mut cols);
            let mut bytes = Vec::new();
            k.encode(spec, &mut bytes);
            let back = K::from_encoded(spec, &bytes);
            let mut again = Vec::new();
            back.encode(spec, &mut again);
            assert_eq!(bytes, again, "encode ∘ from_encoded is the identity");
        }
        cols
    }

    #[test]
    fn byte_keys_round_trip_and_treat_negative_zero_as_zero() {
        let b = batch();
        let spec = KeySpec::new(
            vec![0, 1, 2],
            vec![DataType::Int, DataType::Str, DataType::Float],
        );
        let cols = round_trip::<ByteKey>(&spec, &b);
        assert_eq!(
            cols[0].ints(),
            &[1, -7, 2],
            "rows 0 and 2, 3 and 4 are one key"
        );
        assert_eq!(cols[1].get(0), ValueRef::Str("a"));
        assert_eq!(
            cols[1].get(2),
            ValueRef::Str("a name longer than a key holds inline")
        );
        assert_eq!(std::mem::size_of::<ByteKey>(), 16);
        assert!(cols[1].is_null(1));
        assert_eq!(cols[2].float(0), Some(0.0));
        assert_eq!(spec.hash_row(&b, 0), spec.hash_row(&b, 2));
        let mut encoded = Vec::new();
        spec.encode(&b, 1, &mut encoded);
        assert_eq!(spec.hash_encoded(&encoded), spec.hash_row(&b, 1));
        assert_ne!(spec.hash_row(&b, 0), spec.hash_row(&b, 1));
    }

    #[test]
    fn word_keys_round_trip() {
        let b = batch();
        let spec = KeySpec::new(vec![2, 0], vec![DataType::Float, DataType::Int]);
        assert_eq!(spec.word_fields(), Some(2));
        let cols = round_trip::<WordKey<2>>(&spec, &b);
        assert_eq!(cols[1].ints(), &[1, -7, 2]);
        assert_eq!(cols[0].float(1), Some(2.5));
    }

    #[test]
    fn the_int_fast_path_hashes_like_the_general_one() {
        let b = batch();
        let spec = KeySpec::new(vec![0], vec![DataType::Int]);
        let fast = spec.hash_rows(&b);
        for (row, h) in fast.iter().enumerate() {
            assert_eq!(*h, spec.hash_row(&b, row));
        }
    }
}
