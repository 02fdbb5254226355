//! `POST /rebalance` on the local API and `eddy rebalance`: moves the
//! run's bins live to an assignment (default: even over every worker of
//! the run, all members' in a distributed run). The node that gets the
//! request coordinates (see `exec::migration_mesh`); a request while a
//! migration runs anywhere in the cluster is answered 409.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::http::{Response, Router};
use crate::exec::Reporter;

/// The running pipeline, while there is one.
#[derive(Default)]
pub(crate) struct RebalanceSource {
    run: Mutex<Option<Reporter>>,
}

impl RebalanceSource {
    pub(crate) fn attach(&self, reporter: Option<Reporter>) {
        *self.run.lock().unwrap_or_else(|e| e.into_inner()) = reporter;
    }
}

/// The body of `POST /rebalance` (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    /// `all_at_once`, `fluid` or `batched`; default `[migration] strategy`.
    strategy: Option<String>,
    /// The global worker of every bin; default even.
    assignment: Option<Vec<u32>>,
}

/// The answer: what the migration did.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Outcome {
    pub(crate) epoch: u64,
    pub(crate) strategy: String,
    pub(crate) steps: u32,
    pub(crate) bins: u32,
    pub(crate) bytes: u64,
    pub(crate) duration_ms: f64,
}

pub(crate) fn routes(router: Router, source: Arc<RebalanceSource>) -> Router {
    router.route("POST", "/rebalance", move |r| {
        let source = source.clone();
        Box::pin(async move {
            let req: Request = if r.body.iter().all(u8::is_ascii_whitespace) {
                Request::default()
            } else {
                match serde_json::from_slice(&r.body) {
                    Ok(req) => req,
                    Err(e) => {
                        return Response::text(
                            400,
                            &format!(
                                "the body is not {{\"strategy\": \"...\", \"assignment\": [worker per bin]}}: {e}"
                            ),
                        );
                    }
                }
            };
            let Some(run) = source
                .run
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            else {
                return Response::text(503, "no pipeline is running");
            };
            // The configured strategy keeps its `gap` / `max_bins_per_step`.
            let configured = run.plan().node.migration.strategy;
            let strategy = match &req.strategy {
                Some(name) if name == configured.name() => configured,
                Some(name) => match super::migration_api::strategy(name) {
                    Ok(s) => s,
                    Err(e) => return Response::text(400, &e),
                },
                None => configured,
            };
            let shared = run.shared();
            let result =
                smol::unblock(move || shared.rebalance(req.assignment, strategy)).await;
            match result {
                Ok(r) => Response::json(
                    200,
                    &Outcome {
                        epoch: r.epoch,
                        strategy: strategy.name().to_string(),
                        steps: r.steps,
                        bins: r.bins,
                        bytes: r.bytes,
                        duration_ms: r.duration.as_secs_f64() * 1e3,
                    },
                ),
                Err(crate::exec::RebalanceError::Busy(m)) => Response::text(409, &m),
                Err(crate::exec::RebalanceError::Failed(m)) => Response::text(422, &m),
            }
        })
    })
}

/// `eddy rebalance [--strategy S] [--api ADDR]`: asks the node to move its
/// run's bins to an even assignment and prints what moved.
pub(crate) fn rebalance(api: &str, strategy: Option<&str>) -> ExitCode {
    match post(api, strategy) {
        Ok(o) => {
            println!(
                "rebalanced to epoch {}: {} bins ({} bytes) in {} steps ({}), {:.1} ms",
                o.epoch, o.bins, o.bytes, o.steps, o.strategy, o.duration_ms
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("eddy rebalance: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How long a migration may take before the CLI gives up waiting (the
/// node's own step timeout is 120 s).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);

fn post(api: &str, strategy: Option<&str>) -> Result<Outcome, String> {
    let addrs = super::status::parse_api_target(api)?;
    let body = match strategy {
        Some(s) => serde_json::json!({ "strategy": s }).to_string(),
        None => String::new(),
    };
    let (code, answer) =
        super::status::request(&addrs, api, "POST", "/rebalance", &body, ANSWER_TIMEOUT)?;
    if code != 200 {
        return Err(format!(
            "{api} answered {code}: {}",
            String::from_utf8_lossy(&answer).trim()
        ));
    }
    serde_json::from_slice(&answer)
        .map_err(|e| format!("{api}: an answer that is not a report ({e})"))
}
