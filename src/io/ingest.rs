//! Closing the network sources, whose records cannot be read again.
//!
//! A record an `http`, `tcp` or `udp` source has taken from the network
//! exists nowhere else, so it must enter the pipeline before the run ends
//! or takes its final checkpoint. Stopping (the stop flag) or *closing*
//! (before a final checkpoint) makes these sources stop taking input (the
//! `http` source answers 503); their worker-side tasks then hand over what
//! was taken and report themselves drained. A drained source ends only
//! when the run stops; while closing it just waits, so open windows stay
//! open for the checkpoint.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use crate::exec::operator::{SourcePoll, SourceTask};

/// Shared by the network sources of a run and the run itself.
#[derive(Clone, Default)]
pub(crate) struct IngestControl {
    stop: Arc<AtomicBool>,
    closing: Arc<AtomicBool>,
    /// Network sources not yet drained.
    open: Arc<AtomicUsize>,
}

impl IngestControl {
    pub(crate) fn new(stop: Arc<AtomicBool>) -> IngestControl {
        IngestControl {
            stop,
            ..Default::default()
        }
    }

    /// Whether the sources must stop taking input.
    pub(crate) fn should_close(&self) -> bool {
        self.stop.load(Relaxed) || self.closing.load(Relaxed)
    }

    /// Asks every network source to stop taking input and drain.
    pub(crate) fn close(&self) {
        self.closing.store(true, Relaxed);
    }

    /// Whether every network source has handed over all it took.
    pub(crate) fn drained(&self) -> bool {
        self.open.load(Relaxed) == 0
    }

    /// Wraps the worker-side task of a network source, which ends when its
    /// input is closed and everything taken was handed over.
    pub(crate) fn task(&self, inner: Box<dyn SourceTask>) -> Box<dyn SourceTask> {
        self.open.fetch_add(1, Relaxed);
        Box::new(NetTask {
            inner,
            control: self.clone(),
            drained: false,
        })
    }
}

struct NetTask {
    inner: Box<dyn SourceTask>,
    control: IngestControl,
    drained: bool,
}

impl SourceTask for NetTask {
    fn poll(&mut self, stop: bool) -> SourcePoll {
        if self.drained {
            return if stop {
                SourcePoll::Ended
            } else {
                SourcePoll::Pending(None)
            };
        }
        match self.inner.poll(stop) {
            SourcePoll::Ended => {
                self.drained = true;
                self.control.open.fetch_sub(1, Relaxed);
                self.poll(stop)
            }
            other => other,
        }
    }
}
