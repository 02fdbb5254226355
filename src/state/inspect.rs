//! What a data dir holds: its checkpoints, whether each verifies, and the
//! operators and bins of the newest good one (for `eddy state inspect`).
//! Also how the `eddy state` commands open a data dir without creating
//! one, and how they tell that a running eddy holds it.

use std::path::Path;

use serde::Serialize;

use super::chunk::verify;
use super::record::CheckpointRecord;
use super::store::{Store, now_ms};
use super::transfer::chunk_entries;

/// Memory for sled's cache when a command opens a store: reading goes a
/// chunk at a time, so little is needed.
pub(crate) const CACHE_BYTES: u64 = 1 << 20;

/// The version of the JSON document below; it changes only when a field
/// changes meaning or goes away (new fields can appear).
pub(crate) const INSPECT_FORMAT: u32 = 1;

/// Everything `eddy state inspect` reports.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Inspection {
    pub(crate) format: u32,
    pub(crate) data_dir: String,
    /// `DATA_DIR/state`, or `None` when there is no state at all.
    pub(crate) state_dir: Option<String>,
    /// The state's size on disk (sled's files), in bytes.
    pub(crate) size_on_disk: u64,
    /// Newest first, damaged ones included.
    pub(crate) checkpoints: Vec<CheckpointInfo>,
    /// The newest checkpoint that verifies: the one a restart restores,
    /// and the one `operators` describes.
    pub(crate) current: Option<u64>,
    pub(crate) operators: Vec<OperatorInfo>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct CheckpointInfo {
    pub(crate) id: u64,
    /// When it was taken, RFC 3339 (`None` if its record is unreadable).
    pub(crate) time: Option<String>,
    pub(crate) time_ms: Option<i64>,
    /// How long ago, at the time of inspection.
    pub(crate) age_ms: Option<i64>,
    /// Bytes of the checkpoint record itself (not of the state it names).
    pub(crate) record_bytes: usize,
    /// Whether the run had ended when it was taken (the next run then
    /// starts over instead of restoring it).
    pub(crate) completed: Option<bool>,
    /// The number of bins keys were hashed into.
    pub(crate) bin_count: Option<u32>,
    /// State entries and their bytes (as stored) over all operators.
    pub(crate) keys: Option<u64>,
    pub(crate) bytes: Option<u64>,
    /// Whether the record and every chunk it names verify.
    pub(crate) ok: bool,
    /// What is wrong, when not `ok`.
    pub(crate) damage: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct OperatorInfo {
    /// The component id (its sled tree is `op:<id>`).
    pub(crate) id: String,
    /// The operator's input watermark, epoch ms (`None`: none yet).
    pub(crate) watermark_ms: Option<i64>,
    /// The same as RFC 3339.
    pub(crate) watermark: Option<String>,
    pub(crate) bins_with_state: usize,
    pub(crate) chunks: u64,
    pub(crate) keys: u64,
    pub(crate) bytes: u64,
    pub(crate) bins: Vec<BinInfo>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct BinInfo {
    pub(crate) bin: u32,
    /// The store version holding this bin's state (checkpoint writes,
    /// spills and imports share one counter; not a checkpoint id).
    pub(crate) version: u64,
    pub(crate) chunks: u32,
    /// State entries (for a window, one per key and open window).
    pub(crate) keys: u64,
    /// Bytes of its chunks as stored (encoded entries and checksums).
    pub(crate) bytes: u64,
}

/// Epoch ms as RFC 3339.
pub(crate) fn rfc3339(ms: i64) -> Option<String> {
    jiff::Timestamp::from_millisecond(ms)
        .ok()
        .map(|t| format!("{t:.3}"))
}

/// The pid of the eddy holding `data_dir`'s lock, if one does. Probes
/// with a shared lock, creating nothing.
#[allow(
    clippy::incompatible_msrv,
    reason = "File locks are stable since 1.89, which lock.rs already needs; Cargo.toml's rust-version (1.88) is behind"
)]
pub(crate) fn holder(data_dir: &Path) -> Option<String> {
    let path = data_dir.join("eddy.lock");
    let file = std::fs::File::open(&path).ok()?;
    match file.try_lock_shared() {
        Ok(()) => None,
        Err(std::fs::TryLockError::WouldBlock) => Some(
            std::fs::read_to_string(&path)
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

/// Why a command cannot use a data dir a running eddy holds. sled opens
/// its files exclusively and has no read-only mode, so not even reading
/// is possible while eddy runs.
pub(crate) fn in_use_message(data_dir: &Path, pid: &str, what: &str) -> String {
    let who = if pid.is_empty() {
        "a running eddy".to_string()
    } else {
        format!("a running eddy (pid {pid})")
    };
    format!(
        "{} is in use by {who}, which holds its lock; {what} while it runs, because sled (which keeps the state) opens its files exclusively and has no read-only mode. Stop it first (SIGTERM takes a final checkpoint) and try again",
        data_dir.display()
    )
}

/// Opens the store of an existing data dir for reading: `Ok(None)` when
/// the dir holds no state; nothing is created. A missing dir, or one a
/// running eddy holds, is an error saying so.
pub(crate) fn open_existing(data_dir: &Path, what: &str) -> Result<Option<Store>, String> {
    match std::fs::metadata(data_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{} is not a directory", data_dir.display())),
        Err(e) => {
            return Err(format!("no data dir at {}: {e}", data_dir.display()));
        }
    }
    if !data_dir.join("state").is_dir() {
        return Ok(None);
    }
    if let Some(pid) = holder(data_dir) {
        return Err(in_use_message(data_dir, &pid, what));
    }
    Store::open(data_dir, CACHE_BYTES)
        .map(Some)
        .map_err(|e| e.0)
}

/// Checks every chunk `record` names: present, checksum, and the counts
/// the record gives. One chunk in memory at a time.
pub(crate) fn verify_record(store: &Store, record: &CheckpointRecord) -> Result<(), String> {
    for op in &record.operators {
        for b in &op.bins {
            let (mut entries, mut bytes) = (0u64, 0u64);
            for (c, raw) in store.raw_chunks(&op.id, b).enumerate() {
                let at = || format!("operator {} bin {} chunk {c}", op.id, b.bin);
                let raw = raw.map_err(|e| format!("{}: {e}", at()))?;
                verify(&raw).map_err(|e| format!("{}: {e}", at()))?;
                entries += chunk_entries(&raw).map_err(|e| format!("{}: {e}", at()))?;
                bytes += raw.len() as u64;
            }
            if (entries, bytes) != (b.entries, b.bytes) {
                return Err(format!(
                    "operator {} bin {}: its chunks hold {entries} keys in {bytes} bytes, the record says {} in {}",
                    op.id, b.bin, b.entries, b.bytes
                ));
            }
        }
    }
    Ok(())
}

/// Describes the data dir: every checkpoint (verified), and the operators
/// of the newest good one. Reads every chunk once per checkpoint that
/// names it; changes nothing.
pub(crate) fn inspect(data_dir: &Path) -> Result<Inspection, String> {
    let store = open_existing(data_dir, "its state cannot be inspected")?;
    let mut out = Inspection {
        format: INSPECT_FORMAT,
        data_dir: data_dir.display().to_string(),
        state_dir: None,
        size_on_disk: 0,
        checkpoints: Vec::new(),
        current: None,
        operators: Vec::new(),
    };
    let Some(store) = store else {
        return Ok(out);
    };
    out.state_dir = Some(store.dir().display().to_string());
    out.size_on_disk = store.size_on_disk();
    let now = now_ms();
    let mut current: Option<CheckpointRecord> = None;
    for (id, record, record_bytes) in store.records() {
        let checked = record
            .clone()
            .and_then(|r| verify_record(&store, &r).map(|()| r));
        let r = record.as_ref().ok();
        let totals = r.map(CheckpointRecord::totals);
        out.checkpoints.push(CheckpointInfo {
            id,
            time: r.and_then(|r| rfc3339(r.time_ms)),
            time_ms: r.map(|r| r.time_ms),
            age_ms: r.map(|r| now - r.time_ms),
            record_bytes,
            completed: r.map(|r| r.completed),
            bin_count: r.map(|r| r.bins),
            keys: totals.map(|t| t.0),
            bytes: totals.map(|t| t.1),
            ok: checked.is_ok(),
            damage: checked.as_ref().err().cloned(),
        });
        if current.is_none()
            && let Ok(r) = checked
        {
            current = Some(r);
        }
    }
    if let Some(record) = current {
        out.current = Some(record.id);
        out.operators = record
            .operators
            .iter()
            .map(|op| {
                let watermark_ms = (op.watermark != i64::MIN).then_some(op.watermark);
                OperatorInfo {
                    id: op.id.clone(),
                    watermark_ms,
                    watermark: watermark_ms.and_then(rfc3339),
                    bins_with_state: op.bins.len(),
                    chunks: op.bins.iter().map(|b| u64::from(b.chunks)).sum(),
                    keys: op.bins.iter().map(|b| b.entries).sum(),
                    bytes: op.bins.iter().map(|b| b.bytes).sum(),
                    bins: op
                        .bins
                        .iter()
                        .map(|b| BinInfo {
                            bin: b.bin,
                            version: b.version,
                            chunks: b.chunks,
                            keys: b.entries,
                            bytes: b.bytes,
                        })
                        .collect(),
                }
            })
            .collect();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BinContent, BinWrite, OperatorRecord};

    fn record(id: u64) -> CheckpointRecord {
        CheckpointRecord {
            id,
            time_ms: now_ms(),
            bins: 4,
            completed: false,
            operators: vec![OperatorRecord {
                id: "win".into(),
                watermark: 1_767_225_600_000,
                bins: Vec::new(),
            }],
            sources: Vec::new(),
            sinks: Vec::new(),
            signatures: Vec::new(),
        }
    }

    #[test]
    fn a_damaged_checkpoint_is_listed_with_its_reason_and_the_one_before_is_shown() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), CACHE_BYTES).unwrap();
            for id in 1..=2 {
                let entries = (0..5000u32)
                    .map(|i| (i.to_be_bytes().to_vec(), vec![id as u8; 40]))
                    .collect();
                store
                    .commit(
                        record(id),
                        vec![BinWrite {
                            op: "win".into(),
                            bin: 2,
                            content: BinContent::Entries(entries),
                        }],
                        &[],
                    )
                    .unwrap();
            }
        }
        let report = inspect(dir.path()).unwrap();
        assert_eq!(report.current, Some(2));
        assert!(report.checkpoints.iter().all(|c| c.ok));
        let op = &report.operators[0];
        assert_eq!(
            (op.id.as_str(), op.keys, op.bins_with_state),
            ("win", 5000, 1)
        );
        assert_eq!(op.watermark.as_deref(), Some("2026-01-01T00:00:00.000Z"));
        assert!(op.bins[0].chunks >= 1 && op.bins[0].version == 2);

        // Damage checkpoint 2's chunk on disk.
        {
            let store = Store::open(dir.path(), CACHE_BYTES).unwrap();
            store.damage_chunk("win", 2, 2, 0, 10);
        }
        let report = inspect(dir.path()).unwrap();
        assert_eq!(report.current, Some(1));
        let newest = &report.checkpoints[0];
        assert_eq!(newest.id, 2);
        assert!(!newest.ok);
        assert!(
            newest
                .damage
                .as_deref()
                .unwrap()
                .contains("operator win bin 2 chunk"),
            "{newest:?}"
        );
        assert_eq!(report.operators[0].bins[0].version, 1);
    }

    #[test]
    fn missing_and_empty_dirs_are_told_apart_and_nothing_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let e = inspect(&missing).unwrap_err();
        assert!(e.contains("no data dir at"), "{e}");
        assert!(!missing.exists());
        let report = inspect(dir.path()).unwrap();
        assert!(report.state_dir.is_none() && report.checkpoints.is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_held_data_dir_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), CACHE_BYTES).unwrap();
        let e = inspect(dir.path()).unwrap_err();
        assert!(e.contains("in use by a running eddy (pid"), "{e}");
        assert!(e.contains("no read-only mode"), "{e}");
        drop(store);
        assert!(holder(dir.path()).is_none());
        inspect(dir.path()).unwrap();
    }
}
