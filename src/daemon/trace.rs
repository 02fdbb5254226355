//! `GET /trace` and `POST /trace` on the local API, and `eddy trace`: the
//! live view of critical participation per window.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::http::{Response, Router};
use super::status::{parse_api_target, request};
use crate::trace::{self, Row, WindowReport};

/// What `GET /trace` answers.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct TraceState {
    pub(crate) enabled: bool,
    pub(crate) window_ms: u64,
    /// The last analysed windows, oldest first.
    #[serde(default)]
    pub(crate) windows: Vec<WindowReport>,
}

/// The body of `POST /trace`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Switch {
    enabled: bool,
    /// A duration such as "1s" or "250ms".
    window: Option<String>,
}

fn state(with_windows: bool) -> TraceState {
    TraceState {
        enabled: trace::on(),
        window_ms: trace::window_ms(),
        windows: if with_windows {
            trace::windows()
        } else {
            Vec::new()
        },
    }
}

/// Adds `GET /trace` and `POST /trace`.
pub(crate) fn routes(router: Router) -> Router {
    router
        .get("/trace", |_| Response::json(200, &state(true)))
        .route("POST", "/trace", |req| {
            let answer = match serde_json::from_slice::<Switch>(&req.body) {
                Err(e) => Response::text(
                    400,
                    &format!(
                        "POST /trace: the body must be {{\"enabled\": true|false}} with an optional \"window\": \"1s\" ({e})"
                    ),
                ),
                Ok(s) => match s.window.as_deref().map(window_ms).transpose() {
                    Err(e) => Response::text(400, &format!("POST /trace: window: {e}")),
                    Ok(w) => {
                        if let Some(w) = w {
                            trace::set_window_ms(w);
                        }
                        trace::peers::switch(s.enabled);
                        tracing::info!(
                            enabled = s.enabled,
                            window_ms = trace::window_ms(),
                            "tracing switched through the local API"
                        );
                        Response::json(200, &state(false))
                    }
                },
            };
            Box::pin(async move { answer })
        })
}

/// A window length as `[trace] window` accepts it.
fn window_ms(s: &str) -> Result<u64, String> {
    let d = crate::config::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}); write e.g. \"1s\" or \"250ms\""))?;
    let ms = d.as_millis() as u64;
    if !(10..=60_000).contains(&ms) {
        return Err(format!("`{s}`: a window is between 10ms and 60s"));
    }
    Ok(ms)
}

/// Options of `eddy trace`.
pub(crate) struct TraceArgs {
    pub(crate) api: String,
    pub(crate) json: bool,
    pub(crate) window: Option<String>,
    pub(crate) top: usize,
    pub(crate) count: Option<usize>,
    pub(crate) off: bool,
}

pub(crate) fn trace(args: TraceArgs) -> ExitCode {
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("eddy trace: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &TraceArgs) -> Result<(), String> {
    let addrs = parse_api_target(&args.api)?;
    if args.off {
        post(&addrs, &args.api, r#"{"enabled": false}"#)?;
        eprintln!("tracing is off on {}", args.api);
        return Ok(());
    }
    let current = fetch(&addrs, &args.api)?;
    let wanted = args.window.as_deref().map(window_ms).transpose()?;
    if !current.enabled || wanted.is_some_and(|w| w != current.window_ms) {
        let body = match &args.window {
            Some(w) => serde_json::json!({ "enabled": true, "window": w }),
            None => serde_json::json!({ "enabled": true }),
        };
        post(&addrs, &args.api, &body.to_string())?;
        if !current.enabled {
            eprintln!(
                "tracing was off on {}; it is on now (`eddy trace --off` turns it off)",
                args.api
            );
        }
    }
    let mut last = current.windows.last().map_or(0, |w| w.start_unix_ms);
    let mut shown = 0;
    let mut quiet_since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let state = fetch(&addrs, &args.api)?;
        if !state.enabled {
            return Err(format!("tracing was turned off on {}", args.api));
        }
        let seen = last;
        for w in state.windows.iter().filter(|w| w.start_unix_ms > seen) {
            last = w.start_unix_ms;
            quiet_since = Instant::now();
            if args.json {
                println!("{}", serde_json::to_string(w).map_err(|e| e.to_string())?);
            } else {
                print!("{}", table(w, args.top));
            }
            let _ = std::io::stdout().flush();
            shown += 1;
            if args.count.is_some_and(|c| shown >= c) {
                return Ok(());
            }
        }
        let patience = Duration::from_millis(state.window_ms * 3 + 2000);
        if quiet_since.elapsed() > patience {
            eprintln!(
                "eddy trace: no window from {} for {:.0?}; is a pipeline running?",
                args.api,
                quiet_since.elapsed()
            );
            quiet_since = Instant::now();
        }
    }
}

/// How long the CLI waits for the node to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

fn fetch(addrs: &[SocketAddr], api: &str) -> Result<TraceState, String> {
    let (code, body) = request(addrs, api, "GET", "/trace", "", ANSWER_TIMEOUT)?;
    if code != 200 {
        return Err(format!(
            "{api} answered {code} to GET /trace: {}; is it an eddy with tracing (0.x with `eddy trace`)?",
            String::from_utf8_lossy(&body).trim()
        ));
    }
    serde_json::from_slice(&body)
        .map_err(|e| format!("{api} did not answer GET /trace with a trace ({e})"))
}

fn post(addrs: &[SocketAddr], api: &str, body: &str) -> Result<(), String> {
    let (code, answer) = request(addrs, api, "POST", "/trace", body, ANSWER_TIMEOUT)?;
    if code != 200 {
        return Err(format!(
            "{api} answered {code} to POST /trace: {}",
            String::from_utf8_lossy(&answer).trim()
        ));
    }
    Ok(())
}

/// One window as a person reads it: the top rows of each ranking, CP
/// beside the plain share of time.
pub(crate) fn table(w: &WindowReport, top: usize) -> String {
    let secs = w.start_unix_ms / 1000;
    let mut out = format!(
        "window {:02}:{:02}:{:02}.{:03} UTC, {} ms: {} events on {} lanes{}{}\n",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60,
        w.start_unix_ms % 1000,
        w.window_ms,
        w.events,
        w.lanes,
        if w.dropped > 0 {
            format!(", {} dropped (buffers full)", w.dropped)
        } else {
            String::new()
        },
        match (w.paths.as_str(), w.paths_log10) {
            ("spanning", Some(p)) => format!(", 10^{p:.1} critical paths"),
            ("busy", Some(p)) => format!(
                ", 10^{p:.1} paths between waits (no path spans the window: the lanes were idle at once)"
            ),
            _ => ", no critical path (everything waited)".into(),
        }
    );
    let mut section = |title: &str, rows: &[Row]| {
        if rows.is_empty() {
            return;
        }
        let width = rows
            .iter()
            .take(top)
            .map(|r| r.name.len())
            .max()
            .unwrap_or(0)
            .max(title.len());
        out.push_str(&format!("  {title:<width$}  {:>6}  {:>6}\n", "CP", "TIME"));
        for r in rows.iter().take(top) {
            out.push_str(&format!(
                "  {:<width$}  {:>5.1}%  {:>6}\n",
                r.name,
                r.cp * 100.0,
                r.share.map_or("-".into(), |s| format!("{:.1}%", s * 100.0)),
            ));
        }
    };
    section("ACTIVITY", &w.activities);
    section("OPERATOR", &w.operators);
    section("WORKER", &w.workers);
    section("PEER", &w.peers);
    out.push('\n');
    out
}
