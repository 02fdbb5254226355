//! The cluster CA: generating it, issuing node certificates with it, and
//! reading back what a certificate says (cluster, node, expiry).
//!
//! Where the cluster name lives, so "names a different cluster" can be
//! checked: the CA's subject has `OU=<cluster>`; a node certificate has
//! `CN=<node>`, `OU=<cluster>` and the DNS names `<cluster>.eddy.internal`
//! and `<node>.<cluster>.eddy.internal`. The first DNS name is what peers
//! verify with WebPKI's ordinary name check (the client's server name, and
//! the same check on client certificates in [`super::identity`]).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use time::{Duration as TimeDuration, OffsetDateTime};

/// The organisation in every eddy certificate's subject.
const ORGANIZATION: &str = "eddy cluster";
/// Certificates are valid from an hour ago, so a peer whose clock is a little
/// behind does not see a "not yet valid" certificate.
const BACKDATE: TimeDuration = TimeDuration::hours(1);
/// Default lifetime of a CA (10 years) and of a node certificate (1 year).
pub const DEFAULT_CA_DAYS: u32 = 3650;
pub const DEFAULT_NODE_DAYS: u32 = 365;

/// An error of certificate handling, ready to print.
#[derive(Debug)]
pub struct CaError(pub String);

impl std::fmt::Display for CaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CaError {}

fn err(msg: impl Into<String>) -> CaError {
    CaError(msg.into())
}

/// Cluster and node names become DNS labels in certificates: 1 to 63 of
/// `a-z`, `0-9`, `-`, not starting or ending with `-`.
pub fn check_name(what: &str, name: &str) -> Result<(), CaError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(err(format!(
            "invalid {what} name `{name}`: use 1 to 63 lowercase letters, digits and `-` (not at either end)"
        )))
    }
}

/// The DNS name every node certificate of `cluster` carries.
pub fn cluster_dns_name(cluster: &str) -> String {
    format!("{cluster}.eddy.internal")
}

/// The DNS name of one node of `cluster`.
pub fn node_dns_name(cluster: &str, node: &str) -> String {
    format!("{node}.{cluster}.eddy.internal")
}

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    // `days = 0` gives a certificate that has already expired: useful to
    // check that peers refuse it.
    params.not_after = if days == 0 {
        now - TimeDuration::seconds(1)
    } else {
        now + TimeDuration::days(i64::from(days))
    };
}

fn random_serial() -> SerialNumber {
    let mut serial: [u8; 16] = rand::random();
    serial[0] &= 0x7f; // positive, as RFC 5280 wants
    SerialNumber::from_slice(&serial)
}

/// Generates a self-signed CA for `cluster`, valid for `days`.
pub fn generate_ca(cluster: &str, days: u32) -> Result<CertAndKey, CaError> {
    check_name("cluster", cluster)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("eddy cluster CA {cluster}"));
    dn.push(DnType::OrganizationName, ORGANIZATION);
    dn.push(DnType::OrganizationalUnitName, cluster);
    params.distinguished_name = dn;
    // Node certificates only: no intermediate CAs below this one.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.serial_number = Some(random_serial());
    validity(&mut params, days);
    let key = KeyPair::generate().map_err(|e| err(format!("generating the CA key: {e}")))?;
    let cert = params
        .self_signed(&key)
        .map_err(|e| err(format!("signing the CA certificate: {e}")))?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Issues a certificate for `node` signed by the CA, valid for `days`, naming
/// `cluster` (normally the CA's own; tests pass another to check refusals).
pub fn issue_node(
    ca: &CertAndKey,
    cluster: &str,
    node: &str,
    days: u32,
) -> Result<CertAndKey, CaError> {
    check_name("cluster", cluster)?;
    check_name("node", node)?;
    let ca_key =
        KeyPair::from_pem(&ca.key_pem).map_err(|e| err(format!("reading the CA key: {e}")))?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, &ca_key)
        .map_err(|e| err(format!("reading the CA certificate: {e}")))?;
    let mut params = CertificateParams::new(vec![
        cluster_dns_name(cluster),
        node_dns_name(cluster, node),
    ])
    .map_err(|e| err(format!("node names: {e}")))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, node);
    dn.push(DnType::OrganizationName, ORGANIZATION);
    dn.push(DnType::OrganizationalUnitName, cluster);
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Every node both accepts and opens connections.
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.serial_number = Some(random_serial());
    validity(&mut params, days);
    let key = KeyPair::generate().map_err(|e| err(format!("generating the node key: {e}")))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| err(format!("signing the node certificate: {e}")))?;
    Ok(CertAndKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// What eddy reads from a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertSummary {
    /// The `OU` of the subject: the cluster.
    pub cluster: Option<String>,
    /// The `CN` of the subject: the node name (or the CA's title).
    pub common_name: Option<String>,
    pub is_ca: bool,
    /// Seconds since the Unix epoch.
    pub not_after_unix: i64,
}

/// Reads the fields eddy uses from a DER certificate.
pub fn summarize(der: &[u8]) -> Result<CertSummary, CaError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| err(format!("not an X.509 certificate: {e}")))?;
    let subject = cert.subject();
    let first = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue<'_>>| {
        it.next().and_then(|a| a.as_str().ok()).map(str::to_owned)
    };
    Ok(CertSummary {
        cluster: first(&mut subject.iter_organizational_unit()),
        common_name: first(&mut subject.iter_common_name()),
        is_ca: cert.is_ca(),
        not_after_unix: cert.validity().not_after.timestamp(),
    })
}

/// The DER certificates in a PEM text, in order.
pub fn pem_certs(
    pem: &str,
    what: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, CaError> {
    use rustls::pki_types::pem::PemObject;
    let certs: Result<Vec<_>, _> =
        rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()).collect();
    let certs =
        certs.map_err(|e| err(format!("{}: not a PEM certificate: {e}", what.display())))?;
    if certs.is_empty() {
        return Err(err(format!(
            "{}: no certificate in the file",
            what.display()
        )));
    }
    Ok(certs)
}

/// Reads a text file, naming it in the error.
pub fn read_text(path: &Path) -> Result<String, CaError> {
    fs::read_to_string(path).map_err(|e| err(format!("cannot read {}: {e}", path.display())))
}

/// Writes `contents` to `path`; refuses to replace an existing file unless
/// `force`. Private keys get mode 0600 from creation on (never readable by
/// others, not even briefly).
pub fn write_file(path: &Path, contents: &str, private: bool, force: bool) -> Result<(), CaError> {
    if path.exists() && !force {
        return Err(err(format!(
            "{} already exists; use --force to overwrite it",
            path.display()
        )));
    }
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if private { 0o600 } else { 0o644 });
    }
    let mut f = opts
        .open(path)
        .map_err(|e| err(format!("cannot write {}: {e}", path.display())))?;
    #[cfg(unix)]
    if private {
        // An existing file keeps its old mode through `open`: set it.
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| err(format!("cannot restrict {}: {e}", path.display())))?;
    }
    f.write_all(contents.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| err(format!("cannot write {}: {e}", path.display())))
}

/// Refuses a private key that others can read: a leaked node key lets anyone
/// join the cluster.
pub fn check_key_permissions(path: &Path) -> Result<(), CaError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta =
            fs::metadata(path).map_err(|e| err(format!("cannot read {}: {e}", path.display())))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(err(format!(
                "{} is readable by others (mode {mode:o}); run `chmod 600 {}`",
                path.display(),
                path.display()
            )));
        }
    }
    let _ = path;
    Ok(())
}

/// The files of a CA directory.
pub fn ca_paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("ca.crt"), dir.join("ca.key"))
}

/// `eddy cluster init`: creates `dir` if needed and writes `ca.crt` and
/// `ca.key`. Returns the paths written.
pub fn init_ca_dir(
    dir: &Path,
    cluster: &str,
    days: u32,
    force: bool,
) -> Result<(PathBuf, PathBuf), CaError> {
    check_name("cluster", cluster)?;
    let (crt, key) = ca_paths(dir);
    if !force {
        for p in [&crt, &key] {
            if p.exists() {
                return Err(err(format!(
                    "{} already exists; use --force to overwrite it",
                    p.display()
                )));
            }
        }
    }
    fs::create_dir_all(dir).map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
    let ca = generate_ca(cluster, days)?;
    // Key first: a directory with a certificate but no key is useless.
    write_file(&key, &ca.key_pem, true, force)?;
    write_file(&crt, &ca.cert_pem, false, force)?;
    Ok((crt, key))
}

/// Reads the CA of a directory written by [`init_ca_dir`], with its cluster.
pub fn load_ca_dir(dir: &Path) -> Result<(CertAndKey, String), CaError> {
    let (crt, key) = ca_paths(dir);
    let ca = CertAndKey {
        cert_pem: read_text(&crt)?,
        key_pem: read_text(&key)?,
    };
    let der = pem_certs(&ca.cert_pem, &crt)?;
    let summary = summarize(&der[0])?;
    if !summary.is_ca {
        return Err(err(format!("{} is not a CA certificate", crt.display())));
    }
    let cluster = summary.cluster.ok_or_else(|| {
        err(format!(
            "{} names no cluster (no OU in its subject)",
            crt.display()
        ))
    })?;
    Ok((ca, cluster))
}

/// `eddy cluster issue`: writes `out/NODE.crt` and `out/NODE.key` for the
/// CA's cluster. Returns the paths written.
pub fn issue_to_dir(
    ca_dir: &Path,
    out: &Path,
    node: &str,
    days: u32,
    force: bool,
) -> Result<(PathBuf, PathBuf), CaError> {
    check_name("node", node)?;
    let crt = out.join(format!("{node}.crt"));
    let key = out.join(format!("{node}.key"));
    if !force {
        for p in [&crt, &key] {
            if p.exists() {
                return Err(err(format!(
                    "{} already exists; use --force to overwrite it",
                    p.display()
                )));
            }
        }
    }
    let (ca, cluster) = load_ca_dir(ca_dir)?;
    let issued = issue_node(&ca, &cluster, node, days)?;
    fs::create_dir_all(out).map_err(|e| err(format!("cannot create {}: {e}", out.display())))?;
    write_file(&key, &issued.key_pem, true, force)?;
    write_file(&crt, &issued.cert_pem, false, force)?;
    Ok((crt, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("cluster", "blue-1").is_ok());
        for bad in ["", "-a", "a-", "A", "a.b", "a b", &"x".repeat(64)] {
            assert!(check_name("cluster", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ca_and_node_carry_the_cluster() {
        let ca = generate_ca("blue", 10).expect("ca");
        let node = issue_node(&ca, "blue", "node-a", 5).expect("node");
        let p = Path::new("x");
        let ca_sum = summarize(&pem_certs(&ca.cert_pem, p).expect("pem")[0]).expect("parse");
        assert!(ca_sum.is_ca);
        assert_eq!(ca_sum.cluster.as_deref(), Some("blue"));
        let n = summarize(&pem_certs(&node.cert_pem, p).expect("pem")[0]).expect("parse");
        assert!(!n.is_ca);
        assert_eq!(n.cluster.as_deref(), Some("blue"));
        assert_eq!(n.common_name.as_deref(), Some("node-a"));
        let expired = issue_node(&ca, "blue", "old", 0).expect("node");
        let e = summarize(&pem_certs(&expired.cert_pem, p).expect("pem")[0]).expect("parse");
        assert!(e.not_after_unix < OffsetDateTime::now_utc().unix_timestamp());
    }

    #[test]
    fn files_are_not_overwritten_and_keys_are_private() {
        let dir = tempfile::tempdir().expect("tmp");
        let ca_dir = dir.path().join("ca");
        init_ca_dir(&ca_dir, "blue", 10, false).expect("init");
        let again = init_ca_dir(&ca_dir, "blue", 10, false).unwrap_err();
        assert!(again.0.contains("already exists; use --force"), "{again}");
        init_ca_dir(&ca_dir, "blue", 10, true).expect("forced");
        check_key_permissions(&ca_dir.join("ca.key")).expect("0600");
        let out = dir.path().join("nodes");
        let (crt, key) = issue_to_dir(&ca_dir, &out, "n1", 5, false).expect("issue");
        assert!(crt.ends_with("n1.crt") && key.ends_with("n1.key"));
        check_key_permissions(&key).expect("0600");
        assert!(issue_to_dir(&ca_dir, &out, "n1", 5, false).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).expect("chmod");
            assert!(
                check_key_permissions(&key)
                    .unwrap_err()
                    .0
                    .contains("chmod 600")
            );
        }
    }
}
