//! Users, their tokens (hashed) and who owns which VM. The rules about
//! them (names, roles, token secrets) are the engine's `accounts`; these
//! are the rows.

use pvedeck_domain::account::{Quota, Role, TokenInfo, UserInfo};
use pvedeck_domain::types::Job;
use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError, job_from_row};

/// A token as stored: what it shows, and the hash its secret is found by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub info: TokenInfo,
    /// SHA-256 of the whole token, hex.
    pub hash: String,
}

fn user_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<UserInfo> {
    let role: String = row.get("role")?;
    let groups: String = row.get("groups")?;
    let quota: Option<String> = row.get("quota")?;
    Ok(UserInfo {
        name: row.get("name")?,
        // A role this version does not know gives no more than a user's.
        role: Role::parse(&role).unwrap_or(Role::User),
        groups: serde_json::from_str(&groups).unwrap_or_default(),
        quota: quota.as_deref().and_then(|q| Quota::parse(q).ok()),
        source: row.get("source")?,
        created: row.get("created")?,
    })
}

fn groups_json(groups: &[String]) -> String {
    serde_json::to_string(groups).unwrap_or_else(|_| "[]".to_string())
}

impl Store {
    /// Changes other connections (the admin commands, another process)
    /// committed bump this number; this connection's own do not.
    pub fn data_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .query_row("PRAGMA data_version", [], |row| row.get(0))?)
    }

    pub fn users(&self) -> Result<Vec<UserInfo>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM users ORDER BY name")?;
        let rows = stmt.query_map([], user_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn user(&self, name: &str) -> Result<Option<UserInfo>, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT * FROM users WHERE name = ?1", [name], user_from_row)
            .optional()?)
    }

    /// Adds a user; `false` when the name is taken.
    pub fn add_user(&self, user: &UserInfo) -> Result<bool, StoreError> {
        let added = self.conn().execute(
            "INSERT OR IGNORE INTO users (name, role, groups, quota, source, created)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                user.name,
                user.role.as_str(),
                groups_json(&user.groups),
                user.quota.map(Quota::text),
                user.source,
                user.created
            ],
        )?;
        Ok(added == 1)
    }

    /// A user signed in through OpenID Connect: made at the first sign-in,
    /// role and groups as the provider says now at each.
    pub fn upsert_user(&self, user: &UserInfo) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO users (name, role, groups, quota, source, created)
             VALUES (?1, ?2, ?3, NULL, ?4, ?5)
             ON CONFLICT(name) DO UPDATE SET role = ?2, groups = ?3",
            params![
                user.name,
                user.role.as_str(),
                groups_json(&user.groups),
                user.source,
                user.created
            ],
        )?;
        Ok(())
    }

    /// Removes a user and their tokens; `false` when there was none. Their
    /// VMs keep the name as owner (admins see it, and may assign them).
    pub fn remove_user(&self, name: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM tokens WHERE user = ?1", [name])?;
        let gone = tx.execute("DELETE FROM users WHERE name = ?1", [name])?;
        tx.commit()?;
        Ok(gone == 1)
    }

    /// Sets (or, with `None`, clears) a user's own quota; `false` when
    /// there is no such user.
    pub fn set_quota(&self, name: &str, quota: Option<Quota>) -> Result<bool, StoreError> {
        let changed = self.conn().execute(
            "UPDATE users SET quota = ?2 WHERE name = ?1",
            params![name, quota.map(Quota::text)],
        )?;
        Ok(changed == 1)
    }

    pub fn set_role(&self, name: &str, role: Role, groups: &[String]) -> Result<bool, StoreError> {
        let changed = self.conn().execute(
            "UPDATE users SET role = ?2, groups = ?3 WHERE name = ?1",
            params![name, role.as_str(), groups_json(groups)],
        )?;
        Ok(changed == 1)
    }

    pub fn add_token(&self, token: &TokenRow) -> Result<(), StoreError> {
        let t = &token.info;
        self.conn().execute(
            "INSERT INTO tokens (id, user, name, hash, created, expires)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![t.id, t.user, t.name, token.hash, t.created, t.expires],
        )?;
        Ok(())
    }

    pub fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM tokens ORDER BY created, id")?;
        let rows = stmt.query_map([], |row| {
            Ok(TokenRow {
                info: TokenInfo {
                    id: row.get("id")?,
                    user: row.get("user")?,
                    name: row.get("name")?,
                    created: row.get("created")?,
                    expires: row.get("expires")?,
                    last_used: row.get("last_used")?,
                },
                hash: row.get("hash")?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Revokes a token; its user, or `None` when there was no such token.
    pub fn revoke_token(&self, id: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let user: Option<String> = tx
            .query_row("SELECT user FROM tokens WHERE id = ?1", [id], |row| {
                row.get(0)
            })
            .optional()?;
        tx.execute("DELETE FROM tokens WHERE id = ?1", [id])?;
        tx.commit()?;
        Ok(user)
    }

    /// When tokens were last used: (id, ms).
    pub fn touch_tokens(&self, used: &[(String, i64)]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for (id, at) in used {
            tx.execute(
                "UPDATE tokens SET last_used = MAX(COALESCE(last_used, 0), ?2) WHERE id = ?1",
                params![id, at],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Every VM with an owner: (vmid, user).
    pub fn owners(&self) -> Result<Vec<(u32, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT vmid, user FROM owners ORDER BY vmid")?;
        let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn set_owner(&self, vmid: u32, user: &str, at: i64) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR REPLACE INTO owners (vmid, user, assigned) VALUES (?1, ?2, ?3)",
            params![vmid, user, at],
        )?;
        Ok(())
    }

    pub fn remove_owner(&self, vmid: u32) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM owners WHERE vmid = ?1", [vmid])?;
        Ok(())
    }

    /// A user's jobs, newest first.
    pub fn jobs_of(&self, owner: &str, limit: u32) -> Result<Vec<Job>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT * FROM jobs WHERE owner = ?1 ORDER BY id DESC LIMIT ?2")?;
        let rows = stmt.query_map(params![owner, limit], job_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(name: &str) -> Store {
        let dir =
            std::env::temp_dir().join(format!("pvedeck-accounts-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Store::open(&dir.join("pvedeck.db")).unwrap()
    }

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".into(),
            role: Role::User,
            groups: vec!["dev".into()],
            quota: None,
            source: "local".into(),
            created: 1,
        }
    }

    #[test]
    fn users_tokens_and_owners_round_trip_and_a_removed_user_takes_their_tokens() {
        let s = store("round");
        assert!(s.add_user(&alice()).unwrap());
        assert!(!s.add_user(&alice()).unwrap(), "the name is taken");
        let quota = Quota::parse("vms=2,disk=unlimited").unwrap();
        assert!(s.set_quota("alice", Some(quota)).unwrap());
        assert!(!s.set_quota("bob", Some(quota)).unwrap());
        assert_eq!(s.user("alice").unwrap().unwrap().quota, Some(quota));

        let token = TokenRow {
            info: TokenInfo {
                id: "0a1b2c3d".into(),
                user: "alice".into(),
                name: "ci".into(),
                created: 2,
                expires: Some(9),
                last_used: None,
            },
            hash: "ff".repeat(32),
        };
        s.add_token(&token).unwrap();
        s.touch_tokens(&[("0a1b2c3d".into(), 5)]).unwrap();
        s.touch_tokens(&[("0a1b2c3d".into(), 4)]).unwrap();
        assert_eq!(s.tokens().unwrap()[0].info.last_used, Some(5), "never back");

        s.set_owner(101, "alice", 3).unwrap();
        s.set_owner(101, "bob", 4).unwrap();
        assert_eq!(s.owners().unwrap(), [(101, "bob".to_string())]);

        let mut again = alice();
        again.role = Role::Admin;
        again.groups = vec!["ops".into()];
        s.upsert_user(&again).unwrap();
        let read = s.user("alice").unwrap().unwrap();
        assert_eq!((read.role, read.groups), (Role::Admin, vec!["ops".into()]));
        assert_eq!(read.quota, Some(quota), "a sign-in keeps the quota");

        assert!(s.remove_user("alice").unwrap());
        assert!(s.tokens().unwrap().is_empty());
        assert_eq!(s.revoke_token("0a1b2c3d").unwrap(), None);
        assert_eq!(s.owners().unwrap().len(), 1, "the VM keeps its owner");
    }
}
