//! What the firmware and the host-side check share: the input readings
//! compiled into the firmware, and the pipeline run over them.
#![no_std]

pub mod input;
pub mod pipeline;
