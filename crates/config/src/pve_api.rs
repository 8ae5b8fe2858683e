//! How pvedeck reaches the Proxmox REST API (`PVE_BACKEND=api`): where it
//! is, the token, and how its certificate is trusted. Built here from the
//! environment; the `api` adapter of `pvedeck-proxmox` takes it as it is.

use std::fmt;

use pvedeck_domain::secret::Secret;
use rustls_pki_types::CertificateDer;
use sha2::{Digest, Sha256};

/// Where the API is and how pvedeck is known to it.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// `https://<host>:8006/api2/json`, without a trailing slash.
    pub url: String,
    /// `user@realm!tokenid=secret`.
    pub token: Secret,
    pub trust: Trust,
}

/// How the API server is trusted.
#[derive(Debug, Clone)]
pub enum Trust {
    Pinned(Fingerprint),
    /// PEM certificates of the CA(s) that sign the server's certificate.
    Ca(Vec<CertificateDer<'static>>),
    Insecure,
}

/// The SHA-256 of a certificate's DER bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// `AB:CD:…` as Proxmox prints it; lower case and without colons are
    /// taken too (what an admin pastes from `openssl x509 -fingerprint`,
    /// after its `sha256 Fingerprint=` prefix, also works).
    pub fn parse(raw: &str) -> Option<Fingerprint> {
        let raw = raw.trim();
        let raw = raw
            .rsplit_once('=')
            .map_or(raw, |(_, fingerprint)| fingerprint);
        let hex: String = raw.chars().filter(|c| *c != ':').collect();
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Fingerprint(out))
    }

    pub fn of(der: &[u8]) -> Fingerprint {
        Fingerprint(Sha256::digest(der).into())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{byte:02X}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// Whether `user@realm!tokenid=secret` has each of its parts.
pub fn token_shape(token: &str) -> bool {
    let Some((id, secret)) = token.split_once('=') else {
        return false;
    };
    let Some((user, name)) = id.split_once('!') else {
        return false;
    };
    user.contains('@') && !name.is_empty() && !secret.is_empty()
}
