//! The REST face's certificate: self-signed for IP 127.0.0.1, made in the
//! process with `rcgen` (ring, as rustls here) when
//! `DATA_DIR/sim/api/cert.pem` is missing, and served with rustls.
//! Its fingerprint is shown as Proxmox shows a node's (the same
//! `Fingerprint` the `api` backend pins): SHA-256 of the DER, upper-case
//! hex pairs joined by `:`.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    PKCS_ECDSA_P256_SHA256, SanType,
};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use pvedeck_config::pve_api::Fingerprint;
use pvedeck_support::files::write_atomically;

/// How long a new certificate is valid: ten years, as before (`-days 3650`).
const VALID: Duration = Duration::from_secs(3650 * 24 * 3600);

pub struct Tls {
    pub acceptor: TlsAcceptor,
    pub fingerprint: String,
}

/// Why the REST face has no certificate to serve.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make a certificate: {0}")]
    Make(#[from] rcgen::Error),
    #[error("{}: {source}", file.display())]
    Write {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

/// A new self-signed certificate for 127.0.0.1 and its key, both PEM.
/// `CA:FALSE` (critical) so that a client may trust the certificate itself
/// as its root (webpki refuses a CA certificate as the server's own).
fn self_signed() -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "pvedeck-sim");
    params.distinguished_name = name;
    params.subject_alt_names = vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))];
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now;
    params.not_after = now + VALID;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Makes `cert.pem` and `key.pem` in `dir` unless both are there; both
/// 0600 from the first byte.
fn make(dir: &Path) -> Result<(), TlsError> {
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert_file.exists() && key_file.exists() {
        return Ok(());
    }
    let (cert, key) = self_signed()?;
    for (file, pem) in [(key_file, key), (cert_file, cert)] {
        write_atomically(&file, pem.as_bytes())
            .map_err(|source| TlsError::Write { file, source })?;
    }
    Ok(())
}

/// The certificate of `dir` (made if missing), ready to serve.
pub fn load(dir: &Path) -> Result<Tls, TlsError> {
    make(dir)?;
    let cert_file = dir.join("cert.pem");
    let cert = CertificateDer::from_pem_file(&cert_file).map_err(|source| TlsError::Read {
        file: cert_file,
        source,
    })?;
    let key_file = dir.join("key.pem");
    let key = PrivateKeyDer::from_pem_file(&key_file).map_err(|source| TlsError::Read {
        file: key_file,
        source,
    })?;
    // `AB:CD:…`, as `ssl_fingerprint` of `GET /nodes` shows it.
    let fingerprint = Fingerprint::of(cert.as_ref()).to_string();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    Ok(Tls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        fingerprint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_upper_case_colon_hex() {
        let fp = Fingerprint::of(b"abc").to_string();
        assert_eq!(fp.len(), 32 * 3 - 1);
        assert!(fp.starts_with("BA:78:16:BF:"), "{fp}");
    }

    #[test]
    fn a_certificate_is_made_once_kept_private_and_served() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = load(dir.path()).unwrap();
        for name in ["cert.pem", "key.pem"] {
            let mode = std::fs::metadata(dir.path().join(name))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
        let again = load(dir.path()).unwrap();
        assert_eq!(first.fingerprint, again.fingerprint);
        let pem = std::fs::read_to_string(dir.path().join("cert.pem")).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    }
}
