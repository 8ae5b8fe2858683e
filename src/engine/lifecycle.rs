//! Lifecycle of existing VMs (docs/provisioning.md#lifecycle) with go-pve-qemu's preconditions:
//! start, destroy, set/* and set/node need the VM stopped; stop, shutdown
//! and reboot need it running.

use std::sync::Arc;

use pvedeck_domain::os::Os;
use pvedeck_domain::request::{Cores, Growth, MemoryMb, NodeName};
use pvedeck_domain::types::{JobKind, JobState, VmOutcome};
use pvedeck_proxmox::{GuestTarget, PowerAction, PveError, QmOptions};

use super::disk::DiskError;
use super::failure::Cleanup;
use super::readiness::Boot;
use super::report::{Step, one_line};
use super::scope::Scope;
use super::stopping::stake;
use super::{Engine, EngineError, VmRef, memory, sshkey};
use crate::jobs::JobHandle;

/// What a Proxmox refusal means for the client.
pub(super) fn refusal(vmid: u32, e: PveError) -> EngineError {
    if e.is_locked() {
        EngineError::Conflict(format!(
            "VM {vmid} {}",
            one_line(&e.message()).replacen("VM ", "", 1)
        ))
    } else if e.is_missing_config() {
        EngineError::NotFound(format!("VM {vmid} not found"))
    } else {
        EngineError::Pve(e)
    }
}

/// Streamed power actions: start and reboot.
struct PowerJob {
    action: PowerAction,
    boot: Boot,
    verb: &'static str,
    step: &'static str,
    doing: &'static str,
    done: &'static str,
}

const START: PowerJob = PowerJob {
    action: PowerAction::Start,
    boot: Boot::Start,
    verb: "start",
    step: "starting VM",
    doing: "starting",
    done: "started",
};

const REBOOT: PowerJob = PowerJob {
    action: PowerAction::Reboot,
    boot: Boot::Reboot,
    verb: "reboot",
    step: "rebooting VM",
    doing: "rebooting",
    done: "rebooted",
};

impl Engine {
    /// `GET /api/vm/:id/status`: `qm status` on the VM's node.
    pub async fn vm_status(&self, vmid: u32) -> Result<String, EngineError> {
        let vm = self.locate(vmid).await?;
        self.qm_status(&vm).await
    }

    pub(super) async fn qm_status(&self, vm: &VmRef) -> Result<String, EngineError> {
        if vm.resource.status == "unknown" {
            return Err(EngineError::Conflict(format!(
                "VM {} is on node {}, which does not answer",
                vm.vmid, vm.node
            )));
        }
        self.proxmox
            .status(&vm.node, vm.vmid)
            .await
            .map_err(|e| refusal(vm.vmid, e))
    }

    /// Locates the VM and checks go-pve-qemu's precondition, reading the
    /// state from `qm status` (the resource list may lag by seconds).
    async fn ready_for(&self, vmid: u32, want_running: bool) -> Result<VmRef, EngineError> {
        let vm = self.locate(vmid).await?;
        self.config.manage.check(&vm.resource)?;
        self.still_the_vm(&vm).await?;
        // Whatever follows changes it: the next read is Proxmox's.
        self.statuses.forget(vmid);
        self.configs.forget(vmid);
        if let Some(lock) = &vm.resource.lock {
            return Err(EngineError::Conflict(format!(
                "VM {vmid} is locked ({lock})"
            )));
        }
        let running = self.qm_status(&vm).await? == "running";
        match (want_running, running) {
            (false, true) => Err(EngineError::bad("VM is running")),
            (true, false) => Err(EngineError::bad("VM is not running")),
            _ => Ok(vm),
        }
    }

    /// Who was judged (scope and owner) from the cluster as last read —
    /// up to a few refreshes old — is read again from the VM's own
    /// configuration right before anything acts on it: a VMID destroyed
    /// and reused meanwhile (by hand, by another tool, for another tenant)
    /// is refused with 409 and nothing runs, rather than acted on.
    async fn still_the_vm(&self, vm: &VmRef) -> Result<(), EngineError> {
        self.still_the_vm_as(vm).await.map(drop)
    }

    /// [`Self::still_the_vm`], with the configuration it read.
    pub(super) async fn still_the_vm_as(
        &self,
        vm: &VmRef,
    ) -> Result<std::collections::BTreeMap<String, String>, EngineError> {
        let fresh = self
            .proxmox
            .config(&vm.node, vm.vmid)
            .await
            .map_err(|e| refusal(vm.vmid, e))?;
        let owner = self.directory.people().owners.get(&vm.vmid).cloned();
        match changed(vm, &fresh, self.config.manage, owner.as_deref()) {
            None => Ok(fresh),
            Some(why) => Err(EngineError::Conflict(format!(
                "VM {} is not the VM pvedeck last read: {why}; nothing was done (read the \
                 list again)",
                vm.vmid
            ))),
        }
    }

    async fn power_now(&self, vmid: u32, action: PowerAction) -> Result<(), EngineError> {
        let vm = self.ready_for(vmid, true).await?;
        let done = self
            .proxmox
            .power(&vm.node, vmid, action)
            .await
            .map_err(|e| refusal(vmid, e));
        // A read that came while it ran holds the state before it.
        self.statuses.forget(vmid);
        done
    }

    /// `qm stop` (hard).
    pub async fn stop(&self, vmid: u32) -> Result<(), EngineError> {
        self.power_now(vmid, PowerAction::Stop { skiplock: false })
            .await
    }

    /// `qm shutdown` (ACPI).
    pub async fn shutdown(&self, vmid: u32) -> Result<(), EngineError> {
        self.power_now(vmid, PowerAction::Shutdown).await
    }

    /// `qm destroy <id> --purge`.
    pub async fn destroy(&self, vmid: u32) -> Result<(), EngineError> {
        let vm = self.ready_for(vmid, false).await?;
        self.proxmox
            .destroy(&vm.node, vmid, false)
            .await
            .map_err(|e| refusal(vmid, e))?;
        self.consoles.close_vm(
            &self.config.cluster,
            vmid,
            &format!("VM {vmid} was destroyed"),
        );
        if let Ok(ip) = self.allocator.address(vmid) {
            self.forget_host(ip);
        }
        Ok(())
    }

    async fn set(&self, vm: &VmRef, options: QmOptions) -> Result<(), EngineError> {
        self.proxmox
            .set(&vm.node, vm.vmid, &options)
            .await
            .map_err(|e| refusal(vm.vmid, e))
    }

    /// `qm set <id> --cores <n>`.
    pub async fn set_cpu(&self, vmid: u32, cores: Cores) -> Result<(), EngineError> {
        let vm = self.ready_for(vmid, false).await?;
        self.set(&vm, vec![("cores".into(), cores.get().to_string())])
            .await
    }

    /// `qm set <id> --memory <mb> [--numa 1 --balloon n]` (docs/provisioning.md#balloon-rules).
    pub async fn set_memory(&self, vmid: u32, memory: MemoryMb) -> Result<(), EngineError> {
        let vm = self.ready_for(vmid, false).await?;
        let memory = memory.get();
        let mut options: QmOptions = vec![("memory".into(), memory.to_string())];
        let balloon = memory::balloon_options(memory, self.config.vm_balloon_min_mb);
        if balloon.is_empty() {
            // A balloon from an earlier size must not exceed the new memory.
            let config = self
                .proxmox
                .config(&vm.node, vmid)
                .await
                .map_err(|e| refusal(vmid, e))?;
            let stale = config
                .get("balloon")
                .and_then(|b| b.parse::<u64>().ok())
                .is_some_and(|b| b > memory);
            if stale {
                options.push(("delete".into(), "balloon".into()));
            }
        }
        options.extend(balloon);
        self.set(&vm, options).await
    }

    /// `qm disk resize <id> scsi0 +<n>G`: grows, never shrinks, never past
    /// `VM_MAX_DISK`.
    pub async fn grow_disk(&self, vmid: u32, growth: Growth) -> Result<(), EngineError> {
        let vm = self.ready_for(vmid, false).await?;
        let size = format!("+{}G", growth.gib());
        let disk_error = |e: DiskError| match e {
            DiskError::Pve(e) => refusal(vmid, e),
            DiskError::NotResized { printed, .. } if !printed.trim().is_empty() => {
                EngineError::Pve(PveError::command(
                    format!("qm disk resize {vmid} scsi0 {size}"),
                    one_line(&printed),
                    0,
                ))
            }
            DiskError::NoSize => EngineError::Pve(PveError::Parse {
                command: "qm config".into(),
                detail: DiskError::NoSize.to_string(),
            }),
            other => EngineError::Pve(PveError::command(
                format!("qm disk resize {vmid} scsi0 {size}"),
                other.to_string(),
                0,
            )),
        };
        let before = self.disk_size(&vm.node, vmid).await.map_err(disk_error)?;
        self.config
            .limits
            .check_growth(before / (1 << 30), growth.gib())?;
        let printed = self
            .proxmox
            .resize(&vm.node, vmid, "scsi0", &size)
            .await
            .map_err(|e| refusal(vmid, e))?;
        let after = before + (growth.gib() << 30);
        self.resized_to(&vm.node, vmid, after, &size, printed)
            .await
            .map_err(disk_error)
    }

    /// `POST /api/vm/:id/start`: a job streaming `starting VM` → `waiting
    /// for SSH` → `finalizing`.
    pub async fn start(self: &Arc<Self>, vmid: u32) -> Result<u64, EngineError> {
        let vm = self.ready_for(vmid, false).await?;
        self.power_job(vm, JobKind::Start, START).await
    }

    /// `POST /api/vm/:id/reboot`: `rebooting VM` → `waiting for SSH` → `finalizing`.
    pub async fn reboot(self: &Arc<Self>, vmid: u32) -> Result<u64, EngineError> {
        let vm = self.ready_for(vmid, true).await?;
        self.power_job(vm, JobKind::Reboot, REBOOT).await
    }

    /// Everything the job needs is read before it starts: a Proxmox that
    /// does not answer (`qm config`) is the request's error, and no
    /// `qm start` has run.
    async fn power_job(
        self: &Arc<Self>,
        vm: VmRef,
        kind: JobKind,
        power: PowerJob,
    ) -> Result<u64, EngineError> {
        let ip = self.allocator.address(vm.vmid)?;
        let target = GuestTarget {
            ip,
            port: self.config.ssh_port,
            user: self.login_user(&vm).await?,
            key: sshkey::find(&self.config.ssh_key_dir)
                .map_or_else(|| self.config.ssh_key_dir.join("id_ed25519"), |k| k.private),
            known_hosts: Some(self.known_hosts()),
        };
        let job = self.start_job(
            kind,
            Some(vm.vmid),
            &format!("{} VM {}", kind.as_str(), vm.vmid),
        )?;
        // Cut short, a power job leaves the VM as it is
        // (docs/provisioning.md#stopping-and-restarts).
        job.stake(stake(vm.vmid, &vm.node, Cleanup::Keep));
        let id = job.id();
        let engine = self.clone();
        self.spawn_job(job, move |job| async move {
            let job = &*job;
            let step = Step::new(job, None, power.step);
            step.processing(format!("[*] {}", power.step));
            let result = engine.proxmox.power(&vm.node, vm.vmid, power.action).await;
            engine.statuses.forget(vm.vmid);
            if let Err(e) = result {
                let verb = power.verb;
                return fail_job(
                    job,
                    &step,
                    format!("[-] failed to {verb} VM: {}", one_line(&e.to_string())),
                );
            }
            step.success(&format!("[+] VM {}", power.doing));

            let step = Step::new(job, None, "waiting for SSH");
            step.processing(format!("[*] waiting for SSH as {}@{ip}", target.user));
            if let Err(e) = engine.wait_for_ssh(&step, &target, power.boot).await {
                return fail_job(
                    job,
                    &step,
                    format!("[-] failed to connect to VM via SSH: {e}"),
                );
            }
            step.success("[+] VM is ready");

            let step = Step::new(job, None, "finalizing");
            step.done(
                format!("[+] VM {} successfully", power.done),
                vm.vmid,
                &ip.to_string(),
            );
            job.finish(JobState::Succeeded, None, None);
        });
        Ok(id)
    }

    /// Who to log in as: the VM's cloud-init user, else its OS's default
    /// (docs/provisioning.md#lifecycle: `rockylinux` → `rocky`), else root.
    async fn login_user(&self, vm: &VmRef) -> Result<String, EngineError> {
        let config = self
            .proxmox
            .config(&vm.node, vm.vmid)
            .await
            .map_err(|e| refusal(vm.vmid, e))?;
        // The name goes into an `ssh` destination: only a user name will do.
        if let Some(user) = config
            .get("ciuser")
            .filter(|u| !pvedeck_domain::rules::is_linux_user(u))
        {
            return Err(EngineError::Pve(PveError::Parse {
                command: format!("qm config {}", vm.vmid),
                detail: format!(
                    "ciuser {user:?} is not a user name: pvedeck does not log in as it"
                ),
            }));
        }
        let user = config.get("ciuser").cloned().or_else(|| {
            vm.resource
                .os_tag()
                .and_then(Os::parse)
                .map(|os| os.default_user().to_string())
        });
        Ok(user.unwrap_or_else(|| "root".to_string()))
    }

    /// `POST /api/vm/:id/set/node`: `qm migrate <id> <node>
    /// --with-local-disks` as a job, its log relayed line by line.
    pub async fn migrate(
        self: &Arc<Self>,
        vmid: u32,
        target: NodeName,
    ) -> Result<u64, EngineError> {
        let view = self.cluster.read().await?;
        let node = view
            .snapshot
            .nodes
            .iter()
            .find(|n| n.node == target.as_str())
            .ok_or_else(|| {
                EngineError::bad(format!("node '{target}' is not a node of the cluster"))
            })?;
        if !node.is_online() {
            return Err(EngineError::Conflict(format!("node '{target}' is offline")));
        }
        let vm = self.ready_for(vmid, false).await?;
        if vm.node == target.as_str() {
            return Err(EngineError::bad(format!(
                "VM {vmid} is on node {target} already"
            )));
        }
        let ip = self.allocator.address(vmid)?;
        let job = self.start_job(
            JobKind::Migrate,
            Some(vmid),
            &format!("migrate VM {vmid} {} → {target}", vm.node),
        )?;
        job.stake(stake(vmid, &vm.node, Cleanup::Keep));
        let id = job.id();
        let engine = self.clone();
        self.spawn_job(job, move |job| async move {
            let job = &*job;
            let step = Step::new(job, None, "migrating VM");
            step.processing(format!(
                "[*] migrating VM {vmid} from {} to {target}",
                vm.node
            ));
            let relay = |line: &str| step.relay(line);
            let result = engine
                .proxmox
                .migrate(&vm.node, vmid, target.as_str(), &relay)
                .await;
            if let Err(e) = result {
                return fail_job(
                    job,
                    &step,
                    format!("[-] failed to migrate VM: {}", one_line(&e.to_string())),
                );
            }
            step.success(&format!("[+] VM migrated to node {target} successfully"));
            let step = Step::new(job, None, "finalizing");
            step.done(
                format!("[+] VM {vmid} is on node {target}"),
                vmid,
                &ip.to_string(),
            );
            job.finish(JobState::Succeeded, None, None);
        });
        Ok(id)
    }
}

/// What makes the VM `fresh` (its configuration as read now) another
/// than `vm` (as last listed): tags `MANAGE` no longer covers, or notes
/// that name another owner than the one pvedeck records.
fn changed(
    vm: &VmRef,
    fresh: &std::collections::BTreeMap<String, String>,
    manage: pvedeck_config::Manage,
    owner: Option<&str>,
) -> Option<String> {
    let now = pvedeck_proxmox::VmResource {
        tags: fresh.get("tags").cloned(),
        ..vm.resource.clone()
    };
    if !manage.covers(&now) {
        let tags = now.tags.as_deref().unwrap_or("");
        return Some(format!(
            "its tags are now '{tags}', which MANAGE={} does not cover",
            manage.name()
        ));
    }
    let noted = fresh
        .get("description")
        .and_then(|notes| super::tenancy::owner_in_notes(notes));
    match (noted.as_deref(), owner) {
        (Some(noted), Some(owner)) if noted != owner => {
            Some(format!("its notes name the owner '{noted}', not '{owner}'"))
        }
        (Some(noted), None) => Some(format!(
            "its notes name the owner '{noted}', whom pvedeck does not record for it"
        )),
        _ => None,
    }
}

/// A lifecycle job failed: the VM stays as it is.
fn fail_job(job: &JobHandle, step: &Step<'_>, message: String) {
    step.error(message);
    job.finish(JobState::Failed, Some(VmOutcome::Kept), Some(&step.name));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use pvedeck_config::Manage;

    use super::*;

    fn listed(tags: &str) -> VmRef {
        VmRef {
            vmid: 110,
            node: "pve1".into(),
            resource: pvedeck_proxmox::VmResource {
                vmid: 110,
                tags: Some(tags.into()),
                ..Default::default()
            },
        }
    }

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_vm_is_another_when_its_tags_or_owner_no_longer_match() {
        let vm = listed("debian;pvedeck");
        let same = config(&[
            ("tags", "debian;pvedeck"),
            ("description", "pvedeck-owner: alice"),
        ]);
        assert_eq!(changed(&vm, &same, Manage::Pvedeck, Some("alice")), None);
        let retagged = config(&[("tags", "router")]);
        assert_eq!(
            changed(&vm, &retagged, Manage::Pvedeck, None).as_deref(),
            Some("its tags are now 'router', which MANAGE=pvedeck does not cover")
        );
        assert_eq!(changed(&vm, &retagged, Manage::All, None), None);
        let untagged = config(&[]);
        assert!(changed(&vm, &untagged, Manage::Pvedeck, None).is_some());
        assert_eq!(
            changed(&vm, &same, Manage::Pvedeck, Some("bob")).as_deref(),
            Some("its notes name the owner 'alice', not 'bob'")
        );
        assert!(changed(&vm, &same, Manage::Pvedeck, None).is_some());
        // Notes without an owner (a VM assigned while the server was down)
        // are not a change.
        let plain = config(&[("tags", "pvedeck")]);
        assert_eq!(changed(&vm, &plain, Manage::Pvedeck, Some("bob")), None);
    }
}
