//! Who may change anything: `ALLOW_IPS` and `API_TOKENS`, one rule for the
//! `/api` routes and the UI's server functions.

use std::net::IpAddr;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Engine, EngineError};
use crate::net::AllowList;

/// Compares the SHA-256 digests of both in constant time: the digests have
/// one length, so neither a token's length nor where it first differs
/// changes how long the comparison takes.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    Sha256::digest(a)
        .as_slice()
        .ct_eq(Sha256::digest(b).as_slice())
        .into()
}

impl Engine {
    /// `client`: the TCP peer (none for an in-process call); `token`: the
    /// bearer token or the UI session's.
    pub fn authorize(
        &self,
        client: Option<IpAddr>,
        token: Option<&str>,
    ) -> Result<(), EngineError> {
        let allowed = match client {
            Some(ip) => self.config.allow_ips.allows(ip),
            None => self.config.allow_ips == AllowList::Everyone,
        };
        if !allowed {
            let who = client.map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
            return Err(EngineError::Forbidden(format!(
                "client {who} is not allowed to change anything (ALLOW_IPS)"
            )));
        }
        if self.config.api_tokens.is_empty() {
            return Ok(());
        }
        // Every token is compared: which one matched takes no less time.
        let valid = token.is_some_and(|token| {
            self.config.api_tokens.iter().fold(false, |found, t| {
                found | same_secret(t.expose().as_bytes(), token.as_bytes())
            })
        });
        if valid {
            Ok(())
        } else {
            Err(EngineError::Unauthorized(
                "a valid 'Authorization: Bearer <token>' header (or a UI login) is required (API_TOKENS)"
                    .to_string(),
            ))
        }
    }

    /// Whether changes need a token at all (the UI then asks to log in).
    pub fn needs_token(&self) -> bool {
        !self.config.api_tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_content() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }
}
