//! The cluster view built from gossip: what every node says about itself
//! (a compact [`NodeSummary`] that travels in its mesh payload), the latest
//! summary of every member with its age ([`ClusterState`]), and the
//! planner's [`ClusterView`] derived from it.
//!
//! Pure data and functions: the driver (`daemon::gossip`) reads counters
//! and the member table and passes them in with the time, so the same
//! inputs give the same view on every node and in tests.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Assignment, BinSample, ClusterView, NodeId, NodeSample, OperatorSample, OperatorSpec};
use crate::kernel::counters::Counters;

/// One operator (component) on one node over the last interval. Rates are
/// sums over the node's instances (DS2 §3.2 sums instance rates), as `f32`
/// to keep the payload small (well within measurement noise).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct OperatorSummary {
    /// The component id.
    pub(crate) id: String,
    /// Instances (workers) that did useful work in the interval.
    pub(crate) instances: u16,
    /// Σ over instances of records processed per second of useful time
    /// (sources: records produced).
    pub(crate) true_processing_per_s: f32,
    /// Σ over instances of records produced per second of useful time.
    pub(crate) true_output_per_s: f32,
    /// Records taken in per second of wall time (sources: produced).
    pub(crate) observed_in_per_s: f32,
    /// Records produced per second of wall time.
    pub(crate) observed_out_per_s: f32,
    /// Records emitted by its upstream operators on this node and not yet
    /// taken in by it (in channels and batches). Exact on one node; across
    /// nodes of a distributed run the sum over the nodes is.
    pub(crate) backlog: u64,
    /// Useful time over wall time × workers, in ‰.
    pub(crate) useful_permille: u16,
    /// Time blocked on full output channels over wall time × workers, in ‰.
    pub(crate) backpressure_permille: u16,
    /// Sources only: records per second offered from outside on this node
    /// (a generator's scheduled rate), when known. DS2 takes it as the
    /// target rate: under backpressure the observed rate is only what got
    /// through.
    pub(crate) offered_per_s: Option<f32>,
}

/// What a node gossips about itself, every publish interval.
///
/// The first three fields are `daemon::distribute::RunInfo` (postcard reads
/// a prefix and ignores the rest), so a node waiting for the members of a
/// distributed run reads them from a summary as well; a test checks it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct NodeSummary {
    /// `[node] workers`.
    pub(crate) workers: u16,
    /// The pipeline fingerprint (`daemon::distribute::fingerprint`).
    pub(crate) pipeline: u64,
    /// `RunInfo`'s checkpoints: what this member had when its run began.
    pub(crate) checkpoints: Vec<(u64, bool)>,
    /// Which run it is in (`daemon::distribute::run_id`): a node starting
    /// up takes a member of the run it is about to form for one of its
    /// own, and waits for one still in another (say, a run failing after
    /// that node crashed).
    pub(crate) run: u64,
    /// Cores of the machine; workers may not exceed them.
    pub(crate) cores: u16,
    /// Resident memory of the process.
    pub(crate) rss_bytes: u64,
    /// Key bins this node's workers own.
    pub(crate) bins_held: u32,
    /// Bins of the run (`[node] bins`).
    pub(crate) bins_total: u32,
    /// The epoch of the assignment in force.
    pub(crate) epoch: u64,
    /// Length of the interval the rates were measured over.
    pub(crate) interval_ms: u32,
    pub(crate) operators: Vec<OperatorSummary>,
    /// Operators left out to fit the payload limit.
    pub(crate) truncated: u16,
    /// Input rates and state of the bins this node owns.
    #[serde(default)]
    pub(crate) bins: BinRates,
    /// Cores idle over the interval, of those the process may use: where
    /// the tuner's profiling runs find spare capacity.
    #[serde(default)]
    pub(crate) idle_cores: f32,
}

/// The bins a node owns, compactly: the hottest one by one, the rest as
/// one average (a 256-bin run does not fit a gossip payload bin by bin).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct BinRates {
    /// The hottest owned bins, hottest first.
    pub(crate) hot: Vec<HotBin>,
    /// The other owned bins: how many, and their mean rate and state.
    pub(crate) rest_bins: u32,
    pub(crate) rest_per_s: f32,
    pub(crate) rest_state_bytes: u64,
}

/// One bin's input rate (records per second at the keyed operators,
/// rounded: a varint of 1 to 3 bytes) and state bytes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct HotBin {
    pub(crate) bin: u32,
    pub(crate) per_s: u32,
    pub(crate) state_bytes: u64,
}

/// Most bins gossiped one by one; fewer if the payload limit asks.
pub(crate) const HOT_BINS_MAX: usize = 32;

impl BinRates {
    /// The summary of one interval: `before` and `now` are records
    /// received per bin (summed over the keyed operators), `state_bytes`
    /// per bin now, `owned` which bins this node owns.
    pub(crate) fn measure(
        before: &[u64],
        now: &[u64],
        state_bytes: &[u64],
        owned: &[bool],
        interval_ns: u64,
    ) -> BinRates {
        let secs = interval_ns.max(1) as f64 / 1e9;
        let mut bins: Vec<(u32, f64, u64)> = (0..now.len())
            .filter(|&b| owned.get(b) == Some(&true))
            .map(|b| {
                let d = now[b].saturating_sub(before.get(b).copied().unwrap_or(0));
                let bytes = state_bytes.get(b).copied().unwrap_or(0);
                (b as u32, d as f64 / secs, bytes)
            })
            .collect();
        // Hottest first; equal rates by bin, so the same counts give the
        // same summary.
        crate::cold_sort::sort_by(&mut bins, |a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut out = BinRates::default();
        let (mut rest_rate, mut rest_bytes) = (0.0, 0u64);
        for (i, &(bin, rate, bytes)) in bins.iter().enumerate() {
            if i < HOT_BINS_MAX && rate >= 0.5 {
                out.hot.push(HotBin {
                    bin,
                    per_s: rate.round().min(f64::from(u32::MAX)) as u32,
                    state_bytes: bytes,
                });
            } else {
                out.rest_bins += 1;
                rest_rate += rate;
                rest_bytes += bytes;
            }
        }
        if out.rest_bins > 0 {
            out.rest_per_s = (rest_rate / f64::from(out.rest_bins)) as f32;
            out.rest_state_bytes = rest_bytes / u64::from(out.rest_bins);
        }
        out
    }

    /// Folds the coolest of the hot bins into the average; false if there
    /// is none.
    fn fold_one(&mut self) -> bool {
        let Some(b) = self.hot.pop() else {
            return false;
        };
        let n = f64::from(self.rest_bins);
        self.rest_per_s =
            ((f64::from(self.rest_per_s) * n + f64::from(b.per_s)) / (n + 1.0)) as f32;
        self.rest_state_bytes = ((u128::from(self.rest_state_bytes) * self.rest_bins as u128
            + u128::from(b.state_bytes))
            / (self.rest_bins as u128 + 1)) as u64;
        self.rest_bins += 1;
        true
    }
}

impl NodeSummary {
    /// The postcard encoding within `max_bytes`: the coolest hot bins are
    /// folded into the average first, then operators are dropped from the
    /// end (counted in `truncated`).
    pub(crate) fn encode(&self, max_bytes: usize) -> Vec<u8> {
        let mut s = self.clone();
        loop {
            let bytes = postcard::to_stdvec(&s).unwrap_or_default();
            if bytes.len() <= max_bytes {
                return bytes;
            }
            if s.bins.fold_one() {
                continue;
            }
            if s.operators.is_empty() {
                return bytes;
            }
            s.operators.pop();
            s.truncated += 1;
        }
    }
}

/// An operator of the local plan, as [`summarize`] needs it.
#[derive(Clone, Debug)]
pub(crate) struct OperatorShape {
    pub(crate) id: String,
    pub(crate) source: bool,
    /// Indices of its upstream operators.
    pub(crate) upstream: Vec<usize>,
}

impl OperatorShape {
    /// The operator as the planner knows it.
    pub(crate) fn spec(&self) -> OperatorSpec {
        OperatorSpec {
            name: self.id.clone(),
            upstream: self.upstream.clone(),
        }
    }
}

/// Per-operator summaries of one interval: `before` and `now` are the
/// cumulative counters of every instance (`[operator][worker]`), taken
/// `interval_ns` apart.
pub(crate) fn summarize(
    shapes: &[OperatorShape],
    before: &[Vec<Counters>],
    now: &[Vec<Counters>],
    interval_ns: u64,
) -> Vec<OperatorSummary> {
    let interval = interval_ns.max(1) as f64;
    let totals: Vec<Counters> = now
        .iter()
        .map(|ws| {
            ws.iter().fold(Counters::default(), |a, c| Counters {
                records_in: a.records_in + c.records_in,
                records_out: a.records_out + c.records_out,
                useful_ns: a.useful_ns + c.useful_ns,
                waiting_ns: a.waiting_ns + c.waiting_ns,
                blocked_ns: a.blocked_ns + c.blocked_ns,
            })
        })
        .collect();
    shapes
        .iter()
        .enumerate()
        .map(|(i, shape)| {
            let empty = Vec::new();
            let was = before.get(i).unwrap_or(&empty);
            let workers = now.get(i).map_or(0, Vec::len);
            let (mut inst, mut tp, mut to, mut rin, mut rout, mut useful, mut blocked) =
                (0u16, 0.0, 0.0, 0u64, 0u64, 0u64, 0u64);
            for (w, c) in now.get(i).unwrap_or(&empty).iter().enumerate() {
                let d = match was.get(w) {
                    Some(b) => c.since(b),
                    None => *c,
                };
                let processed = if shape.source {
                    d.records_out
                } else {
                    d.records_in
                };
                rin += processed;
                rout += d.records_out;
                useful += d.useful_ns;
                blocked += d.blocked_ns;
                if d.useful_ns > 0 && processed > 0 {
                    inst += 1;
                    tp += processed as f64 * 1e9 / d.useful_ns as f64;
                    to += d.records_out as f64 * 1e9 / d.useful_ns as f64;
                }
            }
            let backlog = if shape.source {
                0
            } else {
                let upstream: u64 = shape
                    .upstream
                    .iter()
                    .filter_map(|&u| totals.get(u))
                    .map(|c| c.records_out)
                    .sum();
                upstream.saturating_sub(totals.get(i).map_or(0, |c| c.records_in))
            };
            let share = |ns: u64| {
                let wall = interval * workers.max(1) as f64;
                ((ns as f64 / wall) * 1000.0).round().clamp(0.0, 1000.0) as u16
            };
            OperatorSummary {
                id: shape.id.clone(),
                instances: inst,
                true_processing_per_s: tp as f32,
                true_output_per_s: to as f32,
                observed_in_per_s: (rin as f64 * 1e9 / interval) as f32,
                observed_out_per_s: (rout as f64 * 1e9 / interval) as f32,
                backlog,
                useful_permille: share(useful),
                backpressure_permille: share(blocked),
                offered_per_s: None,
            }
        })
        .collect()
}

/// A member as the driver saw it in the member table.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Observed {
    pub(crate) name: String,
    pub(crate) addr: Option<String>,
    /// `"alive"`, `"suspect"` or `"down"`.
    pub(crate) state: String,
    /// The version of its payload (incarnation, sequence) and the bytes.
    pub(crate) payload: Option<((u64, u64), Vec<u8>)>,
}

/// What this node knows about one member.
#[derive(Clone, Debug)]
struct Entry {
    addr: Option<String>,
    state: String,
    local: bool,
    version: Option<(u64, u64)>,
    summary: Option<NodeSummary>,
    /// When this node got the summary (its age is measured from here).
    received_ms: Option<u64>,
    /// Why the last payload could not be read.
    error: Option<String>,
}

/// The latest summary of every member, with when it arrived.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClusterState {
    me: String,
    members: BTreeMap<String, Entry>,
}

/// The assignment in force as this node's migration control knows it:
/// the member owning each bin, and per member the workers holding bins.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct InForce {
    pub(crate) epoch: u64,
    pub(crate) owner: Vec<String>,
    pub(crate) workers_used: BTreeMap<String, u16>,
}

/// The stable id of a node: a hash of its name (as `/status` shows it).
pub(crate) fn node_id(name: &str) -> u64 {
    crate::kernel::hash::hash_bytes(name.as_bytes())
}

/// The planner's id of a node (its id's high half: the planner keys maps
/// by `u32`).
pub(crate) fn planner_id(name: &str) -> NodeId {
    (node_id(name) >> 32) as NodeId
}

impl ClusterState {
    pub(crate) fn new(me: &str) -> ClusterState {
        let mut members = BTreeMap::new();
        members.insert(
            me.to_string(),
            Entry {
                addr: None,
                state: "alive".into(),
                local: true,
                version: None,
                summary: None,
                received_ms: None,
                error: None,
            },
        );
        ClusterState {
            me: me.to_string(),
            members,
        }
    }

    pub(crate) fn me(&self) -> &str {
        &self.me
    }

    /// This node's own summary, measured at `now_ms`.
    pub(crate) fn handle_local(&mut self, now_ms: u64, addr: Option<String>, s: NodeSummary) {
        if let Some(e) = self.members.get_mut(&self.me) {
            e.summary = Some(s);
            e.received_ms = Some(now_ms);
            if addr.is_some() {
                e.addr = addr;
            }
        }
    }

    /// The member table as of `now_ms`: states change, members not listed
    /// are forgotten, a payload with a new version is decoded (its age
    /// starts now). This node's row keeps its own summary.
    pub(crate) fn handle_members(&mut self, now_ms: u64, observed: &[Observed]) {
        let me = self.me.clone();
        self.members
            .retain(|name, _| *name == me || observed.iter().any(|o| o.name == *name));
        for o in observed {
            if o.name == me {
                if let Some(e) = self.members.get_mut(&me) {
                    e.addr = o.addr.clone().or(e.addr.take());
                }
                continue;
            }
            let e = self.members.entry(o.name.clone()).or_insert(Entry {
                addr: None,
                state: String::new(),
                local: false,
                version: None,
                summary: None,
                received_ms: None,
                error: None,
            });
            e.addr = o.addr.clone();
            e.state = o.state.clone();
            if let Some((version, bytes)) = &o.payload
                && e.version != Some(*version)
            {
                e.version = Some(*version);
                match postcard::from_bytes::<NodeSummary>(bytes) {
                    Ok(s) => {
                        e.summary = Some(s);
                        e.received_ms = Some(now_ms);
                        e.error = None;
                    }
                    // A payload of another kind (a node still waiting for a
                    // distributed run publishes only its run info).
                    Err(err) => e.error = Some(format!("payload not a summary: {err}")),
                }
            }
        }
    }

    /// The alive members, lowest id first.
    fn alive(&self) -> Vec<(&String, &Entry)> {
        let mut v: Vec<_> = self
            .members
            .iter()
            .filter(|(_, e)| e.state == "alive")
            .collect();
        crate::cold_sort::sort_by_key(&mut v, |(n, _)| node_id(n));
        v
    }

    /// The member that announces decisions: the alive member with the
    /// lowest id. Every node that sees the same members names the same one;
    /// when it dies, the next lowest takes over.
    pub(crate) fn announcer(&self) -> Option<&str> {
        self.alive().first().map(|(n, _)| n.as_str())
    }

    /// The planner's input: the nodes alive and running this node's
    /// pipeline (`pipeline`), their operators matched by id against the
    /// local graph `operators`. Rates are rebuilt as one sample per
    /// instance (each the node's mean), which is what DS2 sums. Bins have
    /// no per-bin rates in the gossip yet: they count as equal. When the
    /// nodes do not form one distributed run (their bins do not add up to
    /// the run's), this node plans for itself alone. Returns the view and
    /// the node names by planner id.
    pub(crate) fn planner_view(
        &self,
        operators: &[OperatorSpec],
        pipeline: u64,
        in_force: Option<&InForce>,
    ) -> Result<(ClusterView, BTreeMap<NodeId, String>), String> {
        let mine = self
            .members
            .get(&self.me)
            .and_then(|e| e.summary.as_ref())
            .ok_or("this node has not measured an interval yet")?;
        let mut nodes: Vec<(&String, &NodeSummary)> = self
            .alive()
            .into_iter()
            .filter_map(|(n, e)| e.summary.as_ref().map(|s| (n, s)))
            .filter(|(_, s)| s.pipeline == pipeline && s.bins_total == mine.bins_total)
            .collect();
        let held: u64 = nodes.iter().map(|(_, s)| u64::from(s.bins_held)).sum();
        let alone = held != u64::from(mine.bins_total);
        if alone {
            nodes.retain(|(n, _)| **n == self.me);
        }
        let mut names = BTreeMap::new();
        let mut node_samples = Vec::new();
        let mut samples = Vec::new();
        let mut workers = BTreeMap::new();
        let mut owner = Vec::with_capacity(mine.bins_total as usize);
        let epoch = nodes.iter().map(|(_, s)| s.epoch).max().unwrap_or(1);
        for (name, s) in &nodes {
            let id = planner_id(name);
            names.insert(id, (*name).clone());
            // Worker threads are fixed at start: a node cannot use more.
            node_samples.push(NodeSample {
                node: id,
                cores: s.cores.min(s.workers).max(1),
            });
            workers.insert(id, s.workers);
            let bins = if alone { s.bins_total } else { s.bins_held };
            owner.extend(std::iter::repeat_n(id, bins as usize));
            // One simulated second per sample, scaled up so that rounding
            // records to integers costs less than 0.001 records/s.
            const SCALE: f64 = 1000.0;
            let interval_ns = (1e9 * SCALE) as u64;
            for o in &s.operators {
                let Some(op) = operators.iter().position(|spec| spec.name == o.id) else {
                    continue;
                };
                let k = o.instances.max(1);
                let source = operators[op].upstream.is_empty();
                let per = |x: f32| f64::from(x) / f64::from(k);
                for worker in 0..k {
                    let observed_in = per(o.observed_in_per_s) * SCALE;
                    let observed_out = per(o.observed_out_per_s) * SCALE;
                    let processed = if source { observed_out } else { observed_in };
                    let useful_ns = if o.instances > 0 && o.true_processing_per_s > 0.0 {
                        (processed / per(o.true_processing_per_s) * 1e9) as u64
                    } else {
                        0
                    };
                    samples.push(OperatorSample {
                        operator: op,
                        node: id,
                        worker,
                        interval_ns,
                        counters: Counters {
                            records_in: if source { 0 } else { observed_in as u64 },
                            records_out: observed_out as u64,
                            useful_ns,
                            waiting_ns: 0,
                            blocked_ns: 0,
                        },
                        offered_per_s: o
                            .offered_per_s
                            .filter(|_| source)
                            .map(|r| f64::from(r) / f64::from(k)),
                    });
                }
            }
        }
        // The exact owner of every bin and the workers holding bins, when
        // every member knows them (they all do between migrations): the
        // next decision starts from the assignment in force.
        if let Some(f) = in_force.filter(|_| !alone)
            && f.owner.len() == owner.len()
            && f.owner.iter().all(|n| names.values().any(|m| m == n))
        {
            let id_of: BTreeMap<&String, NodeId> = names.iter().map(|(id, n)| (n, *id)).collect();
            owner = f.owner.iter().map(|n| id_of[n]).collect();
            for (id, name) in &names {
                workers.insert(*id, f.workers_used.get(name).copied().unwrap_or(0));
            }
        }
        let summaries: Vec<(NodeId, &NodeSummary)> =
            nodes.iter().map(|(n, s)| (planner_id(n), *s)).collect();
        let bins = bin_samples(&summaries, &owner);
        Ok((
            ClusterView {
                operators: operators.to_vec(),
                nodes: node_samples,
                samples,
                bins,
                assignment: Assignment {
                    epoch,
                    workers,
                    owner,
                },
            },
            names,
        ))
    }

    /// The view as `GET /cluster` shows it, ages as of `now_ms`.
    pub(crate) fn snapshot(&self, now_ms: u64) -> Vec<MemberDoc> {
        let mut rows: Vec<MemberDoc> = self
            .members
            .iter()
            .map(|(name, e)| MemberDoc {
                name: name.clone(),
                id: format!("{:016x}", node_id(name)),
                addr: e.addr.clone(),
                state: e.state.clone(),
                local: e.local,
                age_ms: e.received_ms.map(|t| now_ms.saturating_sub(t)),
                summary: e.summary.clone(),
                error: e.error.clone(),
            })
            .collect();
        crate::cold_sort::sort_by(&mut rows, |a, b| a.id.cmp(&b.id));
        rows
    }
}

/// Every bin's rate and state from the nodes' gossiped [`BinRates`]: a bin
/// some node lists as hot has that rate (the highest, if a migration left
/// it on two lists for an interval); the others the average of the rest of
/// the node owning them in `owner`. Bins nobody measured get 0, and a view
/// with no rate at all counts bins as equal (`placement::bin_shares`).
pub(crate) fn bin_samples(
    summaries: &[(NodeId, &NodeSummary)],
    owner: &[NodeId],
) -> Vec<BinSample> {
    let mut out = vec![BinSample::default(); owner.len()];
    let mut listed = vec![false; owner.len()];
    for (_, s) in summaries {
        for h in &s.bins.hot {
            let Some(b) = out.get_mut(h.bin as usize) else {
                continue;
            };
            b.records_per_s = b.records_per_s.max(f64::from(h.per_s));
            b.state_bytes = b.state_bytes.max(h.state_bytes);
            listed[h.bin as usize] = true;
        }
    }
    for (bin, o) in owner.iter().enumerate() {
        if listed[bin] {
            continue;
        }
        if let Some((_, s)) = summaries.iter().find(|(n, _)| n == o) {
            out[bin] = BinSample {
                records_per_s: f64::from(s.bins.rest_per_s),
                state_bytes: s.bins.rest_state_bytes,
            };
        }
    }
    out
}

/// One member in `GET /cluster`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct MemberDoc {
    pub(crate) name: String,
    /// 16 hex digits, as in `/status`; the announcer is the alive member
    /// with the lowest.
    pub(crate) id: String,
    pub(crate) addr: Option<String>,
    pub(crate) state: String,
    pub(crate) local: bool,
    /// Milliseconds since this node got the member's latest summary.
    pub(crate) age_ms: Option<u64>,
    pub(crate) summary: Option<NodeSummary>,
    /// Why the member's payload could not be read, if it could not.
    pub(crate) error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes() -> Vec<OperatorShape> {
        vec![
            OperatorShape {
                id: "src".into(),
                source: true,
                upstream: vec![],
            },
            OperatorShape {
                id: "op".into(),
                source: false,
                upstream: vec![0],
            },
        ]
    }

    fn c(records_in: u64, records_out: u64, useful_ns: u64, blocked_ns: u64) -> Counters {
        Counters {
            records_in,
            records_out,
            useful_ns,
            waiting_ns: 0,
            blocked_ns,
        }
    }

    #[test]
    fn summaries_are_ds2_rates_per_node() {
        const S: u64 = 1_000_000_000;
        let before = vec![vec![c(0, 0, 0, 0); 2], vec![c(0, 0, 0, 0); 2]];
        // Two workers; the source made 3000 + 1000 records; the operator
        // took 2500 + 1000 of them (500 still queued).
        let now = vec![
            vec![c(0, 3000, S / 10, 0), c(0, 1000, S / 10, 0)],
            vec![c(2500, 1250, S / 2, S / 4), c(1000, 500, S / 4, 0)],
        ];
        let s = summarize(&shapes(), &before, &now, S);
        assert_eq!(s[0].instances, 2);
        assert_eq!(s[0].true_processing_per_s, 40_000.0);
        assert_eq!(s[0].observed_in_per_s, 4000.0);
        assert_eq!(s[0].backlog, 0);
        let op = &s[1];
        assert_eq!(op.true_processing_per_s, 5000.0 + 4000.0);
        assert_eq!(op.true_output_per_s, 2500.0 + 2000.0);
        assert_eq!(op.observed_in_per_s, 3500.0);
        assert_eq!(op.observed_out_per_s, 1750.0);
        assert_eq!(op.backlog, 500);
        assert_eq!(op.useful_permille, 375);
        assert_eq!(op.backpressure_permille, 125);
        // A second interval sees only what happened since.
        let later: Vec<Vec<Counters>> = now
            .iter()
            .map(|ws| {
                ws.iter()
                    .map(|x| c(x.records_in * 2, x.records_out * 2, x.useful_ns * 2, 0))
                    .collect()
            })
            .collect();
        let s2 = summarize(&shapes(), &now, &later, S);
        assert_eq!(s2[1].observed_in_per_s, 3500.0);
        assert_eq!(s2[1].backlog, 1000);
    }

    fn summary(workers: u16, bins_held: u32, rate: f32) -> NodeSummary {
        NodeSummary {
            workers,
            pipeline: 7,
            checkpoints: Vec::new(),
            run: 0,
            cores: 4,
            rss_bytes: 50 << 20,
            bins_held,
            bins_total: 64,
            epoch: 1,
            interval_ms: 1000,
            operators: vec![
                OperatorSummary {
                    id: "src".into(),
                    instances: workers,
                    true_processing_per_s: 1e6 * f32::from(workers),
                    true_output_per_s: 1e6 * f32::from(workers),
                    observed_in_per_s: rate,
                    observed_out_per_s: rate,
                    backlog: 0,
                    useful_permille: 10,
                    backpressure_permille: 0,
                    offered_per_s: None,
                },
                OperatorSummary {
                    id: "op".into(),
                    instances: workers,
                    true_processing_per_s: 1000.0 * f32::from(workers),
                    true_output_per_s: 1000.0 * f32::from(workers),
                    observed_in_per_s: rate,
                    observed_out_per_s: rate,
                    backlog: 10,
                    useful_permille: 900,
                    backpressure_permille: 50,
                    offered_per_s: None,
                },
            ],
            truncated: 0,
            bins: BinRates::default(),
            idle_cores: 0.0,
        }
    }

    fn observed(name: &str, state: &str, seq: u64, s: &NodeSummary) -> Observed {
        Observed {
            name: name.into(),
            addr: Some(format!("127.0.0.1:{}", 7000 + seq)),
            state: state.into(),
            payload: Some(((1, seq), postcard::to_stdvec(s).expect("encode"))),
        }
    }

    #[test]
    fn ages_start_when_a_new_version_arrives() {
        let mut v = ClusterState::new("a");
        v.handle_local(1000, None, summary(2, 32, 100.0));
        let b = summary(2, 32, 200.0);
        v.handle_members(1000, &[observed("b", "alive", 1, &b)]);
        v.handle_members(2500, &[observed("b", "alive", 1, &b)]);
        let rows = v.snapshot(3000);
        let row = |n: &str| rows.iter().find(|r| r.name == n).expect("row").clone();
        assert_eq!(row("b").age_ms, Some(2000), "same version: same age");
        assert_eq!(row("a").age_ms, Some(2000));
        assert!(row("a").local && !row("b").local);
        v.handle_members(2900, &[observed("b", "alive", 2, &b)]);
        let rows = v.snapshot(3000);
        assert_eq!(
            rows.iter().find(|r| r.name == "b").unwrap().age_ms,
            Some(100)
        );
        // A member that left the table is forgotten; a bad payload is said.
        v.handle_members(
            3000,
            &[Observed {
                name: "c".into(),
                addr: None,
                state: "alive".into(),
                payload: Some(((1, 1), vec![0xff; 3])),
            }],
        );
        let rows = v.snapshot(3000);
        assert_eq!(rows.len(), 2);
        let c = rows.iter().find(|r| r.name == "c").unwrap();
        assert!(c.summary.is_none() && c.error.is_some(), "{c:?}");
    }

    #[test]
    fn announcer_is_the_lowest_alive_id_and_the_next_takes_over() {
        let names = ["n0", "n1", "n2", "n3"];
        let mut sorted = names.to_vec();
        sorted.sort_by_key(|n| node_id(n));
        // Every node, whatever its own name, names the same announcer.
        for me in names {
            let mut v = ClusterState::new(me);
            let obs: Vec<Observed> = names
                .iter()
                .filter(|n| **n != me)
                .map(|n| observed(n, "alive", 1, &summary(1, 16, 1.0)))
                .collect();
            v.handle_members(0, &obs);
            assert_eq!(v.announcer(), Some(sorted[0]), "seen from {me}");
        }
        // The announcer dies (seen from a node that is not it): the next
        // lowest takes over; suspects do not announce either.
        let me = sorted[3];
        let mut v = ClusterState::new(me);
        let mut obs: Vec<Observed> = sorted[..3]
            .iter()
            .map(|n| observed(n, "alive", 1, &summary(1, 16, 1.0)))
            .collect();
        v.handle_members(0, &obs);
        assert_eq!(v.announcer(), Some(sorted[0]));
        obs[0].state = "down".into();
        v.handle_members(1, &obs);
        assert_eq!(v.announcer(), Some(sorted[1]));
        obs[1].state = "suspect".into();
        v.handle_members(2, &obs);
        assert_eq!(v.announcer(), Some(sorted[2]));
    }

    #[test]
    fn summary_is_a_run_info_for_distributed_starts_and_fits_the_payload() {
        let s = summary(3, 64, 10.0);
        let bytes = s.encode(512);
        assert!(bytes.len() < 200, "{} bytes", bytes.len());
        let info: crate::daemon::distribute::RunInfo =
            postcard::from_bytes(&bytes).expect("a run info prefix");
        assert_eq!((info.workers, info.pipeline), (3, 7));
        let small = s.encode(40);
        let back: NodeSummary = postcard::from_bytes(&small).expect("decode");
        assert!(small.len() <= 40 && back.truncated > 0, "{back:?}");
    }

    #[test]
    fn bin_rates_list_the_hottest_owned_bins_and_fold_the_rest_to_fit() {
        const S: u64 = 1_000_000_000;
        // 8 bins; this node owns 0..6. Bin 5 is hot, bin 6 is not ours.
        let before = vec![100; 8];
        let now = vec![110, 120, 100, 130, 100, 500, 900, 100];
        let bytes = vec![10, 20, 30, 40, 50, 6000, 70, 80];
        let owned = [true, true, true, true, true, true, false, false];
        let r = BinRates::measure(&before, &now, &bytes, &owned, 2 * S);
        let hot: Vec<(u32, u32, u64)> = r
            .hot
            .iter()
            .map(|h| (h.bin, h.per_s, h.state_bytes))
            .collect();
        assert_eq!(hot, [(5, 200, 6000), (3, 15, 40), (1, 10, 20), (0, 5, 10)]);
        // Bins 2 and 4 received nothing: the rest, as one average.
        assert_eq!(
            (r.rest_bins, r.rest_per_s, r.rest_state_bytes),
            (2, 0.0, 40)
        );
        // A payload too small for every hot bin keeps the hottest and the
        // operators, and folds the others into the average.
        let mut s = summary(1, 6, 10.0);
        s.bins = r;
        let full = postcard::to_stdvec(&s).expect("encode").len();
        let small = s.encode(full - 4);
        let back: NodeSummary = postcard::from_bytes(&small).expect("decode");
        assert_eq!(back.truncated, 0);
        assert_eq!(back.bins.hot.len(), 2, "{back:?}");
        assert_eq!(back.bins.hot[0].bin, 5);
        assert_eq!(back.bins.rest_bins, 4);
        // Bins 2 and 4 at 0, bins 0 and 1 at 5 and 10 records/s.
        assert!((back.bins.rest_per_s - 3.75).abs() < 1e-4, "{back:?}");
    }

    #[test]
    fn gossiped_bin_rates_reach_the_planners_bin_samples() {
        let ops: Vec<OperatorSpec> = shapes().iter().map(OperatorShape::spec).collect();
        // a owns bins 0..32 with bin 7 hot; b owns 32..64, evenly loaded.
        let mut sa = summary(2, 32, 1500.0);
        sa.bins = BinRates {
            hot: vec![HotBin {
                bin: 7,
                per_s: 600,
                state_bytes: 9000,
            }],
            rest_bins: 31,
            rest_per_s: 10.0,
            rest_state_bytes: 100,
        };
        let mut sb = summary(2, 32, 1500.0);
        sb.bins = BinRates {
            hot: Vec::new(),
            rest_bins: 32,
            rest_per_s: 20.0,
            rest_state_bytes: 200,
        };
        let mut v = ClusterState::new("a");
        v.handle_local(0, None, sa);
        v.handle_members(0, &[observed("b", "alive", 1, &sb)]);
        let in_force = InForce {
            epoch: 3,
            owner: (0..64)
                .map(|b| if b < 32 { "a" } else { "b" }.to_string())
                .collect(),
            workers_used: [("a".to_string(), 2), ("b".to_string(), 2)].into(),
        };
        let (view, _) = v.planner_view(&ops, 7, Some(&in_force)).expect("view");
        assert_eq!(view.bins.len(), 64);
        assert_eq!(view.bins[7].records_per_s, 600.0);
        assert_eq!(view.bins[7].state_bytes, 9000);
        assert_eq!(view.bins[0].records_per_s, 10.0);
        assert_eq!(view.bins[31].state_bytes, 100);
        assert_eq!(view.bins[32].records_per_s, 20.0);
        assert_eq!(view.bins[63].state_bytes, 200);
        // The planner weighs the hot bin by its rate: 600 of 600 + 31 × 10
        // + 32 × 20 records/s.
        let shares = crate::control::placement::bin_shares(&view.bins);
        assert!((shares[7] - 600.0 / 1550.0).abs() < 1e-9, "{}", shares[7]);
    }

    #[test]
    fn planner_view_rebuilds_instances_and_the_assignment() {
        let ops: Vec<OperatorSpec> = shapes().iter().map(OperatorShape::spec).collect();
        let mut v = ClusterState::new("a");
        v.handle_local(0, None, summary(2, 32, 1500.0));
        v.handle_members(0, &[observed("b", "alive", 1, &summary(2, 32, 1500.0))]);
        let (view, names) = v.planner_view(&ops, 7, None).expect("view");
        assert_eq!(names.len(), 2);
        assert_eq!(view.assignment.total_workers(), 4);
        assert_eq!(view.assignment.owner.len(), 64);
        assert_eq!(view.samples.len(), 8, "2 operators × 2 nodes × 2 instances");
        let est = crate::control::ds2::evaluate(&view, &Default::default()).expect("ds2");
        // 3000 records/s at 1000/s per instance: 3 workers of the operator.
        let op = &est.operators[1];
        assert!((op.optimal - 3.0).abs() < 1e-3, "{op:?}");
        // Another pipeline, or a node alone with all bins: planned alone.
        let mut other = summary(2, 64, 1.0);
        other.pipeline = 8;
        v.handle_members(1, &[observed("b", "alive", 2, &other)]);
        let (view, names) = v.planner_view(&ops, 7, None).expect("view");
        assert_eq!(view.nodes.len(), 1);
        assert_eq!(names.values().collect::<Vec<_>>(), ["a"]);
        assert_eq!(view.assignment.owner.len(), 64, "all bins, planned alone");
    }
}
