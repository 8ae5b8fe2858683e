//! The audit log in SQLite.

use pvedeck_domain::account::AuditEntry;
use rusqlite::params_from_iter;
use rusqlite::types::Value;

use super::SqliteStore;
use crate::store::audit::AuditFilter;
use crate::store::{AuditQuery, AuditStore, StoreError};

impl AuditStore for SqliteStore {
    /// Appends an entry (its `id` is ignored); the id it got.
    fn append_audit(&self, entry: &AuditEntry) -> Result<u64, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO audit (at, user, client, action, target, summary, outcome)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            rusqlite::params![
                entry.at,
                entry.user,
                entry.client,
                entry.action,
                entry.target,
                entry.summary,
                entry.outcome
            ],
        )?;
        Ok(conn.last_insert_rowid() as u64)
    }

    /// Newest first.
    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let mut sql = String::from("SELECT * FROM audit WHERE 1 = 1");
        let mut values: Vec<Value> = Vec::new();
        for filter in query.filters() {
            let (column, op, value) = match filter {
                AuditFilter::Text(column, op, text) => (column, op, Value::Text(text)),
                AuditFilter::Integer(column, op, n) => (column, op, Value::Integer(n)),
            };
            values.push(value);
            sql.push_str(&format!(" AND {column} {op} ?{}", values.len()));
        }
        values.push(Value::Integer(i64::from(query.limit)));
        sql.push_str(&format!(" ORDER BY id DESC LIMIT ?{}", values.len()));
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(params_from_iter(values), |row| {
            Ok(AuditEntry {
                id: row.get("id")?,
                at: row.get("at")?,
                user: row.get("user")?,
                client: row.get("client")?,
                action: row.get("action")?,
                target: row.get("target")?,
                summary: row.get("summary")?,
                outcome: row.get("outcome")?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes entries older than `before` (ms); how many went.
    fn prune_audit(&self, before: i64) -> Result<usize, StoreError> {
        Ok(self
            .conn()
            .execute("DELETE FROM audit WHERE at < ?1", [before])?)
    }
}
