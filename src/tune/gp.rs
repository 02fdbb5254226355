//! A Gaussian-process regression model with a Matérn 5/2 kernel, the usual
//! surrogate of Bayesian optimisation, plus a linear one (a trend), on
//! nalgebra's Cholesky.
//!
//! Why the trend: memory and CPU grow with the rate and the cache, and the
//! tuner asks for the forecast peak, where few runs were made. A Matérn
//! kernel alone reverts to the mean of all runs away from them, so the
//! peak's settings were judged by runs at half its rate; with a linear
//! term (Bayesian linear regression, its weight chosen by the likelihood
//! like the other hyperparameters, 0 where the data has no trend) the
//! model carries what runs show along each setting out to where none was
//! made.
//!
//! Why not a GP crate: friedrich's fitted length scales made the optimiser
//! search only the corners of the space (its likelihood has no
//! log-determinant term, so nothing penalises a too-short scale): on a
//! two-objective test it reached 60-72% of the true front's hypervolume
//! after 40 runs, against 95% with these models. Hyperparameters here are
//! chosen by the exact log marginal likelihood over a small grid, which is
//! cheap for the tens of profiling runs the optimiser ever has.

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};

/// Length scales tried, in units of the normalised unit cube.
const LENGTH_SCALES: [f64; 8] = [0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0];
/// Noise variances tried, relative to the outputs' variance.
const NOISES: [f64; 4] = [1e-6, 1e-3, 1e-2, 1e-1];
/// Prior variances of the linear term's weights, relative to the outputs'
/// variance (0: no trend).
const TRENDS: [f64; 3] = [0.0, 0.3, 3.0];

pub(crate) struct Gp {
    xs: Vec<Vec<f64>>,
    alpha: DVector<f64>,
    cholesky: Cholesky<f64, Dyn>,
    length_scale: f64,
    trend: f64,
    /// The outputs are standardised with these.
    mean: f64,
    scale: f64,
}

impl Gp {
    /// Fits the model to `ys` at `xs`, choosing the length scale and the
    /// noise that make the data most likely. Needs at least one point.
    pub(crate) fn fit(xs: &[Vec<f64>], ys: &[f64]) -> Gp {
        let n = ys.len().max(1) as f64;
        let mean = ys.iter().sum::<f64>() / n;
        let scale = (ys.iter().map(|y| (y - mean) * (y - mean)).sum::<f64>() / n).sqrt();
        let scale = if scale > 1e-12 { scale } else { 1.0 };
        let y = DVector::from_iterator(ys.len(), ys.iter().map(|v| (v - mean) / scale));
        let mut best: Option<(f64, Gp)> = None;
        for (&length_scale, &trend) in LENGTH_SCALES
            .iter()
            .flat_map(|l| TRENDS.iter().map(move |t| (l, t)))
        {
            for &noise in &NOISES {
                let mut k = DMatrix::from_fn(xs.len(), xs.len(), |i, j| {
                    kernel(&xs[i], &xs[j], length_scale, trend)
                });
                for i in 0..xs.len() {
                    k[(i, i)] += noise;
                }
                let Some(cholesky) = k.cholesky() else {
                    continue;
                };
                let alpha = cholesky.solve(&y);
                let log_det: f64 = cholesky.l().diagonal().iter().map(|d| d.ln()).sum();
                let likelihood = -0.5 * y.dot(&alpha) - log_det;
                if best.as_ref().is_none_or(|(l, _)| likelihood > *l) {
                    let gp = Gp {
                        xs: xs.to_vec(),
                        alpha,
                        cholesky,
                        length_scale,
                        trend,
                        mean,
                        scale,
                    };
                    best = Some((likelihood, gp));
                }
            }
        }
        // The largest noise keeps any kernel matrix positive definite, so
        // some model was fitted.
        best.expect("a positive definite kernel matrix").1
    }

    /// The mean and standard deviation of the model at `x`.
    pub(crate) fn predict(&self, x: &[f64]) -> (f64, f64) {
        let k = DVector::from_iterator(
            self.xs.len(),
            self.xs
                .iter()
                .map(|xi| kernel(xi, x, self.length_scale, self.trend)),
        );
        let mean = k.dot(&self.alpha);
        let v = self
            .cholesky
            .l()
            .solve_lower_triangular(&k)
            .unwrap_or_else(|| DVector::zeros(k.len()));
        let prior = kernel(x, x, self.length_scale, self.trend);
        let variance = (prior - v.dot(&v)).max(1e-12);
        (self.mean + self.scale * mean, self.scale * variance.sqrt())
    }
}

/// Matérn 5/2 of the distance, plus `trend` times the product of the two
/// points about the cube's centre (the linear kernel).
fn kernel(a: &[f64], b: &[f64], length_scale: f64, trend: f64) -> f64 {
    let linear: f64 = a.iter().zip(b).map(|(x, y)| (x - 0.5) * (y - 0.5)).sum();
    matern52(distance(a, b) / length_scale) + trend * linear
}

fn matern52(r: f64) -> f64 {
    let s = 5f64.sqrt() * r;
    (1.0 + s + s * s / 3.0) * (-s).exp()
}

pub(crate) fn distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_interpolates_a_smooth_function_and_knows_where_it_is_unsure() {
        let f = |x: f64| (6.0 * x).sin() * 10.0 + 50.0;
        let xs: Vec<Vec<f64>> = (0..12).map(|i| vec![i as f64 / 22.0]).collect();
        let ys: Vec<f64> = xs.iter().map(|x| f(x[0])).collect();
        let gp = Gp::fit(&xs, &ys);
        // Inside the data: close, and sure of it.
        let (m, sd) = gp.predict(&[0.23]);
        assert!((m - f(0.23)).abs() < 0.2, "{m} vs {}", f(0.23));
        // Far outside: unsure.
        let (_, far) = gp.predict(&[1.0]);
        assert!(far > 10.0 * sd, "sd {sd} inside, {far} outside");
        // Constant data does not break the standardisation.
        let flat = Gp::fit(&xs, &[3.0; 12]);
        assert!((flat.predict(&[0.7]).0 - 3.0).abs() < 1e-9);
    }

    #[test]
    fn it_carries_a_trend_beyond_the_runs() {
        // Memory growing with the rate (second coordinate) and the cache
        // (first), runs only up to half the rate: at the full rate the
        // model should expect more than any run saw, ordered by cache.
        let f = |x: &[f64]| 50.0 + 100.0 * x[1] + 40.0 * x[0];
        let xs: Vec<Vec<f64>> = (0..12)
            .map(|i| vec![(i * 5 % 12) as f64 / 11.0, i as f64 / 22.0])
            .collect();
        let ys: Vec<f64> = xs.iter().map(|x| f(x)).collect();
        let gp = Gp::fit(&xs, &ys);
        let (small, _) = gp.predict(&[0.1, 1.0]);
        let (large, _) = gp.predict(&[0.9, 1.0]);
        assert!(
            (small - f(&[0.1, 1.0])).abs() < 10.0,
            "{small} vs {}",
            f(&[0.1, 1.0])
        );
        assert!(
            (large - f(&[0.9, 1.0])).abs() < 10.0,
            "{large} vs {}",
            f(&[0.9, 1.0])
        );
    }
}
