//! Forecasts of the input rate, and how wrong they turned out.
//!
//! MSTL (seasonal-trend decomposition by LOESS, one season: a day by
//! default) with a non-seasonal AutoETS model of the trend, from the augurs
//! crates; ../shared/STACK.md has the measurement behind the choice (AutoETS
//! with its own seasonal model finds no model for long periods). With less
//! than two seasons of history there is no season to learn: AutoETS alone,
//! and with almost nothing, the last value.

use augurs::ets::AutoETS;
use augurs::mstl::MSTLModel;
use augurs::prelude::*;

/// Points of history below which only the last value is forecast.
const MIN_ETS: usize = 8;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Model {
    Mstl,
    Ets,
    LastValue,
}

impl Model {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Model::Mstl => "mstl+ets",
            Model::Ets => "ets",
            Model::LastValue => "last value",
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Forecast {
    /// One rate per step after the history's last.
    pub(crate) point: Vec<f64>,
    pub(crate) model: Model,
}

impl Forecast {
    /// The highest rate forecast: what a configuration must sustain.
    pub(crate) fn peak(&self) -> f64 {
        self.point.iter().copied().fold(0.0, f64::max)
    }
}

/// Forecasts `horizon` steps of a history of rates sampled every step,
/// whose season is `period` steps.
pub(crate) fn forecast(history: &[f64], period: usize, horizon: usize) -> Forecast {
    if let Some(last) = history.last().copied().filter(|_| history.len() < MIN_ETS) {
        return last_value(last, horizon);
    }
    if history.is_empty() {
        return last_value(0.0, horizon);
    }
    let fitted = if period >= 2 && history.len() >= 2 * period {
        mstl(history, period, horizon).map(|p| (p, Model::Mstl))
    } else {
        None
    };
    let (point, model) = match fitted.or_else(|| ets(history, horizon).map(|p| (p, Model::Ets))) {
        Some(found) => found,
        None => return last_value(history[history.len() - 1], horizon),
    };
    // A rate is never negative, and a model that diverged is no forecast.
    if point.len() != horizon || point.iter().any(|v| !v.is_finite()) {
        return last_value(history[history.len() - 1], horizon);
    }
    Forecast {
        point: point.into_iter().map(|v| v.max(0.0)).collect(),
        model,
    }
}

fn mstl(history: &[f64], period: usize, horizon: usize) -> Option<Vec<f64>> {
    let trend = AutoETS::non_seasonal().into_trend_model();
    let fit = MSTLModel::new(vec![period], trend).fit(history).ok()?;
    Some(fit.predict(horizon, None).ok()?.point)
}

fn ets(history: &[f64], horizon: usize) -> Option<Vec<f64>> {
    let fit = AutoETS::non_seasonal().fit(history).ok()?;
    Some(fit.predict(horizon, None).ok()?.point)
}

fn last_value(last: f64, horizon: usize) -> Forecast {
    Forecast {
        point: vec![last; horizon],
        model: Model::LastValue,
    }
}

/// The error of forecasts once the actual rates are known, against the
/// last-value forecast over the same steps, as mean absolute percentage
/// errors (steps whose actual rate is 0 are skipped).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Accuracy {
    pending: Vec<(u64, f64, f64)>,
    model_error: f64,
    naive_error: f64,
    scored: u64,
}

impl Accuracy {
    /// Remembers `forecast`, made at step `at` when the rate was `last`.
    pub(crate) fn forecasted(&mut self, at: u64, last: f64, forecast: &Forecast) {
        for (i, &v) in forecast.point.iter().enumerate() {
            self.pending.push((at + 1 + i as u64, v, last));
        }
    }

    /// Scores the forecasts of step `step` against its actual rate.
    pub(crate) fn actual(&mut self, step: u64, rate: f64) {
        self.pending.retain(|&(s, predicted, last)| {
            if s != step {
                return s > step;
            }
            if rate > 0.0 {
                self.model_error += (predicted - rate).abs() / rate;
                self.naive_error += (last - rate).abs() / rate;
                self.scored += 1;
            }
            false
        });
    }

    /// Forecast steps scored so far.
    pub(crate) fn scored(&self) -> u64 {
        self.scored
    }

    /// (model, last value) mean absolute percentage errors, in percent.
    pub(crate) fn mape(&self) -> Option<(f64, f64)> {
        (self.scored > 0).then(|| {
            let n = self.scored as f64;
            (100.0 * self.model_error / n, 100.0 * self.naive_error / n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daily rate (period 48 steps) with a slow trend and ±5% noise.
    fn diurnal(steps: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..steps)
            .map(|i| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let noise = ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.1;
                let day = (i as f64 * std::f64::consts::TAU / 48.0).sin();
                (1000.0 + 2.0 * i as f64 + 600.0 * day) * (1.0 + noise)
            })
            .collect()
    }

    #[test]
    fn the_seasonal_forecast_beats_the_last_value() {
        let series = diurnal(48 * 12, 42);
        let mut accuracy = Accuracy::default();
        let horizon = 20;
        // Forecast from several origins, score on what followed.
        for origin in (48 * 8..48 * 11).step_by(12) {
            let f = forecast(&series[..origin], 48, horizon);
            assert_eq!(f.model, Model::Mstl);
            assert_eq!(f.point.len(), horizon);
            accuracy.forecasted(origin as u64 - 1, series[origin - 1], &f);
            for (step, &rate) in series.iter().enumerate().skip(origin).take(horizon) {
                accuracy.actual(step as u64, rate);
            }
        }
        let (model, naive) = accuracy.mape().unwrap();
        eprintln!("MAPE: mstl+ets {model:.1}%, last value {naive:.1}%");
        assert!(
            model < 0.5 * naive,
            "mstl {model:.1}% against last value {naive:.1}%"
        );
    }

    #[test]
    fn short_histories_fall_back_and_rates_stay_positive() {
        assert_eq!(forecast(&[], 48, 3).point, vec![0.0; 3]);
        let f = forecast(&[5.0, 6.0], 48, 3);
        assert_eq!((f.model, f.point), (Model::LastValue, vec![6.0; 3]));
        let falling: Vec<f64> = (0..30).map(|i| 300.0 - 10.0 * i as f64).collect();
        let f = forecast(&falling, 48, 40);
        assert_eq!(f.model, Model::Ets);
        assert!(f.point.iter().all(|&v| v >= 0.0), "{:?}", f.point);
        assert!(
            f.point[0] < 20.0,
            "the trend is followed: {:?}",
            &f.point[..3]
        );
    }
}
