//! The simulated cluster's data and the Proxmox views derived from it.

use std::collections::BTreeMap;

use crate::pve::types::MemoryInfo;
use crate::pve::{CpuInfo, NodeResource, NodeStatus, PveError, StorageStatus, VmResource};

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct SimNode {
    pub name: String,
    pub online: bool,
    pub cpuinfo: CpuInfo,
    pub mem_total: u64,
    /// What the host itself uses, before any VM.
    pub mem_host: u64,
    pub rootfs_total: u64,
    pub rootfs_used: u64,
    /// Fraction of the CPUs busy.
    pub cpu_load: f64,
    pub uptime: u64,
}

#[derive(Debug, Clone)]
pub struct SimStorage {
    pub id: String,
    pub kind: String,
    pub enabled: bool,
    /// An enabled storage that cannot be activated (an NFS server down).
    pub reachable: bool,
    /// Capacity on each node (local storages are per node).
    pub total: u64,
    pub used_base: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestKind {
    Qemu,
    Lxc,
}

#[derive(Debug, Clone)]
pub struct SimVm {
    pub vmid: u32,
    pub node: String,
    pub kind: GuestKind,
    /// `qm config` keys and values.
    pub config: BTreeMap<String, String>,
    pub running: bool,
    /// Guest memory in use, bytes (meaningful while running).
    pub mem_used: u64,
    /// Fraction of its vCPUs busy (while running).
    pub cpu_load: f64,
    pub uptime: u64,
}

impl SimVm {
    fn conf(&self, key: &str) -> Option<&str> {
        self.config.get(key).map(String::as_str)
    }

    fn conf_u64(&self, key: &str) -> Option<u64> {
        self.conf(key)?.parse().ok()
    }

    pub fn vcpus(&self) -> u32 {
        let cores = self.conf_u64("cores").unwrap_or(1);
        let sockets = self.conf_u64("sockets").unwrap_or(1);
        u32::try_from(cores * sockets).unwrap_or(u32::MAX)
    }

    pub fn memory_bytes(&self) -> u64 {
        // `memory` is `[current=]<MiB>`; Proxmox's default is 512.
        let raw = self.conf("memory").unwrap_or("512");
        let mib = raw
            .trim_start_matches("current=")
            .split(',')
            .next()
            .unwrap_or("512");
        mib.parse::<u64>().unwrap_or(512) * MIB
    }

    /// Size of the first disk in the boot order, as `maxdisk` reports it.
    pub fn boot_disk_bytes(&self) -> u64 {
        let order = self
            .conf("boot")
            .and_then(|b| b.strip_prefix("order="))
            .map(|o| o.split(';').map(str::to_string).collect::<Vec<_>>())
            .or_else(|| self.conf("bootdisk").map(|d| vec![d.to_string()]))
            .unwrap_or_else(|| vec!["scsi0".to_string()]);
        order
            .iter()
            .filter_map(|dev| self.conf(dev))
            .filter(|drive| !drive.contains("media=cdrom"))
            .find_map(drive_size)
            .unwrap_or(0)
    }

    pub fn is_template(&self) -> bool {
        self.conf("template") == Some("1")
    }

    fn resource(&self, node_online: bool) -> VmResource {
        let kind = match self.kind {
            GuestKind::Qemu => "qemu",
            GuestKind::Lxc => "lxc",
        };
        let mut vm = VmResource {
            id: format!("{kind}/{}", self.vmid),
            vmid: self.vmid,
            node: self.node.clone(),
            kind: kind.to_string(),
            status: if self.running { "running" } else { "stopped" }.to_string(),
            name: Some(
                self.conf("name")
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("VM {}", self.vmid)),
            ),
            template: self.is_template(),
            maxcpu: self.vcpus(),
            maxmem: self.memory_bytes(),
            maxdisk: self.boot_disk_bytes(),
            tags: self.conf("tags").map(str::to_string),
            lock: self.conf("lock").map(str::to_string),
            ..VmResource::default()
        };
        if !node_online {
            // No fresh stats from an unreachable node: Proxmox reports `unknown`.
            vm.status = "unknown".to_string();
        } else if self.running {
            vm.mem = self.mem_used;
            vm.cpu = self.cpu_load;
            vm.uptime = self.uptime;
        }
        vm
    }
}

/// `size=` of a drive property string such as `local-zfs:vm-101-disk-0,size=40G`.
pub fn drive_size(drive: &str) -> Option<u64> {
    drive
        .split(',')
        .find_map(|part| part.strip_prefix("size="))
        .and_then(parse_size)
}

/// Proxmox sizes: a number with an optional `K`, `M`, `G` or `T` suffix (bytes without one).
pub fn parse_size(raw: &str) -> Option<u64> {
    let (num, unit) = match raw.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => raw.split_at(i),
        None => (raw, ""),
    };
    let factor: u64 = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return None,
    };
    let value: f64 = num.parse().ok()?;
    (value >= 0.0).then_some((value * factor as f64) as u64)
}

#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub nodes: BTreeMap<String, SimNode>,
    pub storages: Vec<SimStorage>,
    pub vms: BTreeMap<u32, SimVm>,
}

impl ClusterState {
    fn node(&self, name: &str) -> Result<&SimNode, PveError> {
        self.nodes
            .get(name)
            .ok_or_else(|| PveError::NoSuchNode(name.to_string()))
    }

    fn online_node(&self, name: &str, command: &str) -> Result<&SimNode, PveError> {
        let node = self.node(name)?;
        if !node.online {
            return Err(PveError::Command {
                command: command.to_string(),
                message: format!("500 node '{name}' is offline (no quorum?)"),
            });
        }
        Ok(node)
    }

    pub fn set_node_online(&mut self, name: &str, online: bool) -> Result<(), PveError> {
        let node = self
            .nodes
            .get_mut(name)
            .ok_or_else(|| PveError::NoSuchNode(name.to_string()))?;
        node.online = online;
        Ok(())
    }

    fn node_online(&self, name: &str) -> bool {
        self.nodes.get(name).is_some_and(|n| n.online)
    }

    /// Ordered as Proxmox orders them: by VMID compared as a string.
    pub fn vm_resources(&self) -> Vec<VmResource> {
        let mut vms: Vec<VmResource> = self
            .vms
            .values()
            .map(|vm| vm.resource(self.node_online(&vm.node)))
            .collect();
        vms.sort_by_key(|vm| vm.vmid.to_string());
        vms
    }

    fn running_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a SimVm> + 'a {
        self.vms
            .values()
            .filter(move |vm| vm.node == node && vm.running)
    }

    fn node_mem_used(&self, node: &SimNode) -> u64 {
        node.mem_host
            + self
                .running_on(&node.name)
                .map(|vm| vm.mem_used)
                .sum::<u64>()
    }

    pub fn node_resources(&self) -> Vec<NodeResource> {
        self.nodes
            .values()
            .map(|node| {
                let mut res = NodeResource {
                    id: format!("node/{}", node.name),
                    node: node.name.clone(),
                    kind: "node".to_string(),
                    status: if node.online { "online" } else { "offline" }.to_string(),
                    maxcpu: Some(node.cpuinfo.cpus),
                    maxmem: Some(node.mem_total),
                    maxdisk: Some(node.rootfs_total),
                    level: Some(String::new()),
                    ..NodeResource::default()
                };
                if node.online {
                    res.cpu = Some(node.cpu_load);
                    res.mem = Some(self.node_mem_used(node));
                    res.disk = Some(node.rootfs_used);
                    res.uptime = Some(node.uptime);
                }
                res
            })
            .collect()
    }

    pub fn node_status(&self, name: &str) -> Result<NodeStatus, PveError> {
        let node = self.online_node(name, &format!("pvesh get /nodes/{name}/status"))?;
        let used = self.node_mem_used(node);
        Ok(NodeStatus {
            cpuinfo: node.cpuinfo.clone(),
            memory: MemoryInfo {
                total: node.mem_total,
                used,
                free: node.mem_total.saturating_sub(used),
            },
            uptime: node.uptime,
            cpu: node.cpu_load,
            pveversion: "pve-manager/9.1.2/9d436f37a0ac4172".to_string(),
            kversion: "Linux 6.17.4-1-pve #1 SMP PREEMPT_DYNAMIC PMX 6.17.4-1 \
                       (2025-12-03T15:42Z)"
                .to_string(),
        })
    }

    pub fn storage_status(&self, name: &str) -> Result<Vec<StorageStatus>, PveError> {
        self.online_node(name, "pvesm status")?;
        let mut rows: Vec<StorageStatus> = self
            .storages
            .iter()
            .map(|s| {
                let (status, total, used) = match (s.enabled, s.reachable) {
                    (false, _) => ("disabled", 0, 0),
                    (true, false) => ("inactive", 0, 0),
                    (true, true) => {
                        let used = s.used_base + self.allocated_on_storage(name, &s.id) / 3;
                        ("active", s.total, used.min(s.total))
                    }
                };
                StorageStatus {
                    name: s.id.clone(),
                    kind: s.kind.clone(),
                    status: status.to_string(),
                    total_kib: total / 1024,
                    used_kib: used / 1024,
                    avail_kib: (total - used) / 1024,
                }
            })
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(rows)
    }

    /// Bytes of VM disks on `storage` of `node`; thin-provisioned pools hold
    /// about a third of that in data, which is what `used` shows.
    fn allocated_on_storage(&self, node: &str, storage: &str) -> u64 {
        let prefix = format!("{storage}:");
        self.vms
            .values()
            .filter(|vm| vm.node == node)
            .flat_map(|vm| vm.config.values())
            .filter(|drive| drive.starts_with(&prefix) && !drive.contains("media=cdrom"))
            .filter_map(|drive| drive_size(drive))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_proxmox() {
        assert_eq!(parse_size("40G"), Some(40 * GIB));
        assert_eq!(parse_size("512M"), Some(512 * MIB));
        assert_eq!(parse_size("1.5T"), Some(3 * (1 << 39)));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("4X"), None);
        assert_eq!(
            drive_size("local-zfs:vm-101-disk-0,iothread=1,size=32G"),
            Some(32 * GIB)
        );
    }

    #[test]
    fn boot_disk_follows_the_boot_order_and_skips_cdroms() {
        let vm = SimVm {
            vmid: 101,
            node: "pve1".into(),
            kind: GuestKind::Qemu,
            config: [
                ("boot", "order=ide2;scsi1;scsi0"),
                ("ide2", "local-zfs:vm-101-cloudinit,media=cdrom,size=4M"),
                ("scsi0", "local-zfs:vm-101-disk-0,size=32G"),
                ("scsi1", "local-zfs:vm-101-disk-1,size=8G"),
                ("memory", "current=2048"),
                ("cores", "2"),
                ("sockets", "2"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            running: false,
            mem_used: 0,
            cpu_load: 0.0,
            uptime: 0,
        };
        assert_eq!(vm.boot_disk_bytes(), 8 * GIB);
        assert_eq!(vm.memory_bytes(), 2048 * MIB);
        assert_eq!(vm.vcpus(), 4);
    }
}
