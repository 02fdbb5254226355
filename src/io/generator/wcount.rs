//! The `wcount` workload of WORKLOADS.md: event `i` is
//! `key = (i * 2654435761) mod keys` (64-bit wrapping), `value = i mod 100`,
//! `ts = start_ms + i * 1000 / events_per_second` (`i / 100` by default).

use super::mix::{FloorRatio, is_hot};
use super::{Generator, GeneratorSpec};
use crate::data::BatchBuilder;

/// Knuth's multiplicative-hash constant, as WORKLOADS.md specifies.
pub(crate) const KEY_MULTIPLIER: u64 = 2_654_435_761;
pub(crate) const KEYS: u64 = 10_000;
/// 100 000 events per second with `start_ms` 0 makes `ts = i / 100`.
pub(crate) const EVENTS_PER_SECOND: u64 = 100_000;
const VALUES: u64 = 100;

pub(crate) struct Wcount {
    keys: u64,
    start_ms: i64,
    events_per_second: u64,
    hot_key_percent: u8,
    /// Which of `key`, `value`, `ts` (0, 1, 2) is the event time.
    time_field: usize,
}

impl Wcount {
    pub(crate) fn new(spec: &GeneratorSpec) -> Wcount {
        Wcount {
            keys: spec.keys,
            start_ms: spec.start_ms,
            events_per_second: spec.events_per_second,
            hot_key_percent: spec.hot_key_percent,
            time_field: spec.event_time_field,
        }
    }

    /// Event `i` as `(key, value, ts)`, straight from the formula.
    pub(crate) fn event(&self, i: u64) -> (i64, i64, i64) {
        let key = if is_hot(i, self.hot_key_percent) {
            0
        } else {
            i.wrapping_mul(KEY_MULTIPLIER) % self.keys
        };
        let offset = (i as u128 * 1000 / self.events_per_second as u128) as i64;
        (
            key as i64,
            (i % VALUES) as i64,
            self.start_ms.wrapping_add(offset),
        )
    }

    #[inline(always)]
    fn push(&self, out: &mut BatchBuilder, key: i64, value: i64, ts: i64, ingest_ns: u64) {
        out.column_mut(0).push_int(key);
        out.column_mut(1).push_int(value);
        out.column_mut(2).push_int(ts);
        let time = match self.time_field {
            0 => key,
            1 => value,
            _ => ts,
        };
        out.finish_row(time, ingest_ns);
    }
}

impl Generator for Wcount {
    fn fill(&mut self, first: u64, step: u64, n: usize, out: &mut BatchBuilder, ingest_ns: u64) {
        if n == 0 {
            return;
        }
        let last = (n as u64 - 1)
            .checked_mul(step)
            .and_then(|d| first.checked_add(d));
        // While `i * KEY_MULTIPLIER` does not wrap, `key`, `value` and `ts`
        // can all be carried forward with an add and a compare instead of
        // three divisions per event (the difference between ~40 and well
        // over 100 M events/s). Past 6.9e9 events the product wraps and
        // the slow path keeps the formula exact.
        // A hot key takes the per-event path as well.
        if self.hot_key_percent > 0 || last.is_none_or(|l| l.checked_mul(KEY_MULTIPLIER).is_none())
        {
            for k in 0..n as u64 {
                let (key, value, ts) = self.event(first.wrapping_add(k.wrapping_mul(step)));
                self.push(out, key, value, ts, ingest_ns);
            }
            return;
        }
        // Column at a time: three tight loops instead of five pushes per
        // event.
        let keys = self.keys;
        let mut key = first * KEY_MULTIPLIER % keys;
        let key_step = (step as u128 * KEY_MULTIPLIER as u128 % keys as u128) as u64;
        out.column_mut(0).extend_ints((0..n).map(|_| {
            let k = key;
            key += key_step;
            if key >= keys {
                key -= keys;
            }
            k as i64
        }));
        let mut value = first % VALUES;
        let value_step = step % VALUES;
        out.column_mut(1).extend_ints((0..n).map(|_| {
            let v = value;
            value += value_step;
            if value >= VALUES {
                value -= VALUES;
            }
            v as i64
        }));
        let mut time = FloorRatio::new(first, step, 1000, self.events_per_second);
        let start = self.start_ms;
        out.column_mut(2).extend_ints((0..n).map(|_| {
            let ts = start.wrapping_add(time.get() as i64);
            time.advance();
            ts
        }));
        out.finish_rows(self.time_field, ingest_ns);
    }
}
