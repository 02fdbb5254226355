//! Columns → JSON lines, one object per row in schema field order.

use std::sync::Arc;

use crate::data::{Batch, SchemaRef, ValueRef};

use super::number_text::{write_finite_float, write_int};

pub(super) struct JsonEncoder {
    /// `"name":` per field, already escaped and with its leading comma, for
    /// the schema last seen: field names are the same on every row.
    keys: Option<(SchemaRef, Vec<Vec<u8>>)>,
}

impl JsonEncoder {
    pub(super) fn new() -> JsonEncoder {
        JsonEncoder { keys: None }
    }

    pub(super) fn encode(&mut self, batch: &Batch, out: &mut Vec<u8>) {
        let keys = self.keys_for(batch.schema());
        let columns = batch.columns();
        for row in 0..batch.len() {
            out.push(b'{');
            for (key, col) in keys.iter().zip(columns) {
                out.extend_from_slice(key);
                match col.get(row) {
                    ValueRef::Null => out.extend_from_slice(b"null"),
                    ValueRef::Bool(true) => out.extend_from_slice(b"true"),
                    ValueRef::Bool(false) => out.extend_from_slice(b"false"),
                    ValueRef::Int(x) => write_int(x, out),
                    ValueRef::Float(x) if x.is_finite() => write_finite_float(x, out),
                    // JSON has no NaN or infinity.
                    ValueRef::Float(_) => out.extend_from_slice(b"null"),
                    ValueRef::Str(s) => write_json_str(s, out),
                }
            }
            out.extend_from_slice(b"}\n");
        }
    }

    fn keys_for(&mut self, schema: &SchemaRef) -> &[Vec<u8>] {
        let fresh = match &self.keys {
            Some((cached, _)) => !Arc::ptr_eq(cached, schema) && **cached != **schema,
            None => true,
        };
        if fresh {
            let keys = schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let mut key = Vec::with_capacity(f.name.len() + 4);
                    if i > 0 {
                        key.push(b',');
                    }
                    write_json_str(&f.name, &mut key);
                    key.push(b':');
                    key
                })
                .collect();
            self.keys = Some((schema.clone(), keys));
        }
        &self.keys.as_ref().expect("just set").1
    }
}

/// What follows the `\` for bytes that JSON requires escaped: `u` for the
/// `\u00XX` form, 0 for bytes that pass through (including all non-ASCII).
static ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = b'u';
        b += 1;
    }
    t[0x08] = b'b';
    t[0x09] = b't';
    t[0x0a] = b'n';
    t[0x0c] = b'f';
    t[0x0d] = b'r';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// Appends `s` as a quoted JSON string.
pub(super) fn write_json_str(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc = ESCAPE[b as usize];
        if esc == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        match esc {
            b'u' => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xf) as usize],
            ]),
            _ => out.extend_from_slice(&[b'\\', esc]),
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}
