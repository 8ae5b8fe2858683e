//! The install pipeline (SPEC §3): every stage and step in order, with the
//! failure contract of §3.5.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use app::rules::{MIN_DISK_GB, MIN_RAM_MB};
use app::types::{JobKind, JobState, VmOutcome};

use super::allocator::Reservation;
use super::images::{ProgressGate, mib};
use super::report::{Step, elapsed, one_line};
use super::request::InstallRequest;
use super::sshkey::{self, KeyPair};
use super::{Engine, EngineError, Length};
use crate::jobs::JobHandle;
use crate::pve::{GuestCommand, GuestTarget, PowerAction, QmOptions};

/// Storage types a VM disk can be imported to.
const STORAGE_TYPES: [&str; 4] = ["dir", "zfspool", "lvmthin", "nfs"];
/// Tries of `qm resize`, and the pause between them.
const RESIZE_TRIES: u32 = 3;
const RESIZE_PAUSE_MS: u64 = 5000;
/// An SSH attempt that hangs is given up after this long.
const SSH_ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// What to do about the VM when a step fails (SPEC §3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cleanup {
    /// No VM exists.
    Nothing,
    /// Force stop and `qm destroy --purge --skiplock`.
    Destroy,
    /// The VM stays, for debugging.
    Keep,
}

struct Failure {
    step: String,
    message: String,
    cleanup: Cleanup,
}

/// A failed Proxmox call as the step's error: `[-] <what>: <Proxmox's message>`.
fn call_failed(
    step: &Step<'_>,
    what: &str,
    cleanup: Cleanup,
) -> impl FnOnce(crate::pve::PveError) -> Failure {
    move |e| {
        failed(
            step,
            format!("[-] {what}: {}", one_line(&e.to_string())),
            cleanup,
        )
    }
}

fn failed(step: &Step<'_>, message: String, cleanup: Cleanup) -> Failure {
    Failure {
        step: step.name.clone(),
        message,
        cleanup,
    }
}

/// The install's settled values, once preparation is done.
struct Plan {
    vmid: u32,
    ip: Ipv4Addr,
    name: String,
    cpu: u32,
    ram: u64,
    disk_gb: u64,
    storage: String,
    image: PathBuf,
    key: KeyPair,
    /// The node the VM is on (main node, then the migration target).
    node: String,
}

impl Engine {
    /// Checks what can be checked before a job exists, starts the install
    /// job and returns its id. A refused request has run no `qm`.
    pub async fn install(self: &Arc<Self>, body: &[u8]) -> Result<u64, EngineError> {
        let request = InstallRequest::parse(body, &self.config)?;

        if let Some(node) = &request.node {
            let nodes = self.cluster_nodes().await?;
            if !nodes.iter().any(|n| &n.node == node) {
                return Err(EngineError::bad(format!(
                    "node '{node}' is not a node of the cluster"
                )));
            }
        }
        let reservation = match request.id {
            None => None,
            Some(id) => Some(self.reserve_explicit(id).await?),
        };

        let title = format!(
            "install {} {}{}",
            request.release.os,
            request.release.version,
            if request.name.is_empty() {
                String::new()
            } else {
                format!(" \"{}\"", request.name)
            }
        );
        let job = self.jobs.start(JobKind::Install, request.id, &title)?;
        let id = job.id();
        let engine = self.clone();
        tokio::spawn(async move {
            engine.run_install(job, request, reservation).await;
        });
        Ok(id)
    }

    /// An id asked for explicitly: go-pve-qemu used it unchecked; we refuse
    /// one that is reserved, exists, or is being installed.
    async fn reserve_explicit(&self, id: u32) -> Result<Reservation, EngineError> {
        if let Some(label) = self.config.reserved.get(&id) {
            return Err(EngineError::bad(format!("id {id} is reserved ({label})")));
        }
        let vms = self.cluster_vms().await?;
        if let Some(vm) = vms.iter().find(|vm| vm.vmid == id) {
            return Err(EngineError::Conflict(format!(
                "VM {id} already exists on node '{}'",
                vm.node
            )));
        }
        self.allocator
            .reserve(id)
            .ok_or_else(|| EngineError::Conflict(format!("VM {id} is being installed already")))
    }

    async fn run_install(
        self: Arc<Self>,
        job: JobHandle,
        request: InstallRequest,
        reservation: Option<Reservation>,
    ) {
        let started = Instant::now();
        // The reservation lives until the job ends (it is dropped last).
        let mut held = reservation;
        let result = self.install_steps(&job, &request, &mut held, started).await;
        match result {
            Ok(()) => job.finish(JobState::Succeeded, None, None),
            Err((failure, vmid)) => {
                // The error first, at the step that failed; then what was
                // done about the VM.
                job.emit(app::types::StepEvent {
                    step: failure.step.clone(),
                    status: app::types::StepStatus::Error,
                    message: failure.message,
                    vm_id: None,
                    ip: None,
                });
                let outcome = match (failure.cleanup, vmid) {
                    (Cleanup::Nothing, _) | (_, None) => VmOutcome::None,
                    (Cleanup::Keep, Some((vmid, _))) => {
                        let step = Step::new(&job, Some("cleanup"), "keeping VM");
                        step.processing(format!("[*] VM {vmid} is kept for debugging"));
                        VmOutcome::Kept
                    }
                    (Cleanup::Destroy, Some((vmid, node))) => {
                        self.destroy_half_made(&job, vmid, &node).await
                    }
                };
                job.finish(JobState::Failed, Some(outcome), Some(&failure.step));
            }
        }
        drop(held);
    }

    /// The cleanup of §3.5: force stop, then `qm destroy --purge --skiplock`.
    async fn destroy_half_made(&self, job: &JobHandle, vmid: u32, node: &str) -> VmOutcome {
        let step = Step::new(job, Some("cleanup"), "destroying VM");
        step.processing(format!("[*] stopping and destroying VM {vmid}"));
        let stop = PowerAction::Stop { skiplock: true };
        if let Err(e) = self
            .call(Length::Short, "qm stop", self.pve.power(node, vmid, stop))
            .await
        {
            step.processing(format!("[*] stop: {}", one_line(&e.to_string())));
        }
        match self
            .call(
                Length::Short,
                "qm destroy",
                self.pve.destroy(node, vmid, true),
            )
            .await
        {
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

    /// Runs the steps; on failure returns what failed and, once a VM exists,
    /// its id and node.
    async fn install_steps(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        held: &mut Option<Reservation>,
        started: Instant,
    ) -> Result<(), (Failure, Option<(u32, String)>)> {
        let mut plan = self.prepare(job, req, held).await.map_err(|f| (f, None))?;
        job.set_vmid(plan.vmid);

        // From `qm create` on, a failure knows the VM.
        let created = self.create(job, req, &plan).await;
        created.map_err(|f| (f, None))?;
        let at = |plan: &Plan| Some((plan.vmid, plan.node.clone()));
        self.import_and_configure(job, req, &plan)
            .await
            .map_err(|f| (f, at(&plan)))?;
        self.boot_and_initialize(job, req, &mut plan)
            .await
            .map_err(|f| (f, at(&plan)))?;

        let step = Step::new(job, Some("VM initialization"), "finalizing");
        let ip = plan.ip.to_string();
        step.done(
            format!(
                "[+] VM installation completed in {:.2}s",
                started.elapsed().as_secs_f64()
            ),
            plan.vmid,
            &ip,
        );
        step.done(format!("[*] VMID: {}", plan.vmid), plan.vmid, &ip);
        step.done(format!("[*] IP: {ip}"), plan.vmid, &ip);
        step.done(format!("[*] User: {}", req.user), plan.vmid, &ip);
        Ok(())
    }

    /// Stages `preparation`, `OS preparation` and `SSH preparation`: nothing
    /// exists on the cluster yet.
    async fn prepare(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        held: &mut Option<Reservation>,
    ) -> Result<Plan, Failure> {
        let cfg = &self.config;

        let step = Step::new(job, Some("preparation"), "checking VMID");
        step.processing("[*] start VM installation");
        let vmid = match held {
            Some(r) => {
                step.success(&format!("[+] using specified VMID: {}", r.vmid));
                r.vmid
            }
            None => {
                let r = self.allocate().await.map_err(|e| {
                    failed(
                        &step,
                        format!("[-] failed to find free VMID: {e}"),
                        Cleanup::Nothing,
                    )
                })?;
                step.success(&format!("[+] auto-assigned VMID: {}", r.vmid));
                let vmid = r.vmid;
                *held = Some(r);
                vmid
            }
        };

        let step = Step::new(job, Some("preparation"), "assigning IP");
        let ip = self
            .vm_ip(vmid)
            .map_err(|e| failed(&step, format!("[-] {e}"), Cleanup::Nothing))?;
        step.success(&format!("[+] assigned IP: {ip}/24"));

        let step = Step::new(job, Some("preparation"), "validating CPU and RAM");
        let mut cpu = req.cpu;
        if cpu <= 0 {
            step.processing("[*] setting CPU to minimum 1");
            cpu = 1;
        } else if let Some(max) = cfg.vm_max_cpu.map(i64::from).filter(|max| cpu > *max) {
            step.processing(format!("[*] setting CPU to maximum {max}"));
            cpu = max;
        }
        let mut ram = req.ram;
        if ram < MIN_RAM_MB {
            step.processing(format!(
                "[*] setting RAM to minimum {MIN_RAM_MB} for system stability"
            ));
            ram = MIN_RAM_MB;
        } else if let Some(max) = cfg.vm_max_ram_mb.map(i64::from).filter(|max| ram > *max) {
            step.processing(format!("[*] setting RAM to maximum {max}"));
            ram = max;
        }
        step.success("[+] CPU and RAM validated");

        let step = Step::new(job, Some("preparation"), "validating disk size");
        let mut disk_gb = req.disk_gb;
        if disk_gb < MIN_DISK_GB as u64 {
            step.processing(format!("[*] setting disk to minimum {MIN_DISK_GB}G"));
            disk_gb = MIN_DISK_GB as u64;
        } else if let Some(max) = cfg
            .vm_max_disk_gb
            .map(u64::from)
            .filter(|max| disk_gb >= *max)
        {
            step.processing(format!("[*] setting disk to maximum {max}G"));
            disk_gb = max;
        }
        step.success("[+] disk size validated");

        let step = Step::new(job, Some("preparation"), "setting default config values");
        step.processing("[*] set default config values");
        let name = if req.name.is_empty() {
            vmid.to_string()
        } else {
            format!("{}-{vmid}", req.name)
        };
        step.success(&format!(
            "[+] default config values set (name {name}, user {})",
            req.user
        ));

        let storage = cfg.assign_storage.clone();
        let step = Step::new(job, Some("preparation"), "checking storage pool");
        step.processing(format!("[*] check storage pool: {storage}"));
        self.check_storage(&storage)
            .await
            .map_err(|e| failed(&step, format!("[-] {e}"), Cleanup::Nothing))?;
        step.success(&format!("[+] storage pool {storage} is available"));

        let image = self.os_image(job, req).await?;
        let key = self.ssh_key(job).await?;

        Ok(Plan {
            vmid,
            ip,
            name,
            // Both were clamped into range above.
            cpu: u32::try_from(cpu).unwrap_or(1),
            ram: u64::try_from(ram).unwrap_or(MIN_RAM_MB as u64),
            disk_gb,
            storage,
            image,
            key,
            node: cfg.main_node.clone(),
        })
    }

    /// SPEC §3.1: the first id of the range that no VM has, that is not
    /// reserved, and where nothing answers on port 22.
    async fn allocate(&self) -> Result<Reservation, String> {
        let vms = self
            .cluster_vms()
            .await
            .map_err(|e| one_line(&e.to_string()))?;
        let used: std::collections::BTreeSet<u32> = vms.iter().map(|vm| vm.vmid).collect();
        let range = u32::from(self.config.assign_ip_start)..=u32::from(self.config.assign_ip_end);
        let mut answered = std::collections::BTreeSet::new();
        loop {
            let candidates = range.clone().filter(|id| {
                !used.contains(id)
                    && !self.config.reserved.contains_key(id)
                    && !answered.contains(id)
            });
            let reservation = self.allocator.reserve_first(candidates).ok_or_else(|| {
                format!(
                    "no free VMID in {}-{}",
                    self.config.assign_ip_start, self.config.assign_ip_end
                )
            })?;
            let ip = self.vm_ip(reservation.vmid).map_err(|e| e.to_string())?;
            if !self.pve.probe(ip, self.config.ssh_port).await {
                return Ok(reservation);
            }
            tracing::info!(%ip, "VMID allocation: something answers on port 22, skipped");
            answered.insert(reservation.vmid);
        }
    }

    async fn check_storage(&self, storage: &str) -> Result<(), String> {
        let rows = self
            .call(
                Length::Short,
                "pvesm status",
                self.pve.storage_status(&self.config.main_node),
            )
            .await
            .map_err(|e| one_line(&e.to_string()))?;
        let row = rows
            .iter()
            .find(|r| r.name == storage)
            .ok_or_else(|| format!("storage pool {storage} does not exist"))?;
        if row.status != "active" {
            return Err(format!("storage pool {storage} is {}", row.status));
        }
        if !STORAGE_TYPES.contains(&row.kind.as_str()) {
            return Err(format!(
                "storage pool {storage} is of type {}, not one of: {}",
                row.kind,
                STORAGE_TYPES.join(", ")
            ));
        }
        Ok(())
    }

    /// Stage `OS preparation`: the image URL, its check, the download.
    async fn os_image(&self, job: &JobHandle, req: &InstallRequest) -> Result<PathBuf, Failure> {
        let step = Step::new(job, Some("OS preparation"), "getting OS image");
        step.processing("[*] get OS image download link");
        let plan = self.images.plan(req.release);
        step.success(&format!("[+] OS image URL obtained: {}", plan.url));

        let step = Step::new(job, Some("OS preparation"), "validating OS image URL");
        step.processing("[*] check OS image URL availability");
        self.images.check(&plan).await.map_err(|e| {
            failed(
                &step,
                format!("[-] OS image URL is not accessible: {e}"),
                Cleanup::Nothing,
            )
        })?;
        step.success("[+] OS image URL is valid");

        // A concurrent install of the same image finishes its download first.
        let _slot = self.images.hold(&plan).await;
        if plan.path.is_file() {
            let step = Step::new(job, Some("OS preparation"), "using OS image");
            step.success(&format!("[+] using OS image {}", plan.path.display()));
            return Ok(plan.path);
        }
        let step = Step::new(job, Some("OS preparation"), "downloading OS image");
        step.processing("[*] start downloading OS image");
        let gate = ProgressGate::default();
        let progress = |done: u64, total: Option<u64>| {
            if gate.pass(done, total) {
                let line = match total {
                    Some(t) if t > 0 => {
                        format!(
                            "[*] downloaded {} of {} ({}%)",
                            mib(done),
                            mib(t),
                            done * 100 / t
                        )
                    }
                    _ => format!("[*] downloaded {}", mib(done)),
                };
                step.processing(line);
            }
        };
        self.images.download(&plan, &progress).await.map_err(|e| {
            failed(
                &step,
                format!("[-] failed to download OS image: {e}"),
                Cleanup::Nothing,
            )
        })?;
        step.success("[+] completed OS image download");
        Ok(plan.path)
    }

    /// Stage `SSH preparation`: pvedeck's key, created when there is none.
    async fn ssh_key(&self, job: &JobHandle) -> Result<KeyPair, Failure> {
        let dir = &self.config.ssh_key_dir;
        let step = Step::new(job, Some("SSH preparation"), "checking SSH key");
        step.processing("[*] SSH preparation");
        let _one_at_a_time = self.key_lock.lock().await;
        if let Some(pair) = sshkey::find(dir) {
            step.success(&format!(
                "[+] completed SSH preparation: {}",
                pair.public.display()
            ));
            return Ok(pair);
        }
        step.processing(format!("[*] no SSH key in {}", dir.display()));
        let step = Step::new(job, Some("SSH preparation"), "creating SSH key");
        step.processing("[*] create SSH key");
        let pair = sshkey::create(dir).await.map_err(|e| {
            failed(
                &step,
                format!("[-] failed to create SSH key: {e}"),
                Cleanup::Nothing,
            )
        })?;
        step.success(&format!(
            "[+] successfully created SSH key pair {}",
            pair.public.display()
        ));
        Ok(pair)
    }

    /// `VM creation > creating VM`: `qm create` (SPEC §3.3).
    async fn create(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        plan: &Plan,
    ) -> Result<(), Failure> {
        let step = Step::new(job, Some("VM creation"), "creating VM");
        step.processing("[*] VM creation");
        let cpu_type = self.cluster_cpu_type().await;
        step.processing(format!("[*] CPU type: {cpu_type} (cluster baseline)"));
        let mut options: QmOptions = [
            ("name", plan.name.clone()),
            ("cores", plan.cpu.to_string()),
            ("cpu", cpu_type.to_string()),
            ("scsihw", "virtio-scsi-pci".to_string()),
            ("memory", plan.ram.to_string()),
            ("ostype", "l26".to_string()),
            ("agent", "1".to_string()),
            ("net0", "virtio,bridge=vmbr0".to_string()),
            ("serial0", "socket".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(balloon) = self.balloon(plan.ram) {
            options.push(("numa".into(), "1".into()));
            options.push(("balloon".into(), balloon.to_string()));
        }
        let _ = req;
        self.call(
            Length::Short,
            "qm create",
            self.pve.create(&plan.node, plan.vmid, &options),
        )
        .await
        .map_err(call_failed(&step, "failed to create VM", Cleanup::Nothing))?;
        step.success("[+] VM created successfully");
        Ok(())
    }

    /// `importing disk image` and `initializing configuration`: a failure
    /// here destroys the half-made VM.
    async fn import_and_configure(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        plan: &Plan,
    ) -> Result<(), Failure> {
        let (node, vmid) = (plan.node.as_str(), plan.vmid);
        let step = Step::new(job, Some("VM creation"), "importing disk image");
        step.processing("[*] import disk image");
        // qemu-img prints every percent: relay every fifth, and the rest.
        let relay = |line: &str| {
            let pct = line
                .strip_prefix("transferred ")
                .and_then(|l| l.rsplit_once('('))
                .and_then(|(_, p)| p.split('.').next())
                .and_then(|p| p.parse::<u32>().ok());
            if pct.is_none_or(|p| p % 5 == 0) {
                step.relay(line);
            }
        };
        let volume = self
            .call(
                Length::Long,
                "qm importdisk",
                self.pve
                    .import_disk(node, vmid, &plan.image, &plan.storage, &relay),
            )
            .await
            .map_err(call_failed(
                &step,
                "failed to import disk image",
                Cleanup::Destroy,
            ))?;
        step.success(&format!("[+] disk image imported successfully as {volume}"));

        let step = Step::new(job, Some("VM initialization"), "initializing configuration");
        step.processing("[*] initializing VM");
        let fail = |e: String| {
            failed(
                &step,
                format!("[-] failed to initialize VM: {}", one_line(&e)),
                Cleanup::Destroy,
            )
        };
        let keys = self.sshkeys_file(req, plan).map_err(fail)?;
        let hash = crate::secret::hash_password(req.passwd.expose()).map_err(fail)?;
        let keys_path = keys.path().to_string_lossy().into_owned();
        let gateway = self.config.gateway;
        let sets: [Vec<(&str, String)>; 7] = [
            vec![("sshkeys", keys_path)],
            vec![("ciuser", req.user.clone()), ("cipassword", hash)],
            vec![("ciupgrade", "0".to_string())],
            vec![("tags", req.release.os.to_string())],
            vec![("scsi0", volume.clone())],
            vec![("ide2", format!("{}:cloudinit", plan.storage))],
            vec![("boot", "c".to_string()), ("bootdisk", "scsi0".to_string())],
        ];
        for set in sets {
            let options: QmOptions = set.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            self.call(Length::Short, "qm set", self.pve.set(node, vmid, &options))
                .await
                .map_err(|e| fail(e.to_string()))?;
        }
        drop(keys);
        self.resize_disk(&step, node, vmid, plan.disk_gb)
            .await
            .map_err(fail)?;
        let ipconfig: QmOptions = vec![(
            "ipconfig0".to_string(),
            format!("ip={}/24,gw={gateway}", plan.ip),
        )];
        self.call(Length::Short, "qm set", self.pve.set(node, vmid, &ipconfig))
            .await
            .map_err(|e| fail(e.to_string()))?;
        step.success("[+] VM initialized successfully");
        Ok(())
    }

    /// The key file for `--sshkeys`: pvedeck's key, the admin keys, the
    /// request's key. Mode 0600, removed when dropped.
    fn sshkeys_file(&self, req: &InstallRequest, plan: &Plan) -> Result<TempFile, String> {
        let mut text = std::fs::read_to_string(&plan.key.public)
            .map_err(|e| format!("cannot read {}: {e}", plan.key.public.display()))?;
        if let Some(admin) = &self.config.admin_keys_file {
            let keys = std::fs::read_to_string(admin)
                .map_err(|e| format!("cannot read {}: {e}", admin.display()))?;
            text.push('\n');
            text.push_str(&keys);
        }
        if let Some(key) = &req.pubkey {
            text.push('\n');
            text.push_str(key);
        }
        let text: String = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        TempFile::create(&self.config.data_dir.join("tmp"), &text)
    }

    /// `qm resize <vmid> scsi0 <n>G`, three tries five seconds apart. `qm
    /// resize` can exit 0 when its task failed, so the size is read back.
    async fn resize_disk(
        &self,
        step: &Step<'_>,
        node: &str,
        vmid: u32,
        gb: u64,
    ) -> Result<(), String> {
        let size = format!("{gb}G");
        let mut last = String::new();
        for attempt in 1..=RESIZE_TRIES {
            let resized = self
                .call(
                    Length::Short,
                    "qm resize",
                    self.pve.resize(node, vmid, "scsi0", &size),
                )
                .await;
            let confirmed = match resized {
                Ok(()) => self
                    .disk_size(node, vmid)
                    .await
                    .map(|bytes| bytes == gb << 30),
                Err(e) => Err(e.to_string()),
            };
            match confirmed {
                Ok(true) => return Ok(()),
                Ok(false) => last = format!("scsi0 is not {size} after qm resize"),
                Err(e) => last = e,
            }
            if attempt < RESIZE_TRIES {
                step.processing(format!(
                    "[*] resize attempt {attempt} failed: {}; retrying in 5s",
                    one_line(&last)
                ));
                self.pause(RESIZE_PAUSE_MS).await;
            }
        }
        Err(format!("failed to resize disk: {last}"))
    }

    /// `size=` of scsi0 in `qm config`.
    pub(super) async fn disk_size(&self, node: &str, vmid: u32) -> Result<u64, String> {
        let config = self
            .call(Length::Short, "qm config", self.pve.config(node, vmid))
            .await
            .map_err(|e| e.to_string())?;
        config
            .get("scsi0")
            .and_then(|d| crate::sim::drive_size(d))
            .ok_or_else(|| "scsi0 has no size in qm config".to_string())
    }

    /// Migration (when asked), start, readiness, the init script, reboot.
    async fn boot_and_initialize(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        plan: &mut Plan,
    ) -> Result<(), Failure> {
        let vmid = plan.vmid;
        if let Some(target) = req.node.as_ref().filter(|n| **n != plan.node) {
            let step = Step::new(job, Some("VM initialization"), "migrating VM");
            step.processing(format!("[*] migrate VM to node {target}"));
            let relay = |line: &str| step.relay(line);
            self.call(
                Length::Long,
                "qm migrate",
                self.pve.migrate(&plan.node, vmid, target, &relay),
            )
            .await
            .map_err(call_failed(&step, "failed to migrate VM", Cleanup::Keep))?;
            plan.node = target.clone();
            step.success(&format!("[+] VM migrated to node {target} successfully"));
        }

        let target = GuestTarget {
            ip: plan.ip,
            port: self.config.ssh_port,
            user: req.user.clone(),
            key: plan.key.private.clone(),
        };

        let step = Step::new(job, Some("VM initialization"), "waiting for ready");
        step.processing("[*] starting VM");
        self.call(
            Length::Short,
            "qm start",
            self.pve.power(&plan.node, vmid, PowerAction::Start),
        )
        .await
        .map_err(call_failed(&step, "failed to start VM", Cleanup::Keep))?;
        step.processing(format!(
            "[*] VM started {}",
            elapsed(step.started().elapsed())
        ));
        self.wait_for_ssh(&step, &target).await.map_err(|e| {
            failed(
                &step,
                format!("[-] failed to connect to VM via SSH: {e}"),
                Cleanup::Keep,
            )
        })?;
        step.success("[+] VM is ready");

        let step = Step::new(job, Some("VM initialization"), "SSH initialization");
        step.processing("[*] SSH initialization");
        let script = req.release.script_name();
        let main_ip = self
            .config
            .node_ip(&self.config.main_node)
            .unwrap_or(Ipv4Addr::LOCALHOST);
        let command = GuestCommand::InitScript {
            url: format!("http://{main_ip}:{}/sh/{script}", self.listen_port),
            script,
            root_password: self.config.vm_root_password.clone(),
        };
        let relay = |line: &str| step.relay(line);
        self.call(
            Length::Long,
            "ssh init script",
            self.pve.guest_exec(&target, &command, &relay),
        )
        .await
        .map_err(call_failed(
            &step,
            "failed to perform SSH initialization",
            Cleanup::Destroy,
        ))?;
        step.success("[+] SSH initialization completed");

        let step = Step::new(job, Some("VM initialization"), "rebooting VM");
        step.processing("[*] rebooting VM");
        self.call(
            Length::Short,
            "qm reboot",
            self.pve.power(&plan.node, vmid, PowerAction::Reboot),
        )
        .await
        .map_err(call_failed(&step, "failed to reboot VM", Cleanup::Keep))?;
        step.processing("[+] VM rebooting");
        self.wait_for_ssh(&step, &target).await.map_err(|e| {
            failed(
                &step,
                format!("[-] failed to connect to VM via SSH: {e}"),
                Cleanup::Keep,
            )
        })?;
        step.success("[+] VM is ready");
        Ok(())
    }

    /// `<user>@<ip> echo ready` every `SSH_POLL_INTERVAL_MS`, at most
    /// `SSH_POLL_ATTEMPTS` times.
    pub(super) async fn wait_for_ssh(
        &self,
        step: &Step<'_>,
        target: &GuestTarget,
    ) -> Result<(), String> {
        let attempts = self.config.ssh_poll_attempts;
        let quiet = |_: &str| {};
        for attempt in 1..=attempts {
            let answer = tokio::time::timeout(
                SSH_ATTEMPT_TIMEOUT,
                self.pve.guest_exec(target, &GuestCommand::Ready, &quiet),
            )
            .await;
            if let Ok(Ok(())) = answer {
                return Ok(());
            }
            if attempt % 6 == 0 {
                step.processing(format!(
                    "[*] waiting for SSH on {}:{} ({attempt}/{attempts})",
                    target.ip, target.port
                ));
            }
            if attempt < attempts {
                tokio::time::sleep(self.config.ssh_poll_interval).await;
            }
        }
        Err(format!("SSH timeout after {attempts} attempts"))
    }
}

/// A file that exists only as long as this value.
struct TempFile(PathBuf);

impl TempFile {
    fn create(dir: &std::path::Path, text: &str) -> Result<TempFile, String> {
        use std::os::unix::fs::OpenOptionsExt;
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("sshkeys-{}-{n}.pub", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        file.write_all(text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(TempFile(path))
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
