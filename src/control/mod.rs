//! Decisions about where work runs. For now one: the static assignment of
//! key bins to the workers of the members present when a distributed run
//! starts ([`assignment`]). Pure functions; the daemon feeds them the member
//! table and hands the result to the engine.

pub(crate) mod assignment;
