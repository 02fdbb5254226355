//! Where to look for peers, behind one small trait: the addresses in
//! `seeds` ([`StaticSeeds`]), or nodes of the same cluster announcing
//! themselves with a multicast beacon on the LAN
//! ([`super::beacon::BeaconDiscovery`]). Discovery only proposes
//! addresses; the TLS handshake decides whom to trust.

use std::collections::BTreeSet;
use std::net::{SocketAddr, ToSocketAddrs};
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
