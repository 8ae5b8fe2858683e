//! Jobs: every install, start, reboot and migration. Each event is stored
//! (so it can be replayed after a disconnect or a restart) and then fanned out
//! to whoever follows the job live. A job runs on its own task: a client that
//! goes away stops following, never the job.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use pvedeck_config::JobLimits;
use pvedeck_config::allow::ClientKey;
use pvedeck_domain::types::{Job, JobEvent, JobKind, JobState, StepEvent, StepStatus, VmOutcome};
use pvedeck_support::clock::now_ms;
use pvedeck_support::sync::lock;
use tokio::sync::{broadcast, mpsc};

use crate::metrics::Metrics;
use crate::store::{Lease, Location, Notice, Store, StoreError, Taken, TemplateBuilt};
pub use crate::store::{OnStop, Stake};

/// What a follower receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Event(JobEvent),
    /// The job has ended; nothing follows.
    Closed,
}

#[derive(Debug, Clone)]
enum Live {
    /// An event, with the message a secret-bearing one shows live (to
    /// the followers allowed to see it).
    Event(JobEvent, Option<String>),
    Closed,
}

/// Room for a slow follower before it has to catch up from the database.
const LIVE_CAPACITY: usize = 256;

/// The live channel of each running job.
type LiveMap = Arc<Mutex<HashMap<u64, broadcast::Sender<Live>>>>;

/// This process among the pvedeck processes sharing a store: its name, and
/// how long what it holds stays its own without renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    pub name: String,
    pub lease: std::time::Duration,
}

impl Default for Replica {
    fn default() -> Self {
        Replica {
            name: "pvedeck".to_string(),
            lease: std::time::Duration::from_secs(15),
        }
    }
}

/// A job running on another replica, followed here: its live channel, fed
/// from the database as the notices arrive.
struct Remote {
    tx: broadcast::Sender<Live>,
    /// The last event sent on `tx`.
    last: u64,
}

pub struct Jobs {
    store: Arc<dyn Store>,
    replica: Replica,
    /// Jobs of other replicas that someone here follows.
    remote: Mutex<HashMap<u64, Remote>>,
    live: LiveMap,
    /// The writer thread: events, ends and stakes are written there, in
    /// order, and only then broadcast — never on an async worker thread.
    writes: std::sync::mpsc::Sender<Write>,
    limits: JobLimits,
    /// Open followers, counted per job, per client and in all.
    followers: Mutex<FollowerCounts>,
    /// `/metrics`: jobs, steps and streams are counted as they pass here.
    metrics: Arc<Metrics>,
}

/// Who follows a job, for the stream limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follower {
    /// The request that started the job (an install's or an action's own
    /// stream), or pvedeck itself (a clone waiting for its template):
    /// never refused, so that no job fails or goes unseen because others
    /// hold every stream.
    Starter,
    /// The job's owner (its user, signed in): past the job's and the
    /// server's limits, up to [`OWNER_STREAMS`] of the job at once.
    Owner,
    /// Anyone else who may see the job: within `MAX_FOLLOWERS_PER_CLIENT`
    /// of its client, `MAX_FOLLOWERS_PER_JOB` and `MAX_FOLLOWERS`.
    Reader(Option<ClientKey>),
}

/// An owner's streams of one job at once (tabs, a reconnecting client).
pub const OWNER_STREAMS: usize = 16;

/// Events replayed per read from the database: a follower of a long job
/// holds this many at a time, not the whole history.
const REPLAY_PAGE: usize = 256;

#[derive(Default)]
struct FollowerCounts {
    /// Readers per job.
    of_job: HashMap<u64, usize>,
    /// Owners per job.
    owners: HashMap<u64, usize>,
    /// Readers per client.
    of_client: HashMap<ClientKey, usize>,
    /// Readers in all.
    readers: usize,
}

fn take_one<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// One follower, counted while its task runs.
struct Following {
    jobs: Arc<Jobs>,
    id: u64,
    who: Follower,
}

impl Drop for Following {
    fn drop(&mut self) {
        self.jobs.metrics.follower_closed();
        let mut counts = lock(&self.jobs.followers);
        match self.who {
            Follower::Starter => {}
            Follower::Owner => take_one(&mut counts.owners, &self.id),
            Follower::Reader(client) => {
                take_one(&mut counts.of_job, &self.id);
                if let Some(key) = client {
                    take_one(&mut counts.of_client, &key);
                }
                counts.readers = counts.readers.saturating_sub(1);
            }
        }
    }
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

/// A write for the writer thread.
enum Write {
    /// An event; with `shown`, live followers get that message instead of
    /// the stored one (a secret shown once).
    Event {
        id: u64,
        event: JobEvent,
        shown: Option<String>,
    },
    Finish {
        id: u64,
        state: JobState,
        at: i64,
        outcome: Option<VmOutcome>,
        failed_step: Option<String>,
    },
    Vmid(u64, u32),
    Stake(u64, Option<Stake>),
    Task(u64, Option<String>),
    /// Everything before it is written; then the WAL is checkpointed.
    Flush(tokio::sync::oneshot::Sender<Result<(), StoreError>>),
}

/// Writes held while the database is out of reach, at most: a running
/// job's events and ends are written when it comes back, in order; past
/// this many the oldest go (and the log says how many).
const MAX_PENDING: usize = 100_000;

/// How often held writes are tried again while the database is away.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Writes one row change; what a write that touches nothing in the
/// database (a flush) does is the loop's.
fn apply(store: &dyn Store, write: &Write) -> Result<(), StoreError> {
    match write {
        Write::Event { id, event, .. } => store.append(*id, event.seq, event.at, &event.event),
        Write::Finish {
            id,
            state,
            at,
            outcome,
            failed_step,
        } => store.finish(*id, *state, *at, *outcome, failed_step.as_deref()),
        Write::Vmid(id, vmid) => store.set_vmid(*id, *vmid),
        Write::Task(id, task) => store.set_task(*id, task.as_deref()),
        Write::Stake(id, stake) => store.set_stake(*id, stake.as_ref()),
        Write::Flush(_) => Ok(()),
    }
}

/// What followers must hear of a write, once it is written or held.
fn announce(live: &LiveMap, write: &Write) {
    match write {
        Write::Event { id, event, shown } => {
            if let Some(tx) = lock(live).get(id) {
                let _ = tx.send(Live::Event(event.clone(), shown.clone()));
            }
        }
        Write::Finish { id, .. } => {
            if let Some(tx) = lock(live).remove(id) {
                let _ = tx.send(Live::Closed);
            }
        }
        _ => {}
    }
}

/// Writes held until the database is back.
#[derive(Default)]
struct Pending {
    writes: std::collections::VecDeque<Write>,
    dropped: u64,
}

impl Pending {
    fn hold(&mut self, write: Write) {
        if self.writes.len() >= MAX_PENDING {
            self.writes.pop_front();
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                tracing::error!(
                    dropped = self.dropped,
                    "the database is still away: held writes past {MAX_PENDING} are dropped"
                );
            }
        }
        self.writes.push_back(write);
    }

    /// Writes what is held, in order, until the database fails again.
    fn drain(&mut self, store: &dyn Store) {
        if self.writes.is_empty() {
            return;
        }
        while let Some(write) = self.writes.front() {
            match apply(store, write) {
                Err(e) if e.is_unavailable() => return,
                Err(e) => tracing::warn!("a held write failed: {e}"),
                Ok(()) => {}
            }
            self.writes.pop_front();
        }
        tracing::info!(
            dropped = self.dropped,
            "the database is back: the held writes are written"
        );
        self.dropped = 0;
    }
}

/// The writer thread's loop: a write, then what followers must hear of it.
/// A statement's error is logged and the event still reaches the
/// followers; while the database is out of reach writes are held (in
/// order, bounded) and written when it comes back.
fn write_all(store: &dyn Store, live: &LiveMap, writes: std::sync::mpsc::Receiver<Write>) {
    let mut pending = Pending::default();
    loop {
        let write = if pending.writes.is_empty() {
            match writes.recv() {
                Ok(write) => write,
                Err(_) => return,
            }
        } else {
            match writes.recv_timeout(RETRY) {
                Ok(write) => write,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    pending.drain(store);
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            }
        };
        if let Write::Flush(done) = write {
            pending.drain(store);
            let flushed = match pending.writes.len() {
                0 => store.flush(),
                held => Err(StoreError::Unavailable(format!(
                    "{held} writes held: the database is out of reach"
                ))),
            };
            let _ = done.send(flushed);
            continue;
        }
        if !pending.writes.is_empty() {
            pending.drain(store);
        }
        if pending.writes.is_empty() {
            match apply(store, &write) {
                Err(e) if e.is_unavailable() => {
                    tracing::warn!("the database is out of reach: writes are held: {e}");
                    announce(live, &write);
                    pending.hold(write);
                }
                Err(e) => {
                    tracing::warn!("cannot store a job's {}: {e}", write.what());
                    announce(live, &write);
                }
                Ok(()) => announce(live, &write),
            }
        } else {
            announce(live, &write);
            pending.hold(write);
        }
    }
}

impl Write {
    fn what(&self) -> &'static str {
        match self {
            Write::Event { .. } => "event",
            Write::Finish { .. } => "end",
            Write::Vmid(..) => "VM",
            Write::Task(..) => "Proxmox task",
            Write::Stake(..) => "stake",
            Write::Flush(_) => "flush",
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
    /// Opens the job database. Jobs that were running when the server
    /// stopped stay `running` until [`Jobs::resume_orphans`] hands them to
    /// whoever reconciles them.
    pub fn open(path: &Path) -> Result<Arc<Jobs>, StoreError> {
        Jobs::open_with(path, JobLimits::default())
    }

    /// [`Jobs::open`] with limits; ended jobs older than `keep_days` go.
    pub fn open_with(path: &Path, limits: JobLimits) -> Result<Arc<Jobs>, StoreError> {
        Jobs::on_store(
            crate::store::open(Location::Sqlite(path))?,
            limits,
            Replica::default(),
        )
    }

    /// The jobs of `store` (SQLite or PostgreSQL), with limits, run by
    /// `replica`. On a shared store it follows the other replicas' jobs
    /// (on the current runtime).
    pub fn on_store(
        store: Arc<dyn Store>,
        limits: JobLimits,
        replica: Replica,
    ) -> Result<Arc<Jobs>, StoreError> {
        let keep_ms = i64::from(limits.keep_days) * 86_400_000;
        let pruned = store.prune(now_ms() - keep_ms)?;
        if pruned > 0 {
            tracing::info!(pruned, keep_days = limits.keep_days, "old jobs removed");
        }
        let live = LiveMap::default();
        let (writes, queue) = std::sync::mpsc::channel();
        let (writer_store, writer_live) = (store.clone(), live.clone());
        std::thread::Builder::new()
            .name("pvedeck-db".to_string())
            .spawn(move || write_all(writer_store.as_ref(), &writer_live, queue))
            .map_err(StoreError::Writer)?;
        let notices = store.notices();
        let jobs = Arc::new(Jobs {
            store,
            replica,
            remote: Mutex::default(),
            live,
            writes,
            limits,
            followers: Mutex::default(),
            metrics: Arc::new(Metrics::new()),
        });
        if let Some(notices) = notices {
            tokio::spawn(feed(Arc::downgrade(&jobs), notices));
        }
        Ok(jobs)
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A read, on a blocking thread: the async workers never wait on SQLite.
    async fn read<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || read(store.as_ref()))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }

    fn write(&self, write: Write) {
        if self.writes.send(write).is_err() {
            tracing::error!("the job database's writer has stopped: a write is lost");
        }
    }

    /// This replica's name.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The lease a job or reservation of this replica gets now, where
    /// replicas share the store.
    pub fn lease(&self) -> Option<Lease> {
        self.store.shared().then(|| Lease {
            replica: self.replica.name.clone(),
            until: now_ms() + i64::try_from(self.replica.lease.as_millis()).unwrap_or(i64::MAX),
        })
    }

    /// Holds `vmid` for an install of this replica (a shared store only:
    /// alone, the allocator's own set is enough); `false` when another
    /// replica's install holds it.
    pub fn reserve_vmid(&self, cluster: &str, vmid: u32) -> Result<bool, StoreError> {
        match self.lease() {
            Some(lease) => self.store.reserve_vmid(cluster, vmid, &lease, now_ms()),
            None => Ok(true),
        }
    }

    /// Lets an install's `vmid` go.
    pub fn release_vmid(&self, cluster: &str, vmid: u32) {
        if self.store.shared()
            && let Err(e) = self.store.release_vmid(cluster, vmid, &self.replica.name)
        {
            tracing::warn!(vmid, "cannot release the VMID in the database: {e}");
        }
    }

    /// Renews what this replica holds (a shared store only).
    pub fn renew(&self) -> Result<(), StoreError> {
        match self.lease() {
            Some(lease) => self.store.renew(&lease),
            None => Ok(()),
        }
    }

    /// The jobs a previous process left running (it was killed), each
    /// with what it had at stake, as handles that go on from their last
    /// event: followers wait for their end as for any running job. On its
    /// own database, every running job; on a shared one, those whose
    /// lease ran out.
    pub fn resume_orphans(self: &Arc<Self>, cluster: &str) -> Result<Vec<Resumed>, StoreError> {
        let lease = self.lease().unwrap_or_else(|| Lease {
            replica: self.replica.name.clone(),
            until: 0,
        });
        let taken = self
            .store
            .take_over(cluster, &lease, now_ms(), !self.store.shared())?;
        self.resume(taken)
    }

    /// The jobs of other replicas whose lease ran out, taken over by this
    /// one (a shared store only).
    pub fn take_lapsed(self: &Arc<Self>, cluster: &str) -> Result<Vec<Resumed>, StoreError> {
        let Some(lease) = self.lease() else {
            return Ok(Vec::new());
        };
        let taken = self.store.take_over(cluster, &lease, now_ms(), false)?;
        self.resume(taken)
    }

    fn resume(self: &Arc<Self>, taken: Vec<Taken>) -> Result<Vec<Resumed>, StoreError> {
        let mut orphans = Vec::new();
        for Taken {
            orphan,
            from,
            lapsed,
        } in taken
        {
            let (job, stake) = (orphan.job, orphan.stake);
            let seq = self.store.last_seq(job.id)?;
            let last_step = self
                .store
                .events(job.id, seq.saturating_sub(1))?
                .last()
                .map_or_else(|| "pvedeck".to_string(), |e| e.event.step.clone());
            // Whoever here followed it on another replica goes on
            // following it on the same channel, now fed by this one.
            let tx = match lock(&self.remote).remove(&job.id) {
                Some(remote) => remote.tx,
                None => broadcast::channel(LIVE_CAPACITY).0,
            };
            self.live().insert(job.id, tx);
            orphans.push(Resumed {
                handle: JobHandle {
                    id: job.id,
                    kind: job.kind,
                    jobs: self.clone(),
                    seq: AtomicU64::new(seq),
                    relayed: AtomicU64::new(0),
                    finished: Mutex::new(false),
                    last_step: Mutex::new(last_step),
                    stake: Mutex::new(stake.clone()),
                    owner: job.owner.clone(),
                },
                kind: job.kind,
                stake,
                task: orphan.task,
                from: from.filter(|f| *f != self.replica.name),
                lapsed,
            });
        }
        Ok(orphans)
    }

    /// Writes everything queued, then all of it into the database file
    /// (at shutdown).
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (done, flushed) = tokio::sync::oneshot::channel();
        self.write(Write::Flush(done));
        flushed
            .await
            .map_err(|_| StoreError::Task("the writer stopped before the flush".to_string()))?
    }

    fn live(&self) -> MutexGuard<'_, HashMap<u64, broadcast::Sender<Live>>> {
        lock(&self.live)
    }

    pub fn start(
        self: &Arc<Self>,
        cluster: &str,
        kind: JobKind,
        vmid: Option<u32>,
        title: &str,
        owner: Option<&str>,
    ) -> Result<JobHandle, StoreError> {
        let lease = self.lease();
        let id =
            self.store
                .create_job(cluster, kind, vmid, title, now_ms(), owner, lease.as_ref())?;
        let (tx, _) = broadcast::channel(LIVE_CAPACITY);
        self.live().insert(id, tx);
        tracing::info!(job = id, kind = kind.as_str(), title, "job started");
        self.metrics.job_started(kind.as_str());
        Ok(JobHandle {
            id,
            kind,
            jobs: self.clone(),
            seq: AtomicU64::new(0),
            relayed: AtomicU64::new(0),
            finished: Mutex::new(false),
            last_step: Mutex::new("pvedeck".to_string()),
            stake: Mutex::new(None),
            owner: owner.map(str::to_string),
        })
    }

    pub async fn job(&self, id: u64) -> Result<Option<Job>, StoreError> {
        self.read(move |s| s.job(id)).await
    }

    /// Whether job `id` is running in this process.
    pub fn is_running(&self, id: u64) -> bool {
        self.live().contains_key(&id)
    }

    /// The store itself, for what is not the job history (people, audit).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// A user's jobs, newest first.
    pub async fn list_of(&self, owner: &str, limit: u32) -> Result<Vec<Job>, StoreError> {
        let owner = owner.to_string();
        self.read(move |s| s.jobs_of(&owner, limit)).await
    }

    pub async fn list(&self, limit: u32) -> Result<Vec<Job>, StoreError> {
        self.read(move |s| s.jobs(limit)).await
    }

    /// The identities of the VMs pvedeck made, kept beside their jobs.
    pub fn record_identity(
        &self,
        cluster: &str,
        vmid: u32,
        machine_id: &str,
        host_key: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        self.store
            .record_identity(cluster, vmid, machine_id, host_key, at)
    }

    /// What each template pvedeck built was built from, and when.
    pub fn record_template(&self, cluster: &str, built: &TemplateBuilt) -> Result<(), StoreError> {
        self.store.record_template(cluster, built)
    }

    pub async fn templates(&self, cluster: &str) -> Result<Vec<TemplateBuilt>, StoreError> {
        let cluster = cluster.to_string();
        self.read(move |s| s.templates(&cluster)).await
    }

    pub async fn identities(
        &self,
        cluster: &str,
    ) -> Result<Vec<(u32, String, String)>, StoreError> {
        let cluster = cluster.to_string();
        self.read(move |s| s.identities(&cluster)).await
    }

    pub async fn events(&self, id: u64, after: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.read(move |s| s.events(id, after)).await
    }

    /// Counts a new follower of job `id`, within the limits that apply to
    /// `who`.
    fn count_follower(self: &Arc<Self>, id: u64, who: Follower) -> Result<Following, FollowError> {
        let mut counts = lock(&self.followers);
        let limits = self.limits;
        match who {
            Follower::Starter => {}
            Follower::Owner => {
                let owners = counts.owners.get(&id).copied().unwrap_or(0);
                if owners >= OWNER_STREAMS {
                    return Err(FollowError::Busy(format!(
                        "you have {owners} streams of job {id} open already: close one"
                    )));
                }
                *counts.owners.entry(id).or_insert(0) += 1;
            }
            Follower::Reader(client) => {
                let of_job = counts.of_job.get(&id).copied().unwrap_or(0);
                if of_job >= limits.max_followers_per_job {
                    return Err(FollowError::Busy(format!(
                        "job {id} has {of_job} followers already (MAX_FOLLOWERS_PER_JOB): try again later"
                    )));
                }
                if counts.readers >= limits.max_followers {
                    return Err(FollowError::Busy(format!(
                        "{} job streams are open (MAX_FOLLOWERS): try again later",
                        counts.readers
                    )));
                }
                if let Some(key) = client {
                    let mine = counts.of_client.get(&key).copied().unwrap_or(0);
                    if mine >= limits.max_followers_per_client {
                        return Err(FollowError::Busy(format!(
                            "{key} holds {mine} job streams already (MAX_FOLLOWERS_PER_CLIENT): \
                             close some"
                        )));
                    }
                    *counts.of_client.entry(key).or_insert(0) += 1;
                }
                *counts.of_job.entry(id).or_insert(0) += 1;
                counts.readers += 1;
            }
        }
        self.metrics.follower_opened();
        Ok(Following {
            jobs: self.clone(),
            id,
            who,
        })
    }

    /// Follows a job from after event `after`: the stored events first, then
    /// the live ones, then `Closed`. `None` when there is no such job.
    /// `reveal`: this follower is shown what is shown once (the job's
    /// generated root password); the others read the stored message.
    pub async fn follow(
        self: &Arc<Self>,
        id: u64,
        after: u64,
        reveal: bool,
        who: Follower,
    ) -> Result<Option<mpsc::Receiver<Update>>, FollowError> {
        let Some(job) = self.job(id).await? else {
            return Ok(None);
        };
        let following = self.count_follower(id, who)?;
        // Subscribe before reading the stored events so that nothing falls
        // between the two; duplicates are dropped by sequence number.
        let mut live = self.live().get(&id).map(broadcast::Sender::subscribe);
        if live.is_none() && job.state == JobState::Running && self.store.shared() {
            // Another replica runs it: its events arrive through the
            // database's notices.
            live = Some(self.follow_remote(id).await?);
            // It may have ended before the subscription: then the stored
            // events are all there is.
            if self
                .job(id)
                .await?
                .is_none_or(|j| j.state != JobState::Running)
            {
                live = None;
            }
        }
        let (tx, rx) = mpsc::channel(64);
        let jobs = self.clone();
        tokio::spawn(async move {
            let _following = following;
            let mut last = after;
            // The stored events after `last`, a page at a time: the
            // channel's room is what paces the reads.
            let catch_up = async |last: &mut u64| -> bool {
                loop {
                    let after = *last;
                    let page = jobs
                        .read(move |s| s.events_page(id, after, REPLAY_PAGE))
                        .await
                        .unwrap_or_default();
                    let full = page.len() == REPLAY_PAGE;
                    for e in page {
                        *last = e.seq;
                        if tx.send(Update::Event(e)).await.is_err() {
                            return false;
                        }
                    }
                    if !full {
                        return true;
                    }
                }
            };
            if !catch_up(&mut last).await {
                return;
            }
            if let Some(mut live) = live {
                loop {
                    match live.recv().await {
                        Ok(Live::Event(mut e, shown)) if e.seq > last => {
                            last = e.seq;
                            if let Some(message) = shown.filter(|_| reveal) {
                                e.event.message = message;
                            }
                            if tx.send(Update::Event(e)).await.is_err() {
                                return;
                            }
                        }
                        Ok(Live::Event(..)) => {}
                        Ok(Live::Closed) | Err(broadcast::error::RecvError::Closed) => break,
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            if !catch_up(&mut last).await {
                                return;
                            }
                        }
                    }
                }
                // Events stored after the last one seen live (a lag at the end).
                if !catch_up(&mut last).await {
                    return;
                }
            }
            let _ = tx.send(Update::Closed).await;
        });
        Ok(Some(rx))
    }
}

impl Jobs {
    /// A live channel of job `id`, which another replica runs.
    async fn follow_remote(
        self: &Arc<Self>,
        id: u64,
    ) -> Result<broadcast::Receiver<Live>, StoreError> {
        if let Some(remote) = lock(&self.remote).get(&id) {
            return Ok(remote.tx.subscribe());
        }
        let last = self.read(move |s| s.last_seq(id)).await?;
        let mut remote = lock(&self.remote);
        let entry = remote.entry(id).or_insert_with(|| Remote {
            tx: broadcast::channel(LIVE_CAPACITY).0,
            last,
        });
        Ok(entry.tx.subscribe())
    }

    /// Sends the followers here of job `id` (run by another replica) the
    /// events stored since the last sent, and `Closed` when it has ended.
    async fn pull_remote(&self, id: u64, ended: bool) {
        let (tx, last) = {
            let mut remote = lock(&self.remote);
            match remote.get(&id) {
                Some(r) if r.tx.receiver_count() == 0 => {
                    remote.remove(&id);
                    return;
                }
                Some(r) => (r.tx.clone(), r.last),
                None => return,
            }
        };
        let events = self
            .read(move |s| s.events_page(id, last, REPLAY_PAGE * 4))
            .await
            .unwrap_or_default();
        let mut sent = last;
        for e in events {
            sent = e.seq;
            let _ = tx.send(Live::Event(e, None));
        }
        let mut remote = lock(&self.remote);
        if let Some(r) = remote.get_mut(&id) {
            r.last = r.last.max(sent);
        }
        if ended {
            remote.remove(&id);
            let _ = tx.send(Live::Closed);
        }
    }

    /// After notices may have been lost: every remote job followed here
    /// gets what was stored, and its end if it ended.
    async fn resync_remote(&self) {
        let ids: Vec<u64> = lock(&self.remote).keys().copied().collect();
        for id in ids {
            let ended = self
                .job(id)
                .await
                .ok()
                .flatten()
                .is_none_or(|j| j.state != JobState::Running);
            self.pull_remote(id, ended).await;
        }
    }
}

/// Feeds the followers here of jobs other replicas run, from the
/// database's notices, for as long as the jobs live.
async fn feed(jobs: std::sync::Weak<Jobs>, mut notices: broadcast::Receiver<Notice>) {
    loop {
        let notice = match notices.recv().await {
            Ok(notice) => notice,
            Err(broadcast::error::RecvError::Lagged(_)) => Notice::Resync,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(jobs) = jobs.upgrade() else {
            return;
        };
        match notice {
            Notice::Event { job, .. } => jobs.pull_remote(job, false).await,
            Notice::Ended { job } => jobs.pull_remote(job, true).await,
            Notice::Resync => jobs.resync_remote().await,
            _ => {}
        }
    }
}

/// A job a killed process left running, handed back to go on from its
/// last event.
pub struct Resumed {
    pub handle: JobHandle,
    pub kind: JobKind,
    pub stake: Option<Stake>,
    /// The Proxmox task it was waiting on (the `api` backend's UPID).
    pub task: Option<String>,
    /// The replica that held it, when another one did (a takeover).
    pub from: Option<String>,
    /// When that replica's lease on it ran out (ms).
    pub lapsed: Option<i64>,
}

/// The running job's side: appends events and ends the job.
pub struct JobHandle {
    id: u64,
    kind: JobKind,
    jobs: Arc<Jobs>,
    seq: AtomicU64,
    /// Relayed command output lines so far.
    relayed: AtomicU64,
    finished: Mutex<bool>,
    /// The step of the last event: where an interrupted job stopped.
    last_step: Mutex<String>,
    /// What the job has at stake now (as recorded in the database).
    stake: Mutex<Option<Stake>>,
    /// The user who started it (the VM it makes is theirs).
    owner: Option<String>,
}

impl JobHandle {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.jobs.metrics
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
        self.jobs.write(Write::Vmid(self.id, vmid));
    }

    /// Records what the job has at stake from now on, for whoever finds it
    /// interrupted (a restart after a kill, the end of a shutdown's grace).
    pub fn stake(&self, stake: Option<Stake>) {
        self.jobs.write(Write::Stake(self.id, stake.clone()));
        *lock(&self.stake) = stake;
    }

    /// Records the Proxmox task the job waits on from now on (`None`: it
    /// waits on none), so that a restart can follow it to its end.
    pub fn record_task(&self, task: Option<&str>) {
        self.jobs
            .write(Write::Task(self.id, task.map(str::to_string)));
    }

    /// What the job has at stake now.
    pub fn current_stake(&self) -> Option<Stake> {
        lock(&self.stake).clone()
    }

    /// The step the job was last at.
    pub fn last_step(&self) -> String {
        lock(&self.last_step).clone()
    }

    /// Stores and broadcasts one event. A database error is logged, and the
    /// event still reaches the live followers.
    pub fn emit(&self, event: StepEvent) {
        self.emit_shown(event, None);
    }

    /// An event whose live followers read `shown` (a generated password)
    /// where the database, the log and any later replay have `event`'s own
    /// message: shown once, to whoever watches the job run.
    pub fn emit_once(&self, event: StepEvent, shown: String) {
        self.emit_shown(event, Some(shown));
    }

    fn emit_shown(&self, event: StepEvent, shown: Option<String>) {
        tracing::debug!(job = self.id, step = event.step, "{}", event.message);
        // Numbered and queued under one lock: the writer gets a job's
        // events in their order, whatever thread each comes from.
        let mut last_step = lock(&self.last_step);
        event.step.clone_into(&mut last_step);
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let at = now_ms();
        self.jobs.write(Write::Event {
            id: self.id,
            event: JobEvent { seq, at, event },
            shown,
        });
    }

    /// Ends the job; followers get the rest of the events, then `Closed`.
    pub fn finish(&self, state: JobState, outcome: Option<VmOutcome>, failed_step: Option<&str>) {
        let mut finished = lock(&self.finished);
        if *finished {
            return;
        }
        *finished = true;
        // After the job's events in the queue: followers get them all, then
        // `Closed`.
        let _order = lock(&self.last_step);
        self.jobs.write(Write::Finish {
            id: self.id,
            state,
            at: now_ms(),
            outcome,
            failed_step: failed_step.map(str::to_string),
        });
        tracing::info!(job = self.id, state = ?state, "job finished");
        self.jobs
            .metrics
            .job_finished(self.kind.as_str(), state.as_str());
    }
}

impl Drop for JobHandle {
    /// A job whose task ended without finishing it (a panic) must not stay
    /// "running" forever.
    fn drop(&mut self) {
        let done = *lock(&self.finished);
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_made_while_postgres_is_away_are_held_and_written_when_it_returns() {
        let Some(mut pg) = pvedeck_testkit::postgres::Own::start() else {
            return;
        };
        let store = crate::store::open(Location::Postgres(&pg.url())).unwrap();
        let jobs = Jobs::on_store(store.clone(), JobLimits::default(), Replica::default()).unwrap();
        let job = jobs
            .start("default", JobKind::Install, None, "t", None)
            .unwrap();
        job.emit(event(1));
        jobs.flush().await.unwrap();

        pg.stop();
        job.emit(event(2));
        job.emit(event(3));
        job.finish(JobState::Succeeded, None, None);
        let away = jobs.list(10).await.unwrap_err();
        assert!(
            away.is_unavailable(),
            "a request needing it gets a 503: {away}"
        );
        let held = jobs.flush().await.unwrap_err();
        assert!(held.is_unavailable(), "{held}");

        pg.restart();
        jobs.flush().await.unwrap();
        let stored: Vec<u64> = store
            .events(job.id(), 0)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(stored, [1, 2, 3], "nothing lost, in order");
        let record = store.job(job.id()).unwrap().unwrap();
        assert_eq!(record.state, JobState::Succeeded);
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
        let job = jobs
            .start("default", JobKind::Install, None, "t", None)
            .unwrap();
        job.emit(event(1));
        job.emit(event(2));
        let rx = jobs
            .follow(job.id(), 0, true, Follower::Starter)
            .await
            .unwrap()
            .unwrap();
        job.emit(event(3));
        job.finish(JobState::Succeeded, None, None);
        let updates = drain(rx).await;
        assert_eq!(seqs(&updates), [1, 2, 3]);
        assert_eq!(updates.last(), Some(&Update::Closed));
    }

    #[tokio::test]
    async fn a_long_history_is_replayed_whole_a_page_at_a_time() {
        let jobs = Jobs::open(&db("pages")).unwrap();
        let job = jobs
            .start("default", JobKind::Install, None, "t", None)
            .unwrap();
        let total = REPLAY_PAGE as u64 * 2 + 7;
        for n in 1..=total {
            job.emit(event(n as u32));
        }
        job.finish(JobState::Succeeded, None, None);
        jobs.flush().await.unwrap();
        let updates = drain(
            jobs.follow(job.id(), 0, true, Follower::Starter)
                .await
                .unwrap()
                .unwrap(),
        )
        .await;
        assert_eq!(seqs(&updates), (1..=total).collect::<Vec<_>>());
        // From a page boundary on, too.
        let after = REPLAY_PAGE as u64;
        let updates = drain(
            jobs.follow(job.id(), after, true, Follower::Starter)
                .await
                .unwrap()
                .unwrap(),
        )
        .await;
        assert_eq!(seqs(&updates), (after + 1..=total).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn readers_are_limited_per_client_and_owners_and_starters_get_their_stream() {
        let jobs = Jobs::open(&db("limits")).unwrap();
        let job = jobs
            .start("default", JobKind::Install, None, "t", None)
            .unwrap();
        let client = ClientKey::of("10.0.0.9".parse().unwrap());
        let other = ClientKey::of("10.0.0.10".parse().unwrap());
        let limit = JobLimits::default().max_followers_per_client;
        let mut held = Vec::new();
        for _ in 0..limit {
            held.push(
                jobs.follow(job.id(), 0, false, Follower::Reader(Some(client)))
                    .await
                    .unwrap(),
            );
        }
        let refused = jobs
            .follow(job.id(), 0, false, Follower::Reader(Some(client)))
            .await;
        assert!(
            matches!(&refused, Err(FollowError::Busy(m)) if m.contains("MAX_FOLLOWERS_PER_CLIENT")),
            "{refused:?}"
        );
        assert!(
            jobs.follow(job.id(), 0, false, Follower::Reader(Some(other)))
                .await
                .is_ok()
        );
        assert!(
            jobs.follow(job.id(), 0, true, Follower::Starter)
                .await
                .is_ok()
        );
        for _ in 0..OWNER_STREAMS {
            held.push(
                jobs.follow(job.id(), 0, true, Follower::Owner)
                    .await
                    .unwrap(),
            );
        }
        assert!(
            jobs.follow(job.id(), 0, true, Follower::Owner)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn last_event_id_resumes_and_finished_jobs_replay() {
        let jobs = Jobs::open(&db("resume")).unwrap();
        let job = jobs
            .start("default", JobKind::Start, Some(101), "t", None)
            .unwrap();
        for n in 1..=5 {
            job.emit(event(n));
        }
        job.finish(JobState::Failed, Some(VmOutcome::Kept), Some("s"));
        let updates = drain(
            jobs.follow(job.id(), 3, true, Follower::Starter)
                .await
                .unwrap()
                .unwrap(),
        )
        .await;
        assert_eq!(seqs(&updates), [4, 5]);
        assert!(
            jobs.follow(9999, 0, true, Follower::Starter)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn jobs_running_at_a_restart_are_resumed_with_their_stake() {
        let path = db("restart");
        let id = {
            let jobs = Jobs::open(&path).unwrap();
            let job = jobs
                .start("default", JobKind::Install, None, "t", None)
                .unwrap();
            job.emit(event(1));
            job.stake(Some(Stake {
                vmid: 106,
                node: "pve1".into(),
                on_stop: OnStop::Destroy,
            }));
            let id = job.id();
            // What the writer had written when the process "dies": the
            // handle is never finished nor dropped.
            jobs.flush().await.unwrap();
            std::mem::forget(job);
            id
        };
        let jobs = Jobs::open(&path).unwrap();
        assert_eq!(
            jobs.job(id).await.unwrap().unwrap().state,
            JobState::Running
        );
        let mut orphans = jobs.resume_orphans("default").unwrap();
        assert_eq!(orphans.len(), 1);
        let Resumed {
            handle: job, stake, ..
        } = orphans.remove(0);
        assert_eq!(job.id(), id);
        assert_eq!(job.last_step(), "s");
        let stake = stake.unwrap();
        assert_eq!((stake.vmid, stake.on_stop), (106, OnStop::Destroy));
        let rx = jobs
            .follow(id, 0, true, Follower::Starter)
            .await
            .unwrap()
            .unwrap();
        job.emit(event(2));
        job.finish(JobState::Interrupted, Some(VmOutcome::Destroyed), Some("s"));
        let updates = drain(rx).await;
        assert_eq!(
            seqs(&updates),
            [1, 2],
            "the resumed job goes on after its last event"
        );
        assert_eq!(
            jobs.job(id).await.unwrap().unwrap().state,
            JobState::Interrupted
        );
    }

    #[tokio::test]
    async fn a_lagging_follower_catches_up_from_the_database() {
        let jobs = Jobs::open(&db("lag")).unwrap();
        let job = jobs
            .start("default", JobKind::Install, None, "t", None)
            .unwrap();
        let rx = jobs
            .follow(job.id(), 0, true, Follower::Starter)
            .await
            .unwrap()
            .unwrap();
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
