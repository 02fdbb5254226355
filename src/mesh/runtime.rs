//! The thread an endpoint's QUIC work runs on. quinn spawns one driver task
//! per endpoint (UDP receive and send, packet decryption and routing) and
//! one per connection (packet building, encryption, timers). With
//! `quinn::SmolRuntime` those land on smol's global executor, where they
//! shared one thread with every stream reader and writer of the node (and,
//! in the bench, with the other endpoint's drivers): the mesh bench spent
//! its time waiting for that thread. Here each endpoint gets an executor
//! thread of its own, and two endpoints on one host do not queue behind
//! each other. The tasks that write and read a distributed run's exchange
//! streams run here too (`MeshEndpoint::spawn`): handing a frame to quinn
//! is then a call, not a wake-up of another thread, which moved the mesh
//! bench from 0.20 to 0.33 of TCP.
//!
//! Every poll of a quinn task is a `transport` span of the thread's trace
//! lane ("QUIC endpoint"), so QUIC's own work shows in `eddy trace`.
//!
//! Timers and the socket are async-io's, as in `SmolRuntime`: the reactor is
//! the process's one, driven by whichever thread waits.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, SmolRuntime};

/// A quinn runtime whose tasks run on one dedicated thread. The thread ends
/// when quinn drops the last reference (the endpoint and all its
/// connections are gone); tasks still pending then are dropped.
pub(crate) struct EndpointThread {
    executor: Arc<smol::Executor<'static>>,
    /// Dropped with this runtime: the thread's `run` then returns.
    _stop: flume::Sender<()>,
}

impl EndpointThread {
    /// Starts the thread; `name` says whose it is in `top -H` and in panics.
    pub(crate) fn start(name: String) -> io::Result<Arc<EndpointThread>> {
        let executor = Arc::new(smol::Executor::new());
        let (stop, stopped) = flume::bounded::<()>(0);
        let ex = executor.clone();
        std::thread::Builder::new().name(name).spawn(move || {
            smol::block_on(ex.run(async move {
                // Err once the runtime is dropped: nothing is ever sent.
                let _ = stopped.recv_async().await;
            }))
        })?;
        Ok(Arc::new(EndpointThread {
            executor,
            _stop: stop,
        }))
    }

    /// Runs `future` on this thread (not a quinn task: no transport span).
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> smol::Task<T> {
        self.executor.spawn(future)
    }
}

impl fmt::Debug for EndpointThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EndpointThread")
    }
}

impl Runtime for EndpointThread {
    fn new_timer(&self, i: Instant) -> Pin<Box<dyn AsyncTimer>> {
        SmolRuntime.new_timer(i)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        self.executor
            .spawn(crate::trace::TransportPolls(future))
            .detach();
    }

    fn wrap_udp_socket(&self, t: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        SmolRuntime.wrap_udp_socket(t)
    }
}
