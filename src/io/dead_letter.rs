//! The dead-letter output: records that failed to parse or to evaluate,
//! with where they came from and why, one JSON object per line.
//!
//! The file is opened on the first bad record, so a clean run writes
//! nothing. Every entry is flushed at once: dead letters are rare and are
//! what a user reads after something went wrong.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::data::Batch;
use crate::io::codec::{Encoder, Format};

pub(crate) struct DeadLetter {
    path: PathBuf,
    file: Mutex<Option<File>>,
    count: AtomicU64,
    /// Whether opening the file failed already (said once, not per record).
    open_failed: std::sync::atomic::AtomicBool,
}

impl DeadLetter {
    pub(crate) fn new(path: PathBuf) -> DeadLetter {
        DeadLetter {
            path,
            file: Mutex::new(None),
            count: AtomicU64::new(0),
            open_failed: Default::default(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Entries written (or attempted) so far.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// A line of `file` (or stdin when `None`) that failed to parse.
    pub(crate) fn record_line(
        &self,
        component: &str,
        file: Option<&Path>,
        line: u64,
        offset: u64,
        reason: &str,
        raw: &[u8],
    ) {
        let entry = serde_json::json!({
            "component": component,
            "file": file.map_or("-".to_string(), |p| p.display().to_string()),
            "line": line,
            "offset": offset,
            "reason": reason,
            "record": String::from_utf8_lossy(raw),
        });
        self.write(entry);
    }

    /// Line `line` of a message's payload (on `topic`) that failed to parse.
    pub(crate) fn record_message(
        &self,
        component: &str,
        topic: &str,
        line: u64,
        reason: &str,
        raw: &[u8],
    ) {
        let entry = serde_json::json!({
            "component": component,
            "topic": topic,
            "line": line,
            "reason": reason,
            "record": String::from_utf8_lossy(raw),
        });
        self.write(entry);
    }

    /// A record that an operator could not evaluate.
    pub(crate) fn record_row(&self, component: &str, batch: &Batch, row: usize, reason: &str) {
        let mut encoded = Vec::new();
        Encoder::new(Format::Json).encode(&batch.take_rows(&[row as u32]), &mut encoded);
        let record: serde_json::Value = serde_json::from_slice(&encoded).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&encoded).trim_end().to_string())
        });
        let entry =
            serde_json::json!({ "component": component, "reason": reason, "record": record });
        self.write(entry);
    }

    fn write(&self, mut entry: serde_json::Value) {
        self.count.fetch_add(1, Relaxed);
        if let Some(map) = entry.as_object_mut() {
            let now = jiff::Timestamp::now().to_string();
            map.insert("time".into(), serde_json::Value::String(now));
        }
        let mut line = entry.to_string();
        line.push('\n');
        let mut guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() && !self.open_failed.load(Relaxed) {
            match self.open() {
                Ok(f) => *guard = Some(f),
                Err(e) => {
                    self.open_failed.store(true, Relaxed);
                    tracing::error!(path = %self.path.display(), error = %e, "cannot open the dead-letter file; bad records are counted but not kept");
                }
            }
        }
        if let Some(f) = guard.as_mut()
            && let Err(e) = f.write_all(line.as_bytes())
        {
            tracing::error!(path = %self.path.display(), error = %e, "cannot write to the dead-letter file");
        }
    }

    fn open(&self) -> std::io::Result<File> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
    }
}
