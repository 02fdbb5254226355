//! Columns → CSV lines (RFC 4180 quoting), with a header of field names.

use crate::data::{Batch, SchemaRef, ValueRef};

use super::number_text::{write_finite_float, write_int};

pub(super) fn header(schema: &SchemaRef, out: &mut Vec<u8>) {
    for (i, f) in schema.fields().iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_csv_str(&f.name, out);
    }
    out.push(b'\n');
}

pub(super) fn encode(batch: &Batch, out: &mut Vec<u8>) {
    let columns = batch.columns();
    for row in 0..batch.len() {
        for (i, col) in columns.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            match col.get(row) {
                ValueRef::Null => {}
                ValueRef::Bool(true) => out.extend_from_slice(b"true"),
                ValueRef::Bool(false) => out.extend_from_slice(b"false"),
                ValueRef::Int(x) => write_int(x, out),
                ValueRef::Float(x) if x.is_finite() => write_finite_float(x, out),
                // NaN and infinities have no portable CSV spelling: NULL.
                ValueRef::Float(_) => {}
                ValueRef::Str(s) => write_csv_str(s, out),
            }
        }
        out.push(b'\n');
    }
}

/// Appends `s`, quoted (with `"` doubled) when it would otherwise split,
/// break the line, or lose edge spaces to a trimming reader. The empty
/// string is written `""` so that it stays distinct from NULL (an empty
/// field).
fn write_csv_str(s: &str, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    let needs_quotes = bytes.is_empty()
        || bytes.first() == Some(&b' ')
        || bytes.last() == Some(&b' ')
        || bytes
            .iter()
            .any(|&b| matches!(b, b',' | b'"' | b'\r' | b'\n'));
    if !needs_quotes {
        out.extend_from_slice(bytes);
        return;
    }
    out.push(b'"');
    let mut rest = bytes;
    while let Some(p) = rest.iter().position(|&b| b == b'"') {
        out.extend_from_slice(&rest[..=p]);
        out.push(b'"');
        rest = &rest[p + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}
