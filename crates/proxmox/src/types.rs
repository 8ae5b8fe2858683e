//! Proxmox's data, field for field as `pvesh … --output-format json` prints it
//! (docs/backends.md#cluster-resources,
//! docs/backends.md#node-status-and-cpu-flags, docs/backends.md#pvesm-status).
//! Optional fields are the ones Proxmox leaves out (a VM whose stats are not
//! yet known has only `id, vmid, node, type, status`; an offline node has no
//! `cpu`, `mem`…).

use serde::{Deserialize, Serialize};

use super::json::{cpu_count, int_bool, text_or_number};

/// One element of `/cluster/resources --type vm`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct VmResource {
    pub id: String,
    pub vmid: u32,
    pub node: String,
    /// `qemu` or `lxc`.
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, with = "int_bool")]
    pub template: bool,
    /// Whole vCPUs: an LXC's fractional `cpulimit` rounded up.
    #[serde(default, with = "cpu_count")]
    pub maxcpu: u32,
    /// Fraction of `maxcpu` in use.
    #[serde(default)]
    pub cpu: f64,
    /// Bytes.
    #[serde(default)]
    pub maxmem: u64,
    /// Bytes.
    #[serde(default)]
    pub mem: u64,
    /// Bytes: size of the first boot disk.
    #[serde(default)]
    pub maxdisk: u64,
    #[serde(default)]
    pub disk: u64,
    #[serde(default)]
    pub uptime: u64,
    #[serde(default)]
    pub netin: u64,
    #[serde(default)]
    pub netout: u64,
    #[serde(default)]
    pub diskread: u64,
    #[serde(default)]
    pub diskwrite: u64,
    /// `;`-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
}

impl VmResource {
    pub fn is_qemu(&self) -> bool {
        self.kind == "qemu"
    }

    fn tag_list(&self) -> impl Iterator<Item = &str> {
        self.tags
            .as_deref()
            .unwrap_or_default()
            .split([';', ',', ' '])
            .filter(|t| !t.is_empty())
    }

    /// The first tag that is not one of pvedeck's own (`pvedeck`,
    /// `pvedeck-template`…): go-pve-qemu's "os", whatever order Proxmox
    /// keeps the tags in.
    pub fn os_tag(&self) -> Option<&str> {
        self.tag_list().find(|t| !t.starts_with("pvedeck"))
    }

    pub fn has_tag(&self, tag: &str) -> bool {
        self.tag_list().any(|t| t == tag)
    }
}

/// One element of `/cluster/resources --type node` (and of `/nodes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NodeResource {
    pub id: String,
    pub node: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// `online`, `offline` or `unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxcpu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxmem: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxdisk: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
}

impl NodeResource {
    pub fn is_online(&self) -> bool {
        self.status == "online"
    }
}

/// `cpuinfo` of `/nodes/<node>/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CpuInfo {
    #[serde(default)]
    pub cpus: u32,
    #[serde(default)]
    pub sockets: u32,
    #[serde(default)]
    pub cores: u32,
    #[serde(default)]
    pub model: String,
    /// A string in Proxmox's output, e.g. `"2400.000"`, or a number when
    /// `/proc/cpuinfo` has no MHz line.
    #[serde(default, with = "text_or_number")]
    pub mhz: String,
    /// Space-separated `/proc/cpuinfo` flags.
    #[serde(default)]
    pub flags: String,
    #[serde(default)]
    pub hvm: String,
    #[serde(default)]
    pub user_hz: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MemoryInfo {
    pub total: u64,
    pub used: u64,
    pub free: u64,
}

/// A row of `rrddata` is the charts' input as Proxmox writes it, so it
/// lives beside them, in the app's types.
pub use pvedeck_domain::types::RrdRow;

/// The parts of `/nodes/<node>/status` pvedeck reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NodeStatus {
    pub cpuinfo: CpuInfo,
    #[serde(default)]
    pub memory: MemoryInfo,
    #[serde(default)]
    pub uptime: u64,
    #[serde(default)]
    pub cpu: f64,
    #[serde(default)]
    pub pveversion: String,
    #[serde(default)]
    pub kversion: String,
}

/// One row of `pvesm status` (numbers in KiB, as printed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageStatus {
    pub name: String,
    /// `dir`, `zfspool`, `lvmthin`, `nfs`…
    pub kind: String,
    /// `active`, `inactive` or `disabled`.
    pub status: String,
    pub total_kib: u64,
    pub used_kib: u64,
    pub avail_kib: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_real_vm_element() {
        let line = r#"[{"cpu":0.0123,"disk":0,"diskread":51511296,"diskwrite":8192,"id":"qemu/101","maxcpu":2,"maxdisk":34359738368,"maxmem":2147483648,"mem":734003200,"memhost":812646400,"name":"web1","netin":12345,"netout":6789,"node":"pve1","status":"running","tags":"prod;web","template":0,"type":"qemu","uptime":3600,"vmid":101}]"#;
        let vms: Vec<VmResource> = serde_json::from_str(line).unwrap();
        assert_eq!(vms[0].vmid, 101);
        assert_eq!(vms[0].maxmem, 2 << 30);
        assert_eq!(vms[0].os_tag(), Some("prod"));
        assert!(!vms[0].template);
    }

    #[test]
    fn reads_a_vm_whose_stats_are_not_known_yet() {
        let line =
            r#"[{"id":"qemu/130","node":"pve1","status":"unknown","type":"qemu","vmid":130}]"#;
        let vms: Vec<VmResource> = serde_json::from_str(line).unwrap();
        assert_eq!(vms[0].name, None);
        assert_eq!(vms[0].maxmem, 0);
        assert_eq!(vms[0].os_tag(), None);
    }

    #[test]
    fn reads_an_offline_node_without_stats() {
        let line = r#"[{"id":"node/pve3","level":"","maxcpu":8,"maxdisk":13471539200,"maxmem":33537990656,"node":"pve3","status":"offline","type":"node"}]"#;
        let nodes: Vec<NodeResource> = serde_json::from_str(line).unwrap();
        assert!(!nodes[0].is_online());
        assert_eq!(nodes[0].mem, None);
        assert_eq!(nodes[0].maxcpu, Some(8));
    }

    #[test]
    fn writes_booleans_as_numbers_like_pvesh() {
        let vm = VmResource {
            template: true,
            ..VmResource::default()
        };
        let json = serde_json::to_string(&vm).unwrap();
        assert!(json.contains(r#""template":1"#), "{json}");
    }
}
