//! Golden templates (docs/provisioning.md#golden-templates): one per OS
//! release, built once by a job of its own. The cached image is imported into
//! a VM of the template range, which boots on an address borrowed from the
//! pool, runs the init script (guest agent, locale, time zone, swap) and has
//! its identity cleaned — machine-id and SSH host keys, so that every clone
//! writes its own at first boot — then shuts down and becomes a template. Any
//! failure of a build destroys what it made: a half-built template is of no
//! use.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use pvedeck_domain::os::Release;
use pvedeck_domain::types::{JobKind, JobState, TemplateInfo};
use pvedeck_proxmox::{GuestTarget, IpFilter, PowerAction, QmOptions, VmResource, qm_options};
use pvedeck_support::clock::now_ms;
use pvedeck_support::sync::lock;

use super::allocator::Reservation;
use super::failure::{Cleanup, Failure, failed};
use super::identity::IdentityError;
use super::readiness::Boot;
use super::report::{Out, Step};
use super::scope::{RETIRED_TAG, TEMPLATE_TAG};
use super::stopping::stake;
use super::{Engine, EngineError, sshkey, storage};
use crate::jobs::JobHandle;
use crate::store::TemplateBuilt;

/// What removes a booted guest's identity: the next boot (a clone's first)
/// writes a new machine-id and new host keys.
const CLEAN_IDENTITY: &str = "cloud-init clean --logs --machine-id && rm -f /etc/ssh/ssh_host_*";

/// Templates being built: template VMID → (name, job id).
pub type Builds = std::sync::Mutex<BTreeMap<u32, (String, u64)>>;

/// One line of the list: `state` is `ready`, `retired` or `building`.
fn info(
    (vmid, name, node): (u32, &str, &str),
    state: &str,
    job: Option<u64>,
    record: Option<&TemplateBuilt>,
) -> TemplateInfo {
    let release = pvedeck_domain::os::RELEASES
        .iter()
        .find(|r| r.template_name() == name);
    TemplateInfo {
        vmid,
        name: name.to_string(),
        os: release.map(|r| r.os.to_string()).unwrap_or_default(),
        version: release.map(|r| r.version.to_string()).unwrap_or_default(),
        node: node.to_string(),
        state: state.to_string(),
        job: job.or(record.map(|r| r.job)),
        built: record.map(|r| r.built),
        image: record.map(|r| r.image.clone()),
    }
}

/// The template a rebuild replaces.
#[derive(Debug, Clone)]
struct Replacing {
    vmid: u32,
    node: String,
}

/// Removes a build from the running ones when its job ends, however.
struct Building<'a> {
    builds: &'a Builds,
    vmid: u32,
}

impl Engine {
    /// The templates pvedeck built that are ready to clone: tagged, in the
    /// range, not being built, not retired.
    pub(super) fn ready_templates<'a>(
        &self,
        vms: &'a [VmResource],
    ) -> impl Iterator<Item = &'a VmResource> + use<'a, '_> {
        let builds = self.builds();
        vms.iter().filter(move |vm| {
            self.is_ours(vm) && !vm.has_tag(RETIRED_TAG) && !builds.contains_key(&vm.vmid)
        })
    }
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        let mut builds = lock(self.builds);
        builds.remove(&self.vmid);
    }
}

impl Engine {
    pub(super) fn builds(&self) -> BTreeMap<u32, (String, u64)> {
        lock(&self.template_builds).clone()
    }

    /// A template pvedeck built: in the template range, tagged.
    pub(super) fn is_ours(&self, vm: &VmResource) -> bool {
        vm.template && self.config.template_ids.contains(&vm.vmid) && vm.has_tag(TEMPLATE_TAG)
    }

    /// `GET /api/templates`: the ready and retired ones, and those being
    /// built, with what each was built from and when.
    pub async fn templates(&self) -> Result<Vec<TemplateInfo>, EngineError> {
        let view = self.cluster.read().await?;
        let records = self.jobs.templates(&self.config.cluster).await?;
        let record = |vmid: u32| records.iter().find(|r| r.vmid == vmid);
        let builds = self.builds();
        let mut list: Vec<TemplateInfo> = view
            .snapshot
            .vms
            .iter()
            .filter(|vm| self.is_ours(vm) && !builds.contains_key(&vm.vmid))
            .map(|vm| {
                let state = if vm.has_tag(RETIRED_TAG) {
                    "retired"
                } else {
                    "ready"
                };
                let name = vm.name.as_deref().unwrap_or("");
                info((vm.vmid, name, &vm.node), state, None, record(vm.vmid))
            })
            .collect();
        for (vmid, (name, job)) in builds {
            let at = (vmid, name.as_str(), self.config.main_node.as_str());
            list.push(info(at, "building", Some(job), None));
        }
        list.sort_by_key(|t| t.vmid);
        Ok(list)
    }

    /// `POST /api/templates`: refuses a release whose template exists or is
    /// being built (409), picks the template's id, starts the build job.
    pub async fn build_template(self: &Arc<Self>, release: Release) -> Result<u64, EngineError> {
        self.start_build(release, None).await
    }

    /// A template pvedeck built, read fresh from the cluster; else 404.
    async fn our_template(&self, vmid: u32) -> Result<VmResource, EngineError> {
        let vms = self.proxmox.cluster_vms().await?;
        vms.into_iter()
            .find(|vm| vm.vmid == vmid && self.is_ours(vm))
            .ok_or_else(|| {
                EngineError::NotFound(format!("VM {vmid} is not a template pvedeck built"))
            })
    }

    /// `POST /api/templates/:id/rebuild`: builds the release's template
    /// anew (the old one serves clones meanwhile), then retires the old
    /// one: destroyed, or kept and tagged [`RETIRED_TAG`] while linked clones
    /// use its disk.
    pub async fn rebuild_template(self: &Arc<Self>, vmid: u32) -> Result<u64, EngineError> {
        let vm = self.our_template(vmid).await?;
        let name = vm.name.as_deref().unwrap_or("");
        if vm.has_tag(RETIRED_TAG) {
            return Err(EngineError::Conflict(format!(
                "template {name} (VM {vmid}) is retired: build its release instead"
            )));
        }
        let release = pvedeck_domain::os::RELEASES
            .iter()
            .find(|r| r.template_name() == name)
            .copied()
            .ok_or_else(|| {
                EngineError::Conflict(format!(
                    "template {vmid} is named {name:?}, which names no release pvedeck knows"
                ))
            })?;
        let replacing = Replacing {
            vmid,
            node: vm.node.clone(),
        };
        self.start_build(release, Some(replacing)).await
    }

    async fn start_build(
        self: &Arc<Self>,
        release: Release,
        replacing: Option<Replacing>,
    ) -> Result<u64, EngineError> {
        let name = release.template_name();
        // A fresh read: the id must be free now, not two seconds ago.
        let vms = self.proxmox.cluster_vms().await?;
        let replaced = replacing.as_ref().map(|r| r.vmid);
        if let Some(vm) = vms.iter().find(|vm| {
            self.is_ours(vm)
                && !vm.has_tag(RETIRED_TAG)
                && vm.name.as_deref() == Some(name.as_str())
                && Some(vm.vmid) != replaced
        }) {
            return Err(EngineError::Conflict(format!(
                "template {name} exists (VM {}): rebuild or delete it",
                vm.vmid
            )));
        }
        // Checking, choosing the id and starting the job under one lock: two
        // requests cannot both build the release or take the same id.
        let (vmid, job) = {
            let mut builds = lock(&self.template_builds);
            if let Some((_, job)) = builds.values().find(|(n, _)| *n == name) {
                return Err(EngineError::Conflict(format!(
                    "template {name} is being built (job {job})"
                )));
            }
            let range = self.config.template_ids.clone();
            let vmid = range
                .clone()
                .find(|id| !vms.iter().any(|vm| vm.vmid == *id) && !builds.contains_key(id))
                .ok_or_else(|| {
                    EngineError::Conflict(format!(
                        "no free VMID in the template range {}-{}",
                        range.start(),
                        range.end()
                    ))
                })?;
            let job = self.start_job(JobKind::Template, Some(vmid), &format!("template {name}"))?;
            builds.insert(vmid, (name.clone(), job.id()));
            (vmid, job)
        };
        let id = job.id();
        let engine = self.clone();
        self.spawn_job(job, move |job| async move {
            let _building = Building {
                builds: &engine.template_builds,
                vmid,
            };
            engine
                .run_template(&job, release, (vmid, name), replacing)
                .await;
        });
        Ok(id)
    }

    async fn run_template(
        &self,
        job: &JobHandle,
        release: Release,
        (vmid, name): (u32, String),
        replacing: Option<Replacing>,
    ) {
        let started = Instant::now();
        // The borrowed address goes back when the job ends.
        let mut held: Option<Reservation> = None;
        let node = self.config.main_node.clone();
        let result = self
            .template_steps(job, &release, vmid, &name, &node, &mut held)
            .await;
        match result {
            Ok(image) => {
                let record = TemplateBuilt {
                    vmid,
                    image,
                    built: now_ms(),
                    job: job.id(),
                };
                if let Err(e) = self.jobs.record_template(&self.config.cluster, &record) {
                    // The template works; only its age and image go unshown.
                    tracing::warn!(vmid, "cannot record the template build: {e}");
                }
                // Ready before the job says so: whoever follows the job (an
                // install waiting for this template) finds it at once.
                lock(&self.template_builds).remove(&vmid);
                if let Some(old) = replacing {
                    self.retire(job, &release, old).await;
                }
                let step = Step::new(job, Some("template build"), "finalizing");
                step.made(
                    format!(
                        "[+] template {name} (VM {vmid}) built in {:.2}s",
                        started.elapsed().as_secs_f64()
                    ),
                    vmid,
                );
                job.finish(JobState::Succeeded, None, None);
            }
            Err((failure, made)) => {
                let vm = made.then(|| (vmid, node.clone()));
                self.fail_job(job, failure, vm).await;
            }
        }
        // The template's key at the borrowed address is not the next VM's.
        if let Some(lent) = &held
            && let Ok(ip) = self.allocator.address(lent.vmid)
        {
            self.forget_host(ip);
        }
        drop(held);
    }

    /// A rebuild's last step: no clone comes from the old template any
    /// more; it goes, unless linked clones use its disk. Its failure does
    /// not fail the build: the new template is ready either way.
    async fn retire(&self, job: &JobHandle, release: &Release, old: Replacing) {
        let step = Step::new(job, Some("template build"), "retiring the old template");
        let vmid = old.vmid;
        let tags = qm_options([(
            "tags",
            format!("{TEMPLATE_TAG};{RETIRED_TAG};{}", release.os),
        )]);
        let tagged = self.proxmox.set(&old.node, vmid, &tags).await;
        match self.proxmox.destroy(&old.node, vmid, false).await {
            Ok(()) => step.success(&format!("[+] old template {vmid} destroyed")),
            Err(e) if e.is_base_in_use() && tagged.is_ok() => step.success(&format!(
                "[*] old template {vmid} kept, retired: linked clones use its disk; \
                 delete it once they are gone"
            )),
            Err(e) => {
                let why = tagged.err().unwrap_or(e);
                step.success(&format!(
                    "[*] old template {vmid} could not be retired: {}",
                    super::one_line(&why.to_string())
                ));
            }
        }
    }

    /// The build's steps, and the image it was built from; on failure,
    /// whether the VM exists.
    async fn template_steps(
        &self,
        job: &JobHandle,
        release: &Release,
        vmid: u32,
        name: &str,
        node: &str,
        held: &mut Option<Reservation>,
    ) -> Result<String, (Failure, bool)> {
        let before = |f: Failure| (f, false);
        let made = |f: Failure| (f.destroying(), true);
        let cfg = &self.config;

        let step = Step::new(job, Some("preparation"), "choosing template ID");
        step.success(&format!(
            "[+] template {name}: VMID {vmid} (range {}-{})",
            cfg.template_ids.start(),
            cfg.template_ids.end()
        ));

        let step = Step::new(job, Some("preparation"), "borrowing an address");
        let allocation = self
            .allocator
            .allocate(&self.proxmox, cfg.ssh_port)
            .await
            .map_err(failed(&step, "no address to borrow", Cleanup::Nothing))
            .map_err(before)?;
        let lent = allocation.reservation.vmid;
        let ip = self
            .allocator
            .address(lent)
            .map_err(|e| before(Failure::new(&step, format!("[-] {e}"), Cleanup::Nothing)))?;
        *held = Some(allocation.reservation);
        step.success(&format!(
            "[+] borrowed {ip}/24 (free VMID {lent}'s) while the template is built"
        ));

        let storage = &cfg.assign_storage;
        let step = Step::new(job, Some("preparation"), "checking storage pool");
        let checked = match self.cluster.recent().await {
            Ok(view) => storage::check(&view.snapshot.storages, storage),
            Err(e) => Err(e.into()),
        };
        checked.map_err(|e| before(Failure::new(&step, format!("[-] {e}"), Cleanup::Nothing)))?;
        step.success(&format!("[+] storage pool {storage} is available"));

        let image = self
            .os_image_stage(Out::Job(job), release, node)
            .await
            .map_err(before)?;
        let key = self.ssh_key_stage(Out::Job(job)).await.map_err(before)?;
        let image_name = release.file_name();

        // Until it is a template, what the build made is half-made.
        job.stake(stake(vmid, node, Cleanup::Destroy));
        let step = Step::new(job, Some("template build"), "creating VM");
        let tags = format!("{TEMPLATE_TAG};{}", release.os);
        let filtered = self
            .create_vm(&step, node, vmid, (name, tags, None), 2, 2048)
            .await
            .map_err(before)?;

        let step = Step::new(job, Some("template build"), "importing disk image");
        let volume = self
            .import_image(&step, node, vmid, &image)
            .await
            .map_err(made)?;
        step.success(&format!("[+] disk image imported as {volume}"));

        let step = Step::new(job, Some("template build"), "initializing configuration");
        if let Some(probe) = allocation.late
            && probe.answered().await
        {
            let why = format!("[-] {ip} answers: another host uses the borrowed address");
            return Err(made(Failure::new(&step, why, Cleanup::Destroy)));
        }
        let fail = |e: &dyn std::fmt::Display| {
            made(Failure::new(
                &step,
                format!(
                    "[-] failed to initialize VM: {}",
                    super::one_line(&e.to_string())
                ),
                Cleanup::Destroy,
            ))
        };
        let keys =
            sshkey::key_file(&key, None, None, &cfg.data_dir.join("tmp")).map_err(|e| fail(&e))?;
        let user = release.os.default_user().to_string();
        let options: QmOptions = qm_options([
            ("sshkeys", keys.path().to_string_lossy().into_owned()),
            ("ciuser", user.clone()),
            ("ciupgrade", "0".to_string()),
            ("scsi0", volume),
            ("ide2", format!("{storage}:cloudinit")),
            ("boot", "c".to_string()),
            ("bootdisk", "scsi0".to_string()),
            ("ipconfig0", format!("ip={ip}/24,gw={}", cfg.gateway)),
            // What the Proxmox UI shows as the template's notes.
            (
                "description",
                format!(
                    "pvedeck template {name}: built from {image_name} by job {}",
                    job.id()
                ),
            ),
        ]);
        self.proxmox
            .set(node, vmid, &options)
            .await
            .map_err(|e| fail(&e))?;
        drop(keys);
        // A cloud image's disk is about 2 GiB, too small for the init
        // script (its 2 GiB swap file); the smallest disk a clone may ask
        // for costs a thin base nothing and never makes a clone shrink.
        self.resize_to(&step, node, vmid, pvedeck_domain::rules::MIN_DISK_GB)
            .await
            .map_err(|e| fail(&e))?;
        step.success("[+] cloud-init set: pvedeck's key, the borrowed address");
        if filtered {
            // The build boots and runs the init script on a shared bridge
            // too: filtered like any VM.
            self.ip_filter_step(Out::Job(job), "template build", (node, vmid), ip)
                .await
                .map_err(made)?;
        }

        self.forget_host(ip);
        let target = GuestTarget {
            ip,
            port: cfg.ssh_port,
            user,
            key: key.private.clone(),
            known_hosts: Some(self.known_hosts()),
        };
        let step = Step::new(job, Some("template build"), "waiting for ready");
        step.processing("[*] starting VM");
        self.power_until_ready(&step, node, vmid, &target, Boot::Start)
            .await
            .map_err(made)?;

        let step = Step::new(job, Some("template build"), "SSH initialization");
        // No root password in a template: each clone gets its own.
        self.init_script(&step, &target, release, None)
            .await
            .map_err(made)?;
        step.success("[+] guest agent, locale, time zone and swap set up");

        let step = Step::new(job, Some("template build"), "cleaning identity");
        // What the build's boot wrote is recorded first: a clone that still
        // has it (the cleaning did not take) is caught as a duplicate.
        let before = self
            .read_identity(node, vmid)
            .await
            .map_err(|why| made(Failure::new(&step, format!("[-] {why}"), Cleanup::Destroy)))?;
        self.jobs
            .record_identity(
                &self.config.cluster,
                vmid,
                &before.machine_id,
                &before.host_key,
                now_ms(),
            )
            .map_err(failed(
                &step,
                "failed to record the identity",
                Cleanup::Destroy,
            ))
            .map_err(made)?;
        step.processing(format!("[*] through the guest agent: {CLEAN_IDENTITY}"));
        let argv: Vec<String> = ["sh", "-c", CLEAN_IDENTITY].map(String::from).to_vec();
        self.proxmox
            .agent_exec(node, vmid, &argv, false)
            .await
            .map_err(IdentityError::from)
            .and_then(|report| Ok(report.output("sh -c")?))
            .map_err(failed(
                &step,
                "failed to clean the identity",
                Cleanup::Destroy,
            ))
            .map_err(made)?;
        step.success("[+] machine-id and SSH host keys removed: each clone writes its own");

        let step = Step::new(job, Some("template build"), "shutting down");
        self.proxmox
            .power(node, vmid, PowerAction::Shutdown)
            .await
            .map_err(failed(&step, "failed to shut down", Cleanup::Destroy))
            .map_err(made)?;
        step.success("[+] VM shut down");

        let step = Step::new(job, Some("template build"), "converting to template");
        // The borrowed address goes back: clones get their own. A clone
        // copies the template's firewall file too: it keeps no address.
        let forget = qm_options([("delete", "ipconfig0".to_string())]);
        let mut converted = self.proxmox.set(node, vmid, &forget).await;
        if filtered && converted.is_ok() {
            converted = self.proxmox.ip_filter(node, vmid, IpFilter::Lifted).await;
        }
        let converted = match converted {
            Ok(()) => self.proxmox.template(node, vmid).await,
            Err(e) => Err(e),
        };
        converted
            .map_err(failed(
                &step,
                "failed to convert to a template",
                Cleanup::Destroy,
            ))
            .map_err(made)?;
        step.success(&format!("[+] VM {vmid} is now template {name}"));
        job.stake(None);
        Ok(image_name)
    }

    /// `DELETE /api/templates/:id`: a template pvedeck built and is not
    /// building; Proxmox refuses while linked clones use it (409).
    pub async fn delete_template(&self, vmid: u32) -> Result<(), EngineError> {
        if let Some((name, job)) = self.builds().get(&vmid) {
            return Err(EngineError::Conflict(format!(
                "template {name} (VM {vmid}) is being built (job {job})"
            )));
        }
        let vm = self.our_template(vmid).await?;
        match self.proxmox.destroy(&vm.node, vmid, false).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_base_in_use() => Err(EngineError::Conflict(format!(
                "template {vmid} has linked clones: {}",
                e.message()
            ))),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_lists_its_release_and_a_name_of_none_lists_none() {
        let release = pvedeck_domain::os::RELEASES[0];
        let name = release.template_name();
        let record = TemplateBuilt {
            vmid: 9001,
            image: "debian-12-generic-amd64.qcow2".into(),
            built: 7,
            job: 4,
        };
        let listed = info((9001, &name, "pve1"), "ready", None, Some(&record));
        assert_eq!(
            (listed.job, listed.built, listed.image.as_deref()),
            (Some(4), Some(7), Some("debian-12-generic-amd64.qcow2"))
        );
        assert_eq!(
            (listed.os, listed.version, listed.state.as_str()),
            (release.os.to_string(), release.version.to_string(), "ready")
        );
        let foreign = info((9002, "tpl-plan9-4", "pve1"), "building", Some(7), None);
        assert_eq!(
            (foreign.os.as_str(), foreign.state.as_str()),
            ("", "building")
        );
    }
}
