//! Users, their tokens (hashed) and who owns which VM. The rules about
//! them (names, roles, token secrets) are the engine's `accounts`; these
//! are the rows.

use pvedeck_domain::account::{Quota, Role, TokenInfo, UserInfo};

use super::StoreError;

/// A token as stored: what it shows, and the hash its secret is found by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub info: TokenInfo,
    /// SHA-256 of the whole token, hex.
    pub hash: String,
}

/// Groups are kept as a JSON list in one column.
pub(super) fn groups_json(groups: &[String]) -> String {
    serde_json::to_string(groups).unwrap_or_else(|_| "[]".to_string())
}

/// A user row's columns, read back. A role this version does not know
/// gives no more than a user's.
pub(super) fn user_from_columns(
    name: String,
    role: &str,
    groups: &str,
    quota: Option<&str>,
    source: String,
    created: i64,
) -> UserInfo {
    UserInfo {
        name,
        role: Role::parse(role).unwrap_or(Role::User),
        groups: serde_json::from_str(groups).unwrap_or_default(),
        quota: quota.and_then(|q| Quota::parse(q).ok()),
        source,
        created,
    }
}

pub trait PeopleStore: Send + Sync {
    /// A number that changes when someone else (the admin commands,
    /// another pvedeck) changed users, tokens or owners: the directory
    /// reads them again when it moves.
    fn data_version(&self) -> Result<i64, StoreError>;

    fn users(&self) -> Result<Vec<UserInfo>, StoreError>;

    fn user(&self, name: &str) -> Result<Option<UserInfo>, StoreError>;

    /// Adds a user; `false` when the name is taken.
    fn add_user(&self, user: &UserInfo) -> Result<bool, StoreError>;

    /// A user signed in through OpenID Connect: made at the first sign-in,
    /// role and groups as the provider says now at each.
    fn upsert_user(&self, user: &UserInfo) -> Result<(), StoreError>;

    /// Removes a user and their tokens; `false` when there was none. Their
    /// VMs keep the name as owner (admins see it, and may assign them).
    fn remove_user(&self, name: &str) -> Result<bool, StoreError>;

    /// Sets (or, with `None`, clears) a user's own quota; `false` when
    /// there is no such user.
    fn set_quota(&self, name: &str, quota: Option<Quota>) -> Result<bool, StoreError>;

    fn set_role(&self, name: &str, role: Role, groups: &[String]) -> Result<bool, StoreError>;

    fn add_token(&self, token: &TokenRow) -> Result<(), StoreError>;

    fn tokens(&self) -> Result<Vec<TokenRow>, StoreError>;

    /// Revokes a token; its user, or `None` when there was no such token.
    fn revoke_token(&self, id: &str) -> Result<Option<String>, StoreError>;

    /// When tokens were last used: (id, ms). A time never goes back.
    fn touch_tokens(&self, used: &[(String, i64)]) -> Result<(), StoreError>;

    /// Every VM of `cluster` with an owner: (vmid, user).
    fn owners(&self, cluster: &str) -> Result<Vec<(u32, String)>, StoreError>;

    fn set_owner(&self, cluster: &str, vmid: u32, user: &str, at: i64) -> Result<(), StoreError>;

    fn remove_owner(&self, cluster: &str, vmid: u32) -> Result<(), StoreError>;
}
