//! What the MQTT source and sink share: the broker connection settings, and
//! the thread that confines a tokio runtime to one connector.
//!
//! rumqttc runs on tokio; eddy does not. Each MQTT component gets its own
//! thread with a current-thread tokio runtime, so tokio never touches a
//! worker and a slow broker only ever blocks its own connector.

use std::time::Duration;

use rumqttc::{MqttOptions, QoS};

/// Largest MQTT packet accepted or sent (a payload plus its topic).
pub(crate) const MAX_PACKET_BYTES: usize = 1 << 20;

/// Waiting before reconnecting after a failed connection; doubles up to
/// [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(200);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// How to reach the broker, as written in the pipeline file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MqttConn {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) client_id: String,
    /// `false` keeps the session (subscriptions, unacknowledged QoS 1
    /// messages) on the broker across reconnects and restarts.
    pub(crate) clean_session: bool,
    pub(crate) keep_alive: Duration,
    pub(crate) credentials: Option<(String, String)>,
    /// Connection attempts that may fail in a row before the run fails;
    /// `None` retries for ever.
    pub(crate) retries: Option<u32>,
}

impl MqttConn {
    /// `mqtt://host:port` (or `tcp://`), for messages.
    pub(crate) fn address(&self) -> String {
        format!("mqtt://{}:{}", self.host, self.port)
    }

    pub(crate) fn options(&self) -> MqttOptions {
        let mut o = MqttOptions::new(self.client_id.clone(), self.host.clone(), self.port);
        o.set_clean_session(self.clean_session)
            .set_keep_alive(self.keep_alive)
            .set_max_packet_size(MAX_PACKET_BYTES, MAX_PACKET_BYTES);
        if let Some((user, password)) = &self.credentials {
            o.set_credentials(user.clone(), password.clone());
        }
        o
    }
}

/// Splits `mqtt://host:port` into host and port (1883 when left out).
pub(crate) fn parse_url(url: &str) -> Result<(String, u16), String> {
    let rest = if let Some(r) = url.strip_prefix("mqtt://") {
        r
    } else if let Some(r) = url.strip_prefix("tcp://") {
        r
    } else if url.starts_with("mqtts://") || url.starts_with("ssl://") {
        return Err("TLS (mqtts://) is not supported yet; use mqtt://".into());
    } else {
        return Err("expected mqtt://HOST:PORT, such as \"mqtt://127.0.0.1:1883\"".into());
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') || rest.contains('@') {
        return Err("expected mqtt://HOST:PORT with no path or user; give `username` and `password` as fields".into());
    }
    // `[::1]:1883`, `host:1883`, `host`.
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
            let port: u16 = p
                .parse()
                .map_err(|_| format!("`{p}` is not a port number"))?;
            (h, port)
        }
        _ => (rest, 1883),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("the URL names no host".into());
    }
    if port == 0 {
        return Err("port 0 is not a broker's port".into());
    }
    Ok((host.to_string(), port))
}

/// Whether `filter` is a valid subscription filter: `+` and `#` only as
/// whole levels, `#` only last.
pub(crate) fn check_filter(filter: &str) -> Result<(), String> {
    if filter.is_empty() {
        return Err("a topic filter cannot be empty".into());
    }
    let levels: Vec<&str> = filter.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        if level.contains('#') && (*level != "#" || i + 1 != levels.len()) {
            return Err(format!(
                "`{filter}`: `#` must be a whole level and the last one (e.g. \"sensors/#\")"
            ));
        }
        if level.contains('+') && *level != "+" {
            return Err(format!(
                "`{filter}`: `+` must be a whole level (e.g. \"sensors/+/temp\")"
            ));
        }
    }
    Ok(())
}

pub(crate) fn qos_of(level: u8) -> QoS {
    match level {
        0 => QoS::AtMostOnce,
        _ => QoS::AtLeastOnce,
    }
}

/// Runs `body` on a new thread named `name` inside a current-thread tokio
/// runtime that lives and dies with that thread.
pub(crate) fn spawn_connector<F>(
    name: String,
    body: impl FnOnce() -> F + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: std::future::Future<Output = ()>,
{
    std::thread::Builder::new().name(name).spawn(move || {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(body()),
            Err(e) => tracing::error!("cannot start the MQTT connector's runtime: {e}"),
        }
    })
}

/// Consecutive connection failures and the wait before the next attempt.
pub(crate) struct Backoff {
    failures: u32,
    limit: Option<u32>,
}

impl Backoff {
    pub(crate) fn new(limit: Option<u32>) -> Backoff {
        Backoff { failures: 0, limit }
    }

    pub(crate) fn connected(&mut self) {
        self.failures = 0;
    }

    /// Counts a failure; `None` once more failed in a row than allowed,
    /// else how long to wait before trying again.
    pub(crate) fn failed(&mut self) -> Option<Duration> {
        self.failures += 1;
        if self.limit.is_some_and(|l| self.failures > l) {
            return None;
        }
        let exp = self.failures.saturating_sub(1).min(6);
        Some((RECONNECT_FIRST * 2u32.pow(exp)).min(RECONNECT_MAX))
    }

    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("mqtt://127.0.0.1:1884"),
            Ok(("127.0.0.1".into(), 1884))
        );
        assert_eq!(parse_url("tcp://broker"), Ok(("broker".into(), 1883)));
        assert_eq!(parse_url("mqtt://[::1]:1885"), Ok(("::1".into(), 1885)));
        assert!(parse_url("mqtts://x:8883").unwrap_err().contains("TLS"));
        assert!(parse_url("http://x").is_err());
        assert!(parse_url("mqtt://x:99999").is_err());
        assert!(parse_url("mqtt://x:1883/path").is_err());
    }

    #[test]
    fn filters() {
        for ok in ["a/b", "sensors/+/temp", "#", "a/#", "+", "+/+"] {
            assert!(check_filter(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/#/b", "a#", "a/b+", "a/+b/c"] {
            assert!(check_filter(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn backoff_gives_up_after_the_limit() {
        let mut b = Backoff::new(Some(2));
        assert!(b.failed().is_some());
        assert!(b.failed().is_some());
        assert!(b.failed().is_none());
        b.connected();
        assert_eq!(b.failed(), Some(RECONNECT_FIRST));
    }
}
