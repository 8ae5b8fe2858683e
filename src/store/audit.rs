//! The audit log's rows: appended, read newest first by filters and pages,
//! pruned by age.

use pvedeck_domain::account::AuditEntry;
use rusqlite::params_from_iter;
use rusqlite::types::Value;

use super::{Store, StoreError};

/// Which entries `GET /api/audit` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    pub user: Option<String>,
    /// Entries whose target is this VM.
    pub vmid: Option<u32>,
    /// Milliseconds since the epoch, inclusive.
    pub since: Option<i64>,
    pub until: Option<i64>,
    /// Entries older than this id (the page before).
    pub before: Option<u64>,
    pub limit: u32,
}

impl Store {
    /// Appends an entry (its `id` is ignored); the id it got.
    pub fn append_audit(&self, entry: &AuditEntry) -> Result<u64, StoreError> {
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
    pub fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let mut sql = String::from("SELECT * FROM audit WHERE 1 = 1");
        let mut values: Vec<Value> = Vec::new();
        let mut bind = |clause: &str, value: Value| {
            values.push(value);
            sql.push_str(&format!(" AND {clause} ?{}", values.len()));
        };
        if let Some(user) = &query.user {
            bind("user =", Value::Text(user.clone()));
        }
        if let Some(vmid) = query.vmid {
            bind("target =", Value::Text(format!("vm {vmid}")));
        }
        if let Some(since) = query.since {
            bind("at >=", Value::Integer(since));
        }
        if let Some(until) = query.until {
            bind("at <=", Value::Integer(until));
        }
        if let Some(before) = query.before {
            bind(
                "id <",
                Value::Integer(i64::try_from(before).unwrap_or(i64::MAX)),
            );
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
    pub fn prune_audit(&self, before: i64) -> Result<usize, StoreError> {
        Ok(self
            .conn()
            .execute("DELETE FROM audit WHERE at < ?1", [before])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at: i64, user: &str, target: &str) -> AuditEntry {
        AuditEntry {
            id: 0,
            at,
            user: user.into(),
            client: Some("127.0.0.1".into()),
            action: "stop".into(),
            target: Some(target.into()),
            summary: String::new(),
            outcome: "ok".into(),
        }
    }

    #[test]
    fn entries_filter_page_and_prune() {
        let dir = std::env::temp_dir().join(format!("pvedeck-audit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = Store::open(&dir.join("pvedeck.db")).unwrap();
        for (at, user, target) in [
            (1, "alice", "vm 101"),
            (2, "bob", "vm 102"),
            (3, "alice", "vm 1010"),
            (4, "alice", "vm 101"),
        ] {
            s.append_audit(&entry(at, user, target)).unwrap();
        }
        let all = |q: AuditQuery| {
            s.audit(&AuditQuery { limit: 10, ..q })
                .unwrap()
                .iter()
                .map(|e| e.at)
                .collect::<Vec<_>>()
        };
        assert_eq!(all(AuditQuery::default()), [4, 3, 2, 1]);
        let alice = Some("alice".to_string());
        assert_eq!(
            all(AuditQuery {
                user: alice.clone(),
                ..AuditQuery::default()
            }),
            [4, 3, 1]
        );
        assert_eq!(
            all(AuditQuery {
                vmid: Some(101),
                ..AuditQuery::default()
            }),
            [4, 1],
            "vm 1010 is another VM"
        );
        assert_eq!(
            all(AuditQuery {
                since: Some(2),
                until: Some(3),
                ..AuditQuery::default()
            }),
            [3, 2]
        );
        let page = s
            .audit(&AuditQuery {
                limit: 2,
                ..AuditQuery::default()
            })
            .unwrap();
        assert_eq!(
            all(AuditQuery {
                before: Some(page[1].id),
                ..AuditQuery::default()
            }),
            [2, 1]
        );
        assert_eq!(s.prune_audit(3).unwrap(), 2);
        assert_eq!(all(AuditQuery::default()), [4, 3]);
    }
}
