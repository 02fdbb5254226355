//! Decode speed (ignored by default; run in release).

use super::*;

struct Case {
    what: &'static str,
    format: Format,
    schema: SchemaRef,
    event_time: Option<usize>,
    header: &'static [u8],
    line: fn(usize) -> String,
}

/// `cargo test --release --lib io::codec::tests::throughput -- --ignored --nocapture`
#[test]
#[ignore = "timing; run in release"]
fn decode_throughput() {
    const N: usize = 1_000_000;
    let cases = [
        Case {
            what: "json, 4 fields, untimed",
            format: Format::Json,
            schema: sensors(),
            event_time: None,
            header: b"",
            line: |i| {
                format!(
                    r#"{{"sensor":"sensor-{}","temp":{}.5,"n":{i},"ok":{}}}"#,
                    i % 100,
                    i % 40,
                    i % 2 == 0
                )
            },
        },
        Case {
            what: "json, int event time",
            format: Format::Json,
            schema: timed(DataType::Int),
            event_time: Some(1),
            header: b"",
            line: |i| {
                format!(
                    r#"{{"sensor":"sensor-{}","ts":{},"v":{}.25}}"#,
                    i % 100,
                    1_767_225_600_000 + i,
                    i % 40
                )
            },
        },
        Case {
            what: "json, RFC 3339 event time",
            format: Format::Json,
            schema: timed(DataType::Str),
            event_time: Some(1),
            header: b"",
            line: |i| {
                let (m, s, ms) = (i / 60_000 % 60, i / 1000 % 60, i % 1000);
                format!(
                    r#"{{"sensor":"sensor-{}","ts":"2026-01-01T00:{m:02}:{s:02}.{ms:03}Z","v":{}.25}}"#,
                    i % 100,
                    i % 40
                )
            },
        },
        Case {
            what: "json, 4 of 8 fields, out of order, escapes",
            format: Format::Json,
            schema: sensors(),
            event_time: None,
            header: b"",
            line: |i| {
                format!(
                    r#"{{"id":{i},"ok":true,"sensor":"s\"{}\"","tags":["a","b"],"n":{i},"loc":{{"lat":1.5,"lon":2.5}},"temp":{}.5,"note":null}}"#,
                    i % 100,
                    i % 40
                )
            },
        },
        Case {
            what: "csv, 4 fields, untimed",
            format: Format::Csv,
            schema: sensors(),
            event_time: None,
            header: b"sensor,temp,n,ok",
            line: |i| format!("sensor-{},{}.5,{i},{}", i % 100, i % 40, i % 2 == 0),
        },
    ];
    for case in cases {
        let lines: Vec<String> = (0..N).map(case.line).collect();
        let bytes: usize = lines.iter().map(String::len).sum();
        let mut dec = Decoder::new(case.format, case.schema.clone(), case.event_time);
        if dec.needs_header() {
            dec.header(case.header).unwrap();
        }
        let mut out = BatchBuilder::new(case.schema, 1024, case.event_time.is_some());
        let start = std::time::Instant::now();
        let mut rows = 0;
        for l in &lines {
            dec.decode(l.as_bytes(), &mut out, 0).unwrap();
            if out.len() == 1024 {
                rows += std::hint::black_box(out.take()).len();
            }
        }
        rows += out.take().len();
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(rows, N);
        println!(
            "{}: {:.2} M lines/s, {:.0} MB/s ({} bytes/line)",
            case.what,
            N as f64 / secs / 1e6,
            bytes as f64 / secs / 1e6,
            bytes / N
        );
    }
}
