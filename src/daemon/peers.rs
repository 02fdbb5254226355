//! `eddy peers [--api ADDR] [--json]`: asks a running node's local API for
//! its member table and prints it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use super::status::{Members, Status, parse_api_target};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read (a status of thousands of members fits).
const MAX_ANSWER_BYTES: u64 = 16 << 20;

pub(crate) fn peers(api: &str, json: bool) -> ExitCode {
    let status = match fetch_status(api) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("eddy peers: {e}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        let members = Members {
            members: status.members,
        };
        match serde_json::to_string(&members) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("eddy peers: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table(&status));
    }
    ExitCode::SUCCESS
}

/// `GET /status` from the API at `api`.
pub(crate) fn fetch_status(api: &str) -> Result<Status, String> {
    let addrs = parse_api_target(api)?;
    let (code, body) = get(&addrs, "/status")?;
    if code != 200 {
        return Err(format!(
            "{api} answered {code} to GET /status: {}",
            String::from_utf8_lossy(&body).trim()
        ));
    }
    serde_json::from_slice(&body)
        .map_err(|e| format!("{api} did not answer with an eddy status ({e}); is it eddy's API?"))
}

/// A plain HTTP/1.1 GET with timeouts; returns the status code and body.
pub(crate) fn get(addrs: &[SocketAddr], path: &str) -> Result<(u16, Vec<u8>), String> {
    let mut last = String::new();
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(s) => {
                stream = Some((s, *a));
                break;
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    let Some((mut s, addr)) = stream else {
        return Err(format!(
            "no eddy node answers at {last}; is `eddy run` running with its local API \
             ([api], default 127.0.0.1:7401)? Use --api ADDR for another address"
        ));
    };
    let io = |e: std::io::Error| format!("{addr}: {e}");
    s.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    s.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: eddy-peers\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    )
    .map_err(io)?;
    let mut raw = Vec::new();
    s.take(MAX_ANSWER_BYTES).read_to_end(&mut raw).map_err(io)?;
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(format!("{addr} did not answer with HTTP"));
    };
    let head = String::from_utf8_lossy(&raw[..split]);
    let code = head
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("HTTP/1."))
        .and_then(|l| l.get(2..5))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("{addr} did not answer with HTTP"))?;
    Ok((code, raw[split + 4..].to_vec()))
}

/// The member table for a person.
pub(crate) fn table(s: &Status) -> String {
    let count = |state: &str| s.members.iter().filter(|m| m.state == state).count();
    let mut out = match &s.cluster {
        Some(c) => format!(
            "node {} in cluster `{c}`: {} members, {} alive, {} suspect, {} down\n",
            s.node,
            s.members.len(),
            count("alive"),
            count("suspect"),
            count("down")
        ),
        None => format!("node {} runs alone (no [mesh] in {})\n", s.node, s.pipeline),
    };
    let rows: Vec<[String; 5]> = s
        .members
        .iter()
        .map(|m| {
            [
                if m.local {
                    format!("{} (this node)", m.name)
                } else {
                    m.name.clone()
                },
                m.addr.clone().unwrap_or_else(|| "-".into()),
                m.state.clone(),
                m.rtt_ms.map_or("-".into(), |r| format!("{r:.2} ms")),
                match (m.local, m.last_seen_ms) {
                    (true, _) => "-".into(),
                    (false, Some(ms)) => format!("{:.1} s ago", ms as f64 / 1000.0),
                    (false, None) => "never".into(),
                },
            ]
        })
        .collect();
    let header = ["NAME", "ADDR", "STATE", "RTT", "LAST SEEN"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::status::Member;

    #[test]
    fn table_lines_up() {
        let m = |name: &str, local: bool, state: &str| Member {
            id: "0".repeat(16),
            name: name.into(),
            addr: Some("127.0.0.1:7400".into()),
            state: state.into(),
            rtt_ms: (!local).then_some(0.25),
            last_seen_ms: Some(if local { 0 } else { 1500 }),
            incarnation: 1,
            local,
        };
        let s = Status {
            node: "a".into(),
            pipeline: "p.toml".into(),
            state: "running".into(),
            uptime_ms: 1,
            cluster: Some("blue".into()),
            members: vec![m("a", true, "alive"), m("bb", false, "down")],
        };
        let t = table(&s);
        assert!(
            t.starts_with("node a in cluster `blue`: 2 members, 1 alive, 0 suspect, 1 down\n"),
            "{t}"
        );
        assert!(
            t.contains("bb             127.0.0.1:7400  down   0.25 ms  1.5 s ago"),
            "{t}"
        );
        assert!(
            t.contains("a (this node)  127.0.0.1:7400  alive  -        -"),
            "{t}"
        );
    }

    #[test]
    fn nothing_listening_is_a_clear_error() {
        // A port just released: nothing listens there.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port");
        let e = fetch_status(&addr.to_string()).expect_err("no daemon");
        assert!(e.contains("no eddy node answers at"), "{e}");
    }
}
