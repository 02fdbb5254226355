//! The transform operators, one file each.

mod bin_bytes;
pub(crate) mod bin_cache;
mod dirty;
mod filter;
mod join;
mod map;
#[cfg(test)]
mod migrate_tests;
mod pane;
mod project;
mod session;
mod timers;
mod window;
mod window_state;

pub(crate) use bin_cache::StateAccess;
pub(crate) use filter::Filter;
pub(crate) use join::Join;
pub(crate) use map::Map;
pub(crate) use project::Project;
pub(crate) use session::SessionWindow;
pub(crate) use window::Window;
