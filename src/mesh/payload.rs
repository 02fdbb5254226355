//! Per-node gossip payloads carried by foca's custom broadcasts: each node
//! publishes a small blob (the controller will put its metrics there), keyed
//! by `(node, version)`; a newer version replaces an older one everywhere,
//! including in foca's dissemination backlog.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use foca::{BroadcastHandler, Invalidates};
use serde::{Deserialize, Serialize};

/// Ordered first by the node's incarnation (so a restarted node's payloads
/// win over its previous life's), then by a counter within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PayloadVersion {
    pub incarnation: u64,
    pub seq: u64,
}

/// One node's payload as it travels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePayload {
    pub node: SocketAddr,
    pub version: PayloadVersion,
    pub data: Vec<u8>,
}

/// What foca keeps in its backlog to decide which broadcast replaces which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadKey {
    node: SocketAddr,
    version: PayloadVersion,
}

impl Invalidates for PayloadKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.node == other.node && self.version >= other.version
    }
}

/// The latest payload of every node heard of. Shared between the handler
/// (owned by foca) and the membership table.
#[derive(Debug, Default)]
pub struct PayloadStore {
    latest: BTreeMap<SocketAddr, (PayloadVersion, Vec<u8>)>,
    /// Nodes whose payload changed since the last [`PayloadStore::take_changed`].
    changed: Vec<SocketAddr>,
}

impl PayloadStore {
    pub fn get(&self, node: &SocketAddr) -> Option<&(PayloadVersion, Vec<u8>)> {
        self.latest.get(node)
    }

    pub fn take_changed(&mut self) -> Vec<SocketAddr> {
        std::mem::take(&mut self.changed)
    }

    /// Keeps `p` if it is newer than what we have; says whether it was.
    fn offer(&mut self, p: NodePayload) -> bool {
        match self.latest.get(&p.node) {
            Some((v, _)) if *v >= p.version => false,
            _ => {
                if !self.changed.contains(&p.node) {
                    self.changed.push(p.node);
                }
                self.latest.insert(p.node, (p.version, p.data));
                true
            }
        }
    }
}

/// Why a received payload broadcast was refused.
#[derive(Debug)]
pub struct PayloadError(pub String);

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad payload broadcast: {}", self.0)
    }
}

impl std::error::Error for PayloadError {}

/// foca's custom-broadcast handler for node payloads.
pub struct PayloadHandler {
    pub(crate) store: Arc<Mutex<PayloadStore>>,
    pub(crate) max_bytes: usize,
}

impl<T> BroadcastHandler<T> for PayloadHandler {
    type Key = PayloadKey;
    type Error = PayloadError;

    fn receive_item(
        &mut self,
        data: &[u8],
        _sender: Option<&T>,
    ) -> Result<Option<PayloadKey>, PayloadError> {
        if data.len() > self.max_bytes + 64 {
            return Err(PayloadError(format!(
                "{} bytes is over the limit",
                data.len()
            )));
        }
        let p: NodePayload = postcard::from_bytes(data).map_err(|e| PayloadError(e.to_string()))?;
        if p.data.len() > self.max_bytes {
            return Err(PayloadError(format!(
                "{} bytes is over the limit",
                p.data.len()
            )));
        }
        let key = PayloadKey {
            node: p.node,
            version: p.version,
        };
        let mut store = self
            .store
            .lock()
            .map_err(|_| PayloadError("store poisoned".into()))?;
        Ok(store.offer(p).then_some(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_versions_replace_older_ones() {
        let store = Arc::new(Mutex::new(PayloadStore::default()));
        let mut h = PayloadHandler {
            store: store.clone(),
            max_bytes: 16,
        };
        let node: SocketAddr = "127.0.0.1:7400".parse().expect("addr");
        let enc = |inc, seq, data: &[u8]| {
            postcard::to_allocvec(&NodePayload {
                node,
                version: PayloadVersion {
                    incarnation: inc,
                    seq,
                },
                data: data.to_vec(),
            })
            .expect("encode")
        };
        let recv =
            |h: &mut PayloadHandler, b: &[u8]| BroadcastHandler::<()>::receive_item(h, b, None);
        assert!(recv(&mut h, &enc(1, 2, b"b")).expect("ok").is_some());
        assert!(
            recv(&mut h, &enc(1, 1, b"a")).expect("ok").is_none(),
            "older is stale"
        );
        assert!(
            recv(&mut h, &enc(1, 2, b"b")).expect("ok").is_none(),
            "same is stale"
        );
        assert!(
            recv(&mut h, &enc(2, 0, b"c")).expect("ok").is_some(),
            "new incarnation wins"
        );
        assert_eq!(
            store.lock().expect("lock").get(&node).map(|p| p.1.clone()),
            Some(b"c".to_vec())
        );
        assert!(recv(&mut h, &enc(3, 0, &[0; 17])).is_err());
        assert!(recv(&mut h, &[0xff, 0xff]).is_err());
        let k = |seq| PayloadKey {
            node,
            version: PayloadVersion {
                incarnation: 1,
                seq,
            },
        };
        assert!(k(2).invalidates(&k(1)) && !k(1).invalidates(&k(2)));
    }
}
