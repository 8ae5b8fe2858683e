//! Sign-in through an OpenID Connect provider (docs/security.md#signing-in):
//! the authorization code flow with PKCE, `state` and `nonce`, through the
//! maintained `openidconnect` crate, which verifies the ID token's
//! signature against the provider's keys (JWKS), its issuer, audience,
//! expiry and nonce. The provider's discovery document and keys are cached
//! and read again when a token names a key they do not have (the provider
//! rotated its keys).
//!
//! What the flow needs between the redirect and the callback (the PKCE
//! verifier, the nonce, where to go next) stays here, in memory, under the
//! random `state`, for ten minutes at most: a callback is taken once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, SignatureVerificationError, TokenResponse,
};
use pvedeck_config::oidc::OidcSettings;
use pvedeck_domain::account::is_user_name;
use pvedeck_support::sync::lock;

/// How long a started sign-in may take at the provider.
const PENDING_TTL: Duration = Duration::from_secs(600);
/// Sign-ins under way at most (the oldest goes first): a flood of started
/// sign-ins cannot grow memory without end.
const MAX_PENDING: usize = 10_000;
/// The provider's keys are read again at most this often.
const REREAD_KEYS: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("the OpenID provider at {issuer} cannot be read: {why}")]
    Discovery { issuer: String, why: String },
    #[error("this sign-in is unknown or expired (wrong or reused state): start again")]
    UnknownState,
    #[error("the provider refused: {0}")]
    Provider(String),
    #[error("the provider did not exchange the code: {0}")]
    Exchange(String),
    #[error("the provider sent no ID token")]
    NoIdToken,
    #[error("the ID token is not valid: {0}")]
    Token(String),
    #[error("the provider's user name '{0}' is not one pvedeck takes")]
    Name(String),
    #[error("no randomness: {0}")]
    Random(String),
    #[error("{0}")]
    Setup(String),
}

/// Who the provider says signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub groups: Vec<String>,
}

/// A client made from a discovery document: its authorization endpoint is
/// known, its token endpoint may be.
type Discovered = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

struct Pending {
    nonce: Nonce,
    verifier: PkceCodeVerifier,
    redirect: String,
    next: String,
    started: Instant,
}

struct Provider {
    metadata: CoreProviderMetadata,
    read: Instant,
}

pub struct Oidc {
    settings: OidcSettings,
    http: reqwest::Client,
    provider: tokio::sync::Mutex<Option<Arc<Provider>>>,
    pending: Mutex<HashMap<String, Pending>>,
}

impl Oidc {
    pub fn new(settings: OidcSettings) -> Result<Oidc, SignInError> {
        let http = reqwest::Client::builder()
            // Following redirects would let a provider's answer make
            // pvedeck fetch any URL (the crate's own advice).
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| SignInError::Setup(format!("no HTTP client: {e}")))?;
        Ok(Oidc {
            settings,
            http,
            provider: tokio::sync::Mutex::default(),
            pending: Mutex::default(),
        })
    }

    pub fn settings(&self) -> &OidcSettings {
        &self.settings
    }

    /// The provider's discovery document and keys: cached, read again when
    /// `again` (a token named a key they lack), at most every
    /// [`REREAD_KEYS`].
    async fn provider(&self, again: bool) -> Result<Arc<Provider>, SignInError> {
        let mut cached = self.provider.lock().await;
        if let Some(p) = cached.as_ref()
            && (!again || p.read.elapsed() < REREAD_KEYS)
        {
            return Ok(p.clone());
        }
        let issuer = &self.settings.issuer;
        let discovery_error = |why: String| SignInError::Discovery {
            issuer: issuer.clone(),
            why,
        };
        let url = IssuerUrl::new(issuer.clone()).map_err(|e| discovery_error(e.to_string()))?;
        let metadata = CoreProviderMetadata::discover_async(url, &self.http)
            .await
            .map_err(|e| discovery_error(error_chain(&e)))?;
        let provider = Arc::new(Provider {
            metadata,
            read: Instant::now(),
        });
        *cached = Some(provider.clone());
        Ok(provider)
    }

    fn client(&self, provider: &Provider, redirect: &str) -> Result<Discovered, SignInError> {
        Ok(CoreClient::from_provider_metadata(
            provider.metadata.clone(),
            ClientId::new(self.settings.client_id.clone()),
            self.settings
                .client_secret
                .as_ref()
                .map(|s| ClientSecret::new(s.expose().to_string())),
        )
        .set_redirect_uri(
            RedirectUrl::new(redirect.to_string())
                .map_err(|e| SignInError::Setup(format!("redirect URI {redirect}: {e}")))?,
        ))
    }

    /// Starts a sign-in: the provider's URL to send the browser to.
    /// `redirect`: pvedeck's callback as the provider knows it; `next`:
    /// the page to go back to.
    pub async fn begin(&self, redirect: &str, next: &str) -> Result<String, SignInError> {
        let provider = self.provider(false).await?;
        let client = self.client(&provider, redirect)?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("profile".to_string()))
            .add_scope(Scope::new("email".to_string()))
            .add_scope(Scope::new(self.settings.groups_claim.clone()))
            .set_pkce_challenge(challenge)
            .url();
        let now = Instant::now();
        let mut pending = lock(&self.pending);
        pending.retain(|_, p| now.duration_since(p.started) < PENDING_TTL);
        if pending.len() >= MAX_PENDING
            && let Some(oldest) = pending
                .iter()
                .min_by_key(|(_, p)| p.started)
                .map(|(k, _)| k.clone())
        {
            pending.remove(&oldest);
        }
        pending.insert(
            state.secret().clone(),
            Pending {
                nonce,
                verifier,
                redirect: redirect.to_string(),
                next: next.to_string(),
                started: now,
            },
        );
        Ok(url.to_string())
    }

    /// Ends a sign-in at the callback: who signed in, and the page to go
    /// back to. A `state` is taken once: a replayed callback is unknown.
    pub async fn finish(&self, state: &str, code: &str) -> Result<(Identity, String), SignInError> {
        let pending = lock(&self.pending)
            .remove(state)
            .filter(|p| p.started.elapsed() < PENDING_TTL)
            .ok_or(SignInError::UnknownState)?;
        let provider = self.provider(false).await?;
        let client = self.client(&provider, &pending.redirect)?;
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| SignInError::Exchange(e.to_string()))?
            .set_pkce_verifier(pending.verifier)
            .request_async(&self.http)
            .await
            .map_err(|e| SignInError::Exchange(error_chain(&e)))?;
        let token = response.id_token().ok_or(SignInError::NoIdToken)?;
        let verifier = client.id_token_verifier();
        let claims = match token.claims(&verifier, &pending.nonce) {
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            )) => {
                // A key the cached set lacks: the provider may have rotated.
                let fresh = self.provider(true).await?;
                let client = self.client(&fresh, &pending.redirect)?;
                let verifier = client.id_token_verifier();
                token
                    .claims(&verifier, &pending.nonce)
                    .cloned()
                    .map_err(|e| SignInError::Token(error_chain(&e)))?
            }
            Err(e) => return Err(SignInError::Token(error_chain(&e))),
            Ok(claims) => claims.clone(),
        };
        let name = claims
            .preferred_username()
            .map(|n| n.as_str().to_string())
            .or_else(|| claims.email().map(|e| e.as_str().to_string()))
            .unwrap_or_else(|| claims.subject().as_str().to_string());
        if !is_user_name(&name) {
            return Err(SignInError::Name(name));
        }
        let groups = groups_claim(&token.to_string(), &self.settings.groups_claim);
        Ok((Identity { name, groups }, pending.next))
    }
}

/// The groups a (verified) ID token's claim lists: an array of names, or
/// one name; names pvedeck cannot take are left out.
fn groups_claim(jwt: &str, claim: &str) -> Vec<String> {
    let payload = jwt
        .split('.')
        .nth(1)
        .and_then(|p| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p)
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    let Some(value) = payload.as_ref().and_then(|p| p.get(claim)) else {
        return Vec::new();
    };
    let names: Vec<&str> = match value {
        serde_json::Value::Array(items) => items.iter().filter_map(|v| v.as_str()).collect(),
        serde_json::Value::String(one) => vec![one.as_str()],
        _ => Vec::new(),
    };
    let mut groups: Vec<String> = Vec::new();
    for name in names {
        // Keycloak's full group paths (`/team/dev`) count by their last part.
        let name = name.rsplit('/').next().unwrap_or(name);
        if is_user_name(name) && !groups.iter().any(|g| g == name) {
            groups.push(name.to_string());
        }
    }
    groups
}

impl super::Engine {
    /// `GET /auth/login`: where to send the browser to sign in. `base`:
    /// this server's origin as the browser reached it (`PUBLIC_URL` when
    /// set); the provider sends it back to `<base>/auth/callback`.
    pub async fn sign_in_url(&self, base: &str, next: &str) -> Result<String, super::EngineError> {
        let oidc = self.oidc.as_ref().ok_or_else(|| {
            super::EngineError::NotFound("no OpenID Connect provider is configured".to_string())
        })?;
        let base = self.config.sites.public.as_deref().unwrap_or(base);
        let redirect = format!("{}/auth/callback", base.trim_end_matches('/'));
        oidc.begin(&redirect, pvedeck_domain::rules::local_path(next))
            .await
            .map_err(|e| super::EngineError::Unavailable(e.to_string()))
    }

    /// `GET /auth/callback`: the provider's answer. A valid one makes (or
    /// refreshes) the user and opens a session: its id and the page to go
    /// to. Every outcome is audited; a refusal opens nothing.
    pub async fn sign_in_callback(
        &self,
        client: Option<std::net::IpAddr>,
        state: Option<&str>,
        code: Option<&str>,
        refused: Option<&str>,
    ) -> Result<(String, String), super::EngineError> {
        use super::{Actor, EngineError};
        let who = Actor {
            principal: None,
            client,
        };
        let result = match (&self.oidc, state, code, refused) {
            (None, ..) => Err(EngineError::NotFound(
                "no OpenID Connect provider is configured".to_string(),
            )),
            (Some(_), _, _, Some(why)) => Err(EngineError::Unauthorized(
                SignInError::Provider(why.chars().take(200).collect()).to_string(),
            )),
            (Some(oidc), Some(state), Some(code), None) => {
                oidc.finish(state, code).await.map_err(|e| match e {
                    SignInError::UnknownState => EngineError::bad(e.to_string()),
                    SignInError::Discovery { .. } => EngineError::Unavailable(e.to_string()),
                    other => EngineError::Unauthorized(other.to_string()),
                })
            }
            (Some(_), ..) => Err(EngineError::bad(
                "the callback has no code and state: start the sign-in again",
            )),
        };
        let (identity, next) = match result {
            Ok(done) => done,
            Err(e) => {
                self.audit(
                    &who,
                    "sign-in",
                    None,
                    "openid".into(),
                    format!("refused: {e}"),
                )
                .await;
                return Err(e);
            }
        };
        let settings = self.oidc.as_ref().map(Oidc::settings);
        let admin = settings.is_some_and(|s| {
            identity
                .groups
                .iter()
                .any(|g| s.admin_groups.iter().any(|a| a == g))
        });
        let role = if admin {
            pvedeck_domain::account::Role::Admin
        } else {
            pvedeck_domain::account::Role::User
        };
        let user = pvedeck_domain::account::UserInfo {
            name: identity.name.clone(),
            role,
            groups: identity.groups.clone(),
            quota: None,
            source: "oidc".to_string(),
            created: pvedeck_support::clock::now_ms(),
        };
        let directory = self.directory.clone();
        let saved = tokio::task::spawn_blocking(move || {
            directory.store().upsert_user(&user)?;
            directory.reload()
        })
        .await
        .map_err(|e| EngineError::Internal(e.to_string()))?;
        saved?;
        let session = self
            .sessions
            .open(
                Instant::now(),
                super::sessions::Subject::User(identity.name.clone()),
            )
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        let who = Actor {
            principal: Some(pvedeck_domain::account::Principal {
                name: identity.name,
                role,
                groups: identity.groups,
            }),
            client,
        };
        self.audit(
            &who,
            "sign-in",
            None,
            "openid".into(),
            format!("ok: {}", role.as_str()),
        )
        .await;
        Ok((session, next))
    }
}

/// An error and its sources, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(payload: &str) -> String {
        let encode = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", encode("{}"), encode(payload))
    }

    #[test]
    fn groups_come_from_the_named_claim_in_any_usual_shape() {
        let token = jwt(r#"{"groups":["dev","/org/ops","dev","a b"],"roles":"admins"}"#);
        assert_eq!(groups_claim(&token, "groups"), ["dev", "ops"]);
        assert_eq!(groups_claim(&token, "roles"), ["admins"]);
        assert!(groups_claim(&token, "missing").is_empty());
        assert!(groups_claim("not-a-jwt", "groups").is_empty());
    }
}
