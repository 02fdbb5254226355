//! Malformed records never stop a worker: each goes to the dead-letter file
//! with its source, line, byte offset and reason, and every other record is
//! processed correctly.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::*;

const JSON_INPUT: &str = r#"{"sensor":"a","value":10,"divisor":2,"ts":"2026-01-01T00:00:00Z"}
{"sensor":"b","value":"ten","divisor":2,"ts":"2026-01-01T00:00:01Z"}
{"sensor":"c","value":30,"divisor":3,"ts":"2026-01-01T00:00:02Z"
[1,2,3]
{"sensor":"d","value":40,"divisor":0,"ts":"2026-01-01T00:00:03Z"}

{"sensor":"e","value":50,"divisor":5,"ts":"yesterday"}
{"sensor":"f","value":60,"divisor":6}
{"sensor":"g","value":70,"divisor":7,"ts":"2026-01-01T00:00:06.5+01:00"}
"#;

#[test]
fn bad_json_lines_go_to_dead_letters_with_their_places() {
    let s = Scratch::new();
    let input = s.write("in.jsonl", JSON_INPUT);
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
workers = 2
data_dir = "{data}"
dead_letter = "{dl}"
[sources.in]
type = "file"
path = "{input}"
schema = {{ sensor = "string", value = "int", divisor = "int", ts = "string" }}
event_time = "ts"
[transforms.ratio]
type = "map"
inputs = ["in"]
fields = {{ ratio = "value / divisor" }}
[sinks.out]
type = "stdout"
inputs = ["ratio"]
"#,
            dl = s.path("dead.jsonl").display(),
            data = s.path("data").display(),
            input = input.display()
        ),
    );
    let out = run_ok(&config);
    let rows = json_lines(&String::from_utf8_lossy(&out.stdout));
    let got: Vec<(String, i64)> = {
        let mut v: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r["sensor"].as_str().unwrap().to_string(),
                    r["ratio"].as_i64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(got, vec![("a".into(), 5), ("g".into(), 10)]);

    let dead = json_lines(&s.read("dead.jsonl"));
    let summary: Vec<(String, Option<u64>, String)> = dead
        .iter()
        .map(|d| {
            (
                d["component"].as_str().unwrap().to_string(),
                d["line"].as_u64(),
                d["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = [
        (
            "in",
            Some(2),
            "field \"value\": expected int, found string \"ten\"",
        ),
        ("in", Some(3), "EOF while parsing"),
        ("in", Some(4), "expected a JSON object"),
        ("ratio", None, "division by zero"),
        ("in", Some(7), "is not an RFC 3339 timestamp: \"yesterday\""),
        ("in", Some(8), "event time field \"ts\" is missing"),
    ];
    assert_eq!(dead.len(), expect.len(), "dead letters: {dead:#?}");
    for (component, line, reason) in expect {
        assert!(
            summary
                .iter()
                .any(|(c, l, r)| c == component && *l == line && r.contains(reason)),
            "no dead letter ({component}, {line:?}, {reason:?}) in {summary:#?}"
        );
    }
    // Places are exact: line 4 starts after three lines and their newlines.
    let line4 = dead.iter().find(|d| d["line"] == 4).unwrap();
    let offset: usize = JSON_INPUT.lines().take(3).map(|l| l.len() + 1).sum();
    assert_eq!(line4["offset"].as_u64().unwrap() as usize, offset);
    assert_eq!(line4["record"], "[1,2,3]");
    assert!(line4["file"].as_str().unwrap().ends_with("in.jsonl"));
    let by_operator = dead.iter().find(|d| d["component"] == "ratio").unwrap();
    assert_eq!(
        by_operator["record"]["sensor"], "d",
        "the failing record is kept whole"
    );
}

#[test]
fn bad_csv_rows_go_to_dead_letters_and_stdin_works() {
    let s = Scratch::new();
    let config = s.write(
        "p.toml",
        &format!(
            r#"
[node]
data_dir = "{data}"
dead_letter = "{dl}"
[sources.in]
type = "stdin"
format = "csv"
schema = {{ sensor = "string", temp = "float", ts = "int" }}
[sinks.out]
type = "stdout"
inputs = ["in"]
format = "csv"
"#,
            dl = s.path("dead.jsonl").display(),
            data = s.path("data").display()
        ),
    );
    let input =
        "ts,sensor,temp,extra\n1,a,20.5,x\n2,b,hot,x\n3,\"c, the third\",21,x\n4,d\n5,e,,x\n";
    let mut child = eddy()
        .arg("run")
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.remove(0),
        "sensor,temp,ts",
        "CSV output starts with its header"
    );
    lines.sort();
    assert_eq!(lines, vec!["\"c, the third\",21.0,3", "a,20.5,1", "e,,5"]);
    let dead = json_lines(&s.read("dead.jsonl"));
    assert_eq!(dead.len(), 2, "{dead:#?}");
    assert_eq!(dead[0]["file"], "-");
    assert!(dead.iter().any(|d| {
        d["line"] == 3
            && d["reason"]
                .as_str()
                .unwrap()
                .contains("\"hot\" is not a float")
    }));
    assert!(dead.iter().any(|d| {
        d["line"] == 5
            && d["reason"]
                .as_str()
                .unwrap()
                .contains("expected 4 columns, found 2")
    }));
}
