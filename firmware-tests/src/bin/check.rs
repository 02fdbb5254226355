//! The host side of the firmware test.
//!
//! - `check prepare DIR` writes the firmware's input readings as JSON lines
//!   (`DIR/readings.jsonl`) and the daemon pipelines that run the same
//!   filter and window over them (`DIR/pipeline-1.toml`, one worker, and
//!   `DIR/pipeline-2.toml`, two).
//! - `check compare FIRMWARE_OUT DAEMON_OUT...` decodes the firmware's
//!   postcard frames and compares them, bit for bit, with a plain reference
//!   computed here and with every daemon output; exits 1 on any difference.
//! - `check nudge DAEMON_OUT TAMPERED_OUT` copies a daemon output with the
//!   first row's `mean` one ulp higher: what the self-test must see fail.
//! - `check memory MAP FIRMWARE_OUT` reports the firmware's RAM and flash
//!   from the linker map and its stack peak from its output, and fails if
//!   they are over the 64 KiB RAM budget.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use eddy::kernel::agg::AggValue;
use eddy::kernel::fixed::{Frame, PipelineCounts};
use eddy_firmware_tests::input::{DISORDER_MS, READINGS, READINGS_LEN, Reading};
use eddy_firmware_tests::pipeline::{AGG_COUNT, AGG_NAMES, THRESHOLD, WINDOW_MS, warm};

/// Static RAM the pipeline's firmware may use.
const RAM_BUDGET_BYTES: u64 = 64 * 1024;
/// Most differences listed before giving up.
const SHOW_MAX: usize = 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("prepare") if args.len() == 2 => prepare(Path::new(&args[1])),
        Some("compare") if args.len() >= 3 => compare(&args[1], &args[2..]),
        Some("memory") if args.len() == 3 => memory(Path::new(&args[1]), &args[2]),
        Some("nudge") if args.len() == 3 => nudge(&args[1], Path::new(&args[2])),
        _ => Err(
            "usage: check prepare DIR | check compare FIRMWARE_OUT DAEMON_OUT... | \
                  check memory MAP FIRMWARE_OUT | check nudge DAEMON_OUT TAMPERED_OUT"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("check: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn prepare(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut lines = String::new();
    for r in READINGS.iter() {
        // `{:?}` of an f64 is the shortest text that parses back to it.
        writeln!(
            lines,
            r#"{{"sensor":{},"temp":{:?},"ts":{}}}"#,
            r.sensor,
            r.temp(),
            r.ts
        )
        .expect("writing to a String");
    }
    let input = dir.join("readings.jsonl");
    write(&input, &lines)?;
    let aggregates = AGG_NAMES
        .iter()
        .map(|(name, call)| format!("{name} = \"{call}\""))
        .collect::<Vec<_>>()
        .join(", ");
    for workers in [1, 2] {
        let toml = format!(
            r#"# Written by firmware-tests' check: the firmware's pipeline for the daemon.
[node]
name = "firmware-check"
data_dir = {data}
workers = {workers}

[sources.readings]
type = "file"
path = {input}
format = "json"
schema = {{ sensor = "int", temp = "float", ts = "int" }}
event_time = "ts"
max_out_of_orderness = "{DISORDER_MS}ms"

[transforms.warm]
type = "filter"
inputs = ["readings"]
condition = "temp > {THRESHOLD:?}"

[transforms.per_sensor]
type = "window"
inputs = ["warm"]
key = ["sensor"]
window = {{ kind = "tumbling", size = "{WINDOW_MS}ms" }}
aggregates = {{ {aggregates} }}

[sinks.out]
type = "stdout"
inputs = ["per_sensor"]
format = "json"
"#,
            data = toml_str(&dir.join(format!("eddy-data-{workers}"))),
            input = toml_str(&input),
        );
        write(&dir.join(format!("pipeline-{workers}.toml")), &toml)?;
    }
    println!(
        "check: wrote {} readings and the daemon pipelines to {}",
        READINGS_LEN,
        dir.display()
    );
    Ok(())
}

/// A path as a TOML basic string.
fn toml_str(path: &Path) -> String {
    let mut s = String::from('"');
    for c in path.display().to_string().chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            c if c.is_control() => write!(s, "\\u{:04X}", c as u32).expect("a String"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

/// One result row's values: `n`, then the bits of `total`, `lo`, `hi`,
/// `mean`, and the window's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Values {
    end: i64,
    n: i64,
    floats: [u64; AGG_COUNT - 1],
}

impl std::fmt::Display for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "end={} n={}", self.end, self.n)?;
        for ((name, _), bits) in AGG_NAMES[1..].iter().zip(self.floats) {
            write!(f, " {name}={:?} ({bits:#018x})", f64::from_bits(bits))?;
        }
        Ok(())
    }
}

/// Rows by (window start, sensor).
type Rows = BTreeMap<(i64, i64), Values>;

fn insert(rows: &mut Rows, key: (i64, i64), v: Values, what: &str) -> Result<(), String> {
    match rows.insert(key, v) {
        None => Ok(()),
        Some(_) => Err(format!(
            "{what}: two rows for sensor {} in the window starting at {}",
            key.1, key.0
        )),
    }
}

/// The reference: a plain fold over the filtered readings in input order,
/// the order in which both the firmware and the daemon see each sensor's
/// readings. No reading is late (disorder stays within the bound).
fn reference() -> (Rows, usize) {
    let mut acc: BTreeMap<(i64, i64), (i64, f64, f64, f64)> = BTreeMap::new();
    let kept: Vec<&Reading> = READINGS.iter().filter(|r| warm(r)).collect();
    for r in &kept {
        let t = r.temp();
        let start = r.ts - r.ts.rem_euclid(WINDOW_MS);
        let a = acc.entry((start, r.sensor as i64)).or_insert((
            0,
            0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ));
        a.0 += 1;
        a.1 += t;
        a.2 = a.2.min(t);
        a.3 = a.3.max(t);
    }
    let rows = acc
        .into_iter()
        .map(|((start, sensor), (n, sum, lo, hi))| {
            let mean = sum / n as f64;
            let floats = [sum.to_bits(), lo.to_bits(), hi.to_bits(), mean.to_bits()];
            (
                (start, sensor),
                Values {
                    end: start + WINDOW_MS,
                    n,
                    floats,
                },
            )
        })
        .collect();
    (rows, READINGS_LEN - kept.len())
}

/// The firmware's rows and end counts, from its `frame HEX` lines.
fn firmware_rows(path: &str) -> Result<(Rows, PipelineCounts), String> {
    let text = read(path)?;
    let mut rows = Rows::new();
    let mut end = None;
    let mut frames = 0;
    for (i, line) in text.lines().enumerate() {
        let at = || format!("{path}:{}", i + 1);
        let Some(hex) = line.strip_prefix("frame ") else {
            if !line.trim().is_empty() {
                println!("check: firmware says: {line}");
            }
            continue;
        };
        frames += 1;
        let bytes = decode_hex(hex.trim()).map_err(|e| format!("{}: {e}", at()))?;
        let frame = Frame::<AGG_COUNT>::decode(&bytes)
            .map_err(|e| format!("{}: not a postcard frame: {e}", at()))?;
        if end.is_some() {
            return Err(format!("{}: a frame after the end frame", at()));
        }
        match frame {
            Frame::End(counts) => end = Some(counts),
            Frame::Row(row) => {
                let [n, total, lo, hi, mean] = row.values[..] else {
                    return Err(format!("{}: {} aggregates", at(), row.values.len()));
                };
                let AggValue::Int(n) = n else {
                    return Err(format!("{}: count is {n:?}", at()));
                };
                let mut floats = [0; AGG_COUNT - 1];
                for (slot, v) in floats.iter_mut().zip([total, lo, hi, mean]) {
                    let AggValue::Float(f) = v else {
                        return Err(format!("{}: a float aggregate is {v:?}", at()));
                    };
                    *slot = f.to_bits();
                }
                let v = Values {
                    end: row.window_end,
                    n,
                    floats,
                };
                insert(&mut rows, (row.window_start, row.key), v, &at())?;
            }
        }
    }
    let end = end.ok_or(format!(
        "{path}: no end frame among {frames} frames (did the firmware finish?)"
    ))?;
    Ok((rows, end))
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| format!("bad hex: {e}")))
        .collect()
}

/// The daemon's rows, from its JSON lines.
fn daemon_rows(path: &str) -> Result<Rows, String> {
    let text = read(path)?;
    let mut rows = Rows::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("{path}:{}", i + 1);
        let obj: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(line).map_err(|e| format!("{at}: not a JSON object: {e}"))?;
        let int = |name: &str| {
            obj.get(name)
                .and_then(|v| v.as_i64())
                .ok_or(format!("{at}: `{name}` is not an integer"))
        };
        let float = |name: &str| {
            obj.get(name)
                .and_then(|v| v.as_f64())
                .filter(|_| obj[name].is_f64())
                .ok_or(format!("{at}: `{name}` is not a float"))
        };
        let expected = 3 + AGG_COUNT;
        if obj.len() != expected {
            let names: Vec<&String> = obj.keys().collect();
            return Err(format!("{at}: fields {names:?}, expected {expected}"));
        }
        let mut floats = [0; AGG_COUNT - 1];
        for (slot, (name, _)) in floats.iter_mut().zip(&AGG_NAMES[1..]) {
            *slot = float(name)?.to_bits();
        }
        let v = Values {
            end: int("window_end")?,
            n: int(AGG_NAMES[0].0)?,
            floats,
        };
        insert(&mut rows, (int("window_start")?, int("sensor")?), v, &at)?;
    }
    Ok(rows)
}

/// Lists the differences between two row sets; `Ok` if there are none.
fn same(a_name: &str, a: &Rows, b_name: &str, b: &Rows) -> Result<(), String> {
    let mut diffs = Vec::new();
    for (k, va) in a {
        match b.get(k) {
            None => diffs.push(format!(
                "sensor {} window {}: only in {a_name}: {va}",
                k.1, k.0
            )),
            Some(vb) if vb != va => diffs.push(format!(
                "sensor {} window {}:\n      {a_name}: {va}\n      {b_name}: {vb}",
                k.1, k.0
            )),
            Some(_) => {}
        }
    }
    for (k, vb) in b {
        if !a.contains_key(k) {
            diffs.push(format!(
                "sensor {} window {}: only in {b_name}: {vb}",
                k.1, k.0
            ));
        }
    }
    if diffs.is_empty() {
        return Ok(());
    }
    let mut msg = format!(
        "{a_name} and {b_name} differ in {} rows ({} and {} rows):",
        diffs.len(),
        a.len(),
        b.len()
    );
    for d in diffs.iter().take(SHOW_MAX) {
        msg.push_str("\n    ");
        msg.push_str(d);
    }
    if diffs.len() > SHOW_MAX {
        msg.push_str(&format!("\n    ... and {} more", diffs.len() - SHOW_MAX));
    }
    Err(msg)
}

fn compare(firmware: &str, daemons: &[String]) -> Result<(), String> {
    let (want, filtered_out) = reference();
    let (fw, counts) = firmware_rows(firmware)?;
    let expected_counts = PipelineCounts {
        records_in: READINGS_LEN as u64,
        filtered_out: filtered_out as u64,
        late: 0,
        refused: 0,
        rows_out: want.len() as u64,
    };
    if counts != expected_counts {
        return Err(format!(
            "the firmware's counts are {counts:?}, expected {expected_counts:?}"
        ));
    }
    let windows: std::collections::BTreeSet<i64> = want.keys().map(|k| k.0).collect();
    if want.len() < 100 || windows.len() < 15 {
        return Err(format!(
            "the input is too thin to compare: {} rows in {} windows",
            want.len(),
            windows.len()
        ));
    }
    same("reference", &want, "firmware", &fw)?;
    println!(
        "check: firmware = reference: {} rows ({} windows, {} readings, {} filtered out, \
         0 late, 0 refused), every value bit-identical",
        fw.len(),
        windows.len(),
        READINGS_LEN,
        filtered_out
    );
    for daemon in daemons {
        let rows = daemon_rows(daemon)?;
        same("firmware", &fw, daemon, &rows)?;
        println!(
            "check: firmware = daemon ({daemon}): {} rows, every value bit-identical",
            rows.len()
        );
    }
    let ((start, sensor), v) = fw
        .iter()
        .max_by_key(|(_, v)| v.n)
        .expect("rows were counted above");
    println!("check: e.g. sensor {sensor}, window start {start}: {v}");
    Ok(())
}

/// Writes `from` to `to` with the first row's `mean` moved up by one ulp.
fn nudge(from: &str, to: &Path) -> Result<(), String> {
    let text = read(from)?;
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let first = lines.first_mut().ok_or(format!("{from}: no rows"))?;
    let mut obj: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(first).map_err(|e| format!("{from}:1: {e}"))?;
    let name = AGG_NAMES[AGG_COUNT - 1].0;
    let mean = obj
        .get(name)
        .and_then(|v| v.as_f64())
        .ok_or(format!("{from}:1: no float `{name}`"))?;
    let nudged = f64::from_bits(mean.to_bits() + 1);
    obj.insert(name.into(), nudged.into());
    *first = serde_json::to_string(&obj).expect("a JSON map prints");
    lines.push(String::new());
    write(to, &lines.join("\n"))
}

/// RAM and flash of the firmware from its linker map (rust-lld's format:
/// `VMA LMA Size Align Out In Symbol`, sizes in hex), and the stack peaks
/// the firmware measured (its `stack-peak init A run B` line).
fn memory(map: &Path, firmware: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(map).map_err(|e| format!("{}: {e}", map.display()))?;
    let mut sections: BTreeMap<String, u64> = BTreeMap::new();
    let (mut pipeline, mut readings) = (None, None);
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 5 {
            continue;
        }
        let Ok(size) = u64::from_str_radix(cols[2], 16) else {
            continue;
        };
        let name = cols[4..].join(" ");
        if is_output_section(line, &name) {
            sections.insert(name, size);
        } else if name.contains("::PIPELINE::") {
            pipeline.get_or_insert(size);
        } else if name.contains("input::READINGS::") {
            readings.get_or_insert(size);
        }
    }
    let get = |s: &str| sections.get(s).copied().unwrap_or(0);
    let ram = get(".data") + get(".bss") + get(".uninit");
    let flash = get(".vector_table") + get(".text") + get(".rodata") + get(".data");
    let pipeline = pipeline.ok_or("no PIPELINE symbol in the map")?;
    let readings = readings.ok_or("no READINGS symbol in the map")?;
    println!(
        "check: firmware static RAM {ram} bytes (.data {} + .bss {} + .uninit {}), of which \
         the kernel pipeline's state {pipeline} bytes",
        get(".data"),
        get(".bss"),
        get(".uninit"),
    );
    println!(
        "check: firmware flash {flash} bytes (.vector_table {}, .text {}, .rodata {} of which \
         the input readings {readings} bytes)",
        get(".vector_table"),
        get(".text"),
        get(".rodata"),
    );
    let out = read(firmware)?;
    let peaks: Vec<u64> = out
        .lines()
        .find_map(|l| l.strip_prefix("stack-peak "))
        .ok_or(format!("{firmware}: no stack-peak line"))?
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [init, run] = peaks[..] else {
        return Err(format!("{firmware}: a stack-peak line without two figures"));
    };
    let total = ram + init.max(run);
    println!(
        "check: firmware stack peak {run} bytes while running the pipeline, {init} while \
         building it; static RAM + stack peak = {total} bytes of the {RAM_BUDGET_BYTES}-byte budget"
    );
    if total > RAM_BUDGET_BYTES {
        return Err(format!(
            "RAM {total} bytes is over the budget of {RAM_BUDGET_BYTES}"
        ));
    }
    Ok(())
}

/// Whether a map line names an output section: its name starts in the
/// `Out` column (the first after Align), not indented under it.
fn is_output_section(line: &str, name: &str) -> bool {
    const OUT_COLUMN: usize = 33;
    name.starts_with('.') && line.find(name) == Some(OUT_COLUMN)
}
