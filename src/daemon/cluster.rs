//! `eddy cluster init` and `eddy cluster issue`: the cluster CA and node
//! certificates on disk. Also re-exports the mesh API for integration tests
//! and tools ([`mesh`]); the logic lives in `crate::mesh`.

use std::path::Path;
use std::process::ExitCode;

use crate::mesh::ca;

/// `eddy cluster init CA_DIR`: writes `CA_DIR/ca.crt` and `CA_DIR/ca.key`.
pub(crate) fn init(dir: &Path, cluster: &str, days: u32, force: bool) -> ExitCode {
    match ca::init_ca_dir(dir, cluster, days, force) {
        Ok((crt, key)) => {
            println!(
                "cluster `{cluster}`: CA certificate {} and key {} (keep the key secret; it can admit any node)",
                crt.display(),
                key.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("eddy cluster init: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `eddy cluster issue --ca CA_DIR --out DIR NODE`: writes `DIR/NODE.crt` and
/// `DIR/NODE.key`.
pub(crate) fn issue(ca_dir: &Path, out: &Path, node: &str, days: u32, force: bool) -> ExitCode {
    if days == 0 {
        eprintln!(
            "eddy cluster issue: warning: --days 0 issues a certificate that has already expired"
        );
    }
    match ca::issue_to_dir(ca_dir, out, node, days, force) {
        Ok((crt, key)) => {
            println!(
                "node `{node}`: certificate {} and key {}",
                crt.display(),
                key.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("eddy cluster issue: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The peer mesh as a library: what the integration tests (`tests/mesh_*`)
/// and tools drive in-process. The engine uses `crate::mesh` directly.
pub mod mesh {
    pub use crate::mesh::beacon::BeaconDiscovery;
    pub use crate::mesh::ca::{
        CaError, CertAndKey, CertSummary, cluster_dns_name, generate_ca, init_ca_dir, issue_node,
        issue_to_dir, summarize,
    };
    pub use crate::mesh::config::{DiscoveryKind, MeshConfig};
    pub use crate::mesh::discovery::{Discovery, StaticSeeds};
    pub use crate::mesh::driver::{MeshNode, NodeOptions};
    pub use crate::mesh::endpoint::{EndpointOptions, MeshEndpoint, MeshError, Peer, unix_millis};
    pub use crate::mesh::frame::{
        DEFAULT_MAX_FRAME_BYTES, DataBatch, Frame, Hello, StateChunk, StreamKind, decode,
        encode_to_vec,
    };
    pub use crate::mesh::identity::NodeIdentity;
    pub use crate::mesh::membership::{MemberId, MemberInfo, MemberState, MembershipConfig};
    pub use crate::mesh::metrics::MetricsSnapshot;
    pub use crate::mesh::streams::{FrameReceiver, FrameSender, PeerLabel};
    pub use crate::mesh::{ALPN, PROTOCOL_VERSION};
}
