//! The simulated cluster: a small Proxmox VE cluster kept in memory (and in
//! `DATA_DIR/sim/cluster.json`), served through the same `Pve` port as a real
//! one. It is the embedded default (a new user sees the product work without
//! Proxmox) and what the tests drive. Operations take simulated time, scaled
//! by `SIM_SPEED`; faults can be injected (`faults.rs`).

pub mod console;
pub mod faults;
pub mod firewall;
mod guest;
pub mod internet;
pub mod machine;
pub mod params;
pub mod qm;
pub mod real;
pub mod rrd;
mod seed;
pub mod state;
pub mod store;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use faults::{Fault, Strike};
pub use internet::SimInternet;
use pvedeck_config::Config;
use pvedeck_proxmox::{
    AgentExec, CloneMode, ConsoleKind, ConsoleStream, DiskImage, GuestCommand, GuestTarget,
    IpFilter, LineSink, NodeResource, NodeStatus, PowerAction, Pve, PveError, QmOptions,
    StorageStatus, VmResource,
};
use pvedeck_support::clock::Clock;
pub use state::ClusterState;
use store::Store;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot read the simulated cluster from {path}: {detail}")]
    Load { path: PathBuf, detail: String },
}

/// How a simulated cluster behaves, whoever runs it.
#[derive(Debug, Clone)]
pub struct SimSettings {
    pub speed: f64,
    /// How much guest memory use wanders around its plateau (0 = still).
    pub jitter: f64,
    pub gateway: Ipv4Addr,
    pub nodes: BTreeMap<String, Ipv4Addr>,
    /// Wall-clock cost of each `qm`/`pvesh`/`pvesm` (a Perl start-up).
    pub pvesh: std::time::Duration,
    /// `(nodes, VMs)` of a large cluster to seed instead of the demo.
    pub size: Option<(u32, u32)>,
    /// The large cluster's nodes' memory (GiB, in order; `SIM_NODE_MEMORY`).
    pub node_memory: Vec<u64>,
}

impl SimSettings {
    pub fn from_config(config: &Config) -> SimSettings {
        SimSettings {
            speed: config.sim_speed,
            jitter: config.sim_jitter,
            gateway: config.gateway,
            nodes: config.nodes.clone(),
            pvesh: config.sim_pvesh,
            size: config.sim_size,
            node_memory: config.sim_node_memory.clone(),
        }
    }
}

pub struct SimCluster {
    /// Shared with what outlives a call (a console's watch on its VM).
    store: std::sync::Arc<Store>,
    pvesh: std::time::Duration,
    clock: Clock,
    jitter: f64,
    gateway: Ipv4Addr,
    /// `SIM_GUESTS=qemu`: the VMs are real QEMU machines (`real`).
    real: Option<real::RealGuests>,
    /// See [`SimCluster::print_guest_floods_raw`].
    raw_floods: std::sync::atomic::AtomicBool,
}

/// The saved state of `dir`, or the demo cluster when there is none yet.
fn load_or_seed(dir: &Path, settings: &SimSettings) -> Result<ClusterState, SimError> {
    let file = store::state_file(dir);
    match std::fs::read_to_string(&file) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| SimError::Load {
            path: file,
            detail: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(match settings.size {
            None => seed::demo_cluster(settings.gateway, &settings.nodes),
            Some((nodes, vms)) => {
                seed::large_cluster(settings.gateway, (nodes, &settings.node_memory), vms)
            }
        }),
        Err(e) => Err(SimError::Load {
            path: file,
            detail: e.to_string(),
        }),
    }
}

impl SimCluster {
    /// `pvesm status [--content <type>]` on `node`.
    pub async fn pvesm_status(
        &self,
        node: &str,
        content: Option<&str>,
    ) -> Result<Vec<StorageStatus>, PveError> {
        self.strike("storage", None, "pvesm status").await?;
        self.clock.sleep(timing::READ).await;
        self.read(|s| {
            s.online_node(node, "pvesm status")?;
            Ok(s.storage_status(node, content))
        })
    }

    fn with_store(store: Store, settings: &SimSettings) -> SimCluster {
        SimCluster {
            store: std::sync::Arc::new(store),
            pvesh: settings.pvesh,
            clock: Clock::new(settings.speed),
            jitter: settings.jitter,
            gateway: settings.gateway,
            real: None,
            raw_floods: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The server's own simulated cluster (`PVE_BACKEND=sim`): the state of
    /// `DATA_DIR/sim`, or the demo cluster.
    pub fn open(config: &Config) -> Result<SimCluster, SimError> {
        let dir = config.data_dir.join("sim");
        let settings = SimSettings::from_config(config);
        let mut state = load_or_seed(&dir, &settings)?;
        state.recover_after_restart();
        let store = Store::memory(state, Some(store::state_file(&dir)));
        Ok(SimCluster::with_store(store, &settings))
    }

    /// The cluster as the command-line stand-ins share it: every access goes
    /// through the locked state file of `dir`.
    pub fn shared(dir: &Path, settings: &SimSettings) -> Result<SimCluster, SimError> {
        let state = load_or_seed(dir, settings)?;
        let store = Store::shared(dir.to_path_buf(), state);
        let mut sim = SimCluster::with_store(store, settings);
        // Only the outer faces boot real guests: they run as the node's
        // commands would, one process per command.
        sim.real = real::RealGuests::from_env(dir);
        Ok(sim)
    }

    /// The volumes of VM `vmid` (none when it is gone).
    pub(crate) fn volids(&self, vmid: u32) -> Vec<String> {
        self.read(|s| {
            s.vms
                .get(&vmid)
                .map(|vm| vm.volumes.keys().cloned().collect())
        })
        .unwrap_or_default()
    }

    /// Whether the VMs are real QEMU machines (`SIM_GUESTS=qemu`).
    pub fn has_real_guests(&self) -> bool {
        self.real.is_some()
    }

    /// Runs `f` on the state and saves what it changed.
    pub fn change<R>(&self, f: impl FnOnce(&mut ClusterState) -> R) -> R {
        self.store.change(f)
    }

    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        self.store.read(f)
    }

    /// Fault injection: a node that goes offline (corosync loses it) or comes back.
    pub fn set_node_online(&self, node: &str, online: bool) -> Result<(), PveError> {
        self.change(|s| s.set_node_online(node, online))
    }

    pub fn node_names(&self) -> Vec<String> {
        self.read(|s| s.nodes.keys().cloned().collect())
    }

    pub fn add_fault(&self, fault: Fault) -> Result<(), faults::FaultError> {
        self.change(|s| s.faults.add(fault))
    }

    pub fn clear_faults(&self) {
        self.change(|s| s.faults.clear());
    }

    pub fn faults(&self) -> Vec<Fault> {
        self.read(|s| s.faults.list())
    }

    /// Every command run, in order (what a test may check was not run).
    pub fn commands(&self) -> Vec<String> {
        self.store.commands()
    }

    /// The simulated cluster's time.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// How much guest memory use wanders (`SIM_JITTER`).
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// Keeps a stand-in's whole command line in the command log.
    pub fn record_argv(&self, argv: &[String]) {
        self.store.record_argv(argv);
    }

    pub fn record(&self, command: &str) {
        tracing::debug!("sim: {command}");
        self.store.record(command);
    }

    /// A `qm`/`pvesh`/`pvesm` call's start-up cost (`SIM_PVESH_MS`), in
    /// wall-clock time whatever `SIM_SPEED` says.
    async fn start_up(&self) {
        if !self.pvesh.is_zero() {
            tokio::time::sleep(self.pvesh).await;
        }
    }

    /// Records a command about to run and applies an injected fault to it.
    async fn strike(&self, op: &str, vmid: Option<u32>, command: &str) -> Result<(), PveError> {
        self.record(command);
        self.fault(op, vmid, command).await
    }

    /// Applies an injected fault to an operation (already recorded).
    pub async fn fault(&self, op: &str, vmid: Option<u32>, command: &str) -> Result<(), PveError> {
        let strike = self.take_strike(op, vmid);
        self.suffer(strike, op, vmid, command).await
    }

    /// Consumes the strike of the first fault rule for `op` and `vmid`.
    fn take_strike(&self, op: &str, vmid: Option<u32>) -> Strike {
        self.store.update(|s| {
            let strike = s.faults.check(op, vmid);
            let changed = strike != Strike::None;
            (strike, changed)
        })
    }

    /// What a strike does to an operation: a failure, a hang, a delay (a
    /// flood is the guest's to print, see `guest`).
    async fn suffer(
        &self,
        strike: Strike,
        op: &str,
        vmid: Option<u32>,
        command: &str,
    ) -> Result<(), PveError> {
        match strike {
            Strike::None | Strike::Flood(_) => Ok(()),
            Strike::Fail(message) => {
                let message = message.unwrap_or_else(|| default_failure(op, vmid));
                tracing::info!(op, command, "sim: injected failure");
                Err(PveError::command(command, message, 255))
            }
            Strike::Hang => {
                tracing::info!(op, command, "sim: injected hang");
                std::future::pending().await
            }
            Strike::Delay(ms) => {
                self.clock.sleep(ms).await;
                Ok(())
            }
        }
    }

    /// The `pvedeck-sim ssh` stand-in prints a guest's flood to its own
    /// stdout as the bytes they are, for the pvedeck reading the pipe to
    /// bound (in-process, there is no pipe: the flood goes through the
    /// same bounded reader the `cli` backend uses).
    pub fn print_guest_floods_raw(&self) {
        self.raw_floods
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What Proxmox would typically print when this operation fails.
fn default_failure(op: &str, vmid: Option<u32>) -> String {
    let id = vmid.map_or_else(String::new, |v| v.to_string());
    match op {
        "create" => format!("unable to create VM {id} - rbd error: got lock timeout"),
        "importdisk" => {
            "qemu-img: error while writing at byte 1073741824: No space left on device".to_string()
        }
        "set" => format!("VM {id} qmp command 'change' failed - unable to connect"),
        "start" => "start failed: QEMU exited with code 1".to_string(),
        "reboot" => format!("VM {id} qmp command 'system_reset' failed - got timeout"),
        "migrate" => "migration aborted (duration 00:00:03): storage migration failed".to_string(),
        "ssh-init" => "E: Unable to locate package qemu-guest-agent".to_string(),
        other => format!("simulated failure of {other}"),
    }
}

/// The simulated world's own time in one install of a cached Debian image
/// (milliseconds at `SIM_SPEED=1`): Proxmox's tasks, the import, the first
/// boot, the init script, the second boot — what no orchestration saves.
/// Benchmarks subtract it from an install's wall time.
pub fn install_world_ms() -> u64 {
    use timing::*;
    let import = 2 * GIB_BYTES / IMPORT_BYTES_PER_MS;
    READ + CREATE + import + SET + RESIZE + READ + START + FIRST_BOOT + INIT_SCRIPT + REBOOT + BOOT
}

/// Simulated durations at real speed, milliseconds.
mod timing {
    /// The Debian image's virtual size.
    pub const GIB_BYTES: u64 = 1 << 30;
    pub const READ: u64 = 200;
    pub const CREATE: u64 = 1_500;
    pub const SET: u64 = 400;
    pub const RESIZE: u64 = 500;
    pub const START: u64 = 1_000;
    pub const STOP: u64 = 800;
    pub const SHUTDOWN: u64 = 4_000;
    pub const REBOOT: u64 = 500;
    pub const DESTROY: u64 = 1_200;
    /// From start to SSH answering, first boot (cloud-init runs) and later.
    pub const FIRST_BOOT: u64 = 25_000;
    pub const BOOT: u64 = 12_000;
    /// A connection attempt to an address where nothing answers.
    pub const CONNECT_TIMEOUT: u64 = 2_000;
    pub const CONNECT_REFUSED: u64 = 300;
    /// Disk throughput of `qemu-img convert` and of migration, bytes per ms.
    pub const IMPORT_BYTES_PER_MS: u64 = 200 * 1024;
    pub const MIGRATE_BYTES_PER_MS: u64 = 110 * 1024;
    /// The whole init script.
    pub const INIT_SCRIPT: u64 = 30_000;
    /// A linked clone (copy-on-write volumes: ~0.5 s each on LVM-thin).
    pub const LINKED_CLONE: u64 = 500;
    /// `qm template`: renaming the disks to base volumes.
    pub const TEMPLATE: u64 = 1_000;
    /// A guest agent call that is answered; and `qm`'s wait for one that is not.
    pub const AGENT_CALL: u64 = 100;
    pub const AGENT_TIMEOUT: u64 = 3_000;
}

#[async_trait]
impl Pve for SimCluster {
    async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError> {
        self.start_up().await;
        let command = "pvesh get /cluster/resources --type vm";
        self.strike("cluster", None, command).await?;
        self.clock.sleep(timing::READ).await;
        Ok(self.read(|s| s.vm_resources(&self.clock, self.jitter)))
    }

    async fn cluster_nodes(&self) -> Result<Vec<NodeResource>, PveError> {
        self.start_up().await;
        let command = "pvesh get /cluster/resources --type node";
        self.strike("cluster", None, command).await?;
        self.clock.sleep(timing::READ).await;
        Ok(self.read(|s| s.node_resources(&self.clock, self.jitter)))
    }

    async fn node_status(&self, node: &str) -> Result<NodeStatus, PveError> {
        self.start_up().await;
        let command = format!("pvesh get /nodes/{node}/status");
        self.strike("nodestatus", None, &command).await?;
        self.clock.sleep(timing::READ).await;
        self.read(|s| {
            s.online_node(node, &command)?;
            Ok(s.node_status(node, &self.clock, self.jitter))
        })
    }

    async fn rrddata(
        &self,
        node: &str,
        timeframe: pvedeck_domain::types::Timeframe,
    ) -> Result<Vec<pvedeck_proxmox::RrdRow>, PveError> {
        self.start_up().await;
        let command = format!(
            "pvesh get /nodes/{node}/rrddata --timeframe {}",
            timeframe.as_str()
        );
        self.strike("rrddata", None, &command).await?;
        self.clock.sleep(timing::READ).await;
        self.read(|s| {
            s.online_node(node, &command)?;
            Ok(s.rrddata(node, timeframe, &self.clock, self.jitter))
        })
    }

    async fn storage_status(&self, node: &str) -> Result<Vec<StorageStatus>, PveError> {
        self.start_up().await;
        self.pvesm_status(node, Some("images")).await
    }

    async fn create(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError> {
        self.start_up().await;
        self.qm_create(node, vmid, options).await
    }

    async fn import_disk(
        &self,
        node: &str,
        vmid: u32,
        image: &DiskImage,
        storage: &str,
        out: LineSink<'_>,
    ) -> Result<String, PveError> {
        self.start_up().await;
        self.qm_importdisk(node, vmid, image.file()?, storage, out)
            .await
    }

    async fn set(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError> {
        self.start_up().await;
        self.qm_set(node, vmid, options).await.map(drop)
    }

    async fn resize(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<String, PveError> {
        self.start_up().await;
        self.qm_resize(node, vmid, disk, size)
            .await
            .map(|()| String::new())
    }

    async fn config(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<std::collections::BTreeMap<String, String>, PveError> {
        self.start_up().await;
        self.qm_config(node, vmid).await
    }

    async fn status(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        self.start_up().await;
        self.qm_status(node, vmid).await
    }

    async fn power(&self, node: &str, vmid: u32, action: PowerAction) -> Result<(), PveError> {
        self.start_up().await;
        self.qm_power(node, vmid, action).await
    }

    async fn destroy(&self, node: &str, vmid: u32, skiplock: bool) -> Result<(), PveError> {
        self.start_up().await;
        // As the api backend sends it (and now the cli backend).
        self.qm_destroy(node, vmid, skiplock, true).await.map(drop)
    }

    async fn migrate(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        self.start_up().await;
        self.qm_migrate(node, vmid, target, out).await
    }

    async fn clone_vm(
        &self,
        node: &str,
        source: u32,
        vmid: u32,
        name: &str,
        mode: CloneMode,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        self.start_up().await;
        self.qm_clone(node, source, vmid, name, mode, out).await
    }

    async fn template(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        self.start_up().await;
        self.qm_template(node, vmid).await
    }

    async fn agent_ping(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        self.start_up().await;
        self.qm_agent_ping(node, vmid).await
    }

    async fn agent_exec(
        &self,
        node: &str,
        vmid: u32,
        argv: &[String],
        timeout_secs: u32,
    ) -> Result<AgentExec, PveError> {
        self.start_up().await;
        self.qm_guest_exec(node, vmid, argv, timeout_secs).await
    }

    async fn cluster_firewall(&self) -> Result<bool, PveError> {
        self.start_up().await;
        let options = self.fw_cluster_options().await?;
        Ok(pvedeck_proxmox::firewall::cluster_enabled(&options))
    }

    async fn ip_filter(&self, node: &str, vmid: u32, filter: IpFilter) -> Result<(), PveError> {
        self.start_up().await;
        self.sim_ip_filter(node, vmid, filter).await
    }

    async fn probe(&self, ip: Ipv4Addr, port: u16) -> bool {
        self.guest_probe(ip, port).await
    }

    async fn console(
        &self,
        node: &str,
        vmid: u32,
        kind: ConsoleKind,
    ) -> Result<ConsoleStream, PveError> {
        self.start_up().await;
        self.open_console(node, vmid, kind, console::ConsoleOptions::default())
            .await
    }

    async fn guest_exec(
        &self,
        target: &GuestTarget,
        command: &GuestCommand,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        self.guest_run(target, command, out).await
    }
}
