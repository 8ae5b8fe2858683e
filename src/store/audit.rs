//! The audit log's rows: appended, read newest first by filters and pages,
//! pruned by age.

use pvedeck_domain::account::AuditEntry;

use super::StoreError;

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

/// One filter of an [`AuditQuery`], for an implementation to turn into its
/// SQL: a column, its comparison and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AuditFilter {
    Text(&'static str, &'static str, String),
    Integer(&'static str, &'static str, i64),
}

impl AuditQuery {
    /// The query's filters, in one order for every database.
    pub(super) fn filters(&self) -> Vec<AuditFilter> {
        let mut filters = Vec::new();
        if let Some(user) = &self.user {
            filters.push(AuditFilter::Text("user", "=", user.clone()));
        }
        if let Some(vmid) = self.vmid {
            filters.push(AuditFilter::Text("target", "=", format!("vm {vmid}")));
        }
        if let Some(since) = self.since {
            filters.push(AuditFilter::Integer("at", ">=", since));
        }
        if let Some(until) = self.until {
            filters.push(AuditFilter::Integer("at", "<=", until));
        }
        if let Some(before) = self.before {
            let before = i64::try_from(before).unwrap_or(i64::MAX);
            filters.push(AuditFilter::Integer("id", "<", before));
        }
        filters
    }
}

pub trait AuditStore: Send + Sync {
    /// Appends an entry (its `id` is ignored); the id it got.
    fn append_audit(&self, entry: &AuditEntry) -> Result<u64, StoreError>;

    /// Newest first.
    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError>;

    /// Removes entries older than `before` (ms); how many went.
    fn prune_audit(&self, before: i64) -> Result<usize, StoreError>;
}
