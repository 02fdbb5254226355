//! A node's identity and trust: its certificate and key, the cluster CA, and
//! the rustls configs built from them. Mutual TLS always: both sides present
//! a certificate that must chain to the cluster CA (WebPKI verifiers, expiry
//! checked) and name this node's cluster (a custom check on both sides).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};

use super::ca::{self, CaError, CertAndKey};

/// Who this node is and whom it trusts.
#[derive(Debug)]
pub struct NodeIdentity {
    pub cluster: String,
    pub node_name: String,
    /// Stable 64-bit id derived from the node name.
    pub node_id: u64,
    cert_chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

/// The stable id of a node name (XXH3, as the rest of eddy hashes).
pub fn node_id_of(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

fn err(msg: impl Into<String>) -> CaError {
    CaError(msg.into())
}

impl NodeIdentity {
    /// Loads `[mesh] ca_cert`, `cert` and `key`. `cluster`, if given, must be
    /// the CA's cluster. Refuses a key readable by others, a certificate not
    /// signed by the CA, an expired one, or one for another cluster, each
    /// with the file named.
    pub fn load(
        ca_cert: &Path,
        cert: &Path,
        key: &Path,
        cluster: Option<&str>,
    ) -> Result<NodeIdentity, CaError> {
        ca::check_key_permissions(key)?;
        let ca_pem = ca::read_text(ca_cert)?;
        let node = CertAndKey {
            cert_pem: ca::read_text(cert)?,
            key_pem: ca::read_text(key)?,
        };
        NodeIdentity::from_pem(&ca_pem, &node, cluster)
            .map_err(|e| err(format!("{}: {e}", cert.display())))
    }

    /// [`NodeIdentity::load`] from PEM texts.
    pub fn from_pem(
        ca_pem: &str,
        node: &CertAndKey,
        cluster: Option<&str>,
    ) -> Result<NodeIdentity, CaError> {
        let ca_der = ca::pem_certs(ca_pem, Path::new("ca_cert"))?;
        let ca_summary = ca::summarize(&ca_der[0])?;
        let ca_cluster = ca_summary
            .cluster
            .ok_or_else(|| err("the CA certificate names no cluster (no OU in its subject)"))?;
        let cluster = match cluster {
            Some(c) if c != ca_cluster => {
                return Err(err(format!(
                    "the config says cluster `{c}` but the CA is for cluster `{ca_cluster}`"
                )));
            }
            _ => ca_cluster,
        };
        let chain = ca::pem_certs(&node.cert_pem, Path::new("cert"))?;
        let summary = ca::summarize(&chain[0])?;
        let node_name = summary
            .common_name
            .ok_or_else(|| err("the node certificate has no common name"))?;
        if summary.cluster.as_deref() != Some(cluster.as_str()) {
            return Err(err(format!(
                "the node certificate is for cluster `{}`, not `{cluster}`",
                summary.cluster.as_deref().unwrap_or("?")
            )));
        }
        let key = PrivateKeyDer::from_pem_slice(node.key_pem.as_bytes())
            .map_err(|e| err(format!("not a PEM private key: {e}")))?;
        let mut roots = RootCertStore::empty();
        for c in ca_der {
            roots.add(c).map_err(|e| {
                err(format!(
                    "the CA certificate is not usable as a trust anchor: {e}"
                ))
            })?;
        }
        let identity = NodeIdentity {
            node_id: node_id_of(&node_name),
            node_name,
            cluster,
            cert_chain: chain,
            key,
            roots: Arc::new(roots),
            provider: Arc::new(provider()),
        };
        // Check our own certificate as a peer would, so a node with an
        // expired or foreign certificate fails at start with a clear message
        // rather than at every connection.
        let verifier = identity.client_verifier().map_err(|e| err(e.to_string()))?;
        verifier
            .verify_client_cert(
                &identity.cert_chain[0],
                &identity.cert_chain[1..],
                UnixTime::now(),
            )
            .map_err(|e| {
                err(format!(
                    "this node's certificate is not acceptable to its peers: {e}"
                ))
            })?;
        Ok(identity)
    }

    /// The name a client asks for: every node certificate of the cluster
    /// carries it, so the ordinary WebPKI name check is the cluster check.
    pub fn server_name(&self) -> String {
        ca::cluster_dns_name(&self.cluster)
    }

    fn client_verifier(&self) -> Result<Arc<ClusterClientVerifier>, rustls::Error> {
        let inner =
            WebPkiClientVerifier::builder_with_provider(self.roots.clone(), self.provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(format!("client verifier: {e}")))?;
        Ok(Arc::new(ClusterClientVerifier {
            inner,
            cluster: self.cluster.clone(),
        }))
    }

    /// TLS 1.3 server config: client certificates required and checked,
    /// ALPN `eddy/1` only.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, rustls::Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(self.client_verifier()?)
            .with_single_cert(self.cert_chain.clone(), self.key.clone_key())?;
        config.alpn_protocols = vec![super::ALPN.to_vec()];
        Ok(config)
    }

    /// TLS 1.3 client config: presents this node's certificate, checks the
    /// server's against the CA and the cluster, ALPN `eddy/1`.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, rustls::Error> {
        let inner =
            WebPkiServerVerifier::builder_with_provider(self.roots.clone(), self.provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(format!("server verifier: {e}")))?;
        let verifier = Arc::new(ClusterServerVerifier {
            inner,
            cluster: self.cluster.clone(),
        });
        let mut config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(self.cert_chain.clone(), self.key.clone_key())?;
        config.alpn_protocols = vec![super::ALPN.to_vec()];
        Ok(config)
    }
}

/// A refusal with a message meant for a person; rustls shows it through
/// `Debug`, so `Debug` prints the message alone.
struct Refusal(String);

impl std::fmt::Debug for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

fn refusal(msg: String) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
        Refusal(msg),
    ))))
}

/// WebPKI's "unknown issuer" and "bad signature" both mean "not from our
/// CA" here (two CAs of one cluster name look alike by name): say so.
fn explain(e: rustls::Error, cluster: &str) -> rustls::Error {
    match e {
        rustls::Error::InvalidCertificate(
            ref c @ (CertificateError::UnknownIssuer | CertificateError::BadSignature),
        ) => refusal(format!(
            "certificate is not signed by the CA of cluster `{cluster}` ({c:?})"
        )),
        other => other,
    }
}

/// The refusal for a certificate of another cluster, naming both.
fn wrong_cluster(end_entity: &CertificateDer<'_>, cluster: &str) -> rustls::Error {
    let theirs = ca::summarize(end_entity)
        .ok()
        .and_then(|s| s.cluster)
        .unwrap_or_else(|| "?".into());
    refusal(format!(
        "certificate is for cluster `{theirs}`, this node is in cluster `{cluster}`"
    ))
}

/// Is the certificate valid for the cluster's DNS name?
fn names_cluster(end_entity: &CertificateDer<'_>, cluster: &str) -> bool {
    let Ok(name) = ServerName::try_from(ca::cluster_dns_name(cluster)) else {
        return false;
    };
    webpki::EndEntityCert::try_from(end_entity)
        .map(|ee| ee.verify_is_valid_for_subject_name(&name).is_ok())
        .unwrap_or(false)
}

/// WebPKI client verification (chain to the CA, expiry, client-auth usage),
/// then the cluster name.
#[derive(Debug)]
struct ClusterClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    cluster: String,
}

impl ClientCertVerifier for ClusterClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
            .map_err(|e| explain(e, &self.cluster))?;
        if !names_cluster(end_entity, &self.cluster) {
            return Err(wrong_cluster(end_entity, &self.cluster));
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// WebPKI server verification against the cluster CA; a name mismatch is
/// reported as the cluster mismatch it is.
#[derive(Debug)]
struct ClusterServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    cluster: String,
}

impl ServerCertVerifier for ClusterServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Err(wrong_cluster(end_entity, &self.cluster)),
            other => other.map_err(|e| explain(e, &self.cluster)),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// ring's provider with AES-128-GCM first: every mesh byte is sealed and
/// opened once per hop, and on this kind of CPU AES-128-GCM does that
/// 10–25% faster than the AES-256-GCM rustls would pick first (the mesh
/// bench measures both). AES-256-GCM and ChaCha20-Poly1305 stay accepted.
fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::ring::cipher_suite::{
        TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384, TLS13_CHACHA20_POLY1305_SHA256,
    };
    rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            TLS13_AES_128_GCM_SHA256,
            TLS13_AES_256_GCM_SHA384,
            TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..rustls::crypto::ring::default_provider()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_checks_cluster_and_ca() {
        let blue = ca::generate_ca("blue", 10).expect("ca");
        let other = ca::generate_ca("blue", 10).expect("ca");
        let node = ca::issue_node(&blue, "blue", "a", 10).expect("node");
        let id = NodeIdentity::from_pem(&blue.cert_pem, &node, None).expect("loads");
        assert_eq!((id.cluster.as_str(), id.node_name.as_str()), ("blue", "a"));
        assert_eq!(id.node_id, node_id_of("a"));
        assert!(id.server_config().is_ok() && id.client_config().is_ok());

        let e = NodeIdentity::from_pem(&blue.cert_pem, &node, Some("green")).unwrap_err();
        assert!(e.0.contains("cluster `green`"), "{e}");
        let e = NodeIdentity::from_pem(&other.cert_pem, &node, None).unwrap_err();
        assert!(e.0.contains("not acceptable"), "{e}");
        let old = ca::issue_node(&blue, "blue", "a", 0).expect("node");
        let e = NodeIdentity::from_pem(&blue.cert_pem, &old, None).unwrap_err();
        assert!(e.0.contains("expired"), "{e}");
        let green = ca::issue_node(&blue, "green", "a", 10).expect("node");
        let e = NodeIdentity::from_pem(&blue.cert_pem, &green, None).unwrap_err();
        assert!(e.0.contains("for cluster `green`"), "{e}");
    }
}
