//! Sign-in through an OpenID Connect provider (`OIDC_*`): where the
//! provider is, how pvedeck is known to it, and which claim says what a
//! user may do. The flow itself is the server's.

use pvedeck_domain::secret::Secret;

/// `OIDC_ISSUER`, `OIDC_CLIENT_ID`, `OIDC_CLIENT_SECRET` (or `_FILE`),
/// `OIDC_GROUPS_CLAIM`, `OIDC_ADMIN_GROUPS`.
#[derive(Debug, Clone)]
pub struct OidcSettings {
    /// The provider's issuer URL, as its discovery document and ID tokens
    /// name it (`https://auth.example.org/realms/main`).
    pub issuer: String,
    pub client_id: String,
    /// `None`: a public client (PKCE alone).
    pub client_secret: Option<Secret>,
    /// The ID token claim that lists the user's groups (`groups`).
    pub groups_claim: String,
    /// Members of any of these groups are admins.
    pub admin_groups: Vec<String>,
}
