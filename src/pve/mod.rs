//! The `Pve` port: what pvedeck needs from a Proxmox VE cluster, in Proxmox's
//! own terms and data shapes. The `sim` backend implements it in-process; the
//! `cli` backend (later) runs `qm`/`pvesh`/`pvesm` and parses their output into
//! the same types.

pub mod json;
pub mod types;

use async_trait::async_trait;

pub use types::{CpuInfo, NodeResource, NodeStatus, StorageStatus, VmResource};

#[derive(Debug, thiserror::Error)]
pub enum PveError {
    /// The command (or its simulated twin) ran and failed; `message` is what
    /// it printed, as Proxmox words it.
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    /// Output that does not have the expected shape.
    #[error("{command}: cannot parse output: {detail}")]
    Parse { command: String, detail: String },
    #[error("no such node '{0}'")]
    NoSuchNode(String),
}

#[async_trait]
pub trait Pve: Send + Sync {
    /// `pvesh get /cluster/resources --type vm --output-format json`
    async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError>;
    /// `pvesh get /cluster/resources --type node --output-format json`
    async fn cluster_nodes(&self) -> Result<Vec<NodeResource>, PveError>;
    /// `pvesh get /nodes/<node>/status --output-format json`
    async fn node_status(&self, node: &str) -> Result<NodeStatus, PveError>;
    /// `pvesm status` on the given node.
    async fn storage_status(&self, node: &str) -> Result<Vec<StorageStatus>, PveError>;
}
