//! `eddy cluster init` and `eddy cluster issue` through the real binary:
//! the files, their modes, no silent overwrite, clear errors; then two nodes
//! whose certificates the CLI issued connect with mutual TLS, and an expired
//! one (`--days 0`) is refused.

mod common;
mod mesh_common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{Scratch, eddy};
use eddy::daemon::cluster::mesh::{EndpointOptions, MeshEndpoint, NodeIdentity, summarize};

fn run(args: &[&str]) -> (bool, String, String) {
    let out = eddy().args(args).output().expect("run eddy");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("file").permissions().mode() & 0o777
}

#[test]
fn init_and_issue_write_certificates_that_connect() {
    mesh_common::logs();
    let s = Scratch::new();
    let ca = s.path("ca");
    let nodes = s.path("nodes");
    let (ca, nodes) = (ca.to_str().expect("utf8"), nodes.to_str().expect("utf8"));

    let (ok, out, err) = run(&["cluster", "init", ca, "--cluster", "blue", "--days", "30"]);
    assert!(ok, "{err}");
    assert!(out.contains("cluster `blue`"), "{out}");
    assert_eq!(mode(&s.path("ca/ca.key")), 0o600);
    let ca_pem = std::fs::read_to_string(s.path("ca/ca.crt")).expect("ca.crt");

    // No silent overwrite; --force replaces.
    let (ok, _, err) = run(&["cluster", "init", ca, "--cluster", "blue"]);
    assert!(!ok);
    assert!(
        err.contains("ca.crt already exists; use --force to overwrite it"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(s.path("ca/ca.crt")).expect("ca.crt"),
        ca_pem
    );
    let (ok, _, err) = run(&["cluster", "init", ca, "--cluster", "blue", "--force"]);
    assert!(ok, "{err}");

    for node in ["node-a", "node-b"] {
        let (ok, out, err) = run(&["cluster", "issue", "--ca", ca, "--out", nodes, node]);
        assert!(ok, "{err}");
        assert!(out.contains(&format!("node `{node}`")), "{out}");
        assert_eq!(mode(&s.path(&format!("nodes/{node}.key"))), 0o600);
        assert_eq!(mode(&s.path(&format!("nodes/{node}.crt"))), 0o644);
    }
    let (ok, _, err) = run(&["cluster", "issue", "--ca", ca, "--out", nodes, "node-a"]);
    assert!(!ok && err.contains("node-a.crt already exists"), "{err}");
    let (ok, _, err) = run(&["cluster", "issue", "--ca", ca, "--out", nodes, "Node A"]);
    assert!(!ok && err.contains("invalid node name"), "{err}");
    let (ok, _, err) = run(&[
        "cluster",
        "issue",
        "--ca",
        &s.path("nope").display().to_string(),
        "--out",
        nodes,
        "x",
    ]);
    assert!(!ok && err.contains("cannot read"), "{err}");
    let (ok, _, err) = run(&[
        "cluster", "issue", "--ca", ca, "--out", nodes, "--days", "0", "old",
    ]);
    assert!(ok && err.contains("already expired"), "{err}");

    let crt = std::fs::read_to_string(s.path("nodes/node-a.crt")).expect("crt");
    let der = rustls::pki_types::pem::PemObject::from_pem_slice(crt.as_bytes()).expect("pem");
    let summary = summarize(&rustls::pki_types::CertificateDer::into_owned(der)).expect("x509");
    assert_eq!(summary.cluster.as_deref(), Some("blue"));
    assert_eq!(summary.common_name.as_deref(), Some("node-a"));

    // The files work: two nodes connect with mutual TLS.
    let load = |n: &str| {
        NodeIdentity::load(
            &s.path("ca/ca.crt"),
            &s.path(&format!("nodes/{n}.crt")),
            &s.path(&format!("nodes/{n}.key")),
            Some("blue"),
        )
    };
    let (a, b) = (load("node-a").expect("a"), load("node-b").expect("b"));
    let err = load("old").expect_err("expired");
    assert!(err.to_string().contains("expired"), "{err}");
    std::fs::set_permissions(
        s.path("nodes/node-b.key"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    let err = load("node-b").expect_err("world-readable key");
    assert!(err.to_string().contains("chmod 600"), "{err}");

    smol::block_on(async {
        let opts = EndpointOptions::default();
        let ea = MeshEndpoint::bind(&a, "127.0.0.1:0".parse().expect("addr"), opts.clone())
            .expect("bind");
        let eb = MeshEndpoint::bind(&b, "127.0.0.2:0".parse().expect("addr"), opts).expect("bind");
        let peer = ea
            .connect(eb.local_addr())
            .await
            .expect("mTLS with CLI-issued certificates");
        assert_eq!(peer.hello().node_name, "node-b");
        assert_eq!(
            eb.accept().await.expect("accepted").hello().node_name,
            "node-a"
        );
    });
}
