//! The clone path of an install (`"method":"clone"`,
//! docs/provisioning.md#the-clone-path): the VM is a clone of the release's
//! golden template — linked where the storage can, else a full copy —
//! configured in one `qm set`, started, and ready when the guest agent answers
//! and cloud-init reports `done` through it. No image import, no init script,
//! no reboot.
//!
//! Failures follow the failure contract
//! (docs/provisioning.md#failure-contract) step by step: a failed clone leaves
//! nothing (Proxmox removes it); a failed configuration destroys the clone; a
//! failed start, readiness or cloud-init keeps it for debugging.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pvedeck_domain::os::Release;
use pvedeck_domain::request::{InstallRequest, NodeChoice};
use pvedeck_domain::types::JobState;
use pvedeck_proxmox::{CloneMode, PowerAction, PveError, QmOptions, qm_options};

use super::allocator::Reservation;
use super::failure::{Cleanup, Failure, failed};
use super::identity::IdentityError;
use super::install::{Summary, finalizing, user_password_hash};
use super::placement::Placed;
use super::report::{Out, Step, elapsed, one_line};
use super::stopping::stake;
use super::{Engine, memory, scope, sshkey};
use crate::jobs::Follower;
use crate::jobs::{JobHandle, Update};

/// The longest pause between two knocks on the guest agent: each is a
/// `qm` start-up on the node.
const AGENT_POLL_MAX: Duration = Duration::from_secs(1);

/// A ready template: its id, node and name.
struct Template {
    vmid: u32,
    node: String,
    name: String,
}

/// Whether a storage type clones copy-on-write (Proxmox's `clone` feature
/// on a base volume).
fn links(kind: &str) -> bool {
    matches!(kind, "zfspool" | "lvmthin" | "rbd")
}

/// How to clone a template on a storage of `kind`, and why, when the VM
/// is to run on another node than the template's (`elsewhere`). pvedeck
/// clones on the template's node and migrates the stopped clone, never
/// `qm clone --target`, which Proxmox refuses for a VM on local storage
/// (`clone_vm`: "VM uses local storage"). A linked clone moves only where
/// Proxmox lets it (docs/backends.md#clones-on-another-node): on RBD
/// (shared, nothing to copy) and on LVM-thin (the clone is a plain thin
/// volume); on ZFS `QemuMigrate` refuses it ("can't migrate … as it's a
/// clone of …"), so there the clone is a full copy.
fn clone_mode(kind: &str, elsewhere: bool) -> (CloneMode, Option<&'static str>) {
    match (links(kind), elsewhere && kind == "zfspool") {
        (true, false) => (CloneMode::Linked, None),
        (true, true) => (
            CloneMode::Full,
            Some("cannot move a linked clone to another node"),
        ),
        (false, _) => (CloneMode::Full, Some("cannot link clones")),
    }
}

/// What failed, from `cloud-init status --long`: the `errors:` section
/// where there is one (cloud-init 23.4 and later list them there and keep
/// `detail:` for the datasource), else `detail:` (22.4, Debian 12, puts
/// the errors there). Sections end at the next `key:` line.
fn cloud_init_errors(long: &str) -> String {
    let section = |name: &str| -> Vec<&str> {
        long.lines()
            .skip_while(|l| l.trim_end() != name)
            .skip(1)
            .take_while(|l| {
                let header = l.split_once(':').is_some_and(|(k, _)| {
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                });
                !header
            })
            .map(|l| l.trim().trim_start_matches("- ").trim())
            .filter(|l| !l.is_empty())
            .collect()
    };
    let errors = section("errors:");
    let lines = if errors.is_empty() {
        section("detail:")
    } else {
        errors
    };
    lines.join("\n")
}

impl Engine {
    pub(super) async fn clone_steps(
        self: &Arc<Self>,
        job: &JobHandle,
        req: &InstallRequest,
        (held, placed): (&mut Option<Reservation>, Option<&Placed>),
        started: Instant,
    ) -> Result<(), (Failure, Option<(u32, String)>)> {
        let none = |f: Failure| (f, None);
        let p = self
            .preparation(Out::Job(job), req, held, placed)
            .await
            .map_err(none)?;
        // Where the clone goes: the node named, or the one placement chose.
        // A clone is made on its template's node and moved (Proxmox clones
        // a VM on local storage only there), placed or not.
        let wanted: Option<String> = match (&req.node, placed) {
            (Some(NodeChoice::Named(n)), _) => Some(n.to_string()),
            (_, Some(placed)) => Some(placed.choice.node.clone()),
            _ => None,
        };
        job.set_vmid(p.vmid);
        self.claim(job, p.vmid);
        let template = self.template_for(job, &req.release).await.map_err(none)?;
        let key = self.ssh_key_stage(Out::Job(job)).await.map_err(none)?;
        let vmid = p.vmid;
        let mut node = template.node.clone();

        let step = Step::new(job, Some("VM creation"), "cloning template");
        let filtered = self.ip_filter_wanted(&step).await;
        let storage = &self.config.assign_storage;
        let kind = match self.cluster.recent().await {
            Ok(view) => view
                .snapshot
                .storages
                .iter()
                .find(|s| s.name == *storage)
                .map(|s| s.kind.clone())
                .unwrap_or_default(),
            Err(e) => return Err(none(failed(&step, "failed to clone", Cleanup::Nothing)(e))),
        };
        let elsewhere = wanted.as_ref().is_some_and(|n| *n != node);
        let (mode, why) = clone_mode(&kind, elsewhere);
        step.processing(match why {
            None => format!(
                "[*] linked clone of {} (VM {})",
                template.name, template.vmid
            ),
            Some(why) => format!(
                "[*] full clone of {} (VM {}): storage {storage} ({kind}) {why}",
                template.name, template.vmid
            ),
        });
        // A clone cut short in the middle is half-made.
        job.stake(stake(vmid, &node, Cleanup::Destroy));
        let relay = |line: &str| step.relay(line);
        self.proxmox
            .clone_vm(&node, template.vmid, vmid, &p.name, mode, &relay)
            .await
            .map_err(failed(
                &step,
                "failed to clone the template",
                Cleanup::Nothing,
            ))
            .map_err(none)?;
        step.success(&format!("[+] VM {vmid} cloned from {}", template.name));
        let at = |node: &str| Some((vmid, node.to_string()));

        let step = Step::new(job, Some("VM initialization"), "initializing configuration");
        step.processing("[*] initializing VM");
        let fail = |e: &dyn std::fmt::Display| {
            Failure::new(
                &step,
                format!("[-] failed to initialize VM: {}", one_line(&e.to_string())),
                Cleanup::Destroy,
            )
        };
        if let Some(probe) = p.late
            && let Some(why) = probe.stranger(self.config.ssh_port, vmid).await
        {
            return Err((fail(&why), at(&node)));
        }
        let keys = sshkey::key_file(
            &key,
            self.config.admin_keys_file.as_deref(),
            req.pubkey.as_deref(),
            &self.config.data_dir.join("tmp"),
        )
        .map_err(|e| (fail(&e), at(&node)))?;
        let hash = user_password_hash(req).map_err(|e| (fail(&e), at(&node)))?;
        let mut options: QmOptions = qm_options([
            ("cores", p.cpu.to_string()),
            ("memory", p.ram.to_string()),
            ("ciuser", req.user.clone()),
        ]);
        options.extend(hash.map(|h| ("cipassword".to_string(), h)));
        options.extend(qm_options([
            ("sshkeys", keys.path().to_string_lossy().into_owned()),
            // The template's tags are its own: the VM gets its OS's.
            ("tags", format!("{};{}", req.release.os, scope::TAG)),
            (
                "ipconfig0",
                format!("ip={}/24,gw={}", p.ip, self.config.gateway),
            ),
        ]));
        if let Some(owner) = job.owner() {
            options.push(("description".into(), super::tenancy::owner_notes(owner)));
        }
        if filtered {
            // Through the firewall, whatever the template's (one built
            // before the filter has none); a never-booted clone gets a new MAC.
            options.push(("net0".into(), super::ipfilter::net0(true)));
        }
        options.extend(memory::balloon_options(
            p.ram,
            self.config.vm_balloon_min_mb,
        ));
        self.proxmox
            .set(&node, vmid, &options)
            .await
            .map_err(|e| (fail(&e), at(&node)))?;
        drop(keys);
        self.resize_to(&step, &node, vmid, p.disk_gb)
            .await
            .map_err(|e| (fail(&e), at(&node)))?;
        step.success("[+] VM initialized successfully");
        if filtered {
            // The template's own firewall file came with the clone: its
            // ipset is replaced by one with this VM's address.
            self.ip_filter_step(Out::Job(job), "VM initialization", (&node, vmid), p.ip)
                .await
                .map_err(|f| (f, at(&node)))?;
        }

        if let Some(target) = wanted.filter(|n| *n != node) {
            self.migrate_step(job, &node, vmid, &target)
                .await
                .map_err(|f| (f, at(&node)))?;
            node = target;
        }

        job.stake(stake(vmid, &node, Cleanup::Keep));
        let step = Step::new(job, Some("VM initialization"), "waiting for ready");
        step.processing("[*] starting VM");
        self.proxmox
            .power(&node, vmid, PowerAction::Start)
            .await
            .map_err(failed(&step, "failed to start VM", Cleanup::Keep))
            .map_err(|f| (f, at(&node)))?;
        step.processing(format!(
            "[*] VM started {}",
            elapsed(step.started().elapsed())
        ));
        self.wait_for_cloud_init(&step, &node, vmid)
            .await
            .map_err(|f| (f, at(&node)))?;
        step.success("[+] VM is ready: the guest agent answers and cloud-init is done");

        let step = Step::new(job, Some("VM initialization"), "verifying identity");
        step.processing("[*] reading machine-id and SSH host key through the guest agent");
        let refuse = |why: IdentityError| {
            (
                Failure::new(&step, format!("[-] {why}"), Cleanup::Keep),
                at(&node),
            )
        };
        let identity = self.read_identity(&node, vmid).await.map_err(refuse)?;
        self.claim_identity(vmid, &identity).await.map_err(refuse)?;
        // Later SSH to this VM (readiness after a start or reboot) requires
        // the key it proved through the hypervisor.
        self.pin_host(p.ip, &identity.host_key).map_err(refuse)?;
        let fingerprint = identity.fingerprint().unwrap_or_default();
        step.success(&format!(
            "[+] identity verified: machine-id {}, host key {fingerprint}",
            identity.machine_id
        ));

        finalizing(
            job,
            started,
            (vmid, p.ip),
            &req.user,
            Some(&fingerprint),
            Summary::WithHostKey,
            None,
        );
        Ok(())
    }

    /// Ready = the guest agent answers, then `cloud-init status --wait`
    /// through it says `done`. An `error` there fails the install with
    /// cloud-init's own words; the VM is kept.
    async fn wait_for_cloud_init(
        &self,
        step: &Step<'_>,
        node: &str,
        vmid: u32,
    ) -> Result<(), Failure> {
        let cfg = &self.config;
        let budget = cfg.ssh_poll_interval * cfg.ssh_poll_attempts;
        let pause = cfg.ssh_poll_interval.min(AGENT_POLL_MAX);
        let deadline = Instant::now() + budget;
        let mut tries = 0u32;
        loop {
            match self.proxmox.agent_ping(node, vmid).await {
                Ok(()) => break,
                Err(e) if Instant::now() >= deadline => {
                    let why = format!("the guest agent did not answer: {}", one_line(&e.message()));
                    return Err(failed(step, "failed to reach the VM", Cleanup::Keep)(why));
                }
                Err(_) => {
                    tries += 1;
                    if tries.is_multiple_of(10) {
                        step.processing(format!("[*] waiting for the guest agent of VM {vmid}"));
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
        step.processing("[*] the guest agent answers; waiting for cloud-init");
        let argv: Vec<String> = ["cloud-init", "status", "--wait"]
            .map(String::from)
            .to_vec();
        let report = self
            .proxmox
            .agent_exec(node, vmid, &argv, true)
            .await
            .map_err(failed(
                step,
                "failed to read cloud-init's status",
                Cleanup::Keep,
            ))?;
        let said = report.out.trim();
        if report.exitcode == Some(0) && said.ends_with("status: done") {
            return Ok(());
        }
        if report.exitcode.is_none() {
            // Killed, or still waiting at the timeout: nothing cloud-init
            // said, so the agent's report is the words.
            let why = report
                .output("cloud-init status --wait")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            return Err(Failure::new(
                step,
                format!("[-] cloud-init did not report: {}", one_line(&why)),
                Cleanup::Keep,
            ));
        }
        let mut words = if said.is_empty() {
            report.err.trim().to_string()
        } else {
            said.to_string()
        };
        // `--wait` prints only `status: error` (cloud-init's `cmd/status.py`);
        // what failed is in `--long`'s detail, the guest's own words.
        if words.lines().count() <= 1
            && let Some(detail) = self.cloud_init_detail(node, vmid).await
        {
            words = format!("{words}\n{detail}");
        }
        Err(Failure::new(
            step,
            format!("[-] cloud-init reported an error: {}", one_line(&words)),
            Cleanup::Keep,
        ))
    }

    /// `cloud-init status --long`'s `detail:` and `errors:` (newer
    /// releases list the errors apart), if the agent answers.
    async fn cloud_init_detail(&self, node: &str, vmid: u32) -> Option<String> {
        let argv: Vec<String> = ["cloud-init", "status", "--long"]
            .map(String::from)
            .to_vec();
        let report = self
            .proxmox
            .agent_exec(node, vmid, &argv, false)
            .await
            .ok()?;
        let detail = cloud_init_errors(&report.out);
        (!detail.is_empty()).then_some(detail)
    }

    /// Stage `template`: the release's ready template, built first (a job
    /// of its own, followed here) when there is none.
    async fn template_for(
        self: &Arc<Self>,
        job: &JobHandle,
        release: &Release,
    ) -> Result<Template, Failure> {
        let step = Step::new(job, Some("template"), "finding template");
        let name = release.template_name();
        step.processing(format!("[*] looking for template {name}"));
        if let Some(t) = self.ready_template(&name).await.map_err(failed(
            &step,
            "failed to find the template",
            Cleanup::Nothing,
        ))? {
            step.success(&format!("[+] template {name} (VM {})", t.vmid));
            return Ok(t);
        }
        let building = self
            .builds()
            .into_iter()
            .find(|(_, (n, _))| *n == name)
            .map(|(_, (_, job))| job);
        let build = match building {
            Some(id) => id,
            None => self.build_template(*release).await.map_err(failed(
                &step,
                "failed to build the template",
                Cleanup::Nothing,
            ))?,
        };
        step.processing(format!(
            "[*] no template {name} yet: building it (job {build})"
        ));
        let follow = self
            .jobs
            .follow(build, 0, false, Follower::Starter)
            .await
            .map_err(failed(
                &step,
                "failed to follow the template build",
                Cleanup::Nothing,
            ))?;
        if let Some(mut updates) = follow {
            while let Some(update) = updates.recv().await {
                match update {
                    Update::Event(e) => {
                        step.relay(&format!("{}: {}", e.event.step, e.event.message));
                    }
                    Update::Closed => break,
                }
            }
        }
        let built = self
            .jobs
            .job(build)
            .await
            .ok()
            .flatten()
            .is_some_and(|j| j.state == JobState::Succeeded);
        let found = if built {
            self.ready_template(&name).await.ok().flatten()
        } else {
            None
        };
        match found {
            Some(t) => {
                step.success(&format!("[+] template {name} built (VM {})", t.vmid));
                Ok(t)
            }
            None => Err(Failure::new(
                &step,
                format!("[-] the build of template {name} failed (job {build})"),
                Cleanup::Nothing,
            )),
        }
    }

    /// The release's template, ready, from the cluster snapshot (which
    /// pvedeck's own changes, a template just built, refresh).
    async fn ready_template(&self, name: &str) -> Result<Option<Template>, PveError> {
        let view = self.cluster.read().await?;
        Ok(self
            .ready_templates(&view.snapshot.vms)
            .find(|vm| vm.name.as_deref() == Some(name))
            .map(|vm| Template {
                vmid: vm.vmid,
                node: vm.node.clone(),
                name: name.to_string(),
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_init_s_own_words_are_read_from_its_long_status() {
        // Debian 12's cloud-init 22.4: the errors are the detail.
        let old = "status: error\ntime: Sun, 06 Dec 2026 13:20:01 +0000\ndetail:\n\
                   ('bootcmd', ProcessExecutionError(\"Stderr: planted\"))\n";
        assert_eq!(
            cloud_init_errors(old),
            "('bootcmd', ProcessExecutionError(\"Stderr: planted\"))"
        );
        // 23.4 and later: the datasource is the detail, the errors a list.
        let new = "status: error\nextended_status: error - done\ndetail:\n\
                   DataSourceNoCloud [seed=/dev/sr0]\nerrors:\n\t- Failed: bootcmd\n\
                   recoverable_errors: {}\n";
        assert_eq!(cloud_init_errors(new), "Failed: bootcmd");
        assert_eq!(cloud_init_errors("status: error\n"), "");
    }

    #[test]
    fn only_copy_on_write_storages_link_clones() {
        for kind in ["zfspool", "lvmthin", "rbd"] {
            assert!(links(kind), "{kind}");
        }
        for kind in ["dir", "nfs", "lvm", ""] {
            assert!(!links(kind), "{kind}");
        }
    }

    #[test]
    fn a_clone_for_another_node_is_linked_only_where_it_can_migrate() {
        assert_eq!(clone_mode("zfspool", false).0, CloneMode::Linked);
        assert_eq!(clone_mode("zfspool", true).0, CloneMode::Full);
        assert_eq!(clone_mode("lvmthin", true).0, CloneMode::Linked);
        assert_eq!(clone_mode("rbd", true).0, CloneMode::Linked);
        assert_eq!(clone_mode("dir", true).0, CloneMode::Full);
        assert_eq!(clone_mode("dir", false).0, CloneMode::Full);
    }
}
