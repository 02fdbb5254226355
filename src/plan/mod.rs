//! Turning a checked config into an operator graph: the schema of every
//! stream, compiled expressions and aggregates, and which inputs are
//! exchanged by key.

mod build;
pub(crate) mod expr;
mod signature;

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{JoinMode, NetSinkSettings, NetSourceSettings, NodeConfig, WindowKind};
use crate::data::{KeySpec, SchemaRef};
use crate::io::codec::Format;
use crate::io::generator::GeneratorSpec;
use expr::{AggCall, Compiled};

pub(crate) use build::build;
pub(crate) use signature::state_signature;

/// The operator graph of a pipeline, nodes in topological order.
pub(crate) struct Plan {
    pub(crate) node: NodeConfig,
    pub(crate) nodes: Vec<PlanNode>,
}

pub(crate) struct PlanNode {
    /// The component id from the config.
    pub(crate) id: String,
    /// `generator`, `filter`, `stdout`, ...
    pub(crate) type_name: String,
    pub(crate) kind: NodeKind,
    /// One per input port, in the order of the component's `inputs`.
    pub(crate) inputs: Vec<PlanInput>,
    /// Port 0 is the main output; a window with `late_output` has port 1.
    pub(crate) outputs: Vec<PlanOutput>,
    pub(crate) op: OpSpec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Source,
    Transform,
    Sink,
}

pub(crate) struct PlanInput {
    /// The producing node and its output port.
    pub(crate) from: usize,
    pub(crate) from_port: usize,
    /// `Some` when records are exchanged between workers by this key (keyed
    /// operators); `None` when they stay on the worker that has them.
    pub(crate) exchange: Option<KeySpec>,
}

pub(crate) struct PlanOutput {
    /// The stream's name: the component id, or the `late_output` name.
    pub(crate) name: String,
    pub(crate) schema: SchemaRef,
    /// Consuming `(node, input port)` pairs.
    pub(crate) consumers: Vec<(usize, usize)>,
}

pub(crate) enum OpSpec {
    Generator(GeneratorPlan),
    FileSource(LineSourcePlan),
    Stdin(LineSourcePlan),
    MqttSource(Arc<crate::io::MqttSourcePlan>),
    /// `http`, `tcp` and `udp` sources: lines from the network.
    NetSource(Arc<NetSourcePlan>),
    Filter(Arc<Compiled>),
    /// The columns, and a test-only busy cost per record in ns.
    Map(Arc<Vec<MapColumn>>, u64),
    /// `select` and `drop`: the input columns kept, in output order.
    Project(Arc<Vec<usize>>),
    Window(Arc<WindowPlan>),
    Join(Arc<JoinPlan>),
    Stdout {
        format: Format,
    },
    FileSink {
        path: PathBuf,
        format: Format,
        /// Lines are staged and appended when their checkpoint completes.
        exactly_once: bool,
    },
    Blackhole,
    MqttSink(Arc<crate::io::MqttSinkPlan>),
    /// `http`, `tcp` and `udp` sinks: JSON lines to a peer.
    NetSink(Arc<NetSinkSettings>),
}

/// A network source: how its lines are decoded, and where they come from.
pub(crate) struct NetSourcePlan {
    /// `path` is `None`; each connection or request names its peer.
    pub(crate) lines: LineSourcePlan,
    pub(crate) settings: NetSourceSettings,
}

pub(crate) struct GeneratorPlan {
    pub(crate) spec: GeneratorSpec,
    pub(crate) rate: Option<u64>,
    /// The rates that replace `rate` from their time on.
    pub(crate) rate_steps: Vec<crate::config::RateStep>,
    pub(crate) count: Option<u64>,
    pub(crate) max_out_of_orderness_ms: i64,
    /// Watermark alignment between this node's workers; `None` is off.
    pub(crate) max_drift_ms: Option<i64>,
}

impl GeneratorPlan {
    /// The scheduled rate `elapsed` after the source started (over all
    /// workers); `None` when unpaced.
    pub(crate) fn rate_at(&self, elapsed: std::time::Duration) -> Option<u64> {
        let base = self.rate?;
        Some(
            self.rate_steps
                .iter()
                .take_while(|s| s.at <= elapsed)
                .last()
                .map_or(base, |s| s.events_per_second),
        )
    }
}

/// A `file` or `stdin` source: lines decoded by a format into a schema.
#[derive(Clone)]
pub(crate) struct LineSourcePlan {
    /// `None` for stdin.
    pub(crate) path: Option<PathBuf>,
    pub(crate) follow: bool,
    pub(crate) format: Format,
    pub(crate) schema: SchemaRef,
    pub(crate) event_time: Option<usize>,
    pub(crate) max_out_of_orderness_ms: i64,
    /// Lines per second at most (`file`'s `rate`).
    pub(crate) rate: Option<u64>,
}

/// Where one output column of a `map` comes from.
pub(crate) enum MapColumn {
    Input(usize),
    Expr(Compiled),
}

pub(crate) struct WindowPlan {
    pub(crate) key: KeySpec,
    pub(crate) kind: WindowKind,
    pub(crate) allowed_lateness_ms: i64,
    pub(crate) aggregates: Vec<AggCall>,
    /// Key fields, then aggregates, then `window_start`, `window_end`.
    pub(crate) output: SchemaRef,
    pub(crate) has_late_output: bool,
}

pub(crate) struct JoinPlan {
    pub(crate) left_key: KeySpec,
    pub(crate) right_key: KeySpec,
    pub(crate) mode: JoinMode,
    /// Output columns: `(side, column)` with side 0 left, 1 right; a
    /// tumbling join appends `window_start` and `window_end`.
    pub(crate) columns: Vec<(usize, usize)>,
    pub(crate) output: SchemaRef,
    /// Fields of the left and right inputs.
    pub(crate) left_width: usize,
    pub(crate) right_width: usize,
}

impl Plan {
    /// `gen -> hot -> avg -> out`, for the summary line of `eddy validate`.
    pub(crate) fn describe(&self) -> String {
        let count = |k: NodeKind| self.nodes.iter().filter(|n| n.kind == k).count();
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        let edges: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|n| {
                n.outputs
                    .iter()
                    .flat_map(move |o| o.consumers.iter().map(move |(c, _)| (n, o, *c)))
            })
            .map(|(n, o, c)| {
                let via = if o.name != n.id {
                    format!(".{}", o.name)
                } else {
                    String::new()
                };
                format!("{}{via}->{}", n.id, self.nodes[c].id)
            })
            .collect();
        format!(
            "{}, {}, {}; {} workers, {} bins; {}",
            plural(count(NodeKind::Source), "source"),
            plural(count(NodeKind::Transform), "transform"),
            plural(count(NodeKind::Sink), "sink"),
            self.node.workers,
            self.node.bins,
            edges.join(", ")
        )
    }
}
