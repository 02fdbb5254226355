//! The checkpoint and recovery path of the store, measured for
//! `cargo bench --bench state`: window-shaped entries (a window start and
//! a key; count, sum, min and max) held per bin as the window operator
//! holds them, a bin re-encoded in full when it is dirty, committed through
//! [`Store::commit`], and recovered by opening the store and decoding every
//! bin, as a restarting worker does.

use std::path::Path;
use std::time::Instant;

use super::{BinContent, BinWrite, CheckpointRecord, OperatorRecord, Store};
use crate::kernel::hash::{KeyHasher, bin_of};

/// The engine's own hash of an integer key.
fn hash_u64(k: u64) -> u64 {
    let mut h = KeyHasher::new();
    h.int(k as i64);
    h.finish()
}

/// What one round of checkpoints took, per scenario.
#[derive(Clone, Debug)]
pub struct CheckpointFigures {
    pub keys: u64,
    /// The first checkpoint: every key is new.
    pub full: Commit,
    /// 10 % of the keys changed, spread uniformly over the key space: in
    /// practice every bin is dirty.
    pub dirty_spread: Commit,
    /// 10 % of the keys changed, all in 10 % of the bins (keys with
    /// locality, e.g. one site's sensors).
    pub dirty_clustered: Commit,
    /// Open the store, pick the checkpoint, decode every bin.
    pub recovery_ms: f64,
    pub recovered_keys: u64,
    /// The data dir's size on disk after all of it.
    pub disk_bytes: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Commit {
    /// Re-encoding the dirty bins and committing them.
    pub ms: f64,
    pub bins: usize,
    pub bytes: u64,
}

const OP: &str = "w";
const WINDOW_START: i64 = 1_767_225_600_000;

/// One bin's state, as the operator keeps it in memory.
type BinState = Vec<(i64, [i64; 4])>;

fn encode(bin: &BinState) -> crate::state::BinEntries {
    bin.iter()
        .map(|(k, v)| {
            (
                postcard::to_stdvec(&(WINDOW_START, *k)).expect("encodes"),
                postcard::to_stdvec(v).expect("encodes"),
            )
        })
        .collect()
}

fn commit(
    store: &Store,
    id: u64,
    bins: u32,
    state: &[BinState],
    dirty: &[bool],
) -> Result<Commit, String> {
    let started = Instant::now();
    let writes: Vec<BinWrite> = state
        .iter()
        .enumerate()
        .filter(|(b, _)| dirty[*b])
        .map(|(b, s)| BinWrite {
            op: OP.to_string(),
            bin: b as u32,
            content: BinContent::Entries(encode(s)),
        })
        .collect();
    let record = CheckpointRecord {
        id,
        time_ms: crate::state::now_ms(),
        bins,
        completed: false,
        operators: vec![OperatorRecord {
            id: OP.to_string(),
            watermark: WINDOW_START,
            bins: Vec::new(),
        }],
        sources: Vec::new(),
        sinks: Vec::new(),
        signatures: Vec::new(),
    };
    let (_, stats) = store.commit(record, writes, &[]).map_err(|e| e.0)?;
    Ok(Commit {
        ms: started.elapsed().as_secs_f64() * 1e3,
        bins: stats.bins,
        bytes: stats.bytes,
    })
}

/// Runs the scenarios on a fresh store in `dir` (which must be empty).
pub fn checkpoint_figures(dir: &Path, keys: u64, bins: u32) -> Result<CheckpointFigures, String> {
    let mut state: Vec<BinState> = vec![Vec::new(); bins as usize];
    for k in 0..keys as i64 {
        state[bin_of(hash_u64(k as u64), bins) as usize].push((k, [1, k % 100, k % 100, k % 100]));
    }
    let store = Store::open(dir, 64 << 20).map_err(|e| e.0)?;
    let full = commit(&store, 1, bins, &state, &vec![true; bins as usize])?;

    // Every tenth key, in a scrambled order so that no bin is spared.
    let mut dirty = vec![false; bins as usize];
    for (b, s) in state.iter_mut().enumerate() {
        for (k, v) in s.iter_mut() {
            if hash_u64(*k as u64 ^ 0x5bd1_e995).is_multiple_of(10) {
                v[0] += 1;
                dirty[b] = true;
            }
        }
    }
    let dirty_spread = commit(&store, 2, bins, &state, &dirty)?;

    // The same number of keys, in the fewest bins.
    let mut dirty = vec![false; bins as usize];
    let mut left = keys / 10;
    for (b, s) in state.iter_mut().enumerate() {
        if left == 0 {
            break;
        }
        for (_, v) in s.iter_mut() {
            v[0] += 1;
        }
        left = left.saturating_sub(s.len() as u64);
        dirty[b] = true;
    }
    let dirty_clustered = commit(&store, 3, bins, &state, &dirty)?;
    drop(store);

    let started = Instant::now();
    let store = Store::open(dir, 64 << 20).map_err(|e| e.0)?;
    let record = store
        .restore_point()
        .map_err(|e| e.0)?
        .record
        .ok_or("no checkpoint to recover")?;
    let mut recovered_keys = 0u64;
    let mut restored: Vec<BinState> = Vec::with_capacity(bins as usize);
    for bin in &record.operator(OP).ok_or("no operator state")?.bins {
        let mut s: BinState = Vec::with_capacity(bin.entries as usize);
        for chunk in store.read_bin(OP, bin) {
            for (k, v) in chunk.map_err(|e| e.0)?.entries {
                let (_, key): (i64, i64) = postcard::from_bytes(&k).map_err(|e| e.to_string())?;
                let value: [i64; 4] = postcard::from_bytes(&v).map_err(|e| e.to_string())?;
                s.push((key, value));
            }
        }
        recovered_keys += s.len() as u64;
        restored.push(s);
    }
    let recovery_ms = started.elapsed().as_secs_f64() * 1e3;
    if recovered_keys != keys {
        return Err(format!("recovered {recovered_keys} of {keys} keys"));
    }
    Ok(CheckpointFigures {
        keys,
        full,
        dirty_spread,
        dirty_clustered,
        recovery_ms,
        recovered_keys,
        disk_bytes: store.size_on_disk(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_commits_and_recovers_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = checkpoint_figures(dir.path(), 20_000, 64).unwrap();
        assert_eq!(f.recovered_keys, 20_000);
        assert_eq!(f.full.bins, 64);
        assert_eq!(f.dirty_spread.bins, 64, "spread dirt touches every bin");
        assert!(f.dirty_clustered.bins <= 8, "{}", f.dirty_clustered.bins);
        assert!(f.dirty_clustered.bytes * 5 < f.full.bytes);
    }
}
