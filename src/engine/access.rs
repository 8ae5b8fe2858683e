//! Who may change anything: `ALLOW_IPS` and `API_TOKENS`, one rule for the
//! `/api` routes and the UI's server functions.

use std::net::IpAddr;
use std::time::Instant;

use pvedeck_config::allow::AllowList;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Engine, EngineError};

/// Compares the SHA-256 digests of both in constant time: the digests have
/// one length, so neither a token's length nor where it first differs
/// changes how long the comparison takes.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    Sha256::digest(a)
        .as_slice()
        .ct_eq(Sha256::digest(b).as_slice())
        .into()
}

/// Who asks for a change, besides their address.
#[derive(Debug, Clone, Copy)]
pub enum Credential<'a> {
    /// `Authorization: Bearer …` (`/api`).
    Token(Option<&'a str>),
    /// The UI's session cookie.
    Session(Option<&'a str>),
}

impl Engine {
    /// `client`: the TCP peer (none for an in-process call); `token`: the
    /// bearer token.
    pub fn authorize(
        &self,
        client: Option<IpAddr>,
        token: Option<&str>,
    ) -> Result<(), EngineError> {
        self.authorize_as(client, Credential::Token(token))
    }

    /// `ALLOW_IPS` first (403), then, with `API_TOKENS`, a valid token or
    /// an open session (401).
    pub fn authorize_as(
        &self,
        client: Option<IpAddr>,
        credential: Credential<'_>,
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
        if !self.needs_token() {
            return Ok(());
        }
        let valid = match credential {
            Credential::Token(token) => token.is_some_and(|t| self.token_valid(t)),
            Credential::Session(id) => id.is_some_and(|id| self.sessions.valid(id, Instant::now())),
        };
        if valid {
            Ok(())
        } else {
            Err(EngineError::Unauthorized(
                "a valid 'Authorization: Bearer <token>' header (or a UI login) is required (API_TOKENS)"
                    .to_string(),
            ))
        }
    }

    /// Whether `token` is one of `API_TOKENS`. Every token is compared:
    /// which one matched takes no less time.
    fn token_valid(&self, token: &str) -> bool {
        self.config.api_tokens.iter().fold(false, |found, t| {
            found | same_secret(t.expose().as_bytes(), token.as_bytes())
        })
    }

    /// The UI's login: a valid token opens a session; its id (not the
    /// token) is what the browser keeps. Failed tries are limited per
    /// address (429); the address rule applies to what the session does.
    pub fn login(&self, client: Option<IpAddr>, token: &str) -> Result<String, EngineError> {
        if !self.needs_token() {
            return Err(EngineError::bad(
                "this server needs no login: it has no API_TOKENS",
            ));
        }
        let now = Instant::now();
        self.sessions
            .may_try(client, now)
            .map_err(|e| EngineError::TooMany(e.to_string()))?;
        if !self.token_valid(token) {
            self.sessions.failed(client, now);
            return Err(EngineError::Unauthorized(
                "that token is not one of API_TOKENS".to_string(),
            ));
        }
        self.sessions
            .open(client, now)
            .map_err(|e| EngineError::Internal(e.to_string()))
    }

    pub fn logout(&self, session: &str) {
        self.sessions.close(session);
    }

    /// Whether session cookies are `Secure`: the UI is served over https
    /// (`PUBLIC_URL`).
    pub fn secure_cookies(&self) -> bool {
        self.config
            .sites
            .public
            .as_deref()
            .is_some_and(|url| url.starts_with("https://"))
    }

    /// How long a UI session lasts.
    pub fn session_ttl(&self) -> std::time::Duration {
        self.sessions.ttl()
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
