//! Stopping without leaving half-made VMs behind. A SIGTERM refuses new jobs
//! (503) and gives the running ones `SHUTDOWN_GRACE_SECS` to end; past it they
//! are interrupted *with* the failure contract's cleanup
//! (docs/provisioning.md#stopping-and-restarts). A process that was killed
//! instead leaves its jobs `running` in the database: the next one reconciles
//! them at start-up. Both go by what each job recorded as its stake — the
//! VMID, its node, and whether the failure contract destroys or keeps it at
//! the step the job had reached.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use pvedeck_domain::types::{JobKind, JobState, StepEvent, StepStatus, VmOutcome};
use pvedeck_support::sync::lock;
use tokio::sync::watch;

use super::failure::Cleanup;
use super::report::{Step, one_line};
use super::{Engine, EngineError, scope};
use crate::jobs::{JobHandle, OnStop, Stake};

/// What the engine knows about stopping.
pub(super) struct Stopping {
    /// A SIGTERM came: no new job starts.
    refusing: AtomicBool,
    /// The grace is over: running jobs stop where they are.
    over: watch::Sender<bool>,
    /// Job tasks running now, by job id: told when the stop begins.
    running: Arc<Mutex<HashMap<u64, Weak<JobHandle>>>>,
    /// How many there are, to wait on.
    count: watch::Sender<usize>,
}

impl Default for Stopping {
    fn default() -> Self {
        Stopping {
            refusing: AtomicBool::new(false),
            over: watch::channel(false).0,
            running: Arc::default(),
            count: watch::channel(0).0,
        }
    }
}

/// A job task, listed while it runs.
struct Counted {
    id: u64,
    running: Arc<Mutex<HashMap<u64, Weak<JobHandle>>>>,
    count: watch::Sender<usize>,
}

impl Counted {
    fn new(stopping: &Stopping, job: &Arc<JobHandle>) -> Counted {
        let mut running = lock(&stopping.running);
        running.insert(job.id(), Arc::downgrade(job));
        stopping.count.send_replace(running.len());
        Counted {
            id: job.id(),
            running: stopping.running.clone(),
            count: stopping.count.clone(),
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut running = lock(&self.running);
        running.remove(&self.id);
        self.count.send_replace(running.len());
    }
}

impl Stopping {
    fn running(&self) -> Vec<Arc<JobHandle>> {
        let running = lock(&self.running);
        running.values().filter_map(Weak::upgrade).collect()
    }
}

/// Why a job stopped before its end.
#[derive(Debug, Clone)]
enum Interruption {
    /// The process that ran it died (killed, crashed, host rebooted).
    Restart,
    /// Replica `.0` stopped renewing its lease (killed, or cut off from
    /// the database); this one took the job over.
    TakenOver(String),
    /// A SIGTERM's grace ran out.
    Grace(Duration),
}

impl Interruption {
    fn message(self) -> String {
        match self {
            Interruption::Restart => {
                "[-] interrupted: pvedeck stopped while this job ran".to_string()
            }
            Interruption::TakenOver(from) => {
                format!("[-] interrupted: replica {from} stopped while this job ran")
            }
            Interruption::Grace(grace) => format!(
                "[-] interrupted: pvedeck is stopping and the job did not end within \
                 SHUTDOWN_GRACE_SECS ({}s)",
                grace.as_secs()
            ),
        }
    }
}

/// What a job stopped at this point leaves, in the words of the failure
/// contract (docs/provisioning.md#failure-contract).
pub(super) fn stake(vmid: u32, node: &str, cleanup: Cleanup) -> Option<Stake> {
    let on_stop = match cleanup {
        Cleanup::Nothing => return None,
        Cleanup::Destroy => OnStop::Destroy,
        Cleanup::Keep => OnStop::Keep,
    };
    Some(Stake {
        vmid,
        node: node.to_string(),
        on_stop,
    })
}

impl Engine {
    /// 503 once a SIGTERM came: a job started now would be cut short.
    pub(super) fn refuse_when_stopping(&self) -> Result<(), EngineError> {
        if self.stopping.refusing.load(Ordering::SeqCst) {
            return Err(EngineError::Unavailable(
                "pvedeck is stopping: no new jobs are started; try again once it is back"
                    .to_string(),
            ));
        }
        Ok(())
    }

    /// Starts a job's record, unless pvedeck is stopping.
    pub(super) fn start_job(
        &self,
        kind: JobKind,
        vmid: Option<u32>,
        title: &str,
    ) -> Result<JobHandle, EngineError> {
        self.refuse_when_stopping()?;
        let starting = super::tenancy::starting();
        let job = self.jobs.start(
            &self.config.cluster,
            kind,
            vmid,
            title,
            starting.owner.as_deref(),
        )?;
        if let Some(ticket) = starting.ticket {
            self.ledger.running_as(ticket, job.id());
        }
        Ok(job)
    }

    /// Runs a job's work on its own task; if a shutdown's grace ends
    /// first, the work is dropped where it is and the job interrupted with
    /// its cleanup.
    pub(super) fn spawn_job<F, Fut>(self: &Arc<Self>, job: JobHandle, work: F)
    where
        F: FnOnce(Arc<JobHandle>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let job = Arc::new(job);
        let running = Counted::new(&self.stopping, &job);
        let recording = job.clone();
        let recorder: pvedeck_proxmox::owner::Recorder =
            Arc::new(move |upid: Option<&str>| recording.record_task(upid));
        let work = pvedeck_proxmox::owner::within(recorder, work(job.clone()));
        let mut over = self.stopping.over.subscribe();
        let engine = self.clone();
        tokio::spawn(async move {
            let _running = running;
            let ended = tokio::select! {
                () = work => true,
                stop = over.wait_for(|over| *over) => stop.is_err(),
            };
            if !ended {
                let grace = engine.config.shutdown_grace;
                let stake = job.current_stake();
                let at = job.last_step();
                engine
                    .interrupt(&job, stake, Interruption::Grace(grace), at)
                    .await;
            }
        });
    }

    /// Reconciles the jobs a killed process left running, each on its own
    /// task (their followers see the outcome arrive).
    pub fn reconcile(self: &Arc<Self>) -> Result<usize, EngineError> {
        let orphans = self.jobs.resume_orphans(&self.config.cluster)?;
        let n = orphans.len();
        self.take_up(orphans);
        Ok(n)
    }

    /// Goes on with jobs this process did not start (a restart's, or
    /// another replica's whose lease ran out), each on its own task: the
    /// Proxmox task it waited on is followed to its end, or the VM it had
    /// at stake is reconciled by the failure contract.
    fn take_up(self: &Arc<Self>, orphans: Vec<crate::jobs::Resumed>) {
        for orphan in orphans {
            let job = Arc::new(orphan.handle);
            let running = Counted::new(&self.stopping, &job);
            let engine = self.clone();
            let (kind, stake, task) = (orphan.kind, orphan.stake, orphan.task);
            let why = match orphan.from {
                Some(from) => {
                    tracing::warn!(job = job.id(), from, "job taken over from another replica");
                    let step = Step::new(job.as_ref(), Some("pvedeck"), "takeover");
                    let ago = orphan
                        .lapsed
                        .map(|at| (pvedeck_support::clock::now_ms() - at).max(0) as f64 / 1000.0)
                        .map_or_else(String::new, |s| format!(" {s:.1}s ago"));
                    step.processing(format!(
                        "[*] replica {} takes this job over: replica {from} stopped renewing \
                         its lease (killed, or cut off from the database), which ran out{ago}",
                        self.jobs.replica().name
                    ));
                    Interruption::TakenOver(from)
                }
                None => {
                    tracing::warn!(job = job.id(), "job interrupted by a restart");
                    Interruption::Restart
                }
            };
            tokio::spawn(async move {
                let _running = running;
                // Where it stopped, not the restart's own step.
                let at = job.last_step();
                if let Some(upid) = task
                    && engine.reattach(&job, kind, &upid).await
                {
                    return;
                }
                engine.interrupt(&job, stake, why, at).await;
            });
        }
    }

    /// With a shared store: renews this replica's leases, takes over the
    /// jobs whose replica stopped renewing, and acts on what the others
    /// announce (a changed cluster, changed people, a closed session).
    pub fn start_replica(self: &Arc<Self>) {
        let store = self.jobs.store().clone();
        if !store.shared() {
            return;
        }
        let every = self.jobs.replica().lease / 3;
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                if engine.stopping.refusing.load(Ordering::SeqCst) {
                    // Stopping: its jobs end here or are interrupted; it
                    // takes no one else's.
                    let jobs = engine.jobs.clone();
                    let _ = tokio::task::spawn_blocking(move || jobs.renew()).await;
                    continue;
                }
                let jobs = engine.jobs.clone();
                let cluster = engine.config.cluster.clone();
                let swept = tokio::task::spawn_blocking(move || {
                    jobs.renew()?;
                    jobs.take_lapsed(&cluster)
                })
                .await;
                match swept {
                    Ok(Ok(taken)) => engine.take_up(taken),
                    Ok(Err(e)) => tracing::warn!("cannot renew or sweep the job leases: {e}"),
                    Err(e) => tracing::warn!("cannot renew or sweep the job leases: {e}"),
                }
            }
        });
        if let Some(mut notices) = store.notices() {
            let engine = Arc::downgrade(self);
            tokio::spawn(async move {
                loop {
                    let notice = match notices.recv().await {
                        Ok(notice) => notice,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            crate::store::Notice::Resync
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    };
                    let Some(engine) = engine.upgrade() else {
                        return;
                    };
                    engine.heard(notice).await;
                }
            });
        }
    }

    /// What another replica announced, acted on here.
    async fn heard(&self, notice: crate::store::Notice) {
        use crate::store::Notice;
        match notice {
            Notice::Changed { from } if from != self.jobs.replica().name => {
                // The next read of the cluster reads it again.
                self.proxmox.note_change();
            }
            Notice::People | Notice::Resync => {
                let directory = self.directory.clone();
                let _ = tokio::task::spawn_blocking(move || directory.reload()).await;
                if matches!(notice, Notice::Resync) {
                    self.proxmox.note_change();
                }
            }
            Notice::SessionClosed { hash } => {
                self.sessions.forget(&hash);
                self.consoles.close_session(&hash, "your session ended");
            }
            _ => {}
        }
    }

    /// The SIGTERM sequence: refuse new jobs, tell the running ones, wait
    /// up to `SHUTDOWN_GRACE_SECS` for them, interrupt the rest with their
    /// cleanup, then write the database out.
    pub async fn shut_down(&self) {
        self.stopping.refusing.store(true, Ordering::SeqCst);
        let grace = self.config.shutdown_grace;
        let running = self.stopping.running();
        tracing::info!(
            running = running.len(),
            grace_secs = grace.as_secs(),
            "stopping: no new jobs; waiting for the running ones"
        );
        for job in running {
            // Whoever watches a job learns why it may end early.
            job.emit(StepEvent {
                step: job.last_step(),
                status: StepStatus::Processing,
                message: format!(
                    "[*] pvedeck is stopping: this job has {}s (SHUTDOWN_GRACE_SECS) to end",
                    grace.as_secs()
                ),
                vm_id: None,
                ip: None,
                host_key: None,
            });
        }
        let mut counter = self.stopping.count.subscribe();
        let ended = tokio::time::timeout(grace, counter.wait_for(|n| *n == 0))
            .await
            .is_ok();
        if !ended {
            tracing::warn!("grace over: interrupting the running jobs");
            self.stopping.over.send_replace(true);
            // Their cleanup runs commands under their own timeouts.
            let _ = counter.wait_for(|n| *n == 0).await;
        }
        if let Err(e) = self.jobs.flush().await {
            tracing::warn!("cannot flush the job database: {e}");
        }
    }

    /// Ends a job that stopped before its end: the error at the step it
    /// was at (`step`), then what the failure contract does about the VM it had at stake.
    async fn interrupt(
        &self,
        job: &JobHandle,
        stake: Option<Stake>,
        why: Interruption,
        step: String,
    ) {
        job.emit(StepEvent {
            step: step.clone(),
            status: StepStatus::Error,
            message: why.message(),
            vm_id: None,
            ip: None,
            host_key: None,
        });
        let outcome = match stake {
            None => VmOutcome::None,
            Some(stake) => self.settle(job, &stake, &step).await,
        };
        job.finish(JobState::Interrupted, Some(outcome), Some(&step));
    }

    /// Follows the Proxmox task a job was waiting on when pvedeck stopped,
    /// to its end, relaying what it logs from now on. A power action or a
    /// migration is that task: the job ends as it does. Anything else has
    /// steps the restart cannot take up, so it is reconciled after the task
    /// (never while Proxmox still holds the VM's lock). `true` when the job
    /// is done with.
    async fn reattach(&self, job: &JobHandle, kind: JobKind, upid: &str) -> bool {
        let at = job.last_step();
        let step = Step::new(job, Some("pvedeck"), "restart");
        let relay = |line: &str| step.relay(line);
        let Some(ended) = self.proxmox.task_end(upid, &relay).await else {
            return false;
        };
        step.processing(format!(
            "[*] pvedeck restarted while Proxmox task {upid} ran: it was followed to its end"
        ));
        if !matches!(kind, JobKind::Start | JobKind::Reboot | JobKind::Migrate) {
            return false;
        }
        match ended {
            Ok(()) => {
                step.success(&format!("[+] Proxmox task {upid} ended OK"));
                job.finish(JobState::Succeeded, None, None);
            }
            Err(e) => {
                step.error(format!(
                    "[-] Proxmox task failed: {}",
                    one_line(&e.message())
                ));
                job.finish(JobState::Failed, Some(VmOutcome::Kept), Some(&at));
            }
        }
        true
    }

    /// Destroys or keeps the VM a stopped job had at stake, as it is now.
    async fn settle(&self, job: &JobHandle, stake: &Stake, at: &str) -> VmOutcome {
        let vmid = stake.vmid;
        let vms = match self.proxmox.cluster_vms().await {
            Ok(vms) => vms,
            Err(e) => {
                let step = Step::new(job, Some("cleanup"), "checking VM");
                step.error(format!(
                    "[-] cannot tell whether VM {vmid} exists: {}; it may remain",
                    one_line(&e.to_string())
                ));
                return VmOutcome::Kept;
            }
        };
        let Some(vm) = vms.iter().find(|vm| vm.vmid == vmid) else {
            let step = Step::new(job, Some("cleanup"), "checking VM");
            step.success(&format!(
                "[+] VM {vmid} was not created: nothing to clean up"
            ));
            return VmOutcome::None;
        };
        let ours = vm.has_tag(scope::TAG) || vm.has_tag(scope::TEMPLATE_TAG);
        match stake.on_stop {
            OnStop::Destroy if ours => self.destroy_half_made(job, vmid, &vm.node).await,
            OnStop::Destroy => {
                let step = Step::new(job, Some("cleanup"), "keeping VM");
                step.processing(format!(
                    "[*] VM {vmid} is not tagged '{}': pvedeck does not destroy it",
                    scope::TAG
                ));
                step.success(&format!("[+] VM {vmid} kept"));
                VmOutcome::Kept
            }
            OnStop::Keep => {
                let step = Step::new(job, Some("cleanup"), "keeping VM");
                step.processing(format!(
                    "[*] VM {vmid} is kept as it is: the job stopped at '{at}'"
                ));
                // Its end, as the failure contract's keeping step has one.
                step.success(&format!("[+] VM {vmid} kept"));
                VmOutcome::Kept
            }
        }
    }
}
