//! `qm` on the simulated cluster: the same checks, locks, error texts and
//! output lines as Proxmox VE 9 (see `shared/proxmox/FORMATS.md`), taking
//! simulated time.

use std::collections::BTreeMap;
use std::path::Path;

use super::params::{self, Verb};
use super::state::{ClusterState, Guest, GuestKind, SimVm};
use super::{SimCluster, timing};
use crate::clock::now_ms;
use crate::pve::drive::{GIB, MIB, drive_size, drive_volume, format_size, parse_size};
use crate::pve::{LineSink, PowerAction, PveError};

/// Exit code of a Perl `die` after ENOENT (a missing VM config).
const EXIT_ENOENT: i32 = 2;
/// Exit code of a failed task and of most failures.
const EXIT_FAIL: i32 = 255;

fn fail(command: &str, message: impl Into<String>) -> PveError {
    PveError::command(command, message, EXIT_FAIL)
}

/// `qm` on `node` can act on `vmid`: the node is up, the VM's config lives
/// there and (unless `skiplock`) no lock is held.
fn vm_on<'a>(
    s: &'a ClusterState,
    node: &str,
    vmid: u32,
    command: &str,
    skiplock: bool,
) -> Result<&'a SimVm, PveError> {
    s.online_node(node, command)?;
    let vm = s
        .vms
        .get(&vmid)
        .filter(|vm| vm.node == node && vm.kind == GuestKind::Qemu)
        .ok_or_else(|| {
            PveError::command(
                command,
                format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"),
                EXIT_ENOENT,
            )
        })?;
    if let (Some(lock), false) = (vm.lock(), skiplock) {
        return Err(fail(command, format!("VM is locked ({lock})")));
    }
    Ok(vm)
}

fn vm_mut(s: &mut ClusterState, vmid: u32) -> Option<&mut SimVm> {
    s.vms.get_mut(&vmid)
}

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

/// `transferred 20.5 MiB of 2.0 GiB (1.00%)`, as `render_bytes` writes sizes.
fn render_bytes(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", units[unit])
}

/// The virtual size of a disk image: read from a qcow2 header, else the
/// file's own size.
fn virtual_size(image: &Path, file_len: u64) -> u64 {
    let Ok(bytes) = std::fs::read(image).map(|b| b.into_iter().take(32).collect::<Vec<u8>>())
    else {
        return file_len;
    };
    if bytes.len() >= 32 && bytes[..4] == *b"QFI\xfb" {
        let mut size = [0u8; 8];
        size.copy_from_slice(&bytes[24..32]);
        return u64::from_be_bytes(size);
    }
    file_len
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) for migration log lines.
fn timestamp() -> String {
    app::format::utc(now_ms())
}

/// Keys whose value `qm set` shows URL-encoded (`sshkeys`).
fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn is_ssh_key(line: &str) -> bool {
    let mut parts = line.split_whitespace();
    let (Some(kind), Some(blob)) = (parts.next(), parts.next()) else {
        return false;
    };
    let known = matches!(kind, "ssh-ed25519" | "ssh-rsa" | "ssh-dss")
        || kind.starts_with("ecdsa-sha2-")
        || kind.starts_with("sk-");
    known
        && blob.len() >= 16
        && blob
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
}

/// `qm set` prints `update VM 101: -key value …` with the password hidden.
fn update_line(vmid: u32, options: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = options.iter().collect();
    sorted.sort();
    let shown: Vec<String> = sorted
        .iter()
        .map(|(k, v)| match k.as_str() {
            "cipassword" => format!("-{k} <hidden>"),
            _ => format!("-{k} {v}"),
        })
        .collect();
    format!("update VM {vmid}: {}", shown.join(" "))
}

/// `qm <verb> <vmid> --k v …` as a process list would show it, the
/// password hidden.
fn render(verb: &str, vmid: u32, options: &[(String, String)]) -> String {
    let mut line = format!("qm {verb} {vmid}");
    for (key, value) in options {
        let value = if key == "cipassword" {
            "<hidden>"
        } else {
            value.as_str()
        };
        line.push_str(&format!(" --{key} {value}"));
    }
    line
}

impl SimCluster {
    pub(super) async fn qm_create(
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
        params::verify(Verb::Create, options).map_err(|m| fail(&command, m))?;
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
            config.insert(
                "meta".into(),
                format!("creation-qemu=9.2.0,ctime={}", now_ms() / 1000),
            );
            config.insert(
                "smbios1".into(),
                format!("uuid=5a0c{vmid:04x}-0000-4000-8000-00000000{vmid:04x}"),
            );
            config.insert(
                "vmgenid".into(),
                format!("8b1f{vmid:04x}-0000-4000-8000-00000000{vmid:04x}"),
            );
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

    pub(super) async fn qm_importdisk(
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

    /// `qm set`; returns the lines it prints.
    pub(super) async fn qm_set(
        &self,
        node: &str,
        vmid: u32,
        options: &[(String, String)],
    ) -> Result<Vec<String>, PveError> {
        let command = render("set", vmid, options);
        self.strike("set", Some(vmid), &command).await?;
        if options.is_empty() {
            return Err(fail(&command, "no options specified"));
        }
        params::verify(Verb::Set, options).map_err(|m| fail(&command, m))?;

        // `--sshkeys FILE` reads the file on the node where qm runs (here).
        let mut resolved = Vec::with_capacity(options.len());
        for (key, value) in options {
            if key == "sshkeys" {
                let text = std::fs::read_to_string(value).map_err(|_| {
                    fail(
                        &command,
                        format!("can't open '{value}' - No such file or directory"),
                    )
                })?;
                if !text
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .all(is_ssh_key)
                {
                    return Err(fail(&command, "SSH public key validation error"));
                }
                resolved.push((key.clone(), url_encode(&text)));
            } else {
                resolved.push((key.clone(), value.clone()));
            }
        }

        let lines = self.change(|s| {
            let skiplock = options.iter().any(|(k, v)| k == "skiplock" && v == "1");
            vm_on(s, node, vmid, &command, skiplock)?;
            let storages = s.storages.clone();
            let vm = vm_mut(s, vmid).ok_or_else(|| fail(&command, "VM vanished"))?;
            let mut next = vm.config.clone();
            let mut volumes = vm.volumes.clone();
            let mut lines = vec![update_line(vmid, options)];
            for (key, value) in &resolved {
                match key.as_str() {
                    "tags" => {
                        next.insert(key.clone(), params::normalize_tags(value));
                    }
                    "delete" => {
                        for k in value.split(',') {
                            next.remove(k.trim());
                        }
                    }
                    "skiplock" | "digest" => {}
                    k if k.starts_with("scsi") || k.starts_with("ide") => {
                        let drive =
                            attach_drive(vmid, k, value, &storages, &mut volumes, &mut next)
                                .map_err(|m| fail(&command, m))?;
                        if let Some(line) = drive {
                            lines.push(line);
                        }
                    }
                    _ => {
                        next.insert(key.clone(), value.clone());
                    }
                }
            }
            check_balloon(&command, &next)?;
            vm.config = next;
            vm.volumes = volumes;
            Ok::<_, PveError>(lines)
        })?;
        self.clock.sleep(timing::SET).await;
        Ok(lines)
    }

    pub(super) async fn qm_resize(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<(), PveError> {
        let command = format!("qm resize {vmid} {disk} {size}");
        self.strike("resize", Some(vmid), &command).await?;
        let (relative, amount) = match size.strip_prefix('+') {
            Some(rest) => (true, rest),
            None => (false, size),
        };
        let bytes = parse_size(amount).ok_or_else(|| {
            fail(
                &command,
                format!("400 Parameter verification failed.\nsize: value '{size}' does not match the regex pattern"),
            )
        })?;
        self.change(|s| {
            vm_on(s, node, vmid, &command, false)?;
            let vm = vm_mut(s, vmid).ok_or_else(|| fail(&command, "VM vanished"))?;
            let drive = vm
                .config
                .get(disk)
                .cloned()
                .ok_or_else(|| fail(&command, format!("disk '{disk}' does not exist")))?;
            if drive.contains("media=cdrom") {
                return Err(fail(&command, "you can't resize a cdrom"));
            }
            let current = drive_size(&drive).unwrap_or(0);
            let wanted = if relative { current + bytes } else { bytes };
            if wanted < current {
                return Err(fail(&command, "shrinking disks is not supported"));
            }
            let volid = drive_volume(&drive).to_string();
            let rest: Vec<&str> = drive
                .split(',')
                .skip(1)
                .filter(|p| !p.starts_with("size="))
                .collect();
            let mut value = volid.clone();
            for part in rest {
                value.push(',');
                value.push_str(part);
            }
            value.push_str(&format!(",size={}", format_size(wanted)));
            vm.config.insert(disk.to_string(), value);
            vm.volumes.insert(volid, wanted);
            Ok(())
        })?;
        self.clock.sleep(timing::RESIZE).await;
        Ok(())
    }

    pub(super) async fn qm_config(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<BTreeMap<String, String>, PveError> {
        let command = format!("qm config {vmid}");
        self.strike("config", Some(vmid), &command).await?;
        self.clock.sleep(timing::READ).await;
        self.read(|s| {
            let vm = vm_on(s, node, vmid, &command, true)?;
            let mut config = vm.config.clone();
            if config.contains_key("cipassword") {
                config.insert("cipassword".into(), "**********".into());
            }
            Ok(config)
        })
    }

    pub(super) async fn qm_status(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        let command = format!("qm status {vmid}");
        self.record(&command);
        self.clock.sleep(timing::READ).await;
        self.read(|s| {
            let vm = vm_on(s, node, vmid, &command, true)?;
            Ok(if vm.running { "running" } else { "stopped" }.to_string())
        })
    }

    pub(super) async fn qm_power(
        &self,
        node: &str,
        vmid: u32,
        action: PowerAction,
    ) -> Result<(), PveError> {
        let command = format!("qm {} {vmid}", action.verb());
        self.strike(action.verb(), Some(vmid), &command).await?;
        let skiplock = matches!(action, PowerAction::Stop { skiplock: true });
        let running = self.read(|s| {
            let vm = vm_on(s, node, vmid, &command, skiplock)?;
            if action == PowerAction::Start && vm.is_template() {
                return Err(fail(&command, "you can't start a vm if it's a template"));
            }
            Ok(vm.running)
        })?;
        match action {
            PowerAction::Start => {
                if running {
                    return Err(fail(&command, format!("VM {vmid} already running")));
                }
                self.clock.sleep(timing::START).await;
                let boot = self.read(|s| {
                    s.vms.get(&vmid).map_or(timing::BOOT, |vm| {
                        if vm.initialized {
                            timing::BOOT
                        } else {
                            timing::FIRST_BOOT
                        }
                    })
                });
                let ready_at = self.clock.after(boot);
                self.change(|s| {
                    if let Some(vm) = vm_mut(s, vmid) {
                        vm.running = true;
                        vm.started = Some(now_ms());
                        vm.guest = Guest::Booting { ready_at };
                    }
                });
            }
            PowerAction::Stop { .. } | PowerAction::Shutdown => {
                if !running {
                    // Proxmox warns and succeeds.
                    return Ok(());
                }
                let ms = if action == PowerAction::Shutdown {
                    timing::SHUTDOWN
                } else {
                    timing::STOP
                };
                self.clock.sleep(ms).await;
                self.change(|s| {
                    if let Some(vm) = vm_mut(s, vmid) {
                        vm.running = false;
                        vm.started = None;
                        vm.guest = Guest::Off;
                    }
                });
            }
            PowerAction::Reboot => {
                if !running {
                    return Err(fail(&command, format!("VM {vmid} not running")));
                }
                self.clock.sleep(timing::REBOOT).await;
                let ready_at = self.clock.after(timing::BOOT);
                self.change(|s| {
                    if let Some(vm) = vm_mut(s, vmid) {
                        vm.started = Some(now_ms());
                        vm.guest = Guest::Booting { ready_at };
                    }
                });
            }
        }
        Ok(())
    }

    /// `qm destroy <id> --purge`; returns the lines it prints.
    pub(super) async fn qm_destroy(
        &self,
        node: &str,
        vmid: u32,
        skiplock: bool,
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
            Ok(())
        })?;
        self.clock.sleep(timing::DESTROY).await;
        self.change(|s| s.vms.remove(&vmid));
        Ok(vec![format!(
            "purging VM {vmid} from related configurations.."
        )])
    }

    pub(super) async fn qm_migrate(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let command = format!("qm migrate {vmid} {target}");
        self.strike("migrate", Some(vmid), &command).await?;
        let (volumes, target_ip) = self.change(|s| {
            let vm = vm_on(s, node, vmid, &command, false)?;
            if target == node {
                return Err(fail(
                    &command,
                    "400 Parameter verification failed.\ntarget: target is local node.",
                ));
            }
            let target_node = s
                .nodes
                .get(target)
                .ok_or_else(|| fail(&command, format!("no such cluster node '{target}'")))?;
            if !target_node.online {
                return Err(fail(
                    &command,
                    format!("migration aborted: target node '{target}' is not online"),
                ));
            }
            if vm.running {
                return Err(fail(&command, "can't migrate running VM without --online"));
            }
            let volumes: Vec<(String, u64)> =
                vm.volumes.iter().map(|(v, b)| (v.clone(), *b)).collect();
            let ip = target_node
                .ip
                .map_or_else(|| target.to_string(), |ip| ip.to_string());
            if let Some(vm) = vm_mut(s, vmid) {
                vm.config.insert("lock".into(), "migrate".into());
            }
            Ok((volumes, ip))
        })?;

        let started = now_ms();
        let log = |msg: &str| out(&format!("{} {msg}", timestamp()));
        log(&format!(
            "starting migration of VM {vmid} to node '{target}' ({target_ip})"
        ));
        for (volid, _) in &volumes {
            log(&format!("found local disk '{volid}' (attached)"));
        }
        log("copying local disk images");
        for (volid, bytes) in &volumes {
            // Thin volumes send what is written, about a third.
            let data = (bytes / 3).max(MIB);
            let name = volid.split(':').nth(1).unwrap_or(volid);
            log(&format!(
                "full send of rpool/data/{name}@__migration__ estimated size is {:.2}G",
                data as f64 / GIB as f64
            ));
            let chunks = 4;
            for i in 1..=chunks {
                self.clock
                    .sleep(data / timing::MIGRATE_BYTES_PER_MS / chunks)
                    .await;
                log(&format!(
                    "{:.2}G rpool/data/{name}@__migration__",
                    (data * i / chunks) as f64 / GIB as f64
                ));
            }
            log(&format!("successfully imported '{volid}'"));
            log(&format!("volume '{volid}' is '{volid}' on the target"));
        }
        self.change(|s| {
            if let Some(vm) = vm_mut(s, vmid) {
                vm.node = target.to_string();
                vm.config.remove("lock");
            }
        });
        let secs = self.clock.since(started) / 1000;
        log(&format!(
            "migration finished successfully (duration {:02}:{:02}:{:02})",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        ));
        Ok(())
    }
}

/// `balloon value too large (must be smaller than assigned memory)`.
fn check_balloon(command: &str, config: &BTreeMap<String, String>) -> Result<(), PveError> {
    let memory = config
        .get("memory")
        .and_then(|m| m.trim_start_matches("current=").parse::<u64>().ok())
        .unwrap_or(512);
    let balloon = config.get("balloon").and_then(|b| b.parse::<u64>().ok());
    match balloon {
        Some(b) if b > memory => Err(fail(
            command,
            "balloon value too large (must be smaller than assigned memory)",
        )),
        _ => Ok(()),
    }
}

/// `--scsi0 <volid>` attaches a VM volume (and drops its `unusedN` entry);
/// `--ide2 <storage>:cloudinit` creates the cloud-init drive. Returns the
/// line `qm` prints for a created disk.
fn attach_drive(
    vmid: u32,
    key: &str,
    value: &str,
    storages: &[super::state::SimStorage],
    volumes: &mut BTreeMap<String, u64>,
    config: &mut BTreeMap<String, String>,
) -> Result<Option<String>, String> {
    let volid = drive_volume(value);
    let extra: Vec<&str> = value.split(',').skip(1).collect();
    if let Some(storage) = volid.strip_suffix(":cloudinit") {
        let store = storages
            .iter()
            .find(|s| s.id == storage)
            .ok_or_else(|| format!("storage '{storage}' does not exist"))?;
        let ci = if store.is_file_based() {
            format!("{storage}:{vmid}/vm-{vmid}-cloudinit.qcow2")
        } else {
            format!("{storage}:vm-{vmid}-cloudinit")
        };
        volumes.insert(ci.clone(), 4 * MIB);
        let drive = format!("{ci},media=cdrom");
        config.insert(key.to_string(), drive.clone());
        return Ok(Some(format!(
            "{key}: successfully created disk '{drive},size=4M'"
        )));
    }
    let size = *volumes
        .get(volid)
        .ok_or_else(|| format!("volume '{volid}' does not exist"))?;
    let mut drive = volid.to_string();
    for part in extra.iter().filter(|p| !p.starts_with("size=")) {
        drive.push(',');
        drive.push_str(part);
    }
    drive.push_str(&format!(",size={}", format_size(size)));
    config.retain(|k, v| !(k.starts_with("unused") && v == volid));
    config.insert(key.to_string(), drive);
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_render_like_proxmox() {
        assert_eq!(render_bytes(0), "0.0 B");
        assert_eq!(render_bytes(21_495_808), "20.5 MiB");
        assert_eq!(render_bytes(2 * GIB), "2.0 GiB");
    }

    #[test]
    fn keys_are_checked_and_encoded() {
        assert!(is_ssh_key(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0 me@host"
        ));
        assert!(!is_ssh_key("ssh-ed25519"));
        assert!(!is_ssh_key("not a key at all"));
        assert_eq!(url_encode("a b\n"), "a%20b%0A");
    }

    #[test]
    fn update_lines_hide_the_password() {
        let line = update_line(
            101,
            &[
                ("cipassword".into(), "$6$x".into()),
                ("ciupgrade".into(), "0".into()),
            ],
        );
        assert_eq!(line, "update VM 101: -cipassword <hidden> -ciupgrade 0");
    }

    #[test]
    fn timestamps_have_the_migration_log_shape() {
        let t = timestamp();
        assert_eq!(t.len(), 19, "{t}");
        assert_eq!(&t[4..5], "-");
        assert_eq!(&t[10..11], " ");
    }
}
