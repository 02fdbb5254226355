//! The command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "eddy",
    version,
    about = "An embedded, single-binary edge stream processor"
)]
pub(crate) struct Cli {
    /// Log filter: error, warn, info, debug, trace, or a tracing directive
    /// such as `eddy=debug`. Overrides RUST_LOG.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where a packaged eddy (and `configs/eddy.service`) keeps its pipeline.
const DEFAULT_CONFIG: &str = "/etc/eddy/eddy.toml";

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run a pipeline until every source has ended, or until SIGINT/SIGTERM;
    /// then drain and exit.
    Run {
        /// The pipeline file (TOML).
        #[arg(default_value = DEFAULT_CONFIG)]
        file: PathBuf,
        /// At exit, print per-component counts, rates and sink latency
        /// percentiles to stderr.
        #[arg(long)]
        stats: bool,
    },
    /// Check a pipeline file: print every error with its place and exit 78,
    /// or print a one-line summary and exit 0.
    Validate {
        /// The pipeline file (TOML).
        #[arg(default_value = DEFAULT_CONFIG)]
        file: PathBuf,
    },
    /// Run a built-in benchmark workload through the real engine.
    Bench {
        #[command(subcommand)]
        workload: Workload,
    },
    /// Manage the cluster CA and node certificates of the peer mesh.
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
    /// Look at the durable state in a data dir, or move one bin of it to
    /// another data dir.
    State {
        #[command(subcommand)]
        action: StateAction,
    },
    /// List the members of a running node's mesh (read from its local API).
    Peers {
        /// The node's local API (`[api] address`).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7401")]
        api: String,
        /// Print `{"members": [{"id", "name", "addr", "state", "rtt_ms",
        /// "last_seen_ms", "incarnation", "local"}]}` instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Move the running pipeline's bins live to an even assignment over
    /// every worker of the run (every member's in a distributed run),
    /// through a node's local API (`POST /rebalance`); prints what moved.
    Rebalance {
        /// The node's local API (`[api] address`); that node coordinates.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7401")]
        api: String,
        /// all_at_once, fluid or batched (default: the node's
        /// `[migration] strategy`).
        #[arg(long, value_name = "S")]
        strategy: Option<String>,
    },
    /// A live view of the cluster (read from a node's local API): per node
    /// and operator the rates, useful-time and backpressure shares,
    /// workers and bins, and the last scaling decision and why.
    Top {
        /// The node's local API (`[api] address`).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7401")]
        api: String,
        /// Print one frame and exit (no escape codes), for scripts.
        #[arg(long)]
        once: bool,
        /// Time between two frames.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        interval: std::time::Duration,
    },
    /// What is latency made of? Live critical-path analysis of a running
    /// node: per window, the activities, operators and workers ranked by
    /// critical participation (CP), beside their plain share of time.
    /// Turns tracing on if it is off.
    Trace {
        /// The node's local API (`[api] address`).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7401")]
        api: String,
        /// Print each window as one line of JSON (as `GET /trace` has it).
        #[arg(long)]
        json: bool,
        /// Set the node's snapshot window, e.g. 1s or 250ms.
        #[arg(long, value_name = "DURATION")]
        window: Option<String>,
        /// Rows per ranking.
        #[arg(long, value_name = "N", default_value_t = 5)]
        top: usize,
        /// Exit after this many windows.
        #[arg(long, value_name = "N")]
        count: Option<usize>,
        /// Turn tracing off on the node and exit.
        #[arg(long)]
        off: bool,
    },
    /// The tuner of a running node (`[tune]`, read from its local API):
    /// the input rate forecast against the actual, the forecast error, the
    /// Pareto front of the profiling runs, the chosen configuration and why.
    Tune {
        /// The node's local API (`[api] address`).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7401")]
        api: String,
        /// Print `GET /tune`'s JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Also draw the forecast against the actual rate and the Pareto
        /// front into this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum StateAction {
    /// List the checkpoints (newest first, damaged ones with the reason),
    /// and the operators and bins of the newest good one.
    Inspect {
        /// The data dir (`[node] data_dir`). It must not be in use.
        data_dir: PathBuf,
        /// Print one JSON document instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Write one bin's state of one operator as a stream of checksummed
    /// chunks (one chunk in memory at a time).
    Export {
        /// The data dir to read. It must not be in use.
        data_dir: PathBuf,
        /// The operator's component id.
        #[arg(long, value_name = "ID")]
        operator: String,
        /// The bin.
        #[arg(long, value_name = "N")]
        bin: u32,
        /// Read this checkpoint instead of the newest one.
        #[arg(long, value_name = "ID")]
        checkpoint: Option<u64>,
        /// Write here instead of to stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Install a stream written by `export` as that bin's state, in a new
    /// checkpoint; the rest of the state stays as it is.
    Import {
        /// The data dir to install into (created if missing). It must not
        /// be in use.
        data_dir: PathBuf,
        /// The operator's component id; must match the stream.
        #[arg(long, value_name = "ID")]
        operator: String,
        /// The bin; must match the stream.
        #[arg(long, value_name = "N")]
        bin: u32,
        /// The stream; stdin if not given.
        file: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ClusterAction {
    /// Create a cluster CA: writes CA_DIR/ca.crt and CA_DIR/ca.key (0600).
    Init {
        /// Directory for the CA files (created if missing).
        ca_dir: PathBuf,
        /// The cluster name, recorded in every certificate; nodes refuse
        /// peers of other clusters.
        #[arg(long, default_value = "eddy")]
        cluster: String,
        /// Days the CA is valid.
        #[arg(long, default_value_t = 3650)]
        days: u32,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Issue a node certificate: writes DIR/NODE_NAME.crt and DIR/NODE_NAME.key (0600).
    Issue {
        /// The CA directory written by `eddy cluster init`.
        #[arg(long = "ca", value_name = "CA_DIR")]
        ca_dir: PathBuf,
        /// Where to write the node's files (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Days the certificate is valid (0 issues an already expired one, for tests).
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
        /// The node's name, as in `[node] name`.
        node_name: String,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum Workload {
    /// Keyed 1 s tumbling-window count and sum (../shared/WORKLOADS.md):
    /// generator -> window -> counting sink, totals verified.
    Wcount {
        /// Number of events.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Worker threads.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The cost of the intrinsic counters: `wcount` with them off and on,
    /// alternating in one process; prints both medians and the cost.
    Instrumentation {
        /// Events per run.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Worker threads.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// Runs of each (off and on alternate).
        #[arg(long, default_value_t = 5)]
        runs: u32,
        /// Print `{"workload", "events", "workers", "runs",
        /// "on_events_per_s", "off_events_per_s", "cost_percent", "on",
        /// "off"}`.
        #[arg(long)]
        json: bool,
    },
    /// Live bin migration under load: per strategy, max and p99 latency
    /// through the keyed operator during the move, its duration, the
    /// steady p99, peak extra memory, lost and duplicated records; writes
    /// a latency-over-time SVG.
    Migration {
        /// Distinct keys of the keyed state.
        #[arg(long, default_value_t = 1_000_000)]
        keys: u64,
        /// Bins of the keyed operator (a power of two); half of them move.
        #[arg(long, default_value_t = 256)]
        bins: u32,
        /// Where to write the latency plot.
        #[arg(long, default_value = "migration-latency.svg")]
        plot: std::path::PathBuf,
        /// Print `{"strategies": [{"strategy", "max_latency_ms",
        /// "p99_latency_ms", "steady_p99_ms", "steady_max_ms", "duration_ms",
        /// "peak_extra_bytes", "lost", "duplicated"}]}`.
        #[arg(long)]
        json: bool,
    },
    /// The cost of the bin interface: keyed count throughput on 2 workers
    /// at 2^8, 2^12 and 2^16 bins against one bin per worker.
    Bins {
        /// Events per run.
        #[arg(long, default_value_t = 20_000_000)]
        events: u64,
        #[arg(long)]
        json: bool,
    },
    /// Tracing: its overhead on throughput and p99 (off and on in one run),
    /// the analysis speed in events per second on one core, and the time
    /// to analyse a 1 s window of a 2-node, 4-worker pipeline.
    Trace {
        /// Length of each of the two runs (as fast as it goes, and at a
        /// fixed rate), in which tracing is switched on and off every second.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Analysis only, at this many events per worker-second (no
        /// pipeline runs: the overhead figures are left out).
        #[arg(long)]
        density: Option<u64>,
        /// Print `{"overhead_throughput_pct", "overhead_p99_pct",
        /// "analysis_events_per_s", "window_analysis_ms"}`.
        #[arg(long)]
        json: bool,
    },
    /// A diurnal rate (a day compressed into `--day` seconds) through real
    /// daemons three ways: static for the peak, DS2 alone, and Demeter's
    /// tuner; CPU seconds, peak memory, windows over the latency goal and
    /// the profiling runs' CPU.
    Tune {
        /// Seconds one day lasts (Demeter runs three: two to learn).
        #[arg(long, default_value_t = 120)]
        day: u64,
        /// Records per second at the busiest hour.
        #[arg(long, default_value_t = 20_000)]
        peak: u64,
        /// The p99 latency goal of every 1 s window, in ms.
        #[arg(long, default_value_t = 100.0)]
        goal_ms: f64,
        /// Sensors, the keys of the window: with the window's length, how
        /// much state the pipeline holds.
        #[arg(long, default_value_t = 5000)]
        keys: u64,
        /// Seconds of the tumbling window per sensor.
        #[arg(long, default_value_t = 1)]
        window: u64,
        /// Run only these policies (repeat the flag), e.g. to measure a
        /// change to the tuner without the half hour of the other two;
        /// the ratios to static need static in the same run.
        #[arg(long = "policy", value_parser = ["static", "ds2", "demeter"])]
        policies: Vec<String>,
        /// Print `{"runs": [{"policy": "static"|"ds2"|"demeter", "cpu_s",
        /// "peak_memory_bytes", "windows_over_goal_pct", "profiling_cpu_s",
        /// "windows", "detail"}], ...}`.
        #[arg(long)]
        json: bool,
    },
    /// Scaling decisions in the seeded simulator: DS2 against a CPU
    /// threshold (70 %, HPA-like) over the same scenarios (pure
    /// computation, no pipeline runs).
    Scaling {
        /// The simulator's seed (noise); the same seed prints the same table.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print `{"scenarios": [{"scenario", "policy", "decisions_to_converge",
        /// "oscillations", "over_provisioned_s", "under_provisioned_s"}]}`.
        #[arg(long)]
        json: bool,
        /// Also print every reconfiguration with its reason.
        #[arg(long)]
        log: bool,
    },
}
