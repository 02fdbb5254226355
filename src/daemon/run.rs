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
use super::load::load;
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
    let (plan, d) = match load(file) {
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
    let services = match Services::start(&plan.node, file) {
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
    let stop = Arc::new(AtomicBool::new(false));
    let running = match exec::start_with(Arc::new(plan), stop, HashMap::new(), cluster) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("{e}");
            services.shutdown_blocking();
            return ExitCode::FAILURE;
        }
    };
    services.attach(running.reporter(), &described);
    let running = match wait_or_signal(running, &services, file) {
        Ok(r) => r,
        Err(code) => {
            services.shutdown_blocking();
            return code;
        }
    };
    let report = running.wait();
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

/// SIGHUP: checks the pipeline file again. Live reload is not built yet,
/// so the running pipeline always goes on; the log says whether the file
/// on disk is valid (and a restart would apply it) or what is wrong.
fn check_reload(file: &Path) {
    match load(file) {
        Ok(_) => tracing::warn!(
            "received SIGHUP: {} is valid, but live reload is not supported yet; the running pipeline goes on. Restart eddy to apply it (open windows are kept by the final checkpoint)",
            file.display()
        ),
        Err(d) => {
            for line in d.render().lines() {
                tracing::error!("{line}");
            }
            tracing::error!(
                "received SIGHUP: {} has {} error(s); the running pipeline goes on unchanged",
                file.display(),
                d.errors.len()
            );
        }
    }
}

/// Waits until the run ends by itself, or a signal asks it to stop (then it
/// drains). A second signal exits at once; SIGHUP re-checks the file.
fn wait_or_signal(
    mut running: exec::Running,
    services: &Services,
    file: &Path,
) -> Result<exec::Running, ExitCode> {
    smol::block_on(async {
        let mut signals = match Signals::new([Signal::Int, Signal::Term, Signal::Hup]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot listen for signals ({e}); Ctrl-C will not drain");
                while !running.is_finished() {
                    smol::Timer::after(Duration::from_millis(20)).await;
                }
                return Ok(running);
            }
        };
        let mut stopping = false;
        loop {
            let finished = async {
                while !running.is_finished() {
                    smol::Timer::after(Duration::from_millis(20)).await;
                }
                None
            };
            let signal = async { signals.next().await };
            match smol::future::or(finished, signal).await {
                None => return Ok(running),
                Some(Ok(Signal::Hup)) => check_reload(file),
                Some(Ok(sig)) if !stopping && running.has_checkpoints() => {
                    // Open windows stay open: their state goes into a final
                    // checkpoint and the next run continues them.
                    tracing::info!(
                        "received {sig:?}; taking a final checkpoint (send it again to exit at once)"
                    );
                    stopping = true;
                    services.set_stopping();
                    match running.checkpoint_and_halt(Duration::from_secs(30)) {
                        Ok(id) => {
                            tracing::info!(checkpoint = id, "final checkpoint committed; stopping")
                        }
                        Err(e) => tracing::error!("the final checkpoint failed: {e}"),
                    }
                }
                Some(Ok(sig)) if !stopping => {
                    tracing::info!(
                        "received {sig:?}; stopping sources and draining (send it again to exit at once)"
                    );
                    stopping = true;
                    services.set_stopping();
                    running.stop();
                }
                Some(Ok(sig)) => {
                    tracing::warn!("received {sig:?} again; exiting without draining");
                    return Err(ExitCode::from(130));
                }
                Some(Err(e)) => tracing::warn!("signal error: {e}"),
            }
        }
    })
}
