//! CSV lines → columns: header mapping, quoting, event times and exact reasons.

use super::*;

#[test]
fn csv_header_maps_by_name_and_ignores_extras() {
    let s = sensors();
    let lines: &[&[u8]] = &[
        b"\xEF\xBB\xBFextra,ok,\"n\",temp,sensor\r",
        b"zzz,true,3,21.5,s1\r",
        b"\"q,\"\"x\",FALSE,-7,-0.0,\"a, \"\"quoted\"\" one\"",
        b",,,,",
        b"x,1,,1e3,\"\"",
        b"x,0,\"42\",\"2\",",
    ];
    let (batch, results) = decode_all(Format::Csv, &s, None, lines);
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
            ValueRef::Str("a, \"quoted\" one"),
            ValueRef::Float(-0.0),
            ValueRef::Int(-7),
            ValueRef::Bool(false)
        ]
    );
    assert!(batch.column(1).float(1).unwrap().is_sign_negative());
    assert_eq!(row(&batch, 2), [ValueRef::Null; 4]);
    assert_eq!(
        row(&batch, 3),
        [
            ValueRef::Str(""),
            ValueRef::Float(1000.0),
            ValueRef::Null,
            ValueRef::Bool(true)
        ]
    );
    assert_eq!(
        row(&batch, 4),
        [
            ValueRef::Null,
            ValueRef::Float(2.0),
            ValueRef::Int(42),
            ValueRef::Bool(false)
        ]
    );
}

#[test]
fn csv_header_errors() {
    let s = sensors();
    let header = |line: &[u8]| Decoder::new(Format::Csv, s.clone(), None).header(line);
    assert_eq!(
        header(b"sensor,n"),
        Err(r#"header lacks declared field(s) "temp", "ok""#.to_owned())
    );
    assert_eq!(
        header(b""),
        Err(r#"header lacks declared field(s) "sensor", "temp", "n", "ok""#.to_owned())
    );
    assert_eq!(
        header(b"Sensor,temp,n,ok"),
        Err(r#"header lacks declared field(s) "sensor""#.to_owned())
    );
    assert_eq!(
        header(b"sensor,temp,n,ok,temp"),
        Err(r#"header has column "temp" twice"#.to_owned())
    );
    assert_eq!(
        header(b"sensor,\"temp,n,ok"),
        Err("unterminated quote in column 2".to_owned())
    );
    assert_eq!(
        header(b"sensor,temp,n,ok,\xff"),
        Err("header column 5 is not valid UTF-8".to_owned())
    );
    assert_eq!(
        header(b"sensor,temp,n,ok,x,x"),
        Ok(()),
        "duplicate ignored columns are harmless"
    );

    let mut dec = Decoder::new(Format::Csv, s.clone(), None);
    assert!(dec.needs_header());
    assert!(dec.header(b"sensor").is_err());
    assert!(dec.needs_header(), "a failed header is not taken");
    let mut out = BatchBuilder::new(s.clone(), 4, false);
    assert_eq!(
        dec.decode(b"a,1,2,true", &mut out, 0),
        Err("no CSV header was read".to_owned())
    );
    dec.header(b"ok,n,temp,sensor").unwrap();
    assert!(!dec.needs_header());
    assert!(!Decoder::new(Format::Json, s, None).needs_header());
}

#[test]
fn csv_malformed_lines_have_exact_reasons() {
    let s = sensors();
    let header = Some("sensor,temp,n,ok");
    let corpus: &[(&[u8], &str)] = &[
        (b"s1,21.5,3", "expected 4 columns, found 3"),
        (b"s1,21.5,3,true,", "expected 4 columns, found 5"),
        (b"", "expected 4 columns, found 1"),
        (b"s1,\"21.5,3,true", "unterminated quote in column 2"),
        (b"\"s1", "unterminated quote in column 1"),
        (b"\"s1\"\",21.5,3,true", "unterminated quote in column 1"),
        (
            b"\"s1\"x,21.5,3,true",
            "unexpected text after the closing quote in column 1",
        ),
        (b"s1,abc,3,true", r#"column "temp": "abc" is not a float"#),
        (
            b"s1, 21.5,3,true",
            r#"column "temp": " 21.5" is not a float"#,
        ),
        (b"s1,NaN,3,true", r#"column "temp": "NaN" is not a float"#),
        (b"s1,inf,3,true", r#"column "temp": "inf" is not a float"#),
        (
            b"s1,1e400,3,true",
            r#"column "temp": "1e400" is out of range for a float"#,
        ),
        (b"s1,1,3.5,true", r#"column "n": "3.5" is not an int"#),
        (b"s1,1,x,true", r#"column "n": "x" is not an int"#),
        (
            b"s1,1,9223372036854775808,true",
            r#"column "n": "9223372036854775808" is out of range for an int"#,
        ),
        (
            b"s1,1,-9223372036854775809,true",
            r#"column "n": "-9223372036854775809" is out of range for an int"#,
        ),
        (b"s1,1,1e19,true", r#"column "n": "1e19" is not an int"#),
        (b"s1,1,-,true", r#"column "n": "-" is not an int"#),
        (b"s1,1,3,yes", r#"column "ok": "yes" is not a bool"#),
        (b"s1,1,3,2", r#"column "ok": "2" is not a bool"#),
        (b"s\xff1,1,3,true", r#"column "sensor": invalid UTF-8"#),
        (
            b"s1,1\xff,3,true",
            "column \"temp\": \"1\u{fffd}\" is not a float",
        ),
    ];
    let mut wrong = Vec::new();
    for (line, want) in corpus {
        let got = reject(Format::Csv, &s, None, header, line);
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
fn csv_event_time() {
    let lines: &[&[u8]] = &[
        b"ts,sensor,v",
        b"2026-01-01T00:00:00.001Z,a,1",
        b"\"2026-01-01T00:00:00+00:00\",b,",
    ];
    let (batch, results) = decode_all(Format::Csv, &timed(DataType::Str), Some(1), lines);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(batch.event_time(), &[1_767_225_600_001, 1_767_225_600_000]);

    let s = timed(DataType::Str);
    let h = Some("sensor,ts,v");
    assert_eq!(
        reject(Format::Csv, &s, Some(1), h, b"a,,1"),
        r#"event time field "ts" is empty"#
    );
    assert_eq!(
        reject(Format::Csv, &s, Some(1), h, b"a,\"\",1"),
        r#"event time field "ts" is not an RFC 3339 timestamp: """#
    );
    assert_eq!(
        reject(Format::Csv, &s, Some(1), h, b"a,soon,1"),
        r#"event time field "ts" is not an RFC 3339 timestamp: "soon""#
    );
    let s = timed(DataType::Int);
    assert_eq!(
        reject(Format::Csv, &s, Some(1), h, b"a,,1"),
        r#"event time field "ts" is empty"#
    );
}
