//! Proxmox tasks: a long operation answers a UPID at once and runs on the
//! node; its end and its output are read from `tasks/<upid>/status` and
//! `tasks/<upid>/log`. Following one relays its new log lines as they come
//! and ends with the task: `OK` and `WARNINGS: n` are success, anything
//! else is the failure, in Proxmox's words.

use std::time::Duration;

use async_trait::async_trait;

pub use crate::upid::Upid;
use crate::{LineSink, PveError};

/// `tasks/<upid>/status`, the parts that matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStatus {
    pub running: bool,
    /// `OK`, `WARNINGS: n` or the error; only once stopped.
    pub exitstatus: Option<String>,
}

/// Where a task's status and log are read (the API client; a script in
/// tests).
#[async_trait]
pub trait TaskSource: Send + Sync {
    async fn status(&self, upid: &Upid) -> Result<TaskStatus, PveError>;
    /// Lines after the first `start`, as `(n, text)` with `n` from 1.
    async fn log(&self, upid: &Upid, start: u64) -> Result<Vec<(u64, String)>, PveError>;
}

/// How a task ended, when it ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskDone {
    pub warnings: u32,
}

/// What Proxmox writes as the log of a task that has not logged yet.
const NO_CONTENT: &str = "no content";

/// The task's own last line (`qm` does not print it either).
fn is_end_line(line: &str) -> bool {
    line == "TASK OK" || line.starts_with("TASK ERROR: ") || line.starts_with("TASK WARNINGS: ")
}

/// An exit status read as success or the error it is.
pub fn outcome(upid: &Upid, exitstatus: &str) -> Result<TaskDone, PveError> {
    let exitstatus = exitstatus.trim();
    if exitstatus == "OK" {
        return Ok(TaskDone { warnings: 0 });
    }
    if let Some(n) = exitstatus
        .strip_prefix("WARNINGS: ")
        .and_then(|n| n.parse().ok())
    {
        return Ok(TaskDone { warnings: n });
    }
    Err(PveError::Command {
        command: format!("task {upid}"),
        message: exitstatus.to_string(),
        exit: None,
    })
}

/// Follows a task to its end from log line `start` on, relaying each new
/// line; `Timeout` when it still runs after `limit`.
pub async fn follow(
    source: &dyn TaskSource,
    upid: &Upid,
    mut start: u64,
    out: LineSink<'_>,
    poll: Duration,
    limit: Duration,
) -> Result<TaskDone, PveError> {
    let began = tokio::time::Instant::now();
    loop {
        // The status first: a task seen stopped has written its whole log.
        let status = source.status(upid).await?;
        loop {
            let lines = source.log(upid, start).await?;
            let before = start;
            let last = lines.len().saturating_sub(1);
            for (i, (n, line)) in lines.into_iter().enumerate() {
                if n <= start || (n == 1 && line == NO_CONTENT) {
                    continue;
                }
                // The last line of a running task may be unfinished
                // (`print "calculating checksum...";`, wget's dots): it is
                // relayed once a line follows it or the task has ended.
                if i == last && status.running {
                    break;
                }
                start = n;
                if !is_end_line(&line) {
                    out(&line);
                }
            }
            if start == before {
                break;
            }
        }
        if !status.running {
            return outcome(
                upid,
                status.exitstatus.as_deref().unwrap_or("unexpected status"),
            );
        }
        if began.elapsed() >= limit {
            // What it was doing when given up on, unfinished or not.
            for (n, line) in source.log(upid, start).await.unwrap_or_default() {
                if n > start && !(n == 1 && line == NO_CONTENT) && !is_end_line(&line) {
                    out(&line);
                }
            }
            return Err(PveError::Timeout {
                command: format!("task {upid}"),
                secs: limit.as_secs(),
            });
        }
        tokio::time::sleep(poll).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    const UPID: &str = "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:pvedeck@pve!deck:";

    #[test]
    fn a_upid_names_its_node_kind_and_id() {
        let upid: Upid = UPID.parse().unwrap();
        assert_eq!(
            (upid.node.as_str(), upid.kind.as_str(), upid.id.as_str()),
            ("pve1", "qmcreate", "101")
        );
        assert_eq!(upid.to_string(), UPID);
    }

    #[test]
    fn ok_and_warnings_succeed_anything_else_is_the_error() {
        let upid = UPID.parse::<Upid>().unwrap();
        assert_eq!(outcome(&upid, "OK").unwrap().warnings, 0);
        assert_eq!(outcome(&upid, "WARNINGS: 2").unwrap().warnings, 2);
        let err = outcome(&upid, "unable to create VM 101 - already exists").unwrap_err();
        assert_eq!(err.message(), "unable to create VM 101 - already exists");
    }

    /// A task that logs `lines[..shown]` and has ended after `polls` looks.
    struct Script {
        lines: Vec<&'static str>,
        end: &'static str,
        polls_to_end: usize,
        polls: Mutex<usize>,
    }

    #[async_trait]
    impl TaskSource for Script {
        async fn status(&self, _: &Upid) -> Result<TaskStatus, PveError> {
            let mut polls = self.polls.lock().unwrap();
            *polls += 1;
            let done = *polls > self.polls_to_end;
            Ok(TaskStatus {
                running: !done,
                exitstatus: done.then(|| self.end.to_string()),
            })
        }

        async fn log(&self, _: &Upid, start: u64) -> Result<Vec<(u64, String)>, PveError> {
            let polls = *self.polls.lock().unwrap();
            // One more line visible at each look; the end line once ended.
            let mut visible: Vec<&str> = self.lines.iter().take(polls).copied().collect();
            if polls > self.polls_to_end {
                visible = self.lines.clone();
                visible.push(if self.end == "OK" {
                    "TASK OK"
                } else {
                    "TASK ERROR: boom"
                });
            }
            if visible.is_empty() {
                return Ok(vec![(1, NO_CONTENT.to_string())]);
            }
            // Pages of two lines, as a small `limit` would give.
            Ok(visible
                .iter()
                .enumerate()
                .map(|(i, l)| (i as u64 + 1, l.to_string()))
                .skip(start as usize)
                .take(2)
                .collect())
        }
    }

    async fn run(script: &Script, limit: Duration) -> (Result<TaskDone, PveError>, Vec<String>) {
        let upid = UPID.parse::<Upid>().unwrap();
        let seen = Mutex::new(Vec::new());
        let out = |line: &str| seen.lock().unwrap().push(line.to_string());
        let result = follow(script, &upid, 0, &out, Duration::from_millis(1), limit).await;
        (result, pvedeck_support::sync::into_inner(seen))
    }

    #[tokio::test]
    async fn every_line_is_relayed_once_in_order_without_the_end_line() {
        let script = Script {
            lines: vec!["transferred 1 of 4", "transferred 2 of 4", "a", "b", "c"],
            end: "OK",
            polls_to_end: 3,
            polls: Mutex::new(0),
        };
        let (result, seen) = run(&script, Duration::from_secs(10)).await;
        assert_eq!(result.unwrap().warnings, 0);
        assert_eq!(
            seen,
            ["transferred 1 of 4", "transferred 2 of 4", "a", "b", "c"]
        );
    }

    /// A log whose last line grows while the task runs.
    struct Growing {
        polls: Mutex<usize>,
    }

    #[async_trait]
    impl TaskSource for Growing {
        async fn status(&self, _: &Upid) -> Result<TaskStatus, PveError> {
            let mut polls = self.polls.lock().unwrap();
            *polls += 1;
            Ok(TaskStatus {
                running: *polls < 3,
                exitstatus: (*polls >= 3).then(|| "OK".to_string()),
            })
        }

        async fn log(&self, _: &Upid, start: u64) -> Result<Vec<(u64, String)>, PveError> {
            let polls = *self.polls.lock().unwrap();
            let lines: Vec<&str> = match polls {
                1 => vec!["downloading x", "calculating checksum..."],
                2 => vec![
                    "downloading x",
                    "calculating checksum...OK, checksum verified",
                    "done",
                ],
                _ => vec![
                    "downloading x",
                    "calculating checksum...OK, checksum verified",
                    "done",
                    "TASK OK",
                ],
            };
            Ok(lines
                .iter()
                .enumerate()
                .map(|(i, l)| (i as u64 + 1, l.to_string()))
                .skip(start as usize)
                .collect())
        }
    }

    #[tokio::test]
    async fn an_unfinished_last_line_is_relayed_whole_once_it_is_finished() {
        let upid = UPID.parse::<Upid>().unwrap();
        let seen = Mutex::new(Vec::new());
        let out = |line: &str| seen.lock().unwrap().push(line.to_string());
        let source = Growing {
            polls: Mutex::new(0),
        };
        let result = follow(
            &source,
            &upid,
            0,
            &out,
            Duration::from_millis(1),
            Duration::from_secs(10),
        )
        .await;
        assert!(result.is_ok());
        assert_eq!(
            pvedeck_support::sync::into_inner(seen),
            [
                "downloading x",
                "calculating checksum...OK, checksum verified",
                "done"
            ]
        );
    }

    #[tokio::test]
    async fn a_task_that_logged_nothing_yet_relays_no_placeholder() {
        let script = Script {
            lines: vec![],
            end: "boom",
            polls_to_end: 2,
            polls: Mutex::new(0),
        };
        let (result, seen) = run(&script, Duration::from_secs(10)).await;
        assert_eq!(result.unwrap_err().message(), "boom");
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[tokio::test]
    async fn a_task_that_never_ends_times_out_naming_it() {
        let script = Script {
            lines: vec!["still going"],
            end: "OK",
            polls_to_end: usize::MAX,
            polls: Mutex::new(0),
        };
        let (result, seen) = run(&script, Duration::from_millis(20)).await;
        let err = result.unwrap_err();
        assert!(matches!(err, PveError::Timeout { .. }), "{err:?}");
        assert!(err.to_string().contains(UPID), "{err}");
        assert_eq!(seen, ["still going"]);
    }
}
