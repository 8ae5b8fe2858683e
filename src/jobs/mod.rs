//! Jobs: every install, start, reboot and migration. Each event is stored
//! (so it can be replayed after a disconnect or a restart) and then fanned out
//! to whoever follows the job live. A job runs on its own task: a client that
//! goes away stops following, never the job.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{broadcast, mpsc};

use app::types::{Job, JobEvent, JobKind, JobState, StepEvent, StepStatus, VmOutcome};

use crate::clock::now_ms;
use crate::store::{Store, StoreError, TemplateBuilt};

/// What a follower receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Event(JobEvent),
    /// The job has ended; nothing follows.
    Closed,
}

#[derive(Debug, Clone)]
enum Live {
    Event(JobEvent),
    Closed,
}

/// Room for a slow follower before it has to catch up from the database.
const LIVE_CAPACITY: usize = 256;

pub struct Jobs {
    store: Store,
    live: Mutex<HashMap<u64, broadcast::Sender<Live>>>,
    limits: JobLimits,
    /// Open followers per job.
    followers: Mutex<HashMap<u64, usize>>,
}

/// One follower, counted while its task runs.
struct Following {
    jobs: Arc<Jobs>,
    id: u64,
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut followers = self
            .jobs
            .followers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = followers.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                followers.remove(&self.id);
            }
        }
    }
}

/// What one job may keep, and how long jobs are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// `JOB_MAX_EVENTS`: relayed command output lines kept per job (each a
    /// row and a broadcast); past it, one line says the rest was dropped.
    pub max_relayed: u64,
    /// `JOBS_KEEP_DAYS`: ended jobs older than this go at start-up.
    pub keep_days: u32,
    /// `MAX_FOLLOWERS_PER_JOB`, `MAX_FOLLOWERS`: streams open at once.
    pub max_followers_per_job: usize,
    pub max_followers: usize,
}

/// Why a job cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Too many streams already (503).
    #[error("{0}")]
    Busy(String),
}

impl Default for JobLimits {
    fn default() -> Self {
        JobLimits {
            max_relayed: 5000,
            keep_days: 90,
            max_followers_per_job: 2000,
            max_followers: 10_000,
        }
    }
}

/// Whether a relayed line is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// The first one past the limit: say so, once.
    Last(u64),
    No,
}

impl Jobs {
    /// Opens the job database; jobs that were running when the server
    /// stopped are closed as interrupted, with an event saying so.
    pub fn open(path: &Path) -> Result<Arc<Jobs>, StoreError> {
        Jobs::open_with(path, JobLimits::default())
    }

    /// [`Jobs::open`] with limits; ended jobs older than `keep_days` go.
    pub fn open_with(path: &Path, limits: JobLimits) -> Result<Arc<Jobs>, StoreError> {
        let store = Store::open(path)?;
        let keep_ms = i64::from(limits.keep_days) * 86_400_000;
        let pruned = store.prune(now_ms() - keep_ms)?;
        if pruned > 0 {
            tracing::info!(pruned, keep_days = limits.keep_days, "old jobs removed");
        }
        for job in store.running_jobs()? {
            let seq = store.last_seq(job.id)? + 1;
            let step = store
                .events(job.id, seq.saturating_sub(2))?
                .last()
                .map_or_else(|| "pvedeck".to_string(), |e| e.event.step.clone());
            let event = StepEvent {
                step: step.clone(),
                status: StepStatus::Error,
                message: "[-] interrupted: pvedeck stopped while this job ran".to_string(),
                vm_id: None,
                ip: None,
                host_key: None,
            };
            store.append(job.id, seq, now_ms(), &event)?;
            store.finish(job.id, JobState::Interrupted, now_ms(), None, Some(&step))?;
            tracing::warn!(job = job.id, "job interrupted by a restart");
        }
        Ok(Arc::new(Jobs {
            store,
            live: Mutex::new(HashMap::new()),
            limits,
            followers: Mutex::new(HashMap::new()),
        }))
    }

    fn live(&self) -> MutexGuard<'_, HashMap<u64, broadcast::Sender<Live>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn start(
        self: &Arc<Self>,
        kind: JobKind,
        vmid: Option<u32>,
        title: &str,
    ) -> Result<JobHandle, StoreError> {
        let id = self.store.create_job(kind, vmid, title, now_ms())?;
        let (tx, _) = broadcast::channel(LIVE_CAPACITY);
        self.live().insert(id, tx);
        tracing::info!(job = id, kind = kind.as_str(), title, "job started");
        Ok(JobHandle {
            id,
            jobs: self.clone(),
            seq: AtomicU64::new(0),
            relayed: AtomicU64::new(0),
            finished: Mutex::new(false),
        })
    }

    pub fn job(&self, id: u64) -> Result<Option<Job>, StoreError> {
        self.store.job(id)
    }

    pub fn list(&self, limit: u32) -> Result<Vec<Job>, StoreError> {
        self.store.jobs(limit)
    }

    /// The identities of the VMs pvedeck made, kept beside their jobs.
    pub fn record_identity(
        &self,
        vmid: u32,
        machine_id: &str,
        host_key: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        self.store.record_identity(vmid, machine_id, host_key, at)
    }

    /// What each template pvedeck built was built from, and when.
    pub fn record_template(&self, built: &TemplateBuilt) -> Result<(), StoreError> {
        self.store.record_template(built)
    }

    pub fn templates(&self) -> Result<Vec<TemplateBuilt>, StoreError> {
        self.store.templates()
    }

    pub fn identities(&self) -> Result<Vec<(u32, String, String)>, StoreError> {
        self.store.identities()
    }

    pub fn events(&self, id: u64, after: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.store.events(id, after)
    }

    /// Counts a new follower of job `id`, within the limits.
    fn count_follower(self: &Arc<Self>, id: u64) -> Result<Following, FollowError> {
        let mut followers = self.followers.lock().unwrap_or_else(|p| p.into_inner());
        let total: usize = followers.values().sum();
        let of_job = followers.get(&id).copied().unwrap_or(0);
        let limits = self.limits;
        if of_job >= limits.max_followers_per_job {
            return Err(FollowError::Busy(format!(
                "job {id} has {of_job} followers already (MAX_FOLLOWERS_PER_JOB): try again later"
            )));
        }
        if total >= limits.max_followers {
            return Err(FollowError::Busy(format!(
                "{total} job streams are open (MAX_FOLLOWERS): try again later"
            )));
        }
        *followers.entry(id).or_insert(0) += 1;
        Ok(Following {
            jobs: self.clone(),
            id,
        })
    }

    /// Follows a job from after event `after`: the stored events first, then
    /// the live ones, then `Closed`. `None` when there is no such job.
    pub fn follow(
        self: &Arc<Self>,
        id: u64,
        after: u64,
    ) -> Result<Option<mpsc::Receiver<Update>>, FollowError> {
        if self.store.job(id)?.is_none() {
            return Ok(None);
        }
        let following = self.count_follower(id)?;
        // Subscribe before reading the stored events so that nothing falls
        // between the two; duplicates are dropped by sequence number.
        let live = self.live().get(&id).map(broadcast::Sender::subscribe);
        let (tx, rx) = mpsc::channel(64);
        let jobs = self.clone();
        tokio::spawn(async move {
            let _following = following;
            let mut last = after;
            let catch_up = |last: &mut u64| -> Vec<Update> {
                let events = jobs.store.events(id, *last).unwrap_or_default();
                if let Some(e) = events.last() {
                    *last = e.seq;
                }
                events.into_iter().map(Update::Event).collect()
            };
            for update in catch_up(&mut last) {
                if tx.send(update).await.is_err() {
                    return;
                }
            }
            if let Some(mut live) = live {
                loop {
                    match live.recv().await {
                        Ok(Live::Event(e)) if e.seq > last => {
                            last = e.seq;
                            if tx.send(Update::Event(e)).await.is_err() {
                                return;
                            }
                        }
                        Ok(Live::Event(_)) => {}
                        Ok(Live::Closed) | Err(broadcast::error::RecvError::Closed) => break,
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            for update in catch_up(&mut last) {
                                if tx.send(update).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
                // Events stored after the last one seen live (a lag at the end).
                for update in catch_up(&mut last) {
                    if tx.send(update).await.is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send(Update::Closed).await;
        });
        Ok(Some(rx))
    }
}

/// The running job's side: appends events and ends the job.
pub struct JobHandle {
    id: u64,
    jobs: Arc<Jobs>,
    seq: AtomicU64,
    /// Relayed command output lines so far.
    relayed: AtomicU64,
    finished: Mutex<bool>,
}

impl JobHandle {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Counts a relayed line against `JOB_MAX_EVENTS`.
    pub fn admit_relayed(&self) -> Admit {
        let max = self.jobs.limits.max_relayed;
        match self.relayed.fetch_add(1, Ordering::SeqCst) {
            n if n < max => Admit::Yes,
            n if n == max => Admit::Last(max),
            _ => Admit::No,
        }
    }

    pub fn set_vmid(&self, vmid: u32) {
        if let Err(e) = self.jobs.store.set_vmid(self.id, vmid) {
            tracing::warn!(job = self.id, "cannot record the job's VM: {e}");
        }
    }

    /// Stores and broadcasts one event. A database error is logged, and the
    /// event still reaches the live followers.
    pub fn emit(&self, event: StepEvent) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let at = now_ms();
        if let Err(e) = self.jobs.store.append(self.id, seq, at, &event) {
            tracing::warn!(job = self.id, "cannot store an event: {e}");
        }
        tracing::debug!(job = self.id, step = event.step, "{}", event.message);
        if let Some(tx) = self.jobs.live().get(&self.id) {
            let _ = tx.send(Live::Event(JobEvent { seq, at, event }));
        }
    }

    /// Ends the job; followers get the rest of the events, then `Closed`.
    pub fn finish(&self, state: JobState, outcome: Option<VmOutcome>, failed_step: Option<&str>) {
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        if *finished {
            return;
        }
        *finished = true;
        if let Err(e) = self
            .jobs
            .store
            .finish(self.id, state, now_ms(), outcome, failed_step)
        {
            tracing::warn!(job = self.id, "cannot record the job's end: {e}");
        }
        if let Some(tx) = self.jobs.live().remove(&self.id) {
            let _ = tx.send(Live::Closed);
        }
        tracing::info!(job = self.id, state = ?state, "job finished");
    }
}

impl Drop for JobHandle {
    /// A job whose task ended without finishing it (a panic) must not stay
    /// "running" forever.
    fn drop(&mut self) {
        let done = *self.finished.lock().unwrap_or_else(|p| p.into_inner());
        if !done {
            self.emit(StepEvent {
                step: "pvedeck".to_string(),
                status: StepStatus::Error,
                message: "[-] the job ended unexpectedly".to_string(),
                vm_id: None,
                ip: None,
                host_key: None,
            });
            self.finish(JobState::Failed, None, Some("pvedeck"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u32) -> StepEvent {
        StepEvent {
            step: "s".into(),
            status: StepStatus::Processing,
            message: format!("line {n}"),
            vm_id: None,
            ip: None,
            host_key: None,
        }
    }

    fn db(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pvedeck-jobs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("jobs.db")
    }

    async fn drain(mut rx: mpsc::Receiver<Update>) -> Vec<Update> {
        let mut out = Vec::new();
        while let Some(u) = rx.recv().await {
            let closed = u == Update::Closed;
            out.push(u);
            if closed {
                break;
            }
        }
        out
    }

    fn seqs(updates: &[Update]) -> Vec<u64> {
        updates
            .iter()
            .filter_map(|u| match u {
                Update::Event(e) => Some(e.seq),
                Update::Closed => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_follower_gets_replay_then_live_then_close() {
        let jobs = Jobs::open(&db("follow")).unwrap();
        let job = jobs.start(JobKind::Install, None, "t").unwrap();
        job.emit(event(1));
        job.emit(event(2));
        let rx = jobs.follow(job.id(), 0).unwrap().unwrap();
        job.emit(event(3));
        job.finish(JobState::Succeeded, None, None);
        let updates = drain(rx).await;
        assert_eq!(seqs(&updates), [1, 2, 3]);
        assert_eq!(updates.last(), Some(&Update::Closed));
    }

    #[tokio::test]
    async fn last_event_id_resumes_and_finished_jobs_replay() {
        let jobs = Jobs::open(&db("resume")).unwrap();
        let job = jobs.start(JobKind::Start, Some(101), "t").unwrap();
        for n in 1..=5 {
            job.emit(event(n));
        }
        job.finish(JobState::Failed, Some(VmOutcome::Kept), Some("s"));
        let updates = drain(jobs.follow(job.id(), 3).unwrap().unwrap()).await;
        assert_eq!(seqs(&updates), [4, 5]);
        assert!(jobs.follow(9999, 0).unwrap().is_none());
    }

    #[tokio::test]
    async fn jobs_running_at_a_restart_are_marked_interrupted() {
        let path = db("restart");
        let id = {
            let jobs = Jobs::open(&path).unwrap();
            let job = jobs.start(JobKind::Install, None, "t").unwrap();
            job.emit(event(1));
            let id = job.id();
            // The process "dies": the handle is never finished nor dropped.
            std::mem::forget(job);
            id
        };
        let jobs = Jobs::open(&path).unwrap();
        let job = jobs.job(id).unwrap().unwrap();
        assert_eq!(job.state, JobState::Interrupted);
        let events = jobs.events(id, 0).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].event.status, StepStatus::Error);
    }

    #[tokio::test]
    async fn a_lagging_follower_catches_up_from_the_database() {
        let jobs = Jobs::open(&db("lag")).unwrap();
        let job = jobs.start(JobKind::Install, None, "t").unwrap();
        let rx = jobs.follow(job.id(), 0).unwrap().unwrap();
        for n in 1..=(LIVE_CAPACITY as u32 * 3) {
            job.emit(event(n));
        }
        job.finish(JobState::Succeeded, None, None);
        let updates = drain(rx).await;
        let got = seqs(&updates);
        assert_eq!(got.len(), LIVE_CAPACITY * 3);
        assert!(got.windows(2).all(|w| w[1] == w[0] + 1));
    }
}
