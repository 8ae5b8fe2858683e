//! The REST face's certificate: self-signed for IP 127.0.0.1, made with the
//! system's `openssl` when `DATA_DIR/sim/api/cert.pem` is missing (no
//! certificate-making crate in the tree), and served with rustls (ring).
//! Its fingerprint is shown as Proxmox shows a node's: SHA-256 of the DER,
//! upper-case hex pairs joined by `:`.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct Tls {
    pub acceptor: TlsAcceptor,
    pub fingerprint: String,
}

/// Makes `cert.pem` and `key.pem` in `dir` unless both are there.
/// `CA:FALSE` so that a client may trust the certificate itself as its root
/// (webpki refuses a CA certificate as the server's own).
fn make(dir: &Path) -> Result<(), String> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert.exists() && key.exists() {
        return Ok(());
    }
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "3650", "-subj", "/CN=pvedeck-sim"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run openssl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600));
    Ok(())
}

/// `AB:CD:…`, as `ssl_fingerprint` of `GET /nodes` shows it.
pub fn fingerprint(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The certificate of `dir` (made if missing), ready to serve.
pub fn load(dir: &Path) -> Result<Tls, String> {
    make(dir)?;
    let cert_file = dir.join("cert.pem");
    let cert = CertificateDer::from_pem_file(&cert_file)
        .map_err(|e| format!("{}: {e}", cert_file.display()))?;
    let key_file = dir.join("key.pem");
    let key = PrivateKeyDer::from_pem_file(&key_file)
        .map_err(|e| format!("{}: {e}", key_file.display()))?;
    let fingerprint = fingerprint(cert.as_ref());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(|e| e.to_string())?;
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
        let fp = fingerprint(b"abc");
        assert_eq!(fp.len(), 32 * 3 - 1);
        assert!(fp.starts_with("BA:78:16:BF:"), "{fp}");
    }
}
