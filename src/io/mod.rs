//! Sources and sinks, and the record formats they read and write.

pub(crate) mod codec;
pub(crate) mod generator;
