//! The install pipeline (docs/provisioning.md#the-install-pipeline): its
//! stages in order; what a failure leaves is `failure`'s. The rules the
//! stages apply live in their own modules:
//! VMIDs and addresses (`allocator`), the image stage (`images`), the SSH key
//! stage (`sshkey`), the storage check (`storage`), disk sizes (`disk`),
//! readiness (`readiness`), the CPU baseline (`cpu`), balloons (`memory`).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use pvedeck_config::{RootPassword, Secret};
use pvedeck_domain::os::Os;
use pvedeck_domain::request::{InstallMethod, InstallRequest, NodeChoice};
use pvedeck_domain::rules::Clamp;
use pvedeck_domain::scripts;
use pvedeck_domain::types::{JobKind, JobState};
use pvedeck_proxmox::{DiskImage, GuestCommand, GuestTarget, PowerAction, QmOptions, qm_options};

use super::allocator::{LateProbe, Reservation};
use super::failure::{Cleanup, Failure, failed};
use super::placement::Placed;
use super::readiness::Boot;
use super::report::{Out, Step, Turns, elapsed, one_line};
use super::sshkey::{self, KeyPair};
use super::stopping::stake;
use super::{Engine, EngineError, memory, scope, storage};
use crate::jobs::JobHandle;

/// A size as its validation step sets it, with an event when it changes:
/// `[*] setting RAM to minimum 512 for system stability` (go-pve-qemu's words).
fn settle<T: Copy + std::fmt::Display>(
    step: &Step<'_>,
    clamp: Clamp<T>,
    what: &str,
    unit: &str,
    why_minimum: &str,
) -> T {
    match clamp {
        Clamp::Raised(v) => {
            step.processing(format!(
                "[*] setting {what} to minimum {v}{unit}{why_minimum}"
            ));
        }
        Clamp::Lowered(v) => step.processing(format!("[*] setting {what} to maximum {v}{unit}")),
        Clamp::Kept(_) => {}
    }
    clamp.value()
}

/// Which summary an install ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Summary {
    /// go-pve-qemu's four lines (the import path, which its clients know):
    /// the fingerprint rides on the events only.
    Seed,
    /// A fifth line names the host key's fingerprint (the clone path).
    WithHostKey,
}

/// `VM initialization > finalizing`: the summary, each event with the VM's
/// id, address and host key fingerprint; a generated root password is shown
/// to whoever watches, once, and kept nowhere.
pub(super) fn finalizing(
    job: &JobHandle,
    started: Instant,
    (vmid, ip): (u32, Ipv4Addr),
    user: &str,
    host_key: Option<&str>,
    summary: Summary,
    generated: Option<&Secret>,
) {
    let step = Step::new(job, Some("VM initialization"), "finalizing");
    let ip = ip.to_string();
    let done = |message: String| step.done_keyed(message, vmid, &ip, host_key);
    done(format!(
        "[+] VM installation completed in {:.2}s",
        started.elapsed().as_secs_f64()
    ));
    done(format!("[*] VMID: {vmid}"));
    done(format!("[*] IP: {ip}"));
    done(format!("[*] User: {user}"));
    if let (Some(key), Summary::WithHostKey) = (host_key, summary) {
        done(format!("[*] Host key: {key}"));
    }
    if let Some(password) = generated {
        step.done_once(
            "[*] Root password: shown once, to whoever watched the install; not kept".to_string(),
            format!("[*] Root password: {}", password.expose()),
            (vmid, &ip, host_key),
        );
    }
}

/// The `--cipassword` of the request's user: a SHA-512 crypt hash of the
/// password it gave, or none, and the account logs in with keys only
/// (qemu-server's `Cloudinit.pm` writes no `password:` then, and
/// cloud-init leaves the default user's password locked).
pub(super) fn user_password_hash(
    req: &InstallRequest,
) -> Result<Option<String>, crate::secret::HashError> {
    req.passwd
        .as_ref()
        .map(|p| crate::secret::hash_password(p.expose()))
        .transpose()
}

/// What the `preparation` stage settles.
pub(super) struct Prepared {
    pub(super) vmid: u32,
    pub(super) ip: Ipv4Addr,
    pub(super) late: Option<LateProbe>,
    pub(super) name: String,
    pub(super) cpu: u32,
    pub(super) ram: u64,
    pub(super) disk_gb: u64,
}

/// The install's settled values, once preparation is done.
struct Plan {
    vmid: u32,
    ip: Ipv4Addr,
    /// The end of the address probe, read before the VM gets the address.
    late: Option<LateProbe>,
    name: String,
    cpu: u32,
    ram: u64,
    disk_gb: u64,
    image: DiskImage,
    key: KeyPair,
    /// The node the VM is on: where it was placed, else the main node
    /// (then the migration target).
    node: String,
    /// The fingerprint of the host key recorded at first contact.
    host_key: Option<String>,
    /// A root password made for this VM (`VM_ROOT_PASSWORD=random`).
    root_password: Option<Secret>,
    /// It gets the IP filter (decided at `creating VM`).
    filtered: bool,
}

impl Engine {
    /// Checks what can be checked before a job exists, starts the install
    /// job and returns its id. A refused request has run no `qm`.
    pub async fn install(self: &Arc<Self>, request: InstallRequest) -> Result<u64, EngineError> {
        self.refuse_when_stopping()?;
        let asked = request
            .id
            .map(|id| self.allocator.check_asked(id))
            .transpose()?;
        if let Some(node) = request.node.as_ref().and_then(NodeChoice::named) {
            let view = self.cluster.recent().await?;
            if !view.snapshot.nodes.iter().any(|n| n.node == node.as_str()) {
                return Err(EngineError::bad(format!(
                    "node '{node}' is not a node of the cluster"
                )));
            }
        }
        let reservation = match asked {
            None => None,
            Some(id) => Some(self.allocator.reserve_explicit(id, &self.proxmox).await?),
        };
        // Placed before the job exists: a request no node can take is
        // refused with nothing made (docs/provisioning.md#placement).
        let placed = match request.node {
            Some(NodeChoice::Auto) => Some(self.place(&request).await?),
            _ => None,
        };

        let named = match request.name.as_str() {
            "" => String::new(),
            name => format!(" \"{name}\""),
        };
        let title = format!(
            "install {} {}{named}",
            request.release.os, request.release.version
        );
        let job = self.start_job(JobKind::Install, asked, &title)?;
        let id = job.id();
        let engine = self.clone();
        self.spawn_job(job, move |job| async move {
            engine.run_install(&job, request, reservation, placed).await;
        });
        Ok(id)
    }

    async fn run_install(
        self: Arc<Self>,
        job: &JobHandle,
        request: InstallRequest,
        reservation: Option<Reservation>,
        placed: Option<Placed>,
    ) {
        let started = Instant::now();
        self.warm_up();
        // The reservation lives until the job ends (it is dropped last);
        // so does the placement, whose VM the snapshot counts by then.
        let mut held = reservation;
        let placed = placed.as_ref();
        let result = match self.method(&request) {
            InstallMethod::Import => {
                self.install_steps(job, &request, (&mut held, placed), started)
                    .await
            }
            InstallMethod::Clone => {
                self.clone_steps(job, &request, (&mut held, placed), started)
                    .await
            }
        };
        match result {
            Ok(()) => job.finish(JobState::Succeeded, None, None),
            Err((failure, vm)) => self.fail_job(job, failure, vm).await,
        }
        drop(held);
    }

    /// How the request installs: as it asks, else `INSTALL_METHOD`.
    fn method(&self, req: &InstallRequest) -> InstallMethod {
        req.method.unwrap_or(self.config.install_method)
    }

    /// Reads now, beside the VMID probe, what the storage check and
    /// `qm create` need later: the cluster snapshot when it is not recent,
    /// the CPU baseline once per process. A failure here is told by the
    /// step that reads it again.
    fn warm_up(self: &Arc<Self>) {
        let engine = self.clone();
        tokio::spawn(async move {
            if let Ok(view) = engine.cluster.recent().await {
                let nodes = &view.snapshot.nodes;
                let _ = engine.cpu_baseline.detect(&engine.proxmox, nodes).await;
            }
        });
    }

    /// Runs the stages; on failure returns what failed and, once a VM
    /// exists, its id and node.
    async fn install_steps(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        (held, placed): (&mut Option<Reservation>, Option<&Placed>),
        started: Instant,
    ) -> Result<(), (Failure, Option<(u32, String)>)> {
        let mut plan = self
            .prepare(job, req, held, placed)
            .await
            .map_err(|f| (f, None))?;
        job.set_vmid(plan.vmid);
        self.claim(job, plan.vmid);

        // A failed `qm create` leaves no VM; after it, a failure knows the
        // VM. One cut short in the middle may have made it: half-made.
        job.stake(stake(plan.vmid, &plan.node, Cleanup::Destroy));
        plan.filtered = self
            .create(job, req.release.os, &plan)
            .await
            .map_err(|f| (f, None))?;
        let at = |plan: &Plan| Some((plan.vmid, plan.node.clone()));
        self.import_and_configure(job, req, &mut plan)
            .await
            .map_err(|f| (f, at(&plan)))?;
        self.boot_and_initialize(job, req, placed, &mut plan)
            .await
            .map_err(|f| (f, at(&plan)))?;

        finalizing(
            job,
            started,
            (plan.vmid, plan.ip),
            &req.user,
            plan.host_key.as_deref(),
            Summary::Seed,
            plan.root_password.as_ref(),
        );
        Ok(())
    }

    /// Stages `preparation`, `OS preparation` and `SSH preparation`: nothing
    /// exists on the cluster yet. The three work at once (the image's `HEAD`
    /// and download need not wait for the VMID probe), and report in the
    /// seed's order, each step with its own elapsed time. A failed stage
    /// is reported once the ones before it are; a failed preparation stops
    /// the others.
    async fn prepare(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        held: &mut Option<Reservation>,
        placed: Option<&Placed>,
    ) -> Result<Plan, Failure> {
        // A placed VM is made where it was placed, its image fetched there
        // (docs/provisioning.md#placement) — where the backend can import
        // on that node; else on the main node, then migrated.
        let node = match placed {
            Some(p) if self.proxmox.imports_on_any_node() => p.choice.node.as_str(),
            _ => self.config.main_node.as_str(),
        };
        let turns = Turns::new(job, 3);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            // An error means the sender is gone: nothing will stop us then.
            if rx.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        // A stage passes the turn on only when it succeeded: what later
        // stages did is never told after a failure.
        let preparation = async {
            let result = self
                .preparation(Out::Turn(&turns, 0), req, held, placed)
                .await;
            match &result {
                Ok(_) => turns.finish(0),
                Err(_) => {
                    let _ = stop.send(true);
                }
            }
            result
        };
        let image = async {
            tokio::select! {
                r = self.os_image_stage(Out::Turn(&turns, 1), &req.release, node) => {
                    if r.is_ok() {
                        turns.finish(1);
                    }
                    Some(r)
                }
                () = until_stopped(stopped.clone()) => None,
            }
        };
        let key = async {
            tokio::select! {
                r = self.ssh_key_stage(Out::Turn(&turns, 2)) => {
                    if r.is_ok() {
                        turns.finish(2);
                    }
                    Some(r)
                }
                () = until_stopped(stopped.clone()) => None,
            }
        };
        let (prepared, image, key) = tokio::join!(preparation, image, key);
        let p = prepared?;
        match (image, key) {
            (Some(Ok(image)), Some(Ok(key))) => Ok(Plan {
                vmid: p.vmid,
                ip: p.ip,
                late: p.late,
                name: p.name,
                cpu: p.cpu,
                ram: p.ram,
                disk_gb: p.disk_gb,
                image,
                key,
                node: node.to_string(),
                host_key: None,
                root_password: None,
                filtered: false,
            }),
            (Some(Err(failure)), _) | (_, Some(Err(failure))) => Err(failure),
            // Only a failed preparation stops the others, and it returned above.
            (None, _) | (_, None) => Err(Failure {
                step: "preparation".to_string(),
                message: "[-] the preparation was stopped".to_string(),
                cleanup: Cleanup::Nothing,
                took: std::time::Duration::ZERO,
            }),
        }
    }

    /// Stage `preparation`: the VMID, the address, the sizes, the name,
    /// where it was placed (`"node":"auto"`), the storage pool.
    pub(super) async fn preparation(
        &self,
        out: Out<'_>,
        req: &InstallRequest,
        held: &mut Option<Reservation>,
        placed: Option<&Placed>,
    ) -> Result<Prepared, Failure> {
        let cfg = &self.config;

        let step = Step::new(out, Some("preparation"), "checking VMID");
        step.processing("[*] start VM installation");
        let (vmid, late) = match held {
            Some(r) => {
                step.success(&format!("[+] using specified VMID: {}", r.vmid));
                (r.vmid, None)
            }
            None => {
                let a = self
                    .allocator
                    .allocate(&self.proxmox, cfg.ssh_port)
                    .await
                    .map_err(failed(&step, "failed to find free VMID", Cleanup::Nothing))?;
                let vmid = a.reservation.vmid;
                step.success(&format!("[+] auto-assigned VMID: {vmid}"));
                *held = Some(a.reservation);
                (vmid, a.late)
            }
        };
        if let Some(p) = placed {
            // From now on the snapshot's figures of this VM count for it.
            p.hold.for_vm(vmid);
        }

        let step = Step::new(out, Some("preparation"), "assigning IP");
        let ip = self
            .allocator
            .address(vmid)
            .map_err(|e| Failure::new(&step, format!("[-] {e}"), Cleanup::Nothing))?;
        step.success(&format!("[+] assigned IP: {ip}/24"));

        let limits = &cfg.limits;
        let step = Step::new(out, Some("preparation"), "validating CPU and RAM");
        let cpu = settle(&step, limits.clamp_cpu(req.cpu), "CPU", "", "");
        let why = " for system stability";
        let ram = settle(&step, limits.clamp_ram(req.ram), "RAM", "", why);
        step.success("[+] CPU and RAM validated");

        let step = Step::new(out, Some("preparation"), "validating disk size");
        let disk_gb = settle(&step, limits.clamp_disk(req.disk_gb), "disk", "G", "");
        step.success("[+] disk size validated");

        let step = Step::new(out, Some("preparation"), "setting default config values");
        step.processing("[*] set default config values");
        let clone = self.method(req) == InstallMethod::Clone;
        let name = pvedeck_domain::rules::vm_name(&req.name, vmid, clone);
        step.success(&format!(
            "[+] default config values set (name {name}, user {})",
            req.user
        ));

        if let Some(p) = placed {
            // Decided before the job began (a request no node takes is
            // refused); told here, in the order the seed's steps keep.
            let step = Step::new(out, Some("preparation"), "placing VM");
            step.processing("[*] place VM on the node with the most free memory (node auto)");
            for (node, why) in &p.choice.ruled_out {
                step.processing(format!("[*] {node} ruled out: {why}"));
            }
            if p.choice.node != cfg.main_node && !self.proxmox.imports_on_any_node() {
                step.processing(format!(
                    "[*] made on {} and migrated to {}: with PVE_BACKEND=cli the image is a file on {} only",
                    cfg.main_node, p.choice.node, cfg.main_node
                ));
            }
            step.success(&format!("[+] {}", p.choice.summary()));
        }

        let storage = &cfg.assign_storage;
        let step = Step::new(out, Some("preparation"), "checking storage pool");
        step.processing(format!("[*] check storage pool: {storage}"));
        let checked = match placed {
            // The placed node's own storages, as placement read them.
            Some(p) => storage::check(&p.storages, storage),
            None => match self.cluster.recent().await {
                Ok(view) => storage::check(&view.snapshot.storages, storage),
                Err(e) => Err(e.into()),
            },
        };
        checked.map_err(|e| Failure::new(&step, format!("[-] {e}"), Cleanup::Nothing))?;
        match placed {
            Some(p) => step.success(&format!(
                "[+] storage pool {storage} is available on {}",
                p.choice.node
            )),
            None => step.success(&format!("[+] storage pool {storage} is available")),
        }

        Ok(Prepared {
            vmid,
            ip,
            late,
            name,
            cpu,
            ram,
            disk_gb,
        })
    }

    /// `VM creation > creating VM`: `qm create` (docs/provisioning.md#qm-create);
    /// whether the VM gets the IP filter.
    async fn create(&self, job: &JobHandle, os: Os, plan: &Plan) -> Result<bool, Failure> {
        let step = Step::new(job, Some("VM creation"), "creating VM");
        let tags = format!("{os};{}", scope::TAG);
        self.create_vm(
            &step,
            &plan.node,
            plan.vmid,
            (&plan.name, tags, job.owner()),
            plan.cpu,
            plan.ram,
        )
        .await
    }

    /// `qm create` with the cluster's CPU baseline (docs/provisioning.md#qm-create): a failure
    /// leaves no VM. Whether its `net0` goes through the firewall, for
    /// the IP filter to be set before the first boot.
    pub(super) async fn create_vm(
        &self,
        step: &Step<'_>,
        node: &str,
        vmid: u32,
        (name, tags, owner): (&str, String, Option<&str>),
        cpu: u32,
        ram: u64,
    ) -> Result<bool, Failure> {
        step.processing("[*] VM creation");
        let filtered = self.ip_filter_wanted(step).await;
        let nodes = match self.cluster.recent().await {
            Ok(view) => view.snapshot.nodes.clone(),
            Err(e) => return Err(failed(step, "failed to create VM", Cleanup::Nothing)(e)),
        };
        let cpu_type = self
            .cpu_baseline
            .detect(&self.proxmox, &nodes)
            .await
            .map_err(failed(step, "failed to create VM", Cleanup::Nothing))?;
        step.processing(format!("[*] CPU type: {cpu_type} (cluster baseline)"));
        let mut options: QmOptions = qm_options([
            ("name", name.to_string()),
            ("cores", cpu.to_string()),
            ("cpu", cpu_type.to_string()),
            ("scsihw", "virtio-scsi-pci".to_string()),
            ("memory", ram.to_string()),
            ("ostype", "l26".to_string()),
            ("agent", "1".to_string()),
            ("net0", super::ipfilter::net0(filtered)),
            ("serial0", "socket".to_string()),
            // Whose it is, from its first moment: a VM pvedeck is making
            // is one it manages (`MANAGE`), even half-made.
            ("tags", tags),
        ]);
        if let Some(owner) = owner {
            // Whose it is, where another pvedeck (or a fresh database) can
            // read it again: the Proxmox notes.
            options.push(("description".into(), super::tenancy::owner_notes(owner)));
        }
        options.extend(memory::balloon_options(ram, self.config.vm_balloon_min_mb));
        self.proxmox
            .create(node, vmid, &options)
            .await
            .map_err(failed(step, "failed to create VM", Cleanup::Nothing))?;
        step.success("[+] VM created successfully");
        Ok(filtered)
    }

    /// `importing disk image` and `initializing configuration`: a failure
    /// here destroys the half-made VM.
    async fn import_and_configure(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        plan: &mut Plan,
    ) -> Result<(), Failure> {
        let late = plan.late.take();
        let (node, vmid) = (plan.node.as_str(), plan.vmid);
        let storage = &self.config.assign_storage;
        let step = Step::new(job, Some("VM creation"), "importing disk image");
        let volume = self.import_image(&step, node, vmid, &plan.image).await?;
        step.success(&format!("[+] disk image imported successfully as {volume}"));

        let step = Step::new(job, Some("VM initialization"), "initializing configuration");
        step.processing("[*] initializing VM");
        // The address probe went on beside the creation and the import; the
        // VM gets the address only if nothing answered there after all.
        if let Some(probe) = late
            && let Some(why) = probe.stranger(self.config.ssh_port, vmid).await
        {
            return Err(Failure::new(
                &step,
                format!("[-] failed to initialize VM: {why}"),
                Cleanup::Destroy,
            ));
        }
        let fail = |e: &dyn std::fmt::Display| {
            Failure::new(
                &step,
                format!("[-] failed to initialize VM: {}", one_line(&e.to_string())),
                Cleanup::Destroy,
            )
        };
        let keys = sshkey::key_file(
            &plan.key,
            self.config.admin_keys_file.as_deref(),
            req.pubkey.as_deref(),
            &self.config.data_dir.join("tmp"),
        )
        .map_err(|e| fail(&e))?;
        let hash = user_password_hash(req).map_err(|e| fail(&e))?;
        // One `qm set` with everything Proxmox takes together (one Perl
        // start-up instead of eight); the disk is attached before it is
        // resized, and all of it is set before `qm start`.
        let mut options: QmOptions = qm_options([
            ("sshkeys", keys.path().to_string_lossy().into_owned()),
            ("ciuser", req.user.clone()),
        ]);
        options.extend(hash.map(|h| ("cipassword".to_string(), h)));
        options.extend(qm_options([
            ("ciupgrade", "0".to_string()),
            ("scsi0", volume.clone()),
            ("ide2", format!("{storage}:cloudinit")),
            ("boot", "c".to_string()),
            ("bootdisk", "scsi0".to_string()),
            (
                "ipconfig0",
                format!("ip={}/24,gw={}", plan.ip, self.config.gateway),
            ),
        ]));
        self.proxmox
            .set(node, vmid, &options)
            .await
            .map_err(|e| fail(&e))?;
        drop(keys);
        self.resize_to(&step, node, vmid, plan.disk_gb)
            .await
            .map_err(|e| fail(&e))?;
        step.success("[+] VM initialized successfully");
        if plan.filtered {
            self.ip_filter_step(Out::Job(job), "VM initialization", (node, vmid), plan.ip)
                .await?;
        }
        Ok(())
    }

    /// Migration (when asked), start, readiness, the init script, reboot.
    async fn boot_and_initialize(
        &self,
        job: &JobHandle,
        req: &InstallRequest,
        placed: Option<&Placed>,
        plan: &mut Plan,
    ) -> Result<(), Failure> {
        let vmid = plan.vmid;
        // A node named moves the VM there; a placed one was made there,
        // unless the backend could only import on the main node.
        let wanted = match (&req.node, placed) {
            (Some(NodeChoice::Named(n)), _) => Some(n.as_str()),
            (_, Some(p)) => Some(p.choice.node.as_str()),
            _ => None,
        };
        if let Some(target) = wanted.filter(|n| *n != plan.node) {
            self.migrate_step(job, &plan.node, vmid, target).await?;
            plan.node = target.to_string();
        }

        // A VM that had this address before had another host key: this
        // one's is recorded at first contact.
        self.forget_host(plan.ip);
        let target = GuestTarget {
            ip: plan.ip,
            port: self.config.ssh_port,
            user: req.user.clone(),
            key: plan.key.private.clone(),
            known_hosts: Some(self.known_hosts()),
        };

        job.stake(stake(vmid, &plan.node, Cleanup::Keep));
        let step = Step::new(job, Some("VM initialization"), "waiting for ready");
        step.processing("[*] starting VM");
        let machine_id = self
            .power_until_ready(&step, &plan.node, vmid, &target, Boot::Start)
            .await?;

        job.stake(stake(vmid, &plan.node, Cleanup::Destroy));
        let step = Step::new(job, Some("VM initialization"), "SSH initialization");
        step.processing("[*] SSH initialization");
        // The root password goes only to a VM whose identity is its own.
        plan.host_key = self
            .first_contact_identity(vmid, plan.ip, machine_id)
            .await
            .map_err(|why| Failure::new(&step, format!("[-] {why}"), Cleanup::Keep))?;
        let root_password = match &self.config.vm_root_password {
            None => None,
            Some(RootPassword::Shared(password)) => Some(password.clone()),
            Some(RootPassword::Random) => {
                let made = crate::secret::random_password().map_err(failed(
                    &step,
                    "failed to perform SSH initialization",
                    Cleanup::Destroy,
                ))?;
                plan.root_password = Some(Secret::new(&made));
                plan.root_password.clone()
            }
        };
        self.init_script(&step, &target, &req.release, root_password)
            .await?;
        step.success("[+] SSH initialization completed");

        job.stake(stake(vmid, &plan.node, Cleanup::Keep));
        let step = Step::new(job, Some("VM initialization"), "rebooting VM");
        step.processing("[*] rebooting VM");
        self.power_until_ready(&step, &plan.node, vmid, &target, Boot::Reboot)
            .await
            .map(drop)
    }

    /// The release's init script, sent over the SSH session, its output
    /// relayed; a failure destroys the half-made VM.
    pub(super) async fn init_script(
        &self,
        step: &Step<'_>,
        target: &GuestTarget,
        release: &pvedeck_domain::os::Release,
        root_password: Option<Secret>,
    ) -> Result<(), Failure> {
        let name = release.script_name();
        let body = scripts::script(&name, self.config.init_scripts).ok_or_else(|| {
            Failure::new(
                step,
                format!("[-] failed to perform SSH initialization: no script {name}"),
                Cleanup::Destroy,
            )
        })?;
        // The clear text never leaves pvedeck: the script gets its hash.
        let hash = root_password
            .as_ref()
            .map(|p| crate::secret::hash_password(p.expose()))
            .transpose()
            .map_err(failed(
                step,
                "failed to perform SSH initialization",
                Cleanup::Destroy,
            ))?;
        let command = GuestCommand::InitScript {
            body: scripts::with_root_hash(&body, hash.as_deref()),
            name,
        };
        let relay = |line: &str| step.relay(line);
        self.proxmox
            .guest_init(target, &command, &relay)
            .await
            .map_err(failed(
                step,
                "failed to perform SSH initialization",
                Cleanup::Destroy,
            ))
    }

    /// `VM creation > importing disk image`'s work: `qm importdisk` of the
    /// cached image into `ASSIGN_STORAGE`, its progress relayed; the
    /// imported volume. A failure destroys the half-made VM.
    pub(super) async fn import_image(
        &self,
        step: &Step<'_>,
        node: &str,
        vmid: u32,
        image: &DiskImage,
    ) -> Result<String, Failure> {
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
        let storage = &self.config.assign_storage;
        self.proxmox
            .import_disk(node, vmid, image, storage, &relay)
            .await
            .map_err(failed(
                step,
                "failed to import disk image",
                Cleanup::Destroy,
            ))
    }

    /// `VM initialization > migrating VM` (a node was asked): a failure
    /// keeps the VM (docs/provisioning.md#failure-contract).
    pub(super) async fn migrate_step(
        &self,
        job: &JobHandle,
        node: &str,
        vmid: u32,
        target: &str,
    ) -> Result<(), Failure> {
        job.stake(stake(vmid, node, Cleanup::Keep));
        let step = Step::new(job, Some("VM initialization"), "migrating VM");
        step.processing(format!("[*] migrate VM to node {target}"));
        let relay = |line: &str| step.relay(line);
        self.proxmox
            .migrate(node, vmid, target, &relay)
            .await
            .map_err(failed(&step, "failed to migrate VM", Cleanup::Keep))?;
        step.success(&format!("[+] VM migrated to node {target} successfully"));
        Ok(())
    }

    /// `qm start` or `qm reboot`, then the wait for SSH: a failure of either
    /// keeps the VM (docs/provisioning.md#failure-contract), with the seed's message for each. The
    /// machine-id the guest told at that contact, if any.
    pub(super) async fn power_until_ready(
        &self,
        step: &Step<'_>,
        node: &str,
        vmid: u32,
        target: &GuestTarget,
        boot: Boot,
    ) -> Result<Option<String>, Failure> {
        let (action, refused) = match boot {
            Boot::Start => (PowerAction::Start, "failed to start VM"),
            Boot::Reboot => (PowerAction::Reboot, "failed to reboot VM"),
        };
        self.proxmox
            .power(node, vmid, action)
            .await
            .map_err(failed(step, refused, Cleanup::Keep))?;
        match boot {
            Boot::Start => step.processing(format!(
                "[*] VM started {}",
                elapsed(step.started().elapsed())
            )),
            Boot::Reboot => step.processing("[+] VM rebooting"),
        }
        let machine_id = self.wait_for_ssh(step, target, boot).await.map_err(failed(
            step,
            "failed to connect to VM via SSH",
            Cleanup::Keep,
        ))?;
        step.success("[+] VM is ready");
        Ok(machine_id)
    }
}
