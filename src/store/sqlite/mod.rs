//! The embedded store: SQLite in `DATA_DIR/pvedeck.db`, the default.
//!
//! One connection behind a mutex: writes are a few small rows per second per
//! job, well within what a WAL-mode SQLite does in microseconds.

mod accounts;
mod audit;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use pvedeck_domain::types::{Job, JobEvent, JobKind, JobState, StepEvent, VmOutcome};
use pvedeck_support::sync::lock;
use rusqlite::{Connection, OptionalExtension, params};

use super::{
    JobStore, Lease, Orphan, SessionStore, Stake, Store, StoreError, Taken, TemplateBuilt,
    from_word, job_enums, word,
};

pub struct SqliteStore {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT    NOT NULL,
    vmid        INTEGER,
    state       TEXT    NOT NULL,
    title       TEXT    NOT NULL,
    created     INTEGER NOT NULL,
    finished    INTEGER,
    outcome     TEXT,
    failed_step TEXT
);
CREATE TABLE IF NOT EXISTS events (
    job_id  INTEGER NOT NULL REFERENCES jobs(id),
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    step    TEXT    NOT NULL,
    status  TEXT    NOT NULL,
    message TEXT    NOT NULL,
    vm_id   INTEGER,
    ip      TEXT,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS identities (
    cluster    TEXT    NOT NULL DEFAULT 'default',
    vmid       INTEGER NOT NULL,
    machine_id TEXT    NOT NULL,
    host_key   TEXT    NOT NULL,
    recorded   INTEGER NOT NULL,
    PRIMARY KEY (cluster, vmid)
);
CREATE TABLE IF NOT EXISTS templates (
    cluster TEXT    NOT NULL DEFAULT 'default',
    vmid    INTEGER NOT NULL,
    image   TEXT    NOT NULL,
    built   INTEGER NOT NULL,
    job     INTEGER NOT NULL,
    PRIMARY KEY (cluster, vmid)
);
CREATE TABLE IF NOT EXISTS users (
    name    TEXT    PRIMARY KEY,
    role    TEXT    NOT NULL,
    groups  TEXT    NOT NULL,
    quota   TEXT,
    source  TEXT    NOT NULL,
    created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    id        TEXT    PRIMARY KEY,
    user      TEXT    NOT NULL REFERENCES users(name) ON DELETE CASCADE,
    name      TEXT    NOT NULL,
    hash      TEXT    NOT NULL UNIQUE,
    created   INTEGER NOT NULL,
    expires   INTEGER,
    last_used INTEGER
);
CREATE TABLE IF NOT EXISTS owners (
    cluster  TEXT    NOT NULL DEFAULT 'default',
    vmid     INTEGER NOT NULL,
    user     TEXT    NOT NULL,
    assigned INTEGER NOT NULL,
    PRIMARY KEY (cluster, vmid)
);
CREATE TABLE IF NOT EXISTS audit (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,
    user    TEXT    NOT NULL,
    client  TEXT,
    action  TEXT    NOT NULL,
    target  TEXT,
    summary TEXT    NOT NULL,
    outcome TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_at ON audit(at);
";

/// Tables keyed by VMID alone before pvedeck served several clusters:
/// (table, its columns after `cluster`). SQLite cannot change a primary
/// key in place, so each is copied into the new shape once, its rows
/// becoming the `default` cluster's.
const KEYED_BY_CLUSTER: [(&str, &str); 3] = [
    ("identities", "vmid, machine_id, host_key, recorded"),
    ("templates", "vmid, image, built, job"),
    ("owners", "vmid, user, assigned"),
];

/// Columns added after a database was first made: (table, column, type).
/// `jobs.node`/`jobs.on_stop`: what a running job has at stake (a [`Stake`]).
/// `jobs.task`: the Proxmox task (UPID) the job waits on, if any.
/// `jobs.owner`: the user who started it.
/// `jobs.replica`/`jobs.lease_until`: who held a running job, until when.
/// `jobs.cluster`: which cluster's engine runs and reconciles it.
const ADDED_COLUMNS: [(&str, &str, &str); 8] = [
    ("jobs", "cluster", "TEXT NOT NULL DEFAULT 'default'"),
    ("events", "host_key", "TEXT"),
    ("jobs", "node", "TEXT"),
    ("jobs", "on_stop", "TEXT"),
    ("jobs", "task", "TEXT"),
    ("jobs", "owner", "TEXT"),
    ("jobs", "replica", "TEXT"),
    ("jobs", "lease_until", "INTEGER"),
];

fn job_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Job> {
    let kind: String = row.get("kind")?;
    let state: String = row.get("state")?;
    let outcome: Option<String> = row.get("outcome")?;
    let (kind, state, outcome) = job_enums(&kind, &state, outcome.as_deref());
    Ok(Job {
        id: row.get("id")?,
        kind,
        vmid: row.get("vmid")?,
        state,
        title: row.get("title")?,
        created: row.get("created")?,
        finished: row.get("finished")?,
        outcome,
        failed_step: row.get("failed_step")?,
        owner: row.get("owner")?,
    })
}

/// A running job's row with what it has at stake and the task it waits on.
fn orphan_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Orphan> {
    let job = job_from_row(row)?;
    let node: Option<String> = row.get("node")?;
    let on_stop: Option<String> = row.get("on_stop")?;
    let stake = Stake::from_columns(job.vmid, node, on_stop.as_deref());
    Ok(Orphan {
        job,
        stake,
        task: row.get("task")?,
    })
}

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let open_err = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let conn = Connection::open(path).map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_err)?;
        // Another writer (a second pvedeck on the same file, a backup)
        // makes a write wait, not fail.
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(open_err)?;
        for (table, _) in KEYED_BY_CLUSTER {
            let old: bool = conn
                .prepare(&format!(
                    "SELECT 1 FROM pragma_table_info('{table}') WHERE name = 'vmid'
                     AND NOT EXISTS (SELECT 1 FROM pragma_table_info('{table}')
                                     WHERE name = 'cluster')"
                ))
                .and_then(|mut s| s.exists([]))
                .map_err(open_err)?;
            if old {
                conn.execute_batch(&format!(
                    "BEGIN; ALTER TABLE {table} RENAME TO {table}_before_clusters; COMMIT;"
                ))
                .map_err(open_err)?;
            }
        }
        conn.execute_batch(SCHEMA).map_err(open_err)?;
        for (table, columns) in KEYED_BY_CLUSTER {
            let before = format!("{table}_before_clusters");
            let has: bool = conn
                .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")
                .and_then(|mut s| s.exists([&before]))
                .map_err(open_err)?;
            if has {
                conn.execute_batch(&format!(
                    "BEGIN;
                     INSERT INTO {table} (cluster, {columns})
                         SELECT 'default', {columns} FROM {before};
                     DROP TABLE {before};
                     COMMIT;"
                ))
                .map_err(open_err)?;
            }
        }
        for (table, column, kind) in ADDED_COLUMNS {
            let has: bool = conn
                .prepare(&format!(
                    "SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?1"
                ))
                .and_then(|mut s| s.exists(params![column]))
                .map_err(open_err)?;
            if !has {
                conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))
                    .map_err(open_err)?;
            }
        }
        Ok(SqliteStore {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
    }
}

impl JobStore for SqliteStore {
    fn create_job(
        &self,
        cluster: &str,
        kind: JobKind,
        vmid: Option<u32>,
        title: &str,
        created: i64,
        owner: Option<&str>,
        lease: Option<&Lease>,
    ) -> Result<u64, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO jobs (kind, vmid, state, title, created, owner, replica, lease_until,
                               cluster)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                word(&kind),
                vmid,
                word(&JobState::Running),
                title,
                created,
                owner,
                lease.map(|l| l.replica.as_str()),
                lease.map(|l| l.until),
                cluster
            ],
        )?;
        Ok(conn.last_insert_rowid() as u64)
    }

    /// One process owns the file: nothing to renew.
    fn renew(&self, _lease: &Lease) -> Result<(), StoreError> {
        Ok(())
    }

    fn take_over(
        &self,
        cluster: &str,
        lease: &Lease,
        now: i64,
        every: bool,
    ) -> Result<Vec<Taken>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let taken: Vec<Taken> = {
            let mut stmt = tx.prepare(
                "SELECT * FROM jobs WHERE state = ?1 AND cluster = ?4
                 AND (?2 OR lease_until IS NULL OR lease_until < ?3) ORDER BY id",
            )?;
            let running = word(&JobState::Running);
            let rows = stmt.query_map(params![running, every, now, cluster], |row| {
                Ok(Taken {
                    orphan: orphan_from_row(row)?,
                    from: row.get("replica")?,
                    lapsed: row.get("lease_until")?,
                })
            })?;
            rows.collect::<Result<_, _>>()?
        };
        for t in &taken {
            tx.execute(
                "UPDATE jobs SET replica = ?2, lease_until = ?3 WHERE id = ?1",
                params![t.orphan.job.id, lease.replica, lease.until],
            )?;
        }
        tx.commit()?;
        Ok(taken)
    }

    /// One process: the allocator's own set is every reservation there is.
    fn reserve_vmid(
        &self,
        _cluster: &str,
        _vmid: u32,
        _lease: &Lease,
        _now: i64,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }

    fn release_vmid(&self, _cluster: &str, _vmid: u32, _replica: &str) -> Result<(), StoreError> {
        Ok(())
    }

    fn set_vmid(&self, id: u64, vmid: u32) -> Result<(), StoreError> {
        self.conn()
            .execute("UPDATE jobs SET vmid = ?2 WHERE id = ?1", params![id, vmid])?;
        Ok(())
    }

    fn append(&self, id: u64, seq: u64, at: i64, ev: &StepEvent) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO events (job_id, seq, at, step, status, message, vm_id, ip, host_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                id,
                seq,
                at,
                ev.step,
                word(&ev.status),
                ev.message,
                ev.vm_id,
                ev.ip,
                ev.host_key
            ],
        )?;
        Ok(())
    }

    fn finish(
        &self,
        id: u64,
        state: JobState,
        finished: i64,
        outcome: Option<VmOutcome>,
        failed_step: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE jobs SET state = ?2, finished = ?3, outcome = ?4, failed_step = ?5
             WHERE id = ?1",
            params![
                id,
                word(&state),
                finished,
                outcome.map(|o| word(&o)),
                failed_step
            ],
        )?;
        Ok(())
    }

    fn job(&self, id: u64) -> Result<Option<Job>, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT * FROM jobs WHERE id = ?1", [id], job_from_row)
            .optional()?)
    }

    /// Newest first.
    fn jobs(&self, limit: u32) -> Result<Vec<Job>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM jobs ORDER BY id DESC LIMIT ?1")?;
        let rows = stmt.query_map([limit], job_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A user's jobs, newest first.
    fn jobs_of(&self, owner: &str, limit: u32) -> Result<Vec<Job>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT * FROM jobs WHERE owner = ?1 ORDER BY id DESC LIMIT ?2")?;
        let rows = stmt.query_map(params![owner, limit], job_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes the jobs that ended before `before` (ms), with their
    /// events; how many went.
    fn prune(&self, before: i64) -> Result<usize, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "DELETE FROM events WHERE job_id IN
             (SELECT id FROM jobs WHERE finished IS NOT NULL AND finished < ?1)",
            [before],
        )?;
        let gone = tx.execute(
            "DELETE FROM jobs WHERE finished IS NOT NULL AND finished < ?1",
            [before],
        )?;
        tx.commit()?;
        Ok(gone)
    }

    fn running_jobs(&self) -> Result<Vec<Orphan>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT * FROM jobs WHERE state = ?1 ORDER BY id")?;
        let rows = stmt.query_map([word(&JobState::Running)], orphan_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records what a running job has at stake now (`None`: nothing).
    fn set_stake(&self, id: u64, stake: Option<&Stake>) -> Result<(), StoreError> {
        match stake {
            Some(s) => self.conn().execute(
                "UPDATE jobs SET vmid = ?2, node = ?3, on_stop = ?4 WHERE id = ?1",
                params![id, s.vmid, s.node, s.on_stop.word()],
            )?,
            None => self.conn().execute(
                "UPDATE jobs SET node = NULL, on_stop = NULL WHERE id = ?1",
                [id],
            )?,
        };
        Ok(())
    }

    /// Records the Proxmox task a running job waits on (`None`: none).
    fn set_task(&self, id: u64, task: Option<&str>) -> Result<(), StoreError> {
        self.conn()
            .execute("UPDATE jobs SET task = ?2 WHERE id = ?1", params![id, task])?;
        Ok(())
    }

    /// Moves everything written to the WAL into the database file, so that
    /// a stopped server leaves one consistent file behind.
    fn flush(&self) -> Result<(), StoreError> {
        self.conn()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// At most `limit` of job `id`'s events after `after`, in order.
    fn events_page(&self, id: u64, after: u64, limit: usize) -> Result<Vec<JobEvent>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT seq, at, step, status, message, vm_id, ip, host_key FROM events
             WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![id, after, limit], |row| {
            let status: String = row.get(3)?;
            Ok(JobEvent {
                seq: row.get(0)?,
                at: row.get(1)?,
                event: StepEvent {
                    step: row.get(2)?,
                    status: from_word(&status).unwrap_or(pvedeck_domain::types::StepStatus::Error),
                    message: row.get(4)?,
                    vm_id: row.get(5)?,
                    ip: row.get(6)?,
                    host_key: row.get(7)?,
                },
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// What a VM pvedeck made proved to be (through the guest agent).
    fn record_identity(
        &self,
        cluster: &str,
        vmid: u32,
        machine_id: &str,
        host_key: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR REPLACE INTO identities (cluster, vmid, machine_id, host_key, recorded)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![cluster, vmid, machine_id, host_key, at],
        )?;
        Ok(())
    }

    /// A template built: from which image, when, by which job.
    fn record_template(&self, cluster: &str, built: &TemplateBuilt) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR REPLACE INTO templates (cluster, vmid, image, built, job)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![cluster, built.vmid, built.image, built.built, built.job],
        )?;
        Ok(())
    }

    /// Every template build recorded, by VMID.
    fn templates(&self, cluster: &str) -> Result<Vec<TemplateBuilt>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT vmid, image, built, job FROM templates WHERE cluster = ?1")?;
        let rows = stmt.query_map([cluster], |row| {
            Ok(TemplateBuilt {
                vmid: row.get(0)?,
                image: row.get(1)?,
                built: row.get(2)?,
                job: row.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every recorded identity: (vmid, machine-id, host key).
    fn identities(&self, cluster: &str) -> Result<Vec<(u32, String, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT vmid, machine_id, host_key FROM identities WHERE cluster = ?1")?;
        let rows = stmt.query_map([cluster], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn last_seq(&self, id: u64) -> Result<u64, StoreError> {
        Ok(self.conn().query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?1",
            [id],
            |row| row.get(0),
        )?)
    }
}

/// Sessions stay in the one process's memory (a restart logs everyone out,
/// as before): nothing is written here.
impl SessionStore for SqliteStore {
    fn put_session(&self, _hash: &str, _subject: &str, _expires: i64) -> Result<(), StoreError> {
        Ok(())
    }

    fn session(&self, _hash: &str, _now: i64) -> Result<Option<(String, i64)>, StoreError> {
        Ok(None)
    }

    fn close_session(&self, _hash: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

impl Store for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::accounts::PeopleStore;

    fn temp_db(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pvedeck-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("jobs.db")
    }

    #[test]
    fn a_database_from_before_host_keys_gains_the_column_and_keeps_its_events() {
        let path = temp_db("migrate");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        {
            let conn = Connection::open(&path).unwrap();
            // The schema before identities; events without host_key.
            let old = SCHEMA
                .split("CREATE TABLE IF NOT EXISTS identities")
                .next()
                .unwrap();
            conn.execute_batch(old).unwrap();
            conn.execute_batch(
                "INSERT INTO jobs (kind, state, title, created) VALUES ('install', 'succeeded', 't', 1);
                 INSERT INTO events VALUES (1, 1, 1, 's', 'success', 'm', 101, '192.168.0.101');",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let events = store.events(1, 0).unwrap();
        assert_eq!(events[0].event.ip.as_deref(), Some("192.168.0.101"));
        assert_eq!(events[0].event.host_key, None);
        // The tables added since are there (their rules: src/store/tests.rs).
        let built = TemplateBuilt {
            vmid: 9001,
            image: "debian-12-generic-amd64.qcow2".into(),
            built: 5,
            job: 3,
        };
        store.record_template("default", &built).unwrap();
        assert_eq!(store.templates("default").unwrap(), [built]);
        store
            .record_identity("default", 107, "m", "ssh-ed25519 K", 2)
            .unwrap();
        assert_eq!(store.identities("default").unwrap().len(), 1);
    }

    #[test]
    fn tables_keyed_by_vmid_alone_become_the_default_clusters() {
        let path = temp_db("before-clusters");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE owners (vmid INTEGER PRIMARY KEY, user TEXT NOT NULL,
                                      assigned INTEGER NOT NULL);
                 CREATE TABLE templates (vmid INTEGER PRIMARY KEY, image TEXT NOT NULL,
                                         built INTEGER NOT NULL, job INTEGER NOT NULL);
                 CREATE TABLE identities (vmid INTEGER PRIMARY KEY, machine_id TEXT NOT NULL,
                                          host_key TEXT NOT NULL, recorded INTEGER NOT NULL);
                 INSERT INTO owners VALUES (101, 'alice', 1);
                 INSERT INTO templates VALUES (9000, 'd.qcow2', 2, 3);
                 INSERT INTO identities VALUES (107, 'm', 'ssh-ed25519 K', 4);",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.owners("default").unwrap(),
            [(101, "alice".to_string())]
        );
        assert_eq!(store.templates("default").unwrap()[0].image, "d.qcow2");
        assert_eq!(store.identities("default").unwrap()[0].0, 107);
        store.set_owner("east", 101, "bob", 5).unwrap();
        assert_eq!(store.owners("default").unwrap().len(), 1);
        drop(store);
        let again = SqliteStore::open(&path).unwrap();
        assert_eq!(again.owners("east").unwrap(), [(101, "bob".to_string())]);
    }
}
