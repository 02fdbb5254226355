//! Live migration of keyed state between workers (Megaphone-style): plans
//! from one bin assignment to another, and the sans-IO protocol that moves
//! bins while the pipeline runs. The worker threads (src/exec) drive it.

pub(crate) mod plan;
pub(crate) mod protocol;
#[cfg(test)]
mod sim;

#[allow(unused_imports)] // the API src/exec drives; see /work/notes/migrate-api.md
pub(crate) use plan::{Assignment, Move, Step, Strategy, even, fallback, plan};
#[allow(unused_imports)]
pub(crate) use protocol::{
    CoordInput, CoordOutput, Coordinator, Input, KeyedNode, Migrator, Output, Report, Time,
};
