//! `qm set`, `qm resize` (and `qm disk resize`), `qm config`.

use std::collections::BTreeMap;

use pvedeck_domain::rules::is_openssh_key;
use pvedeck_proxmox::PveError;
use pvedeck_proxmox::drive::{MIB, drive_size, drive_volume, format_size, parse_size};
// `qm set --sshkeys <file>` stores the file URI-escaped (qm.pm's
// `param_mapping`: `URI::Escape::uri_escape(file_get_contents(…))`).
use pvedeck_proxmox::escape::uri_escape;

use super::{fail, render, update_line, vm_mut, vm_on};
use crate::params::{self, Verb};
use crate::state::SimStorage;
use crate::{SimCluster, timing};

impl SimCluster {
    pub async fn qm_set(
        &self,
        node: &str,
        vmid: u32,
        options: &[(String, String)],
    ) -> Result<Vec<String>, PveError> {
        let command = render("set", vmid, options);
        self.strike("set", Some(vmid), &command).await?;
        self.apply_set(node, vmid, options, &command).await
    }

    /// The attachment an API `import-from` ends with: part of the import
    /// (whose fault it met already), not a `qm set` of its own.
    pub async fn attach_imported(
        &self,
        node: &str,
        vmid: u32,
        options: &[(String, String)],
    ) -> Result<Vec<String>, PveError> {
        let command = render("set", vmid, options);
        self.apply_set(node, vmid, options, &command).await
    }

    async fn apply_set(
        &self,
        node: &str,
        vmid: u32,
        options: &[(String, String)],
        command: &str,
    ) -> Result<Vec<String>, PveError> {
        let command = command.to_string();
        if options.is_empty() {
            return Err(fail(&command, "no options specified"));
        }
        params::verify(Verb::Set, options).map_err(|m| fail(&command, m.to_string()))?;

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
                    .all(|line| is_openssh_key(line.trim()))
                {
                    return Err(fail(&command, "SSH public key validation error"));
                }
                resolved.push((key.clone(), uri_escape(&text)));
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
                                .map_err(|m| fail(&command, m.to_string()))?;
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

    pub async fn qm_resize(
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
        let resized = self.change(|s| {
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
            vm.volumes.insert(volid.clone(), wanted);
            Ok((volid, wanted))
        })?;
        if let Some(real) = &self.real {
            real.resize(&resized.0, resized.1, &command).await?;
        }
        self.clock.sleep(timing::RESIZE).await;
        Ok(())
    }

    pub async fn qm_config(
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
}

/// `balloon value too large (must be smaller than assigned memory)`.
pub(super) fn check_balloon(
    command: &str,
    config: &BTreeMap<String, String>,
) -> Result<(), PveError> {
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

/// Why a drive cannot be attached, as `qm set` says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum DriveError {
    #[error("storage '{0}' does not exist")]
    NoStorage(String),
    #[error("volume '{0}' does not exist")]
    NoVolume(String),
}

/// `--scsi0 <volid>` attaches a VM volume (and drops its `unusedN` entry);
/// `--ide2 <storage>:cloudinit` creates the cloud-init drive. Returns the
/// line `qm` prints for a created disk.
fn attach_drive(
    vmid: u32,
    key: &str,
    value: &str,
    storages: &[SimStorage],
    volumes: &mut BTreeMap<String, u64>,
    config: &mut BTreeMap<String, String>,
) -> Result<Option<String>, DriveError> {
    let volid = drive_volume(value);
    let extra: Vec<&str> = value.split(',').skip(1).collect();
    if let Some(storage) = volid.strip_suffix(":cloudinit") {
        let store = storages
            .iter()
            .find(|s| s.id == storage)
            .ok_or_else(|| DriveError::NoStorage(storage.to_string()))?;
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
        .ok_or_else(|| DriveError::NoVolume(volid.to_string()))?;
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
    fn keys_are_encoded() {
        assert_eq!(uri_escape("a b\n"), "a%20b%0A");
    }
}
