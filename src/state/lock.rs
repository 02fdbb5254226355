//! One eddy process per data directory.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// An exclusive lock on `DATA_DIR/eddy.lock`, held while it lives. The
/// file holds the owner's pid, so the refusal can say who has it.
#[derive(Debug)]
pub(crate) struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    pub(crate) fn acquire(data_dir: &Path) -> Result<DataDirLock, String> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| format!("cannot create the data dir {}: {e}", data_dir.display()))?;
        let path = data_dir.join("eddy.lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let owner = std::fs::read_to_string(&path).unwrap_or_default();
                let owner = owner.trim();
                let who = if owner.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {owner})")
                };
                return Err(format!(
                    "the data dir {} is in use by another eddy process{who}; one process per data dir, or give this pipeline its own `[node] data_dir`",
                    data_dir.display()
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", path.display()));
            }
        }
        file.set_len(0)
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_dir_is_refused_and_names_the_owner() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let err = DataDirLock::acquire(dir.path()).unwrap_err();
        assert!(err.contains("in use by another eddy process"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        DataDirLock::acquire(dir.path()).unwrap();
    }
}
