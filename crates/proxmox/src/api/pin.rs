//! Trusting the Proxmox API server: its leaf certificate pinned by SHA-256
//! (`PVE_API_FINGERPRINT`, as Proxmox shows it), a CA file
//! (`PVE_API_CA_FILE`), or — loudly — nothing (`PVE_API_INSECURE=1`).
//!
//! A pin is an exact match on the leaf certificate, not "a valid chain or
//! the fingerprint": Proxmox's own certificates are signed by a per-cluster
//! CA nobody else trusts, and an ACME certificate's chain says nothing
//! about which host this is. The handshake's signature is still checked
//! against the pinned certificate's key, so a recorded certificate alone
//! does not get an attacker in.

use std::sync::{Arc, Mutex};

use pvedeck_config::pve_api::{Fingerprint, Trust};
use pvedeck_support::sync::lock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The certificate a server presented last, for the error that names it.
pub type Seen = Arc<Mutex<Option<Fingerprint>>>;

/// Accepts exactly one leaf certificate — or, without a pin
/// (`PVE_API_INSECURE=1`), any: the handshake is then still encrypted, to
/// whoever answers. `seen` keeps the fingerprint of the last certificate
/// presented, so that a refusal can say what the server has now (after a
/// renewal, the admin needs exactly that).
#[derive(Debug)]
pub struct PinnedLeaf {
    pin: Option<Fingerprint>,
    algorithms: WebPkiSupportedAlgorithms,
    seen: Seen,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl PinnedLeaf {
    pub fn new(pin: Option<Fingerprint>, seen: Seen) -> PinnedLeaf {
        PinnedLeaf {
            pin,
            algorithms: provider().signature_verification_algorithms,
            seen,
        }
    }
}

impl ServerCertVerifier for PinnedLeaf {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = Fingerprint::of(end_entity.as_ref());
        *lock(&self.seen) = Some(got);
        // Both are public values: no need for a constant-time comparison.
        if self.pin.is_none_or(|pin| pin == got) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The TLS configuration for the API client; `seen` receives the
/// fingerprint of a pinned connection's certificate.
pub fn client_config(trust: &Trust, seen: Seen) -> Result<rustls::ClientConfig, rustls::Error> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let config = match trust {
        Trust::Pinned(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedLeaf::new(Some(*pin), seen))),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedLeaf::new(None, seen))),
        Trust::Ca(certs) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certs {
                roots.add(cert.clone())?;
            }
            builder.with_root_certificates(roots)
        }
    };
    Ok(config.with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOWN: &str = "10:94:FF:00:3A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:\
                         10:94:FF:00:3A:BC:DE:F0:12:34:56:78:9A:BC:DE:3A";

    #[test]
    fn fingerprints_read_as_proxmox_and_openssl_print_them() {
        let pin = Fingerprint::parse(SHOWN).unwrap();
        assert_eq!(pin.to_string(), SHOWN);
        assert_eq!(Fingerprint::parse(&SHOWN.to_lowercase()), Some(pin));
        assert_eq!(Fingerprint::parse(&SHOWN.replace(':', "")), Some(pin));
        assert_eq!(
            Fingerprint::parse(&format!("sha256 Fingerprint={SHOWN}")),
            Some(pin)
        );
        for bad in [
            "",
            "10:94",
            &SHOWN[3..],
            &SHOWN.replace("3A", "ZZ"),
            "é".repeat(32).as_str(),
        ] {
            assert_eq!(Fingerprint::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_pin_takes_only_its_own_certificate_and_remembers_the_other() {
        let ours = b"our certificate";
        let seen = Seen::default();
        let verifier = PinnedLeaf::new(Some(Fingerprint::of(ours)), seen.clone());
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let check = |der: &[u8]| {
            verifier.verify_server_cert(
                &CertificateDer::from(der.to_vec()),
                &[],
                &name,
                &[],
                UnixTime::now(),
            )
        };
        assert!(check(ours).is_ok());
        assert!(check(b"another certificate").is_err());
        assert_eq!(
            *seen.lock().unwrap(),
            Some(Fingerprint::of(b"another certificate"))
        );
        // PVE_API_INSECURE=1: no pin, anything passes.
        let open = PinnedLeaf::new(None, Seen::default());
        let any = CertificateDer::from(b"any certificate".to_vec());
        assert!(
            open.verify_server_cert(&any, &[], &name, &[], UnixTime::now())
                .is_ok()
        );
    }
}
