//! Cluster-wide checkpoints of a distributed run, with real processes:
//! three `eddy run` members (127.0.0.2..=127.0.0.4, mutual TLS from `eddy
//! cluster`, each its own `[node] data_dir`) run the deterministic `wcount`
//! generator at a fixed rate into a keyed tumbling-window count, with
//! `[checkpoint]` on (every 300 ms) and an exactly-once file sink per
//! member. The checkpoint leader (node-0, the first by name) logs
//! `checkpoint N committed on all members` after each cluster-wide commit.
//!
//! node-1 is SIGKILLed mid-run (in the other tests, the source or the
//! destination of a slow fluid move while it runs); the others fail the
//! run and exit non-zero. All three
//! are then started again with the same configs, data dirs and sink files:
//! they agree on the newest checkpoint every member has (`restoring cluster
//! checkpoint N`), replay the input from it and finish. The union of the
//! three sink files must then be exactly the output of one node over the
//! whole input: a row lost, written twice, or a window fired with a count
//! off by one record shows.

mod common;

use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use common::*;

const NODES: usize = 3;
const WORKERS: usize = 2;
const BINS: usize = 64;
/// 10 s of input at `RATE` (the generator's event time advances 250 ms a
/// second: a 100 ms window fires every 0.4 s).
const EVENTS: u64 = 250_000;
const RATE: u64 = 25_000;
/// How long the survivors may take to notice the lost member and exit.
const EXIT_LIMIT: Duration = Duration::from_secs(60);
/// How long the restarted run may take (about 10 s of input at most).
const RESTART_LIMIT: Duration = Duration::from_secs(60);
/// The member killed: not the checkpoint leader.
const VICTIM: usize = 1;
const LEADER_LOG: &str = "node-0.log";
const COMMITTED: &str = "committed on all members";
const RESTORING: &str = "restoring cluster checkpoint ";

/// One node, the whole input, no checkpoints: what the members must give
/// together.
fn reference() -> Vec<String> {
    let want = reference_rows(BINS, |head, out| {
        keyed_count_pipeline(head, EVENTS, None, out)
    });
    assert!(want.len() > 10_000, "{} window rows", want.len());
    want
}

/// A member's pipeline after its `[node]`, `[mesh]` and `[api]`:
/// checkpoints every 300 ms, `extra` sections, the keyed count, and an
/// exactly-once file sink writing `out`.
fn body(extra: &str, out: &Path) -> String {
    let head = format!("[checkpoint]\ninterval = \"300ms\"\n{extra}");
    let mut text = keyed_count_pipeline(&head, EVENTS, Some(RATE), out);
    // `[sinks.rows]` is the last table of the pipeline.
    assert!(
        text.trim_end()
            .ends_with(&format!("path = \"{}\"", out.display())),
        "the sink is not last:\n{text}"
    );
    text.push_str("delivery = \"exactly_once\"\n");
    text
}

/// The checkpoint ids in the `checkpoint N committed on all members` lines
/// of `log`.
fn committed_ids(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.find(COMMITTED).map(|at| &l[..at]))
        .filter_map(|head| {
            let id = head.trim_end().rsplit(' ').next()?;
            id.trim_start_matches('#').parse().ok()
        })
        .collect()
}

/// The ids in the `restoring cluster checkpoint N` lines of `log`.
fn restored_ids(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.split(RESTORING).nth(1))
        .filter_map(|rest| {
            let rest = rest.trim_start_matches('#');
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .collect()
}

/// Whether every row of `part` is in `whole`, as many times at least.
fn is_sub_multiset(part: &[String], whole: &[String]) -> bool {
    use std::collections::BTreeMap;
    let mut n: BTreeMap<&String, i64> = BTreeMap::new();
    for w in whole {
        *n.entry(w).or_default() += 1;
    }
    part.iter().all(|p| {
        let c = n.entry(p).or_default();
        *c -= 1;
        *c >= 0
    })
}

/// The three members, through a crash and a restart. Member i writes
/// `rows-node-i.jsonl` and logs to `node-i.log`; at the restart the first
/// run's logs move to `node-i-run1.log`.
struct Run {
    s: Scratch,
    names: Vec<String>,
    nodes: Vec<Running>,
    api: Vec<u16>,
    env: fn(usize) -> Vec<(&'static str, String)>,
}

impl Run {
    /// Starts the members with `extra` sections in their pipeline and
    /// `env(i)` in member i's environment; returns once each has started
    /// its run.
    fn start(extra: &str, env: fn(usize) -> Vec<(&'static str, String)>) -> Run {
        let s = Scratch::new();
        let m = Members::start_with_env(
            &s,
            NODES,
            WORKERS,
            BINS,
            |i| body(extra, &s.path(&format!("rows-node-{i}.jsonl"))),
            env,
        );
        Run {
            s,
            names: m.names,
            nodes: m.nodes,
            api: m.api,
            env,
        }
    }

    /// Every log of both runs, for a failing assertion.
    fn logs(&self) -> String {
        let mut names: Vec<String> = self.names.iter().map(|n| format!("{n}-run1")).collect();
        names.extend(self.names.iter().cloned());
        member_logs(&self.s, &names)
    }

    /// The rows the members' sink files hold now: only complete lines that
    /// parse (a member killed mid-write may leave a torn last line, which
    /// its restart cuts back).
    fn rows_so_far(&self) -> Vec<String> {
        let mut rows = Vec::new();
        for n in &self.names {
            let text = self.s.read(&format!("rows-{n}.jsonl"));
            let complete = &text[..text.rfind('\n').map_or(0, |e| e + 1)];
            rows.extend(
                complete
                    .lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()),
            );
        }
        multiset(&rows)
    }

    /// The rows the sink files hold after the crash: only final windows
    /// (rows one node over the whole input gives), none twice.
    fn rows_at_crash(&self, want: &[String]) -> Vec<String> {
        let rows = self.rows_so_far();
        assert!(
            is_sub_multiset(&rows, want),
            "the sink files hold rows one node does not give: {}\n{}",
            row_diff(&rows, want),
            self.logs()
        );
        rows
    }

    /// Waits until the leader has logged `commits` cluster-wide commits and
    /// the sink files hold committed rows; the highest id committed.
    fn wait_for_commits(&self, commits: usize) -> u64 {
        let ids = wait_until(
            &format!("{commits} cluster-wide checkpoint commits in {LEADER_LOG}"),
            Duration::from_secs(30),
            || {
                let ids = committed_ids(&self.s.read(LEADER_LOG));
                (ids.len() >= commits).then_some(ids)
            },
            || self.logs(),
        );
        wait_until(
            "committed rows in the exactly-once sink files",
            Duration::from_secs(30),
            || (!self.rows_so_far().is_empty()).then_some(()),
            || self.logs(),
        );
        eprintln!("checkpoints committed on all members: {ids:?}");
        ids.into_iter().max().expect("ids")
    }

    /// The newest checkpoint the leader's log (of the first run, before
    /// the restart) says was committed on all members.
    fn newest_committed(&self) -> u64 {
        committed_ids(&self.s.read(LEADER_LOG))
            .into_iter()
            .max()
            .unwrap_or_else(|| panic!("no commit in {LEADER_LOG}\n{}", self.logs()))
    }

    /// SIGKILLs member `i` and reaps it.
    fn kill(&mut self, i: usize) {
        let mut child = self.nodes[i].0.take().expect("running");
        child.kill().expect("SIGKILL");
        let _ = child.wait();
    }

    /// Waits up to `limit` for member `i` to exit; its status.
    fn wait_exit(&mut self, i: usize, limit: Duration) -> ExitStatus {
        let started = Instant::now();
        let status = loop {
            let child = self.nodes[i].0.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if started.elapsed() >= limit {
                // Every running member's threads, to see what it waits for.
                let stacks: String = self
                    .nodes
                    .iter()
                    .zip(&self.names)
                    .filter_map(|(n, name)| Some((n.0.as_ref()?.id(), name)))
                    .map(|(pid, name)| {
                        let bt = std::process::Command::new("gdb")
                            .args(["-batch", "-p", &pid.to_string()])
                            .args(["-ex", "thread apply all bt"])
                            .output()
                            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                            .unwrap_or_else(|e| format!("(no gdb: {e})"));
                        format!("=== threads of {name}:\n{bt}")
                    })
                    .collect();
                panic!(
                    "{} did not exit within {limit:?}\n{}\n{stacks}",
                    self.names[i],
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.nodes[i].0 = None;
        status
    }

    /// Every member but `dead` fails the run: each exits non-zero.
    fn survivors_fail(&mut self, dead: usize) {
        let started = Instant::now();
        for i in (0..NODES).filter(|&i| i != dead) {
            let status = self.wait_exit(i, EXIT_LIMIT.saturating_sub(started.elapsed()));
            assert!(
                !status.success(),
                "{} exited 0 though {} was killed mid-run\n{}",
                self.names[i],
                self.names[dead],
                self.logs()
            );
        }
        eprintln!(
            "the survivors exited non-zero {:?} after the kill",
            started.elapsed()
        );
    }

    /// Starts every member again with the same config (data dir, sink
    /// file, addresses); the first run's logs stay as `NAME-run1.log`.
    fn restart(&mut self) {
        for i in 0..NODES {
            if self.nodes[i].0.is_none() {
                self.restart_member(i);
            }
        }
    }

    /// Starts member `i` again, as systemd does after it exited.
    fn restart_member(&mut self, i: usize) {
        let name = &self.names[i];
        assert!(self.nodes[i].0.is_none(), "{name} still runs");
        std::fs::rename(
            self.s.path(&format!("{name}.log")),
            self.s.path(&format!("{name}-run1.log")),
        )
        .expect("keep the first run's log");
        let config = self.s.read(&format!("{name}.toml"));
        self.nodes[i] = spawn_member(&self.s, name, &config, (self.env)(i));
    }

    /// Waits for every restarted member to exit 0, checks that each
    /// restored the same cluster checkpoint, one at least as new as
    /// `committed` (the newest the leader said every member had), and that
    /// the union of the sink files is exactly `want`.
    fn finish(mut self, committed: u64, want: &[String]) -> String {
        let started = Instant::now();
        for i in 0..NODES {
            let status = self.wait_exit(i, RESTART_LIMIT.saturating_sub(started.elapsed()));
            assert!(
                status.success(),
                "{} exited with {status} after the restart\n{}",
                self.names[i],
                self.logs()
            );
        }
        eprintln!("the restarted run took {:?}", started.elapsed());
        // From request to commit on every member, as the leader logged it.
        let mut took = Vec::new();
        for f in ["node-0-run1.log", LEADER_LOG] {
            for line in self.s.read(f).lines().filter(|l| l.contains(COMMITTED)) {
                if let Some(ms) = line.split(" ms=").nth(1).and_then(|r| r.split(' ').next()) {
                    took.push(format!("{:.1}", ms.parse::<f64>().unwrap_or(f64::NAN)));
                }
            }
        }
        eprintln!("checkpoints took (ms): {}", took.join(" "));
        let logs = self.logs();
        let restored: Vec<Vec<u64>> = self
            .names
            .iter()
            .map(|n| restored_ids(&self.s.read(&format!("{n}.log"))))
            .collect();
        for (n, ids) in self.names.iter().zip(&restored) {
            assert!(
                ids.len() == 1,
                "{n} logs {} `{RESTORING}N` lines, not one: {ids:?}\n{logs}",
                ids.len()
            );
        }
        let id = restored[0][0];
        assert!(
            restored.iter().all(|ids| ids[0] == id),
            "the members restored different checkpoints: {restored:?}\n{logs}"
        );
        assert!(
            id >= committed,
            "they restored checkpoint {id}, older than {committed}, which the leader said was committed on all members\n{logs}"
        );
        eprintln!("every member restored cluster checkpoint {id}");
        let mut rows = Vec::new();
        for n in &self.names {
            rows.extend(json_lines(&self.s.read(&format!("rows-{n}.jsonl"))));
        }
        let got = multiset(&rows);
        assert!(
            got == want,
            "3 members killed and restarted from a cluster checkpoint vs 1 node: {} ({} rows, want {})\n{logs}",
            row_diff(&got, want),
            got.len(),
            want.len()
        );
        logs
    }
}

fn no_env(_: usize) -> Vec<(&'static str, String)> {
    Vec::new()
}

/// node-0, the coordinator of the move, logs each step of it (at debug).
fn coordinator_logs_steps(i: usize) -> Vec<(&'static str, String)> {
    if i != 0 {
        return Vec::new();
    }
    let base = std::env::var("EDDY_TEST_LOG").unwrap_or("info".into());
    vec![("RUST_LOG", format!("{base},eddy::exec::migration=debug"))]
}

/// node-1 is SIGKILLed after two cluster-wide checkpoints and started
/// again at once, as systemd would, while node-0 and node-2 still run (it
/// must wait for them, not take them for members of a new run); they fail
/// the run and start again too. All three restart from the newest
/// checkpoint every member has and finish: the output is exactly one
/// node's.
#[test]
fn a_member_killed_mid_run_resumes_with_the_others_from_the_cluster_checkpoint() {
    let want = reference();
    let mut run = Run::start("", no_env);
    let committed = run.wait_for_commits(2);
    let before = run.rows_so_far();
    run.kill(VICTIM);
    eprintln!(
        "node-{VICTIM} killed after checkpoint {committed} ({} rows written)",
        before.len()
    );
    run.restart_member(VICTIM);
    run.survivors_fail(VICTIM);
    // A commit may have been logged between the kill and the exit.
    let committed = run.newest_committed();
    let at_crash = run.rows_at_crash(&want);
    // The crash came before the end of the input.
    assert!(
        at_crash.len() < want.len(),
        "the first run wrote every row ({}) before the kill\n{}",
        at_crash.len(),
        run.logs()
    );
    run.restart();
    run.finish(committed, &want);
}

/// node-1, the source of a move, dies mid-move: see [`a_move_cut_short`].
#[test]
fn a_move_whose_source_dies_falls_back_to_the_checkpoint_assignment() {
    a_move_cut_short(1);
}

/// node-2, the destination of a move, dies mid-move.
#[test]
fn a_move_whose_destination_dies_falls_back_to_the_checkpoint_assignment() {
    a_move_cut_short(2);
}

/// First a quick move gives node-0's first worker's bins to node-1, and a
/// checkpoint records that assignment. Then node-0 coordinates a
/// fluid move (300 ms between steps) of every bin of node-1 to node-2;
/// `victim` (node-1, the source, or node-2, the destination) is SIGKILLed
/// while the move is under way. The run fails; restarted, the members go
/// back to the assignment of the checkpoint they restore (the one after
/// the quick move: with the even one, node-1 would restore its stale copy
/// of the bins it took), and the output is exactly one node's.
fn a_move_cut_short(victim: usize) {
    let want = reference();
    let mut run = Run::start(
        "[migration]\nstrategy = \"fluid\"\ngap = \"300ms\"\n",
        coordinator_logs_steps,
    );
    run.wait_for_commits(2);

    // The even assignment, then worker 0's bins go to worker 2 (node-1).
    let even: Vec<usize> = (0..BINS).map(|b| b * NODES * WORKERS / BINS).collect();
    let first: Vec<usize> = even.iter().map(|&w| if w == 0 { 2 } else { w }).collect();
    let body = serde_json::json!({ "assignment": first, "strategy": "all_at_once" }).to_string();
    let answer = http_with(run.api[0], "POST", "/rebalance", &body);
    assert!(
        matches!(answer, Some((200, _))),
        "the quick move: {answer:?}\n{}",
        run.logs()
    );
    // A checkpoint taken after it, by its assignment.
    let after = committed_ids(&run.s.read(LEADER_LOG)).len() + 2;
    run.wait_for_commits(after);

    // Then node-1's workers (2, 3) give every bin to node-2's (4, 5).
    let target: Vec<usize> = first
        .iter()
        .map(|&w| match w {
            2 => 4,
            3 => 5,
            w => w,
        })
        .collect();
    let moving = first.iter().zip(&target).filter(|(a, b)| a != b).count();
    assert!(moving >= 20, "{moving} bins move");
    let body = serde_json::json!({ "assignment": target }).to_string();
    let port = run.api[0];
    // The quick move's lines are in the log already.
    let before = run.s.read("node-0.log");
    let (done_before, steps_before) = (
        before.matches("migration done").count(),
        before.matches("migration step done").count(),
    );
    let request = std::thread::spawn(move || http_with(port, "POST", "/rebalance", &body));

    // Some bins have moved, most have not.
    let steps = wait_until(
        "steps of the move in node-0's log",
        Duration::from_secs(30),
        || {
            let log = run.s.read("node-0.log");
            assert!(
                log.matches("migration done").count() == done_before && !request.is_finished(),
                "the move ended before node-{victim} was killed\n{}",
                run.logs()
            );
            let steps = log.matches("migration step done").count() - steps_before;
            (steps >= 2).then_some(steps)
        },
        || run.logs(),
    );
    run.kill(victim);
    eprintln!("node-{victim} killed after {steps} of {moving} steps of the move");
    assert!(steps < moving, "{steps} steps of {moving}");
    run.survivors_fail(victim);
    let committed = run.newest_committed();
    let answer = request.join().expect("the rebalance request");
    assert!(
        !matches!(answer, Some((200, _))),
        "the move whose node-{victim} was killed completed: {answer:?}\n{}",
        run.logs()
    );
    eprintln!("POST /rebalance answered {answer:?}");
    run.rows_at_crash(&want);
    run.restart();
    let logs = run.finish(committed, &want);
    assert!(
        logs.contains("node-0 11 bins (workers 0-1), node-1 32 bins (workers 2-3)"),
        "the restored checkpoint was not the one after the quick move\n{logs}"
    );
}

/// The sum of the `count` column of member `name`'s sink file, and the
/// records its sources read (its `finished:` line).
fn counted_and_read(s: &Scratch, name: &str) -> (u64, u64) {
    let counted = s
        .read(&format!("rows-{name}.jsonl"))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON row");
            v["count"].as_u64().expect("count")
        })
        .sum();
    let log = s.read(&format!("{name}.log"));
    let read = log
        .lines()
        .find_map(|l| {
            l.split("finished: ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no `finished:` line in {name}.log\n{log}"));
    (counted, read)
}

/// node-1's input is a tenth of node-0's, so it ends while checkpoints go
/// on, and node-1 takes every control message 150 ms after it arrived
/// (`EDDY_TEST_CONTROL_DELAY`): node-0's barriers, which travel with the
/// data, reach node-1's operators before the request for them does, and
/// with node-1's sources ended they pass on those barriers alone. node-1
/// must still count itself aligned when the request comes (it used to
/// wait for ever, and with it every source of the run: the run hung at
/// the end of its input). Both members finish, checkpoints went on after
/// node-1's input ended, and the windows count every record read once.
#[test]
fn a_member_whose_input_ended_aligns_on_barriers_that_came_before_their_request() {
    const EARLY: usize = 1;
    let s = Scratch::new();
    let m = Members::start_with_env(
        &s,
        2,
        WORKERS,
        BINS,
        |i| {
            let events = if i == EARLY { EVENTS / 10 } else { EVENTS };
            let out = s.path(&format!("rows-node-{i}.jsonl"));
            keyed_count_pipeline(
                "[checkpoint]\ninterval = \"300ms\"\n",
                events,
                Some(RATE),
                &out,
            )
        },
        |i| match i {
            EARLY => vec![("EDDY_TEST_CONTROL_DELAY", "150ms".to_string())],
            _ => Vec::new(),
        },
    );
    let mut run = Run {
        s,
        names: m.names,
        nodes: m.nodes,
        api: m.api,
        env: no_env,
    };
    for i in 0..2 {
        let status = run.wait_exit(i, RESTART_LIMIT);
        assert!(
            status.success(),
            "{} exited with {status}\n{}",
            run.names[i],
            run.logs()
        );
    }
    let ids = committed_ids(&run.s.read(LEADER_LOG));
    assert!(
        ids.len() >= 10,
        "checkpoints did not go on after node-{EARLY}'s input ended: {ids:?}\n{}",
        run.logs()
    );
    let (mut counted, mut read) = (0, 0);
    for name in &run.names {
        let (c, r) = counted_and_read(&run.s, name);
        counted += c;
        read += r;
    }
    assert_eq!(
        counted,
        read,
        "records counted in windows vs read\n{}",
        run.logs()
    );
    eprintln!("{read} records read and counted once; checkpoints {ids:?}");
}
