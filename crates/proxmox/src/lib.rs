//! The `Pve` port: what pvedeck needs from a Proxmox VE cluster, in Proxmox's
//! own terms and data shapes. The `sim` backend implements it in-process; the
//! `cli` backend runs `qm`/`pvesh`/`pvesm`/`ssh` and parses their output into
//! the same types.
//!
//! Every `qm` operation names the node it runs on: `qm` only acts on VMs
//! whose configuration lives on that node (docs/backends.md#where-qm-acts).

pub mod api;
pub mod cli;
pub mod console;
pub mod drive;
pub mod escape;
pub mod firewall;
pub mod json;
pub mod known_hosts;
pub mod output;
pub mod owner;
pub mod timed;
pub mod types;
pub mod upid;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

pub use console::{ConsoleIo, ConsoleKind, ConsoleStream};
pub use firewall::IpFilter;
pub use timed::Timed;
pub use types::{CpuInfo, NodeResource, NodeStatus, RrdRow, StorageStatus, VmResource};

/// `qm create`/`qm set` options in the order they are given: `(key, value)`
/// for `--key value`.
pub type QmOptions = Vec<(String, String)>;

/// `qm` options from `(key, value)` pairs, in that order.
pub fn qm_options<const N: usize>(pairs: [(&str, String); N]) -> QmOptions {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// A new VM's disk image: a file pvedeck has (its cache), or a volume the
/// node fetched itself (`NodeFetch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskImage {
    File(PathBuf),
    /// `local:import/debian-12-generic-amd64-1a2b3c4d5e6f.qcow2`
    Volume(String),
}

impl DiskImage {
    /// The file, for the backends that import only files (`qm importdisk`).
    pub fn file(&self) -> Result<&Path, PveError> {
        match self {
            DiskImage::File(path) => Ok(path),
            DiskImage::Volume(volid) => Err(PveError::command(
                "qm importdisk",
                format!("{volid}: this backend imports files from pvedeck's cache only"),
                2,
            )),
        }
    }
}

impl std::fmt::Display for DiskImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiskImage::File(path) => write!(f, "{}", path.display()),
            DiskImage::Volume(volid) => f.write_str(volid),
        }
    }
}

/// What a node needs to fetch a cloud image itself.
#[derive(Debug, Clone, Copy)]
pub struct NodeFetch<'a> {
    pub url: &'a str,
    /// The image's name on the mirror (`debian-12-generic-amd64.qcow2`).
    pub file: &'a str,
    /// The checksum the mirror publishes for it, lower-case hex.
    pub checksum: Option<(pvedeck_mirror::checksums::Algo, &'a str)>,
    /// `IMAGE_DOWNLOAD_TIMEOUT_SECS`: a download still running after this
    /// is stopped on the node and fails.
    pub deadline: std::time::Duration,
}

/// Where a node's fetch left the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub volid: String,
    /// It was there already: nothing was downloaded.
    pub present: bool,
}

/// Receives the lines a long command prints while it runs.
pub type LineSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum PveError {
    /// The command (or its simulated twin) ran and failed; `message` is what
    /// it printed, as Proxmox words it.
    #[error("{message}")]
    Command {
        command: String,
        message: String,
        exit: Option<i32>,
    },
    /// Output that does not have the expected shape.
    #[error("{command}: cannot parse output: {detail}")]
    Parse { command: String, detail: String },
    #[error("no such node '{0}'")]
    NoSuchNode(String),
    #[error("{command}: no answer within {secs}s")]
    Timeout { command: String, secs: u64 },
}

impl PveError {
    pub fn command(command: impl Into<String>, message: impl Into<String>, exit: i32) -> PveError {
        PveError::Command {
            command: command.into(),
            message: message.into(),
            exit: Some(exit),
        }
    }

    /// The error text of Proxmox's own message, for classifying failures.
    pub fn message(&self) -> String {
        match self {
            PveError::Command { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }

    /// `qm` refused because the VM's config is not on that node (or anywhere).
    pub fn is_missing_config(&self) -> bool {
        self.message().contains("does not exist") && self.message().contains("qemu-server/")
    }

    pub fn is_locked(&self) -> bool {
        self.message().contains("is locked (")
    }

    /// `ssh` refused the host: its key is not the one recorded.
    pub fn is_host_key_refused(&self) -> bool {
        self.message().contains("Host key verification failed")
    }

    /// `qm destroy` of a template whose base volume a linked clone uses.
    pub fn is_base_in_use(&self) -> bool {
        self.message().contains("still in use by linked clone")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerAction {
    Start,
    /// Hard stop. `skiplock` is used when cleaning up a half-made VM.
    Stop {
        skiplock: bool,
    },
    Shutdown,
    Reboot,
}

impl PowerAction {
    pub fn verb(self) -> &'static str {
        match self {
            PowerAction::Start => "start",
            PowerAction::Stop { .. } => "stop",
            PowerAction::Shutdown => "shutdown",
            PowerAction::Reboot => "reboot",
        }
    }
}

/// Where and as whom to reach a VM over SSH.
#[derive(Debug, Clone)]
pub struct GuestTarget {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub user: String,
    /// The private key pvedeck logs in with.
    pub key: PathBuf,
    /// pvedeck's known-hosts file: a key recorded there is required, none is
    /// recorded at first contact. `None`: no host key check (the simulator's
    /// `ssh` stand-in when told `StrictHostKeyChecking=no`).
    pub known_hosts: Option<PathBuf>,
}

/// The readiness probe over SSH: `ready` answers, as go-pve-qemu's
/// `echo ready` did; the machine-id before it lets pvedeck check the
/// identity of a VM that has no guest agent yet, in the same session.
pub const READY_COMMAND: &str = "cat /etc/machine-id 2>/dev/null; echo ready";

/// What pvedeck runs inside a VM.
#[derive(Debug, Clone)]
pub enum GuestCommand {
    /// [`READY_COMMAND`]: the readiness probe, which also tells the
    /// machine-id at first contact.
    Ready,
    /// The init script, sent over the SSH session itself (not fetched
    /// over the network): staged in a file, then run as root with stdin
    /// closed. The root password is in it only as a SHA-512 crypt hash.
    InitScript {
        /// `debian_12.sh`, for messages.
        name: String,
        body: String,
    },
}

/// What the guest agent reports of a command it ran (`qm guest exec`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentExec {
    /// `None` when the command was still running at the timeout, or was
    /// killed by a signal.
    pub exitcode: Option<i32>,
    /// The signal that ended it: qemu-ga reports `signal` instead of
    /// `exitcode` for a command killed (qemu's `qga/commands-posix.c`,
    /// `guest-exec-status`; passed on as is by qemu-server
    /// `PVE/QemuServer/Agent.pm`, `qemu_exec_status`).
    pub signal: Option<i32>,
    pub out: String,
    pub err: String,
}

/// A guest command that did not succeed, named as its caller named it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestCommandFailed {
    /// `cat /etc/machine-id: exit 1: No such file or directory`
    #[error("{what}: exit {code}: {err}")]
    Exit {
        what: String,
        code: i32,
        err: String,
    },
    #[error("{what}: still running at the timeout")]
    Running { what: String },
    /// `cloud-init status --wait: killed by signal 9`
    #[error("{what}: killed by signal {signal}{}", if err.is_empty() { String::new() } else { format!(": {err}") })]
    Signal {
        what: String,
        signal: i32,
        err: String,
    },
}

impl AgentExec {
    /// What the guest printed, held to [`output::Limits::GUEST`] whatever
    /// the backend: a person reads it, and a guest may print without end.
    pub fn bounded(mut self) -> AgentExec {
        let keep = output::Limits::GUEST.kept;
        for text in [&mut self.out, &mut self.err] {
            if let std::borrow::Cow::Owned(cut) = pvedeck_domain::text::clip(text, keep) {
                *text = cut;
            }
        }
        self
    }

    /// The command's output when it exited 0, else what went wrong, named
    /// `what`.
    pub fn output(self, what: &str) -> Result<String, GuestCommandFailed> {
        if let (None, Some(signal)) = (self.exitcode, self.signal) {
            return Err(GuestCommandFailed::Signal {
                what: what.to_string(),
                signal,
                err: self.err.trim().to_string(),
            });
        }
        match self.exitcode {
            Some(0) => Ok(self.out),
            Some(code) => Err(GuestCommandFailed::Exit {
                what: what.to_string(),
                code,
                err: self.err.trim().to_string(),
            }),
            None => Err(GuestCommandFailed::Running {
                what: what.to_string(),
            }),
        }
    }
}

/// How `qm clone` copies the disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloneMode {
    /// `--full 0`: copy-on-write volumes on the template's base volumes.
    Linked,
    /// `--full 1`: a copy of every disk.
    Full,
}

#[async_trait]
pub trait Pve: Send + Sync {
    /// `pvesh get /cluster/resources --type vm --output-format json`
    async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError>;
    /// `pvesh get /cluster/resources --type node --output-format json`
    async fn cluster_nodes(&self) -> Result<Vec<NodeResource>, PveError>;
    /// `pvesh get /nodes/<node>/status --output-format json`
    async fn node_status(&self, node: &str) -> Result<NodeStatus, PveError>;
    /// `pvesh get /nodes/<node>/rrddata --timeframe <t> --output-format json`
    async fn rrddata(
        &self,
        node: &str,
        timeframe: pvedeck_domain::types::Timeframe,
    ) -> Result<Vec<RrdRow>, PveError>;
    /// `pvesm status` on the given node.
    /// `pvesm status --content images`: the storages that may hold VM disks.
    async fn storage_status(&self, node: &str) -> Result<Vec<StorageStatus>, PveError>;

    /// `qm create <vmid> --k v …`
    async fn create(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError>;
    /// `qm importdisk <vmid> <image> <storage>`; returns the imported volume
    /// id (`local-zfs:vm-101-disk-0`), taken from the command's output.
    async fn import_disk(
        &self,
        node: &str,
        vmid: u32,
        image: &DiskImage,
        storage: &str,
        out: LineSink<'_>,
    ) -> Result<String, PveError>;
    /// `qm set <vmid> --k v …`
    async fn set(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError>;
    /// `qm resize <vmid> <disk> <size>` (`size` as Proxmox takes it: `32G`,
    /// `+10G`). It exits 0 when its task failed: the answer is what it
    /// printed besides, for the message when the size read back disagrees.
    async fn resize(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<String, PveError>;
    /// `qm config <vmid>`
    async fn config(&self, node: &str, vmid: u32) -> Result<BTreeMap<String, String>, PveError>;
    /// `qm status <vmid>` → `running`, `stopped`…
    async fn status(&self, node: &str, vmid: u32) -> Result<String, PveError>;
    /// `qm start|stop|shutdown|reboot <vmid>`
    async fn power(&self, node: &str, vmid: u32, action: PowerAction) -> Result<(), PveError>;
    /// `qm destroy <vmid> --purge [--skiplock]`
    async fn destroy(&self, node: &str, vmid: u32, skiplock: bool) -> Result<(), PveError>;
    /// `qm migrate <vmid> <target> --with-local-disks`, its log relayed line by line.
    async fn migrate(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        out: LineSink<'_>,
    ) -> Result<(), PveError>;

    /// `qm clone <source> <vmid> --name <name> --full 0|1`, its task log
    /// relayed line by line.
    async fn clone_vm(
        &self,
        node: &str,
        source: u32,
        vmid: u32,
        name: &str,
        mode: CloneMode,
        out: LineSink<'_>,
    ) -> Result<(), PveError>;
    /// `qm template <vmid>`. The command exits 0 when the conversion task
    /// fails, so a backend checks the result itself.
    async fn template(&self, node: &str, vmid: u32) -> Result<(), PveError>;
    /// `qm agent <vmid> ping`: the guest agent answers.
    async fn agent_ping(&self, node: &str, vmid: u32) -> Result<(), PveError>;
    /// `qm guest exec <vmid> --timeout <secs> -- <argv…>`: a command run
    /// by the guest agent, through the hypervisor (not the network).
    async fn agent_exec(
        &self,
        node: &str,
        vmid: u32,
        argv: &[String],
        timeout_secs: u32,
    ) -> Result<AgentExec, PveError>;

    /// Whether the nodes fetch cloud images themselves (`fetch_image`)
    /// rather than import a file from pvedeck's cache.
    fn fetches_images(&self) -> bool {
        false
    }

    /// Whether a VM can be made and its image imported on any node. Not
    /// with `qm disk import`, which reads its file on the node where it
    /// runs: pvedeck's cache is on the main node only.
    fn imports_on_any_node(&self) -> bool {
        true
    }

    /// Has `node` fetch the image into its import storage, checked against
    /// the mirror's checksum, unless it has it already; its progress
    /// relayed. Only where `fetches_images`.
    async fn fetch_image(
        &self,
        _node: &str,
        fetch: &NodeFetch<'_>,
        _out: LineSink<'_>,
    ) -> Result<Fetched, PveError> {
        Err(PveError::command(
            "fetch image",
            format!("this backend imports {} from pvedeck's cache", fetch.file),
            2,
        ))
    }

    /// A Proxmox task a previous process waited on, followed to its end
    /// (relaying only what it logs from now on): `None` where the backend
    /// has no tasks to follow (`qm` waited on its own).
    async fn task_end(&self, _upid: &str, _out: LineSink<'_>) -> Option<Result<(), PveError>> {
        None
    }

    /// `pvesh get /cluster/firewall/options`: whether the datacenter
    /// firewall is enabled, without which no VM's firewall does anything
    /// (pve-firewall `PVE/Firewall.pm`, `compile`).
    async fn cluster_firewall(&self) -> Result<bool, PveError>;
    /// Sets the IP filter of VM `vmid`'s `net0` (crate::firewall): the
    /// ipset `ipfilter-net0` made anew with the one address (a clone's,
    /// copied from its template, replaced), then the VM's firewall options.
    async fn ip_filter(&self, node: &str, vmid: u32, filter: IpFilter) -> Result<(), PveError>;

    /// Opens VM `vmid`'s console on `node` (crate::console). The VM must
    /// be running; a backend without consoles says so.
    async fn console(
        &self,
        _node: &str,
        _vmid: u32,
        kind: ConsoleKind,
    ) -> Result<ConsoleStream, PveError> {
        Err(PveError::command(
            format!("console {}", kind.name()),
            "this backend opens no consoles",
            2,
        ))
    }

    /// Whether something answers on `ip:port` (2 s connect timeout).
    async fn probe(&self, ip: Ipv4Addr, port: u16) -> bool;
    /// Runs a command in a VM over SSH; its output relayed line by line.
    async fn guest_exec(
        &self,
        target: &GuestTarget,
        command: &GuestCommand,
        out: LineSink<'_>,
    ) -> Result<(), PveError>;
}
