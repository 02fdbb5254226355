//! The fixed input: 2000 sensor readings, computed at compile time.
//!
//! Sensors `0..SENSORS` report a temperature in tenths of a degree (as a
//! sensor's ADC would give it) every [`STEP_MS`] on average, from
//! 2026-01-01T00:00:00Z. About a third of the readings arrive late, by up
//! to [`DISORDER_MS`]; each sensor has its own level, so some windows keep
//! all their readings through the filter, some none, and some readings are
//! exactly 20.0 (which `temp > 20.0` drops).

use eddy::kernel::fixed::{Event, Num};

pub const READINGS_LEN: usize = 2000;
pub const SENSORS: u64 = 16;
/// 2026-01-01T00:00:00Z in epoch milliseconds.
pub const START_MS: i64 = 1_767_225_600_000;
pub const STEP_MS: i64 = 10;
/// The most a reading's event time lags the newest one before it.
pub const DISORDER_MS: i64 = 250;

/// One reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub sensor: u16,
    /// Tenths of a degree Celsius.
    pub temp_dc: i16,
    /// Event time, epoch milliseconds.
    pub ts: i64,
}

impl Reading {
    /// The temperature in degrees: the `f64` nearest to `temp_dc / 10`,
    /// which is also what parsing its shortest decimal text gives.
    #[inline]
    pub fn temp(&self) -> f64 {
        self.temp_dc as f64 / 10.0
    }
}

impl Event for Reading {
    #[inline]
    fn key(&self) -> i64 {
        self.sensor as i64
    }
    #[inline]
    fn event_time(&self) -> i64 {
        self.ts
    }
    #[inline]
    fn value(&self) -> Num {
        Num::Float(self.temp())
    }
}

/// The readings, in arrival order. In flash, not RAM.
pub static READINGS: [Reading; READINGS_LEN] = generate();

const fn generate() -> [Reading; READINGS_LEN] {
    let mut out = [Reading {
        sensor: 0,
        temp_dc: 0,
        ts: 0,
    }; READINGS_LEN];
    // xorshift64*: deterministic, and cheap enough for const evaluation.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut i = 0;
    while i < READINGS_LEN {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let r = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let sensor = (r >> 59) % SENSORS;
        // Levels from 14.0 to 26.0 degrees by sensor, a slow drift up
        // over the run, and noise of up to ±3.0 degrees.
        let level = 140 + (sensor as i64 * 8);
        let drift = (i as i64 * 40) / READINGS_LEN as i64;
        let noise = ((r >> 20) % 61) as i64 - 30;
        let mut temp_dc = level + drift + noise;
        if (r >> 8).is_multiple_of(40) {
            temp_dc = 200;
        }
        let mut ts = START_MS + i as i64 * STEP_MS;
        if (r >> 40).is_multiple_of(3) {
            ts -= ((r >> 44) % (DISORDER_MS as u64 + 1)) as i64;
        }
        out[i] = Reading {
            sensor: sensor as u16,
            temp_dc: temp_dc as i16,
            ts,
        };
        i += 1;
    }
    out
}
