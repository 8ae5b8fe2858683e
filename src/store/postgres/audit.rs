//! The audit log in PostgreSQL.

use pvedeck_domain::account::AuditEntry;

use super::{Param, PgStore, get, get_u64, param};
use crate::store::audit::AuditFilter;
use crate::store::{AuditQuery, AuditStore, StoreError};

impl AuditStore for PgStore {
    fn append_audit(&self, entry: &AuditEntry) -> Result<u64, StoreError> {
        let row = self
            .query_one(
                "INSERT INTO audit (at, \"user\", client, action, target, summary, outcome)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                vec![
                    param(entry.at),
                    param(entry.user.clone()),
                    param(entry.client.clone()),
                    param(entry.action.clone()),
                    param(entry.target.clone()),
                    param(entry.summary.clone()),
                    param(entry.outcome.clone()),
                ],
            )?
            .ok_or_else(|| StoreError::Postgres("an audit entry got no id".to_string()))?;
        get_u64(&row, "id")
    }

    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let mut sql = String::from("SELECT * FROM audit WHERE TRUE");
        let mut values: Vec<Param> = Vec::new();
        for filter in query.filters() {
            // The columns are the filters' own names, never the caller's.
            let (column, op) = match &filter {
                AuditFilter::Text(column, op, _) | AuditFilter::Integer(column, op, _) => {
                    (*column, *op)
                }
            };
            values.push(match filter {
                AuditFilter::Text(_, _, text) => param(text),
                AuditFilter::Integer(_, _, n) => param(n),
            });
            sql.push_str(&format!(" AND \"{column}\" {op} ${}", values.len()));
        }
        values.push(param(i64::from(query.limit)));
        sql.push_str(&format!(" ORDER BY id DESC LIMIT ${}", values.len()));
        self.query(sql, values)?
            .iter()
            .map(|row| {
                Ok(AuditEntry {
                    id: get_u64(row, "id")?,
                    at: get(row, "at")?,
                    user: get(row, "user")?,
                    client: get(row, "client")?,
                    action: get(row, "action")?,
                    target: get(row, "target")?,
                    summary: get(row, "summary")?,
                    outcome: get(row, "outcome")?,
                })
            })
            .collect()
    }

    fn prune_audit(&self, before: i64) -> Result<usize, StoreError> {
        let gone = self.execute("DELETE FROM audit WHERE at < $1", vec![param(before)])?;
        Ok(usize::try_from(gone).unwrap_or(usize::MAX))
    }
}
