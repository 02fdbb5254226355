//! Command-line entry points: `run`, `validate`, `bench`, `cluster`,
//! `peers`, `state`.

pub mod api;
mod bench;
mod bench_migration;
mod bench_trace;
mod bench_tune;
mod cli;
pub mod cluster;
pub(crate) mod distribute;
mod gossip;
mod heap;
/// Also serves the `http` source (`io::http_source`).
pub(crate) mod http;
mod instrumentation;
mod load;
pub mod migration_api;
mod notify;
mod peers;
mod procfs;
mod prometheus;
mod rebalance;
mod reload;
mod run;
mod services;
mod state;
mod stats;
mod status;
mod top;
mod trace;
mod tune;
mod tune_apply;
mod tune_budget;
mod tune_cap;
mod tune_cli;
mod tune_profile;
mod tune_remote;

mod tune_in_place;
mod tune_store;
mod tune_svg;

use std::process::ExitCode;

use clap::Parser;

/// `EX_CONFIG` from sysexits.h, as `vector validate` uses.
pub(crate) const EXIT_CONFIG: u8 = 78;

pub fn main() -> ExitCode {
    heap::configure_malloc();
    let cli = cli::Cli::parse();
    init_logging(cli.log_level.as_deref());
    match cli.command {
        cli::Command::Run { file, stats } => {
            heap::return_freed_memory();
            run::run(&file, stats)
        }
        cli::Command::Validate { file } => run::validate(&file),
        cli::Command::Bench { workload } => bench::bench(workload),
        cli::Command::Peers { api, json } => peers::peers(&api, json),
        cli::Command::Rebalance { api, strategy } => {
            rebalance::rebalance(&api, strategy.as_deref())
        }
        cli::Command::Top {
            api,
            once,
            interval,
        } => top::top(&api, once, interval),
        cli::Command::Trace {
            api,
            json,
            window,
            top,
            count,
            off,
        } => trace::trace(trace::TraceArgs {
            api,
            json,
            window,
            top,
            count,
            off,
        }),
        cli::Command::Tune { api, json, plot } => tune_cli::tune(&api, json, plot.as_deref()),
        cli::Command::Cluster { action } => match action {
            cli::ClusterAction::Init {
                ca_dir,
                cluster,
                days,
                force,
            } => cluster::init(&ca_dir, &cluster, days, force),
            cli::ClusterAction::Issue {
                ca_dir,
                out,
                days,
                force,
                node_name,
            } => cluster::issue(&ca_dir, &out, &node_name, days, force),
        },
        cli::Command::State { action } => match action {
            cli::StateAction::Inspect { data_dir, json } => state::inspect(&data_dir, json),
            cli::StateAction::Export {
                data_dir,
                operator,
                bin,
                checkpoint,
                out,
            } => state::export(&data_dir, &operator, bin, checkpoint, out.as_deref()),
            cli::StateAction::Import {
                data_dir,
                operator,
                bin,
                file,
            } => state::import(&data_dir, &operator, bin, file.as_deref()),
        },
    }
}

/// Logs go to stderr. `--log-level` wins over `RUST_LOG`; the default is
/// `info`.
/// Directives are `LEVEL` or `TARGET=LEVEL`, comma-separated (such as
/// `eddy=debug,info`): tracing-subscriber's `Targets`, which needs no regex
/// engine (`EnvFilter` added a megabyte to the binary).
fn init_logging(level: Option<&str>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let wanted = level.map(str::to_string).or(env);
    let filter = match wanted.as_deref().map(str::parse::<Targets>) {
        None => Targets::new().with_default(tracing::Level::INFO),
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            eprintln!("eddy: invalid log level ({e}); using info");
            Targets::new().with_default(tracing::Level::INFO)
        }
    };
    // Colour only for a person at a terminal, not in journald or files.
    use std::io::IsTerminal;
    // A per-layer filter, so its most verbose level becomes tracing's
    // global maximum: disabled `debug!`/`trace!` calls in hot loops then
    // cost one comparison.
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_target(false)
                .with_filter(filter),
        )
        .try_init();
}
