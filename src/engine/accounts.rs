//! The rules about people, once, for the server and for its admin commands
//! (`pvedeck user …`, `pvedeck token …`, `pvedeck vm assign`), which work
//! on `DATA_DIR` whether or not a server runs there: names, roles, quotas,
//! personal tokens (shown once, kept as a hash) and VM owners. Each change
//! leaves an audit entry.

use pvedeck_domain::account::{AuditEntry, Quota, Role, TokenInfo, UserInfo, is_user_name};
use sha2::{Digest, Sha256};

use crate::store::{Store, StoreError, TokenRow};

/// What personal tokens start with: a token pasted in the wrong place is
/// recognisable (and secret scanners can learn the prefix).
pub const TOKEN_PREFIX: &str = "pvd_";

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error(
        "'{0}' is not a user name: 1-64 letters, digits, '.', '_', '-' or '@', not starting \
         with '-' or '.'"
    )]
    BadName(String),
    #[error("user '{0}' already exists")]
    Taken(String),
    #[error("no user '{0}'")]
    NoSuchUser(String),
    #[error("no token '{0}'")]
    NoSuchToken(String),
    #[error("'{0}' is not a group name (the rules of a user name)")]
    BadGroup(String),
    #[error("{0}")]
    Bad(String),
    #[error("no randomness for a token: {0}")]
    Random(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Who made a change, where from: the audit entry's first columns.
#[derive(Debug, Clone)]
pub struct By {
    pub user: String,
    pub client: Option<String>,
}

impl By {
    /// The admin commands on the server binary.
    pub fn command() -> By {
        By {
            user: "pvedeck".to_string(),
            client: None,
        }
    }
}

/// Records a change in the audit log. An entry that cannot be written is
/// told in the server's log and does not undo the change.
pub fn audit(store: &dyn Store, by: &By, at: i64, action: &str, target: &str, outcome: &str) {
    let entry = AuditEntry {
        id: 0,
        at,
        user: by.user.clone(),
        client: by.client.clone(),
        action: action.to_string(),
        target: Some(target.to_string()),
        summary: String::new(),
        outcome: outcome.to_string(),
    };
    if let Err(e) = store.append_audit(&entry) {
        tracing::error!(action, target, "the audit log cannot be written: {e}");
    }
}

fn check_name(name: &str) -> Result<(), AccountError> {
    if is_user_name(name) {
        Ok(())
    } else {
        Err(AccountError::BadName(name.to_string()))
    }
}

/// Checks group names (the same shape as user names), without repeats.
pub fn check_groups(groups: &[String]) -> Result<Vec<String>, AccountError> {
    let mut checked: Vec<String> = Vec::new();
    for group in groups {
        if !is_user_name(group) {
            return Err(AccountError::BadGroup(group.clone()));
        }
        if !checked.contains(group) {
            checked.push(group.clone());
        }
    }
    Ok(checked)
}

pub fn add_user(
    store: &dyn Store,
    by: &By,
    name: &str,
    role: Role,
    groups: &[String],
    now: i64,
) -> Result<UserInfo, AccountError> {
    check_name(name)?;
    let user = UserInfo {
        name: name.to_string(),
        role,
        groups: check_groups(groups)?,
        quota: None,
        source: "local".to_string(),
        created: now,
    };
    if !store.add_user(&user)? {
        return Err(AccountError::Taken(name.to_string()));
    }
    audit(
        store,
        by,
        now,
        "user add",
        &format!("user {name}"),
        &format!("ok: role {}", role.as_str()),
    );
    Ok(user)
}

pub fn remove_user(store: &dyn Store, by: &By, name: &str, now: i64) -> Result<(), AccountError> {
    if !store.remove_user(name)? {
        return Err(AccountError::NoSuchUser(name.to_string()));
    }
    audit(store, by, now, "user remove", &format!("user {name}"), "ok");
    Ok(())
}

/// Sets a user's own quota (`None`: theirs is their groups' or the default).
pub fn set_quota(
    store: &dyn Store,
    by: &By,
    name: &str,
    quota: Option<Quota>,
    now: i64,
) -> Result<(), AccountError> {
    if !store.set_quota(name, quota)? {
        return Err(AccountError::NoSuchUser(name.to_string()));
    }
    let shown = quota.map_or_else(|| "cleared".to_string(), Quota::text);
    audit(
        store,
        by,
        now,
        "user quota",
        &format!("user {name}"),
        &format!("ok: {shown}"),
    );
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a token, hex: what the database keeps.
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// `bytes` bytes of the operating system's randomness, as hex: session
/// ids and personal tokens.
pub fn random_hex(bytes: usize) -> Result<String, getrandom::Error> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf)?;
    Ok(hex(&buf))
}

/// A new personal token for `user`: the token itself (shown once, never
/// kept) and what is kept of it.
pub fn create_token(
    store: &dyn Store,
    by: &By,
    user: &str,
    name: &str,
    expires_days: Option<u32>,
    now: i64,
) -> Result<(String, TokenInfo), AccountError> {
    if store.user(user)?.is_none() {
        return Err(AccountError::NoSuchUser(user.to_string()));
    }
    let name = name.trim();
    if name.chars().count() > 64 || name.chars().any(char::is_control) {
        return Err(AccountError::Bad(
            "a token's name is at most 64 characters, without control characters".to_string(),
        ));
    }
    if expires_days == Some(0) {
        return Err(AccountError::Bad(
            "a token expires after 1 day or more".to_string(),
        ));
    }
    let id = random_hex(4).map_err(|e| AccountError::Random(e.to_string()))?;
    let token = format!(
        "{TOKEN_PREFIX}{id}_{}",
        random_hex(32).map_err(|e| AccountError::Random(e.to_string()))?
    );
    let info = TokenInfo {
        id: id.clone(),
        user: user.to_string(),
        name: name.to_string(),
        created: now,
        expires: expires_days.map(|d| now + i64::from(d) * 86_400_000),
        last_used: None,
    };
    store.add_token(&TokenRow {
        info: info.clone(),
        hash: token_hash(&token),
    })?;
    let expiry = expires_days.map_or_else(
        || "no expiry".to_string(),
        |d| format!("expires in {d} days"),
    );
    audit(
        store,
        by,
        now,
        "token create",
        &format!("token {id}"),
        &format!("ok: for {user}, {expiry}"),
    );
    Ok((token, info))
}

/// Revokes a token; whose it was.
pub fn revoke_token(
    store: &dyn Store,
    by: &By,
    id: &str,
    now: i64,
) -> Result<String, AccountError> {
    let user = store
        .revoke_token(id)?
        .ok_or_else(|| AccountError::NoSuchToken(id.to_string()))?;
    audit(
        store,
        by,
        now,
        "token revoke",
        &format!("token {id}"),
        &format!("ok: was {user}'s"),
    );
    Ok(user)
}

/// Gives a VM to a user. Whether the VM exists is the caller's to know
/// (the admin command may run without a cluster).
pub fn assign(
    store: &dyn Store,
    by: &By,
    cluster: &str,
    vmid: u32,
    user: &str,
    now: i64,
) -> Result<(), AccountError> {
    if store.user(user)?.is_none() {
        return Err(AccountError::NoSuchUser(user.to_string()));
    }
    store.set_owner(cluster, vmid, user, now)?;
    audit(
        store,
        by,
        now,
        "vm assign",
        &format!("vm {vmid}"),
        &format!("ok: to {user}"),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{AuditStore, PeopleStore};

    #[test]
    fn a_token_is_shown_once_kept_hashed_and_revoked_by_id() {
        let dir = std::env::temp_dir().join(format!("pvedeck-acct-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = crate::store::sqlite::SqliteStore::open(&dir.join("pvedeck.db")).unwrap();
        let by = By::command();
        assert!(matches!(
            add_user(&store, &by, "-x", Role::User, &[], 1),
            Err(AccountError::BadName(_))
        ));
        add_user(
            &store,
            &by,
            "alice",
            Role::User,
            &["dev".into(), "dev".into()],
            1,
        )
        .unwrap();
        assert_eq!(store.user("alice").unwrap().unwrap().groups, ["dev"]);
        assert!(matches!(
            create_token(&store, &by, "bob", "ci", None, 1),
            Err(AccountError::NoSuchUser(_))
        ));
        let (token, info) = create_token(&store, &by, "alice", "ci", Some(30), 10).unwrap();
        assert!(token.starts_with(&format!("{TOKEN_PREFIX}{}_", info.id)));
        assert_eq!(info.expires, Some(10 + 30 * 86_400_000));
        let kept = store.tokens().unwrap();
        assert_eq!(kept[0].hash, token_hash(&token));
        assert!(!kept[0].hash.contains(&token[12..]));
        assert_eq!(revoke_token(&store, &by, &info.id, 11).unwrap(), "alice");
        assert!(matches!(
            revoke_token(&store, &by, &info.id, 12),
            Err(AccountError::NoSuchToken(_))
        ));
        let log = store
            .audit(&crate::store::AuditQuery {
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        let actions: Vec<&str> = log.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(actions, ["token revoke", "token create", "user add"]);
        assert!(log.iter().all(|e| !e.outcome.contains(&token[4..])));
    }
}
