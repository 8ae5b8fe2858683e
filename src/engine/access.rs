//! Who sends a request (a session, a personal token, one of `API_TOKENS`,
//! or anyone on a server without sign-in) and whether they may change
//! anything (`ALLOW_IPS`): one rule for the `/api` routes, the pages and the
//! UI's server functions.

use std::net::IpAddr;
use std::time::Instant;

use pvedeck_config::allow::AllowList;
use pvedeck_domain::account::{Principal, Role, UserInfo};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::sessions::Subject;
use super::{Actor, Engine, EngineError, accounts};

/// Compares the SHA-256 digests of both in constant time: the digests have
/// one length, so neither a token's length nor where it first differs
/// changes how long the comparison takes.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    Sha256::digest(a)
        .as_slice()
        .ct_eq(Sha256::digest(b).as_slice())
        .into()
}

/// What a request carries to say who sent it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credential<'a> {
    /// `Authorization: Bearer …`.
    pub token: Option<&'a str>,
    /// The UI's session cookie.
    pub session: Option<&'a str>,
}

/// Why a request is refused before it is read.
fn unauthorized(why: &str) -> EngineError {
    EngineError::Unauthorized(why.to_string())
}

/// A bearer token that is none of `API_TOKENS` and no personal token.
const NO_VALID_TOKEN: &str =
    "that token is not valid: it is not one of API_TOKENS or a personal token";

/// A change without a valid token: go-pve-qemu's clients have known this
/// message since `API_TOKENS` came; it stays.
const TOKEN_REQUIRED: &str =
    "a valid 'Authorization: Bearer <token>' header (or a UI login) is required (API_TOKENS)";

impl Engine {
    /// Whether anything needs signing in: `API_TOKENS`, an OpenID
    /// provider, or users in the database. Without any, pvedeck is open as
    /// go-pve-qemu was.
    pub fn sign_in_configured(&self) -> bool {
        !self.config.api_tokens.is_empty()
            || self.oidc.is_some()
            || !self.directory.people().users.is_empty()
    }

    /// Who a request comes from. A token sent must be valid (401), even
    /// beside a session; a session that ended is no one (its page asks to
    /// sign in again). Without sign-in configured, everyone is an
    /// administrator (`principal: None`).
    pub fn identify(
        &self,
        client: Option<IpAddr>,
        credential: Credential<'_>,
    ) -> Result<Actor, EngineError> {
        let open = Actor {
            principal: None,
            client,
        };
        if !self.sign_in_configured() {
            return Ok(open);
        }
        let principal = match (credential.token, credential.session) {
            (Some(token), _) => {
                // Counted before it is looked at: a brute force gets 429
                // once its client has failed five times in a minute.
                self.tokens
                    .begin(client, Instant::now())
                    .map_err(|e| EngineError::TooMany(e.to_string()))?;
                let principal = self.token_principal(token)?;
                self.tokens.succeeded(client);
                Some(principal)
            }
            (None, Some(session)) => self.session_principal(session),
            (None, None) => None,
        };
        Ok(Actor { principal, client })
    }

    /// The principal a bearer token stands for.
    fn token_principal(&self, token: &str) -> Result<Principal, EngineError> {
        if let Some(n) = self.api_token_index(token) {
            return Ok(api_admin(n));
        }
        let people = self.directory.people();
        let hash = accounts::token_hash(token);
        let Some(info) = people.tokens.get(&hash) else {
            return Err(unauthorized(NO_VALID_TOKEN));
        };
        let now = pvedeck_support::clock::now_ms();
        if info.expires.is_some_and(|end| end <= now) {
            return Err(unauthorized(&format!("token {} has expired", info.id)));
        }
        let user = people
            .users
            .get(&info.user)
            .ok_or_else(|| unauthorized("that token's user no longer exists"))?;
        self.directory.token_used(&info.id, now);
        Ok(principal_of(user))
    }

    fn session_principal(&self, id: &str) -> Option<Principal> {
        match self.sessions.subject(id, Instant::now())? {
            Subject::ApiToken(n) => Some(api_admin(n)),
            Subject::User(name) => self.directory.people().users.get(&name).map(principal_of),
        }
    }

    /// Which of `API_TOKENS` `token` is (from 1). Every token is compared:
    /// which one matched takes no less time.
    fn api_token_index(&self, token: &str) -> Option<usize> {
        self.config
            .api_tokens
            .iter()
            .enumerate()
            .fold(None, |found, (i, t)| {
                if same_secret(t.expose().as_bytes(), token.as_bytes()) {
                    Some(i + 1)
                } else {
                    found
                }
            })
    }

    /// `ALLOW_IPS` first (403), then, with sign-in configured, someone
    /// signed in (401): who may change anything.
    pub fn authorize_change(&self, actor: &Actor) -> Result<(), EngineError> {
        let allowed = match actor.client {
            Some(ip) => self.config.allow_ips.allows(ip),
            None => self.config.allow_ips == AllowList::Everyone,
        };
        if !allowed {
            let who = actor
                .client
                .map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
            return Err(EngineError::Forbidden(format!(
                "client {who} is not allowed to change anything (ALLOW_IPS)"
            )));
        }
        if self.sign_in_configured() && actor.principal.is_none() {
            return Err(unauthorized(TOKEN_REQUIRED));
        }
        Ok(())
    }

    /// The UI's login: a valid token (one of `API_TOKENS` or a personal
    /// one) opens a session; its id (not the token) is what the browser
    /// keeps. Failed tries are limited per address (429) and audited.
    pub async fn login(&self, client: Option<IpAddr>, token: &str) -> Result<String, EngineError> {
        if !self.sign_in_configured() {
            return Err(EngineError::bad(
                "this server needs no login: it has no API_TOKENS and no users",
            ));
        }
        let now = Instant::now();
        self.logins
            .begin(client, now)
            .map_err(|e| EngineError::TooMany(e.to_string()))?;
        let who = Actor {
            principal: None,
            client,
        };
        let principal = match self.token_principal(token) {
            Ok(principal) => principal,
            Err(e) => {
                let why = match &e {
                    EngineError::Unauthorized(_) if !self.config.api_tokens.is_empty() => {
                        "that token is not one of API_TOKENS or a personal token".to_string()
                    }
                    other => other.to_string(),
                };
                self.audit(
                    &who,
                    "sign-in",
                    None,
                    "token".into(),
                    format!("refused: {why}"),
                )
                .await;
                return Err(EngineError::Unauthorized(why));
            }
        };
        let subject = match self.api_token_index(token) {
            Some(n) => Subject::ApiToken(n),
            None => Subject::User(principal.name.clone()),
        };
        self.logins.forgive(client);
        let session = self
            .sessions
            .open(now, subject)
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        let who = Actor {
            principal: Some(principal),
            client,
        };
        self.audit(&who, "sign-in", None, "token".into(), "ok".into())
            .await;
        Ok(session)
    }

    /// When the open session `id` ends (a console closes then), and the
    /// hash the consoles know it by.
    pub fn session_end(&self, id: &str) -> Option<(std::time::Instant, String)> {
        self.sessions
            .ends(id)
            .map(|at| (at, super::sessions::hash(id)))
    }

    pub fn logout(&self, session: &str) {
        self.sessions.close(session);
        self.consoles
            .close_session(&super::sessions::hash(session), "you signed out");
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
}

/// The administrator the n-th of `API_TOKENS` is.
fn api_admin(n: usize) -> Principal {
    Principal {
        name: format!("api-token-{n}"),
        role: Role::Admin,
        groups: Vec::new(),
    }
}

fn principal_of(user: &UserInfo) -> Principal {
    Principal {
        name: user.name.clone(),
        role: user.role,
        groups: user.groups.clone(),
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
