//! The pipeline file: TOML in, a typed [`Config`] out, and every problem
//! found reported with its file, line, column, component and field.

mod controller;
mod diag;
mod mesh;
mod migration;
mod model;
mod mqtt;
mod net;

mod read;
mod table;
mod tune;
mod tune_duration;

mod validate;

pub(crate) use diag::{Context, Diagnostics, Sp};
pub(crate) use model::*;
pub(crate) use mqtt::{MqttSinkConfig, MqttSourceConfig};
pub(crate) use net::{HttpUrl, NetProtocol, NetSinkSettings, NetSourceSettings};
pub(crate) use table::parse_duration;
pub(crate) use tune::{ProfileOn, Setting, TuneConfig, Unit, fmt as tune_fmt};

/// ` (did you mean `x`?)` when one of `candidates` is close to `word`.
pub(crate) fn suggest_name<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    diag::suggest(word, candidates)
        .map(|c| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// Reads and checks a pipeline file's text. Returns the config (whose
/// components with errors are [`Spec::Invalid`]) and all diagnostics.
pub(crate) fn parse(file: &str, text: &str) -> (Config, Diagnostics) {
    let (config, mut d) = read::read(file, text);
    if d.errors
        .iter()
        .any(|e| e.message.starts_with("invalid TOML"))
    {
        return (config, d);
    }
    validate::check_graph(&config, &mut d);
    net::check_listen_addresses(&config, &mut d);
    (config, d)
}
