//! Spans of a thread that does nothing but run spawned tasks, such as the
//! thread quinn's endpoint and connection drivers run on: every poll of a
//! task is one span of the thread's lane, the time between polls waiting.
//! eddy's code never runs there, so without this the window would show
//! QUIC's own work (UDP I/O, encryption, acknowledgements) only as the
//! waits of the exchange streams that depend on it.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::lane::{LaneName, LaneTrace};
use super::{Kind, on};
use crate::exec::clock;

thread_local! {
    /// One lane per thread: its tasks never run at the same time.
    static LANE: RefCell<LaneTrace> =
        RefCell::new(LaneTrace::new(LaneName::Transport, Vec::new()));
}

/// A task whose polls are logged as `Transport` spans of its thread's lane.
pub(crate) struct TransportPolls<F>(pub(crate) F);

impl<F: Future + Unpin> Future for TransportPolls<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if !on() {
            return Pin::new(&mut self.0).poll(cx);
        }
        let start = clock::now_ns() | 1;
        let polled = Pin::new(&mut self.0).poll(cx);
        LANE.with(|lane| lane.borrow_mut().end(start, Kind::Transport, 0));
        polled
    }
}
