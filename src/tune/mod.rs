//! Demeter-style tuning (Geldenhuys et al., 2024): forecast the input rate
//! and choose several interdependent settings together (workers, state
//! cache, checkpoint interval, batch size) with constrained
//! multi-objective Bayesian optimisation fed by short profiling runs.
//!
//! Sans-IO: the forecaster takes a rate history and returns a forecast; the
//! optimiser takes observations and returns configurations to try or to
//! run. Recording rates, profiling runs and applying a choice are the
//! daemon's.
//!
//! The daemon's side is `daemon::tune` (rate history and models in sled,
//! `GET /tune`) and `eddy tune`. Some helpers (hypervolume, dominance)
//! serve the optimiser's tests only.
#![allow(dead_code)]

pub(crate) mod forecast;
pub(crate) mod gp;
pub(crate) mod optimizer;
pub(crate) mod pareto;
pub(crate) mod space;
