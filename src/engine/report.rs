//! Writing a job's timeline: one `Step` per pipeline step, whose messages
//! follow go-pve-qemu's conventions (`[*]` progress, `[+]` done, `[-]`
//! failure, the step's elapsed time in parentheses).

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pvedeck_domain::text;
use pvedeck_domain::types::{StepEvent, StepStatus};
use pvedeck_support::sync::lock;

use crate::jobs::{Admit, JobHandle};

/// Where a step's events go: to the job, or to a turn of stages that run at
/// once but report in the seed's order.
#[derive(Clone, Copy)]
pub enum Out<'a> {
    Job(&'a JobHandle),
    Turn(&'a Turns<'a>, usize),
}

impl<'a> From<&'a JobHandle> for Out<'a> {
    fn from(job: &'a JobHandle) -> Out<'a> {
        Out::Job(job)
    }
}

impl Out<'_> {
    fn emit(&self, event: StepEvent) {
        match self {
            Out::Job(job) => job.emit(event),
            Out::Turn(turns, turn) => turns.emit(*turn, event),
        }
    }

    fn job(&self) -> &JobHandle {
        match self {
            Out::Job(job) => job,
            Out::Turn(turns, _) => turns.job,
        }
    }
}

/// A final event's VM: id, address, host key fingerprint.
pub type Keyed<'a> = (u32, &'a str, Option<&'a str>);

/// Stages that work at the same time and report one after the other: a
/// stage's events reach the job while it has the turn, and are held until
/// then otherwise; each stage keeps its own elapsed times.
pub struct Turns<'a> {
    job: &'a JobHandle,
    state: Mutex<TurnState>,
}

struct TurnState {
    /// The stage whose events go out now.
    current: usize,
    held: Vec<Vec<StepEvent>>,
    finished: Vec<bool>,
}

impl<'a> Turns<'a> {
    pub fn new(job: &'a JobHandle, stages: usize) -> Turns<'a> {
        Turns {
            job,
            state: Mutex::new(TurnState {
                current: 0,
                held: vec![Vec::new(); stages],
                finished: vec![false; stages],
            }),
        }
    }

    fn emit(&self, turn: usize, event: StepEvent) {
        let mut state = lock(&self.state);
        if turn <= state.current {
            self.job.emit(event);
        } else if let Some(held) = state.held.get_mut(turn) {
            held.push(event);
        }
    }

    /// Stage `turn` is done: the turn passes on, and what the next stages
    /// held goes out.
    pub fn finish(&self, turn: usize) {
        let mut state = lock(&self.state);
        if let Some(done) = state.finished.get_mut(turn) {
            *done = true;
        }
        while state.finished.get(state.current) == Some(&true) {
            state.current += 1;
            let current = state.current;
            if let Some(held) = state.held.get_mut(current) {
                for event in std::mem::take(held) {
                    self.job.emit(event);
                }
            }
        }
    }
}

/// `(1.23s)`
pub fn elapsed(d: Duration) -> String {
    format!("({:.2}s)", d.as_secs_f64())
}

pub struct Step<'a> {
    out: Out<'a>,
    pub name: String,
    started: Instant,
}

impl<'a> Step<'a> {
    /// A step of a stage (`preparation > checking VMID`); lifecycle jobs use
    /// bare step names, as go-pve-qemu did (`starting VM`).
    pub fn new(out: impl Into<Out<'a>>, stage: Option<&str>, step: &str) -> Step<'a> {
        let name = match stage {
            Some(stage) => format!("{stage} > {step}"),
            None => step.to_string(),
        };
        Step {
            out: out.into(),
            name,
            started: Instant::now(),
        }
    }

    fn measure(&self, ok: bool, took: Duration) {
        self.out.job().metrics().step(&self.name, ok, took);
    }

    /// Every message of a step passes here: what a guest or Proxmox
    /// printed into it is stored and relayed without control characters,
    /// each line at most 4 KiB.
    fn emit(&self, status: StepStatus, message: String) {
        let message = match text::clean_line(&message) {
            Cow::Borrowed(_) => message,
            Cow::Owned(cleaned) => cleaned,
        };
        self.out.emit(StepEvent {
            step: self.name.clone(),
            status,
            message,
            vm_id: None,
            ip: None,
            host_key: None,
        });
    }

    pub fn processing(&self, message: impl Into<String>) {
        self.emit(StepStatus::Processing, message.into());
    }

    /// `[+] … (1.23s)`
    pub fn success(&self, message: &str) {
        let took = self.started.elapsed();
        self.measure(true, took);
        self.emit(StepStatus::Success, format!("{message} {}", elapsed(took)));
    }

    pub fn error(&self, message: impl Into<String>) {
        self.measure(false, self.started.elapsed());
        self.emit(StepStatus::Error, message.into());
    }

    /// A line printed by a command, relayed under this step (at most
    /// `JOB_MAX_EVENTS` per job, each at most 4 KiB).
    pub fn relay(&self, line: &str) {
        match self.out.job().admit_relayed() {
            Admit::Yes => self.emit(StepStatus::Processing, format!("  {line}")),
            Admit::Last(max) => self.emit(
                StepStatus::Processing,
                format!("  … more output not kept: {max} lines per job (JOB_MAX_EVENTS)"),
            ),
            Admit::No => {}
        }
    }

    /// A final event carrying the VM's id and address.
    pub fn done(&self, message: String, vm_id: u32, ip: &str) {
        self.done_keyed(message, vm_id, ip, None);
    }

    /// `done`, with the VM's host key fingerprint when it is known.
    pub fn done_keyed(&self, message: String, vm_id: u32, ip: &str, host_key: Option<&str>) {
        self.out.emit(StepEvent {
            step: self.name.clone(),
            status: StepStatus::Success,
            message,
            vm_id: Some(vm_id),
            ip: Some(ip.to_string()),
            host_key: host_key.map(str::to_string),
        });
    }

    /// A final event whose live followers read `shown` and everything else
    /// (the database, replays) `kept`.
    pub fn done_once(&self, kept: String, shown: String, (vm_id, ip, host_key): Keyed<'_>) {
        let event = StepEvent {
            step: self.name.clone(),
            status: StepStatus::Success,
            message: kept,
            vm_id: Some(vm_id),
            ip: Some(ip.to_string()),
            host_key: host_key.map(str::to_string),
        };
        match &self.out {
            Out::Job(job) => job.emit_once(event, shown),
            // Stages run side by side hold their events back; a secret is
            // not held anywhere, so there only the kept words go out.
            Out::Turn(turns, turn) => turns.emit(*turn, event),
        }
    }

    /// The last event of a job that made a VM with no address of its own
    /// (a template).
    pub fn made(&self, message: String, vm_id: u32) {
        self.out.emit(StepEvent {
            step: self.name.clone(),
            status: StepStatus::Success,
            message,
            vm_id: Some(vm_id),
            ip: None,
            host_key: None,
        });
    }

    pub fn started(&self) -> Instant {
        self.started
    }
}

/// A Proxmox message on one line: task errors print their lines joined.
pub fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::jobs::Jobs;
    use pvedeck_domain::types::JobKind;

    /// A job in a database of its own; the directory lives as long as the test.
    fn install_job() -> (tempfile::TempDir, std::sync::Arc<Jobs>, JobHandle) {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Jobs::open(&dir.path().join("jobs.db")).unwrap();
        let job = jobs
            .start("default", JobKind::Install, None, "t", None)
            .unwrap();
        (dir, jobs, job)
    }

    #[tokio::test]
    async fn stages_working_at_once_report_in_turn() {
        let (_dir, jobs, job) = install_job();
        let turns = Turns::new(&job, 3);
        let step = |turn, name| Step::new(Out::Turn(&turns, turn), Some("s"), name);
        step(2, "third").processing("[*] 3a");
        step(1, "second").processing("[*] 2a");
        step(0, "first").processing("[*] 1a");
        turns.finish(2);
        step(1, "second").processing("[*] 2b");
        turns.finish(0);
        step(1, "second").processing("[*] 2c");
        turns.finish(1);
        step(2, "third").processing("[*] 3b");
        jobs.flush().await.unwrap();
        let told: Vec<String> = jobs
            .events(job.id(), 0)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event.message)
            .collect();
        assert_eq!(
            told,
            ["[*] 1a", "[*] 2a", "[*] 2b", "[*] 2c", "[*] 3a", "[*] 3b"]
        );
    }

    #[tokio::test]
    async fn a_stage_that_does_not_finish_holds_back_the_later_ones() {
        let (_dir, jobs, job) = install_job();
        let turns = Turns::new(&job, 3);
        Step::new(Out::Turn(&turns, 2), None, "later").processing("[*] never told");
        turns.finish(2);
        Step::new(Out::Turn(&turns, 1), None, "failing").processing("[*] told");
        turns.finish(0);
        jobs.flush().await.unwrap();
        let told = jobs.events(job.id(), 0).await.unwrap();
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].event.message, "[*] told");
    }

    #[tokio::test]
    async fn what_a_guest_prints_is_stored_without_controls_and_cut() {
        let (_dir, jobs, job) = install_job();
        let step = Step::new(Out::Job(&job), None, "SSH initialization");
        step.relay(&format!(
            "\u{1b}]0;owned\u{7}\u{1b}[2J{}",
            "x".repeat(10_000)
        ));
        step.error("cloud-init said:\r\u{1b}[31mboom");
        jobs.flush().await.unwrap();
        let told: Vec<String> = jobs
            .events(job.id(), 0)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event.message)
            .collect();
        assert_eq!(told.len(), 2);
        assert!(
            told[0].starts_with("  ]0;owned[2Jxxx"),
            "{}",
            &told[0][..20]
        );
        assert!(told[0].ends_with("bytes cut)"));
        assert!(told[0].len() < 4200, "{}", told[0].len());
        assert_eq!(told[1], "cloud-init said:[31mboom");
    }

    #[test]
    fn elapsed_has_two_decimals() {
        assert_eq!(elapsed(Duration::from_millis(1234)), "(1.23s)");
        assert_eq!(elapsed(Duration::ZERO), "(0.00s)");
    }

    #[test]
    fn multi_line_messages_become_one() {
        assert_eq!(
            one_line("400 Parameter verification failed.\ncpu: bad\n"),
            "400 Parameter verification failed.; cpu: bad"
        );
    }
}
