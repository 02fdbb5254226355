//! CSV lines → columns, by a header that maps columns to fields by name.
//!
//! Quoting follows RFC 4180 within one line: a field may be wrapped in `"`,
//! inside which `,` is literal and `""` stands for `"`. A quoted field that
//! spans lines (an embedded line break) is **not** supported: sources split
//! input at line breaks before decoding, so such a record arrives as two
//! lines and fails with "unterminated quote". Nothing is trimmed, except
//! one trailing `\r` (CRLF files).
//!
//! The splitter is hand-written rather than `csv::Reader`: a line is already
//! framed, and splitting it into byte spans costs less than driving a
//! streaming reader per line.

use crate::data::{BatchBuilder, DataType, SchemaRef};

use super::excerpt;
use super::number_text::EXACT_INT_LIMIT;
use super::time::event_time_of;

/// One field of a line, as a byte range of the line.
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    /// Was wrapped in quotes (so an empty one is `""`, not a missing value).
    quoted: bool,
    /// Holds `""` escapes that must be collapsed before use.
    escaped: bool,
}

pub(super) struct CsvDecoder {
    schema: SchemaRef,
    event_time: Option<usize>,
    /// Per CSV column, the schema field it fills; `None` until the header.
    columns: Option<Vec<Option<usize>>>,
    /// Reused per line.
    spans: Vec<Span>,
    /// Unescaped text of a field with `""` escapes, reused per line.
    scratch: Vec<u8>,
}

impl CsvDecoder {
    pub(super) fn new(schema: SchemaRef, event_time: Option<usize>) -> CsvDecoder {
        CsvDecoder {
            schema,
            event_time,
            columns: None,
            spans: Vec::new(),
            scratch: Vec::new(),
        }
    }

    pub(super) fn needs_header(&self) -> bool {
        self.columns.is_none()
    }

    pub(super) fn header(&mut self, line: &[u8]) -> Result<(), String> {
        // Spreadsheet exports often start with a UTF-8 byte order mark.
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        split(line, &mut self.spans)?;
        let mut columns = Vec::with_capacity(self.spans.len());
        let mut seen = vec![false; self.schema.len()];
        for (n, &span) in self.spans.iter().enumerate() {
            let raw = field_bytes(line, span, &mut self.scratch);
            let name = std::str::from_utf8(raw)
                .map_err(|_| format!("header column {} is not valid UTF-8", n + 1))?;
            let field = self.schema.index_of(name);
            if let Some(i) = field {
                if seen[i] {
                    return Err(format!("header has column \"{name}\" twice"));
                }
                seen[i] = true;
            }
            columns.push(field);
        }
        let missing: Vec<String> = self
            .schema
            .fields()
            .iter()
            .zip(&seen)
            .filter(|&(_, &seen)| !seen)
            .map(|(f, _)| format!("\"{}\"", f.name))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "header lacks declared field(s) {}",
                missing.join(", ")
            ));
        }
        self.columns = Some(columns);
        Ok(())
    }

    pub(super) fn write_row(&mut self, line: &[u8], out: &mut BatchBuilder) -> Result<i64, String> {
        let Some(columns) = &self.columns else {
            return Err("no CSV header was read".to_owned());
        };
        split(line, &mut self.spans)?;
        if self.spans.len() != columns.len() {
            return Err(format!(
                "expected {} columns, found {}",
                columns.len(),
                self.spans.len()
            ));
        }
        let row = out.len();
        let fields = self.schema.fields();
        for (&span, &field) in self.spans.iter().zip(columns) {
            let Some(i) = field else { continue };
            let col = out.column_mut(i);
            let ty = fields[i].ty;
            if span.start == span.end {
                // Empty: NULL, except that `""` is the empty string.
                match ty {
                    DataType::Str if span.quoted => col.push_str(""),
                    _ => col.push_null(),
                }
                continue;
            }
            let raw = field_bytes(line, span, &mut self.scratch);
            let name = &fields[i].name;
            match ty {
                DataType::Str => match std::str::from_utf8(raw) {
                    Ok(s) => col.push_str(s),
                    Err(_) => return Err(format!("column \"{name}\": invalid UTF-8")),
                },
                DataType::Int => {
                    col.push_int(parse_int(raw).map_err(|why| bad_value(name, raw, why))?)
                }
                DataType::Float => {
                    col.push_float(parse_float(raw).map_err(|why| bad_value(name, raw, why))?)
                }
                DataType::Bool => col.push_bool(
                    parse_bool(raw).ok_or_else(|| bad_value(name, raw, "is not a bool"))?,
                ),
            }
        }
        match self.event_time {
            None => Ok(0),
            Some(i) => event_time_of(out.column_mut(i), row, &fields[i].name, "is empty"),
        }
    }
}

#[cold]
fn bad_value(name: &str, raw: &[u8], why: &str) -> String {
    format!("column \"{name}\": {} {why}", excerpt(raw))
}

/// Splits `line` into field spans (cleared first).
fn split(line: &[u8], spans: &mut Vec<Span>) -> Result<(), String> {
    spans.clear();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let n = line.len();
    let mut i = 0;
    loop {
        if line.get(i) == Some(&b'"') {
            let start = i + 1;
            let mut j = start;
            let mut escaped = false;
            // Find the closing quote: a `"` not followed by another `"`.
            let end = loop {
                match line[j..].iter().position(|&b| b == b'"') {
                    None => {
                        return Err(format!("unterminated quote in column {}", spans.len() + 1));
                    }
                    Some(p) if line.get(j + p + 1) == Some(&b'"') => {
                        escaped = true;
                        j += p + 2;
                    }
                    Some(p) => break j + p,
                }
            };
            spans.push(Span {
                start,
                end,
                quoted: true,
                escaped,
            });
            i = end + 1;
            match line.get(i) {
                None => return Ok(()),
                Some(b',') => i += 1,
                Some(_) => {
                    return Err(format!(
                        "unexpected text after the closing quote in column {}",
                        spans.len()
                    ));
                }
            }
        } else {
            let end = line[i..]
                .iter()
                .position(|&b| b == b',')
                .map_or(n, |p| i + p);
            spans.push(Span {
                start: i,
                end,
                quoted: false,
                escaped: false,
            });
            if end == n {
                return Ok(());
            }
            i = end + 1;
        }
    }
}

/// The text of a field: borrowed from the line, or unescaped into `scratch`.
fn field_bytes<'a>(line: &'a [u8], span: Span, scratch: &'a mut Vec<u8>) -> &'a [u8] {
    let raw = &line[span.start..span.end];
    if !span.escaped {
        return raw;
    }
    scratch.clear();
    let mut rest = raw;
    while let Some(p) = rest.iter().position(|&b| b == b'"') {
        // Every `"` inside a quoted span is the first of a `""` pair.
        scratch.extend_from_slice(&rest[..=p]);
        rest = &rest[p + 2..];
    }
    scratch.extend_from_slice(rest);
    scratch
}

fn parse_int(raw: &[u8]) -> Result<i64, &'static str> {
    let text = std::str::from_utf8(raw).map_err(|_| "is not an int")?;
    if let Ok(v) = text.parse::<i64>() {
        return Ok(v);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("is out of range for an int");
    }
    // As in JSON, an integral float (`3.0`, `1e3`) is an int written
    // loosely, as long as the float holds it exactly.
    match text.parse::<f64>() {
        Ok(v) if v.fract() == 0.0 && v.abs() < EXACT_INT_LIMIT => Ok(v as i64),
        _ => Err("is not an int"),
    }
}

fn parse_float(raw: &[u8]) -> Result<f64, &'static str> {
    let text = std::str::from_utf8(raw).map_err(|_| "is not a float")?;
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        // Rust also parses `inf` and `NaN`; JSON cannot carry them and the
        // encoder writes them as NULL, so they are not floats here either.
        // A finite-looking number that overflows (`1e400`) is out of range.
        Ok(v) if !v.is_nan() && text.bytes().any(|b| b.is_ascii_digit()) => {
            Err("is out of range for a float")
        }
        _ => Err("is not a float"),
    }
}

fn parse_bool(raw: &[u8]) -> Option<bool> {
    if raw.eq_ignore_ascii_case(b"true") || raw == b"1" {
        Some(true)
    } else if raw.eq_ignore_ascii_case(b"false") || raw == b"0" {
        Some(false)
    } else {
        None
    }
}
