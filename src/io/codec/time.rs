//! Event times: RFC 3339 parsing and reading a row's event-time field.

use crate::data::{Column, ValueRef};

use super::excerpt;

/// Parses an event time given as an RFC 3339 string into epoch milliseconds.
///
/// Anything `jiff::Timestamp` accepts is accepted (RFC 3339 and its ISO 8601
/// relatives, e.g. a space instead of `T`, or an RFC 9557 `[zone]` suffix),
/// but an offset (`Z`, `+01:00`) is required: a local date-time names no
/// instant. Sub-millisecond digits are floored, so that an instant never
/// lands in a later window than the one it happened in, negative times too.
pub(crate) fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let ts: jiff::Timestamp = s.parse().ok()?;
    i64::try_from(ts.as_nanosecond().div_euclid(1_000_000)).ok()
}

/// The event time of the row just written at `row` of `col`, the event-time
/// field `name`. `null_means` words a NULL for the format ("is null", "is
/// empty").
pub(super) fn event_time_of(
    col: &Column,
    row: usize,
    name: &str,
    null_means: &str,
) -> Result<i64, String> {
    match col.get(row) {
        ValueRef::Int(ms) => Ok(ms),
        ValueRef::Str(s) => parse_rfc3339_ms(s).ok_or_else(|| {
            format!(
                "event time field \"{name}\" is not an RFC 3339 timestamp: {}",
                excerpt(s.as_bytes())
            )
        }),
        // Plans declare event times as `int` or `string`; a float of epoch ms
        // is still unambiguous, so take it rather than reject every record.
        ValueRef::Float(ms) if ms.is_finite() && (-9.2e18..9.2e18).contains(&ms) => {
            Ok(ms.floor() as i64)
        }
        ValueRef::Float(ms) => Err(format!(
            "event time field \"{name}\" is not a valid epoch millisecond: {ms}"
        )),
        ValueRef::Bool(_) => Err(format!(
            "event time field \"{name}\" must be an int or a string, not a bool"
        )),
        ValueRef::Null => Err(format!("event time field \"{name}\" {null_means}")),
    }
}
