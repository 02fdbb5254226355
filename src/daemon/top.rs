//! `eddy top [--api ADDR] [--once]`: a live view of the cluster in the
//! manner of `vector top`, read from a node's `GET /cluster`: per node its
//! workers, bins, memory and the age of its summary; per node and operator
//! the rates, useful-time and backpressure shares and the backlog; the last
//! decision and why. Redraws in place (ANSI) every interval; `--once`
//! prints one frame without escape codes, for scripts and tests.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use super::gossip::ClusterDoc;
use super::peers::get;
use super::status::parse_api_target;

pub(crate) fn top(api: &str, once: bool, interval: Duration) -> ExitCode {
    loop {
        let frame = match fetch(api) {
            Ok(doc) => frame(api, &doc),
            Err(e) if once => {
                eprintln!("eddy top: {e}");
                return ExitCode::FAILURE;
            }
            Err(e) => format!("eddy top: {e}\n(retrying every {interval:?}; Ctrl-C quits)\n"),
        };
        let mut out = std::io::stdout().lock();
        let written = if once {
            out.write_all(frame.as_bytes())
        } else {
            // Home, the frame with each line cleared to its end, then clear
            // below: redraws without flicker.
            let body = frame.replace('\n', "\x1b[K\n");
            write!(out, "\x1b[H{body}\x1b[J")
        };
        if written.and_then(|()| out.flush()).is_err() {
            return ExitCode::SUCCESS; // the terminal or pipe went away
        }
        if once {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(interval);
    }
}

/// `GET /cluster` from the API at `api`.
pub(crate) fn fetch(api: &str) -> Result<ClusterDoc, String> {
    let addrs = parse_api_target(api)?;
    let (code, body) = get(&addrs, "/cluster")?;
    if code != 200 {
        return Err(format!(
            "{api} answered {code} to GET /cluster: {}",
            String::from_utf8_lossy(&body).trim()
        ));
    }
    serde_json::from_slice(&body).map_err(|e| {
        format!("{api} did not answer with an eddy cluster view ({e}); is it eddy's API?")
    })
}

fn rate(x: f32) -> String {
    let x = f64::from(x);
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn bytes(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / f64::from(1u32 << 20))
}

/// Lines up rows of cells under a header.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let head: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for r in std::iter::once(&head).chain(rows) {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, &w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Bins shown one by one, hottest first.
const HOT_BINS_SHOWN: usize = 5;

/// The hottest bins as the planner sees them, with their share of the
/// load: skew shows as one bin far above the others. Empty before the
/// planner has a view or while nothing was measured.
fn hot_bins(doc: &ClusterDoc) -> String {
    let total: f64 = doc.bins.iter().map(|b| b.records_per_s).sum();
    if total <= 0.0 {
        return String::new();
    }
    let mut hot: Vec<_> = doc.bins.iter().filter(|b| b.records_per_s > 0.0).collect();
    crate::cold_sort::sort_by(&mut hot, |a, b| {
        b.records_per_s
            .total_cmp(&a.records_per_s)
            .then(a.bin.cmp(&b.bin))
    });
    let rows: Vec<Vec<String>> = hot
        .iter()
        .take(HOT_BINS_SHOWN)
        .map(|b| {
            vec![
                b.bin.to_string(),
                b.owner.clone(),
                rate(b.records_per_s as f32),
                format!("{:.1}", b.records_per_s / total * 100.0),
                format!("{:.1} KiB", b.state_bytes as f64 / 1024.0),
            ]
        })
        .collect();
    let mut out = table(&["BIN", "OWNER", "IN/S", "LOAD%", "STATE"], &rows);
    out.push_str(&format!(
        "(hottest {} of {} bins, {} records/s in all)\n\n",
        rows.len(),
        doc.bins.len(),
        rate(total as f32)
    ));
    out
}

/// One screen.
pub(crate) fn frame(api: &str, doc: &ClusterDoc) -> String {
    let alive = doc.members.iter().filter(|m| m.state == "alive").count();
    let mut out = format!(
        "eddy top — {api} (node {}): {} members, {alive} alive; decisions announced by {}\n\n",
        doc.node,
        doc.members.len(),
        doc.announcer.as_deref().unwrap_or("-")
    );
    let nodes: Vec<Vec<String>> = doc
        .members
        .iter()
        .map(|m| {
            let s = m.summary.as_ref();
            vec![
                if m.local {
                    format!("{} *", m.name)
                } else {
                    m.name.clone()
                },
                m.state.clone(),
                m.age_ms
                    .map_or("-".into(), |a| format!("{:.1} s", a as f64 / 1000.0)),
                s.map_or("-".into(), |s| s.workers.to_string()),
                s.map_or("-".into(), |s| format!("{}/{}", s.bins_held, s.bins_total)),
                s.map_or("-".into(), |s| s.cores.to_string()),
                s.map_or("-".into(), |s| bytes(s.rss_bytes)),
            ]
        })
        .collect();
    out.push_str(&table(
        &["NODE", "STATE", "AGE", "WORKERS", "BINS", "CORES", "MEMORY"],
        &nodes,
    ));
    out.push('\n');
    let mut ops = Vec::new();
    let mut notes = String::new();
    for m in &doc.members {
        let Some(s) = &m.summary else { continue };
        for o in &s.operators {
            ops.push(vec![
                m.name.clone(),
                o.id.clone(),
                rate(o.observed_in_per_s),
                rate(o.observed_out_per_s),
                rate(o.true_processing_per_s),
                format!("{:.1}", f64::from(o.useful_permille) / 10.0),
                format!("{:.1}", f64::from(o.backpressure_permille) / 10.0),
                o.backlog.to_string(),
            ]);
        }
        if s.truncated > 0 {
            notes.push_str(&format!(
                "{}: {} more operators did not fit its gossip payload\n",
                m.name, s.truncated
            ));
        }
    }
    out.push_str(&table(
        &[
            "NODE",
            "COMPONENT",
            "IN/S",
            "OUT/S",
            "TRUE/S",
            "USEFUL%",
            "BACKPR%",
            "BACKLOG",
        ],
        &ops,
    ));
    out.push_str(&notes);
    out.push('\n');
    out.push_str(&hot_bins(doc));
    match &doc.decision {
        Some(d) => {
            let epochs = match d.next_epoch {
                Some(e) => format!("epoch {} → {e}", d.epoch),
                None => format!("epoch {}", d.epoch),
            };
            out.push_str(&format!(
                "decision: {} ({epochs}), {} → {} workers, announced by {}; not executed (waits for live migration)\nwhy: {}\n",
                d.action,
                d.current_workers,
                d.proposed_workers,
                d.announcer.as_deref().unwrap_or("-"),
                d.reason
            ));
            if let Some(r) = doc.decisions.last().filter(|r| r.at_ms != d.at_ms) {
                out.push_str(&format!(
                    "last reconfiguring decision: {} ({} → {} workers): {}\n",
                    r.action, r.current_workers, r.proposed_workers, r.reason
                ));
            }
        }
        None => out.push_str(&format!(
            "decision: none yet ({})\n",
            doc.planner.as_deref().unwrap_or("no planner")
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::view::{MemberDoc, NodeSummary, OperatorSummary};

    #[test]
    fn a_frame_lines_up_nodes_operators_and_the_decision() {
        let summary = NodeSummary {
            workers: 2,
            pipeline: 1,
            checkpoints: Vec::new(),
            run: 0,
            cores: 4,
            rss_bytes: 30 << 20,
            bins_held: 128,
            bins_total: 256,
            epoch: 1,
            interval_ms: 1000,
            operators: vec![OperatorSummary {
                id: "keep".into(),
                instances: 2,
                true_processing_per_s: 2.5e6,
                true_output_per_s: 1e6,
                observed_in_per_s: 20_000.0,
                observed_out_per_s: 8000.0,
                backlog: 42,
                useful_permille: 123,
                backpressure_permille: 5,
                offered_per_s: None,
            }],
            truncated: 1,
            bins: Default::default(),
            idle_cores: 0.0,
        };
        let member = |name: &str, local: bool, state: &str, s: Option<NodeSummary>| MemberDoc {
            name: name.into(),
            id: "0".repeat(16),
            addr: None,
            state: state.into(),
            local,
            age_ms: s.as_ref().map(|_| 400),
            summary: s,
            error: None,
        };
        let mut doc = ClusterDoc {
            node: "a".into(),
            announcer: Some("a".into()),
            publish_interval_ms: 1000,
            decision_interval_ms: 5000,
            members: vec![
                member("a", true, "alive", Some(summary)),
                member("b", false, "down", None),
            ],
            decision: None,
            decisions: Vec::new(),
            planner: Some("waiting for the first decision interval".into()),
            bins: Vec::new(),
        };
        let f = frame("127.0.0.1:7401", &doc);
        assert!(
            f.starts_with(
                "eddy top — 127.0.0.1:7401 (node a): 2 members, 1 alive; decisions announced by a\n"
            ),
            "{f}"
        );
        assert!(
            f.contains("a *   alive  0.4 s  2        128/256  4      30 MiB"),
            "{f}"
        );
        assert!(f.contains("b     down   -      -"), "{f}");
        assert!(
            f.contains("a     keep       20.0k  8000   2.50M   12.3     0.5      42"),
            "{f}"
        );
        assert!(
            f.contains("\na: 1 more operators did not fit its gossip payload\n"),
            "{f}"
        );
        assert!(
            f.ends_with("decision: none yet (waiting for the first decision interval)\n"),
            "{f}"
        );
        doc.decision = Some(crate::control::announcer::DecisionRecord {
            at_ms: 1,
            announcer: Some("a".into()),
            announced_here: true,
            action: "scale_up".into(),
            epoch: 1,
            next_epoch: Some(2),
            workers: Default::default(),
            bins: Default::default(),
            current_workers: 2,
            proposed_workers: 3,
            workers_needed: Some(2.5),
            current_capacity: 0.8,
            moves: 10,
            reason: "DS2 needs more".into(),
            executed: false,
            execution: None,
            target: None,
        });
        let f = frame("x", &doc);
        assert!(
            f.contains(
                "decision: scale_up (epoch 1 → 2), 2 → 3 workers, announced by a; not executed (waits for live migration)\nwhy: DS2 needs more\n"
            ),
            "{f}"
        );
    }

    #[test]
    fn a_frame_shows_the_hottest_bins_and_their_share() {
        let bin = |bin: u32, owner: &str, records_per_s: f64| super::super::gossip::BinDoc {
            bin,
            owner: owner.into(),
            records_per_s,
            state_bytes: 2048,
        };
        let mut doc = ClusterDoc {
            node: "a".into(),
            announcer: None,
            publish_interval_ms: 1000,
            decision_interval_ms: 5000,
            members: Vec::new(),
            decision: None,
            decisions: Vec::new(),
            planner: None,
            bins: (0..8).map(|b| bin(b, "a", 10.0)).collect(),
        };
        doc.bins[6] = bin(6, "b", 130.0);
        doc.bins[2].records_per_s = 0.0;
        let f = frame("x", &doc);
        // 130 of 130 + 6 × 10 records/s; bin 2 (idle) is not listed.
        assert!(f.contains("BIN  OWNER  IN/S  LOAD%  STATE\n6    b      130   68.4   2.0 KiB\n0    a      10    5.3"), "{f}");
        assert!(
            f.contains("(hottest 5 of 8 bins, 190 records/s in all)"),
            "{f}"
        );
        // Nothing measured yet: no table.
        doc.bins.iter_mut().for_each(|b| b.records_per_s = 0.0);
        assert!(!frame("x", &doc).contains("LOAD%"));
    }
}
