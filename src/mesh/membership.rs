//! SWIM membership (foca) as a sans-IO state machine: feed it packets with
//! [`Membership::handle_datagram`], time with [`Membership::handle_timeout`],
//! peers to try with [`Membership::handle_discovered`]; pull packets to send
//! with [`Membership::poll_transmit`], the next wake-up with
//! [`Membership::poll_timeout`] and changes with [`Membership::poll_event`].
//! Time is always passed in, so the same machine runs under the real driver
//! and under the seeded simulator.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foca::{AccumulatingRuntime, Foca, Identity, OwnedNotification, PostcardCodec, State, Timer};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::payload::{NodePayload, PayloadHandler, PayloadStore, PayloadVersion};

/// A member as SWIM knows it. `incarnation` is the node's start time (ms), so
/// a restarted node has a new, higher identity at the same address and wins
/// over its previous life; [`Identity::renew`] bumps it when the node learns
/// it was declared down, so it rejoins on its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemberId {
    pub addr: SocketAddr,
    pub name: String,
    pub incarnation: u64,
}

impl Identity for MemberId {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(MemberId {
            incarnation: self.incarnation.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.incarnation > adversary.incarnation
    }
}

/// Liveness of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    Alive,
    /// Missed a probe; it has `suspect_timeout` to refute.
    Suspect,
    Down,
}

/// One row of the member table.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberInfo {
    pub id: MemberId,
    pub state: MemberState,
    /// Round-trip time, as the transport measured it.
    pub rtt: Option<Duration>,
    /// Last time a packet came from this address.
    pub last_seen: Option<Instant>,
    pub payload: Option<(PayloadVersion, Vec<u8>)>,
}

/// A change worth telling the rest of the node about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipEvent {
    Up(MemberId),
    Down(MemberId),
    /// A node came back at the same address with a new incarnation.
    Replaced {
        old: MemberId,
        new: MemberId,
    },
    /// This node was declared down and rejoined under a new identity.
    Rejoined(MemberId),
    /// A node published a new payload.
    Payload(SocketAddr),
}

/// A packet to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub dst: SocketAddr,
    pub bytes: Vec<u8>,
}

/// Tuning of the machine (from `[mesh]`).
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    pub probe_period: Duration,
    pub suspect_timeout: Duration,
    /// Expected cluster size; sets how often updates are repeated.
    pub cluster_size_hint: u32,
    /// How often to announce to discovered peers and members we believe
    /// down (this heals partitions).
    pub rejoin_interval: Duration,
    /// How often this node's payload is published again even if unchanged:
    /// broadcasts are repeated only a few times, and a node that was
    /// partitioned away or lost them must still catch up.
    pub payload_refresh: Duration,
    /// Largest payload a node may publish.
    pub max_payload_bytes: usize,
    /// Largest packet; must fit a QUIC datagram on a 1200-byte path.
    pub max_packet_bytes: usize,
}

impl Default for MembershipConfig {
    fn default() -> MembershipConfig {
        MembershipConfig {
            probe_period: Duration::from_secs(1),
            suspect_timeout: Duration::from_secs(3),
            cluster_size_hint: 8,
            rejoin_interval: Duration::from_secs(5),
            payload_refresh: Duration::from_secs(10),
            max_payload_bytes: 512,
            max_packet_bytes: 1024,
        }
    }
}

/// Why an input was not taken. No variant changes the member table except
/// as documented.
#[derive(Debug)]
pub enum MembershipError {
    /// A packet foca could not use (malformed, too big, from ourselves).
    /// Nothing changed.
    Packet(String),
    /// A payload over the limit. Nothing changed.
    PayloadTooLarge { len: usize, max: usize },
}

impl std::fmt::Display for MembershipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MembershipError::Packet(e) => write!(f, "membership packet refused: {e}"),
            MembershipError::PayloadTooLarge { len, max } => {
                write!(f, "payload of {len} bytes is over the limit of {max}")
            }
        }
    }
}

impl std::error::Error for MembershipError {}

/// Bounds on queues the driver is expected to drain after every call.
const MAX_QUEUED_TRANSMITS: usize = 4096;
const MAX_QUEUED_EVENTS: usize = 4096;
/// Addresses remembered for rejoining.
const MAX_CANDIDATES: usize = 1024;

type Swim = Foca<MemberId, PostcardCodec, StdRng, PayloadHandler>;

/// The membership state machine of one node.
pub struct Membership {
    foca: Swim,
    runtime: AccumulatingRuntime<MemberId>,
    config: MembershipConfig,
    /// Pending foca timers: (deadline, order of submission, timer).
    timers: Vec<(Instant, u64, Timer<MemberId>)>,
    timer_seq: u64,
    transmits: VecDeque<Transmit>,
    events: VecDeque<MembershipEvent>,
    payloads: Arc<Mutex<PayloadStore>>,
    own_payload: Option<Vec<u8>>,
    payload_seq: u64,
    candidates: BTreeSet<SocketAddr>,
    next_rejoin: Instant,
    next_payload_refresh: Instant,
    rtt: BTreeMap<SocketAddr, Duration>,
    last_seen: BTreeMap<SocketAddr, Instant>,
    dropped: u64,
    /// Set by [`Membership::leave`]: being down is then what we asked for.
    left: bool,
    #[cfg(test)]
    pub(crate) errors: Vec<String>,
}

/// foca's settings for `config`.
fn foca_config(config: &MembershipConfig) -> foca::Config {
    let size = NonZeroU32::new(config.cluster_size_hint.max(1)).unwrap_or(NonZeroU32::MIN);
    let mut fc = foca::Config::new_lan(size);
    fc.probe_period = config.probe_period;
    // Direct probe answer deadline: half a period, as new_lan does.
    fc.probe_rtt = config.probe_period / 2;
    fc.suspect_to_down_after = config.suspect_timeout;
    fc.max_packet_size = NonZeroUsize::new(config.max_packet_bytes).unwrap_or(NonZeroUsize::MIN);
    fc.periodic_announce_to_down_members = Some(foca::PeriodicParams {
        frequency: config.rejoin_interval,
        num_members: NonZeroUsize::new(2).unwrap_or(NonZeroUsize::MIN),
    });
    // A rejoining node is a new identity at the same address: forget the
    // old one within minutes rather than foca's default day.
    fc.remove_down_after = Some(Duration::from_secs(600));
    fc
}

impl Membership {
    /// A machine for `id`. `seed` drives foca's random choices (member to
    /// probe, gossip targets), so a run replays from it.
    pub fn new(id: MemberId, config: MembershipConfig, seed: u64, now: Instant) -> Membership {
        let fc = foca_config(&config);
        let payloads = Arc::new(Mutex::new(PayloadStore::default()));
        let handler = PayloadHandler {
            store: payloads.clone(),
            max_bytes: config.max_payload_bytes,
        };
        let foca = Foca::with_custom_broadcast(
            id,
            fc,
            StdRng::seed_from_u64(seed),
            PostcardCodec,
            handler,
        );
        Membership {
            foca,
            runtime: AccumulatingRuntime::new(),
            timers: Vec::new(),
            timer_seq: 0,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            payloads,
            own_payload: None,
            payload_seq: 0,
            candidates: BTreeSet::new(),
            next_rejoin: now,
            next_payload_refresh: now,
            rtt: BTreeMap::new(),
            last_seen: BTreeMap::new(),
            dropped: 0,
            left: false,
            #[cfg(test)]
            errors: Vec::new(),
            config,
        }
    }

    /// This node's current identity (its incarnation changes on rejoin).
    pub fn identity(&self) -> &MemberId {
        self.foca.identity()
    }

    /// A possible peer (a seed, or found by the multicast beacon). It is announced to now
    /// and every `rejoin_interval` while it is not an active member.
    pub fn handle_discovered(&mut self, now: Instant, addr: SocketAddr) {
        if addr == self.identity().addr || self.candidates.contains(&addr) {
            return;
        }
        if self.candidates.len() >= MAX_CANDIDATES {
            // Keep the set bounded: forget the lowest address.
            let first = self.candidates.iter().next().copied();
            if let Some(first) = first {
                self.candidates.remove(&first);
            }
        }
        self.candidates.insert(addr);
        self.announce_to(addr);
        self.drain(now);
    }

    /// A packet from `from`. Malformed packets change nothing.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        bytes: &[u8],
    ) -> Result<(), MembershipError> {
        self.last_seen.insert(from, now);
        let result = self.foca.handle_data(bytes, &mut self.runtime);
        self.drain(now);
        result.map_err(|e| MembershipError::Packet(e.to_string()))
    }

    /// Fires every timer due at `now`, and the rejoin announcements.
    pub fn handle_timeout(&mut self, now: Instant) {
        loop {
            let due = self
                .timers
                .iter()
                .enumerate()
                .filter(|(_, t)| t.0 <= now)
                .min_by_key(|(_, t)| (t.0, t.1))
                .map(|(i, _)| i);
            let Some(i) = due else { break };
            let (_, _, timer) = self.timers.swap_remove(i);
            let what = format!("{timer:?}");
            if let Err(e) = self.foca.handle_timer(timer, &mut self.runtime) {
                tracing::warn!("membership timer {what}: {e}");
                #[cfg(test)]
                self.errors.push(format!("timer {what}: {e}"));
            }
            self.drain(now);
        }
        if now >= self.next_rejoin {
            self.next_rejoin = now + self.config.rejoin_interval;
            let active: BTreeSet<SocketAddr> =
                self.foca.iter_members().map(|m| m.id().addr).collect();
            let mut targets: Vec<SocketAddr> = self
                .candidates
                .iter()
                .filter(|a| !active.contains(a))
                .copied()
                .collect();
            // After foca renews our identity (we were declared down) it
            // stays offline, probing nobody, until a member sends it news;
            // in a partition every node of a side can end up waiting so.
            // Without a pending probe timer we are offline: announce to the
            // members we know, whose answers bring foca back.
            let probing = self
                .timers
                .iter()
                .any(|t| matches!(t.2, Timer::ProbeRandomMember(_)));
            if !probing {
                targets.extend(active.iter().copied());
            }
            for addr in targets {
                self.announce_to(addr);
            }
            self.drain(now);
        }
        if now >= self.next_payload_refresh {
            self.next_payload_refresh = now + self.config.payload_refresh;
            if self.own_payload.is_some() {
                self.publish_payload();
                self.drain(now);
            }
        }
    }

    /// The transport measured a round-trip time to `addr`.
    pub fn handle_rtt(&mut self, addr: SocketAddr, rtt: Duration) {
        self.rtt.insert(addr, rtt);
    }

    /// Publishes this node's payload; it replaces the previous one on every
    /// node.
    pub fn set_payload(&mut self, now: Instant, data: Vec<u8>) -> Result<(), MembershipError> {
        if data.len() > self.config.max_payload_bytes {
            return Err(MembershipError::PayloadTooLarge {
                len: data.len(),
                max: self.config.max_payload_bytes,
            });
        }
        self.own_payload = Some(data);
        self.publish_payload();
        self.drain(now);
        Ok(())
    }

    /// Leaves the cluster gracefully: members mark us down at once.
    pub fn leave(&mut self, now: Instant) {
        self.left = true;
        // foca tells `num_indirect_probes` random members that it leaves;
        // tell every one, so none waits for the news to be gossiped on (or
        // suspects this node for `suspect_timeout` first).
        let mut fc = foca_config(&self.config);
        fc.num_indirect_probes =
            NonZeroUsize::new(self.foca.iter_members().count()).unwrap_or(fc.num_indirect_probes);
        // ...and an update rides on `max_transmissions` messages only.
        fc.max_transmissions = u8::try_from(fc.num_indirect_probes.get())
            .ok()
            .and_then(std::num::NonZeroU8::new)
            .map_or(fc.max_transmissions, |n| n.max(fc.max_transmissions));
        if let Err(e) = self.foca.set_config(fc) {
            tracing::debug!("leaving: {e}");
        }
        if let Err(e) = self.foca.leave_cluster(&mut self.runtime) {
            tracing::debug!("leaving: {e}");
        }
        self.drain(now);
    }

    /// The next packet to send. Drain after every `handle_*` call.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// When to call [`Membership::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next = self.next_rejoin;
        if self.own_payload.is_some() {
            next = next.min(self.next_payload_refresh);
        }
        Some(self.timers.iter().map(|t| t.0).fold(next, Instant::min))
    }

    /// The next membership change.
    pub fn poll_event(&mut self) -> Option<MembershipEvent> {
        self.events.pop_front()
    }

    /// Transmits and events dropped because the driver did not drain them.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The member table, this node included, ordered by address.
    pub fn members(&self) -> Vec<MemberInfo> {
        let store = self.payloads.lock().ok();
        let payload = |addr: &SocketAddr| store.as_ref().and_then(|s| s.get(addr).cloned());
        let me = self.identity();
        let mut rows = vec![MemberInfo {
            id: me.clone(),
            state: MemberState::Alive,
            rtt: None,
            last_seen: None,
            payload: payload(&me.addr),
        }];
        for m in self.foca.iter_membership_state() {
            let addr = m.id().addr;
            rows.push(MemberInfo {
                id: m.id().clone(),
                state: match m.state() {
                    State::Alive => MemberState::Alive,
                    State::Suspect => MemberState::Suspect,
                    State::Down => MemberState::Down,
                },
                rtt: self.rtt.get(&addr).copied(),
                last_seen: self.last_seen.get(&addr).copied(),
                payload: payload(&addr),
            });
        }
        crate::cold_sort::sort_by_key(&mut rows, |r| r.id.addr);
        rows
    }

    #[cfg(test)]
    pub(crate) fn debug_state(&self, now: Instant) -> String {
        let members: Vec<String> = self
            .foca
            .iter_membership_state()
            .map(|m| {
                format!(
                    "{}#{}:{:?}@{}",
                    m.id().name,
                    m.id().incarnation,
                    m.state(),
                    m.incarnation()
                )
            })
            .collect();
        let timers: Vec<String> = self
            .timers
            .iter()
            .map(|t| {
                format!(
                    "{:?}+{}ms",
                    t.2,
                    t.0.saturating_duration_since(now).as_millis()
                )
            })
            .collect();
        format!(
            "{:?} members {members:?} timers {timers:?} errors {:?}",
            self.identity(),
            self.errors
        )
    }

    fn announce_to(&mut self, addr: SocketAddr) {
        // We only know the address: a placeholder identity with incarnation
        // 0 loses to the real one, and foca ignores the destination field of
        // what it receives.
        let placeholder = MemberId {
            addr,
            name: String::new(),
            incarnation: 0,
        };
        if let Err(e) = self.foca.announce(placeholder, &mut self.runtime) {
            tracing::debug!(%addr, "announce: {e}");
        }
    }

    fn publish_payload(&mut self) {
        let Some(data) = self.own_payload.clone() else {
            return;
        };
        self.payload_seq += 1;
        let p = NodePayload {
            node: self.identity().addr,
            version: PayloadVersion {
                incarnation: self.identity().incarnation,
                seq: self.payload_seq,
            },
            data,
        };
        match postcard::to_allocvec(&p) {
            Ok(bytes) => {
                if let Err(e) = self.foca.add_broadcast(&bytes) {
                    tracing::warn!("cannot publish the node payload: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot encode the node payload: {e}"),
        }
    }

    /// Moves what foca produced into our queues and the member table.
    fn drain(&mut self, now: Instant) {
        let mut republish = false;
        while let Some((after, timer)) = self.runtime.to_schedule() {
            self.timer_seq += 1;
            self.timers.push((now + after, self.timer_seq, timer));
        }
        while let Some((dst, bytes)) = self.runtime.to_send() {
            if self.transmits.len() >= MAX_QUEUED_TRANSMITS {
                self.dropped += 1;
                continue;
            }
            self.transmits.push_back(Transmit {
                dst: dst.addr,
                bytes: bytes.to_vec(),
            });
        }
        while let Some(n) = self.runtime.to_notify() {
            #[cfg(test)]
            if matches!(
                n,
                OwnedNotification::Idle | OwnedNotification::Active | OwnedNotification::Defunct
            ) {
                self.errors.push(format!("{n:?}"));
            }
            let event = match n {
                OwnedNotification::MemberUp(id) => {
                    // A newcomer missed earlier broadcasts: send ours again.
                    republish = true;
                    MembershipEvent::Up(id)
                }
                OwnedNotification::MemberDown(id) => MembershipEvent::Down(id),
                OwnedNotification::Rename(old, new) => MembershipEvent::Replaced { old, new },
                OwnedNotification::Rejoin(id) => {
                    republish = true;
                    tracing::info!(
                        incarnation = id.incarnation,
                        "declared down by the cluster; rejoined"
                    );
                    MembershipEvent::Rejoined(id)
                }
                OwnedNotification::Defunct if self.left => continue,
                OwnedNotification::Defunct => {
                    tracing::warn!("declared down by the cluster and cannot rejoin");
                    continue;
                }
                _ => continue,
            };
            self.push_event(event);
        }
        let changed = self
            .payloads
            .lock()
            .map(|mut s| s.take_changed())
            .unwrap_or_default();
        for addr in changed {
            self.push_event(MembershipEvent::Payload(addr));
        }
        if republish && self.own_payload.is_some() {
            self.publish_payload();
            // Timers and sends produced by the broadcast.
            self.drain(now);
        }
    }

    fn push_event(&mut self, e: MembershipEvent) {
        if self.events.len() >= MAX_QUEUED_EVENTS {
            self.dropped += 1;
            self.events.pop_front();
        }
        self.events.push_back(e);
    }
}
