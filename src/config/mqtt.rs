//! `type = "mqtt"` sources and sinks: read with the same spanned getters as
//! the rest of the file, so every mistake names its line, column,
//! component and field. What the fields mean is in the README's MQTT
//! section and on [`MqttConn`].

use std::time::Duration;

use super::diag::{Diagnostics, Sp};
use super::model::{EventTime, SchemaDecl};
use super::table::TableReader;
use crate::io::codec::Format;
use crate::io::{MqttConn, TopicPart, check_filter, parse_topic, parse_url};

/// A `mqtt` source as written.
#[derive(Debug)]
pub(crate) struct MqttSourceConfig {
    pub(crate) conn: MqttConnConfig,
    pub(crate) topics: Vec<String>,
    pub(crate) qos: u8,
    /// The field the topic goes into, if any.
    pub(crate) topic_field: Option<Sp<String>>,
    pub(crate) format: Format,
    pub(crate) schema: SchemaDecl,
    pub(crate) event_time: EventTime,
}

/// A `mqtt` sink as written.
#[derive(Debug)]
pub(crate) struct MqttSinkConfig {
    pub(crate) conn: MqttConnConfig,
    /// `{field}` parts are resolved against the input by the planner.
    pub(crate) topic: Sp<Vec<TopicPart>>,
    pub(crate) qos: u8,
    pub(crate) retain: bool,
}

/// The connection, with the client id left out when not given (the
/// planner derives one from the node name and component id).
#[derive(Debug)]
pub(crate) struct MqttConnConfig {
    pub(crate) conn: MqttConn,
    pub(crate) client_id_given: bool,
}

impl MqttConnConfig {
    /// The connection settings; `eddy-NODE-ID` as the client id unless
    /// one was given (stable across restarts, as a persistent session
    /// needs, and distinct per node and component).
    pub(crate) fn resolve(&self, node: &str, component: &str) -> MqttConn {
        let mut c = self.conn.clone();
        if !self.client_id_given {
            let clean: String = format!("eddy-{node}-{component}")
                .chars()
                .map(|c| if c.is_ascii_graphic() { c } else { '_' })
                .collect();
            c.client_id = clean;
        }
        c
    }
}

fn read_conn(d: &mut Diagnostics, t: &mut TableReader<'_, '_>, qos: u8) -> Option<MqttConnConfig> {
    let url = if t.require(d, "url", ", e.g. url = \"mqtt://127.0.0.1:1883\"") {
        t.string(d, "url")
    } else {
        None
    };
    let address = url.and_then(|u| match parse_url(&u.value) {
        Ok(a) => Some(a),
        Err(e) => {
            d.error(u.span, &t.ctx("url"), e);
            None
        }
    });
    let client_id = t.string(d, "client_id");
    if let Some(id) = &client_id
        && (id.value.is_empty() || id.value.len() > 128)
    {
        d.error(
            id.span.clone(),
            &t.ctx("client_id"),
            "must be 1 to 128 characters",
        );
    }
    // A persistent session is what lets a restart receive what was not
    // acknowledged; at QoS 0 nothing is, so the session can be clean.
    let clean_session = t.boolean(d, "clean_session").map_or(qos == 0, |b| b.value);
    let keep_alive = t
        .duration_ms(d, "keep_alive", false)
        .map_or(Duration::from_secs(30), |k| {
            Duration::from_millis(k.value as u64)
        });
    let username = t.string(d, "username");
    let password = t.string(d, "password");
    let credentials = match (username, password) {
        (Some(u), Some(p)) => Some((u.value, p.value)),
        (Some(u), None) => Some((u.value, String::new())),
        (None, Some(p)) => {
            d.error(p.span, &t.ctx("password"), "a password needs a `username`");
            None
        }
        (None, None) => None,
    };
    let retries = t
        .integer(d, "retries", 0, u32::MAX as i64)
        .map(|r| r.value as u32);
    let (host, port) = address?;
    Some(MqttConnConfig {
        client_id_given: client_id.is_some(),
        conn: MqttConn {
            host,
            port,
            client_id: client_id.map(|c| c.value).unwrap_or_default(),
            clean_session,
            keep_alive,
            credentials,
            retries,
        },
    })
}

fn read_qos(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> u8 {
    t.integer(d, "qos", 0, 1).map_or(1, |q| q.value as u8)
}

/// MQTT payloads are JSON, one record per line.
fn read_json_format(d: &mut Diagnostics, t: &mut TableReader<'_, '_>) -> Format {
    if let Some(f) = t.choice(d, "format", &["json", "csv"])
        && f.value != "json"
    {
        d.error(
            f.span,
            &t.ctx("format"),
            "MQTT payloads are read and written as JSON (one record per line); CSV needs a header that messages do not carry",
        );
    }
    Format::Json
}

pub(crate) fn read_mqtt_source(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    schema: Option<SchemaDecl>,
    event_time: EventTime,
) -> Option<MqttSourceConfig> {
    let qos = read_qos(d, t);
    let conn = read_conn(d, t, qos);
    let format = read_json_format(d, t);
    let topics = if t.require(
        d,
        "topics",
        ", e.g. topics = [\"sensors/+/temp\"] (`+` matches one level, `#` the rest)",
    ) {
        t.string_list(d, "topics")
    } else {
        None
    };
    if let Some(list) = &topics {
        if list.value.is_empty() {
            d.error(list.span.clone(), &t.ctx("topics"), "names no topic filter");
        }
        for f in &list.value {
            if let Err(e) = check_filter(&f.value) {
                d.error(f.span.clone(), &t.ctx("topics"), e);
            }
        }
    }
    let topic_field = t.string(d, "topic_field");
    let schema = schema?;
    if let Some(f) = &topic_field {
        if schema.iter().any(|(n, _)| n.value == f.value) {
            d.error(
                f.span.clone(),
                &t.ctx("topic_field"),
                format!(
                    "`{}` is already a field of `schema`; the topic gets a field of its own (a string), so choose another name",
                    f.value
                ),
            );
        }
        if event_time
            .field
            .as_ref()
            .is_some_and(|e| e.value == f.value)
        {
            d.error(
                f.span.clone(),
                &t.ctx("topic_field"),
                "the topic cannot be the event time",
            );
        }
    }
    if let Some(conn) = &conn
        && qos == 1
        && conn.conn.clean_session
    {
        let span = t.raw("clean_session").map(|v| v.span()).unwrap_or(t.span());
        d.warning(
            span,
            &t.ctx("clean_session"),
            "with a clean session the broker forgets unacknowledged messages when eddy stops: a restart loses them",
        );
    }
    Some(MqttSourceConfig {
        conn: conn?,
        topics: topics?.value.into_iter().map(|s| s.value).collect(),
        qos,
        topic_field,
        format,
        schema,
        event_time,
    })
}

pub(crate) fn read_mqtt_sink(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
) -> Option<MqttSinkConfig> {
    let qos = read_qos(d, t);
    let conn = read_conn(d, t, qos);
    read_json_format(d, t);
    let retain = t.boolean(d, "retain").is_some_and(|b| b.value);
    let topic = if t.require(
        d,
        "topic",
        ", e.g. topic = \"eddy/out\" or \"eddy/{sensor}\" (a field's value)",
    ) {
        t.string(d, "topic")
    } else {
        None
    };
    let topic = topic.and_then(|s| match parse_topic(&s.value) {
        Ok(parts) => Some(Sp::new(parts, s.span)),
        Err(e) => {
            d.error(s.span, &t.ctx("topic"), e);
            None
        }
    });
    Some(MqttSinkConfig {
        conn: conn?,
        topic: topic?,
        qos,
        retain,
    })
}
