//! Bad lines leave no trace and never panic.

use super::*;

#[test]
fn failed_line_leaves_builder_unchanged() {
    let s = sensors();
    let (batch, results) = decode_json(
        &s,
        &[
            r#"{"sensor":"good1","temp":1.0,"n":1,"ok":true}"#,
            // fails after sensor, n and a duplicate were written
            r#"{"sensor":"BAD-PARTIAL","n":2,"n":3,"ok":false,"temp":"hot"}"#,
            // fails at the very end (truncated)
            r#"{"sensor":"BAD-TRUNC","temp":2.0,"n":2,"ok":true"#,
            r#"{"sensor":"good2","n":null}"#,
        ],
    );
    assert!(results[0].is_ok() && results[3].is_ok());
    assert!(results[1].is_err() && results[2].is_err());
    assert_eq!(batch.len(), 2);
    assert_eq!(
        row(&batch, 0),
        [
            ValueRef::Str("good1"),
            ValueRef::Float(1.0),
            ValueRef::Int(1),
            ValueRef::Bool(true)
        ]
    );
    assert_eq!(
        row(&batch, 1),
        [
            ValueRef::Str("good2"),
            ValueRef::Null,
            ValueRef::Null,
            ValueRef::Null
        ]
    );
    assert_eq!(batch.ingest_ns(), &[0, 3]);

    // the same for CSV, with a timed stream
    let s = timed(DataType::Int);
    let lines: &[&[u8]] = &[
        b"sensor,ts,v",
        b"a,1,1.5",
        b"BAD,2,x",
        b"BAD,,2",
        b"b,3,",
        b"BAD,4",
    ];
    let (batch, results) = decode_all(Format::Csv, &s, Some(1), lines);
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
    assert_eq!(batch.len(), 2);
    assert_eq!(
        row(&batch, 1),
        [ValueRef::Str("b"), ValueRef::Int(3), ValueRef::Null]
    );
    assert_eq!(batch.event_time(), &[1, 3]);
    assert_eq!(batch.ingest_ns(), &[1, 4]);
}

/// Mutations of valid lines (bytes flipped, cut, spliced) never panic and
/// never leave part of a row behind.
#[test]
fn arbitrary_bytes_never_panic() {
    let seeds: &[&[u8]] = &[
        br#"{"sensor":"s\u00e9\n","temp":-1.5e3,"n":42,"ok":true,"x":[1,{"y":null}],"ts":"2026-01-01T00:00:00Z"}"#,
        b"\"s,\"\"1\",21.5,3,true,2026-01-01T00:00:00Z",
    ];
    let alphabet = b"{}[]\",:\\ 0123456789.eE+-truefalsn\x00\xff\xc3\xa9\r\nu";
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let s = schema(&[
        ("sensor", DataType::Str),
        ("temp", DataType::Float),
        ("n", DataType::Int),
        ("ok", DataType::Bool),
        ("ts", DataType::Str),
    ]);
    for format in [Format::Json, Format::Csv] {
        let mut dec = Decoder::new(format, s.clone(), Some(4));
        dec.header(b"sensor,temp,n,ok,ts").unwrap();
        let mut out = BatchBuilder::new(s.clone(), 64, true);
        let mut ok = 0;
        for _ in 0..20_000 {
            let mut line = seeds[next(seeds.len())].to_vec();
            for _ in 0..1 + next(4) {
                let at = next(line.len() + 1);
                match next(3) {
                    0 if at < line.len() => line[at] = alphabet[next(alphabet.len())],
                    1 => line.insert(at, alphabet[next(alphabet.len())]),
                    _ => line.truncate(at.max(1)),
                }
            }
            ok += dec.decode(&line, &mut out, 0).is_ok() as usize;
            assert_builder_consistent(&mut out);
            if out.len() > 1000 {
                out.take();
            }
        }
        assert!(ok > 0, "{format:?}: some mutations stay valid");
    }
}

/// Deep nesting in a skipped field is skipped without recursion (so no
/// stack overflow); a CRLF line end is whitespace to JSON.
#[test]
fn deep_nesting_and_crlf() {
    let s = sensors();
    let deep = |n: usize| format!(r#"{{"x":{}{},"n":1}}"#, "[".repeat(n), "]".repeat(n));
    let shallow = deep(100);
    let very = deep(100_000);
    let (batch, results) = decode_json(&s, &[&shallow, &very, "{\"n\":2}\r"]);
    assert!(results[0].is_ok(), "{results:?}");
    assert!(
        results[1].is_err() || results[1].is_ok(),
        "either way, no crash"
    );
    assert!(results[2].is_ok(), "{results:?}");
    assert_eq!(batch.column(2).int(batch.len() - 1), Some(2));
}
