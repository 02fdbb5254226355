//! What the tuner keeps across restarts, in its own sled database in
//! `DATA_DIR/tune` (apart from the pipeline's state store, which a reload
//! closes and opens again): the input rate history, the forecast
//! accuracy, and the profiling observations the models are fitted to.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tune::forecast::Accuracy;

/// Rates older than this are dropped.
const RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;
/// And at most this many, whatever the step: a short step must not fill
/// the disk of a small device.
const MAX_RATES: usize = 100_000;

/// One run as measured (a profiling run, or the pipeline itself in
/// place), in the config's units: kept raw so that a changed `[tune]`
/// range re-normalises it rather than misreading it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Measured {
    /// Setting name to value, in the config's units (bytes, ms, counts).
    pub(crate) settings: std::collections::BTreeMap<String, u64>,
    /// Input records per second the run was driven at.
    pub(crate) rate: f64,
    pub(crate) cpu_s: f64,
    pub(crate) peak_memory_bytes: f64,
    pub(crate) latency_p99_ms: f64,
    /// None where the run could not measure it: the pipeline in place
    /// does not restart to time its recovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) recovery_s: Option<f64>,
    /// The run fell behind its rate: no window closed, and
    /// `latency_p99_ms` is the backlog at its end, a lower bound. These
    /// settings cannot carry the rate there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) fell_behind: bool,
    /// Measured on the running pipeline, over a span with these settings
    /// in force, instead of by a profiling run (`tune_in_place`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) in_place: bool,
}

pub(crate) struct TuneStore {
    dir: PathBuf,
    rates: sled::Tree,
    observations: sled::Tree,
    /// Measures of the pipeline in place, by `tune::in_place_key`: a newer
    /// one of the same key replaces the older.
    in_place: sled::Tree,
    meta: sled::Tree,
    _db: sled::Db,
}

impl TuneStore {
    pub(crate) fn open(data_dir: &Path) -> Result<TuneStore, String> {
        let dir = data_dir.join("tune");
        let err = |what: &str, e: sled::Error| format!("tuner in {}: {what}: {e}", dir.display());
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("tuner: cannot create {}: {e}", dir.display()))?;
        // Waits for the lock of a store just closed (a reload reopens it),
        // as the state's store does.
        let db = crate::state::open_sled(&dir, 1 << 20).map_err(|e| err("cannot open", e))?;
        let tree = |name: &str| db.open_tree(name).map_err(|e| err("cannot open a tree", e));
        Ok(TuneStore {
            rates: tree("rates")?,
            observations: tree("observations")?,
            in_place: tree("in_place")?,
            meta: tree("meta")?,
            _db: db.clone(),
            dir,
        })
    }

    fn err(&self, e: sled::Error) -> String {
        format!("tuner in {}: {e}", self.dir.display())
    }

    /// Records the rate at `unix_ms` and drops what is past retention.
    pub(crate) fn push_rate(&self, unix_ms: u64, rate: f64) -> Result<(), String> {
        self.rates
            .insert(unix_ms.to_be_bytes(), &rate.to_be_bytes())
            .map_err(|e| self.err(e))?;
        let cutoff = unix_ms.saturating_sub(RETENTION_MS);
        let mut old: Vec<sled::IVec> = self
            .rates
            .range(..cutoff.to_be_bytes())
            .keys()
            .filter_map(Result::ok)
            .collect();
        let over = self.rates.len().saturating_sub(MAX_RATES + old.len());
        old.extend(
            self.rates
                .iter()
                .keys()
                .filter_map(Result::ok)
                .skip(old.len())
                .take(over),
        );
        for k in old {
            self.rates.remove(k).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    pub(crate) fn rate_count(&self) -> usize {
        self.rates.len()
    }

    /// The last `n` (unix ms, rate) samples, oldest first.
    pub(crate) fn rates(&self, n: usize) -> Vec<(u64, f64)> {
        let mut out: Vec<(u64, f64)> = self
            .rates
            .iter()
            .rev()
            .filter_map(Result::ok)
            .filter_map(|(k, v)| {
                Some((
                    u64::from_be_bytes(k.as_ref().try_into().ok()?),
                    f64::from_be_bytes(v.as_ref().try_into().ok()?),
                ))
            })
            .take(n)
            .collect();
        out.reverse();
        out
    }

    pub(crate) fn accuracy(&self) -> Accuracy {
        self.meta
            .get("accuracy")
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_slice(&v).ok())
            .unwrap_or_default()
    }

    pub(crate) fn save_accuracy(&self, a: &Accuracy) -> Result<(), String> {
        let bytes = serde_json::to_vec(a).map_err(|e| e.to_string())?;
        self.meta
            .insert("accuracy", bytes)
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// Every profiling run told so far, in order.
    pub(crate) fn observations(&self) -> Vec<Measured> {
        measures(&self.observations)
    }

    /// Every measure in place kept, by key.
    pub(crate) fn in_place(&self) -> Vec<Measured> {
        measures(&self.in_place)
    }

    /// Keeps `m` under `key`, in the place of the one there. Not flushed:
    /// the next one comes within a step, and sled flushes on its own.
    pub(crate) fn put_in_place(&self, key: &str, m: &Measured) -> Result<(), String> {
        let bytes = serde_json::to_vec(m).map_err(|e| e.to_string())?;
        self.in_place
            .insert(key, bytes)
            .map(drop)
            .map_err(|e| self.err(e))
    }

    pub(crate) fn push_observation(&self, m: &Measured) -> Result<(), String> {
        let id = self.observations.len() as u64;
        let bytes = serde_json::to_vec(m).map_err(|e| e.to_string())?;
        self.observations
            .insert(id.to_be_bytes(), bytes)
            .map_err(|e| self.err(e))?;
        // A run is worth minutes of CPU: it must survive a crash.
        self._db.flush().map(drop).map_err(|e| self.err(e))
    }
}

/// The measures kept in `tree`, in key order (one that no longer parses
/// is skipped).
fn measures(tree: &sled::Tree) -> Vec<Measured> {
    tree.iter()
        .values()
        .filter_map(Result::ok)
        .filter_map(|v| serde_json::from_slice(&v).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_runs_survive_reopening_and_old_rates_go() {
        let dir = tempfile::tempdir().unwrap();
        let day = 24 * 3600 * 1000;
        {
            let s = TuneStore::open(dir.path()).unwrap();
            for i in 0..10u64 {
                s.push_rate(i * day, i as f64).unwrap();
            }
            let mut a = Accuracy::default();
            a.forecasted(1, 1.0, &crate::tune::forecast::forecast(&[1.0, 2.0], 1, 1));
            a.actual(2, 4.0);
            s.save_accuracy(&a).unwrap();
            s.push_observation(&Measured {
                fell_behind: false,
                settings: [("workers".to_string(), 2)].into(),
                rate: 10.0,
                cpu_s: 1.5,
                peak_memory_bytes: 1e6,
                latency_p99_ms: 3.0,
                recovery_s: Some(0.5),
                in_place: false,
            })
            .unwrap();
        }
        let s = TuneStore::open(dir.path()).unwrap();
        // Day 9 keeps days 2..=9: seven days back, inclusive.
        let kept = s.rates(100);
        assert_eq!(kept.first(), Some(&(2 * day, 2.0)));
        assert_eq!(kept.len(), 8);
        assert_eq!(s.rates(2), vec![(8 * day, 8.0), (9 * day, 9.0)]);
        assert_eq!(s.accuracy().scored(), 1);
        assert_eq!(s.observations()[0].settings["workers"], 2);
    }
}
