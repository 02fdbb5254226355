//! eddy: an embedded, single-binary edge stream processor.
//!
//! Without the default `std` feature the crate is `#![no_std]` and holds only
//! [`kernel`], the portable core that also runs on microcontrollers.
#![cfg_attr(not(feature = "std"), no_std)]

pub mod kernel;

#[cfg(feature = "std")]
pub(crate) mod cold_sort;
#[cfg(feature = "std")]
pub(crate) mod config;
#[cfg(feature = "std")]
pub(crate) mod control;
#[cfg(feature = "std")]
pub mod daemon;
#[cfg(feature = "std")]
pub(crate) mod data;
#[cfg(feature = "std")]
pub(crate) mod exec;
#[cfg(feature = "std")]
pub(crate) mod io;
#[cfg(feature = "std")]
pub(crate) mod mesh;
#[cfg(feature = "std")]
pub(crate) mod migrate;
#[cfg(feature = "std")]
pub(crate) mod plan;
#[cfg(feature = "std")]
pub(crate) mod state;
#[cfg(feature = "std")]
pub(crate) mod trace;
#[cfg(feature = "std")]
pub(crate) mod tune;

#[cfg(feature = "std")]
pub use daemon::api::{
    ComponentStats, LatencyPercentiles, RunReport, WcountReport, run_pipeline_file,
    run_pipeline_str, wcount, wcount_expected,
};
/// The store's checkpoint and recovery path, for `cargo bench --bench state`.
#[cfg(feature = "std")]
#[doc(hidden)]
pub use state::bench::{CheckpointFigures, Commit as CheckpointCommit, checkpoint_figures};
