//! Reading the pipeline file into [`Config`], collecting every problem.

use std::path::PathBuf;

use toml::de::{DeTable, DeValue};

use super::diag::{Context, Diagnostics, Sp, suggest};
use super::mesh::{read_api, read_mesh};
use super::migration::read_migration;
use super::model::*;
use super::mqtt::{read_mqtt_sink, read_mqtt_source};
use super::net::{NetProtocol, NetSource};

use super::table::{TableReader, describe};
use crate::data::DataType;
use crate::io::codec::{Format, parse_rfc3339_ms};
use crate::io::generator::{
    GeneratorKind, GeneratorSpec, NexmarkEvents, schema as generator_schema,
};

const SOURCE_TYPES: &[&str] = &["generator", "file", "stdin", "mqtt", "http", "tcp", "udp"];
const TRANSFORM_TYPES: &[&str] = &["filter", "map", "select", "drop", "window", "join"];
const SINK_TYPES: &[&str] = &["stdout", "file", "blackhole", "mqtt", "http", "tcp", "udp"];

/// Reads `text` (the contents of `file`). Components that have errors are
/// left out of the returned config; every error is in the diagnostics.
pub(crate) fn read(file: &str, text: &str) -> (Config, Diagnostics) {
    let mut d = Diagnostics::new(file, text);
    let (root, syntax_errors) = DeTable::parse_recoverable(text);
    for e in &syntax_errors {
        let span = e.span().unwrap_or(0..0);
        d.error(
            span,
            &Context::default(),
            format!("invalid TOML: {}", e.message().trim()),
        );
    }
    let mut config = Config {
        node: default_node(),
        components: Vec::new(),
    };
    if !syntax_errors.is_empty() {
        return (config, d);
    }
    let root_span = root.span();
    let root = root.get_ref();
    let mut top = TableReader::new(root, root_span, None);
    if let Some(node) = top.table(&mut d, "node") {
        config.node = read_node(&mut d, node.into_component("node"));
    }
    if let Some(mut cp) = top
        .table(&mut d, "checkpoint")
        .map(|t| t.into_component("checkpoint"))
    {
        let enabled = cp.boolean(&mut d, "enabled").is_none_or(|b| b.value);
        let interval = cp
            .duration_ms(&mut d, "interval", false)
            .map_or(10_000, |i| i.value);
        config.node.checkpoint_interval_ms = enabled.then_some(interval);
        cp.finish(&mut d, "[checkpoint]");
    }
    if let Some(mut st) = top
        .table(&mut d, "state")
        .map(|t| t.into_component("state"))
    {
        if let Some(bytes) = st.size_bytes(&mut d, "cache_bytes") {
            config.node.cache_bytes = bytes;
        }
        st.finish(&mut d, "[state]");
    }
    if let Some(mesh) = top.table(&mut d, "mesh") {
        config.node.mesh = read_mesh(&mut d, mesh.into_component("mesh"), file);
    }
    if let Some(api) = top.table(&mut d, "api") {
        config.node.api = read_api(&mut d, api.into_component("api"));
    }
    if let Some(c) = top.table(&mut d, "controller") {
        config.node.controller =
            super::controller::read_controller(&mut d, c.into_component("controller"));
    }
    if let Some(m) = top.table(&mut d, "migration") {
        config.node.migration = read_migration(&mut d, m.into_component("migration"));
    }
    if let Some(mut tr) = top
        .table(&mut d, "trace")
        .map(|t| t.into_component("trace"))
    {
        if let Some(b) = tr.boolean(&mut d, "enabled") {
            config.node.trace.enabled = b.value;
        }
        if let Some(w) = tr.duration_ms(&mut d, "window", false) {
            if w.value < 10 || w.value > 60_000 {
                d.error(
                    w.span,
                    &tr.ctx("window"),
                    "must be between 10ms and 60s (a window is analysed as a whole)",
                );
            } else {
                config.node.trace.window_ms = w.value as u64;
            }
        }
        tr.finish(&mut d, "[trace]");
    }
    if let Some(t) = top.table(&mut d, "tune") {
        config.node.tune = super::tune::read_tune(&mut d, t.into_component("tune"));
    }
    for section in [Section::Source, Section::Transform, Section::Sink] {
        let Some(v) = top.raw(section.table()) else {
            continue;
        };
        let DeValue::Table(t) = v.get_ref() else {
            d.error(
                v.span(),
                &Context::default(),
                format!(
                    "`{}` must be a table of components, found {}",
                    section.table(),
                    describe(v.get_ref())
                ),
            );
            continue;
        };
        for (id, body) in t.iter() {
            let id = Sp::new(id.get_ref().to_string(), id.span());
            let qualified = format!("{}.{}", section.table(), id.value);
            let DeValue::Table(body_table) = body.get_ref() else {
                d.error(
                    body.span(),
                    &Context {
                        component: Some(qualified),
                        field: None,
                    },
                    "expected a table such as `[sources.NAME]` with a `type`",
                );
                continue;
            };
            check_id(&mut d, &id, &qualified);
            let reader = TableReader::new(body_table, id.span.clone(), Some(qualified));
            config
                .components
                .push(read_component(&mut d, section, id, reader));
        }
    }
    top.finish(&mut d, "a pipeline file");
    super::tune_duration::settle(&mut config, &mut d);
    if !d.has_errors() && config.components.is_empty() {
        d.error(
            0..0,
            &Context::default(),
            "the pipeline has no components; add at least one source and one sink",
        );
    }
    (config, d)
}

fn check_id(d: &mut Diagnostics, id: &Sp<String>, qualified: &str) {
    let ok = !id.value.is_empty()
        && id
            .value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok {
        d.error(
            id.span.clone(),
            &Context {
                component: Some(qualified.to_string()),
                field: None,
            },
            "component ids may only use letters, digits, `_` and `-`",
        );
    }
}

fn default_node() -> NodeConfig {
    let data_dir = std::env::var_os("STATE_DIRECTORY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("eddy-data"));
    NodeConfig {
        name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "eddy".into()),
        dead_letter: data_dir.join("dead_letter.jsonl"),
        data_dir,
        workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        bins: 256,
        batch_size: 1024,
        channel_capacity: 16,
        flush_interval_ms: 0,
        watermark_interval_ms: 10,
        checkpoint_interval_ms: Some(10_000),
        cache_bytes: 256 << 20,
        name_given: false,
        mesh: None,
        api: ApiConfig::default(),
        migration: MigrationConfig::default(),
        trace: TraceConfig::default(),
        controller: ControllerSettings::default(),
        tune: Default::default(),
    }
}

fn read_node(d: &mut Diagnostics, mut t: TableReader<'_, '_>) -> NodeConfig {
    let mut node = default_node();
    if let Some(name) = t.string(d, "name") {
        node.name = name.value;
        node.name_given = true;
    }
    if let Some(dir) = t.string(d, "data_dir") {
        node.data_dir = PathBuf::from(dir.value);
        node.dead_letter = node.data_dir.join("dead_letter.jsonl");
    }
    if let Some(w) = t.integer(d, "workers", 1, 1024) {
        node.workers = w.value as usize;
    }
    if let Some(b) = t.integer(d, "bins", 1, 1 << 16) {
        if (b.value as u64).is_power_of_two() {
            node.bins = b.value as u32;
        } else {
            d.error(
                b.span,
                &t.ctx("bins"),
                format!(
                    "must be a power of two (such as 64, 256 or 1024), not {}",
                    b.value
                ),
            );
        }
    }
    if let Some(p) = t.string(d, "dead_letter") {
        node.dead_letter = PathBuf::from(p.value);
    }
    if let Some(n) = t.integer(d, "batch_size", 1, 1 << 16) {
        node.batch_size = n.value as usize;
    }
    if let Some(n) = t.integer(d, "channel_capacity", 1, 4096) {
        node.channel_capacity = n.value as usize;
    }
    if let Some(ms) = t.duration_ms(d, "flush_interval", true) {
        node.flush_interval_ms = ms.value as u64;
    }
    if let Some(ms) = t.duration_ms(d, "watermark_interval", true) {
        node.watermark_interval_ms = ms.value as u64;
    }
    t.finish(d, "[node]");
    node
}

/// Reads one component. One with errors is kept as [`Spec::Invalid`] so
/// that references to it are not reported as unknown as well.
fn read_component(
    d: &mut Diagnostics,
    section: Section,
    id: Sp<String>,
    mut t: TableReader<'_, '_>,
) -> Component {
    let (types, what) = match section {
        Section::Source => (SOURCE_TYPES, "source"),
        Section::Transform => (TRANSFORM_TYPES, "transform"),
        Section::Sink => (SINK_TYPES, "sink"),
    };
    let type_name = if t.require(d, "type", &format!("; {what} types: {}", types.join(", "))) {
        t.choice(d, "type", types)
    } else {
        None
    };
    let (inputs, inputs_span) = if section == Section::Source {
        (Vec::new(), t.span())
    } else if t.require(
        d,
        "inputs",
        ": the ids of the components that feed this one",
    ) {
        let list = t.string_list(d, "inputs");
        match list {
            Some(l) if l.value.is_empty() => {
                d.error(l.span.clone(), &t.ctx("inputs"), "needs at least one input");
                (Vec::new(), l.span)
            }
            Some(l) => (l.value, l.span),
            None => (Vec::new(), t.span()),
        }
    } else {
        (Vec::new(), t.span())
    };
    let Some(type_name) = type_name else {
        // Without a type the other fields cannot be checked; say only that.
        return Component {
            section,
            type_name: Sp::new(String::new(), id.span.clone()),
            id,
            inputs,
            inputs_span,
            spec: Spec::Invalid,
        };
    };
    let type_name = Sp::new(type_name.value.to_string(), type_name.span);
    let errors_before = d.errors.len();
    let spec = match (section, type_name.value.as_str()) {
        (Section::Source, "generator") => read_generator(d, &mut t).map(Spec::Generator),
        (Section::Source, "file") => read_file_source(d, &mut t).map(Spec::File),
        (Section::Source, "stdin") => read_stdin(d, &mut t).map(Spec::Stdin),
        (Section::Source, "mqtt") => {
            let schema = read_schema(d, &mut t);
            let event_time = read_event_time(d, &mut t, None, 0);
            if let Some(s) = &schema {
                check_event_time_field(d, &t, s, &event_time);
            }
            read_mqtt_source(d, &mut t, schema, event_time).map(Spec::Mqtt)
        }
        (Section::Source, "http") => read_net_source(d, &mut t, NetProtocol::Http),
        (Section::Source, "tcp") => read_net_source(d, &mut t, NetProtocol::Tcp),
        (Section::Source, "udp") => read_net_source(d, &mut t, NetProtocol::Udp),
        (Section::Transform, "filter") => t
            .required_string(d, "condition")
            .map(|condition| Spec::Filter { condition }),
        (Section::Transform, "map") => read_map(d, &mut t),
        (Section::Transform, "select") => {
            read_field_list(d, &mut t).map(|fields| Spec::Select { fields })
        }
        (Section::Transform, "drop") => {
            read_field_list(d, &mut t).map(|fields| Spec::Drop { fields })
        }
        (Section::Transform, "window") => read_window(d, &mut t).map(Spec::Window),
        (Section::Transform, "join") => {
            read_join(d, &mut t, &inputs, inputs_span.clone()).map(Spec::Join)
        }
        (Section::Sink, "stdout") => {
            read_delivery(d, &mut t, false);
            Some(Spec::Stdout {
                format: read_format(d, &mut t),
            })
        }
        (Section::Sink, "file") => {
            let path = t
                .required_string(d, "path")
                .map(|p| Sp::new(PathBuf::from(p.value), p.span));
            let format = read_format(d, &mut t);
            let exactly_once = read_delivery(d, &mut t, true);
            path.map(|path| Spec::FileSink {
                path,
                format,
                exactly_once,
            })
        }
        (Section::Sink, "mqtt") => {
            read_delivery(d, &mut t, false);
            read_mqtt_sink(d, &mut t).map(Spec::MqttSink)
        }
        (Section::Sink, "http") => read_net_sink_spec(d, &mut t, NetProtocol::Http),
        (Section::Sink, "tcp") => read_net_sink_spec(d, &mut t, NetProtocol::Tcp),
        (Section::Sink, "udp") => read_net_sink_spec(d, &mut t, NetProtocol::Udp),
        (Section::Sink, "blackhole") => {
            read_delivery(d, &mut t, false);
            Some(Spec::Blackhole)
        }
        _ => unreachable!("type checked against the list above"),
    };
    t.finish(d, &format!("a {} {what}", type_name.value));
    let spec = spec
        .filter(|_| d.errors.len() == errors_before)
        .unwrap_or(Spec::Invalid);
    Component {
        section,
        id,
        type_name,
        inputs,
        inputs_span,
        spec,
    }
}

/// `delivery`: whether the sink writes each record exactly once across
/// restarts (only sinks that can take back what they wrote can).
fn read_delivery(d: &mut Diagnostics, t: &mut TableReader<'_, '_>, can_be_exact: bool) -> bool {
    let Some(choice) = t.choice(d, "delivery", &["at_least_once", "exactly_once"]) else {
        return false;
    };
    if choice.value == "exactly_once" && !can_be_exact {
        d.error(choice.span, &t.ctx("delivery"), "this sink cannot take back what it wrote, so it is at_least_once; a `file` sink can be exactly_once");
        return false;
    }
    choice.value == "exactly_once"
}

fn read_format(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Format {
    match t.choice(d, "format", &["json", "csv"]).map(|f| f.value) {
        Some("csv") => Format::Csv,
        _ => Format::Json,
    }
}

fn read_event_time(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    default_field: Option<&str>,
    default_delay_ms: i64,
) -> EventTime {
    let field = t
        .string(d, "event_time")
        .or_else(|| default_field.map(|f| Sp::new(f.to_string(), t.span())));
    let delay = t
        .duration_ms(d, "max_out_of_orderness", true)
        .map_or(default_delay_ms, |s| s.value);
    EventTime {
        field,
        max_out_of_orderness_ms: delay,
    }
}

fn read_generator(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Option<GeneratorSource> {
    let kind = match t
        .choice(d, "schema", &["readings", "wcount", "nexmark"])
        .map(|s| s.value)
    {
        Some("wcount") => GeneratorKind::Wcount,
        Some("nexmark") => {
            let events = match t
                .choice(d, "events", &["bid", "auction", "person"])
                .map(|s| s.value)
            {
                Some("auction") => NexmarkEvents::Auction,
                Some("person") => NexmarkEvents::Person,
                _ => NexmarkEvents::Bid,
            };
            GeneratorKind::Nexmark(events)
        }
        _ => GeneratorKind::Readings,
    };
    if !matches!(kind, GeneratorKind::Nexmark(_)) && t.has("events") {
        let span = t.raw("events").map(|v| v.span()).unwrap_or_default();
        d.error(
            span,
            &t.ctx("events"),
            "only a generator with schema = \"nexmark\" has `events`",
        );
    }
    let mut spec = GeneratorSpec::defaults(kind);
    if let Some(seed) = t.integer(d, "seed", 0, i64::MAX) {
        spec.seed = seed.value as u64;
    }
    let rate = t.integer(d, "rate", 1, i64::MAX).map(|r| r.value as u64);
    let count = t.integer(d, "count", 0, i64::MAX).map(|c| c.value as u64);
    let rate_steps = read_rate_steps(d, t, rate.is_some());
    if let Some(keys) = t.integer(d, "keys", 1, i64::MAX) {
        spec.keys = keys.value as u64;
    }
    if let Some(start) = read_start(d, t) {
        spec.start_ms = start;
    }
    if let Some(disorder) = t.duration_ms(d, "disorder", true) {
        if kind == GeneratorKind::Readings {
            spec.disorder_ms = disorder.value;
        } else {
            d.error(
                disorder.span,
                &t.ctx("disorder"),
                "only the readings schema has `disorder`",
            );
        }
    }
    if let Some(hot) = t.integer(d, "hot_key_percent", 0, 100) {
        if matches!(kind, GeneratorKind::Nexmark(_)) {
            d.error(
                hot.span,
                &t.ctx("hot_key_percent"),
                "only the readings and wcount schemas have `hot_key_percent` (NEXMark has its own hot auctions)",
            );
        } else {
            spec.hot_key_percent = hot.value as u8;
        }
    }
    if let (Some(r), GeneratorKind::Readings | GeneratorKind::Nexmark(_)) = (rate, kind) {
        // Event time follows the configured rate and its steps, so windows
        // fire in step with the wall clock.
        spec.events_per_second = r;
        spec.rate_steps = rate_steps.clone();
    }
    let schema = generator_schema(kind);
    let default_field = schema.fields()[spec.event_time_field].name.clone();
    let event_time = read_event_time(d, t, Some(&default_field), spec.disorder_ms);
    if let Some(f) = &event_time.field {
        match schema.field(&f.value) {
            Some((i, field)) if field.ty == DataType::Int => spec.event_time_field = i,
            Some((_, field)) => d.error(
                f.span.clone(),
                &t.ctx("event_time"),
                format!(
                    "`{}` is a {} field; event time must be an int field",
                    f.value, field.ty
                ),
            ),
            None => d.error(
                f.span.clone(),
                &t.ctx("event_time"),
                format!(
                    "no field `{}` in the generator's schema ({})",
                    f.value,
                    schema.describe()
                ),
            ),
        }
    }
    let max_drift_ms = match t.duration_ms(d, "max_drift", true) {
        Some(s) if s.value == 0 => None,
        Some(s) => Some(s.value),
        None => Some(super::model::DEFAULT_MAX_DRIFT_MS),
    };
    Some(GeneratorSource {
        spec,
        rate,
        count,
        rate_steps,
        event_time,
        max_drift_ms,
    })
}

/// `rate_steps = [{ at = "10s", events_per_second = 3000 }, ...]`: a load
/// schedule on top of `rate` (the events and their keys are the same;
/// event time follows the schedule where it follows `rate`).
fn read_rate_steps(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    has_rate: bool,
) -> Vec<RateStep> {
    let Some(list) = t.table_list(d, "rate_steps") else {
        return Vec::new();
    };
    if !has_rate {
        d.error(
            list.span.clone(),
            &t.ctx("rate_steps"),
            "needs `rate`: the rate before the first step",
        );
    }
    let mut steps: Vec<RateStep> = Vec::new();
    for mut s in list.value {
        let at = s.duration_ms(d, "at", false);
        let eps = s.integer(d, "events_per_second", 1, i64::MAX);
        if at.is_none() && !s.has("at") {
            d.error(s.span(), &s.ctx("at"), "is required, e.g. at = \"10s\"");
        }
        if eps.is_none() && !s.has("events_per_second") {
            d.error(
                s.span(),
                &s.ctx("events_per_second"),
                "is required, e.g. events_per_second = 3000",
            );
        }
        if let (Some(at), Some(eps)) = (&at, &eps) {
            let at_d = std::time::Duration::from_millis(at.value as u64);
            if steps.last().is_some_and(|p| p.at >= at_d) {
                d.error(
                    at.span.clone(),
                    &s.ctx("at"),
                    "must be later than the step before it",
                );
            } else {
                steps.push(RateStep {
                    at: at_d,
                    events_per_second: eps.value as u64,
                });
            }
        }
        s.finish(d, "a rate step");
    }
    steps
}

fn read_start(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Option<i64> {
    let v = t.raw("start")?;
    let bad = |d: &mut Diagnostics| {
        d.error(
            v.span(),
            &t.ctx("start"),
            "expected epoch milliseconds or an RFC 3339 time such as \"2026-01-01T00:00:00Z\"",
        )
    };
    match v.get_ref() {
        DeValue::Integer(i) => i.as_str().replace('_', "").parse().ok().or_else(|| {
            bad(d);
            None
        }),
        DeValue::String(s) => parse_rfc3339_ms(s).or_else(|| {
            bad(d);
            None
        }),
        DeValue::Datetime(dt) => parse_rfc3339_ms(&dt.to_string()).or_else(|| {
            bad(d);
            None
        }),
        _ => {
            bad(d);
            None
        }
    }
}

fn read_schema(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Option<SchemaDecl> {
    if !t.require(d, "schema", ": declare the record fields, e.g. schema = { sensor = \"string\", temp = \"float\", ts = \"int\" }") {
        return None;
    }
    let table = t.string_table(d, "schema")?;
    let mut fields = Vec::new();
    for (name, ty) in table.value {
        let parsed = match ty.value.to_ascii_lowercase().as_str() {
            "int" | "integer" | "bigint" | "timestamp_ms" => Some(DataType::Int),
            "float" | "double" => Some(DataType::Float),
            "bool" | "boolean" => Some(DataType::Bool),
            "string" | "str" | "text" => Some(DataType::Str),
            _ => None,
        };
        match parsed {
            Some(p) => fields.push((name, p)),
            None => d.error(
                ty.span,
                &t.ctx("schema"),
                format!(
                    "field `{}`: unknown type `{}`; types: int, float, bool, string",
                    name.value, ty.value
                ),
            ),
        }
    }
    if fields.is_empty() {
        d.error(table.span, &t.ctx("schema"), "declares no fields");
    }
    Some(fields)
}

fn check_event_time_field(
    d: &mut Diagnostics,
    t: &TableReader<'_, '_>,
    schema: &SchemaDecl,
    et: &EventTime,
) {
    let Some(f) = &et.field else { return };
    match schema.iter().find(|(n, _)| n.value == f.value) {
        Some((_, DataType::Int | DataType::Str)) => {}
        Some((_, ty)) => d.error(
            f.span.clone(),
            &t.ctx("event_time"),
            format!(
                "`{}` is a {ty} field; event time must be an int (epoch ms) or a string (RFC 3339)",
                f.value
            ),
        ),
        None => {
            let hint = suggest(&f.value, schema.iter().map(|(n, _)| n.value.as_str()))
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            d.error(
                f.span.clone(),
                &t.ctx("event_time"),
                format!("no field `{}` in `schema`{hint}", f.value),
            )
        }
    }
}

fn read_file_source(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Option<FileSource> {
    let path = t
        .required_string(d, "path")
        .map(|p| Sp::new(PathBuf::from(p.value), p.span));
    let format = read_format(d, t);
    let follow = t.boolean(d, "follow").is_some_and(|b| b.value);
    let rate = t
        .integer(d, "rate", 1, 1_000_000_000)
        .map(|r| r.value as u64);
    let schema = read_schema(d, t);
    let event_time = read_event_time(d, t, None, 0);
    let schema = schema?;
    check_event_time_field(d, t, &schema, &event_time);
    Some(FileSource {
        path: path?,
        format,
        schema,
        follow,
        rate,
        event_time,
    })
}

/// An `http`, `tcp` or `udp` source: a record format like `stdin`'s
/// (`udp`: JSON only, a CSV header cannot span datagrams), then the
/// connector's own settings.
fn read_net_source(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    protocol: NetProtocol,
) -> Option<Spec> {
    let format = if protocol == NetProtocol::Udp {
        t.choice(d, "format", &["json"]);
        Format::Json
    } else {
        read_format(d, t)
    };
    let schema = read_schema(d, t);
    let event_time = read_event_time(d, t, None, 0);
    let settings = super::net::read_net_source(d, t, protocol);
    let schema = schema?;
    check_event_time_field(d, t, &schema, &event_time);
    let (settings, address_span) = settings?;
    Some(Spec::NetSource(NetSource {
        format,
        schema,
        event_time,
        settings,
        address_span,
    }))
}

/// An `http`, `tcp` or `udp` sink (at least once: a peer cannot take back
/// what it received).
fn read_net_sink_spec(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    protocol: NetProtocol,
) -> Option<Spec> {
    read_delivery(d, t, false);
    super::net::read_net_sink(d, t, protocol).map(Spec::NetSink)
}

fn read_stdin(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Option<StdinSource> {
    let format = read_format(d, t);
    let schema = read_schema(d, t);
    let event_time = read_event_time(d, t, None, 0);
    let schema = schema?;
    check_event_time_field(d, t, &schema, &event_time);
    Some(StdinSource {
        format,
        schema,
        event_time,
    })
}

fn read_map(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Option<Spec> {
    if !t.require(
        d,
        "fields",
        ", e.g. fields = { temp_f = \"temp * 9 / 5 + 32\" }",
    ) {
        return None;
    }
    let fields = t.string_table(d, "fields")?;
    if fields.value.is_empty() {
        d.error(fields.span.clone(), &t.ctx("fields"), "names no field");
    }
    // Test-only (undocumented for users): makes this map burn CPU per
    // record, so tests of `eddy trace` know which transform is slow and
    // tests of the watchdog can hold a worker inside an operator.
    let cost =
        t.string(d, "cost_per_record")
            .and_then(|c| match super::table::parse_duration(&c.value) {
                Ok(dur) if dur <= std::time::Duration::from_secs(10) => Some(dur.as_nanos() as u64),
                Ok(_) => {
                    d.error(c.span, &t.ctx("cost_per_record"), "is at most 10s");
                    None
                }
                Err(e) => {
                    d.error(
                        c.span,
                        &t.ctx("cost_per_record"),
                        format!("`{}` is not a duration ({e})", c.value),
                    );
                    None
                }
            });
    Some(Spec::Map {
        fields: fields.value,
        cost_per_record_ns: cost.unwrap_or(0),
    })
}

fn read_field_list(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Option<Vec<Sp<String>>> {
    if !t.require(d, "fields", ": a list of field names") {
        return None;
    }
    let list = t.string_list(d, "fields")?;
    if list.value.is_empty() {
        d.error(list.span.clone(), &t.ctx("fields"), "names no field");
    }
    Some(list.value)
}

fn read_window(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Option<WindowConfig> {
    let key = t.string_list(d, "key").map(|k| k.value).unwrap_or_default();
    let late_output = t.string(d, "late_output");
    let aggregates = if t.require(
        d,
        "aggregates",
        ", e.g. aggregates = { n = \"count(*)\", avg_temp = \"avg(temp)\" }",
    ) {
        let a = t.string_table(d, "aggregates");
        if let Some(a) = &a
            && a.value.is_empty()
        {
            d.error(a.span.clone(), &t.ctx("aggregates"), "names no aggregate");
        }
        a.map(|a| a.value)
    } else {
        None
    };
    let window = if t.require(
        d,
        "window",
        ", e.g. window = { kind = \"tumbling\", size = \"10s\" }",
    ) {
        t.table(d, "window")
    } else {
        None
    };
    let mut w = window?;
    let kind = if w.require(d, "kind", ": tumbling, hopping or session") {
        w.choice(d, "kind", &["tumbling", "hopping", "session"])
            .map(|k| k.value)
    } else {
        None
    };
    let need =
        |w: &mut TableReader<'_, '_>, d: &mut Diagnostics, key: &'static str| -> Option<i64> {
            if w.require(d, key, " for this window kind") {
                w.duration_ms(d, key, false).map(|v| v.value)
            } else {
                None
            }
        };
    let kind = match kind {
        Some("tumbling") => need(&mut w, d, "size").map(|size_ms| WindowKind::Tumbling { size_ms }),
        Some("hopping") => {
            let size = need(&mut w, d, "size");
            let slide = need(&mut w, d, "slide");
            match (size, slide) {
                (Some(size_ms), Some(slide_ms)) if slide_ms > size_ms => {
                    d.error(
                        w.span(),
                        &w.ctx("slide"),
                        "a hopping window's `slide` must not be longer than its `size`",
                    );
                    None
                }
                (Some(size_ms), Some(slide_ms)) if size_ms / slide_ms > 1000 => {
                    d.error(w.span(), &w.ctx("slide"), "`size` / `slide` puts every record in over 1000 windows; use a longer slide");
                    None
                }
                (Some(size_ms), Some(slide_ms)) => Some(WindowKind::Hopping { size_ms, slide_ms }),
                _ => None,
            }
        }
        Some("session") => need(&mut w, d, "gap").map(|gap_ms| WindowKind::Session { gap_ms }),
        _ => None,
    };
    let allowed_lateness_ms = w
        .duration_ms(d, "allowed_lateness", true)
        .map_or(0, |v| v.value);
    w.finish(d, "`window`");
    Some(WindowConfig {
        key,
        kind: kind?,
        allowed_lateness_ms,
        aggregates: aggregates?,
        late_output,
    })
}

fn read_join(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    inputs: &[Sp<String>],
    inputs_span: std::ops::Range<usize>,
) -> Option<JoinConfig> {
    if inputs.len() != 2 && !inputs.is_empty() {
        d.error(
            inputs_span,
            &t.ctx("inputs"),
            format!(
                "a join takes exactly two inputs (left, right), found {}",
                inputs.len()
            ),
        );
    }
    let on = t.string_list(d, "on");
    let left_on = t.string_list(d, "left_on");
    let right_on = t.string_list(d, "right_on");
    let (left_on, right_on) = match (on, left_on, right_on) {
        (Some(on), None, None) => (on.value.clone(), on.value),
        (None, Some(l), Some(r)) => {
            if l.value.len() != r.value.len() {
                d.error(
                    r.span.clone(),
                    &t.ctx("right_on"),
                    format!(
                        "`left_on` has {} fields but `right_on` has {}",
                        l.value.len(),
                        r.value.len()
                    ),
                );
            }
            (l.value, r.value)
        }
        (Some(on), _, _) => {
            d.error(
                on.span,
                &t.ctx("on"),
                "give either `on` or both `left_on` and `right_on`, not both",
            );
            return None;
        }
        _ => {
            d.error(
                t.span(),
                &t.ctx("on"),
                "missing join keys: `on = [\"key\"]`, or `left_on` and `right_on`",
            );
            return None;
        }
    };
    if left_on.is_empty() {
        d.error(t.span(), &t.ctx("on"), "needs at least one key field");
    }
    let within = t.duration_ms(d, "within", false);
    let window = t.table(d, "window");
    let mode = match (within, window) {
        (Some(w), None) => Some(JoinMode::Interval { within_ms: w.value }),
        (None, Some(mut w)) => {
            if w.require(d, "kind", "; a join window is \"tumbling\"") {
                w.choice(d, "kind", &["tumbling"]);
            }
            let size = if w.require(d, "size", "") {
                w.duration_ms(d, "size", false)
            } else {
                None
            };
            w.finish(d, "a join's `window`");
            size.map(|s| JoinMode::Tumbling { size_ms: s.value })
        }
        (Some(w), Some(_)) => {
            d.error(
                w.span,
                &t.ctx("within"),
                "give either `within` (interval join) or `window` (tumbling window join), not both",
            );
            None
        }
        (None, None) => {
            d.error(
                t.span(),
                &t.ctx("window"),
                "missing `window = { kind = \"tumbling\", size = \"10s\" }` or `within = \"5s\"`",
            );
            None
        }
    };
    Some(JoinConfig {
        left_on,
        right_on,
        mode: mode?,
    })
}
