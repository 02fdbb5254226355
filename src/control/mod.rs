//! Decisions about where work runs, as pure functions: the static
//! assignment of key bins to the workers of the members present when a
//! distributed run starts ([`assignment`]), and the scaling controller as
//! a sans-IO core: the cluster view built from
//! what every operator instance measures, the DS2 policy, the mapping of its
//! result onto eddy's model (workers per node, bins per node), hysteresis,
//! and a seeded simulator that checks all of it against a CPU-threshold
//! policy.
//!
//! Nothing here touches sockets, files or clocks: [`controller::Controller`]
//! takes a [`ClusterView`] and the time, and returns a
//! [`controller::Decision`]. Wiring the view to gossip and executing the
//! decision through live migration belong to the drivers.

pub(crate) mod announcer;
pub(crate) mod assignment;
pub(crate) mod controller;
pub(crate) mod ds2;
pub(crate) mod execute;
pub(crate) mod placement;
pub(crate) mod sim;
pub(crate) mod threshold;
pub(crate) mod view;

use std::collections::BTreeMap;

use crate::kernel::counters::Counters;

/// A node of the mesh, as gossip identifies it.
pub(crate) type NodeId = u32;

/// One operator of the dataflow graph.
#[derive(Clone, Debug)]
pub(crate) struct OperatorSpec {
    /// The component id (`transforms.NAME`, `sources.NAME`).
    pub(crate) name: String,
    /// Indices of the operators feeding this one; empty for a source.
    pub(crate) upstream: Vec<usize>,
}

/// What one operator instance (one component on one worker) measured over
/// one interval: the difference of `exec::metrics::OpMetrics::counters()`
/// between two reports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OperatorSample {
    /// Index into [`ClusterView::operators`].
    pub(crate) operator: usize,
    pub(crate) node: NodeId,
    pub(crate) worker: u16,
    /// The wall-clock length of the interval.
    pub(crate) interval_ns: u64,
    pub(crate) counters: Counters,
    /// Sources only: records per second arriving from outside (a broker's
    /// lag growth plus what was read, a generator's configured rate). `None`
    /// means "the observed output rate": right only while the source is not
    /// held back by backpressure.
    pub(crate) offered_per_s: Option<f64>,
}

/// What a node says about itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeSample {
    pub(crate) node: NodeId,
    /// Workers may not exceed this.
    pub(crate) cores: u16,
}

/// The input rate and state size of one bin (at the keyed operators).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BinSample {
    pub(crate) records_per_s: f64,
    pub(crate) state_bytes: u64,
}

/// Where work runs: workers per node and the owner of every bin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Assignment {
    pub(crate) epoch: u64,
    /// Workers per node; nodes holding no bins have 0.
    pub(crate) workers: BTreeMap<NodeId, u16>,
    /// The owner of each bin (index = bin).
    pub(crate) owner: Vec<NodeId>,
}

impl Assignment {
    pub(crate) fn total_workers(&self) -> u32 {
        self.workers.values().map(|&w| u32::from(w)).sum()
    }

    pub(crate) fn workers_on(&self, node: NodeId) -> u16 {
        self.workers.get(&node).copied().unwrap_or(0)
    }
}

/// Everything the planner decides from: the same view gives the same
/// decision on every node.
#[derive(Clone, Debug)]
pub(crate) struct ClusterView {
    pub(crate) operators: Vec<OperatorSpec>,
    /// The alive members.
    pub(crate) nodes: Vec<NodeSample>,
    pub(crate) samples: Vec<OperatorSample>,
    /// One per bin, in bin order.
    pub(crate) bins: Vec<BinSample>,
    /// The assignment these samples were measured under.
    pub(crate) assignment: Assignment,
}
