//! What pvedeck keeps: the job history (jobs and their events), what VMs
//! and templates proved to be, and the people (users, tokens, owners, the
//! audit log). One trait, [`Store`], and two implementations:
//!
//! - [`sqlite`]: `DATA_DIR/pvedeck.db`, the default — one process, nothing
//!   to run beside it;
//! - [`postgres`]: `DATABASE_URL=postgres://…`, shared by any number of
//!   pvedeck processes (docs/architecture.md#one-store-two-databases).
//!
//! The trait is synchronous on purpose: every caller already runs off the
//! async workers (the jobs' writer thread, `spawn_blocking`), as SQLite
//! needs. The PostgreSQL implementation drives its async driver and pool on
//! a small runtime of its own and waits for the answer there.

mod accounts;
mod audit;
pub mod postgres;
pub mod sqlite;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

pub use accounts::{PeopleStore, TokenRow};
pub use audit::{AuditQuery, AuditStore};
use pvedeck_domain::types::{Job, JobEvent, JobKind, JobState, StepEvent, VmOutcome};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("job database {path}: {source}")]
    Open {
        path: String,
        source: rusqlite::Error,
    },
    #[error("job database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("job database: cannot start its writer thread: {0}")]
    Writer(std::io::Error),
    #[error("job database: {0}")]
    Task(String),
    #[error("job database: cannot create {path}: {source}")]
    Dir {
        path: String,
        source: std::io::Error,
    },
    /// `DATABASE_URL` cannot be used: not a PostgreSQL URL, or the server
    /// cannot be reached or refuses at start-up. `url` has its password
    /// masked.
    #[error("DATABASE_URL={url}: {why}")]
    Connect { url: String, why: String },
    /// PostgreSQL went away, or a statement failed on it.
    #[error("database: {0}")]
    Postgres(String),
    /// The database cannot be reached now (PostgreSQL lost while running):
    /// requests that need it answer 503.
    #[error("database unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    /// Whether the database itself is out of reach (a 503, a retry later),
    /// rather than a statement or a row being wrong.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// Where pvedeck keeps what it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location<'a> {
    /// The embedded SQLite file.
    Sqlite(&'a Path),
    /// `DATABASE_URL`.
    Postgres(&'a str),
}

/// Opens the store at `location`, making or migrating its schema.
pub fn open(location: Location<'_>) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match location {
        Location::Sqlite(path) => Arc::new(sqlite::SqliteStore::open(path)?),
        Location::Postgres(url) => Arc::new(postgres::PgStore::open(url)?),
    })
}

/// What a template build leaves to know the template by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateBuilt {
    pub vmid: u32,
    /// The cloud image's file name.
    pub image: String,
    /// Milliseconds since the epoch.
    pub built: i64,
    pub job: u64,
}

/// What becomes of a job's VM when the job stops before its end (pvedeck
/// killed or stopped): what the failure contract does to it
/// (docs/provisioning.md#stopping-and-restarts) at the step the job is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStop {
    /// Force stop and destroy: the VM is half-made.
    Destroy,
    /// The VM stays, as a failure there would leave it.
    Keep,
}

impl OnStop {
    fn word(self) -> &'static str {
        match self {
            OnStop::Destroy => "destroy",
            OnStop::Keep => "keep",
        }
    }

    fn from_word(word: Option<&str>) -> Option<OnStop> {
        match word {
            Some("destroy") => Some(OnStop::Destroy),
            Some("keep") => Some(OnStop::Keep),
            _ => None,
        }
    }
}

/// The VM a running job may leave behind, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stake {
    pub vmid: u32,
    /// The node it was last known on.
    pub node: String,
    pub on_stop: OnStop,
}

impl Stake {
    fn from_columns(
        vmid: Option<u32>,
        node: Option<String>,
        on_stop: Option<&str>,
    ) -> Option<Stake> {
        match (vmid, node, OnStop::from_word(on_stop)) {
            (Some(vmid), Some(node), Some(on_stop)) => Some(Stake {
                vmid,
                node,
                on_stop,
            }),
            _ => None,
        }
    }
}

/// A job a previous process left running: what it had at stake and the
/// Proxmox task it was waiting on.
#[derive(Debug, Clone, PartialEq)]
pub struct Orphan {
    pub job: Job,
    pub stake: Option<Stake>,
    pub task: Option<String>,
}

/// Enums are stored as the words their JSON uses.
fn word<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

fn from_word<T: DeserializeOwned>(word: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(word.to_string())).ok()
}

/// A job row's enum columns, read back; a word this version does not know
/// reads as the safest value (an install that failed).
fn job_enums(
    kind: &str,
    state: &str,
    outcome: Option<&str>,
) -> (JobKind, JobState, Option<VmOutcome>) {
    (
        from_word(kind).unwrap_or(JobKind::Install),
        from_word(state).unwrap_or(JobState::Failed),
        outcome.and_then(from_word::<VmOutcome>),
    )
}

/// The job history and what VMs and templates proved to be.
pub trait JobStore: Send + Sync {
    fn create_job(
        &self,
        kind: JobKind,
        vmid: Option<u32>,
        title: &str,
        created: i64,
        owner: Option<&str>,
    ) -> Result<u64, StoreError>;

    fn set_vmid(&self, id: u64, vmid: u32) -> Result<(), StoreError>;

    fn append(&self, id: u64, seq: u64, at: i64, ev: &StepEvent) -> Result<(), StoreError>;

    fn finish(
        &self,
        id: u64,
        state: JobState,
        finished: i64,
        outcome: Option<VmOutcome>,
        failed_step: Option<&str>,
    ) -> Result<(), StoreError>;

    fn job(&self, id: u64) -> Result<Option<Job>, StoreError>;

    /// Newest first.
    fn jobs(&self, limit: u32) -> Result<Vec<Job>, StoreError>;

    /// A user's jobs, newest first.
    fn jobs_of(&self, owner: &str, limit: u32) -> Result<Vec<Job>, StoreError>;

    /// Removes the jobs that ended before `before` (ms), with their
    /// events; how many went.
    fn prune(&self, before: i64) -> Result<usize, StoreError>;

    fn running_jobs(&self) -> Result<Vec<Orphan>, StoreError>;

    /// Records what a running job has at stake now (`None`: nothing).
    fn set_stake(&self, id: u64, stake: Option<&Stake>) -> Result<(), StoreError>;

    /// Records the Proxmox task a running job waits on (`None`: none).
    fn set_task(&self, id: u64, task: Option<&str>) -> Result<(), StoreError>;

    /// Makes everything written so far durable in one place (SQLite: the
    /// WAL moved into the database file), at shutdown.
    fn flush(&self) -> Result<(), StoreError>;

    /// At most `limit` of job `id`'s events after `after`, in order.
    fn events_page(&self, id: u64, after: u64, limit: usize) -> Result<Vec<JobEvent>, StoreError>;

    /// Events after `after` (0 = all), in order.
    fn events(&self, id: u64, after: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.events_page(id, after, usize::MAX)
    }

    fn last_seq(&self, id: u64) -> Result<u64, StoreError>;

    /// What a VM pvedeck made proved to be (through the guest agent).
    fn record_identity(
        &self,
        vmid: u32,
        machine_id: &str,
        host_key: &str,
        at: i64,
    ) -> Result<(), StoreError>;

    /// Every recorded identity: (vmid, machine-id, host key).
    fn identities(&self) -> Result<Vec<(u32, String, String)>, StoreError>;

    /// A template built: from which image, when, by which job.
    fn record_template(&self, built: &TemplateBuilt) -> Result<(), StoreError>;

    /// Every template build recorded, by VMID.
    fn templates(&self) -> Result<Vec<TemplateBuilt>, StoreError>;
}

/// Everything pvedeck keeps.
pub trait Store: JobStore + PeopleStore + AuditStore {
    /// Which database this is, for the log and `/metrics`: `sqlite` or
    /// `postgres`.
    fn kind(&self) -> &'static str;
}
