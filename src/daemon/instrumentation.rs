//! `eddy bench instrumentation`: what the intrinsic counters cost. Runs
//! `wcount` alternately with the counters off and on in one process (so
//! both see the same machine, warm caches and the same noise), and
//! compares the medians.

use std::process::ExitCode;

use super::api;
use crate::exec::metrics::set_instrumented;

fn median(mut v: Vec<f64>) -> f64 {
    crate::cold_sort::sort_by(&mut v, f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub(crate) fn bench(events: u64, workers: usize, runs: u32, json: bool) -> ExitCode {
    let runs = runs.max(1);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    // One unmeasured run first: page faults, allocator growth, CPU clocks.
    set_instrumented(true);
    if let Err(e) = api::wcount(events.min(1_000_000), workers) {
        eprintln!("eddy bench instrumentation: {e}");
        return ExitCode::FAILURE;
    }
    for round in 0..runs {
        // Alternate which goes first, so a drift favours neither.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for instrumented in order {
            set_instrumented(instrumented);
            let r = match api::wcount(events, workers) {
                Ok(r) => r,
                Err(e) => {
                    set_instrumented(true);
                    eprintln!("eddy bench instrumentation: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if let Err(e) = r.verify() {
                set_instrumented(true);
                eprintln!("eddy bench instrumentation: {e}");
                return ExitCode::FAILURE;
            }
            if instrumented {
                on.push(r.events_per_s)
            } else {
                off.push(r.events_per_s)
            }
        }
    }
    set_instrumented(true);
    let (m_on, m_off) = (median(on.clone()), median(off.clone()));
    let cost = if m_off > 0.0 {
        (1.0 - m_on / m_off) * 100.0
    } else {
        0.0
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "workload": "wcount",
                "events": events,
                "workers": workers,
                "runs": runs,
                "on_events_per_s": m_on,
                "off_events_per_s": m_off,
                "cost_percent": cost,
                "on": on,
                "off": off,
            })
        );
    } else {
        println!(
            "instrumentation (wcount, {events} events, {workers} worker{}, median of {runs} alternating runs): \
             counters on {:.2} M events/s, off {:.2} M events/s: cost {cost:.1} %",
            if workers == 1 { "" } else { "s" },
            m_on / 1e6,
            m_off / 1e6,
        );
    }
    ExitCode::SUCCESS
}
