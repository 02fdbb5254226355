//! Record formats: JSON lines and CSV (with a header), decoded straight into
//! batch columns by a declared schema and encoded from batches.
//!
//! Decoding never builds an intermediate value per record: JSON goes through
//! a serde visitor that pushes into the builder's columns, CSV through a
//! small line splitter. A line that fails leaves nothing in the builder and
//! yields a one-line reason for the dead-letter output.

mod csv_decode;
mod csv_encode;
mod json_decode;
mod json_encode;
mod number_text;
mod time;

#[cfg(test)]
mod tests;

use crate::data::{Batch, BatchBuilder, SchemaRef};

pub(crate) use time::parse_rfc3339_ms;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Csv,
}

/// Decodes one record per line into a [`BatchBuilder`] whose schema is the
/// source's declared schema.
pub(crate) struct Decoder {
    inner: DecoderInner,
}

enum DecoderInner {
    Json(json_decode::JsonDecoder),
    Csv(csv_decode::CsvDecoder),
}

impl Decoder {
    /// `event_time`: the index of the field holding the event time (an `int`
    /// of epoch milliseconds or a `string` in RFC 3339), if the stream is timed.
    pub(crate) fn new(format: Format, schema: SchemaRef, event_time: Option<usize>) -> Decoder {
        debug_assert!(
            event_time.is_none_or(|i| i < schema.len()),
            "event time field out of range"
        );
        let inner = match format {
            Format::Json => DecoderInner::Json(json_decode::JsonDecoder::new(schema, event_time)),
            Format::Csv => DecoderInner::Csv(csv_decode::CsvDecoder::new(schema, event_time)),
        };
        Decoder { inner }
    }

    /// Whether the next line must be given to [`Decoder::header`] (CSV).
    pub(crate) fn needs_header(&self) -> bool {
        match &self.inner {
            DecoderInner::Json(_) => false,
            DecoderInner::Csv(d) => d.needs_header(),
        }
    }

    /// Reads a CSV header line: maps its columns to schema fields by name.
    /// A JSON decoder has no header and accepts (ignores) any line.
    pub(crate) fn header(&mut self, line: &[u8]) -> Result<(), String> {
        match &mut self.inner {
            DecoderInner::Json(_) => Ok(()),
            DecoderInner::Csv(d) => d.header(line),
        }
    }

    /// Decodes one line (without its line terminator) and finishes it as a
    /// row of `out`. On error nothing is added to `out` and the reason is
    /// returned for the dead-letter output.
    pub(crate) fn decode(
        &mut self,
        line: &[u8],
        out: &mut BatchBuilder,
        ingest_ns: u64,
    ) -> Result<(), String> {
        let written = match &mut self.inner {
            DecoderInner::Json(d) => d.write_row(line, out),
            DecoderInner::Csv(d) => d.write_row(line, out),
        };
        match written {
            Ok(event_time) => {
                out.finish_row(event_time, ingest_ns);
                Ok(())
            }
            Err(reason) => {
                out.abort_row();
                Err(reason)
            }
        }
    }
}

/// Encodes batches as lines of one format.
pub(crate) struct Encoder {
    inner: EncoderInner,
}

enum EncoderInner {
    Json(json_encode::JsonEncoder),
    Csv,
}

impl Encoder {
    pub(crate) fn new(format: Format) -> Encoder {
        let inner = match format {
            Format::Json => EncoderInner::Json(json_encode::JsonEncoder::new()),
            Format::Csv => EncoderInner::Csv,
        };
        Encoder { inner }
    }

    /// Appends the CSV header for `schema` to `out` (nothing for JSON).
    pub(crate) fn header(&self, schema: &SchemaRef, out: &mut Vec<u8>) {
        match self.inner {
            EncoderInner::Json(_) => {}
            EncoderInner::Csv => csv_encode::header(schema, out),
        }
    }

    /// Appends every row of `batch` to `out`, one line each.
    pub(crate) fn encode(&mut self, batch: &Batch, out: &mut Vec<u8>) {
        match &mut self.inner {
            EncoderInner::Json(e) => e.encode(batch, out),
            EncoderInner::Csv => csv_encode::encode(batch, out),
        }
    }
}

/// Longest excerpt of a bad value quoted in an error message: enough to
/// recognise it, short enough that a megabyte string does not flood the
/// dead-letter output (which has the whole line anyway).
const EXCERPT_CHARS: usize = 40;

/// `bytes` as a quoted, escaped excerpt for error messages (lossy UTF-8).
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
}
