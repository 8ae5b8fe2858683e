//! Which job a Proxmox call runs for. A backend whose long operations are
//! Proxmox tasks (the `api` backend) tells the job the task's UPID as soon
//! as it has it, before waiting on it: a restart then finds the task in the
//! job database and follows it to its end instead of giving the job up.
//!
//! A task-local rather than a parameter of every `Pve` method: only one
//! backend has tasks, and the job's task is where its calls run.

use std::future::Future;
use std::sync::Arc;

/// Records the UPID a job now waits on (`None`: it waits on none).
pub type Recorder = Arc<dyn Fn(Option<&str>) + Send + Sync>;

tokio::task_local! {
    static RECORDER: Recorder;
}

/// Runs `work` with its Proxmox tasks recorded by `recorder`.
pub async fn within<F: Future>(recorder: Recorder, work: F) -> F::Output {
    RECORDER.scope(recorder, work).await
}

/// A task the current job now waits on.
pub fn started(upid: &str) {
    let _ = RECORDER.try_with(|record| record(Some(upid)));
}

/// The task ended: the job waits on none.
pub fn ended() {
    let _ = RECORDER.try_with(|record| record(None));
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test]
    async fn tasks_are_recorded_inside_a_job_and_ignored_outside() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let recorder: Recorder =
            Arc::new(move |upid| log.lock().unwrap().push(upid.map(str::to_string)));
        started("outside");
        within(recorder, async {
            started("UPID:pve1:1:2:3:qmstart:101:u:");
            ended();
        })
        .await;
        assert_eq!(
            *seen.lock().unwrap(),
            [Some("UPID:pve1:1:2:3:qmstart:101:u:".to_string()), None]
        );
    }
}
