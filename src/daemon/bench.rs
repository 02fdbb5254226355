//! `eddy bench`: built-in workloads through the real engine.

use std::process::ExitCode;

use super::api;
use super::cli::Workload;

pub(crate) fn bench(workload: Workload) -> ExitCode {
    match workload {
        Workload::Wcount {
            events,
            workers,
            json,
        } => {
            let report = match api::wcount(events, workers) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("eddy bench wcount: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let verified = report.verify();
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "events": report.events,
                        "seconds": report.seconds,
                        "events_per_s": report.events_per_s,
                        "rows": report.rows,
                        "count_total": report.count_total,
                        "sum_total": report.sum_total,
                    })
                );
            } else {
                println!(
                    "wcount: {} events, {} worker{}: {:.3} s, {:.2} M events/s; rows {}, count_total {}, sum_total {} ({})",
                    report.events,
                    workers,
                    if workers == 1 { "" } else { "s" },
                    report.seconds,
                    report.events_per_s / 1e6,
                    report.rows,
                    report.count_total,
                    report.sum_total,
                    if verified.is_ok() {
                        "verified"
                    } else {
                        "WRONG"
                    }
                );
            }
            match verified {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("eddy bench wcount: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
