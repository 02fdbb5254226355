//! The peer mesh: node identity and mutual TLS, QUIC endpoints, framing,
//! discovery and SWIM membership. It moves bytes and facts between nodes;
//! it makes no decisions (that is `control`'s job).
//!
//! Layout, one concern per file:
//! - [`config`]: the `[mesh]` section as a plain struct with defaults.
//! - [`ca`]: the cluster CA and node certificate issuance (rcgen), PEM files.
//! - [`identity`]: a node's certificate, key and trust, turned into rustls
//!   configs that check the cluster CA, expiry and the cluster name.
//! - [`frame`]: the length-prefixed postcard codec and the frame types.
//! - [`endpoint`]: one quinn endpoint (smol) that listens and connects, with
//!   the `Hello` version handshake on a control stream.
//! - [`streams`]: framed QUIC streams: per worker pair, control, state.
//! - [`runtime`]: the thread each endpoint's QUIC work runs on.
//! - [`membership`]: foca SWIM as a sans-IO state machine with a member table.
//! - [`payload`]: per-node gossip payloads, newer versions replacing older.
//! - [`driver`]: moves membership packets over QUIC datagrams.
//! - [`discovery`]: where to look for peers: static seeds, or
//!   [`beacon`]: a LAN multicast beacon.
//! - [`metrics`]: counters the daemon exports.
#![allow(dead_code)] // Wired in by the daemon and the engine in later issues.

pub(crate) mod beacon;
pub(crate) mod ca;
pub(crate) mod config;
pub(crate) mod discovery;
pub(crate) mod driver;
pub(crate) mod endpoint;
pub(crate) mod frame;
pub(crate) mod identity;
pub(crate) mod membership;
pub(crate) mod metrics;
pub(crate) mod payload;
pub(crate) mod runtime;
pub(crate) mod streams;

#[cfg(test)]
mod sim;

/// The ALPN protocol id. A peer offering anything else is refused during the
/// TLS handshake; the number moves with incompatible transport changes.
pub const ALPN: &[u8] = b"eddy/1";

/// The mesh protocol version sent in `Hello`. Peers with a different version
/// are refused with a message naming both versions. 2: profiling runs
/// asked of peers (`Frame::Profile`), which a version-1 peer could not
/// decode.
pub const PROTOCOL_VERSION: u32 = 2;
