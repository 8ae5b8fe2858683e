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

/// Who holds something while it runs (a job, a VMID being installed): a
/// replica, until a time (ms) it renews while it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub replica: String,
    pub until: i64,
}

/// A running job taken over from whoever held it.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    pub orphan: Orphan,
    /// The replica that held it, if one did.
    pub from: Option<String>,
    /// When its lease ran out (ms), if it had one.
    pub lapsed: Option<i64>,
}

/// What another pvedeck on the same database did, as it happens
/// (PostgreSQL's `LISTEN`/`NOTIFY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Job `job` has event `seq` stored.
    Event { job: u64, seq: u64 },
    /// Job `job` has ended.
    Ended { job: u64 },
    /// Users, tokens or owners changed.
    People,
    /// Replica `from` changed the cluster: snapshots read before are old.
    Changed { from: String },
    /// A session ended (logout, its user removed).
    SessionClosed { hash: String },
    /// Notices may have been missed (the listener reconnected, a reader
    /// lagged): whoever relies on them reads again.
    Resync,
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
    /// A new running job, held under `lease` where replicas share the
    /// store.
    // One argument per column of the row it inserts.
    #[allow(clippy::too_many_arguments)]
    fn create_job(
        &self,
        cluster: &str,
        kind: JobKind,
        vmid: Option<u32>,
        title: &str,
        created: i64,
        owner: Option<&str>,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError>;

    /// Renews everything `lease.replica` holds (its running jobs, its
    /// VMID reservations) until `lease.until`.
    fn renew(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Takes the running jobs whose lease ran out before `now` (all
    /// running jobs with `every`: one process on its own database, at
    /// start-up) and holds them under `lease`. Each is taken by one
    /// replica only. Only `cluster`'s jobs: each cluster's engine
    /// reconciles its own.
    fn take_over(
        &self,
        cluster: &str,
        lease: &Lease,
        now: i64,
        every: bool,
    ) -> Result<Vec<Taken>, StoreError>;

    /// Holds `vmid` of `cluster` for an install under `lease`; `false`
    /// when a live lease of another install holds it.
    fn reserve_vmid(
        &self,
        cluster: &str,
        vmid: u32,
        lease: &Lease,
        now: i64,
    ) -> Result<bool, StoreError>;

    /// Lets `vmid` of `cluster` go (the install ended).
    fn release_vmid(&self, cluster: &str, vmid: u32, replica: &str) -> Result<(), StoreError>;

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
        cluster: &str,
        vmid: u32,
        machine_id: &str,
        host_key: &str,
        at: i64,
    ) -> Result<(), StoreError>;

    /// Every recorded identity of `cluster`'s VMs: (vmid, machine-id,
    /// host key).
    fn identities(&self, cluster: &str) -> Result<Vec<(u32, String, String)>, StoreError>;

    /// A template of `cluster` built: from which image, when, by which job.
    fn record_template(&self, cluster: &str, built: &TemplateBuilt) -> Result<(), StoreError>;

    /// Every template build of `cluster` recorded, by VMID.
    fn templates(&self, cluster: &str) -> Result<Vec<TemplateBuilt>, StoreError>;
}

/// Everything pvedeck keeps.
pub trait Store: JobStore + PeopleStore + AuditStore + SessionStore {
    /// Which database this is, for the log and `/metrics`: `sqlite` or
    /// `postgres`.
    fn kind(&self) -> &'static str;

    /// Whether other pvedeck processes may share it (then jobs are held
    /// under leases and changes are announced).
    fn shared(&self) -> bool {
        false
    }

    /// What the other processes on the store do, as it happens; `None`
    /// where there are none.
    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<Notice>> {
        None
    }

    /// Tells the others that replica `from` changed the cluster.
    fn announce_change(&self, _from: &str) {}

    /// Waits until no other replica holds `name`, then holds it until the
    /// returned value is dropped: what one process serializes in memory
    /// (one download of an image per node), replicas serialize here.
    /// `None` where there are no others.
    fn hold(&self, _name: &str) -> Holding {
        Box::pin(async { Ok(None) })
    }
}

/// Something held across replicas, let go when dropped.
pub type Held = Box<dyn Send + Sync>;

/// The wait for a [`Store::hold`].
pub type Holding =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Option<Held>, StoreError>> + Send>>;

/// UI sessions, where replicas share them: by the SHA-256 of their id,
/// never the id itself.
pub trait SessionStore: Send + Sync {
    /// Records a session: whose (`subject`, as the sessions module words
    /// it) and when it ends (ms).
    fn put_session(&self, hash: &str, subject: &str, expires: i64) -> Result<(), StoreError>;

    /// A session's subject, if it has not ended by `now`.
    fn session(&self, hash: &str, now: i64) -> Result<Option<(String, i64)>, StoreError>;

    /// Ends a session, and tells the others.
    fn close_session(&self, hash: &str) -> Result<(), StoreError>;
}
