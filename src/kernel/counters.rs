//! Intrinsic counters of one operator instance and the rates derived from
//! them (DS2, Kalavri et al., OSDI 2018, §3).
//!
//! *Useful time* is time spent inside operator code, excluding waiting for
//! input and waiting for output space, so rates derived from it are the rates
//! the operator could sustain, not the rates it happened to see.

/// Counter values over one interval (or since start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub records_in: u64,
    pub records_out: u64,
    pub useful_ns: u64,
    pub waiting_ns: u64,
    pub blocked_ns: u64,
}

impl Counters {
    /// The change from `earlier` to `self`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            records_in: self.records_in.saturating_sub(earlier.records_in),
            records_out: self.records_out.saturating_sub(earlier.records_out),
            useful_ns: self.useful_ns.saturating_sub(earlier.useful_ns),
            waiting_ns: self.waiting_ns.saturating_sub(earlier.waiting_ns),
            blocked_ns: self.blocked_ns.saturating_sub(earlier.blocked_ns),
        }
    }

    /// Records the operator could process per second of useful time.
    pub fn true_processing_rate(&self) -> Option<f64> {
        per_second(self.records_in, self.useful_ns)
    }

    /// Records the operator could emit per second of useful time.
    pub fn true_output_rate(&self) -> Option<f64> {
        per_second(self.records_out, self.useful_ns)
    }

    /// Records processed per second of wall time `interval_ns`.
    pub fn observed_processing_rate(&self, interval_ns: u64) -> Option<f64> {
        per_second(self.records_in, interval_ns)
    }

    /// Records emitted per second of wall time `interval_ns`.
    pub fn observed_output_rate(&self, interval_ns: u64) -> Option<f64> {
        per_second(self.records_out, interval_ns)
    }
}

fn per_second(records: u64, ns: u64) -> Option<f64> {
    if ns == 0 {
        None
    } else {
        Some(records as f64 * 1e9 / ns as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_rates_ignore_waiting() {
        let c = Counters {
            records_in: 1_000,
            records_out: 500,
            useful_ns: 100_000_000,
            waiting_ns: 900_000_000,
            blocked_ns: 0,
        };
        assert_eq!(c.true_processing_rate(), Some(10_000.0));
        assert_eq!(c.true_output_rate(), Some(5_000.0));
        assert_eq!(c.observed_processing_rate(1_000_000_000), Some(1_000.0));
        assert_eq!(Counters::default().true_processing_rate(), None);
    }
}
