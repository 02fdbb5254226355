//! The local API's `/health` and `/status`, and the status document that
//! `eddy peers` reads back. One definition of the JSON for both sides.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::http::{Response, Router};
use crate::mesh::driver::MeshNode;
use crate::mesh::identity::node_id_of;
use crate::mesh::membership::{MemberInfo, MemberState};

/// `GET /status`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Status {
    /// This node's name (with `[mesh]`, its certificate's).
    pub(crate) node: String,
    /// The pipeline file this process runs.
    pub(crate) pipeline: String,
    /// `"running"`, or `"stopping"` once a signal asked it to drain.
    pub(crate) state: String,
    pub(crate) uptime_ms: u64,
    /// The cluster name; `null` without `[mesh]`.
    pub(crate) cluster: Option<String>,
    /// Every member this node knows, itself included, ordered by address.
    /// Without `[mesh]`, this node alone (with no address).
    pub(crate) members: Vec<Member>,
}

/// One row of the member table.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Member {
    /// The node id: 16 hex digits, a stable hash of the node name.
    pub(crate) id: String,
    pub(crate) name: String,
    /// The mesh address other nodes use (`[mesh] advertise`).
    pub(crate) addr: Option<String>,
    /// `"alive"`, `"suspect"` or `"down"`.
    pub(crate) state: String,
    /// Round-trip time measured on the QUIC connection; `null` when there
    /// is none yet (and for this node itself).
    pub(crate) rtt_ms: Option<f64>,
    /// Milliseconds since a packet last came from the member; 0 for this
    /// node; `null` when none came yet.
    pub(crate) last_seen_ms: Option<u64>,
    /// The member's incarnation (its start time in Unix ms; higher after
    /// every restart).
    pub(crate) incarnation: u64,
    /// Whether this row is the node that answered.
    pub(crate) local: bool,
}

/// `eddy peers --json`: the members alone.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct Members {
    pub(crate) members: Vec<Member>,
}

/// What `/status` reads, shared with the daemon's run loop.
pub(crate) struct StatusSource {
    pub(crate) node: String,
    pub(crate) pipeline: String,
    pub(crate) started: Instant,
    pub(crate) mesh: Option<Arc<MeshNode>>,
    pub(crate) stopping: AtomicBool,
}

fn state_name(s: MemberState) -> &'static str {
    match s {
        MemberState::Alive => "alive",
        MemberState::Suspect => "suspect",
        MemberState::Down => "down",
    }
}

fn node_id(name: &str) -> String {
    format!("{:016x}", node_id_of(name))
}

impl StatusSource {
    pub(crate) fn status(&self, now: Instant) -> Status {
        let (cluster, members) = match &self.mesh {
            Some(mesh) => {
                let me = mesh.identity().addr;
                let cluster = Some(mesh.endpoint().hello().cluster.clone());
                let rows = mesh
                    .members()
                    .iter()
                    .map(|m| member_row(m, m.id.addr == me, now))
                    .collect();
                (cluster, rows)
            }
            None => (
                None,
                vec![Member {
                    id: node_id(&self.node),
                    name: self.node.clone(),
                    addr: None,
                    state: "alive".into(),
                    rtt_ms: None,
                    last_seen_ms: Some(0),
                    incarnation: 0,
                    local: true,
                }],
            ),
        };
        Status {
            node: self.node.clone(),
            pipeline: self.pipeline.clone(),
            state: if self.stopping.load(Ordering::Relaxed) {
                "stopping"
            } else {
                "running"
            }
            .into(),
            uptime_ms: now.saturating_duration_since(self.started).as_millis() as u64,
            cluster,
            members,
        }
    }
}

fn member_row(m: &MemberInfo, local: bool, now: Instant) -> Member {
    Member {
        id: node_id(&m.id.name),
        name: m.id.name.clone(),
        addr: Some(m.id.addr.to_string()),
        state: state_name(m.state).into(),
        rtt_ms: if local {
            None
        } else {
            m.rtt.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3)
        },
        last_seen_ms: if local {
            Some(0)
        } else {
            m.last_seen
                .map(|t| now.saturating_duration_since(t).as_millis() as u64)
        },
        incarnation: m.id.incarnation,
        local,
    }
}

/// `GET /health`: 200 `ok` while running, 503 `stopping` while draining.
/// `GET /status`: [`Status`] as JSON.
pub(crate) fn routes(router: Router, source: Arc<StatusSource>) -> Router {
    let health = source.clone();
    router
        .get("/health", move |_| {
            if health.stopping.load(Ordering::Relaxed) {
                Response::text(503, "stopping")
            } else {
                Response::text(200, "ok")
            }
        })
        .get("/status", move |_| {
            Response::json(200, &source.status(Instant::now()))
        })
}

/// Parses an `--api` argument: `host:port`, optionally with `http://`
/// before and `/` after.
pub(crate) fn parse_api_target(s: &str) -> Result<Vec<SocketAddr>, String> {
    use std::net::ToSocketAddrs;
    let t = s.trim();
    let t = t.strip_prefix("http://").unwrap_or(t);
    let t = t.trim_end_matches('/');
    t.to_socket_addrs()
        .map(|a| a.collect::<Vec<_>>())
        .map_err(|e| format!("`{s}` is not host:port ({e})"))
        .and_then(|a| {
            if a.is_empty() {
                Err(format!("`{s}` resolves to no address"))
            } else {
                Ok(a)
            }
        })
}

/// One HTTP/1.1 request to a node's local API (the first of `addrs`
/// that accepts), for the CLI commands that talk to a running eddy; the
/// status code and body.
pub(crate) fn request(
    addrs: &[SocketAddr],
    api: &str,
    method: &str,
    path: &str,
    body: &str,
    answer_timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let mut stream = None;
    let mut last = String::new();
    for a in addrs {
        match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
            Ok(s) => {
                stream = Some((s, *a));
                break;
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    let Some((mut s, addr)) = stream else {
        return Err(format!(
            "no eddy node answers at {api} ({last}); is `eddy run` running with its local API? Use --api ADDR"
        ));
    };
    let io = |e: std::io::Error| format!("{addr}: {e}");
    s.set_read_timeout(Some(answer_timeout)).map_err(io)?;
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: eddy\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(io)?;
    let mut raw = Vec::new();
    s.take(64 << 20).read_to_end(&mut raw).map_err(io)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{addr} did not answer with HTTP"))?;
    let code = String::from_utf8_lossy(&raw[..split])
        .lines()
        .next()
        .and_then(|l| l.get(9..12))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("{addr} did not answer with HTTP"))?;
    Ok((code, raw[split + 4..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_without_mesh_lists_itself() {
        let src = StatusSource {
            node: "pi-3".into(),
            pipeline: "p.toml".into(),
            started: Instant::now(),
            mesh: None,
            stopping: AtomicBool::new(false),
        };
        let s = src.status(Instant::now());
        assert_eq!(s.members.len(), 1);
        assert_eq!(s.members[0].name, "pi-3");
        assert_eq!(s.members[0].id.len(), 16);
        assert!(s.members[0].local && s.members[0].addr.is_none());
        let json = serde_json::to_value(&s).expect("json");
        assert_eq!(json["state"], "running");
        assert!(json["cluster"].is_null());
        let back: Status = serde_json::from_value(json).expect("parse");
        assert_eq!(back, s);
    }

    #[test]
    fn api_targets() {
        assert_eq!(
            parse_api_target("http://127.0.0.1:7401/").expect("ok"),
            vec!["127.0.0.1:7401".parse::<SocketAddr>().expect("addr")]
        );
        assert!(parse_api_target("127.0.0.1").is_err());
    }
}
