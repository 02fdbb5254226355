//! Live migration of keyed state between workers (Megaphone-style): plans
//! from one bin assignment to another, and the sans-IO protocol that moves
//! bins while the pipeline runs. The worker threads (src/exec) drive it.
// Until src/exec drives it (branch mig-engine), only the tests use it.
#![allow(dead_code, unused_imports)]

pub(crate) mod plan;
pub(crate) mod protocol;
#[cfg(test)]
mod sim;

pub(crate) use plan::{Assignment, Move, Step, Strategy, even, fallback, plan};
pub(crate) use protocol::{
    CoordInput, CoordOutput, Coordinator, Input, KeyedNode, Migrator, Output, Report, Time,
};
