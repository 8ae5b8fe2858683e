//! Jobs, events, identities and templates in PostgreSQL.

use pvedeck_domain::types::{Job, JobEvent, JobKind, JobState, StepEvent, StepStatus, VmOutcome};
use tokio_postgres::Row;

use super::{PgStore, Sql, get, get_u32, get_u64, int, opt_int, param};
use crate::store::{
    JobStore, Lease, Orphan, Stake, StoreError, Taken, TemplateBuilt, from_word, job_enums, word,
};

const JOB_COLUMNS: &str = "SELECT id, kind, vmid, state, title, created, finished, outcome, \
                           failed_step, owner, node, on_stop, task FROM jobs";

fn job_from_row(row: &Row) -> Result<Job, StoreError> {
    let kind: String = get(row, "kind")?;
    let state: String = get(row, "state")?;
    let outcome: Option<String> = get(row, "outcome")?;
    let (kind, state, outcome) = job_enums(&kind, &state, outcome.as_deref());
    Ok(Job {
        id: get_u64(row, "id")?,
        kind,
        vmid: get_u32(row, "vmid")?,
        state,
        title: get(row, "title")?,
        created: get(row, "created")?,
        finished: get(row, "finished")?,
        outcome,
        failed_step: get(row, "failed_step")?,
        owner: get(row, "owner")?,
    })
}

/// A running job's row with what it has at stake and the task it waits on.
fn orphan_from_row(row: &Row) -> Result<Orphan, StoreError> {
    let job = job_from_row(row)?;
    let on_stop: Option<String> = get(row, "on_stop")?;
    let stake = Stake::from_columns(job.vmid, get(row, "node")?, on_stop.as_deref());
    Ok(Orphan {
        job,
        stake,
        task: get(row, "task")?,
    })
}

fn jobs_from_rows(rows: Vec<Row>) -> Result<Vec<Job>, StoreError> {
    rows.iter().map(job_from_row).collect()
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl JobStore for PgStore {
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
        let row = self
            .query_one(
                "INSERT INTO jobs (kind, vmid, state, title, created, owner, replica, lease_until,
                                   cluster)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
                vec![
                    param(word(&kind)),
                    opt_int(vmid),
                    param(word(&JobState::Running)),
                    param(title.to_string()),
                    param(created),
                    param(owner.map(str::to_string)),
                    param(lease.map(|l| l.replica.clone())),
                    param(lease.map(|l| l.until)),
                    param(cluster.to_string()),
                ],
            )?
            .ok_or_else(|| StoreError::Postgres("a new job got no id".to_string()))?;
        get_u64(&row, "id")
    }

    fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let replica = || param(lease.replica.clone());
        self.transaction(vec![
            (
                Sql::from(
                    "UPDATE jobs SET lease_until = $2 WHERE replica = $1 AND state = 'running'",
                ),
                vec![replica(), param(lease.until)],
            ),
            (
                Sql::from("UPDATE vmid_reservations SET until = $2 WHERE replica = $1"),
                vec![replica(), param(lease.until)],
            ),
        ])?;
        Ok(())
    }

    fn take_over(
        &self,
        cluster: &str,
        lease: &Lease,
        now: i64,
        every: bool,
    ) -> Result<Vec<Taken>, StoreError> {
        // SKIP LOCKED: replicas sweeping at once each take other jobs.
        let rows = self.query(
            "WITH lapsed AS (
                 SELECT id, replica AS previous, lease_until AS lapsed FROM jobs
                 WHERE state = 'running' AND cluster = $5
                     AND ($3 OR lease_until IS NULL OR lease_until < $2)
                 ORDER BY id FOR UPDATE SKIP LOCKED
             )
             UPDATE jobs SET replica = $1, lease_until = $4 FROM lapsed
             WHERE jobs.id = lapsed.id
             RETURNING jobs.id, jobs.kind, jobs.vmid, jobs.state, jobs.title, jobs.created,
                 jobs.finished, jobs.outcome, jobs.failed_step, jobs.owner, jobs.node,
                 jobs.on_stop, jobs.task, lapsed.previous, lapsed.lapsed",
            vec![
                param(lease.replica.clone()),
                param(now),
                param(every),
                param(lease.until),
                param(cluster.to_string()),
            ],
        )?;
        let mut taken = rows
            .iter()
            .map(|row| {
                Ok(Taken {
                    orphan: orphan_from_row(row)?,
                    from: get(row, "previous")?,
                    lapsed: get(row, "lapsed")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        taken.sort_by_key(|t| t.orphan.job.id);
        Ok(taken)
    }

    fn reserve_vmid(
        &self,
        cluster: &str,
        vmid: u32,
        lease: &Lease,
        now: i64,
    ) -> Result<bool, StoreError> {
        // Inserted, or taken from a lease that ran out: a row comes back.
        let got = self.query(
            "INSERT INTO vmid_reservations (vmid, replica, until, cluster) VALUES ($1, $2, $3, $5)
             ON CONFLICT (cluster, vmid) DO UPDATE SET replica = EXCLUDED.replica,
                 until = EXCLUDED.until
             WHERE vmid_reservations.until < $4
             RETURNING vmid",
            vec![
                int(vmid),
                param(lease.replica.clone()),
                param(lease.until),
                param(now),
                param(cluster.to_string()),
            ],
        )?;
        Ok(!got.is_empty())
    }

    fn release_vmid(&self, cluster: &str, vmid: u32, replica: &str) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM vmid_reservations WHERE vmid = $1 AND replica = $2 AND cluster = $3",
            vec![
                int(vmid),
                param(replica.to_string()),
                param(cluster.to_string()),
            ],
        )?;
        Ok(())
    }

    fn set_vmid(&self, id: u64, vmid: u32) -> Result<(), StoreError> {
        self.execute(
            "UPDATE jobs SET vmid = $2 WHERE id = $1",
            vec![int(id), int(vmid)],
        )?;
        Ok(())
    }

    fn append(&self, id: u64, seq: u64, at: i64, ev: &StepEvent) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO events (job_id, seq, at, step, status, message, vm_id, ip, host_key)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            vec![
                int(id),
                int(seq),
                param(at),
                param(ev.step.clone()),
                param(word(&ev.status)),
                param(ev.message.clone()),
                opt_int(ev.vm_id),
                param(ev.ip.clone()),
                param(ev.host_key.clone()),
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
        self.execute(
            "UPDATE jobs SET state = $2, finished = $3, outcome = $4, failed_step = $5
             WHERE id = $1",
            vec![
                int(id),
                param(word(&state)),
                param(finished),
                param(outcome.map(|o| word(&o))),
                param(failed_step.map(str::to_string)),
            ],
        )?;
        Ok(())
    }

    fn job(&self, id: u64) -> Result<Option<Job>, StoreError> {
        self.query_one(format!("{JOB_COLUMNS} WHERE id = $1"), vec![int(id)])?
            .as_ref()
            .map(job_from_row)
            .transpose()
    }

    fn jobs(&self, limit: u32) -> Result<Vec<Job>, StoreError> {
        jobs_from_rows(self.query(
            format!("{JOB_COLUMNS} ORDER BY id DESC LIMIT $1"),
            vec![param(i64::from(limit))],
        )?)
    }

    fn jobs_of(&self, owner: &str, limit: u32) -> Result<Vec<Job>, StoreError> {
        jobs_from_rows(self.query(
            format!("{JOB_COLUMNS} WHERE owner = $1 ORDER BY id DESC LIMIT $2"),
            vec![param(owner.to_string()), param(i64::from(limit))],
        )?)
    }

    fn prune(&self, before: i64) -> Result<usize, StoreError> {
        // Their events go with them (ON DELETE CASCADE).
        let gone = self.execute(
            "DELETE FROM jobs WHERE finished IS NOT NULL AND finished < $1",
            vec![param(before)],
        )?;
        Ok(usize::try_from(gone).unwrap_or(usize::MAX))
    }

    fn running_jobs(&self) -> Result<Vec<Orphan>, StoreError> {
        let rows = self.query(
            format!("{JOB_COLUMNS} WHERE state = $1 ORDER BY id"),
            vec![param(word(&JobState::Running))],
        )?;
        rows.iter().map(orphan_from_row).collect()
    }

    fn set_stake(&self, id: u64, stake: Option<&Stake>) -> Result<(), StoreError> {
        match stake {
            Some(s) => self.execute(
                "UPDATE jobs SET vmid = $2, node = $3, on_stop = $4 WHERE id = $1",
                vec![
                    int(id),
                    int(s.vmid),
                    param(s.node.clone()),
                    param(s.on_stop.word().to_string()),
                ],
            )?,
            None => self.execute(
                "UPDATE jobs SET node = NULL, on_stop = NULL WHERE id = $1",
                vec![int(id)],
            )?,
        };
        Ok(())
    }

    fn set_task(&self, id: u64, task: Option<&str>) -> Result<(), StoreError> {
        self.execute(
            "UPDATE jobs SET task = $2 WHERE id = $1",
            vec![int(id), param(task.map(str::to_string))],
        )?;
        Ok(())
    }

    /// Every write is committed when it returns: nothing to move.
    fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn events_page(
        &self,
        id: u64,
        after: u64,
        limit_to: usize,
    ) -> Result<Vec<JobEvent>, StoreError> {
        let rows = self.query(
            "SELECT seq, at, step, status, message, vm_id, ip, host_key FROM events
             WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            vec![int(id), int(after), param(limit(limit_to))],
        )?;
        rows.iter()
            .map(|row| {
                let status: String = get(row, "status")?;
                Ok(JobEvent {
                    seq: get_u64(row, "seq")?,
                    at: get(row, "at")?,
                    event: StepEvent {
                        step: get(row, "step")?,
                        status: from_word(&status).unwrap_or(StepStatus::Error),
                        message: get(row, "message")?,
                        vm_id: get_u32(row, "vm_id")?,
                        ip: get(row, "ip")?,
                        host_key: get(row, "host_key")?,
                    },
                })
            })
            .collect()
    }

    fn last_seq(&self, id: u64) -> Result<u64, StoreError> {
        match self.query_one(
            "SELECT COALESCE(MAX(seq), 0) AS seq FROM events WHERE job_id = $1",
            vec![int(id)],
        )? {
            Some(row) => get_u64(&row, "seq"),
            None => Ok(0),
        }
    }

    fn record_identity(
        &self,
        cluster: &str,
        vmid: u32,
        machine_id: &str,
        host_key: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO identities (vmid, machine_id, host_key, recorded, cluster)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (cluster, vmid) DO UPDATE SET machine_id = EXCLUDED.machine_id,
                 host_key = EXCLUDED.host_key, recorded = EXCLUDED.recorded",
            vec![
                int(vmid),
                param(machine_id.to_string()),
                param(host_key.to_string()),
                param(at),
                param(cluster.to_string()),
            ],
        )?;
        Ok(())
    }

    fn identities(&self, cluster: &str) -> Result<Vec<(u32, String, String)>, StoreError> {
        let rows = self.query(
            "SELECT vmid, machine_id, host_key FROM identities WHERE cluster = $1 ORDER BY vmid",
            vec![param(cluster.to_string())],
        )?;
        rows.iter()
            .filter_map(|row| match get_u32(row, "vmid") {
                Ok(Some(vmid)) => {
                    Some(get(row, "machine_id").and_then(|m| Ok((vmid, m, get(row, "host_key")?))))
                }
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            })
            .collect()
    }

    fn record_template(&self, cluster: &str, built: &TemplateBuilt) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO templates (vmid, image, built, job, cluster) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (cluster, vmid) DO UPDATE SET image = EXCLUDED.image,
                 built = EXCLUDED.built, job = EXCLUDED.job",
            vec![
                int(built.vmid),
                param(built.image.clone()),
                param(built.built),
                int(built.job),
                param(cluster.to_string()),
            ],
        )?;
        Ok(())
    }

    fn templates(&self, cluster: &str) -> Result<Vec<TemplateBuilt>, StoreError> {
        let rows = self.query(
            "SELECT vmid, image, built, job FROM templates WHERE cluster = $1 ORDER BY vmid",
            vec![param(cluster.to_string())],
        )?;
        rows.iter()
            .filter_map(|row| match get_u32(row, "vmid") {
                Ok(Some(vmid)) => Some((|| {
                    Ok(TemplateBuilt {
                        vmid,
                        image: get(row, "image")?,
                        built: get(row, "built")?,
                        job: get_u64(row, "job")?,
                    })
                })()),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            })
            .collect()
    }
}
