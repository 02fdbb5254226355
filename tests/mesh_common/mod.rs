//! Helpers for the mesh integration tests: certificates made in-process, a
//! log capture to check what refusals say, and "rogue" QUIC peers that skip
//! verification so the node under test is the one that refuses.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use eddy::daemon::cluster::mesh::{
    ALPN, CertAndKey, EndpointOptions, MeshEndpoint, NodeIdentity, generate_ca, issue_node,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A cluster CA with helpers to make node identities.
pub struct TestCa {
    pub cluster: String,
    pub ca: CertAndKey,
}

impl TestCa {
    pub fn new(cluster: &str) -> TestCa {
        TestCa {
            cluster: cluster.to_string(),
            ca: generate_ca(cluster, 30).expect("CA"),
        }
    }

    pub fn issue(&self, node: &str, days: u32) -> CertAndKey {
        issue_node(&self.ca, &self.cluster, node, days).expect("node cert")
    }

    /// A certificate from this CA that names another cluster.
    pub fn issue_for_cluster(&self, cluster: &str, node: &str) -> CertAndKey {
        issue_node(&self.ca, cluster, node, 30).expect("node cert")
    }

    pub fn identity(&self, node: &str) -> NodeIdentity {
        NodeIdentity::from_pem(&self.ca.cert_pem, &self.issue(node, 30), None).expect("identity")
    }
}

/// Binds a node on `ip` with a free port.
pub fn bind(identity: &NodeIdentity, ip: [u8; 4]) -> MeshEndpoint {
    let opts = EndpointOptions {
        handshake_timeout: Duration::from_secs(5),
        ..EndpointOptions::default()
    };
    MeshEndpoint::bind(identity, SocketAddr::from((ip, 0)), opts).expect("bind")
}

/// Everything the process logged, for assertions on refusal messages.
pub fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || LogWriter(writer.clone()))
            .with_max_level(tracing::Level::TRACE)
            .finish()
            .with(
                tracing_subscriber::filter::Targets::new()
                    .with_target("eddy", tracing::Level::DEBUG),
            );
        let _ = tracing::subscriber::set_global_default(subscriber);
        buf
    })
    .clone()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        // Also to stderr, so a failing test shows the logs.
        eprint!("{}", String::from_utf8_lossy(b));
        self.0.lock().expect("logs").extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits until a log line contains every one of `needles`; returns it.
pub fn wait_for_log(needles: &[&str], within: Duration) -> String {
    let logs = logs();
    let deadline = Instant::now() + within;
    loop {
        let text = String::from_utf8_lossy(&logs.lock().expect("logs")).into_owned();
        if let Some(line) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return line.to_string();
        }
        if Instant::now() > deadline {
            panic!("no log line with {needles:?} within {within:?}; logs:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server verifier that accepts anything: a rogue client does not care
/// who it talks to, so the node under test is the one that must refuse.
#[derive(Debug)]
struct AcceptAnything(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn chain_and_key(c: &CertAndKey) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let chain = CertificateDer::pem_slice_iter(c.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("cert");
    let key = PrivateKeyDer::from_pem_slice(c.key_pem.as_bytes()).expect("key");
    (chain, key)
}

/// A QUIC client on 127.0.0.1 that presents `cert` (or none) and offers
/// `alpn`, and trusts any server.
pub fn rogue_client(cert: Option<&CertAndKey>, alpn: &[u8]) -> quinn::Endpoint {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnything(provider())));
    let mut tls = match cert {
        Some(c) => {
            let (chain, key) = chain_and_key(c);
            builder
                .with_client_auth_cert(chain, key)
                .expect("client cert")
        }
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![alpn.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let mut ep =
        quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0))).expect("client endpoint");
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    ep
}

/// A QUIC server on 127.0.0.1 that presents `cert`, asks for no client
/// certificate, speaks `eddy/1`, and completes handshakes without answering.
pub fn rogue_server(cert: &CertAndKey) -> quinn::Endpoint {
    let (chain, key) = chain_and_key(cert);
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("tls13")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server cert");
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls).expect("quic tls");
    let ep = quinn::Endpoint::server(
        quinn::ServerConfig::with_crypto(Arc::new(quic)),
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .expect("server endpoint");
    let acceptor = ep.clone();
    smol::spawn(async move {
        while let Some(incoming) = acceptor.accept().await {
            if let Ok(connecting) = incoming.accept() {
                smol::spawn(async move {
                    if let Ok(conn) = connecting.await {
                        conn.closed().await;
                    }
                })
                .detach();
            }
        }
    })
    .detach();
    ep
}

/// A client endpoint presenting a valid node certificate of `ca`, without
/// the eddy handshake on top (to send a hand-made `Hello`).
pub fn raw_member_client(identity: &NodeIdentity) -> quinn::Endpoint {
    let tls = identity.client_config().expect("client config");
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let mut ep =
        quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0))).expect("client endpoint");
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    ep
}
