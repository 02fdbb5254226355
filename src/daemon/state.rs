//! `eddy state inspect|export|import`: the command-line face of
//! `crate::state::inspect` and `crate::state::transfer`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::state::inspect::{
    self, Inspection, holder, in_use_message, open_existing, verify_record,
};
use crate::state::transfer::{self, StreamReader, Totals};
use crate::state::{CheckpointRecord, Store};

/// `eddy state inspect DATA_DIR [--json]`.
pub(crate) fn inspect(data_dir: &Path, json: bool) -> ExitCode {
    match inspect::inspect(data_dir) {
        Ok(report) => {
            let text = if json {
                let mut s = serde_json::to_string_pretty(&report).expect("a report serialises");
                s.push('\n');
                s
            } else {
                render(&report)
            };
            print_or_fail(&text)
        }
        Err(e) => fail("inspect", &e),
    }
}

/// `eddy state export DATA_DIR --operator ID --bin N [--checkpoint ID] [--out FILE]`.
pub(crate) fn export(
    data_dir: &Path,
    operator: &str,
    bin: u32,
    checkpoint: Option<u64>,
    out: Option<&Path>,
) -> ExitCode {
    let at = format!("{}: operator {operator} bin {bin}", data_dir.display());
    if out.is_none() && std::io::stdout().is_terminal() {
        return fail(
            "export",
            "the stream is binary: give --out FILE or redirect stdout",
        );
    }
    let store = match open_existing(data_dir, "its state cannot be exported") {
        Ok(Some(s)) => s,
        Ok(None) => {
            return fail("export", &format!("{}: holds no state", data_dir.display()));
        }
        Err(e) => return fail("export", &e),
    };
    let record = match choose_checkpoint(&store, checkpoint) {
        Ok(r) => r,
        Err(e) => return fail("export", &format!("{}: {e}", data_dir.display())),
    };
    let plan = match transfer::plan_export(&record, operator, bin) {
        Ok(p) => p,
        Err(e) => return fail("export", &format!("{at}: {e}")),
    };
    if plan.bin.is_none() {
        eprintln!(
            "eddy state export: {at}: the bin holds no state in checkpoint {}; exporting an empty bin (importing it empties the bin)",
            record.id
        );
    }
    let written = match out {
        Some(path) => export_to_file(&store, &plan, path),
        None => {
            let stdout = std::io::stdout();
            let mut lock = stdout.lock();
            transfer::export_bin(&store, &plan, &mut lock)
        }
    };
    match written {
        Ok(t) => {
            eprintln!(
                "eddy state export: operator {operator} bin {bin} of checkpoint {} (version {}): {} keys in {} chunks, {} bytes{}",
                record.id,
                plan.header.version,
                t.entries,
                t.chunks,
                t.bytes,
                out.map(|p| format!(", to {}", p.display()))
                    .unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail("export", &format!("{at} (checkpoint {}): {e}", record.id)),
    }
}

/// Writes to `FILE.partial`, renamed to `FILE` once the stream is
/// complete: a failed export leaves no file that looks like a stream.
fn export_to_file(
    store: &Store,
    plan: &transfer::ExportPlan,
    path: &Path,
) -> Result<Totals, String> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let file = std::fs::File::create(&partial)
        .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
    let mut w = std::io::BufWriter::with_capacity(64 * 1024, file);
    let result = transfer::export_bin(store, plan, &mut w).and_then(|t| {
        let file = w
            .into_inner()
            .map_err(|e| format!("cannot write {}: {}", partial.display(), e.error()))?;
        file.sync_all()
            .map_err(|e| format!("cannot sync {}: {e}", partial.display()))?;
        std::fs::rename(&partial, path).map_err(|e| {
            format!(
                "cannot rename {} to {}: {e}",
                partial.display(),
                path.display()
            )
        })?;
        Ok(t)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// The checkpoint to export from: the one asked for (its chunks are
/// verified as they are streamed), or the newest that verifies whole, the
/// one a restart would restore.
fn choose_checkpoint(store: &Store, wanted: Option<u64>) -> Result<CheckpointRecord, String> {
    let records = store.records();
    if records.is_empty() {
        return Err("holds no checkpoint".into());
    }
    let ids = || {
        records
            .iter()
            .map(|(id, _, _)| id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match wanted {
        Some(id) => match records.iter().find(|(i, _, _)| *i == id) {
            Some((_, Ok(r), _)) => Ok(r.clone()),
            Some((_, Err(e), _)) => Err(format!("checkpoint {id} is damaged: {e}")),
            None => Err(format!("has no checkpoint {id} (it has {})", ids())),
        },
        None => {
            for (id, r, _) in &records {
                match r.clone().and_then(|r| verify_record(store, &r).map(|()| r)) {
                    Ok(r) => return Ok(r),
                    Err(e) => eprintln!(
                        "eddy state export: warning: checkpoint {id} is damaged ({e}); using the one before it"
                    ),
                }
            }
            Err(format!("no checkpoint verifies ({})", ids()))
        }
    }
}

/// `eddy state import DATA_DIR --operator ID --bin N [FILE]` (stdin
/// without FILE).
pub(crate) fn import(data_dir: &Path, operator: &str, bin: u32, file: Option<&Path>) -> ExitCode {
    let source = file.map_or("stdin".to_string(), |p| p.display().to_string());
    let at = format!("{}: operator {operator} bin {bin}", data_dir.display());
    let input: Box<dyn std::io::Read> = match file {
        Some(p) => match std::fs::File::open(p) {
            Ok(f) => Box::new(f),
            Err(e) => return fail("import", &format!("cannot open {source}: {e}")),
        },
        None => Box::new(std::io::stdin().lock()),
    };
    // The header is checked before the data dir is touched.
    let reader = match StreamReader::open(input) {
        Ok(r) => r,
        Err(e) => return fail("import", &format!("{source}: {e}")),
    };
    let h = reader.header();
    if h.operator != operator || h.bin != bin {
        return fail(
            "import",
            &format!(
                "{source} holds operator {:?} bin {}, not operator {operator:?} bin {bin}; nothing imported into {}",
                h.operator,
                h.bin,
                data_dir.display()
            ),
        );
    }
    if let Some(pid) = holder(data_dir) {
        return fail(
            "import",
            &in_use_message(data_dir, &pid, "a bin cannot be imported into it"),
        );
    }
    // What the import creates, so that a failure can remove it again.
    let created = Created::before(data_dir);
    let store = match Store::open(data_dir, inspect::CACHE_BYTES) {
        Ok(s) => s,
        Err(e) => {
            created.undo();
            return fail("import", &e.0);
        }
    };
    match transfer::import_stream(&store, operator, bin, reader) {
        Ok(done) => {
            for w in &done.warnings {
                eprintln!("eddy state import: warning: {w}");
            }
            eprintln!(
                "eddy state import: {at}: installed {} keys in {} chunks, {} bytes, from {source} as checkpoint {} (version {})",
                done.totals.entries,
                done.totals.chunks,
                done.totals.bytes,
                done.checkpoint,
                done.bin.version
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            // The store has removed what it wrote; the files it opened
            // in a data dir that had no state go too.
            drop(store);
            created.undo();
            fail("import", &format!("{at}: {source}: {e}; nothing imported"))
        }
    }
}

/// Which of a data dir's parts existed before an import.
struct Created {
    data_dir: PathBuf,
    dir: bool,
    state: bool,
    lock: bool,
}

impl Created {
    fn before(data_dir: &Path) -> Created {
        Created {
            data_dir: data_dir.to_path_buf(),
            dir: data_dir.exists(),
            state: data_dir.join("state").exists(),
            lock: data_dir.join("eddy.lock").exists(),
        }
    }

    /// Removes what did not exist before (the store must be closed).
    fn undo(&self) {
        if !self.dir {
            let _ = std::fs::remove_dir_all(&self.data_dir);
            return;
        }
        if !self.state {
            let _ = std::fs::remove_dir_all(self.data_dir.join("state"));
        }
        if !self.lock {
            let _ = std::fs::remove_file(self.data_dir.join("eddy.lock"));
        }
    }
}

fn fail(command: &str, message: &str) -> ExitCode {
    eprintln!("eddy state {command}: {message}");
    ExitCode::FAILURE
}

fn print_or_fail(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is not worth an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail("inspect", &format!("cannot write: {e}")),
    }
}

fn bytes(n: u64) -> String {
    bytesize::ByteSize::b(n).display().iec().to_string()
}

fn age(ms: i64) -> String {
    if ms < 0 {
        return "in the future".into();
    }
    let secs = Duration::from_secs((ms / 1000) as u64);
    if secs.is_zero() {
        return "now".into();
    }
    humantime::format_duration(secs).to_string()
}

/// A table: `right[i]` aligns column `i` to the right.
fn table(head: &[&str], right: &[bool], rows: &[Vec<String>], indent: &str) -> String {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut s = indent.to_string();
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            if right[i] {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                if i != last {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if i != last {
                s.push_str("  ");
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(head.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The readable form of an inspection.
fn render(r: &Inspection) -> String {
    let mut out = String::new();
    let Some(state_dir) = &r.state_dir else {
        out.push_str(&format!(
            "{}: no state (no checkpoint has been taken in this data dir)\n",
            r.data_dir
        ));
        return out;
    };
    out.push_str(&format!(
        "{}: {} checkpoint{}, {} on disk in {state_dir}\n",
        r.data_dir,
        r.checkpoints.len(),
        if r.checkpoints.len() == 1 { "" } else { "s" },
        bytes(r.size_on_disk)
    ));
    if r.checkpoints.is_empty() {
        return out;
    }
    out.push('\n');
    let dash = || "-".to_string();
    let rows: Vec<Vec<String>> = r
        .checkpoints
        .iter()
        .map(|c| {
            vec![
                c.id.to_string(),
                c.time.clone().unwrap_or_else(dash),
                c.age_ms.map_or_else(dash, age),
                bytes(c.record_bytes as u64),
                c.completed
                    .map_or_else(dash, |b| if b { "yes".into() } else { "no".into() }),
                c.keys.map_or_else(dash, |k| k.to_string()),
                c.bytes.map_or_else(dash, bytes),
                match &c.damage {
                    None => "ok".into(),
                    Some(d) => format!("DAMAGED: {d}"),
                },
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "checkpoint",
            "time",
            "age",
            "record",
            "completed",
            "keys",
            "state",
            "status",
        ],
        &[true, false, true, true, false, true, true, false],
        &rows,
        "",
    ));
    let Some(current) = r.current else {
        out.push_str("\nno checkpoint verifies: the next run starts from nothing\n");
        return out;
    };
    let completed = r
        .checkpoints
        .iter()
        .any(|c| c.id == current && c.completed == Some(true));
    out.push_str(&format!(
        "\noperators in checkpoint {current} ({}):\n",
        if completed {
            "a completed run; the next run starts over"
        } else {
            "the next run restores it"
        }
    ));
    if r.operators.is_empty() {
        out.push_str("  none\n");
    }
    for op in &r.operators {
        let watermark = match (&op.watermark, op.watermark_ms) {
            (Some(t), Some(ms)) => format!("{t} ({ms} ms)"),
            (None, Some(ms)) => format!("{ms} ms"),
            _ => "none yet".to_string(),
        };
        out.push_str(&format!(
            "\n{}: watermark {watermark}; {} bin{} with state, {} keys, {} in {} chunks\n",
            op.id,
            op.bins_with_state,
            if op.bins_with_state == 1 { "" } else { "s" },
            op.keys,
            bytes(op.bytes),
            op.chunks
        ));
        if op.bins.is_empty() {
            continue;
        }
        let rows: Vec<Vec<String>> = op
            .bins
            .iter()
            .map(|b| {
                vec![
                    b.bin.to_string(),
                    b.version.to_string(),
                    b.chunks.to_string(),
                    b.keys.to_string(),
                    b.bytes.to_string(),
                ]
            })
            .collect();
        out.push_str(&table(
            &["bin", "version", "chunks", "keys", "bytes"],
            &[true; 5],
            &rows,
            "  ",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_ages_read_well() {
        let t = table(
            &["a", "long header"],
            &[true, false],
            &[vec!["12345".into(), "x".into()]],
            "",
        );
        assert_eq!(t, "    a  long header\n12345  x\n");
        assert_eq!(age(125_000), "2m 5s");
        assert_eq!(age(-5), "in the future");
        assert_eq!(age(10), "now");
    }
}
