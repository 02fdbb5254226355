//! Turning a validated config into an operator graph: stream schemas,
//! compiled expressions and aggregates, partitioning.

pub(crate) mod expr;
