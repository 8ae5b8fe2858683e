//! The storage plugins' rules for linked clones, as pve-storage and
//! qemu-server have them (docs/proxmox.md): a ZFS clone sits on its base,
//! cannot migrate and keeps its template from being destroyed; an LVM-thin
//! clone is a plain thin volume that migrates and outlives its template.

use std::collections::BTreeMap;

use pvedeck_config::Config;
use pvedeck_proxmox::CloneMode;
use pvedeck_sim::SimCluster;
use pvedeck_sim::state::{Guest, GuestKind, SimStorage, SimVm};

fn cluster(name: &str) -> SimCluster {
    let dir = std::env::temp_dir().join(format!("pvedeck-sim-rules-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = Config::from_vars([
        ("DATA_DIR", dir.to_string_lossy().into_owned()),
        ("SIM_SPEED", "2000".to_string()),
        ("SIM_JITTER", "0".to_string()),
    ])
    .expect("config");
    let sim = SimCluster::open(&config).expect("sim");
    sim.change(|s| {
        s.storages.push(SimStorage {
            id: "local-lvm".into(),
            kind: "lvmthin".into(),
            content: "images,rootdir".into(),
            enabled: true,
            reachable: true,
            total: 100 << 30,
            used_base: 0,
        })
    });
    sim
}

/// A template on `storage`, on pve1.
fn template(sim: &SimCluster, vmid: u32, storage: &str) {
    let volid = format!("{storage}:base-{vmid}-disk-0");
    sim.change(|s| {
        s.vms.insert(
            vmid,
            SimVm {
                vmid,
                node: "pve1".into(),
                kind: GuestKind::Qemu,
                config: BTreeMap::from([
                    ("name".to_string(), format!("tpl-{vmid}")),
                    ("scsi0".to_string(), format!("{volid},size=2G")),
                    ("template".to_string(), "1".to_string()),
                ]),
                volumes: BTreeMap::from([(volid.clone(), 2 << 30)]),
                running: false,
                guest: Guest::Off,
                started: None,
                mem_plateau: 0,
                cpu_load: 0.0,
                initialized: false,
                inside: Default::default(),
                firewall: Default::default(),
            },
        )
    });
}

fn scsi0(sim: &SimCluster, vmid: u32) -> String {
    sim.read(|s| s.vms[&vmid].config["scsi0"].clone())
}

#[tokio::test]
async fn a_zfs_linked_clone_sits_on_its_base_cannot_migrate_and_holds_the_template() {
    let sim = cluster("zfs");
    template(&sim, 9100, "local-zfs");
    sim.qm_clone("pve1", 9100, 9101, "c1", CloneMode::Linked, &|_| {})
        .await
        .expect("linked clone");
    assert!(
        scsi0(&sim, 9101).starts_with("local-zfs:base-9100-disk-0/vm-9101-disk-0"),
        "{}",
        scsi0(&sim, 9101)
    );
    let err = sim
        .qm_migrate("pve1", 9101, "pve2", &|_| {})
        .await
        .expect_err("QemuMigrate refuses a linked clone on local storage");
    assert!(
        err.message().contains(
            "can't migrate 'local-zfs:base-9100-disk-0/vm-9101-disk-0' as it's a clone of 'base-9100-disk-0'"
        ),
        "{err}"
    );
    assert_eq!(sim.read(|s| s.vms[&9101].node.clone()), "pve1", "not moved");
    let err = sim
        .qm_destroy("pve1", 9100, false, true)
        .await
        .expect_err("the base is in use");
    assert!(err.is_base_in_use(), "{err}");

    // A full clone migrates.
    sim.qm_clone("pve1", 9100, 9102, "c2", CloneMode::Full, &|_| {})
        .await
        .expect("full clone");
    sim.qm_migrate("pve1", 9102, "pve2", &|_| {})
        .await
        .expect("a full clone migrates");
    assert_eq!(sim.read(|s| s.vms[&9102].node.clone()), "pve2");
}

#[tokio::test]
async fn an_lvm_thin_linked_clone_is_a_plain_volume_that_migrates_and_outlives_its_template() {
    let sim = cluster("lvm");
    template(&sim, 9200, "local-lvm");
    sim.qm_clone("pve1", 9200, 9201, "c1", CloneMode::Linked, &|_| {})
        .await
        .expect("linked clone");
    assert!(
        scsi0(&sim, 9201).starts_with("local-lvm:vm-9201-disk-0"),
        "{}",
        scsi0(&sim, 9201)
    );
    sim.qm_migrate("pve1", 9201, "pve2", &|_| {})
        .await
        .expect("an LVM-thin clone migrates");
    sim.qm_destroy("pve1", 9200, false, true)
        .await
        .expect("the template can go: its clones are thin volumes of their own");
    assert!(sim.read(|s| s.vms.contains_key(&9201)));
}

#[tokio::test]
async fn a_disk_the_config_does_not_reference_stays_unless_destroy_is_told_to_take_it() {
    let sim = cluster("orphans");
    for (vmid, unreferenced) in [(9301, false), (9302, true)] {
        template(&sim, vmid, "local-zfs");
        // An import cut short: its volume exists, no config key names it.
        sim.change(|s| {
            let vm = s.vms.get_mut(&vmid).expect("vm");
            vm.config.remove("template");
            vm.volumes
                .insert(format!("local-zfs:vm-{vmid}-disk-1"), 1 << 30);
        });
        sim.qm_destroy("pve1", vmid, false, unreferenced)
            .await
            .expect("destroyed");
    }
    let orphans: Vec<String> = sim.read(|s| s.orphans.keys().cloned().collect());
    assert_eq!(orphans, ["local-zfs:vm-9301-disk-1"]);
}
