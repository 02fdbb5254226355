//! Constrained two-objective Bayesian optimisation, ParEGO-style (Knowles,
//! 2006), as a sans-IO ask/tell machine: [`Optimizer::suggest`] proposes
//! the next configuration to profile, [`Optimizer::observe`] takes what a
//! profiling run measured, [`Optimizer::choose`] picks the configuration to
//! run at a given input rate.
//!
//! Inputs are points of the unit cube: the settings normalised by
//! `tune::space`, and, as the last coordinate when there is one, the input
//! rate the run was profiled at (a context: the optimiser proposes settings
//! for a rate it is given, never a rate). Objectives (CPU and memory) are
//! minimised; constraints are ratios to their limit (p99 latency over its
//! goal, recovery time over its maximum), met when at most 1.
//!
//! Why ParEGO and not EHVI: each iteration draws a weight vector and
//! scalarises the normalised objectives with the augmented Chebyshev
//! function, so one Gaussian process and the classic expected improvement
//! suffice; the front fills in over iterations as the weights vary. The
//! measured price (../shared/STACK.md) is 1.5-2x the evaluations of EHVI,
//! against 10 MB of binary for a crate with EHVI built in. The models are
//! `tune::gp`. Constraints
//! multiply the improvement by the probability of meeting each one, from a
//! Gaussian process per constraint (Gardner et al., 2014).

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::gp::{Gp, distance};
use super::pareto;

/// ParEGO's weight of the sum next to the maximum.
const RHO: f64 = 0.05;
/// Random candidates scored per suggestion, plus as many perturbations of
/// the best points seen.
const CANDIDATES: usize = 2000;
/// Candidates closer than this to a run already made are not proposed: a
/// near-repeat of a run is within the noise of a profiling run's
/// measurement and teaches the models little, while a run elsewhere
/// does. 0.02 is 2 % of a setting's range (on a log scale for a range of
/// decades); rates 10 % apart are 0.006 apart.
pub(crate) const MIN_DISTANCE: f64 = 0.02;
/// A challenger moves one setting to one of this many steps of its range
/// (and 0)...
const AXIS_STEPS: usize = 10;
/// ...at least this far from where it is: a smaller move is within what
/// a profiling run can tell apart.
const AXIS_MOVE: f64 = 0.1;
/// Weight vectors are drawn from this many steps of the simplex.
const WEIGHT_STEPS: usize = 10;

/// Profiling runs closer than this to an observation made in place are
/// left out of the objective models (see [`Observation::in_place`]): 0.1
/// is a tenth of each setting's range, or a rate a factor of about 6
/// apart, alone.
pub(crate) const SUPERSEDED_WITHIN: f64 = 0.1;

/// What one run measured at one point.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Observation {
    pub(crate) x: Vec<f64>,
    pub(crate) objectives: [f64; 2],
    /// Each constraint as value / limit: met when at most 1; `None` where
    /// the run could not measure it.
    pub(crate) constraints: Vec<Option<f64>>,
    /// Measured on the system itself, with these settings in force, rather
    /// than on a short stand-in for it (a profiling run). Near it, its
    /// objectives replace the stand-ins': a short run misses what only
    /// builds up over time (state that fills the cache over many windows),
    /// and the models otherwise kept choosing settings whose cost only the
    /// stand-ins had seen.
    pub(crate) in_place: bool,
}

impl Observation {
    /// Meets every constraint it measured.
    pub(crate) fn feasible(&self) -> bool {
        self.constraints.iter().flatten().all(|&c| c <= 1.0)
    }
}

pub(crate) struct Optimizer {
    /// Settings coordinates, then the context (rate) if `context`.
    dims: usize,
    context: bool,
    constraints: usize,
    /// Points of the space-filling design still to hand out.
    design: Vec<Vec<f64>>,
    observations: Vec<Observation>,
    /// The objectives are modelled by their logarithm (see
    /// [`Optimizer::log_objectives`]).
    log: bool,
    rng: StdRng,
}

impl Optimizer {
    /// `settings` coordinates, `context` when the last coordinate is the
    /// rate; `initial` points of a Latin hypercube come first.
    pub(crate) fn new(
        settings: usize,
        context: bool,
        constraints: usize,
        initial: usize,
        seed: u64,
    ) -> Optimizer {
        let mut rng = StdRng::seed_from_u64(seed);
        let design = latin_hypercube(settings, initial, &mut rng);
        Optimizer {
            dims: settings + usize::from(context),
            context,
            constraints,
            design,
            observations: Vec::new(),
            log: false,
            rng,
        }
    }

    /// Models the objectives by their logarithm, for objectives that are
    /// positive and vary by factors: CPU and memory. A setting that halves
    /// the CPU at one rate halves it at another, which a model of the log
    /// carries over as a shift, where a linear model needed a product of
    /// setting and rate it does not have; and a model of the log never
    /// expects less than nothing. Values at or below 0 are refused.
    pub(crate) fn log_objectives(mut self) -> Optimizer {
        self.log = true;
        self
    }

    /// Drops `n` points of the initial design: runs made before a restart
    /// (restored with [`Optimizer::observe`]) already covered them.
    pub(crate) fn skip_design(&mut self, n: usize) {
        let keep = self.design.len().saturating_sub(n);
        self.design.truncate(keep);
    }

    /// Points of the initial design still to hand out.
    pub(crate) fn design_left(&self) -> usize {
        self.design.len()
    }

    pub(crate) fn observations(&self) -> &[Observation] {
        &self.observations
    }

    /// Records a profiling run. Points outside the cube or with the wrong
    /// number of values are refused: they would silently skew every model.
    pub(crate) fn observe(&mut self, observation: Observation) -> Result<(), String> {
        if observation.x.len() != self.dims {
            return Err(format!(
                "an observation has {} coordinates, the space {}",
                observation.x.len(),
                self.dims
            ));
        }
        if observation.constraints.len() != self.constraints {
            return Err(format!(
                "an observation has {} constraint values, the optimiser {}",
                observation.constraints.len(),
                self.constraints
            ));
        }
        if observation.x.iter().any(|v| !(0.0..=1.0).contains(v))
            || observation.objectives.iter().any(|v| !v.is_finite())
            || observation
                .constraints
                .iter()
                .flatten()
                .any(|v| !v.is_finite())
            || (self.log && observation.objectives.iter().any(|&v| v <= 0.0))
        {
            return Err(format!("an observation is out of range: {observation:?}"));
        }
        self.observations.push(observation);
        Ok(())
    }

    /// Puts `observation` in the place of the `i`th one (a newer measure of
    /// the same point), checked as [`Optimizer::observe`] checks it.
    pub(crate) fn replace(&mut self, i: usize, observation: Observation) -> Result<(), String> {
        if i >= self.observations.len() {
            return Err(format!("no observation {i} to replace"));
        }
        self.observe(observation)?;
        self.observations.swap_remove(i);
        Ok(())
    }

    /// The observations the objective models fit: all but the profiling
    /// runs an in-place observation supersedes.
    fn objective_runs(&self) -> Vec<&Observation> {
        let in_place: Vec<&Observation> = self.observations.iter().filter(|o| o.in_place).collect();
        self.observations
            .iter()
            .filter(|o| {
                o.in_place
                    || !in_place
                        .iter()
                        .any(|p| distance(&p.x, &o.x) < SUPERSEDED_WITHIN)
            })
            .collect()
    }

    /// The settings to profile next, at `rate` (ignored without context).
    ///
    /// `floor` holds the least value each setting will run at (normalised;
    /// missing ones are 0), where the run raises what it is given (the
    /// daemon keeps the cache above the open state). Candidates are raised
    /// to it before they are scored and compared with the runs made: a run
    /// is observed at the settings it ran with, and candidates below the
    /// floor that differed only there were otherwise proposed again and
    /// again, each run a repeat of the last.
    pub(crate) fn suggest(&mut self, rate: f64, floor: &[f64]) -> Vec<f64> {
        let settings = self.dims - usize::from(self.context);
        let raise = |x: &mut Vec<f64>| {
            for (v, f) in x.iter_mut().zip(floor) {
                *v = v.max(f.clamp(0.0, 1.0));
            }
        };
        if let Some(mut x) = self.design.pop() {
            raise(&mut x);
            if self.context {
                x.push(rate);
            }
            return x;
        }
        let weights = self.draw_weights();
        let runs = self.objective_runs();
        let scalar = self.scalarised(&runs, weights);
        let feasible_best = runs
            .iter()
            .zip(&scalar)
            .filter(|(o, _)| o.feasible())
            .map(|(_, &s)| s)
            .fold(f64::INFINITY, f64::min);
        let xs: Vec<Vec<f64>> = runs.iter().map(|o| o.x.clone()).collect();
        let objective = Gp::fit(&xs, &scalar);
        let elite = elite(&runs, &scalar, settings);
        let constraints = self.constraint_models();
        let mut scored = Vec::new();
        for mut x in self.candidates(settings, rate, &elite) {
            raise(&mut x);
            if self
                .observations
                .iter()
                .any(|o| distance(&o.x, &x) < MIN_DISTANCE)
            {
                continue;
            }
            let feasibility = feasibility(&constraints, &x);
            let (mean, sd) = objective.predict(&x);
            scored.push((x, mean, sd, feasibility));
        }
        // The incumbent to improve on. With a rate, it is the best the
        // models expect at that rate: the best run overall may have been at
        // a lower rate, where settings this rate cannot meet were enough,
        // and nothing feasible here would then look like an improvement.
        let incumbent = if self.context {
            scored
                .iter()
                .filter(|c| c.3 >= 0.5)
                .map(|c| c.1)
                .fold(f64::INFINITY, f64::min)
        } else {
            feasible_best
        };
        let mut best = (f64::NEG_INFINITY, Vec::new());
        for (x, mean, sd, feasibility) in scored {
            // With nothing feasible yet, first find the feasible region.
            let score = if incumbent.is_finite() {
                expected_improvement(incumbent, mean, sd) * feasibility
            } else {
                feasibility
            };
            if score > best.0 {
                best = (score, x);
            }
        }
        if best.1.is_empty() {
            // Every candidate repeated a run: any point of the space will do.
            let mut x: Vec<f64> = (0..settings).map(|_| self.rng.random::<f64>()).collect();
            raise(&mut x);
            if self.context {
                x.push(rate);
            }
            return x;
        }
        best.1
    }

    /// The observed runs that meet every constraint and no other such run
    /// beats in both objectives, by the first objective.
    /// Profiling runs an in-place observation supersedes are left out.
    pub(crate) fn front(&self) -> Vec<&Observation> {
        let feasible: Vec<&Observation> = self
            .objective_runs()
            .into_iter()
            .filter(|o| o.feasible())
            .collect();
        let points: Vec<[f64; 2]> = feasible.iter().map(|o| o.objectives).collect();
        pareto::front(&points)
            .into_iter()
            .map(|i| feasible[i])
            .collect()
    }

    /// The configuration to run at `rate`: among candidate settings, the
    /// one the models expect to meet every constraint with `margin` (in
    /// standard deviations) at the least cost. None until there are
    /// observations, or when nothing is expected to meet the constraints.
    ///
    /// A candidate's cost is the sum of the logarithms of its CPU and its
    /// memory, each taken `margin` standard deviations above what the
    /// models expect: a difference of 0.1 is a tenth more of one, or a
    /// twentieth more of both, so a saving in one is worth as much as the
    /// same share of the other, whatever their units and at any rate.
    /// (Normalised over every run, the scale came from the front at the low
    /// rates, where a setting's memory barely varies, and at the peak a
    /// 3 % difference in memory outweighed a 20 % one in CPU.) Pessimistic,
    /// because the choice runs for real: by the models' means alone, the
    /// least cost among thousands of candidates was most often where the
    /// models knew least and guessed low (in `eddy bench tune` one worker
    /// with a 4 MiB cache and 1 s checkpoints at the peak, half again the
    /// CPU the runs nearby had measured). Finding out is what profiling
    /// runs are for.
    ///
    /// `in_force` (normalised, without the rate) competes too, and keeps
    /// its place unless another is expected to cost [`SWITCH_COST`] less:
    /// a change is a live reconfiguration, and between two choices whose
    /// expected costs are within the models' noise the pick otherwise
    /// jumped back and forth as the rate moved (five times in one day of
    /// `eddy bench tune`, each jump moving bins and checkpoint intervals).
    pub(crate) fn choose(
        &mut self,
        rate: f64,
        margin: f64,
        in_force: Option<&[f64]>,
    ) -> Option<Choice> {
        let feasible: Vec<Choice> = self
            .predicted(rate, margin, in_force)?
            .into_iter()
            .filter(|c| c.constraints.iter().all(|&v| v <= 1.0))
            .collect();
        // A linear model may extrapolate to nothing or less; the least
        // observed value bounds it from below. Models of the logarithm
        // keep the floor too: without it, `eddy bench tune` ran one
        // worker with a 10 MiB cache and 1.5 s checkpoints on the ramp
        // and fell behind (Performance → Tuning).
        let floor = self.least_objectives();
        let mut best: Option<(f64, Choice)> = None;
        for c in feasible {
            let cost: f64 = (0..2).map(|k| c.upper[k].max(floor[k]).ln()).sum();
            let cost = if c.in_force { cost - SWITCH_COST } else { cost };
            if best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, c));
            }
        }
        best.map(|(_, c)| c)
    }

    /// Whether the next profiling run should test a challenger
    /// ([`Optimizer::challenger`]) rather than what expected hypervolume
    /// improvement proposes: every other run once the initial design is
    /// made (counted over the profiling runs, so a restart keeps the turn).
    pub(crate) fn challenge_due(&self) -> bool {
        let profiled = self.observations.iter().filter(|o| !o.in_place).count();
        self.design.is_empty() && profiled % 2 == 1
    }

    /// Settings to profile at `rate` so that the choice can change: first
    /// `chosen` with one setting moved ([`Optimizer::one_setting_moved`]),
    /// else the settings the models' means expect to cost least
    /// ([`Optimizer::cheapest_untried`]). Candidates below `floor`
    /// (normalised settings) are left out, as a run would be raised to it.
    pub(crate) fn challenger(
        &mut self,
        rate: f64,
        floor: &[f64],
        chosen: &Choice,
    ) -> Option<Vec<f64>> {
        self.one_setting_moved(rate, floor, chosen)
            .or_else(|| self.cheapest_untried(rate, floor, chosen))
    }

    /// `chosen` with one setting moved, the settings taken in turn (one
    /// per challenge, counted over the profiling runs so that a restart
    /// keeps the turn), to the value where a run is most likely to show a
    /// saving worth a switch: the expected improvement on the choice's
    /// expected cost less [`SWITCH_COST`], times the probability that
    /// the constraints hold. A setting with no such value left untried
    /// passes the turn on.
    ///
    /// Why in turn and not the best move of all: runs near the choice
    /// tend to share settings, and then the models cannot tell which one
    /// costs what. In `eddy bench tune` every run with 28 s checkpoints
    /// also had a 64 MiB cache, the models blamed the long checkpoints
    /// for the memory, and no run ever tried a small cache with long
    /// checkpoints, which held figures show meets both goals at the peak
    /// for the least of both. A run that moves one setting from the
    /// choice tells what that setting does, whatever the models believe.
    fn one_setting_moved(&self, rate: f64, floor: &[f64], chosen: &Choice) -> Option<Vec<f64>> {
        let settings = self.dims - usize::from(self.context);
        let base = chosen.x.get(..settings)?;
        let bar: f64 = chosen.objectives.iter().map(|v| v.ln()).sum::<f64>() - SWITCH_COST;
        let constraints = self.constraint_models();
        // Every setting's moves, scored at once (one fit of the models).
        let mut points: Vec<(usize, Vec<f64>)> = Vec::new();
        for d in 0..settings {
            let least = floor.get(d).map_or(0.0, |f| f.clamp(0.0, 1.0));
            for i in 0..=AXIS_STEPS {
                let v = (i as f64 / AXIS_STEPS as f64).max(least);
                let mut x = base.to_vec();
                x[d] = v;
                if self.context {
                    x.push(rate);
                }
                let tried = self
                    .observations
                    .iter()
                    .any(|o| distance(&o.x, &x) < MIN_DISTANCE);
                if (v - base[d]).abs() >= AXIS_MOVE && !tried && !points.iter().any(|p| p.1 == x) {
                    points.push((d, x));
                }
            }
        }
        let (axes, xs): (Vec<usize>, Vec<Vec<f64>>) = points.into_iter().unzip();
        let mut best: Vec<Option<(f64, Vec<f64>)>> = vec![None; settings];
        for (d, c) in axes.into_iter().zip(self.evaluate(xs, 0.0, None)?) {
            let mean: f64 = c.objectives.iter().map(|v| v.ln()).sum();
            let sd = c.spread.iter().map(|s| s * s).sum::<f64>().sqrt().max(1e-9);
            let feasibility = feasibility(&constraints, &c.x);
            let score = expected_improvement(bar, mean, sd) * feasibility;
            if feasibility >= 0.5 && best[d].as_ref().is_none_or(|(b, _)| score > *b) {
                best[d] = Some((score, c.x));
            }
        }
        let profiled = self.observations.iter().filter(|o| !o.in_place).count();
        (0..settings)
            .map(|turn| (profiled / 2 + turn) % settings)
            .find_map(|d| best[d].take().map(|(_, x)| x))
    }

    /// The settings [`Optimizer::choose`] would pick at `rate` if the
    /// models' means were sure, when by those means they cost
    /// [`SWITCH_COST`] less than `chosen` does with its margin, and no run
    /// was made near them. The margin that keeps a choice from going where
    /// the models know least also kept it from ever leaving settings
    /// measured in place: a run there settles it either way.
    fn cheapest_untried(&mut self, rate: f64, floor: &[f64], chosen: &Choice) -> Option<Vec<f64>> {
        let least = self.least_objectives();
        let cost = |o: [f64; 2]| -> f64 { (0..2).map(|k| o[k].max(least[k]).ln()).sum() };
        let bar = cost(chosen.upper) - SWITCH_COST;
        let mut best: Option<(f64, Vec<f64>)> = None;
        for c in self.predicted(rate, 0.0, None)? {
            let below_floor = c.x.iter().zip(floor).any(|(v, f)| v < f);
            let feasible = c.constraints.iter().all(|&v| v <= 1.0);
            if below_floor || !feasible {
                continue;
            }
            let k = cost(c.objectives);
            if k >= bar || best.as_ref().is_some_and(|(b, _)| k >= *b) {
                continue;
            }
            if self
                .observations
                .iter()
                .any(|o| distance(&o.x, &c.x) < MIN_DISTANCE)
            {
                continue;
            }
            best = Some((k, c.x));
        }
        best.map(|(_, x)| x)
    }

    /// The objectives of a run as the models fit them.
    fn modelled(&self, o: &Observation) -> [f64; 2] {
        if self.log {
            o.objectives.map(f64::ln)
        } else {
            o.objectives
        }
    }

    /// The least of each objective over every run (a small positive value
    /// where none is positive).
    fn least_objectives(&self) -> [f64; 2] {
        let runs = self.objective_runs();
        std::array::from_fn(|k| {
            let least = runs
                .iter()
                .map(|o| o.objectives[k])
                .filter(|&v| v > 0.0)
                .fold(f64::INFINITY, f64::min);
            if least.is_finite() { least } else { 1e-9 }
        })
    }

    /// The configuration expected to come closest to meeting every
    /// constraint at `rate` (the least worst ratio to its limit, with
    /// `margin`), for when [`Optimizer::choose`] finds none: settings chosen
    /// for a lower rate would otherwise stay in force through a peak they
    /// are expected to miss. None until there are observations.
    pub(crate) fn closest(&mut self, rate: f64, margin: f64) -> Option<Choice> {
        self.predicted(rate, margin, None)?
            .into_iter()
            .min_by(|a, b| worst(a).total_cmp(&worst(b)))
    }

    /// Candidate settings at `rate` (`in_force` among them, marked) and
    /// what the models expect of each, constraints with `margin` standard
    /// deviations added.
    fn predicted(
        &mut self,
        rate: f64,
        margin: f64,
        in_force: Option<&[f64]>,
    ) -> Option<Vec<Choice>> {
        if self.observations.len() < 2 {
            return None;
        }
        let settings = self.dims - usize::from(self.context);
        let runs = self.objective_runs();
        let scalar = self.scalarised(&runs, [0.5, 0.5]);
        let elite = elite(&runs, &scalar, settings);
        let mut candidates = self.candidates(settings, rate, &elite);
        let kept = in_force.filter(|x| x.len() == settings).map(|x| {
            let mut x = x.to_vec();
            if self.context {
                x.push(rate);
            }
            candidates.push(x.clone());
            x
        });
        self.evaluate(candidates, margin, kept.as_deref())
    }

    /// What the models expect of each of `points` (`in_force`, if among
    /// them, marked), constraints with `margin` standard deviations added.
    /// None with fewer than two observations.
    fn evaluate(
        &self,
        points: Vec<Vec<f64>>,
        margin: f64,
        in_force: Option<&[f64]>,
    ) -> Option<Vec<Choice>> {
        if self.observations.len() < 2 {
            return None;
        }
        let runs = self.objective_runs();
        let xs: Vec<Vec<f64>> = runs.iter().map(|o| o.x.clone()).collect();
        let models: Vec<Gp> = (0..2)
            .map(|k| {
                let ys: Vec<f64> = runs.iter().map(|o| self.modelled(o)[k]).collect();
                Gp::fit(&xs, &ys)
            })
            .collect();
        let log = self.log;
        let back = move |v: f64| if log { v.exp() } else { v };
        let constraints = self.constraint_models();
        let out = points
            .into_iter()
            .map(|x| {
                let predicted = [models[0].predict(&x), models[1].predict(&x)];
                let objectives = predicted.map(|(m, _)| back(m));
                let upper = predicted.map(|(m, sd)| back(m + margin * sd));
                // A linear model's spread, as a share of its mean, is
                // close to that of its logarithm while it is small.
                let spread =
                    predicted.map(|(m, sd)| if log { sd } else { sd / m.abs().max(1e-12) });
                let expected = constraints
                    .iter()
                    .map(|gp| {
                        let (m, sd) = predict_constraint(gp.as_ref(), &x);
                        (m + margin * sd).exp()
                    })
                    .collect();
                Choice {
                    in_force: in_force == Some(x.as_slice()),
                    x,
                    objectives,
                    upper,
                    spread,
                    constraints: expected,
                }
            })
            .collect();
        Some(out)
    }

    /// A model per constraint, of the log of its ratio to the limit, over
    /// the runs that measured it; none while no run has.
    fn constraint_models(&self) -> Vec<Option<Gp>> {
        (0..self.constraints)
            .map(|c| {
                let (xs, ys): (Vec<Vec<f64>>, Vec<f64>) = self
                    .observations
                    .iter()
                    .filter_map(|o| Some((o.x.clone(), log_ratio(o.constraints[c]?))))
                    .unzip();
                (!ys.is_empty()).then(|| Gp::fit(&xs, &ys))
            })
            .collect()
    }

    fn draw_weights(&mut self) -> [f64; 2] {
        let step = self.rng.random_range(0..=WEIGHT_STEPS) as f64 / WEIGHT_STEPS as f64;
        [step, 1.0 - step]
    }

    /// The ideal and nadir points of the observed front: normalising by
    /// the range of all observations would squeeze the front into a corner
    /// whenever some run was far off (one objective would then decide
    /// every scalarisation, and the front would fill in only at its ends).
    fn objective_bounds(&self, runs: &[&Observation]) -> ([f64; 2], [f64; 2]) {
        let points: Vec<[f64; 2]> = runs.iter().map(|o| self.modelled(o)).collect();
        let mut lo = [f64::INFINITY; 2];
        let mut hi = [f64::NEG_INFINITY; 2];
        for p in pareto::front(&points).into_iter().map(|i| points[i]) {
            for k in 0..2 {
                lo[k] = lo[k].min(p[k]);
                hi[k] = hi[k].max(p[k]);
            }
        }
        // A front of one point (objectives that do not conflict) has no
        // range: then all the runs give the scale.
        for k in 0..2 {
            if hi[k] - lo[k] <= 1e-12 * hi[k].abs().max(1.0) {
                for p in &points {
                    lo[k] = lo[k].min(p[k]);
                    hi[k] = hi[k].max(p[k]);
                }
            }
        }
        (lo, hi)
    }

    /// The augmented Chebyshev scalarisation of each of `runs`, on
    /// objectives normalised to [0, 1] over what they measured.
    fn scalarised(&self, runs: &[&Observation], weights: [f64; 2]) -> Vec<f64> {
        let (lo, hi) = self.objective_bounds(runs);
        runs.iter()
            .map(|o| {
                let y = self.modelled(o);
                let f: Vec<f64> = (0..2)
                    .map(|k| weights[k] * (y[k] - lo[k]) / (hi[k] - lo[k]).max(f64::EPSILON))
                    .collect();
                f[0].max(f[1]) + RHO * (f[0] + f[1])
            })
            .collect()
    }

    /// Uniform random points, and small perturbations of `elite` (where
    /// improvement is most likely), at `rate`.
    fn candidates(&mut self, settings: usize, rate: f64, elite: &[Vec<f64>]) -> Vec<Vec<f64>> {
        let mut out = Vec::with_capacity(2 * CANDIDATES);
        for i in 0..2 * CANDIDATES {
            let mut x: Vec<f64> = if i < CANDIDATES || elite.is_empty() {
                (0..settings).map(|_| self.rng.random::<f64>()).collect()
            } else {
                let base = &elite[i % elite.len()];
                let scale = [0.02, 0.05, 0.15][i % 3];
                base.iter()
                    .map(|&v| (v + scale * (2.0 * self.rng.random::<f64>() - 1.0)).clamp(0.0, 1.0))
                    .collect()
            };
            if self.context {
                x.push(rate);
            }
            out.push(x);
        }
        out
    }
}

/// The settings of the best few of `runs` by `scalar`.
fn elite(runs: &[&Observation], scalar: &[f64], settings: usize) -> Vec<Vec<f64>> {
    let mut order: Vec<usize> = (0..scalar.len()).collect();
    crate::cold_sort::sort_by(&mut order, |&a, &b| scalar[a].total_cmp(&scalar[b]));
    order
        .iter()
        .take(5)
        .map(|&i| runs[i].x[..settings].to_vec())
        .collect()
}

/// A constraint model's prediction at `x`: without a model (no run
/// measured the constraint yet), right at the limit and unsure, which
/// neither rules a candidate out nor lets one be chosen with a margin.
fn predict_constraint(gp: Option<&Gp>, x: &[f64]) -> (f64, f64) {
    gp.map_or((0.0, 1.0), |gp| gp.predict(x))
}

/// The probability that `x` meets every constraint, by their models.
fn feasibility(constraints: &[Option<Gp>], x: &[f64]) -> f64 {
    constraints
        .iter()
        .map(|gp| {
            let (m, sd) = predict_constraint(gp.as_ref(), x);
            normal_cdf(-m / sd)
        })
        .product()
}

/// The optimiser's pick for one rate: settings (normalised, with the rate
/// last when there is a context) and what the models expect of it.
#[derive(Clone, Debug)]
pub(crate) struct Choice {
    pub(crate) x: Vec<f64>,
    pub(crate) objectives: [f64; 2],
    /// The objectives with the margin of [`Optimizer::choose`]: what its
    /// cost weighs.
    pub(crate) upper: [f64; 2],
    /// The standard deviation of the models of each objective's
    /// logarithm there.
    pub(crate) spread: [f64; 2],
    /// Expected value / limit of each constraint, margin included.
    pub(crate) constraints: Vec<f64>,
    /// These are the settings in force (see [`Optimizer::choose`]).
    pub(crate) in_force: bool,
}

/// How much less other settings must be expected to cost (the logarithms
/// of CPU and memory, summed: see [`Optimizer::choose`]) before the
/// settings in force are changed for them: about a tenth of one, or a
/// twentieth of both.
pub(crate) const SWITCH_COST: f64 = 0.1;

/// The largest of a choice's expected constraint ratios.
fn worst(c: &Choice) -> f64 {
    c.constraints
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Constraints are modelled as the logarithm of their ratio to the limit:
/// a latency of 10x its goal and one of 1.1x are both simply "over", and
/// on a linear scale the first would flatten the model where it matters,
/// around 1.
fn log_ratio(ratio: f64) -> f64 {
    ratio.max(1e-9).ln()
}

/// Expected improvement below `best` of a normal(mean, sd) (minimising).
fn expected_improvement(best: f64, mean: f64, sd: f64) -> f64 {
    let z = (best - mean) / sd;
    (best - mean) * normal_cdf(z) + sd * normal_pdf(z)
}

fn normal_pdf(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Φ(z) from erf by Abramowitz and Stegun 7.1.26 (error below 1.5e-7,
/// far finer than the models it weighs).
fn normal_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-x * x).exp();
    if z >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

/// `n` points of `dims` coordinates, one in each of `n` slices of every
/// axis: spreads the first runs evenly whatever the dimension.
fn latin_hypercube(dims: usize, n: usize, rng: &mut StdRng) -> Vec<Vec<f64>> {
    let mut points = vec![vec![0.0; dims]; n];
    for d in 0..dims {
        let mut slots: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            slots.swap(i, rng.random_range(0..=i));
        }
        for (p, slot) in points.iter_mut().zip(slots) {
            p[d] = (slot as f64 + rng.random::<f64>()) / n as f64;
        }
    }
    points
}

#[cfg(test)]
#[path = "optimizer_tests.rs"]
mod tests;
