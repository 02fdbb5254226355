//! Mutual TLS and the `Hello` handshake between real QUIC endpoints on
//! loopback: two nodes of one cluster connect; a certificate from another
//! CA, an expired one, one naming another cluster, no certificate at all and
//! a wrong ALPN are refused during the handshake and logged with the peer's
//! address; a protocol version mismatch is refused with a clear error.

mod mesh_common;

use std::net::SocketAddr;
use std::time::Duration;

use eddy::daemon::cluster::mesh::{
    Frame, Hello, MeshError, PROTOCOL_VERSION, cluster_dns_name, decode, encode_to_vec,
};
use mesh_common::*;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn two_nodes_of_one_cluster_connect_with_mutual_tls() {
    logs();
    smol::block_on(async {
        let ca = TestCa::new("blue");
        let a = bind(&ca.identity("node-a"), [127, 0, 0, 1]);
        let b = bind(&ca.identity("node-b"), [127, 0, 0, 2]);
        let to_b = a.connect(b.local_addr()).await.expect("a connects to b");
        let from_a = b.accept().await.expect("b accepts a");
        assert_eq!(to_b.hello().node_name, "node-b");
        assert_eq!(to_b.hello().cluster, "blue");
        assert_eq!(to_b.hello().protocol_version, PROTOCOL_VERSION);
        assert_eq!(from_a.hello().node_name, "node-a");
        assert_eq!(from_a.hello().incarnation, a.hello().incarnation);
        assert_eq!(from_a.remote_address(), a.local_addr());
        assert_eq!(a.metrics().snapshot().connections_established, 1);
        assert_eq!(b.metrics().snapshot().connections_established, 1);
        assert_eq!(b.metrics().snapshot().handshakes_refused, 0);
    });
}

/// A rogue client (it verifies nothing) connects to a real node with `cert`
/// and `alpn`; the node must refuse and log the client's address with
/// `reason`.
fn refused_as_server(
    cert: Option<&eddy::daemon::cluster::mesh::CertAndKey>,
    alpn: &[u8],
    reason: &str,
) {
    logs();
    let ca = TestCa::new("blue");
    let node = bind(&ca.identity("node-a"), [127, 0, 0, 1]);
    let client = rogue_client(cert, alpn);
    let client_addr = client.local_addr().expect("addr");
    smol::block_on(async {
        if let Ok(connecting) = client.connect(node.local_addr(), &cluster_dns_name("blue")) {
            // The client may think its side is done before the server has
            // checked its certificate; either way the connection must die.
            if let Ok(conn) = connecting.await {
                let closed = conn.closed().await;
                eprintln!("rogue client saw: {closed}");
            }
        }
    });
    let line = wait_for_log(
        &["refused connection from", &client_addr.to_string(), reason],
        WAIT,
    );
    eprintln!("logged: {line}");
    assert!(node.metrics().snapshot().handshakes_refused >= 1);
    assert_eq!(node.metrics().snapshot().connections_established, 0);
}

#[test]
fn a_client_from_another_ca_is_refused_and_logged() {
    let other = TestCa::new("blue");
    refused_as_server(
        Some(&other.issue("intruder", 30)),
        b"eddy/1",
        "certificate is not signed by the CA of cluster `blue`",
    );
}

#[test]
fn an_expired_client_certificate_is_refused_and_logged() {
    logs();
    let ca = TestCa::new("blue");
    let node = bind(&ca.identity("node-a"), [127, 0, 0, 1]);
    let client = rogue_client(Some(&ca.issue("old-node", 0)), b"eddy/1");
    let client_addr = client.local_addr().expect("addr");
    smol::block_on(async {
        if let Ok(connecting) = client.connect(node.local_addr(), &cluster_dns_name("blue"))
            && let Ok(conn) = connecting.await
        {
            conn.closed().await;
        }
    });
    wait_for_log(
        &[
            "refused connection from",
            &client_addr.to_string(),
            "certificate expired",
        ],
        WAIT,
    );
}

#[test]
fn a_client_naming_another_cluster_is_refused_and_logged() {
    logs();
    let ca = TestCa::new("blue");
    let node = bind(&ca.identity("node-a"), [127, 0, 0, 1]);
    let green = ca.issue_for_cluster("green", "node-g");
    let client = rogue_client(Some(&green), b"eddy/1");
    let client_addr = client.local_addr().expect("addr");
    smol::block_on(async {
        if let Ok(connecting) = client.connect(node.local_addr(), &cluster_dns_name("blue"))
            && let Ok(conn) = connecting.await
        {
            conn.closed().await;
        }
    });
    wait_for_log(
        &[
            "refused connection from",
            &client_addr.to_string(),
            "certificate is for cluster `green`, this node is in cluster `blue`",
        ],
        WAIT,
    );
}

#[test]
fn a_plain_tls_client_without_certificate_is_refused_and_logged() {
    refused_as_server(None, b"eddy/1", "no certificates");
}

#[test]
fn a_client_with_another_alpn_is_refused_and_logged() {
    let ca = TestCa::new("blue");
    let cert = ca.issue("node-x", 30);
    // The CA differs from the node's too, but ALPN is checked first.
    refused_as_server(
        Some(&cert),
        b"h3",
        "peer doesn't support any known protocol",
    );
}

/// The real node connects to a rogue server presenting `cert`: it must
/// refuse, return the reason and log the server's address.
fn refused_as_client(ca: &TestCa, cert: &eddy::daemon::cluster::mesh::CertAndKey, reason: &str) {
    logs();
    let node = bind(&ca.identity("node-a"), [127, 0, 0, 1]);
    let server = rogue_server(cert);
    let addr: SocketAddr = server.local_addr().expect("addr");
    let err = smol::block_on(node.connect(addr)).err().expect("refused");
    assert!(matches!(err, MeshError::Handshake { .. }), "{err}");
    assert!(err.to_string().contains(reason), "{err}");
    wait_for_log(&["could not connect to", &addr.to_string(), reason], WAIT);
}

#[test]
fn servers_with_bad_certificates_are_refused_by_the_connecting_node() {
    let ca = TestCa::new("blue");
    refused_as_client(
        &ca,
        &TestCa::new("blue").issue("intruder", 30),
        "certificate is not signed by the CA of cluster `blue`",
    );
    refused_as_client(
        &ca,
        &TestCa::new("red").issue("intruder", 30),
        "certificate is not signed by the CA of cluster `blue`",
    );
    refused_as_client(&ca, &ca.issue("old-node", 0), "certificate expired");
    refused_as_client(
        &ca,
        &ca.issue_for_cluster("green", "node-g"),
        "certificate is for cluster `green`, this node is in cluster `blue`",
    );
}

#[test]
fn a_protocol_version_mismatch_is_refused_with_a_clear_error() {
    logs();
    let ca = TestCa::new("blue");
    let node = bind(&ca.identity("node-a"), [127, 0, 0, 1]);
    let client = raw_member_client(&ca.identity("node-new"));
    let client_addr = client.local_addr().expect("addr");
    let reason = smol::block_on(async {
        let conn = client
            .connect(node.local_addr(), &cluster_dns_name("blue"))
            .expect("connect")
            .await
            .expect("TLS is fine");
        let (mut send, mut recv) = conn.open_bi().await.expect("control stream");
        let hello = Frame::Hello(Hello {
            protocol_version: PROTOCOL_VERSION + 98,
            cluster: "blue".into(),
            node_id: 1,
            node_name: "node-new".into(),
            incarnation: 1,
        });
        send.write_all(&encode_to_vec(&hello, 4096).expect("encode"))
            .await
            .expect("send hello");
        let bytes = recv.read_to_end(4096).await.expect("answer");
        match decode(&bytes, 4096).expect("a frame").0 {
            Frame::Refuse { reason } => reason,
            other => panic!("expected Refuse, got {other:?}"),
        }
    });
    assert!(
        reason.contains("protocol version mismatch")
            && reason.contains(&format!("{}", PROTOCOL_VERSION + 98)),
        "{reason}"
    );
    assert!(
        reason.contains(&format!("speaks version {PROTOCOL_VERSION}")),
        "{reason}"
    );
    wait_for_log(
        &[
            "refused connection from",
            &client_addr.to_string(),
            "protocol version mismatch",
        ],
        WAIT,
    );
}
