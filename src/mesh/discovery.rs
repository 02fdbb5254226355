//! Where to look for peers, behind one small trait: the addresses in
//! `seeds` ([`StaticSeeds`]), or nodes of the same cluster announcing
//! themselves with multicast DNS on the LAN ([`MdnsDiscovery`], mdns-sd on
//! its own thread, no tokio). Discovery only proposes addresses; the TLS
//! handshake decides whom to trust.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

/// A source of candidate peer addresses.
pub trait Discovery: Send {
    /// Addresses of possible peers learned since the last call (repeats are
    /// fine: membership ignores known ones). Must not block for long.
    fn poll_candidates(&mut self, now: Instant) -> Vec<SocketAddr>;
}

/// `discovery = ["static"]`: resolves `seeds` now and every `interval`
/// (names may start resolving later, or change).
pub struct StaticSeeds {
    seeds: Vec<String>,
    interval: Duration,
    next: Option<Instant>,
    own: Option<SocketAddr>,
}

impl StaticSeeds {
    /// `own` is left out of the results, so one seed list can serve every
    /// node.
    pub fn new(seeds: Vec<String>, own: Option<SocketAddr>, interval: Duration) -> StaticSeeds {
        StaticSeeds {
            seeds,
            interval,
            next: None,
            own,
        }
    }

    /// Resolves every seed; an unresolvable one is logged and skipped.
    pub fn resolve(&self) -> Vec<SocketAddr> {
        let mut out = BTreeSet::new();
        for s in &self.seeds {
            match s.to_socket_addrs() {
                Ok(addrs) => out.extend(addrs.filter(|a| Some(*a) != self.own)),
                Err(e) => tracing::warn!(seed = %s, "cannot resolve seed `{s}`: {e}"),
            }
        }
        out.into_iter().collect()
    }
}

impl Discovery for StaticSeeds {
    fn poll_candidates(&mut self, now: Instant) -> Vec<SocketAddr> {
        if self.next.is_some_and(|n| now < n) {
            return Vec::new();
        }
        self.next = Some(now + self.interval);
        self.resolve()
    }
}

/// Several discoveries at once (`discovery = ["mdns", "static"]`).
pub struct Combined(pub Vec<Box<dyn Discovery>>);

impl Discovery for Combined {
    fn poll_candidates(&mut self, now: Instant) -> Vec<SocketAddr> {
        self.0
            .iter_mut()
            .flat_map(|d| d.poll_candidates(now))
            .collect()
    }
}

/// The mDNS service type of eddy nodes.
pub const MDNS_SERVICE: &str = "_eddy._udp.local.";

/// `discovery = ["mdns"]`: registers this node (instance = node name, TXT
/// `cluster=NAME`) and browses for the others of the same cluster.
pub struct MdnsDiscovery {
    daemon: mdns_sd::ServiceDaemon,
    events: mdns_sd::Receiver<mdns_sd::ServiceEvent>,
    cluster: String,
    own: SocketAddr,
    fullname: String,
}

impl MdnsDiscovery {
    /// Starts the mDNS thread. `interfaces`: if given, only these interface
    /// names are used (tests restrict it to their namespace's links); else
    /// every interface. `advertise` is the QUIC address peers should use; an
    /// unspecified IP lets mdns-sd publish the addresses of the interfaces.
    pub fn start(
        cluster: &str,
        node_name: &str,
        advertise: SocketAddr,
        interfaces: Option<&[String]>,
    ) -> Result<MdnsDiscovery, String> {
        let daemon = mdns_sd::ServiceDaemon::new().map_err(|e| format!("mDNS: {e}"))?;
        if let Some(names) = interfaces {
            daemon
                .disable_interface(mdns_sd::IfKind::All)
                .map_err(|e| format!("mDNS: {e}"))?;
            for n in names {
                daemon
                    .enable_interface(mdns_sd::IfKind::Name(n.clone()))
                    .map_err(|e| format!("mDNS interface {n}: {e}"))?;
            }
        }
        let host = format!("{node_name}.{cluster}.eddy.local.");
        let props = [("cluster", cluster)];
        let ips: Vec<IpAddr> = if advertise.ip().is_unspecified() {
            Vec::new()
        } else {
            vec![advertise.ip()]
        };
        let mut info = mdns_sd::ServiceInfo::new(
            MDNS_SERVICE,
            node_name,
            &host,
            &ips[..],
            advertise.port(),
            &props[..],
        )
        .map_err(|e| format!("mDNS service: {e}"))?;
        if ips.is_empty() {
            info = info.enable_addr_auto();
        }
        let fullname = info.get_fullname().to_string();
        daemon
            .register(info)
            .map_err(|e| format!("mDNS register: {e}"))?;
        let events = daemon
            .browse(MDNS_SERVICE)
            .map_err(|e| format!("mDNS browse: {e}"))?;
        Ok(MdnsDiscovery {
            daemon,
            events,
            cluster: cluster.to_string(),
            own: advertise,
            fullname,
        })
    }
}

impl Discovery for MdnsDiscovery {
    fn poll_candidates(&mut self, _now: Instant) -> Vec<SocketAddr> {
        let mut out = Vec::new();
        // Bounded by what the mDNS thread queued; never waits.
        while let Ok(event) = self.events.try_recv() {
            let mdns_sd::ServiceEvent::ServiceResolved(info) = event else {
                continue;
            };
            if info.get_fullname() == self.fullname
                || info.get_property_val_str("cluster") != Some(self.cluster.as_str())
            {
                continue;
            }
            let port = info.get_port();
            out.extend(
                info.get_addresses()
                    .iter()
                    .map(|ip| SocketAddr::new(ip.to_ip_addr(), port))
                    .filter(|a| *a != self.own),
            );
        }
        out
    }
}

impl Drop for MdnsDiscovery {
    fn drop(&mut self) {
        let _ = self.daemon.unregister(&self.fullname);
        let _ = self.daemon.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_seeds_resolve_skip_self_and_wait_between_rounds() {
        let own: SocketAddr = "127.0.0.1:7400".parse().expect("addr");
        let mut s = StaticSeeds::new(
            vec![
                "127.0.0.1:7400".into(),
                "127.0.0.2:7400".into(),
                "localhost:7401".into(),
                "no-such-host.invalid:1".into(),
            ],
            Some(own),
            Duration::from_secs(30),
        );
        let t0 = Instant::now();
        let got = s.poll_candidates(t0);
        assert!(got.contains(&"127.0.0.2:7400".parse().expect("addr")));
        assert!(got.iter().any(|a| a.port() == 7401 && a.ip().is_loopback()));
        assert!(!got.contains(&own));
        assert!(s.poll_candidates(t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(s.poll_candidates(t0 + Duration::from_secs(31)), got);
    }
}
