//! Sensor readings: `sensor` (`"s{k}"`), `temp` (15.0..=35.0 °C), `humidity`
//! (20.0..=90.0 %), both with one decimal, and `ts`, optionally out of order
//! by up to `disorder_ms`.

use super::mix::{below, event_hash, fmix64, is_hot, seed_key};
use super::timeline::Timeline;
use super::{Generator, GeneratorSpec};
use crate::data::BatchBuilder;

/// Sensor names are precomputed up to this many keys (~8 bytes each);
/// above it they are formatted per event into a stack buffer instead.
/// Not up to 1M: the table (12 MiB for 1M keys, per worker) was a sixth
/// of the peak RSS of `eddy bench tune`'s pipelines, the memory every
/// policy is measured by, and formatting a name is a few nanoseconds.
const NAME_TABLE_MAX: u64 = 1 << 16;

/// Tenths of a degree: 150..=350.
const TEMP_MIN_TENTHS: u64 = 150;
const TEMP_STEPS: u64 = 201;
/// Tenths of a percent: 200..=900.
const HUMIDITY_MIN_TENTHS: u64 = 200;
const HUMIDITY_STEPS: u64 = 701;

pub(crate) struct Readings {
    key: u64,
    keys: u64,
    start_ms: i64,
    timeline: Timeline,
    disorder_ms: i64,
    hot_key_percent: u8,
    /// `"s0s1s2.."` with `ends[k]` the end of name `k`: one allocation for
    /// all names, and `push_str` of a slice per event.
    names: String,
    ends: Vec<u32>,
    /// Values with exactly one decimal, so every reading prints as `x.y`
    /// without a division per event.
    temps: Vec<f64>,
    humidities: Vec<f64>,
}

impl Readings {
    pub(crate) fn new(spec: &GeneratorSpec) -> Readings {
        debug_assert_eq!(spec.event_time_field, 3, "ts is the only int field");
        let mut names = String::new();
        let mut ends = Vec::new();
        if spec.keys <= NAME_TABLE_MAX {
            let mut buf = itoa::Buffer::new();
            for k in 0..spec.keys {
                names.push('s');
                names.push_str(buf.format(k));
                ends.push(names.len() as u32);
            }
        }
        let tenths = |min: u64, steps: u64| (min..min + steps).map(|t| t as f64 / 10.0).collect();
        Readings {
            key: seed_key(spec.seed),
            keys: spec.keys,
            start_ms: spec.start_ms,
            timeline: Timeline::new(spec.events_per_second, &spec.rate_steps),
            disorder_ms: spec.disorder_ms,
            hot_key_percent: spec.hot_key_percent,
            names,
            ends,
            temps: tenths(TEMP_MIN_TENTHS, TEMP_STEPS),
            humidities: tenths(HUMIDITY_MIN_TENTHS, HUMIDITY_STEPS),
        }
    }

    #[inline(always)]
    fn push_sensor(&self, out: &mut BatchBuilder, k: u64) {
        if self.ends.is_empty() {
            let mut buf = [0u8; 21];
            buf[0] = b's';
            let mut num = itoa::Buffer::new();
            let digits = num.format(k).as_bytes();
            buf[1..1 + digits.len()].copy_from_slice(digits);
            let name = std::str::from_utf8(&buf[..1 + digits.len()]).expect("ascii digits");
            out.column_mut(0).push_str(name);
        } else {
            let k = k as usize;
            let start = if k == 0 { 0 } else { self.ends[k - 1] as usize };
            out.column_mut(0)
                .push_str(&self.names[start..self.ends[k] as usize]);
        }
    }
}

impl Generator for Readings {
    fn fill(&mut self, first: u64, step: u64, n: usize, out: &mut BatchBuilder, ingest_ns: u64) {
        let mut time = self.timeline.offsets(first, step);
        let jitter_range = self.disorder_ms as u64 + 1;
        for k in 0..n as u64 {
            let i = first.wrapping_add(k.wrapping_mul(step));
            let h = event_hash(self.key, i);
            // A second, independent word for the fields besides the sensor.
            let h2 = fmix64(h ^ 0xA076_1D64_78BD_642F);
            let sensor = if is_hot(i, self.hot_key_percent) {
                0
            } else {
                below(h, self.keys)
            };
            let temp = self.temps[(((h2 >> 48) * TEMP_STEPS) >> 16) as usize];
            let humidity =
                self.humidities[((((h2 >> 32) & 0xFFFF) * HUMIDITY_STEPS) >> 16) as usize];
            let jitter = if jitter_range > 1 {
                below(fmix64(h2), jitter_range) as i64
            } else {
                0
            };
            let ts = self.start_ms.wrapping_add(time.get()).wrapping_sub(jitter);
            self.push_sensor(out, sensor);
            out.column_mut(1).push_float(temp);
            out.column_mut(2).push_float(humidity);
            out.column_mut(3).push_int(ts);
            out.finish_row(ts, ingest_ns);
            time.advance();
        }
    }
}
