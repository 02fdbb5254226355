//! `eddy run` and `eddy validate`.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

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
    let plan = Arc::new(plan);
    let stop = Arc::new(AtomicBool::new(false));
    let running = match exec::start(plan.clone(), stop, HashMap::new()) {
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
    }
    match report.failure {
        Some(_) => ExitCode::FAILURE,
        None => ExitCode::SUCCESS,
    }
}

enum Event {
    Finished,
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
                smol::future::or(finished, smol::future::or(signal, reload)).await
            };
            match event {
                Event::Finished => return Ok(()),
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
                    if c.running.has_checkpoints() {
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
