//! The `[mesh]` section of the pipeline file as a plain struct with its
//! defaults. The config module reads TOML into it (with spans for errors);
//! this file only says what the fields mean and what they default to.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The port eddy listens on when `listen` gives none: 7400/udp (QUIC).
pub const DEFAULT_PORT: u16 = 7400;

/// How a node finds its peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiscoveryKind {
    /// `"mdns"`: LAN multicast. Every node announces its cluster name, node
    /// name and mesh address to 224.0.0.251:7399/udp and listens for the
    /// others (see `beacon`; the name predates the beacon, which replaced
    /// mDNS proper).
    Mdns,
    /// The addresses in `seeds`.
    Static,
}

/// `[mesh]`: how this node joins its cluster. Absent section: a single node,
/// no mesh.
#[derive(Clone, Debug, PartialEq)]
pub struct MeshConfig {
    /// Address and UDP port the QUIC endpoint binds (listens and connects
    /// from the same socket). Default `0.0.0.0:7400`.
    pub listen: SocketAddr,
    /// The address other nodes should use to reach this one (it is the
    /// node's address in membership). Default: `listen` if it is a concrete
    /// address, else the first non-loopback IPv4 address of this host with
    /// `listen`'s port. Set it on hosts with several networks.
    pub advertise: Option<SocketAddr>,
    /// Ways to find peers, tried together: `["mdns"]`, `["static"]` or both.
    /// Default `["static"]` when `seeds` is not empty, else `["mdns"]`.
    pub discovery: Vec<DiscoveryKind>,
    /// `host:port` of nodes to contact first (`static` discovery). Names are
    /// resolved when the node starts and again when it retries.
    pub seeds: Vec<String>,
    /// The cluster CA's certificate (PEM), written by `eddy cluster init`.
    /// Peers must present a certificate signed by it.
    pub ca_cert: PathBuf,
    /// This node's certificate (PEM), written by `eddy cluster issue`.
    pub cert: PathBuf,
    /// This node's private key (PEM). Must not be readable by others.
    pub key: PathBuf,
    /// The cluster name. Default: the name in `ca_cert`. When given, it must
    /// equal the name in both `ca_cert` and `cert`; peers whose certificate
    /// names another cluster are refused.
    pub cluster: Option<String>,
    /// How often SWIM probes a random member. Default `1s`.
    pub probe_period: Duration,
    /// How long a suspect member has to refute before it is declared down.
    /// Detection time is at most about `probe_period + suspect_timeout` plus
    /// the time to be picked for a probe. Default `3s`.
    pub suspect_timeout: Duration,
    /// QUIC keep-alive interval, so idle connections survive NATs and lost
    /// peers are noticed. Default `2s`.
    pub keep_alive: Duration,
    /// A connection with no traffic for this long is closed. Default `10s`.
    pub idle_timeout: Duration,
    /// Largest frame accepted on a stream; a peer sending more is
    /// disconnected. Default 8 MiB.
    pub max_frame_bytes: usize,
    /// Runs the pipeline distributed over this many members (this node
    /// included): `eddy run` waits until that many are alive, then splits
    /// the bins of every keyed operator evenly over all their workers.
    /// Every member must run the same pipeline with the same value. `None`
    /// (the default): the pipeline runs on this node alone; the mesh only
    /// keeps membership.
    pub expect_members: Option<u32>,
    /// How long `eddy run` waits for `expect_members` alive members before
    /// it gives up. Default `60s`.
    pub expect_timeout: Duration,
}

impl MeshConfig {
    /// A config with every default, using the given certificate files.
    pub fn new(ca_cert: PathBuf, cert: PathBuf, key: PathBuf) -> MeshConfig {
        MeshConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
            advertise: None,
            discovery: vec![DiscoveryKind::Mdns],
            seeds: Vec::new(),
            ca_cert,
            cert,
            key,
            cluster: None,
            probe_period: Duration::from_secs(1),
            suspect_timeout: Duration::from_secs(3),
            keep_alive: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(10),
            max_frame_bytes: super::frame::DEFAULT_MAX_FRAME_BYTES,
            expect_members: None,
            expect_timeout: Duration::from_secs(60),
        }
    }

    /// The default for `discovery` given `seeds`, as documented on the field.
    pub fn default_discovery(seeds: &[String]) -> Vec<DiscoveryKind> {
        if seeds.is_empty() {
            vec![DiscoveryKind::Mdns]
        } else {
            vec![DiscoveryKind::Static]
        }
    }

    /// Parses a `discovery` entry; the error lists the valid values.
    pub fn parse_discovery(s: &str) -> Result<DiscoveryKind, String> {
        match s {
            "mdns" => Ok(DiscoveryKind::Mdns),
            "static" => Ok(DiscoveryKind::Static),
            other => Err(format!(
                "unknown discovery `{other}`; expected \"mdns\" or \"static\""
            )),
        }
    }

    /// Checks that do not touch files: `static` needs seeds, timeouts are
    /// ordered. Returns every problem as `(field, message)`.
    pub fn check(&self) -> Vec<(&'static str, String)> {
        let mut errors = Vec::new();
        if self.expect_members == Some(0) {
            errors.push(("expect_members", "must be at least 1".into()));
        }
        if self.expect_timeout.is_zero() {
            errors.push(("expect_timeout", "must be positive".into()));
        }
        if self.discovery.is_empty() {
            errors.push((
                "discovery",
                "needs at least one of \"mdns\", \"static\"".into(),
            ));
        }
        if self.discovery.contains(&DiscoveryKind::Static) && self.seeds.is_empty() {
            errors.push(("seeds", "`static` discovery needs at least one seed".into()));
        }
        for s in &self.seeds {
            if s.rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .is_none()
            {
                errors.push(("seeds", format!("`{s}` is not `host:port`")));
            }
        }
        if self.keep_alive >= self.idle_timeout {
            errors.push((
                "keep_alive",
                "must be shorter than idle_timeout, or idle connections close".into(),
            ));
        }
        if self.probe_period.is_zero() {
            errors.push(("probe_period", "must be positive".into()));
        }
        if self.max_frame_bytes < super::frame::MIN_MAX_FRAME_BYTES {
            errors.push((
                "max_frame_bytes",
                format!("must be at least {}", super::frame::MIN_MAX_FRAME_BYTES),
            ));
        }
        if let Some(c) = &self.cluster
            && let Err(e) = super::ca::check_name("cluster", c)
        {
            errors.push(("cluster", e.to_string()));
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_checks() {
        let mut c = MeshConfig::new("ca.crt".into(), "n.crt".into(), "n.key".into());
        assert_eq!(c.listen.to_string(), "0.0.0.0:7400");
        assert!(c.check().is_empty());
        c.discovery = vec![DiscoveryKind::Static];
        assert_eq!(c.check()[0].0, "seeds");
        c.seeds = vec!["10.0.0.2".into()];
        assert!(c.check()[0].1.contains("host:port"));
        c.seeds = vec!["node-b:7400".into()];
        assert!(c.check().is_empty());
        assert_eq!(
            MeshConfig::default_discovery(&c.seeds),
            vec![DiscoveryKind::Static]
        );
        assert!(
            MeshConfig::parse_discovery("dns")
                .unwrap_err()
                .contains("mdns")
        );
        c.cluster = Some("Bad Name".into());
        assert_eq!(c.check()[0].0, "cluster");
    }
}
