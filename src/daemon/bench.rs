//! `eddy bench`: built-in workloads through the real engine.

use std::process::ExitCode;

use super::api;
use super::cli::Workload;

pub(crate) fn bench(workload: Workload) -> ExitCode {
    match workload {
        Workload::Instrumentation {
            events,
            workers,
            runs,
            json,
        } => super::instrumentation::bench(events, workers, runs, json),
        Workload::Migration {
            keys,
            bins,
            plot,
            json,
        } => super::bench_migration::migration(json, keys, bins, &plot),
        Workload::Bins { events, json } => super::bench_migration::bins(events, json),
        Workload::Trace {
            seconds,
            density,
            json,
        } => super::bench_trace::bench(seconds, density, json),
        Workload::Tune {
            day,
            peak,
            goal_ms,
            keys,
            window,
            policies,
            json,
        } => super::bench_tune::tune(
            super::bench_tune::Workload {
                day_s: day,
                peak,
                goal_ms,
                keys,
                window_s: window,
            },
            &policies,
            json,
        ),
        Workload::Scaling { seed, json, log } => {
            scaling(seed, json, log);
            ExitCode::SUCCESS
        }
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

/// `eddy bench scaling`: the simulator's table.
fn scaling(seed: u64, json: bool, log: bool) {
    let rows = crate::control::sim::table(seed);
    if json {
        let scenarios: Vec<serde_json::Value> = rows
            .iter()
            .map(|o| {
                serde_json::json!({
                    "scenario": o.scenario,
                    "policy": o.policy.name(),
                    "decisions_to_converge": o.decisions_to_converge,
                    "oscillations": o.oscillations,
                    "over_provisioned_s": o.over_provisioned_s,
                    "under_provisioned_s": o.under_provisioned_s,
                })
            })
            .collect();
        println!("{}", serde_json::json!({ "scenarios": scenarios }));
    } else {
        println!(
            "| scenario | policy | decisions to converge | oscillations | over-provisioned s | under-provisioned s |"
        );
        println!("|---|---|---|---|---|---|");
        for o in &rows {
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                o.scenario,
                o.policy.name(),
                o.decisions_to_converge
                    .map_or_else(|| "never".to_string(), |d| d.to_string()),
                o.oscillations,
                o.over_provisioned_s,
                o.under_provisioned_s
            );
        }
    }
    if log {
        for o in &rows {
            for line in &o.log {
                eprintln!("{}: {line}", o.scenario);
            }
        }
    }
}
