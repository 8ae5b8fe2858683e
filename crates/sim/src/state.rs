//! The simulated cluster's data and the Proxmox views derived from it. All of
//! it is plain data, saved as JSON in `DATA_DIR` after every change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use pvedeck_proxmox::drive::{MIB, drive_size};
use pvedeck_proxmox::types::MemoryInfo;
use pvedeck_proxmox::{CpuInfo, NodeResource, NodeStatus, PveError, StorageStatus, VmResource};
use pvedeck_support::clock::{Clock, now_ms};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimNode {
    pub name: String,
    /// Its `NODE_<name>` address, for messages.
    #[serde(default)]
    pub ip: Option<std::net::Ipv4Addr>,
    pub online: bool,
    pub cpuinfo: CpuInfo,
    pub mem_total: u64,
    /// What the host itself uses, before any VM.
    pub mem_host: u64,
    pub rootfs_total: u64,
    pub rootfs_used: u64,
    /// Fraction of the CPUs busy.
    pub cpu_load: f64,
    /// Unix ms of the node's boot.
    pub booted: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimStorage {
    pub id: String,
    /// `dir`, `zfspool`, `lvmthin`, `nfs`…
    pub kind: String,
    /// Content types, as in storage.cfg (`images,rootdir`…).
    pub content: String,
    pub enabled: bool,
    /// An enabled storage that cannot be activated (an NFS server down).
    pub reachable: bool,
    /// Capacity on each node (local storages are per node).
    pub total: u64,
    pub used_base: u64,
}

impl SimStorage {
    pub fn holds_images(&self) -> bool {
        self.content.split(',').any(|c| c == "images")
    }

    /// File-based storages name volumes `<vmid>/<name>.<fmt>`.
    pub fn is_file_based(&self) -> bool {
        matches!(self.kind.as_str(), "dir" | "nfs" | "cifs" | "btrfs")
    }

    /// Storages every node reaches (pve-storage: the plugin's `shared`
    /// property, or `shared 1` in storage.cfg for the network file systems).
    pub fn is_shared(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "nfs" | "cifs" | "rbd" | "cephfs" | "glusterfs" | "iscsi" | "pbs"
        )
    }

    pub fn is_active(&self) -> bool {
        self.enabled && self.reachable
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestKind {
    Qemu,
    Lxc,
}

/// Where a guest's operating system is, as far as someone knocking on its
/// SSH port can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Guest {
    /// Powered off.
    Off,
    /// Booting: SSH answers from `ready_at` (unix ms) on.
    Booting { ready_at: i64 },
    /// Up and answering.
    Up,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimVm {
    pub vmid: u32,
    pub node: String,
    pub kind: GuestKind,
    /// `qm config` keys and values (without `digest`).
    pub config: BTreeMap<String, String>,
    /// Volumes this VM owns: volume id → bytes.
    #[serde(default)]
    pub volumes: BTreeMap<String, u64>,
    pub running: bool,
    pub guest: Guest,
    /// Unix ms of the last start.
    #[serde(default)]
    pub started: Option<i64>,
    /// Guest memory in use once settled, bytes.
    pub mem_plateau: u64,
    /// Fraction of its vCPUs busy while running.
    pub cpu_load: f64,
    /// The init script has run inside (pvedeck's SSH initialization).
    #[serde(default)]
    pub initialized: bool,
    /// What is on the guest's disk that makes it itself (a clone copies it).
    #[serde(default)]
    pub inside: Inside,
    /// `/etc/pve/firewall/<vmid>.fw`: its options and ipsets. It goes with
    /// the VM (qemu-server's destroy removes it) and a clone gets a copy
    /// (`clone_vmfw_conf`).
    #[serde(default)]
    pub firewall: VmFirewall,
}

/// A VM's firewall configuration, as pve-firewall keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmFirewall {
    /// `[OPTIONS]`: `enable`, `ipfilter`, `policy_in`… as written.
    pub options: BTreeMap<String, String>,
    /// `[IPSET <name>]` sections.
    pub ipsets: BTreeMap<String, Ipset>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ipset {
    #[serde(default)]
    pub comment: Option<String>,
    /// Newest first, as the API adds them (`unshift`).
    pub entries: Vec<IpsetEntry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IpsetEntry {
    /// An address or a network, `/32` left out as pve-firewall writes it.
    pub cidr: String,
    #[serde(default)]
    pub nomatch: bool,
}

impl VmFirewall {
    fn flag(&self, key: &str) -> bool {
        self.options.get(key).map(String::as_str) == Some("1")
    }
}

/// An address a guest answers for besides its own (`ip addr add` inside,
/// and ARP answers for it): what a hostile tenant does to take the next
/// VM's address. It answers there with an identity of its own making, not
/// its VM's, so that nothing recorded of that VM gives it away.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub ip: std::net::Ipv4Addr,
    pub machine_id: String,
    pub host_key: String,
    /// What reached it on that address: `ready` for each readiness probe,
    /// `script <root hash>` for each init script (the hash empty without a
    /// root password).
    #[serde(default)]
    pub received: Vec<String>,
}

/// The parts of a guest's disk that identify it and what answers for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inside {
    /// `/etc/machine-id`: empty until a boot writes one (a fresh image, or
    /// after `cloud-init clean --machine-id`).
    pub machine_id: String,
    /// `/etc/ssh/ssh_host_ed25519_key.pub` (without the comment): made by
    /// sshd's first start when missing.
    pub host_key: String,
    /// qemu-guest-agent is installed (the init scripts install it).
    pub agent: bool,
    /// root's entry in `/etc/shadow`: the crypt hash the init script set
    /// (`chpasswd -e`), empty when none was sent.
    #[serde(default)]
    pub root_hash: String,
    /// Other VMs' addresses this guest claims (a hostile tenant).
    #[serde(default)]
    pub claims: Vec<Claim>,
}

impl Inside {
    /// What a boot writes where nothing is: a new machine-id, new host keys.
    pub fn boot(&mut self, vmid: u32) {
        if self.machine_id.is_empty() {
            self.machine_id = format!("{:016x}{:016x}", random(vmid, 1), random(vmid, 2));
        }
        if self.host_key.is_empty() {
            let mut blob = Vec::with_capacity(51);
            // The wire form of an ed25519 public key: its type, then 32 bytes.
            blob.extend_from_slice(&11u32.to_be_bytes());
            blob.extend_from_slice(b"ssh-ed25519");
            blob.extend_from_slice(&32u32.to_be_bytes());
            for i in 0..4 {
                blob.extend_from_slice(&random(vmid, 3 + i).to_be_bytes());
            }
            use base64::Engine as _;
            let encoded = base64::engine::general_purpose::STANDARD.encode(&blob);
            self.host_key = format!("ssh-ed25519 {encoded}");
        }
    }
}

/// 64 unpredictable bits (a new seed per call), for identities.
fn random(vmid: u32, salt: u64) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((vmid, salt, now_ms()))
}

impl SimVm {
    pub fn conf(&self, key: &str) -> Option<&str> {
        self.config.get(key).map(String::as_str)
    }

    fn conf_u64(&self, key: &str) -> Option<u64> {
        self.conf(key)?.parse().ok()
    }

    pub fn lock(&self) -> Option<&str> {
        self.conf("lock")
    }

    pub fn vcpus(&self) -> u32 {
        let cores = self.conf_u64("cores").unwrap_or(1);
        let sockets = self.conf_u64("sockets").unwrap_or(1);
        u32::try_from(cores * sockets).unwrap_or(u32::MAX)
    }

    pub fn memory_mib(&self) -> u64 {
        // `memory` is `[current=]<MiB>`; Proxmox's default is 512.
        let raw = self.conf("memory").unwrap_or("512");
        let mib = raw
            .trim_start_matches("current=")
            .split(',')
            .next()
            .unwrap_or("512");
        mib.parse::<u64>().unwrap_or(512)
    }

    pub fn memory_bytes(&self) -> u64 {
        self.memory_mib() * MIB
    }

    /// Size of the first disk in the boot order, as `maxdisk` reports it.
    pub fn boot_disk_bytes(&self) -> u64 {
        let order: Vec<String> = match self.conf("boot") {
            Some(b) if b.starts_with("order=") => {
                b["order=".len()..].split(';').map(str::to_string).collect()
            }
            _ => vec![self.conf("bootdisk").unwrap_or("scsi0").to_string()],
        };
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

    /// Memory in use now: it climbs for a minute after boot, then moves a
    /// few per cent around its plateau (`jitter` is that fraction).
    pub fn mem_used(&self, clock: &Clock, jitter: f64) -> u64 {
        if !self.running {
            return 0;
        }
        let up_ms = self.started.map_or(u64::MAX, |s| clock.since(s));
        let ramp = (up_ms as f64 / 60_000.0).clamp(0.15, 1.0);
        let t = now_ms() as f64 / 1000.0;
        let wave = 1.0 + jitter * (t / 7.0 + f64::from(self.vmid)).sin();
        ((self.mem_plateau as f64) * ramp * wave).min(self.memory_bytes() as f64) as u64
    }

    fn uptime(&self) -> u64 {
        match (self.running, self.started) {
            (true, Some(s)) => wall_secs_since(s),
            _ => 0,
        }
    }

    fn resource(&self, node_online: bool, clock: &Clock, jitter: f64) -> VmResource {
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
            lock: self.lock().map(str::to_string),
            ..VmResource::default()
        };
        if !node_online {
            // No fresh stats from an unreachable node: Proxmox reports `unknown`.
            vm.status = "unknown".to_string();
        } else if self.running {
            vm.mem = self.mem_used(clock, jitter);
            vm.cpu = self.cpu_load;
            vm.uptime = self.uptime();
        }
        vm
    }
}

/// Whether `cidr` (`a.b.c.d` or `a.b.c.d/n`) holds `ip`.
pub fn cidr_holds(cidr: &str, ip: std::net::Ipv4Addr) -> bool {
    let (addr, bits) = match cidr.split_once('/') {
        Some((a, b)) => (a, b.parse::<u32>().ok()),
        None => (cidr, Some(32)),
    };
    let (Ok(net), Some(bits @ 0..=32)) = (addr.parse::<std::net::Ipv4Addr>(), bits) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
    u32::from(net) & mask == u32::from(ip) & mask
}

/// Uptimes are wall-clock: nodes and seeded VMs were up before the
/// simulation began.
fn wall_secs_since(ms: i64) -> u64 {
    u64::try_from((now_ms() - ms).max(0) / 1000).unwrap_or(0)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClusterState {
    pub nodes: BTreeMap<String, SimNode>,
    pub storages: Vec<SimStorage>,
    pub vms: BTreeMap<u32, SimVm>,
    /// Last octets of addresses where a host that is not a VM answers on
    /// port 22 (VMID allocation must skip them).
    #[serde(default)]
    pub foreign_hosts: Vec<u8>,
    /// Injected faults (shared with the command-line stand-ins).
    #[serde(default)]
    pub faults: super::faults::Faults,
    /// `/etc/pve/firewall/cluster.fw`'s `[OPTIONS]` (`enable`…): off, as
    /// on a new Proxmox cluster.
    #[serde(default)]
    pub firewall: BTreeMap<String, String>,
    /// Disks left on a storage by a `qm destroy` without
    /// `--destroy-unreferenced-disks`: volume id → (node, bytes). They
    /// take space until removed (`pvesm free`).
    #[serde(default)]
    pub orphans: BTreeMap<String, (String, u64)>,
}

impl ClusterState {
    pub fn node(&self, name: &str) -> Result<&SimNode, PveError> {
        self.nodes
            .get(name)
            .ok_or_else(|| PveError::NoSuchNode(name.to_string()))
    }

    /// The node a command runs on (locally or through ssh) must be up.
    pub fn online_node(&self, name: &str, command: &str) -> Result<&SimNode, PveError> {
        let node = self.node(name)?;
        if !node.online {
            let host = node
                .ip
                .map_or_else(|| name.to_string(), |ip| ip.to_string());
            return Err(PveError::command(
                command,
                format!("ssh: connect to host {host} port 22: No route to host"),
                255,
            ));
        }
        Ok(node)
    }

    /// After pvedeck restarts, no simulated command is running any more:
    /// the locks they held are released, and injected faults (test
    /// instruments) are forgotten.
    pub fn recover_after_restart(&mut self) {
        self.faults.clear();
        for vm in self.vms.values_mut() {
            if let Some(lock) = vm.config.remove("lock") {
                tracing::warn!(
                    vmid = vm.vmid,
                    lock,
                    "sim: released a lock left by a restart"
                );
            }
        }
    }

    /// The VM whose cloud-init gives it `ip` (a template build borrows an
    /// address), else the VM whose id is the address's last octet.
    pub fn vm_at(&self, ip: std::net::Ipv4Addr) -> Option<u32> {
        let given = format!("ip={ip}/");
        self.vms
            .values()
            .find(|vm| vm.conf("ipconfig0").is_some_and(|c| c.starts_with(&given)))
            .or_else(|| self.vms.get(&u32::from(ip.octets()[3])))
            .map(|vm| vm.vmid)
    }

    /// Whether the datacenter firewall is on: without it pve-firewall
    /// compiles no rule at all (`PVE/Firewall.pm`, `compile`).
    pub fn firewall_enabled(&self) -> bool {
        self.firewall
            .get("enable")
            .and_then(|e| e.parse::<u64>().ok())
            .is_some_and(|e| e >= 1)
    }

    /// Whether what `vm` sends from `ip` leaves its `net0`, as pve-firewall
    /// decides: filtered only where the datacenter firewall is on, the
    /// VM's firewall is enabled, `net0` has `firewall=1` and the VM has
    /// `ipfilter: 1` or an `ipfilter-net0` ipset
    /// (`generate_tap_rules_direction`); then only what that ipset holds
    /// passes (for a VM nothing but the IPv6 link-local address is implicit,
    /// `compile_ipsets`), the ARP answers alike (`compile_ebtables_filter`).
    pub fn sends_from(&self, vm: &SimVm, ip: std::net::Ipv4Addr) -> bool {
        let fw = &vm.firewall;
        let set = fw.ipsets.get(pvedeck_proxmox::firewall::IPSET);
        let nic_filtered = vm
            .conf("net0")
            .is_some_and(|net| net.split(',').any(|o| o == "firewall=1"));
        let filtered = self.firewall_enabled()
            && fw.flag("enable")
            && nic_filtered
            && (fw.flag("ipfilter") || set.is_some());
        if !filtered {
            return true;
        }
        set.is_some_and(|set| {
            // ipset's `nomatch` entries carve out of the others.
            let hit = |nomatch: bool| {
                set.entries
                    .iter()
                    .any(|e| e.nomatch == nomatch && cidr_holds(&e.cidr, ip))
            };
            hit(false) && !hit(true)
        })
    }

    /// The guest that answers for `ip` though it is not its own: a running,
    /// booted VM claiming it whose claim reaches the wire. It strikes once
    /// the address's own VM runs (it waits to see it, so the VMID probe
    /// before finds nobody) and wins the race for every connection then
    /// (the attacker's best case, which is what a test must stand).
    pub fn claimant(&self, ip: std::net::Ipv4Addr) -> Option<(u32, usize)> {
        let given = format!("ip={ip}/");
        let owner_runs = self
            .vms
            .values()
            .any(|vm| vm.running && vm.conf("ipconfig0").is_some_and(|c| c.starts_with(&given)));
        if !owner_runs {
            return None;
        }
        self.vms.values().find_map(|vm| {
            let up = vm.running && matches!(vm.guest, Guest::Up) && self.node_online(&vm.node);
            let claim = vm.inside.claims.iter().position(|c| c.ip == ip)?;
            (up && self.sends_from(vm, ip)).then_some((vm.vmid, claim))
        })
    }

    pub fn storage(&self, id: &str) -> Option<&SimStorage> {
        self.storages.iter().find(|s| s.id == id)
    }

    pub fn set_node_online(&mut self, name: &str, online: bool) -> Result<(), PveError> {
        let node = self
            .nodes
            .get_mut(name)
            .ok_or_else(|| PveError::NoSuchNode(name.to_string()))?;
        node.online = online;
        Ok(())
    }

    pub fn node_online(&self, name: &str) -> bool {
        self.nodes.get(name).is_some_and(|n| n.online)
    }

    /// Ordered as Proxmox orders them: by VMID compared as a string.
    pub fn vm_resources(&self, clock: &Clock, jitter: f64) -> Vec<VmResource> {
        let mut vms: Vec<VmResource> = self
            .vms
            .values()
            .map(|vm| vm.resource(self.node_online(&vm.node), clock, jitter))
            .collect();
        vms.sort_by_key(|vm| vm.vmid.to_string());
        vms
    }

    fn node_mem_used(&self, node: &SimNode, clock: &Clock, jitter: f64) -> u64 {
        let guests: u64 = self
            .vms
            .values()
            .filter(|vm| vm.node == node.name)
            .map(|vm| vm.mem_used(clock, jitter))
            .sum();
        node.mem_host + guests
    }

    pub fn node_resources(&self, clock: &Clock, jitter: f64) -> Vec<NodeResource> {
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
                    res.mem = Some(self.node_mem_used(node, clock, jitter));
                    res.disk = Some(node.rootfs_used);
                    res.uptime = Some(wall_secs_since(node.booted));
                }
                res
            })
            .collect()
    }

    /// `/nodes/<name>/rrddata`: the node's history as its load now draws it.
    pub fn rrddata(
        &self,
        name: &str,
        timeframe: pvedeck_domain::types::Timeframe,
        clock: &Clock,
        jitter: f64,
    ) -> Vec<pvedeck_proxmox::RrdRow> {
        let Some(node) = self.nodes.get(name) else {
            return Vec::new();
        };
        let load = super::rrd::Load {
            cpu: node.cpu_load,
            cpus: node.cpuinfo.cpus,
            mem_used: self.node_mem_used(node, clock, jitter) as f64,
            mem_total: node.mem_total as f64,
            running_vms: self
                .vms
                .values()
                .filter(|vm| vm.node == node.name && vm.running)
                .count(),
        };
        super::rrd::rows(name, load, timeframe, now_ms() / 1000)
    }

    pub fn node_status(&self, name: &str, clock: &Clock, jitter: f64) -> NodeStatus {
        let Some(node) = self.nodes.get(name) else {
            return NodeStatus::default();
        };
        let used = self.node_mem_used(node, clock, jitter);
        NodeStatus {
            cpuinfo: node.cpuinfo.clone(),
            memory: MemoryInfo {
                total: node.mem_total,
                used,
                free: node.mem_total.saturating_sub(used),
            },
            uptime: wall_secs_since(node.booted),
            cpu: node.cpu_load,
            pveversion: "pve-manager/9.1.2/9d436f37a0ac4172".to_string(),
            kversion: "Linux 6.17.4-1-pve #1 SMP PREEMPT_DYNAMIC PMX 6.17.4-1 \
                       (2025-12-03T15:42Z)"
                .to_string(),
        }
    }

    /// `pvesm status [--content <type>]`.
    pub fn storage_status(&self, node: &str, content: Option<&str>) -> Vec<StorageStatus> {
        let mut rows: Vec<StorageStatus> = self
            .storages
            .iter()
            .filter(|s| content.is_none_or(|c| s.content.split(',').any(|have| have == c)))
            .map(|s| {
                let (status, total, used) = match (s.enabled, s.reachable) {
                    (false, _) => ("disabled", 0, 0),
                    (true, false) => ("inactive", 0, 0),
                    (true, true) => {
                        let used = s.used_base + self.allocated_on_storage(node, &s.id) / 3;
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
        rows
    }

    /// Bytes of VM volumes on `storage` of `node`; thin-provisioned pools hold
    /// about a third of that in data, which is what `used` shows.
    fn allocated_on_storage(&self, node: &str, storage: &str) -> u64 {
        let prefix = format!("{storage}:");
        self.vms
            .values()
            .filter(|vm| vm.node == node)
            .flat_map(|vm| vm.volumes.iter())
            .filter(|(volid, _)| volid.starts_with(&prefix))
            .map(|(_, size)| *size)
            .sum::<u64>()
            + self
                .orphans
                .iter()
                .filter(|(volid, (on, _))| on == node && volid.starts_with(&prefix))
                .map(|(_, (_, size))| *size)
                .sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvedeck_proxmox::drive::GIB;

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
            volumes: BTreeMap::new(),
            running: false,
            guest: Guest::Off,
            started: None,
            mem_plateau: 0,
            cpu_load: 0.0,
            initialized: false,
            inside: Inside::default(),
            firewall: VmFirewall::default(),
        };
        assert_eq!(vm.boot_disk_bytes(), 8 * GIB);
        assert_eq!(vm.memory_bytes(), 2048 * MIB);
        assert_eq!(vm.vcpus(), 4);
    }

    #[test]
    fn a_boot_writes_a_missing_identity_and_keeps_an_existing_one() {
        let mut inside = Inside::default();
        inside.boot(107);
        assert_eq!(inside.machine_id.len(), 32, "{}", inside.machine_id);
        assert!(
            inside
                .host_key
                .starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI")
        );
        let before = inside.clone();
        inside.boot(107);
        assert_eq!(inside, before, "a second boot changes nothing");
        let mut other = Inside::default();
        other.boot(107);
        assert_ne!(other.machine_id, before.machine_id, "each VM its own");
    }
}
