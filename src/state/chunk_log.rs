//! The bytes of checkpointed bins: chunks in append-only segment files
//! beside sled, which keeps only where each chunk is (a [`Loc`]).
//!
//! Not in sled: sled keeps the values written to it in memory, well past
//! its cache size (a value above a quarter of a segment is a blob, counted
//! by its pointer). Held at the peak with an 8 MiB cache and 2 s
//! checkpoints, 61 of the daemon's 126 MB of peak heap were chunks inside
//! sled, so the checkpoint interval set the memory. Here chunks are in
//! the page cache, which the kernel can drop.
//!
//! Durability: a commit calls [`ChunkLog::sync`] before it writes the
//! record that refers to the chunks. A crash mid-append leaves a torn
//! tail no record refers to; every open appends to a new segment, so
//! nothing is ever written after a torn tail.
//!
//! Space: a dead chunk's blocks are freed at once (`fallocate` punching a
//! hole, where the file system can), and a segment nothing lives in is
//! deleted once it is no longer appended to.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where one chunk is. Encoded as sled's value for the chunk's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    segment: u32,
    offset: u64,
    len: u32,
}

/// Tells a [`Loc`] from a chunk stored inline by earlier versions: an
/// inline chunk starts with its entry count, and 69 entries (`E`) do not
/// fit in the 20 bytes of an encoded `Loc`.
const LOC_TAG: &[u8; 4] = b"EDY1";
const LOC_BYTES: usize = 20;

impl Loc {
    pub(crate) fn encode(&self) -> [u8; LOC_BYTES] {
        let mut v = [0u8; LOC_BYTES];
        v[..4].copy_from_slice(LOC_TAG);
        v[4..8].copy_from_slice(&self.segment.to_le_bytes());
        v[8..16].copy_from_slice(&self.offset.to_le_bytes());
        v[16..].copy_from_slice(&self.len.to_le_bytes());
        v
    }

    /// `None` for anything else (an inline chunk).
    pub(crate) fn decode(v: &[u8]) -> Option<Loc> {
        if v.len() != LOC_BYTES || &v[..4] != LOC_TAG {
            return None;
        }
        Some(Loc {
            segment: u32::from_le_bytes(v[4..8].try_into().ok()?),
            offset: u64::from_le_bytes(v[8..16].try_into().ok()?),
            len: u32::from_le_bytes(v[16..].try_into().ok()?),
        })
    }
}

/// A segment is appended to up to about this size, then a new one starts.
const SEGMENT_BYTES: u64 = 64 << 20;

struct Segment {
    file: Arc<File>,
    /// Bytes of chunks in it that are not freed.
    live: u64,
    end: u64,
}

struct Segments {
    active: u32,
    all: BTreeMap<u32, Segment>,
    /// Written to since the last sync.
    unsynced: BTreeSet<u32>,
    /// A segment was created or deleted since the last sync.
    dir_unsynced: bool,
}

pub(crate) struct ChunkLog {
    dir: PathBuf,
    segment_bytes: u64,
    segments: Mutex<Segments>,
}

fn segment_name(id: u32) -> String {
    format!("{id:08}.chunks")
}

fn segment_id(name: &str) -> Option<u32> {
    name.strip_suffix(".chunks")?.parse().ok()
}

impl ChunkLog {
    /// Opens the segments in `dir` (created if missing). `live` is every
    /// chunk the store still refers to: a segment holding none of them is
    /// deleted. Appends go to a new segment.
    pub(crate) fn open(
        dir: &Path,
        live: impl IntoIterator<Item = Loc>,
    ) -> Result<ChunkLog, String> {
        Self::open_sized(dir, live, SEGMENT_BYTES)
    }

    fn open_sized(
        dir: &Path,
        live: impl IntoIterator<Item = Loc>,
        segment_bytes: u64,
    ) -> Result<ChunkLog, String> {
        let err = |what: &str, e: io::Error| format!("{} {what}: {e}", dir.display());
        std::fs::create_dir_all(dir).map_err(|e| err("cannot be created", e))?;
        let mut live_bytes: BTreeMap<u32, u64> = BTreeMap::new();
        for loc in live {
            *live_bytes.entry(loc.segment).or_default() += u64::from(loc.len);
        }
        let mut all = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(|e| err("cannot be listed", e))? {
            let entry = entry.map_err(|e| err("cannot be listed", e))?;
            let Some(id) = entry.file_name().to_str().and_then(segment_id) else {
                continue;
            };
            let path = entry.path();
            let live = live_bytes.get(&id).copied().unwrap_or(0);
            if live == 0 {
                std::fs::remove_file(&path).map_err(|e| err("cannot drop a dead segment", e))?;
                continue;
            }
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| err(&format!("segment {id} cannot be opened"), e))?;
            let end = file.metadata().map_err(|e| err("cannot stat", e))?.len();
            let file = Arc::new(file);
            all.insert(id, Segment { file, live, end });
        }
        let log = ChunkLog {
            dir: dir.to_path_buf(),
            segment_bytes,
            segments: Mutex::new(Segments {
                active: 0,
                all,
                unsynced: BTreeSet::new(),
                dir_unsynced: true,
            }),
        };
        {
            let mut s = log.lock();
            let next = s.all.keys().next_back().map_or(1, |id| id + 1);
            log.start_segment(&mut s, next)?;
        }
        Ok(log)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Segments> {
        self.segments.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start_segment(&self, s: &mut Segments, id: u32) -> Result<(), String> {
        let path = self.dir.join(segment_name(id));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| format!("{} cannot be created: {e}", path.display()))?;
        s.all.insert(
            id,
            Segment {
                file: Arc::new(file),
                live: 0,
                end: 0,
            },
        );
        s.active = id;
        s.dir_unsynced = true;
        Ok(())
    }

    /// Appends one chunk. Durable only after the next [`sync`](Self::sync).
    pub(crate) fn append(&self, bytes: &[u8]) -> Result<Loc, String> {
        let len = u32::try_from(bytes.len()).map_err(|_| "a chunk over 4 GiB".to_string())?;
        let mut s = self.lock();
        let full = s
            .all
            .get(&s.active)
            .is_some_and(|a| a.end > 0 && a.end + u64::from(len) > self.segment_bytes);
        if full {
            let next = s.active + 1;
            let old = s.active;
            self.start_segment(&mut s, next)?;
            // The old one may be all dead by now; it stays until its last
            // chunk is freed otherwise.
            if s.all.get(&old).is_some_and(|o| o.live == 0) {
                self.delete(&mut s, old);
            }
        }
        let id = s.active;
        let seg = s.all.get_mut(&id).expect("the active segment is open");
        let offset = seg.end;
        seg.file.write_all_at(bytes, offset).map_err(|e| {
            format!(
                "{}: cannot write a chunk: {e}",
                self.dir.join(segment_name(id)).display()
            )
        })?;
        seg.end += u64::from(len);
        seg.live += u64::from(len);
        s.unsynced.insert(id);
        Ok(Loc {
            segment: id,
            offset,
            len,
        })
    }

    /// The chunk's bytes as written (the caller verifies them).
    pub(crate) fn read(&self, loc: Loc) -> Result<Vec<u8>, String> {
        let path = || {
            self.dir
                .join(segment_name(loc.segment))
                .display()
                .to_string()
        };
        let file = self
            .lock()
            .all
            .get(&loc.segment)
            .map(|s| Arc::clone(&s.file))
            .ok_or_else(|| format!("{} is missing", path()))?;
        let mut buf = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut buf, loc.offset)
            .map_err(|e| format!("{} at {}: {e}", path(), loc.offset))?;
        Ok(buf)
    }

    /// No record refers to the chunk any more: its space is freed.
    pub(crate) fn free(&self, loc: Loc) {
        let mut s = self.lock();
        let active = s.active;
        let Some(seg) = s.all.get_mut(&loc.segment) else {
            return;
        };
        seg.live = seg.live.saturating_sub(u64::from(loc.len));
        if seg.live == 0 && loc.segment != active {
            self.delete(&mut s, loc.segment);
        } else {
            punch_hole(&seg.file, loc.offset, u64::from(loc.len));
        }
    }

    fn delete(&self, s: &mut Segments, id: u32) {
        s.all.remove(&id);
        s.unsynced.remove(&id);
        // Readers holding the file keep reading it; a failed unlink leaves
        // a file the next open deletes (no chunk in it is live).
        let _ = std::fs::remove_file(self.dir.join(segment_name(id)));
        s.dir_unsynced = true;
    }

    /// Makes every chunk appended so far durable.
    pub(crate) fn sync(&self) -> Result<(), String> {
        let (files, dir) = {
            let mut s = self.lock();
            let ids = std::mem::take(&mut s.unsynced);
            let files: Vec<(u32, Arc<File>)> = ids
                .iter()
                .filter_map(|id| s.all.get(id).map(|seg| (*id, Arc::clone(&seg.file))))
                .collect();
            (files, std::mem::take(&mut s.dir_unsynced))
        };
        let failed = |what: String, e: io::Error, files: &[(u32, Arc<File>)]| {
            let mut s = self.lock();
            s.unsynced.extend(files.iter().map(|(id, _)| *id));
            s.dir_unsynced |= dir;
            format!("{what}: {e}")
        };
        for (id, file) in &files {
            if let Err(e) = file.sync_data() {
                let path = self.dir.join(segment_name(*id));
                return Err(failed(
                    format!("{} cannot be synced", path.display()),
                    e,
                    &files,
                ));
            }
        }
        if dir && let Err(e) = File::open(&self.dir).and_then(|d| d.sync_all()) {
            return Err(failed(
                format!("{} cannot be synced", self.dir.display()),
                e,
                &files,
            ));
        }
        Ok(())
    }

    /// Forgets every chunk (the store dropped all its state).
    pub(crate) fn clear(&self) -> Result<(), String> {
        let mut s = self.lock();
        let active = s.active;
        let others: Vec<u32> = s.all.keys().copied().filter(|id| *id != active).collect();
        for id in others {
            self.delete(&mut s, id);
        }
        let seg = s.all.get_mut(&active).expect("the active segment is open");
        seg.file.set_len(0).map_err(|e| {
            format!(
                "{} cannot be emptied: {e}",
                self.dir.join(segment_name(active)).display()
            )
        })?;
        seg.end = 0;
        seg.live = 0;
        Ok(())
    }

    /// Flips bits of a chunk on disk, as a failing disk would.
    #[cfg(test)]
    pub(crate) fn damage(&self, loc: Loc, at: usize) {
        let mut bytes = self.read(loc).unwrap();
        bytes[at] ^= 0x20;
        let file = Arc::clone(&self.lock().all[&loc.segment].file);
        file.write_all_at(&bytes, loc.offset).unwrap();
        file.sync_data().unwrap();
    }

    /// Bytes the segments take on disk (holes excluded).
    pub(crate) fn size_on_disk(&self) -> u64 {
        let files: Vec<Arc<File>> = self
            .lock()
            .all
            .values()
            .map(|s| Arc::clone(&s.file))
            .collect();
        files
            .iter()
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.blocks() * 512)
            .sum()
    }
}

/// Frees the blocks of a dead range. Where the file system cannot, the
/// space comes back when the segment's last chunk dies.
#[cfg(target_os = "linux")]
fn punch_hole(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return;
    };
    // SAFETY: a plain syscall on an open descriptor; no memory is passed.
    unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn punch_hole(_: &File, _: u64, _: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: u64 = 1 << 20;

    fn segments(dir: &Path) -> Vec<u32> {
        let mut ids: Vec<u32> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| segment_id(e.unwrap().file_name().to_str().unwrap()))
            .collect();
        ids.sort();
        ids
    }

    #[test]
    fn locs_round_trip_and_inline_chunks_are_not_taken_for_one() {
        let loc = Loc {
            segment: 7,
            offset: 1 << 40,
            len: 300,
        };
        assert_eq!(Loc::decode(&loc.encode()), Some(loc));
        let inline = super::super::chunk::Chunk {
            entries: vec![(b"k".to_vec(), b"v".to_vec())],
        }
        .encode();
        assert_eq!(Loc::decode(&inline), None);
        assert_eq!(Loc::decode(&loc.encode()[..19]), None);
    }

    #[test]
    fn chunks_read_back_across_segments_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let log = ChunkLog::open_sized(dir.path(), [], SMALL).unwrap();
        // Two to a segment: 0 and 1, 2 and 3, then 4.
        let big = vec![3u8; (SMALL * 2 / 5) as usize];
        let locs: Vec<Loc> = (0..5u8)
            .map(|i| {
                let mut b = big.clone();
                b[0] = i;
                log.append(&b).unwrap()
            })
            .collect();
        log.sync().unwrap();
        assert_eq!(segments(dir.path()).len(), 3, "appends rotate segments");
        for (i, loc) in locs.iter().enumerate() {
            assert_eq!(log.read(*loc).unwrap()[0], i as u8);
        }
        drop(log);
        // Reopened with only chunks 1 and 4 live: the segment holding
        // neither is gone, the rest read as before, and appends go to a new one.
        let live = [locs[1], locs[4]];
        let log = ChunkLog::open_sized(dir.path(), live, SMALL).unwrap();
        let held: BTreeSet<u32> = live.iter().map(|l| l.segment).collect();
        let new = log.append(b"after").unwrap();
        assert!(new.segment > locs[4].segment);
        let mut expected: Vec<u32> = held.into_iter().collect();
        expected.push(new.segment);
        assert_eq!(segments(dir.path()), expected);
        assert_eq!(log.read(locs[1]).unwrap()[0], 1);
        assert_eq!(log.read(locs[4]).unwrap()[0], 4);
        assert_eq!(log.read(new).unwrap(), b"after");
        let gone = log.read(locs[2]).map(|b| b.len());
        assert!(
            gone.as_ref().is_err_and(|e| e.contains("is missing")),
            "{gone:?}"
        );
    }

    #[test]
    fn freed_chunks_give_their_space_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = ChunkLog::open_sized(dir.path(), [], SMALL).unwrap();
        // In one segment: only holes give space back.
        let chunk = vec![9u8; 64 << 10];
        let locs: Vec<Loc> = (0..8).map(|_| log.append(&chunk).unwrap()).collect();
        log.sync().unwrap();
        assert_eq!(segments(dir.path()).len(), 1);
        let full = log.size_on_disk();
        assert!(full >= 8 * (64 << 10), "{full}");
        for loc in &locs[..6] {
            log.free(*loc);
        }
        let after = log.size_on_disk();
        // ext4, xfs, btrfs and tmpfs punch holes; the survivors still read.
        assert!(after <= 3 * (64 << 10), "{full} -> {after} bytes");
        assert_eq!(log.read(locs[7]).unwrap(), chunk);
    }

    #[test]
    fn a_segment_all_dead_is_deleted_once_appends_moved_on() {
        let dir = tempfile::tempdir().unwrap();
        let log = ChunkLog::open_sized(dir.path(), [], SMALL).unwrap();
        let big = vec![1u8; (SMALL * 2 / 3) as usize];
        let first = log.append(&big).unwrap();
        let second = log.append(&big).unwrap();
        assert_ne!(first.segment, second.segment);
        log.free(first);
        assert_eq!(segments(dir.path()), vec![second.segment]);
        // The active one stays while empty: appends continue there.
        log.free(second);
        assert_eq!(segments(dir.path()), vec![second.segment]);
    }

    #[test]
    fn a_torn_tail_is_never_appended_after() {
        let dir = tempfile::tempdir().unwrap();
        let log = ChunkLog::open_sized(dir.path(), [], SMALL).unwrap();
        let kept = log.append(b"committed chunk").unwrap();
        log.sync().unwrap();
        drop(log);
        // A crash mid-append: half a chunk at the end of the segment.
        let path = dir.path().join(segment_name(kept.segment));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"torn");
        std::fs::write(&path, bytes).unwrap();
        let log = ChunkLog::open_sized(dir.path(), [kept], SMALL).unwrap();
        let next = log.append(b"next").unwrap();
        assert_ne!(next.segment, kept.segment);
        assert_eq!(log.read(kept).unwrap(), b"committed chunk");
        assert_eq!(log.read(next).unwrap(), b"next");
    }
}
