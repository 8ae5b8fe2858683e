//! Users, tokens and owners in SQLite.

use pvedeck_domain::account::{Quota, Role, TokenInfo, UserInfo};
use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use crate::store::accounts::{groups_json, user_from_columns};
use crate::store::{PeopleStore, StoreError, TokenRow};

fn user_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<UserInfo> {
    let role: String = row.get("role")?;
    let groups: String = row.get("groups")?;
    let quota: Option<String> = row.get("quota")?;
    Ok(user_from_columns(
        row.get("name")?,
        &role,
        &groups,
        quota.as_deref(),
        row.get("source")?,
        row.get("created")?,
    ))
}

impl PeopleStore for SqliteStore {
    /// Changes other connections (the admin commands, another process)
    /// committed bump this number; this connection's own do not.
    fn data_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .query_row("PRAGMA data_version", [], |row| row.get(0))?)
    }

    fn users(&self) -> Result<Vec<UserInfo>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM users ORDER BY name")?;
        let rows = stmt.query_map([], user_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn user(&self, name: &str) -> Result<Option<UserInfo>, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT * FROM users WHERE name = ?1", [name], user_from_row)
            .optional()?)
    }

    /// Adds a user; `false` when the name is taken.
    fn add_user(&self, user: &UserInfo) -> Result<bool, StoreError> {
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
    fn upsert_user(&self, user: &UserInfo) -> Result<(), StoreError> {
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
    fn remove_user(&self, name: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM tokens WHERE user = ?1", [name])?;
        let gone = tx.execute("DELETE FROM users WHERE name = ?1", [name])?;
        tx.commit()?;
        Ok(gone == 1)
    }

    /// Sets (or, with `None`, clears) a user's own quota; `false` when
    /// there is no such user.
    fn set_quota(&self, name: &str, quota: Option<Quota>) -> Result<bool, StoreError> {
        let changed = self.conn().execute(
            "UPDATE users SET quota = ?2 WHERE name = ?1",
            params![name, quota.map(Quota::text)],
        )?;
        Ok(changed == 1)
    }

    fn set_role(&self, name: &str, role: Role, groups: &[String]) -> Result<bool, StoreError> {
        let changed = self.conn().execute(
            "UPDATE users SET role = ?2, groups = ?3 WHERE name = ?1",
            params![name, role.as_str(), groups_json(groups)],
        )?;
        Ok(changed == 1)
    }

    fn add_token(&self, token: &TokenRow) -> Result<(), StoreError> {
        let t = &token.info;
        self.conn().execute(
            "INSERT INTO tokens (id, user, name, hash, created, expires)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![t.id, t.user, t.name, token.hash, t.created, t.expires],
        )?;
        Ok(())
    }

    fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
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
    fn revoke_token(&self, id: &str) -> Result<Option<String>, StoreError> {
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
    fn touch_tokens(&self, used: &[(String, i64)]) -> Result<(), StoreError> {
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
    fn owners(&self, cluster: &str) -> Result<Vec<(u32, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT vmid, user FROM owners WHERE cluster = ?1 ORDER BY vmid")?;
        let rows = stmt.query_map([cluster], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn set_owner(&self, cluster: &str, vmid: u32, user: &str, at: i64) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR REPLACE INTO owners (cluster, vmid, user, assigned) VALUES (?1, ?2, ?3, ?4)",
            params![cluster, vmid, user, at],
        )?;
        Ok(())
    }

    fn remove_owner(&self, cluster: &str, vmid: u32) -> Result<(), StoreError> {
        self.conn().execute(
            "DELETE FROM owners WHERE cluster = ?1 AND vmid = ?2",
            params![cluster, vmid],
        )?;
        Ok(())
    }
}
