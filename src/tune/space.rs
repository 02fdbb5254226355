//! The search space between the configuration's units and the unit cube
//! the optimiser works in: settings by their `[tune]` ranges (on a log
//! scale where the range spans decades), the input rate as the context.

use crate::config::Setting;

/// Rates are placed on a log scale up to this many records per second;
/// above it they all look alike to the models.
const RATE_CEILING: f64 = 1e8;

/// `values` (one per setting, in the config's units) as a point of the
/// unit cube, or why not.
pub(crate) fn normalise(settings: &[Setting], values: &[u64]) -> Result<Vec<f64>, String> {
    if values.len() != settings.len() {
        return Err(format!(
            "{} values for {} settings",
            values.len(),
            settings.len()
        ));
    }
    settings
        .iter()
        .zip(values)
        .map(|(s, &v)| {
            if !(s.min..=s.max).contains(&v) {
                return Err(format!(
                    "`{}` = {} is outside its [tune] range {}..={}",
                    s.name,
                    crate::config::tune_fmt(v, s.unit),
                    crate::config::tune_fmt(s.min, s.unit),
                    crate::config::tune_fmt(s.max, s.unit)
                ));
            }
            if s.min == s.max {
                return Ok(0.5);
            }
            Ok(if s.log {
                ((v as f64).ln() - (s.min as f64).ln())
                    / ((s.max as f64).ln() - (s.min as f64).ln())
            } else {
                (v - s.min) as f64 / (s.max - s.min) as f64
            })
        })
        .collect()
}

/// A point of the unit cube (extra coordinates, such as the rate, are
/// ignored) as settings in the config's units, rounded to whole units.
pub(crate) fn denormalise(settings: &[Setting], x: &[f64]) -> Vec<u64> {
    settings
        .iter()
        .zip(x)
        .map(|(s, &u)| {
            let u = u.clamp(0.0, 1.0);
            let v = if s.log {
                ((s.min as f64).ln() + u * ((s.max as f64).ln() - (s.min as f64).ln())).exp()
            } else {
                s.min as f64 + u * (s.max - s.min) as f64
            };
            (v.round() as u64).clamp(s.min, s.max)
        })
        .collect()
}

/// The rate context coordinate.
pub(crate) fn rate(records_per_s: f64) -> f64 {
    ((1.0 + records_per_s.max(0.0)).ln() / (1.0 + RATE_CEILING).ln()).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TuneConfig;

    #[test]
    fn settings_round_trip_through_the_cube() {
        let space = TuneConfig::default().settings;
        let values = [3, 64 << 20, 10_000, 1024, 10];
        let x = normalise(&space, &values).unwrap();
        assert!(x.iter().all(|v| (0.0..=1.0).contains(v)), "{x:?}");
        assert_eq!(denormalise(&space, &x), values);
        let lows: Vec<u64> = space.iter().map(|s| s.min).collect();
        assert_eq!(normalise(&space, &lows).unwrap(), vec![0.0; 5]);
        assert_eq!(denormalise(&space, &[1.0; 5])[0], space[0].max);
        let err = normalise(&space, &[9, 64 << 20, 10_000, 1024, 10]).unwrap_err();
        assert!(err.contains("`workers` = 9 is outside"), "{err}");
        assert!(rate(0.0) == 0.0 && rate(1e3) < rate(1e4) && rate(1e12) == 1.0);
    }
}
