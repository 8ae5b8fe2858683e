//! The failure contract of an install (docs/provisioning.md#failure-contract):
//! what a failed step says, and what becomes of the VM it leaves — nothing
//! to do, destroyed, or kept for debugging. Every job that makes a VM
//! (installs, clones, template builds) and every stage that can fail one
//! speaks in these types; the engine enforces them here, once.

use pvedeck_domain::types::{JobState, StepEvent, StepStatus, VmOutcome};
use pvedeck_proxmox::PowerAction;

use super::Engine;
use super::report::{Step, one_line};
use crate::jobs::JobHandle;

/// What to do about the VM when a step fails (docs/provisioning.md#failure-contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    /// No VM exists.
    Nothing,
    /// Force stop and `qm destroy --purge --skiplock`.
    Destroy,
    /// The VM stays, for debugging.
    Keep,
}

/// A failed step: its name, its `[-] …` message, what the contract does about it.
pub struct Failure {
    pub(super) step: String,
    pub(super) message: String,
    pub(super) cleanup: Cleanup,
    /// How long the step ran before it failed (for `/metrics`).
    pub(super) took: std::time::Duration,
}

impl Failure {
    /// The same failure, but what it leaves is destroyed, not kept.
    pub(super) fn destroying(mut self) -> Failure {
        if self.cleanup == Cleanup::Keep {
            self.cleanup = Cleanup::Destroy;
        }
        self
    }

    pub(super) fn new(step: &Step<'_>, message: String, cleanup: Cleanup) -> Failure {
        Failure {
            step: step.name.clone(),
            message,
            cleanup,
            took: step.started().elapsed(),
        }
    }
}

/// A failed call as the step's error: `[-] <what>: <the error>`.
pub(super) fn failed<E: std::fmt::Display>(
    step: &Step<'_>,
    what: &str,
    cleanup: Cleanup,
) -> impl FnOnce(E) -> Failure {
    move |e| {
        Failure::new(
            step,
            format!("[-] {what}: {}", one_line(&e.to_string())),
            cleanup,
        )
    }
}

impl Engine {
    /// Ends a job whose step failed: the error first, at that step; then
    /// what the contract does about the VM, once one exists.
    pub(super) async fn fail_job(
        &self,
        job: &JobHandle,
        failure: Failure,
        vm: Option<(u32, String)>,
    ) {
        job.metrics().step(&failure.step, false, failure.took);
        job.emit(StepEvent {
            step: failure.step.clone(),
            status: StepStatus::Error,
            message: failure.message,
            vm_id: None,
            ip: None,
            host_key: None,
        });
        let outcome = match (failure.cleanup, vm) {
            (Cleanup::Nothing, _) | (_, None) => VmOutcome::None,
            (Cleanup::Keep, Some((vmid, _))) => {
                let step = Step::new(job, Some("cleanup"), "keeping VM");
                step.processing(format!("[*] VM {vmid} is kept for debugging"));
                // The step's own end: without it a follower shows the step
                // still running after the job (the line above is
                // go-pve-qemu's, this one is added).
                step.success(&format!("[+] VM {vmid} kept"));
                VmOutcome::Kept
            }
            (Cleanup::Destroy, Some((vmid, node))) => {
                self.destroy_half_made(job, vmid, &node).await
            }
        };
        job.finish(JobState::Failed, Some(outcome), Some(&failure.step));
    }

    /// The contract's cleanup: force stop, then `qm destroy --purge --skiplock`.
    pub(super) async fn destroy_half_made(
        &self,
        job: &JobHandle,
        vmid: u32,
        node: &str,
    ) -> VmOutcome {
        let step = Step::new(job, Some("cleanup"), "destroying VM");
        step.processing(format!("[*] stopping and destroying VM {vmid}"));
        if let Ok(ip) = self.allocator.address(vmid) {
            self.forget_host(ip);
        }
        let stop = PowerAction::Stop { skiplock: true };
        if let Err(e) = self.proxmox.power(node, vmid, stop).await {
            step.processing(format!("[*] stop: {}", one_line(&e.to_string())));
        }
        match self.proxmox.destroy(node, vmid, true).await {
            Ok(()) => {
                step.success(&format!("[+] VM {vmid} destroyed"));
                VmOutcome::Destroyed
            }
            Err(e) => {
                step.processing(format!(
                    "[-] could not destroy VM {vmid}: {}; it stays",
                    one_line(&e.to_string())
                ));
                VmOutcome::Kept
            }
        }
    }
}
