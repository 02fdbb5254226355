//! JSON lines → columns: types, NULLs, escapes, event times and exact reasons.

use super::*;

#[test]
fn json_fields_in_any_order_unknown_skipped_missing_and_null_are_null() {
    let s = sensors();
    let (batch, results) = decode_json(
        &s,
        &[
            r#"{"sensor":"s1","temp":21.5,"n":3,"ok":true}"#,
            r#" { "ok" : false , "n" : -4, "extra": {"deep": [1, {"x": null}, "y"]}, "temp": 7, "sensor": "s2" } "#,
            r#"{"temp":null,"more":[[]],"ok":null}"#,
            r#"{}"#,
        ],
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        row(&batch, 0),
        [
            ValueRef::Str("s1"),
            ValueRef::Float(21.5),
            ValueRef::Int(3),
            ValueRef::Bool(true)
        ]
    );
    assert_eq!(
        row(&batch, 1),
        [
            ValueRef::Str("s2"),
            ValueRef::Float(7.0),
            ValueRef::Int(-4),
            ValueRef::Bool(false)
        ]
    );
    assert_eq!(row(&batch, 2), [ValueRef::Null; 4]);
    assert_eq!(row(&batch, 3), [ValueRef::Null; 4]);
    assert_eq!(batch.ingest_ns(), &[0, 1, 2, 3]);
    assert!(batch.event_time().is_empty());
}

#[test]
fn json_numbers_extremes_and_integral_floats() {
    let s = schema(&[("i", DataType::Int), ("f", DataType::Float)]);
    let (batch, results) = decode_json(
        &s,
        &[
            r#"{"i":9223372036854775807,"f":-0.0}"#,
            r#"{"i":-9223372036854775808,"f":18446744073709551615}"#,
            r#"{"i":3.0,"f":1e308}"#,
            r#"{"i":-1e3,"f":-9223372036854775808}"#,
            r#"{"i":-9.007199254740991e15,"f":5e-324}"#,
        ],
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        batch.column(0).ints(),
        &[i64::MAX, i64::MIN, 3, -1000, -(1 << 53) + 1]
    );
    let f = batch.column(1).floats();
    assert_eq!(f[0].to_bits(), (-0.0f64).to_bits());
    assert_eq!(f[1], 18446744073709551615u64 as f64);
    assert_eq!(f[2], 1e308);
    assert_eq!(f[3], i64::MIN as f64);
    assert_eq!(f[4], 5e-324);
}

#[test]
fn json_strings_unicode_and_escapes() {
    let s = schema(&[("s", DataType::Str)]);
    let (batch, results) = decode_json(
        &s,
        &[
            r#"{"s":"plain"}"#,
            r#"{"s":"q\"b\\s\/n\nt\tr\rb\bf\fu\u001f"}"#,
            r#"{"s":"é\u00e9 日本 \ud83d\ude00 😀"}"#,
            r#"{"s":""}"#,
            "{\"s\":\"\u{2028}\u{7f}\"}",
        ],
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let got: Vec<_> = (0..batch.len())
        .map(|r| batch.column(0).str(r).unwrap())
        .collect();
    assert_eq!(
        got,
        [
            "plain",
            "q\"b\\s/n\nt\tr\rb\u{8}f\u{c}u\u{1f}",
            "éé 日本 😀 😀",
            "",
            "\u{2028}\u{7f}"
        ]
    );
}

#[test]
fn json_duplicate_keys_last_wins() {
    let s = sensors();
    let (batch, results) = decode_json(
        &s,
        &[
            r#"{"sensor":"first","sensor":"second","n":1,"n":null,"temp":null,"temp":2.5}"#,
            r#"{"sensor":"x","ok":true,"ok":false,"ok":true}"#,
        ],
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        row(&batch, 0),
        [
            ValueRef::Str("second"),
            ValueRef::Float(2.5),
            ValueRef::Null,
            ValueRef::Null
        ]
    );
    assert_eq!(
        row(&batch, 1),
        [
            ValueRef::Str("x"),
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Bool(true)
        ]
    );
}

#[test]
fn json_malformed_lines_have_exact_reasons() {
    let s = sensors();
    let corpus: &[(&[u8], &str)] = &[
        // wrong types
        (
            br#"{"sensor":"s1","temp":"hot"}"#,
            r#"field "temp": expected float, found string "hot""#,
        ),
        (
            br#"{"sensor":5}"#,
            r#"field "sensor": expected string, found number 5"#,
        ),
        (
            br#"{"n":1.5}"#,
            r#"field "n": expected int, found number 1.5"#,
        ),
        (
            br#"{"n":"3"}"#,
            r#"field "n": expected int, found string "3""#,
        ),
        (
            br#"{"n":true}"#,
            r#"field "n": expected int, found bool true"#,
        ),
        (
            br#"{"ok":1}"#,
            r#"field "ok": expected bool, found number 1"#,
        ),
        (
            br#"{"ok":"true"}"#,
            r#"field "ok": expected bool, found string "true""#,
        ),
        (
            br#"{"temp":[21.5]}"#,
            r#"field "temp": expected float, found array"#,
        ),
        (
            br#"{"sensor":{"id":1}}"#,
            r#"field "sensor": expected string, found object"#,
        ),
        (
            br#"{"n":9223372036854775808}"#,
            r#"field "n": 9223372036854775808 is out of range for int"#,
        ),
        (
            br#"{"n":-9223372036854775809}"#,
            r#"field "n": expected int, found number -9.223372036854776e18 (too large to be an exact int)"#,
        ),
        (
            br#"{"n":1e19}"#,
            r#"field "n": expected int, found number 1e19 (too large to be an exact int)"#,
        ),
        (
            br#"{"n":9007199254740992.0}"#,
            r#"field "n": expected int, found number 9007199254740992.0 (too large to be an exact int)"#,
        ),
        (
            br#"{"n":"a very long string value that goes on and on and on"}"#,
            r#"field "n": expected int, found string "a very long string value that goes on an"…"#,
        ),
        // not representable
        (br#"{"temp":1e400}"#, "number out of range at column 13"),
        // invalid JSON
        (br#"{"temp":NaN}"#, "expected value at column 9"),
        (br#"{"temp":21.5,}"#, "trailing comma at column 14"),
        (br#"{sensor:"s1"}"#, "key must be a string at column 2"),
        (br#"{"sensor" "s1"}"#, "expected `:` at column 11"),
        (br#"{"sensor":"s1"} {"#, "trailing characters at column 17"),
        (br#"{"sensor":"s1"}x"#, "trailing characters at column 16"),
        (br#"{"sensor":"a\qb"}"#, "invalid escape at column 14"),
        (
            b"{\"sensor\":\"a\tb\"}",
            "control character (\\u0000-\\u001F) found while parsing a string at column 13",
        ),
        // truncated
        (
            br#"{"sensor":"s1","temp":21"#,
            "EOF while parsing an object at column 24",
        ),
        (
            br#"{"sensor":"s1"#,
            "EOF while parsing a string at column 13",
        ),
        (br#"{"sensor":"#, "EOF while parsing a value at column 10"),
        (b"{", "EOF while parsing an object at column 1"),
        // not an object
        (
            b"42",
            "invalid type: integer `42`, expected a JSON object at column 2",
        ),
        (
            br#"[1,2]"#,
            "invalid type: sequence, expected a JSON object",
        ),
        (
            br#""text""#,
            r#"invalid type: string "text", expected a JSON object at column 6"#,
        ),
        (
            b"null",
            "invalid type: null, expected a JSON object at column 4",
        ),
        (b"", "empty line"),
        (b" \t\r", "empty line"),
        // bad UTF-8, also inside a field that would be skipped
        (b"{\"sensor\":\"\xff\"}", "invalid UTF-8 at column 12"),
        (b"{\"other\":\"ok \xc3\x28\"}", "invalid UTF-8 at column 14"),
        (b"\xef\xbb\xbf{}", "expected value at column 1"),
    ];
    let mut wrong = Vec::new();
    for (line, want) in corpus {
        let got = reject(Format::Json, &s, None, None, line);
        if got != *want {
            wrong.push(format!(
                "{:?}\n   got: {got}\n  want: {want}",
                String::from_utf8_lossy(line)
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn json_event_time_int_ms_or_rfc3339() {
    let (batch, results) = decode_json_timed(
        DataType::Str,
        &[
            r#"{"sensor":"a","ts":"2026-01-01T00:00:00Z","v":1}"#,
            r#"{"ts":"2026-01-01T01:00:00.250+01:00","sensor":"b"}"#,
            r#"{"ts":"1969-12-31T23:59:59.9995Z"}"#,
        ],
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        batch.event_time(),
        &[1_767_225_600_000, 1_767_225_600_250, -1]
    );
    // the field keeps its text
    assert_eq!(batch.column(1).str(0), Some("2026-01-01T00:00:00Z"));

    let (batch, results) = decode_json_timed(
        DataType::Int,
        &[r#"{"ts":1767225600000}"#, r#"{"ts":-5,"v":2}"#],
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(batch.event_time(), &[1_767_225_600_000, -5]);
}

fn decode_json_timed(ts_type: DataType, lines: &[&str]) -> (Batch, Vec<Result<(), String>>) {
    let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
    decode_all(Format::Json, &timed(ts_type), Some(1), &lines)
}

#[test]
fn json_bad_event_times() {
    let corpus: &[(DataType, &str, &str)] = &[
        (
            DataType::Str,
            r#"{"sensor":"a"}"#,
            r#"event time field "ts" is missing"#,
        ),
        (
            DataType::Str,
            r#"{"ts":null}"#,
            r#"event time field "ts" is null"#,
        ),
        (
            DataType::Str,
            r#"{"ts":"yesterday"}"#,
            r#"event time field "ts" is not an RFC 3339 timestamp: "yesterday""#,
        ),
        (
            DataType::Str,
            r#"{"ts":"2026-01-01T00:00:00"}"#,
            r#"event time field "ts" is not an RFC 3339 timestamp: "2026-01-01T00:00:00""#,
        ),
        (
            DataType::Str,
            r#"{"ts":1767225600000}"#,
            r#"field "ts": expected string, found number 1767225600000"#,
        ),
        (
            DataType::Int,
            r#"{"v":1.5}"#,
            r#"event time field "ts" is missing"#,
        ),
        (
            DataType::Int,
            r#"{"ts":"2026-01-01T00:00:00Z"}"#,
            r#"field "ts": expected int, found string "2026-01-01T00:00:00Z""#,
        ),
    ];
    for &(ty, line, want) in corpus {
        assert_eq!(
            reject(Format::Json, &timed(ty), Some(1), None, line.as_bytes()),
            want,
            "{line}"
        );
    }
}
