//! Proxmox tasks as the REST face runs them: a long operation answers its
//! UPID at once and runs in the background of the `pvedeck-sim api`
//! process; its output lines go to the task log, its end to a status file.
//! Both live under `DATA_DIR/sim/tasks/`, so a pvedeck server that restarts
//! while a task runs (the sim api process keeps running) still reads it.

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use pvedeck_proxmox::PveError;
use pvedeck_support::clock::now_ms;
use pvedeck_support::files::write_atomically;

/// The API token every task of this face runs as.
pub const TASK_USER: &str = "pvedeck@pve!deck";

pub use pvedeck_proxmox::upid::Upid;

/// A UPID as Proxmox reads it ([`Upid`]'s `FromStr`) that is also safe as
/// a file name here: type, id and user of letters, digits and `-_.@!`, so
/// that the UPID stays one name inside the tasks directory.
pub fn parse(text: &str) -> Option<Upid> {
    let upid: Upid = text.parse().ok()?;
    let plain = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@!".contains(&b))
    };
    (plain(&upid.kind) && plain(&upid.id) && plain(&upid.user)).then_some(upid)
}

/// How a task ended: `OK`, or its error text (as `exitstatus` shows it).
pub fn exit_status(result: &Result<(), PveError>) -> String {
    match result {
        Ok(()) => "OK".to_string(),
        // The status holds one line, as Proxmox's does.
        Err(e) => e.message().replace('\n', " "),
    }
}

/// The tasks directory of a data directory's simulated cluster.
#[derive(Debug, Clone)]
pub struct Tasks {
    dir: PathBuf,
    /// The running tasks' handles, by UPID: `DELETE …/tasks/{upid}` stops one.
    running: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<String, tokio::task::AbortHandle>>,
    >,
}

/// A running task's log: lines appended as the operation prints them.
pub struct TaskLog {
    file: Option<PathBuf>,
}

impl TaskLog {
    /// A log for a synchronous call, whose lines nobody reads.
    pub fn discard() -> TaskLog {
        TaskLog { file: None }
    }

    fn at(file: PathBuf) -> TaskLog {
        TaskLog { file: Some(file) }
    }

    pub fn line(&self, line: &str) {
        self.write(&format!("{line}\n"));
    }

    /// Text without its newline yet, as `print "calculating checksum...";`
    /// leaves the log's last line unfinished until the next print ends it
    /// (pve-common `PVE/Tools.pm`, `download_file_from_url`).
    pub fn part(&self, text: &str) {
        self.write(text);
    }

    fn write(&self, text: &str) {
        let Some(file) = &self.file else { return };
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            tracing::warn!("sim api: cannot write {}: {e}", file.display());
        }
    }
}

/// What `GET …/tasks/{upid}/status` tells.
pub enum TaskState {
    Running,
    Stopped(String),
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Tasks {
    pub fn new(dir: PathBuf) -> Tasks {
        Tasks {
            dir,
            running: Default::default(),
        }
    }

    fn log_file(&self, upid: &Upid) -> PathBuf {
        self.dir.join(format!("{upid}.log"))
    }

    fn status_file(&self, upid: &Upid) -> PathBuf {
        self.dir.join(format!("{upid}.status"))
    }

    /// A fresh UPID: pid from this process and a counter (unique while it
    /// runs), pstart from the clock, so a restarted process does not reuse one.
    pub fn upid(&self, node: &str, kind: &str, id: &str) -> Upid {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        Upid {
            node: node.to_string(),
            pid: std::process::id().wrapping_mul(64).wrapping_add(n),
            pstart: u64::try_from((now / 10) & 0xFFFF_FFFF).unwrap_or(0),
            starttime: u32::try_from(now / 1000).unwrap_or(0),
            kind: kind.to_string(),
            id: id.to_string(),
            user: TASK_USER.to_string(),
        }
    }

    /// Starts `work` as task `upid` (made by [`Tasks::upid`]) and answers its
    /// UPID at once. `work` gets the log to print to; its result becomes `TASK
    /// OK` or `TASK ERROR: <message>`.
    pub fn spawn<F, Fut>(&self, upid: Upid, work: F) -> Upid
    where
        F: FnOnce(TaskLog) -> Fut,
        Fut: Future<Output = Result<(), PveError>> + Send + 'static,
    {
        let _ = std::fs::create_dir_all(&self.dir);
        let log_path = self.log_file(&upid);
        // The log exists from the start: a task whose log is there and
        // whose status is not is running.
        if let Err(e) = std::fs::write(&log_path, "") {
            tracing::warn!("sim api: cannot create {}: {e}", log_path.display());
        }
        let status = self.status_file(&upid);
        let future = work(TaskLog::at(log_path.clone()));
        let handle = tokio::spawn(async move {
            let result = future.await;
            let exit = exit_status(&result);
            let last = match &result {
                Ok(()) => "TASK OK".to_string(),
                Err(_) => format!("TASK ERROR: {exit}"),
            };
            TaskLog::at(log_path).line(&last);
            // Written after the last log line: a reader that sees the task
            // stopped sees its whole log.
            if let Err(e) = write_atomically(&status, exit.as_bytes()) {
                tracing::warn!("sim api: cannot write {}: {e}", status.display());
            }
        });
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.retain(|_, h| !h.is_finished());
        running.insert(upid.to_string(), handle.abort_handle());
        upid
    }

    /// Stops a running task as `DELETE /nodes/{node}/tasks/{upid}` does: its
    /// work is dropped (what it holds, a partial download, goes with it)
    /// and it ends as Proxmox ends a task it signalled. `false` when no
    /// such task runs.
    pub fn stop(&self, upid: &Upid) -> bool {
        let handle = {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            running.remove(&upid.to_string())
        };
        let Some(handle) = handle.filter(|h| !h.is_finished()) else {
            return false;
        };
        handle.abort();
        TaskLog::at(self.log_file(upid)).line("TASK ERROR: interrupted by signal");
        if let Err(e) = write_atomically(&self.status_file(upid), b"interrupted by signal") {
            tracing::warn!(
                "sim api: cannot write {}: {e}",
                self.status_file(upid).display()
            );
        }
        true
    }

    pub fn state(&self, upid: &Upid) -> Option<TaskState> {
        if let Ok(exit) = std::fs::read_to_string(self.status_file(upid)) {
            return Some(TaskState::Stopped(exit));
        }
        self.log_file(upid).exists().then_some(TaskState::Running)
    }

    pub fn log(&self, upid: &Upid) -> Option<Vec<String>> {
        let text = std::fs::read_to_string(self.log_file(upid)).ok()?;
        Some(text.lines().map(str::to_string).collect())
    }

    /// Tasks a previous sim api process left running died with it: Proxmox
    /// reports such a task stopped with `unexpected status`.
    pub fn reap_orphans(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(upid) = name.strip_suffix(".log").and_then(parse) else {
                continue;
            };
            if self
                .state(&upid)
                .is_some_and(|s| matches!(s, TaskState::Running))
            {
                TaskLog::at(self.log_file(&upid)).line("TASK ERROR: unexpected status");
                let _ = write_atomically(&self.status_file(&upid), b"unexpected status");
            }
        }
    }
}

/// One page of a task log as `GET …/log?start=&limit=` answers it:
/// `start` lines skipped, at most `limit` (0 = all), numbered from 1; an
/// empty log reads as one line `no content` (pve-common `dump_logfile`).
pub fn page(lines: &[String], start: usize, limit: usize) -> (Vec<(usize, String)>, usize) {
    if lines.is_empty() {
        return (vec![(1, "no content".to_string())], 1);
    }
    let take = if limit == 0 { usize::MAX } else { limit };
    let page = lines
        .iter()
        .enumerate()
        .skip(start)
        .take(take)
        .map(|(i, l)| (i + 1, l.clone()))
        .collect();
    (page, lines.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upids_have_proxmoxs_shape_and_parse_back() {
        let upid = Upid {
            node: "pve1".into(),
            pid: 0x000A_1B2C,
            pstart: 0x0012_C3D4,
            starttime: 0x66A1_B2C3,
            kind: "qmcreate".into(),
            id: "101".into(),
            user: TASK_USER.into(),
        };
        let text = upid.to_string();
        assert_eq!(
            text,
            "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:pvedeck@pve!deck:"
        );
        assert_eq!(parse(&text), Some(upid));
        let fresh = Tasks::new(PathBuf::from("/nonexistent")).upid("pve2", "download", "");
        assert_eq!(parse(&fresh.to_string()), Some(fresh));
    }

    #[test]
    fn only_well_formed_upids_parse() {
        for bad in [
            "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam",
            "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:",
            "UPID:../x:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qm/create:101:root@pam:",
            "UPID:pve1:zz0A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            "upid",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn logs_page_like_proxmox() {
        let lines: Vec<String> = (1..=5).map(|i| format!("l{i}")).collect();
        let (page1, total) = page(&lines, 0, 2);
        assert_eq!(page1, [(1, "l1".to_string()), (2, "l2".to_string())]);
        assert_eq!(total, 5);
        let (rest, _) = page(&lines, 2, 0);
        assert_eq!(rest.first(), Some(&(3, "l3".to_string())));
        assert_eq!(rest.len(), 3);
        assert_eq!(page(&[], 0, 50), (vec![(1, "no content".to_string())], 1));
        assert!(page(&lines, 9, 2).0.is_empty());
    }
}
