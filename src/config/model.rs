//! The pipeline file as typed values, each remembering where it was written.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use super::diag::Sp;
use crate::data::DataType;
use crate::io::codec::Format;
use crate::io::generator::GeneratorSpec;
use crate::mesh::config::MeshConfig;
use crate::migrate::Strategy;

/// A whole, structurally valid pipeline file.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) node: NodeConfig,
    /// Sources, transforms and sinks in file order.
    pub(crate) components: Vec<Component>,
}

/// `[node]`: this process.
#[derive(Clone, Debug)]
pub(crate) struct NodeConfig {
    pub(crate) name: String,
    pub(crate) data_dir: PathBuf,
    /// Worker threads; each owns a share of the bins of every keyed operator.
    pub(crate) workers: usize,
    /// Number of key bins, a power of two.
    pub(crate) bins: u32,
    /// Where records that fail to parse or evaluate are written.
    pub(crate) dead_letter: PathBuf,
    /// Most records in one batch.
    pub(crate) batch_size: usize,
    /// Batches a channel between workers (or to a sink writer) holds before
    /// the sender waits.
    pub(crate) channel_capacity: usize,
    /// How long a `stdout` or `file` sink may hold written lines before
    /// handing them to the OS; 0: as soon as no more lines wait.
    pub(crate) flush_interval_ms: u64,
    /// How often a source's advancing watermark goes downstream at most
    /// (Flink's auto-watermark interval); 0: with every batch.
    pub(crate) watermark_interval_ms: u64,
    /// `[checkpoint] interval`; `None` when `enabled = false`.
    pub(crate) checkpoint_interval_ms: Option<i64>,
    /// `[state] cache_bytes`: memory for operator state before it spills
    /// to the store.
    pub(crate) cache_bytes: u64,
    /// Whether `[node] name` was written in the file (with `[mesh]`, the
    /// name otherwise comes from the node's certificate).
    pub(crate) name_given: bool,
    /// `[mesh]`: how this node joins its cluster; `None` runs alone.
    pub(crate) mesh: Option<MeshConfig>,
    /// `[api]`: the local HTTP API.
    pub(crate) api: ApiConfig,
    /// `[migration]`: how bins move between workers.
    pub(crate) migration: MigrationConfig,
    /// `[trace]`: critical-path analysis.
    pub(crate) trace: TraceConfig,
    /// `[controller]`: the scaling controller's intervals.
    pub(crate) controller: ControllerSettings,
    /// `[tune]`: forecasting the rate and choosing settings for it.
    pub(crate) tune: super::tune::TuneConfig,
}

/// `[controller]`: when the scaling controller decides and how much
/// hysteresis it applies; the defaults are `ControllerConfig`'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ControllerSettings {
    /// `decision_interval`: how often the planner runs. Default 5 s.
    pub(crate) decision_interval: Duration,
    /// `warm_up`: decision intervals ignored after a change. Default 1.
    pub(crate) warm_up: u32,
    /// `activation`: consecutive agreeing decisions before acting. Default 1.
    pub(crate) activation: u32,
    /// `stabilization`: no change sooner than this after the last one.
    /// Default 20 s.
    pub(crate) stabilization: Duration,
    /// `scale_down_after`: no scale-down sooner than this after the last
    /// change. Default 2 min.
    pub(crate) scale_down_after: Duration,
    /// `execute`: whether the announcer executes its decisions by live
    /// migration (distributed runs). Default true.
    pub(crate) execute: bool,
}

impl Default for ControllerSettings {
    fn default() -> ControllerSettings {
        let c = crate::control::controller::ControllerConfig::default();
        ControllerSettings {
            decision_interval: Duration::from_secs(5),
            warm_up: c.warm_up,
            activation: c.activation,
            stabilization: Duration::from_millis(c.stabilization_ms),
            scale_down_after: Duration::from_millis(c.scale_down_after_ms),
            execute: true,
        }
    }
}

impl ControllerSettings {
    /// The planner's knobs with these intervals.
    pub(crate) fn planner(&self) -> crate::control::controller::ControllerConfig {
        crate::control::controller::ControllerConfig {
            warm_up: self.warm_up,
            activation: self.activation,
            stabilization_ms: self.stabilization.as_millis() as u64,
            scale_down_after_ms: self.scale_down_after.as_millis() as u64,
            ..Default::default()
        }
    }
}

/// `[migration]`: how keyed state moves when the bin assignment changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MigrationConfig {
    /// `strategy`, with `gap` (fluid) or `max_bins_per_step` (batched)
    /// folded in. Default batched, unlimited.
    pub(crate) strategy: Strategy,
    /// `gap`: the pause between fluid steps. Default zero.
    pub(crate) gap: Duration,
    /// `max_bins_per_step`: the most bins of a batched step; `None` is
    /// unlimited (the default).
    pub(crate) max_bins_per_step: Option<u32>,
    /// `drain_timeout`: how long SIGTERM on a mesh member waits for its
    /// bins to move away before it exits anyway. Default 30 s.
    pub(crate) drain_timeout: Duration,
    /// `hold_memory`: bytes of records a worker holds in memory for bins
    /// whose state is still on its way; beyond, they spill to disk.
    /// Default 64 MiB.
    pub(crate) hold_memory: u64,
}

impl Default for MigrationConfig {
    fn default() -> MigrationConfig {
        MigrationConfig {
            strategy: Strategy::Batched {
                max_bins_per_step: None,
            },
            gap: Duration::ZERO,
            max_bins_per_step: None,
            drain_timeout: Duration::from_secs(30),
            hold_memory: 64 << 20,
        }
    }
}

/// `[trace]`: activity logging and critical-path analysis (`eddy trace`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceConfig {
    /// On from the start (`POST /trace` switches it at run time). Default
    /// `false`.
    pub(crate) enabled: bool,
    /// The snapshot window. Default 1 s.
    pub(crate) window_ms: u64,
}

impl Default for TraceConfig {
    fn default() -> TraceConfig {
        TraceConfig {
            enabled: false,
            window_ms: 1000,
        }
    }
}

/// The port of the local HTTP API when `[api] address` gives none.
pub(crate) const DEFAULT_API_PORT: u16 = 7401;

/// `[api]`: the local HTTP API (`/health`, `/status`) that `eddy peers`
/// reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiConfig {
    /// Whether to serve it. Default `true`.
    pub(crate) enabled: bool,
    /// Address and TCP port to listen on. Default `127.0.0.1:7401`.
    pub(crate) address: SocketAddr,
    /// Whether `address` was written in the file. If the default address
    /// is taken (another eddy on this host), the node runs without an API
    /// and says so; an address that was asked for must be had.
    pub(crate) explicit: bool,
}

impl Default for ApiConfig {
    fn default() -> ApiConfig {
        ApiConfig {
            enabled: true,
            address: SocketAddr::from(([127, 0, 0, 1], DEFAULT_API_PORT)),
            explicit: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Section {
    Source,
    Transform,
    Sink,
}

impl Section {
    /// The TOML table the section lives in.
    pub(crate) fn table(self) -> &'static str {
        match self {
            Section::Source => "sources",
            Section::Transform => "transforms",
            Section::Sink => "sinks",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Component {
    pub(crate) section: Section,
    pub(crate) id: Sp<String>,
    pub(crate) type_name: Sp<String>,
    pub(crate) inputs: Vec<Sp<String>>,
    /// Where `inputs` is written (or the component's table, if it is not).
    pub(crate) inputs_span: Range<usize>,
    pub(crate) spec: Spec,
}

impl Component {
    /// The name of the late-record stream this component declares, if any.
    pub(crate) fn late_output(&self) -> Option<&Sp<String>> {
        match &self.spec {
            Spec::Window(w) => w.late_output.as_ref(),
            _ => None,
        }
    }

    /// `sources.readings`, as diagnostics name it.
    pub(crate) fn qualified_id(&self) -> String {
        format!("{}.{}", self.section.table(), self.id.value)
    }
}

#[derive(Debug)]
pub(crate) enum Spec {
    Generator(GeneratorSource),
    File(FileSource),
    Stdin(StdinSource),
    Mqtt(super::mqtt::MqttSourceConfig),
    /// `http`, `tcp` and `udp` sources.
    NetSource(super::net::NetSource),
    Filter {
        condition: Sp<String>,
    },
    Map {
        fields: Vec<(Sp<String>, Sp<String>)>,
        /// Test-only `cost_per_record`: busy time added per record, so
        /// that tests of `eddy trace` have a known slow transform.
        cost_per_record_ns: u64,
    },
    Select {
        fields: Vec<Sp<String>>,
    },
    Drop {
        fields: Vec<Sp<String>>,
    },
    Window(WindowConfig),
    Join(JoinConfig),
    Stdout {
        format: Format,
    },
    FileSink {
        path: Sp<PathBuf>,
        format: Format,
        exactly_once: bool,
    },
    Blackhole,
    MqttSink(super::mqtt::MqttSinkConfig),
    /// `http`, `tcp` and `udp` sinks.
    NetSink(super::net::NetSinkSettings),
    /// A component whose fields have errors (already reported).
    Invalid,
}

/// The event-time settings every source has.
#[derive(Clone, Debug)]
pub(crate) struct EventTime {
    /// The field holding event time; `None` makes the stream untimed.
    pub(crate) field: Option<Sp<String>>,
    pub(crate) max_out_of_orderness_ms: i64,
}

#[derive(Debug)]
pub(crate) struct GeneratorSource {
    pub(crate) spec: GeneratorSpec,
    /// Events per second over all workers; `None` is as fast as possible.
    pub(crate) rate: Option<u64>,
    /// Events in all; `None` is endless.
    pub(crate) count: Option<u64>,
    /// `rate_steps`: from each step's `at` (after the source starts) on,
    /// its rate replaces `rate`; in `at` order.
    pub(crate) rate_steps: Vec<RateStep>,
    pub(crate) event_time: EventTime,
    /// `max_drift`: how far in event time one worker's share may run
    /// ahead of the slowest before it waits; `None` (`"0s"`) is off.
    pub(crate) max_drift_ms: Option<i64>,
}

/// What `max_drift` is unless set: Flink's examples of watermark
/// alignment use 20 s; 10 s of `wcount` is 50 k events of a worker's
/// share, tens of milliseconds at full speed, so a worker descheduled for
/// a moment does not stop the other, while open windows stay bounded.
pub(crate) const DEFAULT_MAX_DRIFT_MS: i64 = 10_000;

/// One step of a generator's rate schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RateStep {
    /// Time since the source started.
    pub(crate) at: Duration,
    /// Events per second over all workers from then on.
    pub(crate) events_per_second: u64,
}

/// A declared record schema: field names and types in file order.
pub(crate) type SchemaDecl = Vec<(Sp<String>, DataType)>;

#[derive(Debug)]
pub(crate) struct FileSource {
    pub(crate) path: Sp<PathBuf>,
    pub(crate) format: Format,
    pub(crate) schema: SchemaDecl,
    pub(crate) follow: bool,
    /// `rate`: lines per second at most (replaying a recording at a
    /// pace); `None` reads as fast as the pipeline takes them.
    pub(crate) rate: Option<u64>,
    pub(crate) event_time: EventTime,
}

#[derive(Debug)]
pub(crate) struct StdinSource {
    pub(crate) format: Format,
    pub(crate) schema: SchemaDecl,
    pub(crate) event_time: EventTime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowKind {
    Tumbling { size_ms: i64 },
    Hopping { size_ms: i64, slide_ms: i64 },
    Session { gap_ms: i64 },
}

#[derive(Debug)]
pub(crate) struct WindowConfig {
    pub(crate) key: Vec<Sp<String>>,
    pub(crate) kind: WindowKind,
    pub(crate) allowed_lateness_ms: i64,
    /// Output field name → aggregate call, in file order.
    pub(crate) aggregates: Vec<(Sp<String>, Sp<String>)>,
    /// The name of the stream that late records go to.
    pub(crate) late_output: Option<Sp<String>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinMode {
    /// Pairs with equal keys in the same tumbling window.
    Tumbling { size_ms: i64 },
    /// Pairs with equal keys at most `within_ms` apart in event time.
    Interval { within_ms: i64 },
}

#[derive(Debug)]
pub(crate) struct JoinConfig {
    pub(crate) left_on: Vec<Sp<String>>,
    pub(crate) right_on: Vec<Sp<String>>,
    pub(crate) mode: JoinMode,
}
