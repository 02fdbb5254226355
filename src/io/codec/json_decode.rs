//! JSON lines → columns: serde_json drives a visitor that pushes each field
//! straight into its column, so no `serde_json::Value` (and no allocation,
//! short of escaped strings) is made per record.
//!
//! Precision: serde_json built without its `float_roundtrip` feature (as
//! now) parses floats with 16–17 significant digits or large exponents to
//! within a few ulps rather than exactly; values such as `21.5` or `0.1`
//! are exact. Enabling that feature in Cargo.toml makes every float exact.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::data::{BatchBuilder, Column, DataType, SchemaRef};

use super::excerpt;
use super::number_text::EXACT_INT_LIMIT;
use super::time::event_time_of;

pub(super) struct JsonDecoder {
    names: Vec<Box<str>>,
    types: Vec<DataType>,
    event_time: Option<usize>,
    /// Why the visitor rejected the line. serde's error type can only carry
    /// a message that serde_json then decorates with a position; a type
    /// mismatch reads better without it, so the visitor leaves its reason
    /// here and returns a placeholder error.
    reason: Option<String>,
}

impl JsonDecoder {
    pub(super) fn new(schema: SchemaRef, event_time: Option<usize>) -> JsonDecoder {
        JsonDecoder {
            names: schema
                .fields()
                .iter()
                .map(|f| f.name.as_str().into())
                .collect(),
            types: schema.fields().iter().map(|f| f.ty).collect(),
            event_time,
            reason: None,
        }
    }

    /// Writes every field of the row (NULL where absent) and returns its
    /// event time; on error the caller aborts the partly written row.
    pub(super) fn write_row(&mut self, line: &[u8], out: &mut BatchBuilder) -> Result<i64, String> {
        // Validating the whole line up front rejects bad bytes even inside
        // skipped fields (serde_json does not check those), and lets
        // serde_json skip its own per-string validation.
        let text = std::str::from_utf8(line)
            .map_err(|e| format!("invalid UTF-8 at column {}", e.valid_up_to() + 1))?;
        if text.trim_ascii().is_empty() {
            return Err("empty line".to_owned());
        }
        let row = out.len();
        self.reason = None;
        let mut de = serde_json::Deserializer::from_str(text);
        let visitor = RowVisitor {
            names: &self.names,
            types: &self.types,
            out: &mut *out,
            reason: &mut self.reason,
        };
        if let Err(e) = visitor.deserialize(&mut de).and_then(|()| de.end()) {
            return Err(self.reason.take().unwrap_or_else(|| json_reason(&e)));
        }

        let mut event_time_missing = false;
        for (i, col) in out.columns_mut().iter_mut().enumerate() {
            if col.len() == row {
                col.push_null();
                event_time_missing |= self.event_time == Some(i);
            }
        }
        match self.event_time {
            None => Ok(0),
            Some(i) if event_time_missing => {
                Err(format!("event time field \"{}\" is missing", self.names[i]))
            }
            Some(i) => event_time_of(out.column_mut(i), row, &self.names[i], "is null"),
        }
    }
}

/// serde_json's message, with its position said as a column: the record is
/// always "line 1" to serde_json, which would clash with the file line
/// number the caller reports. Column 0 (serde_json's "before the first
/// byte", e.g. for a top-level array) is left out.
fn json_reason(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match msg.strip_suffix(&position) {
        Some(bare) if e.column() == 0 => bare.to_owned(),
        Some(bare) => format!("{bare} at column {}", e.column()),
        None => msg,
    }
}

/// Visits the top-level object of a line.
struct RowVisitor<'a> {
    names: &'a [Box<str>],
    types: &'a [DataType],
    out: &'a mut BatchBuilder,
    reason: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for RowVisitor<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RowVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let row = self.out.len();
        // Records of one source tend to list fields in the same order, so
        // the field after the last match is tried before a scan.
        let mut hint = 0;
        while let Some(slot) = map.next_key_seed(KeySeed {
            names: self.names,
            hint,
        })? {
            let Some(i) = slot else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            hint = i + 1;
            let col = self.out.column_mut(i);
            // A duplicate key: the last one wins, so drop the earlier value.
            if col.len() > row {
                col.truncate(row);
            }
            map.next_value_seed(ValueSeed {
                col,
                ty: self.types[i],
                name: &self.names[i],
                reason: &mut *self.reason,
            })?;
        }
        Ok(())
    }
}

/// Resolves a key to its field index (`None`: not a declared field).
struct KeySeed<'a> {
    names: &'a [Box<str>],
    hint: usize,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    #[inline]
    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        if let Some(name) = self.names.get(self.hint)
            && **name == *key
        {
            return Ok(Some(self.hint));
        }
        Ok(self.names.iter().position(|name| **name == *key))
    }
}

/// Pushes one value into its column, checking it against the field's type.
struct ValueSeed<'a> {
    col: &'a mut Column,
    ty: DataType,
    name: &'a str,
    reason: &'a mut Option<String>,
}

impl ValueSeed<'_> {
    #[cold]
    fn reject<E: de::Error>(self, reason: String) -> Result<(), E> {
        *self.reason = Some(reason);
        Err(E::custom("rejected value"))
    }

    #[cold]
    fn mismatch<E: de::Error>(self, found: fmt::Arguments<'_>) -> Result<(), E> {
        let reason = format!(
            "field \"{}\": expected {}, found {found}",
            self.name, self.ty
        );
        self.reject(reason)
    }
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} or null", self.ty)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.col.push_null();
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        match self.ty {
            DataType::Bool => {
                self.col.push_bool(v);
                Ok(())
            }
            _ => self.mismatch(format_args!("bool {v}")),
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        match self.ty {
            DataType::Int => self.col.push_int(v),
            DataType::Float => self.col.push_float(v as f64),
            _ => return self.mismatch(format_args!("number {v}")),
        }
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        match (self.ty, i64::try_from(v)) {
            (DataType::Int, Ok(v)) => self.col.push_int(v),
            (DataType::Int, Err(_)) => {
                let reason = format!("field \"{}\": {v} is out of range for int", self.name);
                return self.reject(reason);
            }
            (DataType::Float, _) => self.col.push_float(v as f64),
            _ => return self.mismatch(format_args!("number {v}")),
        }
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        match self.ty {
            DataType::Float => self.col.push_float(v),
            // An integral float (`3.0`, `1e3`) is an int written loosely, but
            // only below 2^53: above, the text may name an integer the float
            // cannot hold (`-9223372036854775809` arrives as -2^63).
            DataType::Int if v.fract() == 0.0 && v.abs() < EXACT_INT_LIMIT => {
                self.col.push_int(v as i64)
            }
            DataType::Int if v.fract() == 0.0 => {
                let v = ryu::Buffer::new().format(v).to_owned();
                return self.mismatch(format_args!("number {v} (too large to be an exact int)"));
            }
            _ => return self.mismatch(format_args!("number {}", ryu::Buffer::new().format(v))),
        }
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        match self.ty {
            DataType::Str => {
                self.col.push_str(v);
                Ok(())
            }
            _ => self.mismatch(format_args!("string {}", excerpt(v.as_bytes()))),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        self.mismatch(format_args!("object"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        self.mismatch(format_args!("array"))
    }
}
