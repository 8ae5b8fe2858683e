//! The figures of `GET /api/vm/list` (docs/provisioning.md#the-vm-list), computed from Proxmox's
//! cluster resources.

use std::collections::BTreeMap;
use std::sync::Arc;

use pvedeck_config::Manage;
use pvedeck_domain::types::{ListFilter, NodeSummary, VmList, VmSummary};
use pvedeck_proxmox::{NodeResource, VmResource};

use super::Allocator;
use super::scope::Scope;
use super::snapshot::{Listed, Snapshot};

const GIB: f64 = (1u64 << 30) as f64;

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn gib(bytes: u64) -> f64 {
    round2(bytes as f64 / GIB)
}

fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        round2(part / whole * 100.0)
    } else {
        0.0
    }
}

fn wanted(filter: ListFilter, running: bool) -> bool {
    match filter {
        ListFilter::All => true,
        ListFilter::Running => running,
        ListFilter::Stopped => !running,
    }
}

/// The snapshot's list for `filter`, built by the first reader.
pub fn listed(
    snapshot: &Snapshot,
    addresses: &Allocator,
    manage: Manage,
    filter: ListFilter,
) -> Arc<Listed> {
    let slot = match filter {
        ListFilter::All => 0,
        ListFilter::Running => 1,
        ListFilter::Stopped => 2,
    };
    snapshot.lists[slot]
        .get_or_init(|| {
            Arc::new(Listed::new(build(
                &snapshot.vms,
                &snapshot.nodes,
                addresses,
                manage,
                filter,
            )))
        })
        .clone()
}

/// Builds the list. Containers and templates are not VMs pvedeck manages and
/// are left out; reserved ids appear (unfiltered list only: they are neither
/// running nor stopped VMs) with node and os `-`.
pub fn build(
    vms: &[VmResource],
    nodes: &[NodeResource],
    addresses: &Allocator,
    manage: Manage,
    filter: ListFilter,
) -> VmList {
    let ip = |vmid: u32| {
        addresses
            .ip(vmid)
            .map(|ip| ip.to_string())
            .unwrap_or_default()
    };

    let listed: Vec<&VmResource> = vms
        .iter()
        .filter(|vm| vm.is_qemu() && !vm.template)
        .filter(|vm| addresses.reserved(vm.vmid).is_none())
        .filter(|vm| wanted(filter, vm.status == "running"))
        .collect();

    let mut list: Vec<VmSummary> = listed
        .iter()
        .map(|vm| VmSummary {
            cluster: addresses.cluster().to_string(),
            vmid: vm.vmid,
            name: vm.name.clone().unwrap_or_default(),
            os: vm.os_tag().unwrap_or_default().to_string(),
            running: vm.status == "running",
            node: vm.node.clone(),
            cpu: vm.maxcpu,
            disk: gib(vm.maxdisk),
            memory: gib(vm.maxmem),
            memory_used: gib(vm.mem),
            status: vm.status.clone(),
            ip: ip(vm.vmid),
            reserved: false,
            managed: manage.covers(vm),
            lock: vm.lock.clone(),
            owner: None,
        })
        .collect();

    if filter == ListFilter::All {
        list.extend(addresses.reserved_ids().map(|(vmid, label)| VmSummary {
            cluster: addresses.cluster().to_string(),
            vmid,
            name: label.to_string(),
            os: "-".to_string(),
            running: false,
            node: "-".to_string(),
            cpu: 0,
            disk: 0.0,
            memory: 0.0,
            memory_used: 0.0,
            status: "reserved".to_string(),
            ip: ip(vmid),
            reserved: true,
            managed: false,
            lock: None,
            owner: None,
        }));
    }
    list.sort_by_key(|vm| vm.vmid);

    #[derive(Default)]
    struct Allocated {
        vcpus: u32,
        mem: u64,
        disk: u64,
        vms: usize,
    }
    let mut allocated: BTreeMap<&str, Allocated> = BTreeMap::new();
    for vm in &listed {
        let a = allocated.entry(vm.node.as_str()).or_default();
        a.vcpus += vm.maxcpu;
        a.mem += vm.maxmem;
        a.disk += vm.maxdisk;
        a.vms += 1;
    }

    let mut cluster: Vec<NodeSummary> = nodes
        .iter()
        .map(|node| {
            let a = allocated.get(node.node.as_str());
            let max_cpu = node.maxcpu.unwrap_or(0);
            let max_mem = node.maxmem.unwrap_or(0) as f64;
            NodeSummary {
                cluster: addresses.cluster().to_string(),
                node: node.node.clone(),
                running: node.is_online(),
                max_cpu,
                max_memory: gib(node.maxmem.unwrap_or(0)),
                cpu: percent(f64::from(a.map_or(0, |a| a.vcpus)), f64::from(max_cpu)),
                memory: percent(a.map_or(0, |a| a.mem) as f64, max_mem),
                memory_used: percent(node.mem.unwrap_or(0) as f64, max_mem),
                disk: gib(a.map_or(0, |a| a.disk)),
                status: node.status.clone(),
                cpu_used: round2(node.cpu.unwrap_or(0.0) * 100.0),
                vcpus: a.map_or(0, |a| a.vcpus),
                max_disk: gib(node.maxdisk.unwrap_or(0)),
                disk_used: gib(node.disk.unwrap_or(0)),
                vms: a.map_or(0, |a| a.vms),
            }
        })
        .collect();
    cluster.sort_by(|a, b| a.node.cmp(&b.node));

    VmList {
        count: list.len(),
        list,
        cluster,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Allocator {
        Allocator::new(&pvedeck_config::Config::from_vars(vars.iter().copied()).unwrap())
    }

    fn vm(vmid: u32, node: &str, status: &str, cores: u32, mem: u64, disk: u64) -> VmResource {
        VmResource {
            id: format!("qemu/{vmid}"),
            vmid,
            node: node.into(),
            kind: "qemu".into(),
            status: status.into(),
            name: Some(format!("vm-{vmid}")),
            maxcpu: cores,
            maxmem: mem,
            maxdisk: disk,
            mem: mem / 4,
            tags: Some("debian;prod".into()),
            ..VmResource::default()
        }
    }

    fn node(name: &str, cpus: u32, mem: u64) -> NodeResource {
        NodeResource {
            id: format!("node/{name}"),
            node: name.into(),
            kind: "node".into(),
            status: "online".into(),
            cpu: Some(0.5),
            maxcpu: Some(cpus),
            mem: Some(mem / 2),
            maxmem: Some(mem),
            disk: Some(1 << 30),
            maxdisk: Some(10 << 30),
            ..NodeResource::default()
        }
    }

    #[test]
    fn gib_keeps_two_decimals_instead_of_truncating() {
        assert_eq!(gib(1536 << 20), 1.5);
        assert_eq!(gib(1288490189), 1.2);
        assert_eq!(gib(0), 0.0);
    }

    #[test]
    fn allocation_counts_only_listed_vms() {
        let g = 1u64 << 30;
        let vms = [
            vm(101, "a", "running", 2, 4 * g, 10 * g),
            vm(102, "a", "stopped", 6, 12 * g, 30 * g),
        ];
        let nodes = [node("a", 16, 32 * g)];
        let cfg = config(&[]);

        let all = build(&vms, &nodes, &cfg, Manage::default(), ListFilter::All);
        assert_eq!(all.cluster[0].cpu, 50.0);
        assert_eq!(all.cluster[0].memory, 50.0);
        assert_eq!(all.cluster[0].disk, 40.0);
        assert_eq!(all.cluster[0].memory_used, 50.0);
        assert_eq!(all.list[0].os, "debian");
        assert_eq!(all.list[0].memory_used, 1.0);

        let running = build(&vms, &nodes, &cfg, Manage::default(), ListFilter::Running);
        assert_eq!(running.count, 1);
        assert_eq!(running.cluster[0].cpu, 12.5);
        assert_eq!(running.cluster[0].memory, 12.5);

        let stopped = build(&vms, &nodes, &cfg, Manage::default(), ListFilter::Stopped);
        assert_eq!(stopped.list[0].vmid, 102);
        assert_eq!(stopped.cluster[0].vcpus, 6);
    }

    #[test]
    fn containers_templates_and_reserved_ids_are_not_listed_as_vms() {
        let g = 1u64 << 30;
        let mut ct = vm(200, "a", "running", 1, g, g);
        ct.kind = "lxc".into();
        let mut tpl = vm(9000, "a", "stopped", 1, g, g);
        tpl.template = true;
        let taken = vm(150, "a", "running", 1, g, g);
        let cfg = config(&[("RESERVED", "150:nas,120:router")]);
        let out = build(
            &[ct, tpl, taken],
            &[node("a", 4, 8 * g)],
            &cfg,
            Manage::default(),
            ListFilter::All,
        );
        let ids: Vec<u32> = out.list.iter().map(|v| v.vmid).collect();
        assert_eq!(ids, [120, 150]);
        assert!(
            out.list
                .iter()
                .all(|v| v.reserved && v.node == "-" && v.os == "-")
        );
        assert_eq!(out.list[1].name, "nas");
        assert_eq!(out.cluster[0].vcpus, 0);
    }

    #[test]
    fn offline_node_has_no_usage_and_a_vm_without_stats_still_lists() {
        let mut n = node("b", 8, 8 << 30);
        n.status = "offline".into();
        n.cpu = None;
        n.mem = None;
        let fresh = VmResource {
            id: "qemu/130".into(),
            vmid: 130,
            node: "b".into(),
            kind: "qemu".into(),
            status: "unknown".into(),
            ..VmResource::default()
        };
        let out = build(
            &[fresh],
            &[n],
            &config(&[]),
            Manage::default(),
            ListFilter::All,
        );
        assert!(!out.cluster[0].running);
        assert_eq!(out.cluster[0].memory_used, 0.0);
        assert_eq!(out.list[0].name, "");
        assert!(!out.list[0].running);
    }

    #[test]
    fn sorted_by_vmid_and_node_name() {
        let g = 1u64 << 30;
        let vms = [
            vm(1000, "b", "running", 1, g, g),
            vm(101, "a", "running", 1, g, g),
        ];
        let out = build(
            &vms,
            &[node("b", 4, g), node("a", 4, g)],
            &config(&[]),
            Manage::default(),
            ListFilter::All,
        );
        assert_eq!(out.list[0].vmid, 101);
        assert_eq!(out.cluster[0].node, "a");
    }
}
