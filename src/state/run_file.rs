//! Runs of partial aggregates a window spills between checkpoints, in a
//! plain append-only file beside the store.
//!
//! Not in sled: a run lives until the next checkpoint merges its bin (a
//! few seconds), and sled kept every value written to it in memory until
//! then. Held at the peak with an 8 MiB cache, 72 MiB of the daemon's peak
//! heap were spilled runs inside sled. Here they are in the page cache,
//! which the kernel can drop. Nothing in the file outlives the process:
//! it is unlinked as soon as it is open, so a crash leaves nothing behind
//! (a restart restores from the checkpoint, which does not need the runs).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::BinEntries;

/// Where one run is in its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    offset: u64,
    len: u64,
    /// CRC-32 of its bytes: merging passes values seen once through into
    /// a checkpoint undecoded, so a run read back damaged must be caught
    /// here, not sealed into the store with a valid checksum.
    crc: u32,
    /// Entries in it.
    pub(crate) entries: u64,
}

pub(crate) struct RunFile {
    file: File,
    /// Where the file was created (for errors: it is unlinked).
    path: PathBuf,
    end: u64,
    /// Runs appended and not released: at none, the file is emptied.
    live: usize,
}

/// Tells apart the files of one process (one per window instance).
static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

impl RunFile {
    /// A new, empty run file in `dir` for operator `op`.
    pub(crate) fn create(dir: &Path, op: &str) -> Result<RunFile, String> {
        let n = NEXT_FILE.fetch_add(1, Ordering::Relaxed);
        let safe: String = op
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = dir.join(format!("{safe}-{}-{n}.runs", std::process::id()));
        let err = |what: &str, e: std::io::Error| format!("{} {what}: {e}", path.display());
        std::fs::create_dir_all(dir).map_err(|e| err("(its directory) cannot be created", e))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| err("cannot be created", e))?;
        std::fs::remove_file(&path).map_err(|e| err("cannot be unlinked", e))?;
        Ok(RunFile {
            file,
            path,
            end: 0,
            live: 0,
        })
    }

    /// Appends `entries` as one run.
    pub(crate) fn append(&mut self, entries: &BinEntries) -> Result<Run, String> {
        let bytes = entries.as_bytes();
        self.file
            .write_all_at(bytes, self.end)
            .map_err(|e| format!("{}: cannot write a spilled run: {e}", self.path.display()))?;
        let run = Run {
            offset: self.end,
            len: bytes.len() as u64,
            crc: crc32fast::hash(bytes),
            entries: entries.len() as u64,
        };
        self.end += run.len;
        self.live += 1;
        Ok(run)
    }

    /// The entries of `run`.
    pub(crate) fn read(&self, run: Run) -> Result<BinEntries, String> {
        let place = || {
            format!(
                "{}: the spilled run at byte {} ({} bytes)",
                self.path.display(),
                run.offset,
                run.len
            )
        };
        let mut bytes = vec![0; run.len as usize];
        self.file
            .read_exact_at(&mut bytes, run.offset)
            .map_err(|e| format!("{}: cannot be read: {e}", place()))?;
        if crc32fast::hash(&bytes) != run.crc {
            return Err(format!("{}: checksum mismatch", place()));
        }
        let mut entries = BinEntries::new();
        entries
            .append(&bytes)
            .map_err(|e| format!("{}: {e}", place()))?;
        Ok(entries)
    }

    /// `run` is merged elsewhere; once no run is live, the file is emptied.
    pub(crate) fn release(&mut self, _run: Run) {
        self.live = self.live.saturating_sub(1);
        if self.live == 0 && self.end > 0 {
            // Failing to shrink only costs disk space until the next try.
            if self.file.set_len(0).is_ok() {
                self.end = 0;
            }
        }
    }

    /// Bytes in the file.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_read_back_and_the_file_empties_once_all_are_released() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = RunFile::create(dir.path(), "per sensor").unwrap();
        // Unlinked: nothing is left in the directory, even now.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let mut a = BinEntries::new();
        a.push(b"k1", b"v1");
        a.push(b"k2", b"");
        let mut b = BinEntries::new();
        b.push(b"k3", b"v3");
        let (ra, rb) = (f.append(&a).unwrap(), f.append(&b).unwrap());
        assert_eq!(f.read(rb).unwrap(), b);
        assert_eq!(f.read(ra).unwrap(), a);
        f.release(ra);
        assert!(f.len() > 0, "a live run keeps the file");
        assert_eq!(f.read(rb).unwrap(), b);
        f.release(rb);
        assert_eq!(f.len(), 0);
        let rc = f.append(&b).unwrap();
        assert_eq!(f.read(rc).unwrap(), b);
    }

    #[test]
    fn a_run_damaged_on_disk_is_an_error_naming_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = RunFile::create(dir.path(), "win").unwrap();
        let mut a = BinEntries::new();
        a.push(b"key", b"value");
        let run = f.append(&a).unwrap();
        // A flipped bit in the value keeps the framing intact.
        let at = run.offset + run.len - 1;
        f.file.write_all_at(b"W", at).unwrap();
        let e = f.read(run).unwrap_err();
        assert!(
            e.contains("checksum mismatch") && e.contains("the spilled run at byte 0"),
            "{e}"
        );
    }
}
