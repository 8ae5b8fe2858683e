//! `qm template` and `qm clone`: a stopped VM becomes a template whose disks
//! are base volumes; a clone is linked to them (copy-on-write, where the
//! storage can) or a full copy.

use std::collections::BTreeMap;

use pvedeck_proxmox::{CloneMode, LineSink, PveError};

use super::{fail, render_bytes, vm_mut, vm_on};
use crate::state::{ClusterState, Guest, SimVm};
use crate::{SimCluster, timing};

/// Config keys that hold a disk or a CD-ROM.
fn is_drive_key(key: &str) -> bool {
    let bus = key.trim_end_matches(|c: char| c.is_ascii_digit());
    bus.len() < key.len()
        && matches!(
            bus,
            "scsi" | "virtio" | "sata" | "ide" | "efidisk" | "tpmstate"
        )
}

/// `local-zfs:vm-9000-disk-0,size=2G` → (`local-zfs:vm-9000-disk-0`, `,size=2G`).
fn split_volume(value: &str) -> (&str, &str) {
    match value.find(',') {
        Some(i) => value.split_at(i),
        None => (value, ""),
    }
}

/// A template's disk volume: `vm-<id>-disk-<n>` renamed `base-<id>-disk-<n>`.
fn base_name(volid: &str, vmid: u32) -> String {
    volid.replace(&format!("vm-{vmid}-disk-"), &format!("base-{vmid}-disk-"))
}

/// Whether the storage can clone a base volume copy-on-write (Proxmox's
/// `clone` feature): ZFS, LVM-thin and RBD, or qcow2 files.
fn links(s: &ClusterState, volid: &str) -> bool {
    let storage = volid.split(':').next().unwrap_or_default();
    s.storage(storage).is_some_and(|st| {
        matches!(st.kind.as_str(), "zfspool" | "lvmthin" | "rbd")
            || (st.is_file_based() && volid.ends_with(".qcow2"))
    })
}

/// A linked clone's volume. ZFS and file storages name it on its base
/// (`local-zfs:base-9000-disk-0/vm-107-disk-0`), which is what makes it
/// a clone to `parse_volname` (pve-storage `ZFSPoolPlugin::clone_image`,
/// `Plugin::clone_image`); an LVM-thin clone is a plain thin volume
/// (`local-lvm:vm-107-disk-0`, `LvmThinPlugin::clone_image`), independent
/// of its base once made.
fn linked_volume(base: &str, vmid: u32, n: usize, kind: &str) -> String {
    let storage = base.split(':').next().unwrap_or_default();
    match kind {
        "lvmthin" => format!("{storage}:vm-{vmid}-disk-{n}"),
        "dir" | "nfs" | "cifs" | "btrfs" => format!("{base}/{vmid}/vm-{vmid}-disk-{n}.qcow2"),
        _ => format!("{base}/vm-{vmid}-disk-{n}"),
    }
}

/// The base a volume is a linked clone of, as `parse_volname` reports it
/// (pve-storage: `ZFSPoolPlugin`/`Plugin::parse_volname` return it as
/// `$basename`): `None` for LVM-thin and RBD clones and for any volume
/// that is not a clone.
pub(crate) fn clone_base(volid: &str) -> Option<&str> {
    let (_, name) = volid.split_once(':')?;
    let (base, _) = name.split_once('/')?;
    // `local:9000/base-9000-disk-0.qcow2/107/…`: the file storage's folder
    // comes first.
    let base = if base.chars().all(|c| c.is_ascii_digit()) {
        name.split('/').nth(1)?
    } else {
        base
    };
    base.starts_with("base-").then_some(base)
}

fn full_volume(storage: &str, vmid: u32, n: usize, file_based: bool) -> String {
    if file_based {
        format!("{storage}:{vmid}/vm-{vmid}-disk-{n}.raw")
    } else {
        format!("{storage}:vm-{vmid}-disk-{n}")
    }
}

/// What a clone's disks will be: per drive key, the new value, the new
/// volume and its size, and the log line.
struct Plan {
    config: BTreeMap<String, String>,
    volumes: BTreeMap<String, u64>,
    lines: Vec<String>,
    copy_bytes: u64,
    /// (the source's volume, the clone's, linked): what real guests copy.
    disks: Vec<(String, String, bool)>,
}

fn plan(
    s: &ClusterState,
    source: &SimVm,
    vmid: u32,
    name: &str,
    mode: CloneMode,
    command: &str,
) -> Result<Plan, PveError> {
    let mut config = BTreeMap::new();
    let mut volumes = BTreeMap::new();
    let mut lines = Vec::new();
    let mut copy_bytes = 0;
    let mut disks = 0;
    let mut copies = Vec::new();
    for (key, value) in &source.config {
        if matches!(
            key.as_str(),
            "template" | "name" | "lock" | "meta" | "smbios1" | "vmgenid"
        ) || key.starts_with("unused")
        {
            continue;
        }
        let (volid, rest) = split_volume(value);
        let owned = source.volumes.get(volid).copied();
        let (Some(size), true) = (owned, is_drive_key(key)) else {
            // Everything else is copied; so are CD-ROMs with an ISO.
            config.insert(key.clone(), value.clone());
            continue;
        };
        let storage = volid.split(':').next().unwrap_or_default();
        let file_based = s.storage(storage).is_some_and(|st| st.is_file_based());
        let kind = s
            .storage(storage)
            .map(|st| st.kind.clone())
            .unwrap_or_default();
        let (new, how) = if volid.contains("-cloudinit") {
            (format!("{storage}:vm-{vmid}-cloudinit"), "full")
        } else if mode == CloneMode::Linked {
            if !source.is_template() || !links(s, volid) {
                return Err(fail(
                    command,
                    format!("Linked clone feature is not supported for drive '{key}'"),
                ));
            }
            disks += 1;
            (linked_volume(volid, vmid, disks - 1, &kind), "linked")
        } else {
            disks += 1;
            copy_bytes += size;
            (full_volume(storage, vmid, disks - 1, file_based), "full")
        };
        if !volid.contains("-cloudinit") {
            copies.push((volid.to_string(), new.clone(), how == "linked"));
        }
        lines.push(format!("create {how} clone of drive {key} ({volid})"));
        volumes.insert(new.clone(), size);
        config.insert(key.clone(), format!("{new}{rest}"));
    }
    config.insert("name".into(), name.to_string());
    config.extend(super::fresh_ids(vmid));
    // A clone gets its own MAC addresses.
    for (key, value) in config.iter_mut() {
        if key.starts_with("net")
            && let Some((model, rest)) = value.split_once('=')
        {
            let tail = rest.split_once(',').map_or("", |(_, t)| t);
            let sep = if tail.is_empty() { "" } else { "," };
            *value = format!(
                "{model}=BC:24:11:{:02X}:{:02X}:{:02X}{sep}{tail}",
                vmid >> 16 & 0xff,
                vmid >> 8 & 0xff,
                vmid & 0xff
            );
        }
    }
    Ok(Plan {
        config,
        volumes,
        lines,
        copy_bytes,
        disks: copies,
    })
}

impl SimCluster {
    pub fn is_template(&self, vmid: u32) -> bool {
        self.read(|s| s.vms.get(&vmid).is_some_and(SimVm::is_template))
    }

    pub async fn qm_template(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        self.qm_template_check(node, vmid)?;
        self.qm_template_task(vmid).await
    }

    /// What `qm template` refuses before its task starts (a non-zero exit).
    pub fn qm_template_check(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        let command = format!("qm template {vmid}");
        self.record(&command);
        self.read(|s| {
            let vm = vm_on(s, node, vmid, &command, false)?;
            if vm.is_template() {
                return Err(fail(&command, "you can't convert a template to a template"));
            }
            if vm.running {
                return Err(fail(
                    &command,
                    "you can't convert a VM to template if VM is running",
                ));
            }
            Ok(())
        })
    }

    /// The conversion task: its failure leaves the VM as it was.
    pub async fn qm_template_task(&self, vmid: u32) -> Result<(), PveError> {
        let command = format!("qm template {vmid}");
        self.fault("template", Some(vmid), &command).await?;
        self.clock.sleep(timing::TEMPLATE).await;
        if let Some(real) = &self.real {
            let volumes = self.volids(vmid);
            for volid in volumes {
                real.rename(&volid, &base_name(&volid, vmid), &command)
                    .await?;
            }
        }
        self.change(|s| {
            let vm = vm_mut(s, vmid).ok_or_else(|| fail(&command, "VM vanished"))?;
            vm.volumes = std::mem::take(&mut vm.volumes)
                .into_iter()
                .map(|(volid, size)| (base_name(&volid, vmid), size))
                .collect();
            for (key, value) in vm.config.iter_mut() {
                if is_drive_key(key) {
                    *value = base_name(value, vmid);
                }
            }
            vm.config.insert("template".into(), "1".into());
            Ok(())
        })
    }

    pub async fn qm_clone(
        &self,
        node: &str,
        source: u32,
        vmid: u32,
        name: &str,
        mode: CloneMode,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let full = u8::from(mode == CloneMode::Full);
        let command = format!("qm clone {source} {vmid} --name {name} --full {full}");
        self.record(&command);
        let plan = self.change(|s| {
            let src = vm_on(s, node, source, &command, false)?;
            if s.vms.contains_key(&vmid) {
                return Err(fail(
                    &command,
                    format!("unable to create VM {vmid}: config file already exists"),
                ));
            }
            let plan = plan(s, src, vmid, name, mode, &command)?;
            let mut clone = SimVm {
                vmid,
                node: node.to_string(),
                config: plan.config.clone(),
                volumes: plan.volumes.clone(),
                running: false,
                guest: Guest::Off,
                started: None,
                // The disk is the template's: what it holds comes along.
                ..src.clone()
            };
            clone.config.insert("lock".into(), "clone".into());
            s.vms.insert(vmid, clone);
            Ok(plan)
        })?;
        if let Err(e) = self.fault("clone", Some(vmid), &command).await {
            self.change(|s| s.vms.remove(&vmid));
            return Err(e);
        }
        if let Some(real) = &self.real {
            for (source, volid, linked) in &plan.disks {
                if let Err(e) = real.clone_disk(source, volid, *linked, &command).await {
                    self.change(|s| s.vms.remove(&vmid));
                    return Err(e);
                }
            }
        }
        for line in &plan.lines {
            out(line);
        }
        if plan.copy_bytes > 0 {
            let total = render_bytes(plan.copy_bytes);
            let step_ms = plan.copy_bytes / timing::IMPORT_BYTES_PER_MS / 10;
            for pct in (0..=100u64).step_by(10) {
                out(&format!(
                    "transferred {} of {total} ({pct}.00%)",
                    render_bytes(plan.copy_bytes * pct / 100)
                ));
                if pct < 100 {
                    self.clock.sleep(step_ms).await;
                }
            }
        } else {
            self.clock.sleep(timing::LINKED_CLONE).await;
        }
        self.change(|s| {
            if let Some(vm) = vm_mut(s, vmid) {
                vm.config.remove("lock");
            }
        });
        Ok(())
    }
}

/// A base volume some other VM's linked clone still uses, if any.
pub(super) fn base_in_use(s: &ClusterState, vmid: u32) -> Option<String> {
    let vm = s.vms.get(&vmid)?;
    vm.volumes.keys().find_map(|base| {
        let prefix = format!("{base}/");
        s.vms
            .values()
            .filter(|other| other.vmid != vmid)
            .any(|other| other.volumes.keys().any(|v| v.starts_with(&prefix)))
            .then(|| base.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_keys_are_disks_and_cdroms() {
        for key in ["scsi0", "virtio3", "ide2", "sata1", "efidisk0", "tpmstate0"] {
            assert!(is_drive_key(key), "{key}");
        }
        for key in ["scsihw", "net0", "unused0", "ide", "boot"] {
            assert!(!is_drive_key(key), "{key}");
        }
    }

    #[test]
    fn a_template_renames_its_disks_to_base_volumes() {
        assert_eq!(
            base_name("local-zfs:vm-9000-disk-0,size=2G", 9000),
            "local-zfs:base-9000-disk-0,size=2G"
        );
        assert_eq!(
            base_name("local:9000/vm-9000-disk-1.qcow2", 9000),
            "local:9000/base-9000-disk-1.qcow2"
        );
        // Another VM's disk and the cloud-init drive keep their names.
        assert_eq!(
            base_name("local-zfs:vm-90001-disk-0", 9000),
            "local-zfs:vm-90001-disk-0"
        );
        assert_eq!(
            base_name("local-zfs:vm-9000-cloudinit", 9000),
            "local-zfs:vm-9000-cloudinit"
        );
    }

    #[test]
    fn linked_volumes_sit_on_their_base() {
        assert_eq!(
            linked_volume("local-zfs:base-9000-disk-0", 107, 0, "zfspool"),
            "local-zfs:base-9000-disk-0/vm-107-disk-0"
        );
        assert_eq!(
            linked_volume("local:9000/base-9000-disk-0.qcow2", 107, 0, "dir"),
            "local:9000/base-9000-disk-0.qcow2/107/vm-107-disk-0.qcow2"
        );
        assert_eq!(
            linked_volume("local-lvm:base-9000-disk-0", 107, 1, "lvmthin"),
            "local-lvm:vm-107-disk-1"
        );
    }

    #[test]
    fn a_clone_names_its_base_where_the_plugin_does() {
        assert_eq!(
            clone_base("local-zfs:base-9000-disk-0/vm-107-disk-0"),
            Some("base-9000-disk-0")
        );
        assert_eq!(
            clone_base("local:9000/base-9000-disk-0.qcow2/107/vm-107-disk-0.qcow2"),
            Some("base-9000-disk-0.qcow2")
        );
        assert_eq!(clone_base("local-lvm:vm-107-disk-0"), None);
        assert_eq!(clone_base("local:107/vm-107-disk-0.raw"), None);
    }
}
