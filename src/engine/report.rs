//! Writing a job's timeline: one `Step` per pipeline step, whose messages
//! follow go-pve-qemu's conventions (`[*]` progress, `[+]` done, `[-]`
//! failure, the step's elapsed time in parentheses).

use std::time::{Duration, Instant};

use app::types::{StepEvent, StepStatus};

use crate::jobs::JobHandle;

/// `(1.23s)`
pub fn elapsed(d: Duration) -> String {
    format!("({:.2}s)", d.as_secs_f64())
}

pub struct Step<'a> {
    job: &'a JobHandle,
    pub name: String,
    started: Instant,
}

impl<'a> Step<'a> {
    /// A step of a stage (`preparation > checking VMID`); lifecycle jobs use
    /// bare step names, as go-pve-qemu did (`starting VM`).
    pub fn new(job: &'a JobHandle, stage: Option<&str>, step: &str) -> Step<'a> {
        let name = match stage {
            Some(stage) => format!("{stage} > {step}"),
            None => step.to_string(),
        };
        Step {
            job,
            name,
            started: Instant::now(),
        }
    }

    fn emit(&self, status: StepStatus, message: String) {
        self.job.emit(StepEvent {
            step: self.name.clone(),
            status,
            message,
            vm_id: None,
            ip: None,
        });
    }

    pub fn processing(&self, message: impl Into<String>) {
        self.emit(StepStatus::Processing, message.into());
    }

    /// `[+] … (1.23s)`
    pub fn success(&self, message: &str) {
        self.emit(
            StepStatus::Success,
            format!("{message} {}", elapsed(self.started.elapsed())),
        );
    }

    pub fn error(&self, message: impl Into<String>) {
        self.emit(StepStatus::Error, message.into());
    }

    /// A line printed by a command, relayed under this step.
    pub fn relay(&self, line: &str) {
        self.emit(StepStatus::Processing, format!("  {line}"));
    }

    /// A final event carrying the VM's id and address.
    pub fn done(&self, message: String, vm_id: u32, ip: &str) {
        self.job.emit(StepEvent {
            step: self.name.clone(),
            status: StepStatus::Success,
            message,
            vm_id: Some(vm_id),
            ip: Some(ip.to_string()),
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
