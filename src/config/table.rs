//! Typed reads from one spanned TOML table, collecting every problem.
//!
//! Each getter marks its key as known; [`TableReader::finish`] then reports
//! the keys nobody asked for, with a suggestion when one looks like a typo.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::diag::{Context, Diagnostics, Sp, suggest};

/// `name = "value"` pairs of a table, in file order.
pub(crate) type StringTable = Vec<(Sp<String>, Sp<String>)>;

pub(crate) struct TableReader<'a, 'i> {
    table: &'a DeTable<'i>,
    span: Range<usize>,
    context: Context,
    known: Vec<&'static str>,
}

impl<'a, 'i> TableReader<'a, 'i> {
    pub(crate) fn new(
        table: &'a DeTable<'i>,
        span: Range<usize>,
        component: Option<String>,
    ) -> Self {
        TableReader {
            table,
            span,
            context: Context {
                component,
                field: None,
            },
            known: Vec::new(),
        }
    }

    /// This table read as a component of its own (`[node]`), so errors
    /// name it instead of the table it sits in.
    pub(crate) fn into_component(mut self, name: &str) -> Self {
        self.context = Context {
            component: Some(name.to_string()),
            field: None,
        };
        self
    }

    pub(crate) fn span(&self) -> Range<usize> {
        self.span.clone()
    }

    /// The context for errors about `field` of this table.
    /// The context for errors about `field` of this table; in a nested
    /// table (`window = { ... }`) the field is named `window.size`.
    pub(crate) fn ctx(&self, field: &str) -> Context {
        let field = match &self.context.field {
            Some(parent) => format!("{parent}.{field}"),
            None => field.to_string(),
        };
        Context {
            component: self.context.component.clone(),
            field: Some(field),
        }
    }

    /// The raw value of `key`, marking it known.
    pub(crate) fn raw(&mut self, key: &'static str) -> Option<&'a Spanned<DeValue<'i>>> {
        self.known.push(key);
        self.table.get(key)
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.table.get(key).is_some()
    }

    fn wrong_type(&self, d: &mut Diagnostics, key: &str, v: &Spanned<DeValue<'_>>, expected: &str) {
        d.error(
            v.span(),
            &self.ctx(key),
            format!("expected {expected}, found {}", describe(v.get_ref())),
        );
    }

    pub(crate) fn string(&mut self, d: &mut Diagnostics, key: &'static str) -> Option<Sp<String>> {
        let v = self.raw(key)?;
        match v.get_ref() {
            DeValue::String(s) => Some(Sp::new(s.to_string(), v.span())),
            _ => {
                self.wrong_type(d, key, v, "a string");
                None
            }
        }
    }

    /// Whether `key` is present. If not, reports it missing (followed by
    /// `hint`, such as `", e.g. ..."`) and marks it known.
    pub(crate) fn require(&mut self, d: &mut Diagnostics, key: &'static str, hint: &str) -> bool {
        if self.has(key) {
            return true;
        }
        self.known.push(key);
        d.error(
            self.span(),
            &self.ctx(key),
            format!("missing field `{key}`{hint}"),
        );
        false
    }

    pub(crate) fn required_string(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
    ) -> Option<Sp<String>> {
        if !self.require(d, key, "") {
            return None;
        }
        self.string(d, key)
    }

    /// A string that must be one of `choices`.
    pub(crate) fn choice(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
        choices: &[&'static str],
    ) -> Option<Sp<&'static str>> {
        let s = self.string(d, key)?;
        match choices.iter().find(|c| **c == s.value) {
            Some(c) => Some(Sp::new(*c, s.span)),
            None => {
                let hint = suggest(&s.value, choices.iter().copied())
                    .map(|c| format!(" (did you mean `{c}`?)"))
                    .unwrap_or_default();
                d.error(
                    s.span,
                    &self.ctx(key),
                    format!(
                        "unknown value `{}`{hint}; expected one of: {}",
                        s.value,
                        choices.join(", ")
                    ),
                );
                None
            }
        }
    }

    pub(crate) fn integer(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
        min: i64,
        max: i64,
    ) -> Option<Sp<i64>> {
        let v = self.raw(key)?;
        let parsed = match v.get_ref() {
            DeValue::Integer(i) => {
                i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok()
            }
            _ => {
                self.wrong_type(d, key, v, "an integer");
                return None;
            }
        };
        match parsed {
            Some(n) if (min..=max).contains(&n) => Some(Sp::new(n, v.span())),
            _ => {
                d.error(
                    v.span(),
                    &self.ctx(key),
                    format!("must be an integer from {min} to {max}"),
                );
                None
            }
        }
    }

    pub(crate) fn boolean(&mut self, d: &mut Diagnostics, key: &'static str) -> Option<Sp<bool>> {
        let v = self.raw(key)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(Sp::new(*b, v.span())),
            _ => {
                self.wrong_type(d, key, v, "true or false");
                None
            }
        }
    }

    /// A `host:port` socket address with a numeric IP; the error shows
    /// `examples` (such as `"0.0.0.0:7400" or "[::1]:7400"`).
    pub(crate) fn socket_addr(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
        examples: &str,
    ) -> Option<Sp<std::net::SocketAddr>> {
        let s = self.string(d, key)?;
        match s.value.parse() {
            Ok(a) => Some(Sp::new(a, s.span)),
            Err(_) => {
                d.error(
                    s.span,
                    &self.ctx(key),
                    format!(
                        "`{}` is not an IP address with a port, such as {examples}",
                        s.value
                    ),
                );
                None
            }
        }
    }

    /// A size in bytes: an integer, or a string such as `"64MiB"`, `"1GB"`.
    pub(crate) fn size_bytes(&mut self, d: &mut Diagnostics, key: &'static str) -> Option<u64> {
        let v = self.raw(key)?;
        let parsed = match v.get_ref() {
            DeValue::Integer(i) => i.as_str().replace('_', "").parse::<u64>().ok(),
            DeValue::String(s) => s
                .trim()
                .parse::<bytesize::ByteSize>()
                .ok()
                .map(|b| b.as_u64()),
            _ => None,
        };
        if parsed.is_none() {
            d.error(
                v.span(),
                &self.ctx(key),
                format!(
                    "expected a size such as \"256MiB\" or a number of bytes, found {}",
                    describe(v.get_ref())
                ),
            );
        }
        parsed
    }

    /// A duration written as a string such as `"10s"` or `"250ms"`, in ms.
    pub(crate) fn duration_ms(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
        allow_zero: bool,
    ) -> Option<Sp<i64>> {
        let v = self.raw(key)?;
        let DeValue::String(s) = v.get_ref() else {
            self.wrong_type(d, key, v, "a duration string such as \"10s\" or \"250ms\"");
            return None;
        };
        match parse_duration(s) {
            Ok(dur) if dur.is_zero() && !allow_zero => {
                d.error(v.span(), &self.ctx(key), "must be longer than zero");
                None
            }
            Ok(dur) if dur.as_millis() > i64::MAX as u128 / 4 => {
                d.error(v.span(), &self.ctx(key), "is too long");
                None
            }
            Ok(dur) if dur.subsec_nanos() % 1_000_000 != 0 => {
                d.error(
                    v.span(),
                    &self.ctx(key),
                    "event time has millisecond resolution; use whole milliseconds",
                );
                None
            }
            Ok(dur) => Some(Sp::new(dur.as_millis() as i64, v.span())),
            Err(e) => {
                d.error(
                    v.span(),
                    &self.ctx(key),
                    format!("`{s}` is not a duration ({e}); write e.g. \"10s\", \"250ms\", \"1m\""),
                );
                None
            }
        }
    }

    /// An array of strings.
    pub(crate) fn string_list(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
    ) -> Option<Sp<Vec<Sp<String>>>> {
        let v = self.raw(key)?;
        let DeValue::Array(items) = v.get_ref() else {
            self.wrong_type(d, key, v, "an array of strings");
            return None;
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.get_ref() {
                DeValue::String(s) => out.push(Sp::new(s.to_string(), item.span())),
                other => d.error(
                    item.span(),
                    &self.ctx(key),
                    format!("expected a string, found {}", describe(other)),
                ),
            }
        }
        Some(Sp::new(out, v.span()))
    }

    /// A table whose values are all strings, in file order.
    pub(crate) fn string_table(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
    ) -> Option<Sp<StringTable>> {
        let v = self.raw(key)?;
        let DeValue::Table(t) = v.get_ref() else {
            self.wrong_type(d, key, v, "a table such as { name = \"...\" }");
            return None;
        };
        let mut out = Vec::new();
        for (k, item) in t.iter() {
            match item.get_ref() {
                DeValue::String(s) => out.push((
                    Sp::new(k.get_ref().to_string(), k.span()),
                    Sp::new(s.to_string(), item.span()),
                )),
                other => d.error(
                    item.span(),
                    &self.ctx(key),
                    format!(
                        "`{}`: expected a string, found {}",
                        k.get_ref(),
                        describe(other)
                    ),
                ),
            }
        }
        Some(Sp::new(out, v.span()))
    }

    /// A nested table, read by its own reader.
    pub(crate) fn table(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
    ) -> Option<TableReader<'a, 'i>> {
        let v = self.raw(key)?;
        match v.get_ref() {
            DeValue::Table(t) => {
                let mut nested = TableReader::new(t, v.span(), self.context.component.clone());
                nested.context.field = Some(key.to_string());
                Some(nested)
            }
            _ => {
                self.wrong_type(d, key, v, "a table");
                None
            }
        }
    }

    /// An array of tables (`key = [{ ... }, { ... }]`), each read by its own
    /// reader whose errors name `key[i].field`.
    pub(crate) fn table_list(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
    ) -> Option<Sp<Vec<TableReader<'a, 'i>>>> {
        let v = self.raw(key)?;
        let DeValue::Array(items) = v.get_ref() else {
            self.wrong_type(d, key, v, "an array of tables such as [{ ... }]");
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item.get_ref() {
                DeValue::Table(t) => {
                    let mut nested =
                        TableReader::new(t, item.span(), self.context.component.clone());
                    nested.context.field = Some(format!("{key}[{i}]"));
                    out.push(nested);
                }
                other => d.error(
                    item.span(),
                    &self.ctx(&format!("{key}[{i}]")),
                    format!("expected a table, found {}", describe(other)),
                ),
            }
        }
        Some(Sp::new(out, v.span()))
    }

    /// Reports keys that no getter asked for. `what` names the table in the
    /// message ("a filter transform").
    pub(crate) fn finish(self, d: &mut Diagnostics, what: &str) {
        for (k, _) in self.table.iter() {
            let name = k.get_ref().as_ref();
            if self.known.contains(&name) {
                continue;
            }
            let hint = suggest(name, self.known.iter().copied())
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            let mut fields: Vec<&str> = self.known.clone();
            fields.dedup();
            let prefix = self
                .context
                .field
                .as_ref()
                .map(|f| format!("{f}."))
                .unwrap_or_default();
            d.error(
                k.span(),
                &Context {
                    component: self.context.component.clone(),
                    field: Some(format!("{prefix}{name}")),
                },
                format!(
                    "unknown field `{name}`{hint}; {what} has: {}",
                    fields.join(", ")
                ),
            );
        }
    }
}

/// Parses `"10s"`, `"250ms"`, `"1m 30s"`, `"2h"`.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| e.to_string())
}

/// A short description of a TOML value for "expected X, found Y".
pub(crate) fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("the string \"{s}\""),
        DeValue::Integer(i) => format!("the integer {}", i.as_str()),
        DeValue::Float(f) => format!("the float {}", f.as_str()),
        DeValue::Boolean(b) => format!("the boolean {b}"),
        DeValue::Datetime(t) => format!("the datetime {t}"),
        DeValue::Array(_) => "an array".to_string(),
        DeValue::Table(_) => "a table".to_string(),
    }
}
