//! The network connectors' settings (`http`, `tcp` and `udp` sources and
//! sinks), read with the same spanned getters as the rest of the file so
//! every mistake names its line, column, component and field.

use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use super::diag::{Context, Diagnostics, Sp};
use super::model::{Config, EventTime, SchemaDecl, Spec};
use super::table::TableReader;
use crate::io::codec::Format;

/// The transport of a network source or sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NetProtocol {
    Http,
    Tcp,
    Udp,
}

impl NetProtocol {
    pub(crate) fn name(self) -> &'static str {
        match self {
            NetProtocol::Http => "http",
            NetProtocol::Tcp => "tcp",
            NetProtocol::Udp => "udp",
        }
    }
}

/// An `http`, `tcp` or `udp` source: newline-delimited records from the
/// network, decoded by `format` into `schema`.
#[derive(Debug)]
pub(crate) struct NetSource {
    pub(crate) format: Format,
    pub(crate) schema: SchemaDecl,
    pub(crate) event_time: EventTime,
    pub(crate) settings: NetSourceSettings,
    /// Where `address` is written.
    pub(crate) address_span: Range<usize>,
}

/// What a network source needs beyond its record format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NetSourceSettings {
    pub(crate) protocol: NetProtocol,
    /// Address and port to listen on.
    pub(crate) address: SocketAddr,
    /// `http`: the request path that takes `POST`s. Default `/`.
    pub(crate) path: String,
    /// `http`: records waiting for the pipeline before requests are
    /// answered 503. Default 100 000.
    pub(crate) queue_records: u64,
    /// `http`: request-body bytes whose records wait for the pipeline
    /// before requests are answered 503. Default 32 MiB.
    pub(crate) queue_bytes: u64,
    /// `http`: a larger request body is answered 413. Default 4 MiB. At
    /// most `max_connections` bodies are read at once, so the source holds
    /// at most `queue_bytes + max_connections * max_body_bytes` of bodies.
    pub(crate) max_body_bytes: u64,
    /// `http` and `tcp`: connections served at once. Default 64 (`tcp`:
    /// 256; a connection there holds at most one line).
    pub(crate) max_connections: u64,
    /// `tcp` and `udp`: a longer line goes to the dead-letter output
    /// (truncated). Default 1 MiB (`udp`: a datagram's 64 KiB at most).
    pub(crate) max_line_bytes: u64,
}

/// An `http`, `tcp` or `udp` sink: JSON lines to a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NetSinkSettings {
    pub(crate) protocol: NetProtocol,
    /// `tcp`/`udp`: `host:port`, resolved at each (re)connection.
    pub(crate) address: String,
    /// `http`: the parsed `url`.
    pub(crate) url: Option<HttpUrl>,
    /// `http`: extra request headers, in file order.
    pub(crate) headers: Vec<(String, String)>,
    /// `http`: most records in one request. Default 1000.
    pub(crate) batch_records: u64,
    /// `http`: most body bytes in one request. Default 1 MiB.
    pub(crate) batch_bytes: u64,
    /// `http`: longest a record waits for its batch to fill. Default 1s.
    pub(crate) batch_timeout: Duration,
    /// `http` and `tcp`: attempts after the first before a batch is given
    /// up (dropped and counted as errors). Default 10.
    pub(crate) max_retries: u64,
    /// First wait before a retry; doubled each time. Default 100ms.
    pub(crate) retry_initial_backoff: Duration,
    /// Longest wait between retries. Default 5s.
    pub(crate) retry_max_backoff: Duration,
    /// Time for connecting, and for each read or write. Default 10s.
    pub(crate) timeout: Duration,
    /// `udp`: most bytes in one datagram (lines are never split; a longer
    /// line is dropped and counted). Default 1400 (one Ethernet frame).
    pub(crate) max_datagram_bytes: u64,
}

/// `http://host:port/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HttpUrl {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Path and query, starting with `/`.
    pub(crate) target: String,
}

impl HttpUrl {
    /// `host:port` for connecting and for the `Host` header.
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses an `http://` URL; the error says what is wrong.
pub(crate) fn parse_http_url(s: &str) -> Result<HttpUrl, String> {
    let rest = if let Some(r) = s.strip_prefix("http://") {
        r
    } else if s.starts_with("https://") {
        return Err("https is not supported: send plain http:// (to a local TLS proxy such as stunnel or nginx if the peer is remote)".into());
    } else {
        return Err("expected a URL such as \"http://127.0.0.1:8080/ingest\"".into());
    };
    let (authority, target) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.contains('@') {
        return Err("credentials in the URL are not supported; use `headers`".into());
    }
    let (host, port) = if let Some(h) = authority.strip_prefix('[') {
        let (h, after) = h.split_once(']').ok_or("unclosed `[` in the host")?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| format!("bad port `{p}`"))?,
            None if after.is_empty() => 80,
            None => return Err(format!("unexpected `{after}` after the host")),
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (
                h.to_string(),
                p.parse::<u16>().map_err(|_| format!("bad port `{p}`"))?,
            ),
            None => (authority.to_string(), 80),
        }
    };
    if host.is_empty() {
        return Err("the URL has no host".into());
    }
    Ok(HttpUrl { host, port, target })
}

const DEFAULT_MAX_LINE: u64 = 1 << 20;
const UDP_MAX_PAYLOAD: u64 = 65_507;

/// Two sources (or a source and the local API) cannot listen on one
/// address and port: say so now rather than when the second cannot bind.
pub(crate) fn check_listen_addresses(config: &Config, d: &mut Diagnostics) {
    let mut taken: Vec<(bool, SocketAddr, String)> = Vec::new();
    if config.node.api.enabled {
        taken.push((
            false,
            config.node.api.address,
            "the local API ([api] address)".into(),
        ));
    }
    for c in &config.components {
        let Spec::NetSource(s) = &c.spec else {
            continue;
        };
        let udp = s.settings.protocol == NetProtocol::Udp;
        let a = s.settings.address;
        if a.port() == 0 {
            continue;
        }
        let clash = taken.iter().find(|(u, b, _)| {
            *u == udp
                && b.port() == a.port()
                && (b.ip() == a.ip() || b.ip().is_unspecified() || a.ip().is_unspecified())
        });
        match clash {
            Some((_, b, who)) => d.error(
                s.address_span.clone(),
                &Context {
                    component: Some(c.qualified_id()),
                    field: Some("address".into()),
                },
                format!("{a} overlaps {b}, where {who} listens; give each its own port"),
            ),
            None => taken.push((udp, a, c.qualified_id())),
        }
    }
}

/// The settings of a network source and where its `address` is written;
/// the record format is read by the caller like any source's.
pub(crate) fn read_net_source(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    protocol: NetProtocol,
) -> Option<(NetSourceSettings, Range<usize>)> {
    let address = if t.require(
        d,
        "address",
        ": the address and port to listen on, such as \"127.0.0.1:8080\"",
    ) {
        t.socket_addr(d, "address", r#""127.0.0.1:8080" or "[::]:8080""#)
    } else {
        None
    };
    let mut s = NetSourceSettings {
        protocol,
        address: address
            .as_ref()
            .map_or(SocketAddr::from(([127, 0, 0, 1], 0)), |a| a.value),
        path: "/".into(),
        queue_records: 100_000,
        queue_bytes: 32 << 20,
        max_body_bytes: 4 << 20,
        max_connections: if protocol == NetProtocol::Http {
            64
        } else {
            256
        },
        max_line_bytes: if protocol == NetProtocol::Udp {
            UDP_MAX_PAYLOAD
        } else {
            DEFAULT_MAX_LINE
        },
    };
    if protocol == NetProtocol::Http {
        if let Some(p) = t.string(d, "path") {
            if !p.value.starts_with('/') || p.value.contains(['?', ' ', '#']) {
                d.error(
                    p.span.clone(),
                    &t.ctx("path"),
                    "expected a path such as \"/ingest\" (starting with `/`, without a query)",
                );
            }
            s.path = p.value;
        }
        if let Some(n) = t.integer(d, "queue_records", 1, 1 << 40) {
            s.queue_records = n.value as u64;
        }
        let queue_bytes = sized(d, t, "queue_bytes");
        let body = sized(d, t, "max_body_bytes");
        if let Some(b) = &queue_bytes {
            s.queue_bytes = b.value;
        }
        if let Some(b) = &body {
            s.max_body_bytes = b.value;
        }
        if s.max_body_bytes > s.queue_bytes {
            let (span, field) = match (&body, &queue_bytes) {
                (Some(b), _) => (b.span.clone(), "max_body_bytes"),
                (None, Some(q)) => (q.span.clone(), "queue_bytes"),
                (None, None) => (t.span(), "max_body_bytes"),
            };
            d.error(
                span,
                &t.ctx(field),
                format!(
                    "`max_body_bytes` ({}) is larger than `queue_bytes` ({}): a request that large could never be queued",
                    s.max_body_bytes, s.queue_bytes
                ),
            );
        }
    }
    if protocol != NetProtocol::Udp
        && let Some(n) = t.integer(d, "max_connections", 1, 65_536)
    {
        s.max_connections = n.value as u64;
    }
    if protocol != NetProtocol::Http
        && let Some(n) = sized(d, t, "max_line_bytes")
    {
        let max = if protocol == NetProtocol::Udp {
            UDP_MAX_PAYLOAD
        } else {
            1 << 30
        };
        if n.value == 0 || n.value > max {
            d.error(
                n.span,
                &t.ctx("max_line_bytes"),
                format!("must be from 1 to {max} bytes"),
            );
        } else {
            s.max_line_bytes = n.value;
        }
    }
    address.map(|a| (s, a.span))
}

/// The settings of a network sink. Its format is JSON lines.
pub(crate) fn read_net_sink(
    d: &mut Diagnostics,
    t: &mut TableReader<'_, '_>,
    protocol: NetProtocol,
) -> Option<NetSinkSettings> {
    let errors_before = d.errors.len();
    let mut s = NetSinkSettings {
        protocol,
        address: String::new(),
        url: None,
        headers: Vec::new(),
        batch_records: 1000,
        batch_bytes: 1 << 20,
        batch_timeout: Duration::from_secs(1),
        max_retries: 10,
        retry_initial_backoff: Duration::from_millis(100),
        retry_max_backoff: Duration::from_secs(5),
        timeout: Duration::from_secs(10),
        max_datagram_bytes: 1400,
    };
    t.choice(d, "format", &["json"]);
    if protocol == NetProtocol::Http {
        if let Some(u) = t.required_string(d, "url") {
            match parse_http_url(&u.value) {
                Ok(url) => s.url = Some(url),
                Err(e) => d.error(u.span, &t.ctx("url"), format!("`{}`: {e}", u.value)),
            }
        }
        if let Some(h) = t.string_table(d, "headers") {
            for (name, value) in h.value {
                let bad_name = name.value.is_empty()
                    || !name
                        .value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b));
                let reserved = ["content-length", "host", "transfer-encoding", "connection"]
                    .contains(&name.value.to_ascii_lowercase().as_str());
                if bad_name || reserved || value.value.contains(['\r', '\n']) {
                    d.error(
                        name.span,
                        &t.ctx("headers"),
                        format!(
                            "`{}`: {}",
                            name.value,
                            if reserved {
                                "this header is set by eddy"
                            } else {
                                "not a valid header name and value"
                            }
                        ),
                    );
                } else {
                    s.headers.push((name.value, value.value));
                }
            }
        }
        if let Some(n) = t.integer(d, "batch_records", 1, 1 << 30) {
            s.batch_records = n.value as u64;
        }
        if let Some(n) = sized(d, t, "batch_bytes") {
            s.batch_bytes = n.value.max(1);
        }
        if let Some(ms) = t.duration_ms(d, "batch_timeout", false) {
            s.batch_timeout = Duration::from_millis(ms.value as u64);
        }
    } else if t.require(
        d,
        "address",
        ": the peer's `host:port`, such as \"127.0.0.1:9000\"",
    ) && let Some(a) = t.string(d, "address")
    {
        match a.value.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
                s.address = a.value
            }
            _ => d.error(
                a.span,
                &t.ctx("address"),
                format!(
                    "`{}` is not `host:port`, such as \"127.0.0.1:9000\" or \"collector.lan:9000\"",
                    a.value
                ),
            ),
        }
    }
    if protocol != NetProtocol::Udp {
        if let Some(n) = t.integer(d, "max_retries", 0, 1_000_000) {
            s.max_retries = n.value as u64;
        }
        if let Some(ms) = t.duration_ms(d, "retry_initial_backoff", false) {
            s.retry_initial_backoff = Duration::from_millis(ms.value as u64);
        }
        let max = t.duration_ms(d, "retry_max_backoff", false);
        if let Some(ms) = &max {
            s.retry_max_backoff = Duration::from_millis(ms.value as u64);
        }
        if s.retry_max_backoff < s.retry_initial_backoff {
            let span = max.map_or(t.span(), |m| m.span);
            d.error(
                span,
                &t.ctx("retry_max_backoff"),
                "must not be shorter than `retry_initial_backoff`",
            );
        }
        if let Some(ms) = t.duration_ms(d, "timeout", false) {
            s.timeout = Duration::from_millis(ms.value as u64);
        }
    } else if let Some(n) = sized(d, t, "max_datagram_bytes") {
        if n.value == 0 || n.value > UDP_MAX_PAYLOAD {
            d.error(
                n.span,
                &t.ctx("max_datagram_bytes"),
                format!("must be from 1 to {UDP_MAX_PAYLOAD} bytes"),
            );
        } else {
            s.max_datagram_bytes = n.value;
        }
    }
    (d.errors.len() == errors_before).then_some(s)
}

/// A size with its span: an integer or a string such as `"64MiB"`.
fn sized(d: &mut Diagnostics, t: &mut TableReader<'_, '_>, key: &'static str) -> Option<Sp<u64>> {
    let span = t.raw(key).map(|v| v.span())?;
    t.size_bytes(d, key).map(|v| Sp::new(v, span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_urls() {
        let u = parse_http_url("http://127.0.0.1:9000/in?x=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("127.0.0.1", 9000, "/in?x=1")
        );
        let u = parse_http_url("http://collector.lan").unwrap();
        assert_eq!(
            (u.port, u.target.as_str(), u.authority().as_str()),
            (80, "/", "collector.lan:80")
        );
        let u = parse_http_url("http://[::1]:81/x").unwrap();
        assert_eq!(
            (u.host.as_str(), u.authority().as_str()),
            ("::1", "[::1]:81")
        );
        assert!(parse_http_url("https://x/").unwrap_err().contains("https"));
        assert!(parse_http_url("http://x:99999/").is_err());
        assert!(parse_http_url("ftp://x/").is_err());
    }
}
