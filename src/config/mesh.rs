//! The `[mesh]` and `[api]` sections: read with the same spanned getters as
//! the rest of the file, so every mistake names its line, column, section
//! and field. What the fields mean lives with the types they fill
//! ([`MeshConfig`], [`ApiConfig`]).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::de::DeValue;

use super::diag::{Diagnostics, Sp};
use super::model::ApiConfig;
use super::table::{TableReader, describe};
use crate::mesh::config::MeshConfig;

/// Addresses the errors of `[mesh]` and `[api]` show as examples.
const MESH_EXAMPLE: &str = r#""0.0.0.0:7400" or "[::1]:7400""#;
const MESH_FIELDS: &str = "[mesh]";

/// Reads `[mesh]`. `file` is the pipeline file's name: relative certificate
/// paths are taken relative to its directory, so a config and its
/// certificates can move together. `None` when a required field is
/// missing or any field is wrong (every problem is in `d`).
pub(crate) fn read_mesh(
    d: &mut Diagnostics,
    mut t: TableReader<'_, '_>,
    file: &str,
) -> Option<MeshConfig> {
    let errors_before = d.errors.len();
    let base = Path::new(file).parent().unwrap_or(Path::new(""));
    let mut path = |t: &mut TableReader<'_, '_>, key: &'static str, what: &str| {
        let hint = format!(": {what}");
        if !t.require(d, key, &hint) {
            return None;
        }
        t.string(d, key).map(|p| {
            if p.value.is_empty() {
                d.error(p.span.clone(), &t.ctx(key), "must not be empty");
            }
            base.join(PathBuf::from(p.value))
        })
    };
    let ca_cert = path(
        &mut t,
        "ca_cert",
        "the cluster CA certificate written by `eddy cluster init DIR` (DIR/ca.crt)",
    );
    let cert = path(
        &mut t,
        "cert",
        "this node's certificate written by `eddy cluster issue` (DIR/NODE.crt)",
    );
    let key = path(
        &mut t,
        "key",
        "this node's private key written by `eddy cluster issue` (DIR/NODE.key)",
    );
    let mut spans: Vec<(&'static str, Range<usize>)> = Vec::new();
    let mut mesh = MeshConfig::new(
        ca_cert.clone().unwrap_or_default(),
        cert.clone().unwrap_or_default(),
        key.clone().unwrap_or_default(),
    );
    if let Some(a) = t.socket_addr(d, "listen", MESH_EXAMPLE) {
        spans.push(("listen", a.span.clone()));
        mesh.listen = a.value;
    }
    if let Some(a) = t.socket_addr(d, "advertise", MESH_EXAMPLE) {
        spans.push(("advertise", a.span.clone()));
        if a.value.ip().is_unspecified() || a.value.port() == 0 {
            d.error(
                a.span.clone(),
                &t.ctx("advertise"),
                format!(
                    "`{}` cannot be reached by other nodes; give this node's own address and port",
                    a.value
                ),
            );
        }
        mesh.advertise = Some(a.value);
    }
    let mut seed_items: Vec<Sp<String>> = Vec::new();
    if let Some(seeds) = t.string_list(d, "seeds") {
        spans.push(("seeds", seeds.span.clone()));
        mesh.seeds = seeds.value.iter().map(|s| s.value.clone()).collect();
        seed_items = seeds.value;
    }
    match discovery(d, &mut t) {
        Some(Sp { value, span }) => {
            spans.push(("discovery", span));
            mesh.discovery = value;
        }
        None => mesh.discovery = MeshConfig::default_discovery(&mesh.seeds),
    }
    if let Some(c) = t.string(d, "cluster") {
        spans.push(("cluster", c.span.clone()));
        mesh.cluster = Some(c.value);
    }
    for (key, field) in [
        ("probe_period", &mut mesh.probe_period),
        ("suspect_timeout", &mut mesh.suspect_timeout),
        ("keep_alive", &mut mesh.keep_alive),
        ("idle_timeout", &mut mesh.idle_timeout),
    ] {
        if let Some(ms) = t.duration_ms(d, key, false) {
            spans.push((key, ms.span.clone()));
            *field = Duration::from_millis(ms.value as u64);
        }
    }
    // Frame lengths travel as a u32.
    if let Some(n) = t.integer(d, "max_frame_bytes", 1, u32::MAX as i64) {
        spans.push(("max_frame_bytes", n.span.clone()));
        mesh.max_frame_bytes = n.value as usize;
    }
    if let Some(n) = t.integer(d, "expect_members", 1, u16::MAX as i64) {
        spans.push(("expect_members", n.span.clone()));
        mesh.expect_members = Some(n.value as u32);
    }
    if let Some(ms) = t.duration_ms(d, "expect_timeout", false) {
        spans.push(("expect_timeout", ms.span.clone()));
        mesh.expect_timeout = Duration::from_millis(ms.value as u64);
    }
    if ca_cert.is_some() && cert.is_some() && key.is_some() {
        let span_of = |field: &str| {
            spans
                .iter()
                .find(|(f, _)| *f == field)
                .map(|(_, s)| s.clone())
        };
        for (field, message) in mesh.check() {
            // A problem with one seed points at that seed.
            let span = seed_items
                .iter()
                .find(|s| field == "seeds" && message.contains(&format!("`{}`", s.value)))
                .map(|s| s.span.clone())
                .or_else(|| span_of(field))
                // Seeds that are missing are missing because of `discovery`.
                .or_else(|| (field == "seeds").then(|| span_of("discovery")).flatten())
                .unwrap_or_else(|| t.span());
            d.error(span, &t.ctx(field), message);
        }
    }
    t.finish(d, MESH_FIELDS);
    (d.errors.len() == errors_before).then_some(mesh)
}

/// `discovery = "mdns"` or `discovery = ["mdns", "static"]`.
fn discovery(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
) -> Option<Sp<Vec<crate::mesh::config::DiscoveryKind>>> {
    let v = t.raw("discovery")?;
    let items: Vec<(&str, Range<usize>)> = match v.get_ref() {
        DeValue::String(s) => vec![(s.as_ref(), v.span())],
        DeValue::Array(a) => {
            let mut items = Vec::new();
            for item in a.iter() {
                match item.get_ref() {
                    DeValue::String(s) => items.push((s.as_ref(), item.span())),
                    other => d.error(
                        item.span(),
                        &t.ctx("discovery"),
                        format!("expected \"mdns\" or \"static\", found {}", describe(other)),
                    ),
                }
            }
            items
        }
        other => {
            d.error(
                v.span(),
                &t.ctx("discovery"),
                format!(
                    "expected \"mdns\", \"static\" or a list of them, found {}",
                    describe(other)
                ),
            );
            return None;
        }
    };
    let mut kinds = Vec::new();
    for (s, span) in items {
        match MeshConfig::parse_discovery(s) {
            Ok(k) if kinds.contains(&k) => {
                d.error(span, &t.ctx("discovery"), format!("`{s}` is listed twice"))
            }
            Ok(k) => kinds.push(k),
            Err(e) => d.error(span, &t.ctx("discovery"), e),
        }
    }
    Some(Sp::new(kinds, v.span()))
}

/// Reads `[api]`. A non-loopback address is allowed but warned about: the
/// API has no authentication.
pub(crate) fn read_api(d: &mut Diagnostics, mut t: TableReader<'_, '_>) -> ApiConfig {
    let mut api = ApiConfig::default();
    if let Some(b) = t.boolean(d, "enabled") {
        api.enabled = b.value;
    }
    if let Some(a) = t.socket_addr(d, "address", MESH_EXAMPLE) {
        api.address = a.value;
        api.explicit = true;
        if api.enabled && !a.value.ip().is_loopback() {
            d.warning(
                a.span,
                &t.ctx("address"),
                format!(
                    "{} is not a loopback address: the local API has no authentication, and \
                     anyone who can reach it can read this node's status",
                    a.value
                ),
            );
        }
    }
    t.finish(d, "[api]");
    api
}
