//! `qm create`, `qm importdisk`, `qm destroy`: a VM comes and goes.

use std::collections::BTreeMap;
use std::path::Path;

use pvedeck_proxmox::drive::MIB;
use pvedeck_proxmox::{LineSink, PveError};

use super::config::check_balloon;
use super::{fail, render, render_bytes, vm_mut, vm_on};
use crate::params::{self, Verb};
use crate::state::{Guest, GuestKind, SimVm};
use crate::{SimCluster, timing};

/// The next `vm-<id>-disk-<n>` on a storage: the lowest n the VM does not use.
fn next_disk_volume(vm: &SimVm, storage: &str, file_based: bool) -> String {
    (0..)
        .map(|n| {
            if file_based {
                format!("{storage}:{}/vm-{}-disk-{n}.raw", vm.vmid, vm.vmid)
            } else {
                format!("{storage}:vm-{}-disk-{n}", vm.vmid)
            }
        })
        .find(|volid| !vm.volumes.contains_key(volid))
        .unwrap_or_default()
}

/// The virtual size of a disk image: read from a qcow2 header, else the
/// file's own size.
fn virtual_size(image: &Path, file_len: u64) -> u64 {
    use std::io::Read;
    // The header alone: an uploaded image can be hundreds of megabytes.
    let mut head = [0u8; 32];
    let read = std::fs::File::open(image).and_then(|mut f| f.read_exact(&mut head));
    if read.is_ok() && head[..4] == *b"QFI\xfb" {
        let mut size = [0u8; 8];
        size.copy_from_slice(&head[24..32]);
        return u64::from_be_bytes(size);
    }
    file_len
}

impl SimCluster {
    pub async fn qm_create(
        &self,
        node: &str,
        vmid: u32,
        options: &[(String, String)],
    ) -> Result<(), PveError> {
        let command = render("create", vmid, options);
        self.record(&command);
        if vmid < 100 {
            return Err(fail(
                &command,
                "400 Parameter verification failed.\nvmid: value must have a minimum value of 100",
            ));
        }
        params::verify(Verb::Create, options).map_err(|m| fail(&command, m.to_string()))?;
        let config: BTreeMap<String, String> = options.iter().cloned().collect();
        check_balloon(&command, &config)?;

        self.change(|s| {
            s.online_node(node, &command)?;
            if let Some(existing) = s.vms.get(&vmid) {
                return Err(fail(
                    &command,
                    format!(
                        "unable to create VM {vmid} - VM {vmid} already exists on node '{}'",
                        existing.node
                    ),
                ));
            }
            let mut config = config;
            if let Some(net) = config.get("net0").cloned() {
                // Proxmox fills in a MAC address in its own OUI.
                let (model, rest) = net.split_once(',').unwrap_or((net.as_str(), ""));
                let mac = format!(
                    "BC:24:11:{:02X}:{:02X}:{:02X}",
                    vmid >> 16 & 0xff,
                    vmid >> 8 & 0xff,
                    vmid & 0xff
                );
                let sep = if rest.is_empty() { "" } else { "," };
                config.insert("net0".into(), format!("{model}={mac}{sep}{rest}"));
            }
            config.insert("lock".into(), "create".into());
            config.extend(super::fresh_ids(vmid));
            let memory_mib = config
                .get("memory")
                .and_then(|m| m.parse::<u64>().ok())
                .unwrap_or(512);
            s.vms.insert(
                vmid,
                SimVm {
                    vmid,
                    node: node.to_string(),
                    kind: GuestKind::Qemu,
                    config,
                    volumes: BTreeMap::new(),
                    running: false,
                    guest: Guest::Off,
                    started: None,
                    // A fresh cloud image settles at a quarter of its memory or so.
                    mem_plateau: (memory_mib * MIB / 4).max(180 * MIB),
                    cpu_load: 0.03,
                    initialized: false,
                    // A fresh cloud image: no identity until it boots.
                    inside: Default::default(),
                    firewall: Default::default(),
                },
            );
            Ok(())
        })?;
        // The VM exists and is locked while the task runs; a failed create
        // removes it again, as Proxmox does.
        if let Err(e) = self.fault("create", Some(vmid), &command).await {
            self.change(|s| s.vms.remove(&vmid));
            return Err(e);
        }
        self.clock.sleep(timing::CREATE).await;
        self.change(|s| {
            if let Some(vm) = vm_mut(s, vmid) {
                vm.config.remove("lock");
            }
        });
        Ok(())
    }

    pub async fn qm_importdisk(
        &self,
        node: &str,
        vmid: u32,
        image: &Path,
        storage: &str,
        out: LineSink<'_>,
    ) -> Result<String, PveError> {
        let command = format!("qm importdisk {vmid} {} {storage}", image.display());
        self.strike("importdisk", Some(vmid), &command).await?;
        let volid = self.read(|s| {
            let vm = vm_on(s, node, vmid, &command, false)?;
            let store = s
                .storage(storage)
                .ok_or_else(|| fail(&command, format!("storage '{storage}' does not exist")))?;
            if !store.is_active() {
                return Err(fail(&command, format!("storage '{storage}' is not online")));
            }
            if !store.holds_images() {
                return Err(fail(
                    &command,
                    format!("storage '{storage}' does not support vm images"),
                ));
            }
            Ok((
                next_disk_volume(vm, storage, store.is_file_based()),
                store.is_file_based(),
            ))
        });
        let (volid, file_based) = volid?;
        let file_len = std::fs::metadata(image)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .ok_or_else(|| {
                fail(
                    &command,
                    format!("{}: non-existent or non-regular file", image.display()),
                )
            })?;
        let size = virtual_size(image, file_len).max(1);
        if let Some(real) = &self.real {
            real.import(image, &volid, &command).await?;
        }

        let name = image
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out(&format!("importing disk '{name}' to VM {vmid} ..."));
        if file_based {
            let file = volid.split(':').nth(1).unwrap_or_default();
            out(&format!(
                "Formatting '/var/lib/vz/images/{file}', fmt=raw size={size} preallocation=off"
            ));
        }
        let total = render_bytes(size);
        let step_ms = size / timing::IMPORT_BYTES_PER_MS / 100;
        for pct in 0..=100u64 {
            out(&format!(
                "transferred {} of {total} ({pct}.00%)",
                render_bytes(size * pct / 100)
            ));
            if pct < 100 {
                self.clock.sleep(step_ms).await;
            }
        }
        out(&format!("transferred {total} of {total} (100.00%)"));

        let unused = self.change(|s| {
            let vm = vm_on(s, node, vmid, &command, false)?.vmid;
            let vm = vm_mut(s, vm).ok_or_else(|| fail(&command, "VM vanished"))?;
            let slot = (0..)
                .map(|n| format!("unused{n}"))
                .find(|k| !vm.config.contains_key(k))
                .unwrap_or_default();
            vm.volumes.insert(volid.clone(), size);
            vm.config.insert(slot.clone(), volid.clone());
            Ok::<_, PveError>(slot)
        })?;
        out(&format!("{unused}: successfully imported disk '{volid}'"));
        Ok(volid)
    }

    /// `qm destroy <vmid> --purge [--skiplock]
    /// [--destroy-unreferenced-disks 1]`. Without the last, a disk the
    /// config does not reference (an import cut short before its
    /// `qm set`) stays on its storage (qemu-server `PVE/API2/Qemu.pm`,
    /// `destroy_vm`: `destroy-unreferenced-disks` defaults to 0).
    pub async fn qm_destroy(
        &self,
        node: &str,
        vmid: u32,
        skiplock: bool,
        unreferenced: bool,
    ) -> Result<Vec<String>, PveError> {
        let command = format!("qm destroy {vmid}");
        self.strike("destroy", Some(vmid), &command).await?;
        self.read(|s| {
            let vm = vm_on(s, node, vmid, &command, skiplock)?;
            if vm.running {
                return Err(fail(
                    &command,
                    format!("VM {vmid} is running - destroy failed"),
                ));
            }
            if let Some(base) = super::clone::base_in_use(s, vmid) {
                let volname = base.split(':').nth(1).unwrap_or(&base);
                return Err(fail(
                    &command,
                    format!("base volume '{volname}' is still in use by linked cloned"),
                ));
            }
            Ok(())
        })?;
        self.clock.sleep(timing::DESTROY).await;
        // A volume no config key names (a drive's first field, or an
        // `unusedN` value) is an orphan unless destroy is told to take it.
        let gone = self
            .change(|s| {
                let vm = s.vms.remove(&vmid)?;
                let mut gone = Vec::new();
                for (volid, size) in vm.volumes {
                    let named = vm
                        .config
                        .values()
                        .any(|value| value.split(',').next() == Some(volid.as_str()));
                    if unreferenced || named {
                        gone.push(volid);
                    } else {
                        s.orphans.insert(volid, (vm.node.clone(), size));
                    }
                }
                Some(gone)
            })
            .unwrap_or_default();
        if let Some(real) = &self.real {
            real.destroy(vmid, &gone).await;
        }
        Ok(vec![format!(
            "purging VM {vmid} from related configurations.."
        )])
    }
}
