//! Lifecycle of existing VMs (SPEC §4) with go-pve-qemu's preconditions:
//! start, destroy, set/* and set/node need the VM stopped; stop, shutdown
//! and reboot need it running.

use std::sync::Arc;

use app::rules::MIN_RAM_MB;
use app::types::{JobKind, JobState, VmOutcome};
use serde_json::{Map, Value};

use super::report::{Step, one_line};
use super::request::{integer, object, parse_gigabytes};
use super::{Engine, EngineError, Length, VmRef, sshkey};
use crate::jobs::JobHandle;
use crate::pve::{GuestTarget, PowerAction, PveError, QmOptions};

/// What a Proxmox refusal means for the client.
fn refusal(vmid: u32, e: PveError) -> EngineError {
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

fn field<'a>(map: &'a Map<String, Value>, name: &str) -> Result<&'a Value, EngineError> {
    map.get(name)
        .filter(|v| !v.is_null())
        .ok_or_else(|| EngineError::bad(format!("{name} is required")))
}

impl Engine {
    /// `GET /api/vm/:id/status`: `qm status` on the VM's node.
    pub async fn vm_status(&self, vmid: u32) -> Result<String, EngineError> {
        let vm = self.locate(vmid).await?;
        self.qm_status(&vm).await
    }

    async fn qm_status(&self, vm: &VmRef) -> Result<String, EngineError> {
        if vm.resource.status == "unknown" {
            return Err(EngineError::Conflict(format!(
                "VM {} is on node {}, which does not answer",
                vm.vmid, vm.node
            )));
        }
        self.call(
            Length::Short,
            "qm status",
            self.pve.status(&vm.node, vm.vmid),
        )
        .await
        .map_err(|e| refusal(vm.vmid, e))
    }

    /// Locates the VM and checks go-pve-qemu's precondition, reading the
    /// state from `qm status` (the resource list may lag by seconds).
    async fn ready_for(&self, vmid: u32, want_running: bool) -> Result<VmRef, EngineError> {
        let vm = self.locate(vmid).await?;
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

    async fn power_now(&self, vmid: u32, action: PowerAction) -> Result<(), EngineError> {
        let vm = self.ready_for(vmid, true).await?;
        self.call(
            Length::Short,
            "qm power",
            self.pve.power(&vm.node, vmid, action),
        )
        .await
        .map_err(|e| refusal(vmid, e))
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
        self.call(
            Length::Short,
            "qm destroy",
            self.pve.destroy(&vm.node, vmid, false),
        )
        .await
        .map_err(|e| refusal(vmid, e))
    }

    async fn set(&self, vm: &VmRef, options: QmOptions) -> Result<(), EngineError> {
        self.call(
            Length::Short,
            "qm set",
            self.pve.set(&vm.node, vm.vmid, &options),
        )
        .await
        .map_err(|e| refusal(vm.vmid, e))
    }

    /// `{"cpu":4}` → `qm set <id> --cores 4`.
    pub async fn set_cpu(&self, vmid: u32, body: &[u8]) -> Result<(), EngineError> {
        let map = object(body)?;
        let max = self.limits().cpu();
        let out_of_range = || EngineError::bad(format!("cpu must be an integer from 1 to {max}"));
        field(&map, "cpu")?;
        let cpu = integer(&map, "cpu")
            .map_err(|_| out_of_range())?
            .filter(|c| (1..=max).contains(c))
            .ok_or_else(out_of_range)?;
        let vm = self.ready_for(vmid, false).await?;
        self.set(&vm, vec![("cores".into(), cpu.to_string())]).await
    }

    /// `{"memory":8192}` → `qm set <id> --memory 8192 [--numa 1 --balloon n]`.
    pub async fn set_memory(&self, vmid: u32, body: &[u8]) -> Result<(), EngineError> {
        let map = object(body)?;
        let max = self.config.vm_max_ram_mb.map(i64::from);
        let out_of_range = || match max {
            Some(max) => EngineError::bad(format!(
                "memory must be an integer from {MIN_RAM_MB} to {max} (MB)"
            )),
            None => EngineError::bad(format!(
                "memory must be an integer of at least {MIN_RAM_MB} (MB)"
            )),
        };
        field(&map, "memory")?;
        let memory = integer(&map, "memory")
            .map_err(|_| out_of_range())?
            .filter(|m| *m >= MIN_RAM_MB && max.is_none_or(|max| *m <= max))
            .ok_or_else(out_of_range)?;
        let vm = self.ready_for(vmid, false).await?;
        let memory = memory as u64;
        let mut options: QmOptions = vec![("memory".into(), memory.to_string())];
        match self.balloon(memory) {
            Some(balloon) => {
                options.push(("numa".into(), "1".into()));
                options.push(("balloon".into(), balloon.to_string()));
            }
            None => {
                // A balloon from an earlier size must not exceed the new memory.
                let config = self
                    .call(Length::Short, "qm config", self.pve.config(&vm.node, vmid))
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
        }
        self.set(&vm, options).await
    }

    /// `{"disk":"10G"}` → `qm disk resize <id> scsi0 +10G`; never shrinks.
    pub async fn set_disk(&self, vmid: u32, body: &[u8]) -> Result<(), EngineError> {
        let map = object(body)?;
        let grow = match field(&map, "disk")? {
            Value::String(s) => parse_gigabytes(s).filter(|g| *g > 0),
            _ => None,
        }
        .ok_or_else(|| EngineError::bad("disk must be a size to add, like \"10G\""))?;
        let vm = self.ready_for(vmid, false).await?;
        if let Some(max) = self.config.vm_max_disk_gb.map(u64::from) {
            let current = self.disk_size(&vm.node, vmid).await.map_err(|e| {
                EngineError::Pve(PveError::Parse {
                    command: "qm config".into(),
                    detail: e,
                })
            })?;
            let after = current / (1 << 30) + grow;
            if after > max {
                return Err(EngineError::bad(format!(
                    "disk would grow to {after}G, above the limit of {max}G"
                )));
            }
        }
        self.call(
            Length::Short,
            "qm disk resize",
            self.pve
                .resize(&vm.node, vmid, "scsi0", &format!("+{grow}G")),
        )
        .await
        .map_err(|e| refusal(vmid, e))
    }

    /// `POST /api/vm/:id/start`: a job streaming `starting VM` → `waiting
    /// for SSH` → `finalizing`.
    pub async fn start(self: &Arc<Self>, vmid: u32) -> Result<u64, EngineError> {
        let vm = self.ready_for(vmid, false).await?;
        self.power_job(vm, JobKind::Start).await
    }

    /// `POST /api/vm/:id/reboot`: `rebooting VM` → `waiting for SSH` → `finalizing`.
    pub async fn reboot(self: &Arc<Self>, vmid: u32) -> Result<u64, EngineError> {
        let vm = self.ready_for(vmid, true).await?;
        self.power_job(vm, JobKind::Reboot).await
    }

    async fn power_job(self: &Arc<Self>, vm: VmRef, kind: JobKind) -> Result<u64, EngineError> {
        let ip = self.vm_ip(vm.vmid)?;
        let job = self.jobs.start(
            kind,
            Some(vm.vmid),
            &format!("{} VM {}", kind.as_str(), vm.vmid),
        )?;
        let id = job.id();
        let engine = self.clone();
        tokio::spawn(async move {
            let (action, verb, step_name, doing, done) = match kind {
                JobKind::Reboot => (
                    PowerAction::Reboot,
                    "reboot",
                    "rebooting VM",
                    "rebooting",
                    "rebooted",
                ),
                _ => (
                    PowerAction::Start,
                    "start",
                    "starting VM",
                    "starting",
                    "started",
                ),
            };
            let step = Step::new(&job, None, step_name);
            step.processing(format!("[*] {step_name}"));
            let result = engine
                .call(
                    Length::Short,
                    "qm power",
                    engine.pve.power(&vm.node, vm.vmid, action),
                )
                .await;
            if let Err(e) = result {
                return fail_job(
                    &job,
                    &step,
                    format!("[-] failed to {verb} VM: {}", one_line(&e.to_string())),
                );
            }
            step.success(&format!("[+] VM {doing}"));

            let step = Step::new(&job, None, "waiting for SSH");
            let target = GuestTarget {
                ip,
                port: engine.config.ssh_port,
                user: engine.login_user(&vm).await,
                key: sshkey::find(&engine.config.ssh_key_dir).map_or_else(
                    || engine.config.ssh_key_dir.join("id_ed25519"),
                    |k| k.private,
                ),
            };
            step.processing(format!("[*] waiting for SSH as {}@{ip}", target.user));
            if let Err(e) = engine.wait_for_ssh(&step, &target).await {
                return fail_job(
                    &job,
                    &step,
                    format!("[-] failed to connect to VM via SSH: {e}"),
                );
            }
            step.success("[+] VM is ready");

            let step = Step::new(&job, None, "finalizing");
            step.done(
                format!("[+] VM {done} successfully"),
                vm.vmid,
                &ip.to_string(),
            );
            job.finish(JobState::Succeeded, None, None);
        });
        Ok(id)
    }

    /// Who to log in as: the VM's cloud-init user, else its OS's default
    /// (SPEC §4: `rockylinux` → `rocky`).
    async fn login_user(&self, vm: &VmRef) -> String {
        let config = self.pve.config(&vm.node, vm.vmid).await.ok();
        config
            .as_ref()
            .and_then(|c| c.get("ciuser").cloned())
            .or_else(|| {
                vm.resource
                    .first_tag()
                    .and_then(crate::os::default_user)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "root".to_string())
    }

    /// `POST /api/vm/:id/set/node` `{"node":"pve2"}`: `qm migrate <id> <node>
    /// --with-local-disks` as a job, its log relayed line by line.
    pub async fn migrate(self: &Arc<Self>, vmid: u32, body: &[u8]) -> Result<u64, EngineError> {
        let map = object(body)?;
        let target = match field(&map, "node")? {
            Value::String(s) if crate::config::is_node_name(s) => s.clone(),
            _ => return Err(EngineError::bad("node must be the name of a cluster node")),
        };
        let nodes = self.cluster_nodes().await?;
        let node = nodes.iter().find(|n| n.node == target).ok_or_else(|| {
            EngineError::bad(format!("node '{target}' is not a node of the cluster"))
        })?;
        if !node.is_online() {
            return Err(EngineError::Conflict(format!("node '{target}' is offline")));
        }
        let vm = self.ready_for(vmid, false).await?;
        if vm.node == target {
            return Err(EngineError::bad(format!(
                "VM {vmid} is on node {target} already"
            )));
        }
        let ip = self.vm_ip(vmid)?;
        let job = self.jobs.start(
            JobKind::Migrate,
            Some(vmid),
            &format!("migrate VM {vmid} {} → {target}", vm.node),
        )?;
        let id = job.id();
        let engine = self.clone();
        tokio::spawn(async move {
            let step = Step::new(&job, None, "migrating VM");
            step.processing(format!(
                "[*] migrating VM {vmid} from {} to {target}",
                vm.node
            ));
            let relay = |line: &str| step.relay(line);
            let result = engine
                .call(
                    Length::Long,
                    "qm migrate",
                    engine.pve.migrate(&vm.node, vmid, &target, &relay),
                )
                .await;
            if let Err(e) = result {
                return fail_job(
                    &job,
                    &step,
                    format!("[-] failed to migrate VM: {}", one_line(&e.to_string())),
                );
            }
            step.success(&format!("[+] VM migrated to node {target} successfully"));
            let step = Step::new(&job, None, "finalizing");
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

/// A lifecycle job failed: the VM stays as it is.
fn fail_job(job: &JobHandle, step: &Step<'_>, message: String) {
    step.error(message);
    job.finish(JobState::Failed, Some(VmOutcome::Kept), Some(&step.name));
}
