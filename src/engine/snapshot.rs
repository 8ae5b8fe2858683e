//! The cluster as pvedeck last read it: VMs, nodes and the main node's
//! storages, kept in memory. Lists, pages and preconditions read it instead
//! of running `pvesh` each, so the number of Proxmox calls does not grow
//! with the number of readers.
//!
//! - One refresh at a time: readers who need one while it runs share it.
//! - Every `SNAPSHOT_INTERVAL_MS` while anyone reads; after
//!   `SNAPSHOT_IDLE_SECS` without a reader, not at all (an idle pvedeck runs
//!   no `pvesh`).
//! - Every change pvedeck makes (any changing call through the timed port)
//!   puts the snapshot out of date: the next reader waits for a fresh one,
//!   so a client reads its own writes, and a change nobody reads costs no
//!   `pvesh`.
//! - A failed refresh keeps the last good snapshot: readers get it, with
//!   its age and the failure; it is `stale` once older than three intervals.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use pvedeck_domain::types::VmList;
use pvedeck_proxmox::{NodeResource, PveError, StorageStatus, Timed, VmResource};
use pvedeck_support::sync::lock;
use tokio::sync::Notify;

use crate::metrics::Metrics;

/// What one refresh read.
#[derive(Debug)]
pub struct Snapshot {
    pub vms: Vec<VmResource>,
    pub nodes: Vec<NodeResource>,
    /// `pvesm status` on the main node.
    pub storages: Vec<StorageStatus>,
    pub taken: Instant,
    /// The port's change count when the refresh began.
    changes: u64,
    /// `/api/vm/list` of this snapshot, built once per filter (all, running,
    /// stopped) by the first reader that asks.
    pub lists: [OnceLock<Arc<Listed>>; 3],
}

#[cfg(test)]
impl Snapshot {
    /// A snapshot of these VMs, taken now.
    pub fn of(vms: Vec<VmResource>) -> Snapshot {
        Snapshot {
            vms,
            nodes: Vec::new(),
            storages: Vec::new(),
            taken: Instant::now(),
            changes: 0,
            lists: Default::default(),
        }
    }
}

/// A list as every reader of one snapshot gets it: built and written as
/// JSON once.
#[derive(Debug)]
pub struct Listed {
    pub list: VmList,
    /// Shared by every response: a list of several clusters is megabytes.
    pub json: bytes::Bytes,
}

impl Listed {
    pub fn new(list: VmList) -> Listed {
        // Serializing plain data cannot fail; an empty body would be seen.
        let json = serde_json::to_vec(&list).unwrap_or_default().into();
        Listed { list, json }
    }
}

/// A snapshot as a reader gets it.
#[derive(Debug, Clone)]
pub struct View {
    pub snapshot: Arc<Snapshot>,
    pub age: Duration,
    /// Older than three intervals: refreshes have been failing.
    pub stale: bool,
    /// Why the last refresh failed, when it did.
    pub failure: Option<String>,
}

#[derive(Default)]
struct State {
    /// The last good snapshot.
    current: Option<Arc<Snapshot>>,
    /// How the last refresh ended.
    outcome: Option<Result<Arc<Snapshot>, PveError>>,
    failed_at: Option<Instant>,
    last_read: Option<Instant>,
}

pub struct Cluster {
    proxmox: Arc<Timed>,
    /// Counts the refreshes (`/metrics`).
    metrics: Arc<Metrics>,
    /// The nodes' history, whose hour the refresher keeps current.
    history: Arc<super::rrd::History>,
    main_node: String,
    interval: Duration,
    idle: Duration,
    state: Mutex<State>,
    /// One refresh at a time.
    flight: tokio::sync::Mutex<()>,
    /// Wakes the refresher when a reader comes back after idling, or when
    /// the cluster is dropped.
    wake: Arc<Notify>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

/// Whether the refresher should read the cluster: only while someone has
/// read within `idle`.
fn active(last_read: Option<Instant>, idle: Duration, now: Instant) -> bool {
    last_read.is_some_and(|at| now.saturating_duration_since(at) <= idle)
}

impl Cluster {
    /// A cluster view with its refresher running (on the current runtime).
    pub fn start(
        proxmox: Arc<Timed>,
        metrics: Arc<Metrics>,
        history: Arc<super::rrd::History>,
        main_node: String,
        interval: Duration,
        idle: Duration,
    ) -> Arc<Cluster> {
        let cluster = Arc::new(Cluster {
            proxmox,
            metrics,
            history,
            main_node,
            interval,
            idle,
            state: Mutex::new(State::default()),
            flight: tokio::sync::Mutex::new(()),
            wake: Arc::new(Notify::new()),
        });
        tokio::spawn(refresher(Arc::downgrade(&cluster), cluster.wake.clone()));
        cluster
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn stale_after(&self) -> Duration {
        self.interval * 3
    }

    /// The snapshot for a reader. A reader waits for a refresh when there
    /// is none yet, when pvedeck changed the cluster since, or when it is
    /// stale; not while refreshes keep failing (then it gets the last good
    /// one, with the failure). Readers who need one at the same time share
    /// it.
    pub async fn read(&self) -> Result<View, PveError> {
        self.read_if(true).await
    }

    /// A snapshot that is not stale, even if pvedeck changed VMs since: for
    /// what those changes do not touch (the nodes, the storages), so an
    /// install costs no refresh of its own.
    pub async fn recent(&self) -> Result<View, PveError> {
        self.read_if(false).await
    }

    async fn read_if(&self, with_changes: bool) -> Result<View, PveError> {
        // A client's read keeps the refresher going; the engine's own reads
        // during an install (`recent`) do not.
        if with_changes {
            let mut state = self.state();
            let now = Instant::now();
            if !active(state.last_read, self.idle, now) {
                self.wake.notify_one();
            }
            state.last_read = Some(now);
        }
        if let Some(ready) = self.ready(with_changes) {
            return ready.map(|s| self.view(s));
        }
        let _one = self.flight.lock().await;
        // The refresh this reader waited for may be the one it needs.
        if let Some(ready) = self.ready(with_changes) {
            return ready.map(|s| self.view(s));
        }
        let read = self.read_cluster().await;
        // Bound first: the state's lock must not be held into `view`.
        let last_good = self.state().current.clone();
        match (read, last_good) {
            (Ok(s), _) => Ok(self.view(s)),
            (Err(_), Some(old)) => Ok(self.view(old)),
            (Err(e), None) => Err(e),
        }
    }

    /// What a reader can have without a refresh: the current snapshot when
    /// it is up to date, or whatever the last refresh gave when that one
    /// failed within the interval (no retry per reader).
    fn ready(&self, with_changes: bool) -> Option<Result<Arc<Snapshot>, PveError>> {
        let state = self.state();
        let failing = state
            .failed_at
            .is_some_and(|at| at.elapsed() < self.interval);
        match (&state.current, failing) {
            (Some(s), true) => Some(Ok(s.clone())),
            (None, true) => state.outcome.clone(),
            (Some(s), false) => {
                let up_to_date = (!with_changes || s.changes == self.proxmox.changes())
                    && s.taken.elapsed() <= self.stale_after();
                up_to_date.then(|| Ok(s.clone()))
            }
            (None, false) => None,
        }
    }

    /// How old the last good snapshot is, without reading or waking.
    pub fn age(&self) -> Option<Duration> {
        self.state().current.as_ref().map(|s| s.taken.elapsed())
    }

    /// Without reading or waking: the last good snapshot's age (none
    /// yet: `None`), whether it is stale, and why the last read failed.
    pub fn health(&self) -> (Option<Duration>, bool, Option<String>) {
        let age = self.age();
        let failure = self.failure();
        let stale = age.is_none_or(|age| age > self.stale_after()) || failure.is_some();
        (age, stale, failure)
    }

    /// Why the last read failed, if it did.
    fn failure(&self) -> Option<String> {
        match &self.state().outcome {
            Some(Err(e)) => Some(e.to_string()),
            _ => None,
        }
    }

    fn view(&self, snapshot: Arc<Snapshot>) -> View {
        let failure = self.failure();
        let age = snapshot.taken.elapsed();
        View {
            stale: age > self.stale_after(),
            age,
            snapshot,
            failure,
        }
    }

    /// The refresher's turn: a refresh unless one ran within the interval.
    async fn refresh_when_due(&self) {
        let one = self.flight.lock().await;
        let due = self
            .state()
            .current
            .as_ref()
            .is_none_or(|s| s.taken.elapsed() >= self.interval);
        if due {
            // A failure is kept for readers; the next round tries again.
            let _ = self.read_cluster().await;
        }
        drop(one);
        // The overview's sparklines, at their own (slower) pace: `History`
        // reads a node's hour again only once a minute has passed.
        let online = self.online_nodes();
        self.history.hours(&self.proxmox, &online).await;
    }

    /// The nodes the last snapshot saw online.
    pub fn online_nodes(&self) -> Vec<String> {
        self.state()
            .current
            .as_ref()
            .map(|s| {
                s.nodes
                    .iter()
                    .filter(|n| n.status == "online")
                    .map(|n| n.node.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One refresh; the caller holds `flight`.
    async fn read_cluster(&self) -> Result<Arc<Snapshot>, PveError> {
        let changes = self.proxmox.changes();
        let read = tokio::try_join!(
            self.proxmox.cluster_vms(),
            self.proxmox.cluster_nodes(),
            self.proxmox.storage_status(&self.main_node),
        );
        let outcome = read.map(|(vms, nodes, storages)| {
            Arc::new(Snapshot {
                vms,
                nodes,
                storages,
                taken: Instant::now(),
                changes,
                lists: Default::default(),
            })
        });
        self.metrics.refreshed(outcome.is_ok());
        let mut state = self.state();
        match &outcome {
            Ok(snapshot) => {
                state.current = Some(snapshot.clone());
                state.failed_at = None;
            }
            Err(e) => {
                tracing::warn!("cluster snapshot: refresh failed: {e}");
                state.failed_at = Some(Instant::now());
            }
        }
        state.outcome = Some(outcome.clone());
        outcome
    }
}

/// Refreshes every interval while someone reads; sleeps while nobody does;
/// ends with the cluster.
async fn refresher(cluster: Weak<Cluster>, wake: Arc<Notify>) {
    loop {
        let pause = {
            let Some(cluster) = cluster.upgrade() else {
                return;
            };
            if active(cluster.state().last_read, cluster.idle, Instant::now()) {
                cluster.refresh_when_due().await;
                Some(cluster.interval)
            } else {
                None
            }
        };
        match pause {
            Some(interval) => tokio::time::sleep(interval).await,
            // A reader (or the cluster's end) wakes it; a wake that came
            // before this wait is kept by the `Notify`.
            None => wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refresher_runs_only_while_someone_reads() {
        let now = Instant::now();
        let idle = Duration::from_secs(60);
        assert!(!active(None, idle, now), "nobody read yet");
        assert!(active(Some(now), idle, now));
        assert!(active(Some(now), idle, now + Duration::from_secs(60)));
        assert!(
            !active(Some(now), idle, now + Duration::from_secs(61)),
            "idle after a minute"
        );
    }
}
