//! Users, tokens and owners in PostgreSQL.

use pvedeck_domain::account::{Quota, Role, TokenInfo, UserInfo};
use tokio_postgres::Row;

use super::{PgStore, Sql, get, get_u32, int, param};
use crate::store::accounts::{groups_json, user_from_columns};
use crate::store::{PeopleStore, StoreError, TokenRow};

fn user_from_row(row: &Row) -> Result<UserInfo, StoreError> {
    let role: String = get(row, "role")?;
    let groups: String = get(row, "groups")?;
    let quota: Option<String> = get(row, "quota")?;
    Ok(user_from_columns(
        get(row, "name")?,
        &role,
        &groups,
        quota.as_deref(),
        get(row, "source")?,
        get(row, "created")?,
    ))
}

impl PeopleStore for PgStore {
    /// The `people_version` row, which the tables' triggers move.
    fn data_version(&self) -> Result<i64, StoreError> {
        match self.query_one("SELECT version FROM people_version", vec![])? {
            Some(row) => get(&row, "version"),
            None => Ok(0),
        }
    }

    fn users(&self) -> Result<Vec<UserInfo>, StoreError> {
        self.query("SELECT * FROM users ORDER BY name", vec![])?
            .iter()
            .map(user_from_row)
            .collect()
    }

    fn user(&self, name: &str) -> Result<Option<UserInfo>, StoreError> {
        self.query_one(
            "SELECT * FROM users WHERE name = $1",
            vec![param(name.to_string())],
        )?
        .as_ref()
        .map(user_from_row)
        .transpose()
    }

    fn add_user(&self, user: &UserInfo) -> Result<bool, StoreError> {
        let added = self.execute(
            "INSERT INTO users (name, role, groups, quota, source, created)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
            vec![
                param(user.name.clone()),
                param(user.role.as_str().to_string()),
                param(groups_json(&user.groups)),
                param(user.quota.map(Quota::text)),
                param(user.source.clone()),
                param(user.created),
            ],
        )?;
        Ok(added == 1)
    }

    fn upsert_user(&self, user: &UserInfo) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO users (name, role, groups, quota, source, created)
             VALUES ($1, $2, $3, NULL, $4, $5)
             ON CONFLICT (name) DO UPDATE SET role = EXCLUDED.role, groups = EXCLUDED.groups",
            vec![
                param(user.name.clone()),
                param(user.role.as_str().to_string()),
                param(groups_json(&user.groups)),
                param(user.source.clone()),
                param(user.created),
            ],
        )?;
        Ok(())
    }

    fn remove_user(&self, name: &str) -> Result<bool, StoreError> {
        let counts = self.transaction(vec![
            (
                Sql::from("DELETE FROM tokens WHERE \"user\" = $1"),
                vec![param(name.to_string())],
            ),
            (
                Sql::from("DELETE FROM users WHERE name = $1"),
                vec![param(name.to_string())],
            ),
        ])?;
        Ok(counts.get(1) == Some(&1))
    }

    fn set_quota(&self, name: &str, quota: Option<Quota>) -> Result<bool, StoreError> {
        let changed = self.execute(
            "UPDATE users SET quota = $2 WHERE name = $1",
            vec![param(name.to_string()), param(quota.map(Quota::text))],
        )?;
        Ok(changed == 1)
    }

    fn set_role(&self, name: &str, role: Role, groups: &[String]) -> Result<bool, StoreError> {
        let changed = self.execute(
            "UPDATE users SET role = $2, groups = $3 WHERE name = $1",
            vec![
                param(name.to_string()),
                param(role.as_str().to_string()),
                param(groups_json(groups)),
            ],
        )?;
        Ok(changed == 1)
    }

    fn add_token(&self, token: &TokenRow) -> Result<(), StoreError> {
        let t = &token.info;
        self.execute(
            "INSERT INTO tokens (id, \"user\", name, hash, created, expires)
             VALUES ($1, $2, $3, $4, $5, $6)",
            vec![
                param(t.id.clone()),
                param(t.user.clone()),
                param(t.name.clone()),
                param(token.hash.clone()),
                param(t.created),
                param(t.expires),
            ],
        )?;
        Ok(())
    }

    fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        self.query("SELECT * FROM tokens ORDER BY created, id", vec![])?
            .iter()
            .map(|row| {
                Ok(TokenRow {
                    info: TokenInfo {
                        id: get(row, "id")?,
                        user: get(row, "user")?,
                        name: get(row, "name")?,
                        created: get(row, "created")?,
                        expires: get(row, "expires")?,
                        last_used: get(row, "last_used")?,
                    },
                    hash: get(row, "hash")?,
                })
            })
            .collect()
    }

    fn revoke_token(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.query_one(
            "DELETE FROM tokens WHERE id = $1 RETURNING \"user\"",
            vec![param(id.to_string())],
        )?
        .map(|row| get(&row, "user"))
        .transpose()
    }

    fn touch_tokens(&self, used: &[(String, i64)]) -> Result<(), StoreError> {
        let statements = used
            .iter()
            .map(|(id, at)| {
                (
                    Sql::from(
                        "UPDATE tokens SET last_used = GREATEST(COALESCE(last_used, 0), $2)
                         WHERE id = $1",
                    ),
                    vec![param(id.clone()), param(*at)],
                )
            })
            .collect();
        self.transaction(statements)?;
        Ok(())
    }

    fn owners(&self, cluster: &str) -> Result<Vec<(u32, String)>, StoreError> {
        let rows = self.query(
            "SELECT vmid, \"user\" FROM owners WHERE cluster = $1 ORDER BY vmid",
            vec![param(cluster.to_string())],
        )?;
        rows.iter()
            .filter_map(|row| match get_u32(row, "vmid") {
                Ok(Some(vmid)) => Some(get(row, "user").map(|user| (vmid, user))),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            })
            .collect()
    }

    fn set_owner(&self, cluster: &str, vmid: u32, user: &str, at: i64) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO owners (vmid, \"user\", assigned, cluster) VALUES ($1, $2, $3, $4)
             ON CONFLICT (cluster, vmid) DO UPDATE SET \"user\" = EXCLUDED.\"user\",
                 assigned = EXCLUDED.assigned",
            vec![
                int(vmid),
                param(user.to_string()),
                param(at),
                param(cluster.to_string()),
            ],
        )?;
        Ok(())
    }

    fn remove_owner(&self, cluster: &str, vmid: u32) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM owners WHERE vmid = $1 AND cluster = $2",
            vec![int(vmid), param(cluster.to_string())],
        )?;
        Ok(())
    }
}
