//! `eddy run` and `eddy validate`.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_signal::{Signal, Signals};
use smol::stream::StreamExt;

use super::EXIT_CONFIG;
use super::load::{load, load_with_text};
use super::reload::{Current, ReloadRequest, reload};
use super::services::Services;
use super::stats;
use crate::exec;

pub(crate) fn validate(file: &Path) -> ExitCode {
    match load(file) {
        Ok((plan, d)) => {
            eprint!("{}", d.render());
            println!("{}: ok: {}", file.display(), plan.describe());
            ExitCode::SUCCESS
        }
        Err(d) => {
            eprint!("{}", d.render());
            let n = d.errors.len();
            eprintln!(
                "{}: {n} error{}",
                file.display(),
                if n == 1 { "" } else { "s" }
            );
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

pub(crate) fn run(file: &Path, print_stats: bool) -> ExitCode {
    let (text, plan, d) = match load_with_text(file) {
        Ok(ok) => ok,
        Err(d) => {
            eprint!("{}", d.render());
            eprintln!(
                "{}: not started because of the errors above",
                file.display()
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    for w in d.render().lines() {
        tracing::warn!("{w}");
    }
    let described = plan.describe();
    tracing::info!(pipeline = %file.display(), "starting: {described}");
    // The mesh and the local API first: if they cannot start, no source has
    // read anything yet.
    let (reload_tx, reload_rx) = flume::bounded(1);
    let services = match Services::start(&plan.node, file, reload_tx) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let cluster = match services.cluster(&plan) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            services.shutdown_blocking();
            return ExitCode::FAILURE;
        }
    };
    let plan = Arc::new(plan);
    let stop = Arc::new(AtomicBool::new(false));
    // A distributed run's checkpoints are every member's: live reload
    // refuses it.
    let running = match exec::start_with(plan.clone(), stop, HashMap::new(), cluster) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("{e}");
            services.shutdown_blocking();
            return ExitCode::FAILURE;
        }
    };
    services.attach(running.reporter(), &described);
    let mut current = Some(Current {
        text,
        plan,
        running,
    });
    if let Err(code) = wait_or_signal(&mut current, &services, file, &reload_rx) {
        services.shutdown_blocking();
        return code;
    }
    let Some(current) = current else {
        // A reload failed, and the previous pipeline could not start again.
        services.shutdown_blocking();
        return ExitCode::FAILURE;
    };
    let report = current.running.wait();
    services.shutdown_blocking();
    stats::log_summary(&report);
    if print_stats {
        eprint!("{}", stats::table(&report));
        // Last, after the final checkpoint: what the whole run cost,
        // read by profiling runs (`tune_profile`) with the checkpoint in.
        eprint!("{}", stats::process_line());
    }
    match report.failure {
        Some(_) => ExitCode::FAILURE,
        None => ExitCode::SUCCESS,
    }
}

enum Event {
    Finished,
    /// `[migration] drain_timeout` passed while this member drained.
    DrainTimeout,
    Signal(std::io::Result<Signal>),
    Reload(ReloadRequest),
}

/// Waits until the run ends by itself, or a signal asks it to stop (then it
/// drains). A second signal exits at once. `SIGHUP` and `POST /reload`
/// reload the pipeline file.
fn wait_or_signal(
    current: &mut Option<Current>,
    services: &Services,
    file: &Path,
    reloads: &flume::Receiver<ReloadRequest>,
) -> Result<(), ExitCode> {
    smol::block_on(async {
        let mut signals = match Signals::new([Signal::Int, Signal::Term, Signal::Hup]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot listen for signals ({e}); Ctrl-C will not drain");
                while current.as_ref().is_some_and(|c| !c.running.is_finished()) {
                    smol::Timer::after(Duration::from_millis(20)).await;
                }
                return Ok(());
            }
        };
        let mut stopping = false;
        let mut drain_deadline: Option<Instant> = None;
        loop {
            let event = {
                let running = match current.as_ref() {
                    Some(c) => &c.running,
                    None => return Ok(()),
                };
                let finished = async {
                    while !running.is_finished() {
                        smol::Timer::after(Duration::from_millis(20)).await;
                    }
                    Event::Finished
                };
                let signal = async {
                    match signals.next().await {
                        Some(s) => Event::Signal(s),
                        None => std::future::pending().await,
                    }
                };
                let reload = async {
                    match reloads.recv_async().await {
                        Ok(r) => Event::Reload(r),
                        Err(_) => std::future::pending().await,
                    }
                };
                let drain_timeout = async {
                    match drain_deadline {
                        Some(at) => {
                            smol::Timer::at(at).await;
                            Event::DrainTimeout
                        }
                        None => std::future::pending().await,
                    }
                };
                smol::future::or(
                    finished,
                    smol::future::or(signal, smol::future::or(reload, drain_timeout)),
                )
                .await
            };
            match event {
                Event::Finished => return Ok(()),
                Event::DrainTimeout => {
                    drain_deadline = None;
                    if let Some(c) = current.as_ref() {
                        let timeout = c.running.reporter().plan().node.migration.drain_timeout;
                        // The run fails: the process exits non-zero once its
                        // workers returned.
                        c.running.shared().fail(format!(
                            "the drain did not complete within [migration] drain_timeout ({timeout:?}); exiting without handing over this member's bins"
                        ));
                    }
                }
                Event::Reload(request) => {
                    let outcome = if stopping {
                        Err("the pipeline is stopping".to_string())
                    } else {
                        reload(file, current, services)
                    };
                    let _ = request.reply.send(outcome);
                }
                Event::Signal(Ok(Signal::Hup)) if stopping => {
                    tracing::warn!("received SIGHUP while stopping; not reloading");
                }
                Event::Signal(Ok(Signal::Hup)) => {
                    tracing::info!("received SIGHUP; reloading {}", file.display());
                    if let Err(e) = reload(file, current, services) {
                        tracing::error!("reload: {e}");
                    }
                }
                Event::Signal(Ok(sig)) if !stopping => {
                    let Some(c) = current.as_mut() else {
                        return Ok(());
                    };
                    stopping = true;
                    services.set_stopping();
                    let shared = c.running.shared();
                    // Its input ended by itself: its bins cannot leave on
                    // the streams it ended; it stays until the run ends.
                    let drainable =
                        shared.can_drain() && !shared.ended_exchange.load(Ordering::Relaxed);
                    if shared.can_drain() && !drainable {
                        tracing::warn!(
                            "received {sig:?}; this member's input has ended, so its bins cannot move away: it stays until the other members end the run (send it again to exit at once)"
                        );
                        c.running.stop();
                    } else if drainable {
                        // A member of a distributed run: its sources end,
                        // its bins move to the others, and it leaves; the
                        // others finish the run.
                        let reporter = c.running.reporter();
                        let m = &reporter.plan().node.migration;
                        let (strategy, deadline) = (m.strategy, Instant::now() + m.drain_timeout);
                        drain_deadline = Some(deadline);
                        shared.draining.store(true, Ordering::SeqCst);
                        tracing::info!(
                            "received {sig:?}; draining: this member's bins move to the others, then it leaves the run (send it again to exit at once)"
                        );
                        c.running.stop();
                        std::thread::Builder::new()
                            .name("eddy-drain".into())
                            .spawn(move || drain(&shared, strategy, deadline))
                            .map_err(|e| {
                                tracing::error!("cannot start the drain: {e}");
                                ExitCode::FAILURE
                            })?;
                    } else if c.running.has_checkpoints() {
                        // Open windows stay open: their state goes into a
                        // final checkpoint and the next run continues them.
                        tracing::info!(
                            "received {sig:?}; taking a final checkpoint (send it again to exit at once)"
                        );
                        match c.running.checkpoint_and_halt(Duration::from_secs(30)) {
                            Ok(id) => tracing::info!(
                                checkpoint = id,
                                "final checkpoint committed; stopping"
                            ),
                            Err(e) => tracing::error!("the final checkpoint failed: {e}"),
                        }
                    } else {
                        tracing::info!(
                            "received {sig:?}; stopping sources and draining (send it again to exit at once)"
                        );
                        c.running.stop();
                    }
                }
                Event::Signal(Ok(sig)) => {
                    tracing::warn!("received {sig:?} again; exiting without draining");
                    return Err(ExitCode::from(130));
                }
                Event::Signal(Err(e)) => tracing::warn!("signal error: {e}"),
            }
        }
    })
}

/// SIGTERM on a member of a distributed run (see `Shared::drain`); a
/// failure ends the run with an error, so the process exits non-zero.
fn drain(shared: &Arc<exec::Shared>, strategy: crate::migrate::Strategy, deadline: Instant) {
    let started = Instant::now();
    match shared.drain(strategy, deadline) {
        Ok(r) => tracing::info!(
            epoch = r.epoch,
            bins = r.bins,
            bytes = r.bytes,
            steps = r.steps,
            duration_ms = started.elapsed().as_secs_f64() * 1e3,
            "drained: {} bins ({} bytes) moved to the other members at epoch {}, {:.1?}; leaving the run",
            r.bins,
            r.bytes,
            r.epoch,
            started.elapsed()
        ),
        Err(e) => shared.fail(format!("the drain failed: {e}")),
    }
}
