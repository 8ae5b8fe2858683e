//! The demo cluster: three nodes of different CPU generations (so the CPU
//! baseline (docs/provisioning.md#cpu-baseline) has something to decide), two local storages and an
//! unreachable NFS share, and a handful of guests in several states.
//!
//! The numbers are chosen so that the figures of `/api/vm/list` can be worked
//! out by hand; `tests/api_list.rs` asserts them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use pvedeck_proxmox::CpuInfo;
use pvedeck_proxmox::drive::{GIB, MIB};
use pvedeck_support::clock::now_ms;

use super::state::{ClusterState, Guest, GuestKind, Inside, SimNode, SimStorage, SimVm};

const BASE_FLAGS: &str = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat \
     pse36 clflush mmx fxsr sse sse2 ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good \
     nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq monitor ssse3 cx16 pdcm sse4_1 \
     sse4_2 x2apic popcnt tsc_deadline_timer aes xsave avx lahf_lm vmx";
/// What Haswell and later add; the kernel names LZCNT `abm`.
const V3_FLAGS: &str = "fma movbe f16c rdrand abm bmi1 avx2 bmi2 xsaveopt";
const V4_FLAGS: &str = "avx512f avx512dq avx512cd avx512bw avx512vl";
const DAY_MS: i64 = 86_400_000;

fn node(
    name: &str,
    model: &str,
    (cpus, cores): (u32, u32),
    flags: String,
    (mem_gib, mem_host): (u64, u64),
    (disk_gib, disk_used_gib): (u64, u64),
    cpu_load: f64,
) -> SimNode {
    SimNode {
        name: name.to_string(),
        ip: None,
        online: true,
        cpuinfo: CpuInfo {
            cpus,
            sockets: 1,
            cores,
            model: model.to_string(),
            mhz: "2900.000".to_string(),
            flags,
            hvm: "1".to_string(),
            user_hz: 100,
        },
        mem_total: mem_gib * GIB,
        mem_host,
        rootfs_total: disk_gib * GIB,
        rootfs_used: disk_used_gib * GIB,
        cpu_load,
        booted: now_ms() - 14 * DAY_MS,
    }
}

fn make_vm(
    net: [u8; 3],
    vmid: u32,
    node: &str,
    name: &str,
    os: &str,
    (cores, memory_mb, disk_gb): (u32, u64, u64),
    running: Option<u64>,
) -> SimVm {
    let disk = format!("local-zfs:vm-{vmid}-disk-0");
    let cloudinit = format!("local-zfs:vm-{vmid}-cloudinit");
    let config: BTreeMap<String, String> = [
        ("name", name.to_string()),
        ("cores", cores.to_string()),
        ("memory", memory_mb.to_string()),
        ("cpu", "x86-64-v2-AES".to_string()),
        ("scsihw", "virtio-scsi-pci".to_string()),
        ("scsi0", format!("{disk},size={disk_gb}G")),
        ("ide2", format!("{cloudinit},media=cdrom")),
        ("boot", "order=scsi0".to_string()),
        (
            "net0",
            format!(
                "virtio=BC:24:11:00:{:02X}:{:02X},bridge=vmbr0",
                vmid / 256,
                vmid % 256
            ),
        ),
        ("ostype", "l26".to_string()),
        ("agent", "1".to_string()),
        ("serial0", "socket".to_string()),
        (
            "ipconfig0",
            format!(
                "ip={a}.{b}.{c}.{vmid}/24,gw={a}.{b}.{c}.1",
                a = net[0],
                b = net[1],
                c = net[2]
            ),
        ),
        ("tags", os.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    SimVm {
        vmid,
        node: node.to_string(),
        kind: GuestKind::Qemu,
        config,
        volumes: [(disk, disk_gb * GIB), (cloudinit, 4 * MIB)]
            .into_iter()
            .collect(),
        running: running.is_some(),
        guest: if running.is_some() {
            Guest::Up
        } else {
            Guest::Off
        },
        started: running.map(|_| now_ms() - DAY_MS),
        mem_plateau: running.unwrap_or(512 * MIB),
        cpu_load: if running.is_some() { 0.04 } else { 0.0 },
        initialized: true,
        // Made and booted by go-pve-qemu, whose script installs the agent.
        inside: {
            let mut inside = Inside {
                agent: true,
                ..Inside::default()
            };
            inside.boot(vmid);
            inside
        },
        firewall: Default::default(),
    }
}

pub fn demo_cluster(gateway: Ipv4Addr, ips: &BTreeMap<String, Ipv4Addr>) -> ClusterState {
    let [a, b, c, _] = gateway.octets();
    let net = [a, b, c];
    let vm =
        |vmid, node, name, os, size, running| make_vm(net, vmid, node, name, os, size, running);
    let nodes = [
        node(
            "pve1",
            "Intel(R) Xeon(R) Gold 6326 CPU @ 2.90GHz",
            (32, 16),
            format!("{BASE_FLAGS} {V3_FLAGS} {V4_FLAGS}"),
            (128, 8 * GIB),
            (1024, 256),
            0.125,
        ),
        node(
            "pve2",
            "AMD EPYC 7232P 8-Core Processor",
            (16, 8),
            format!("{BASE_FLAGS} {V3_FLAGS}"),
            (64, 3 * GIB + 256 * MIB),
            (512, 64),
            0.0625,
        ),
        node(
            "pve3",
            "Intel(R) Core(TM) i7-3770 CPU @ 3.40GHz",
            (8, 4),
            format!("{BASE_FLAGS} f16c rdrand"),
            (32, 3 * GIB),
            (256, 32),
            0.25,
        ),
    ];

    let storages = vec![
        SimStorage {
            id: "local".to_string(),
            kind: "dir".to_string(),
            // Images allowed on `local`, as many admins set it up; `import`
            // as a PVE 9 install writes it (the REST face's download-url).
            content: "iso,vztmpl,backup,images,import".to_string(),
            enabled: true,
            reachable: true,
            total: 100 * GIB,
            used_base: 12 * GIB,
        },
        SimStorage {
            id: "local-zfs".to_string(),
            kind: "zfspool".to_string(),
            content: "images,rootdir".to_string(),
            enabled: true,
            reachable: true,
            total: 860 * GIB,
            used_base: 4 * GIB,
        },
        // ISO images and container templates only: no VM disk goes here.
        SimStorage {
            id: "iso".to_string(),
            kind: "dir".to_string(),
            content: "iso,vztmpl".to_string(),
            enabled: true,
            reachable: true,
            total: 200 * GIB,
            used_base: 40 * GIB,
        },
        SimStorage {
            id: "nas".to_string(),
            kind: "nfs".to_string(),
            content: "images,backup".to_string(),
            enabled: true,
            reachable: false,
            total: 0,
            used_base: 0,
        },
    ];

    let mut vms = vec![
        vm(
            101,
            "pve1",
            "web-01-101",
            "ubuntu",
            (2, 4096, 40),
            Some(1536 * MIB),
        ),
        vm(
            102,
            "pve1",
            "db-01-102",
            "debian",
            (4, 8192, 100),
            Some(6656 * MIB),
        ),
        vm(103, "pve2", "build-103", "rockylinux", (8, 16384, 64), None),
        vm(
            104,
            "pve2",
            "cache-104",
            "debian",
            (2, 1536, 16),
            Some(768 * MIB),
        ),
        vm(105, "pve3", "legacy-105", "ubuntu", (1, 1024, 20), None),
        vm(
            110,
            "pve3",
            "monitor-110",
            "debian",
            (2, 2048, 32),
            Some(GIB),
        ),
    ];
    // 101-105 are pvedeck's; 110 was made by go-pve-qemu (its os tag only),
    // which `MANAGE=pvedeck` lists but does not act on.
    for made in vms.iter_mut().filter(|vm| vm.vmid <= 105) {
        if let Some(tags) = made.config.get_mut("tags") {
            tags.push_str(";pvedeck");
        }
    }

    // Guests pvedeck does not manage but a real cluster has: a container and a template.
    let mut container = vm(
        200,
        "pve1",
        "dns-200",
        "debian",
        (1, 512, 8),
        Some(128 * MIB),
    );
    container.kind = GuestKind::Lxc;
    vms.push(container);
    let mut template = vm(
        9000,
        "pve2",
        "debian-12-template",
        "debian",
        (2, 2048, 4),
        None,
    );
    template
        .config
        .insert("template".to_string(), "1".to_string());
    vms.push(template);

    ClusterState {
        nodes: nodes
            .into_iter()
            .map(|mut n| {
                n.ip = ips.get(&n.name).copied();
                (n.name.clone(), n)
            })
            .collect(),
        storages,
        vms: vms.into_iter().map(|v| (v.vmid, v)).collect(),
        // A host that is not a VM (a printer, a forgotten box) answers on .100.
        foreign_hosts: vec![100],
        faults: Default::default(),
        // The datacenter firewall is off, as on a new Proxmox cluster.
        firewall: Default::default(),
        orphans: Default::default(),
    }
}

/// A large cluster for benchmarks: `nodes` nodes like `pve1` and `vms` VMs
/// spread over them (ids from 1000, outside the assignable range), two in
/// three running. `memory` gives the nodes' memory in GiB, in order (the
/// last value for the rest; pve1's 128 when empty): placement needs nodes
/// of unequal size to show what it does.
pub fn large_cluster(gateway: Ipv4Addr, (nodes, memory): (u32, &[u64]), vms: u32) -> ClusterState {
    let [a, b, c, _] = gateway.octets();
    let mut state = demo_cluster(gateway, &BTreeMap::new());
    let template = state.nodes.get("pve1").cloned();
    state.nodes.clear();
    state.vms.clear();
    for n in 1..=nodes.max(1) {
        let name = format!("pve{n}");
        let mut node = template.clone().unwrap_or_else(|| {
            node(
                &name,
                "Xeon",
                (32, 16),
                BASE_FLAGS.to_string(),
                (128, GIB),
                (1024, 0),
                0.1,
            )
        });
        node.name = name.clone();
        let index = usize::try_from(n - 1).unwrap_or(usize::MAX);
        if let Some(gib) = memory.get(index).or(memory.last()) {
            node.mem_total = gib * GIB;
        }
        state.nodes.insert(name, node);
    }
    let names: Vec<String> = state.nodes.keys().cloned().collect();
    for i in 0..vms {
        let vmid = 1000 + i;
        let on = &names[i as usize % names.len()];
        let running = (i % 3 != 0).then_some(512 * MIB);
        let vm = make_vm(
            [a, b, c],
            vmid,
            on,
            &format!("vm-{vmid}"),
            "debian",
            (2, 2048, 16),
            running,
        );
        state.vms.insert(vmid, vm);
    }
    state.foreign_hosts.clear();
    state
}
