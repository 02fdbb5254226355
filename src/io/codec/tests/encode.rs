//! Columns → exact JSON and CSV text.

use super::*;

#[test]
fn json_encoding_is_exact() {
    let s = schema(&[
        ("sensor", DataType::Str),
        ("temp", DataType::Float),
        ("n", DataType::Int),
        ("ok", DataType::Bool),
        ("x", DataType::Float),
    ]);
    let batch = build(
        &s,
        &[
            vec![
                ValueRef::Str("s1"),
                ValueRef::Float(21.5),
                ValueRef::Int(3),
                ValueRef::Bool(true),
                ValueRef::Null,
            ],
            vec![
                ValueRef::Str("q\"\\/\n\t\r\u{8}\u{c}\u{1}\u{1f}\u{7f}é😀"),
                ValueRef::Float(2.0),
                ValueRef::Int(i64::MIN),
                ValueRef::Bool(false),
                ValueRef::Float(-0.0),
            ],
            vec![
                ValueRef::Null,
                ValueRef::Float(f64::NAN),
                ValueRef::Int(i64::MAX),
                ValueRef::Null,
                ValueRef::Float(f64::INFINITY),
            ],
            vec![
                ValueRef::Str(""),
                ValueRef::Float(1e-7),
                ValueRef::Int(0),
                ValueRef::Null,
                ValueRef::Float(1e21),
            ],
            vec![
                ValueRef::Str("x"),
                ValueRef::Float(0.1 + 0.2),
                ValueRef::Int(-1),
                ValueRef::Null,
                ValueRef::Float(f64::NEG_INFINITY),
            ],
        ],
    );
    let want = concat!(
        r#"{"sensor":"s1","temp":21.5,"n":3,"ok":true,"x":null}"#,
        "\n",
        r#"{"sensor":"q\"\\/\n\t\r\b\f\u0001\u001f"#,
        "\u{7f}é😀",
        r#"","temp":2.0,"n":-9223372036854775808,"ok":false,"x":-0.0}"#,
        "\n",
        r#"{"sensor":null,"temp":null,"n":9223372036854775807,"ok":null,"x":null}"#,
        "\n",
        r#"{"sensor":"","temp":1e-7,"n":0,"ok":null,"x":1e21}"#,
        "\n",
        r#"{"sensor":"x","temp":0.30000000000000004,"n":-1,"ok":null,"x":null}"#,
        "\n",
    );
    assert_eq!(encode(Format::Json, &batch), want);
    // every line is valid JSON that serde_json reads back
    for line in want.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
}

#[test]
fn json_encoder_escapes_field_names_and_follows_schema_changes() {
    let mut enc = Encoder::new(Format::Json);
    let mut out = Vec::new();
    let a = schema(&[("we\"ird", DataType::Int)]);
    enc.encode(&build(&a, &[vec![ValueRef::Int(1)]]), &mut out);
    let b = schema(&[("k", DataType::Bool), ("v", DataType::Int)]);
    enc.encode(
        &build(&b, &[vec![ValueRef::Bool(true), ValueRef::Int(2)]]),
        &mut out,
    );
    let empty = schema(&[]);
    enc.encode(&build(&empty, &[vec![]]), &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"we\\\"ird\":1}\n{\"k\":true,\"v\":2}\n{}\n"
    );
}

#[test]
fn csv_encoding_is_exact() {
    let s = schema(&[
        ("name", DataType::Str),
        ("t,emp", DataType::Float),
        ("n", DataType::Int),
        ("ok", DataType::Bool),
    ]);
    let batch = build(
        &s,
        &[
            vec![
                ValueRef::Str("plain"),
                ValueRef::Float(21.5),
                ValueRef::Int(3),
                ValueRef::Bool(true),
            ],
            vec![
                ValueRef::Str("a,b"),
                ValueRef::Float(2.0),
                ValueRef::Int(i64::MIN),
                ValueRef::Bool(false),
            ],
            vec![
                ValueRef::Str("say \"hi\""),
                ValueRef::Float(f64::NAN),
                ValueRef::Int(i64::MAX),
                ValueRef::Null,
            ],
            vec![
                ValueRef::Str("two\nlines\r"),
                ValueRef::Float(f64::INFINITY),
                ValueRef::Null,
                ValueRef::Null,
            ],
            vec![
                ValueRef::Str(" pad"),
                ValueRef::Float(-0.0),
                ValueRef::Int(0),
                ValueRef::Null,
            ],
            vec![
                ValueRef::Str("pad "),
                ValueRef::Float(1e-7),
                ValueRef::Int(-1),
                ValueRef::Null,
            ],
            vec![
                ValueRef::Str(""),
                ValueRef::Null,
                ValueRef::Null,
                ValueRef::Null,
            ],
            vec![
                ValueRef::Null,
                ValueRef::Null,
                ValueRef::Null,
                ValueRef::Null,
            ],
            vec![
                ValueRef::Str("é😀 in\tside"),
                ValueRef::Float(0.1),
                ValueRef::Int(7),
                ValueRef::Bool(true),
            ],
        ],
    );
    let want = concat!(
        "name,\"t,emp\",n,ok\n",
        "plain,21.5,3,true\n",
        "\"a,b\",2.0,-9223372036854775808,false\n",
        "\"say \"\"hi\"\"\",,9223372036854775807,\n",
        "\"two\nlines\r\",,,\n",
        "\" pad\",-0.0,0,\n",
        "\"pad \",1e-7,-1,\n",
        "\"\",,,\n",
        ",,,\n",
        "é😀 in\tside,0.1,7,true\n",
    );
    assert_eq!(encode(Format::Csv, &batch), want);
    let mut out = Vec::new();
    Encoder::new(Format::Json).header(&s, &mut out);
    assert!(out.is_empty(), "JSON has no header");
}

#[test]
fn csv_encoding_is_read_back_by_the_csv_crate() {
    let s = schema(&[("a", DataType::Str), ("b", DataType::Str)]);
    let batch = build(
        &s,
        &[
            vec![ValueRef::Str("x,\"y\""), ValueRef::Str("multi\nline")],
            vec![ValueRef::Str(" sp "), ValueRef::Null],
        ],
    );
    let text = encode(Format::Csv, &batch);
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let rows: Vec<Vec<String>> = r
        .records()
        .map(|rec| rec.unwrap().iter().map(str::to_owned).collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["x,\"y\"".to_owned(), "multi\nline".to_owned()],
            vec![" sp ".to_owned(), String::new()]
        ]
    );
}
