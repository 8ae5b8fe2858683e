//! The simulated cluster: a small Proxmox VE cluster kept in memory, served
//! through the same `Pve` port as a real one. It is the embedded default (a
//! new user sees the product work without Proxmox) and what the tests drive.

mod seed;
mod state;

use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::pve::{NodeResource, NodeStatus, Pve, PveError, StorageStatus, VmResource};
pub use state::ClusterState;

pub struct SimCluster {
    state: Mutex<ClusterState>,
}

impl Default for SimCluster {
    fn default() -> Self {
        SimCluster::new()
    }
}

impl SimCluster {
    /// The three-node demo cluster of `seed.rs`.
    pub fn new() -> SimCluster {
        SimCluster::with_state(seed::demo_cluster())
    }

    pub fn with_state(state: ClusterState) -> SimCluster {
        SimCluster {
            state: Mutex::new(state),
        }
    }

    fn state(&self) -> MutexGuard<'_, ClusterState> {
        // A panic while the lock was held leaves plain data behind, still
        // consistent field by field: keep serving it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Fault injection: a node that goes offline (corosync loses it) or comes back.
    pub fn set_node_online(&self, node: &str, online: bool) -> Result<(), PveError> {
        self.state().set_node_online(node, online)
    }

    pub fn node_names(&self) -> Vec<String> {
        self.state().nodes.keys().cloned().collect()
    }
}

#[async_trait]
impl Pve for SimCluster {
    async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError> {
        tracing::debug!("sim: pvesh get /cluster/resources --type vm");
        Ok(self.state().vm_resources())
    }

    async fn cluster_nodes(&self) -> Result<Vec<NodeResource>, PveError> {
        tracing::debug!("sim: pvesh get /cluster/resources --type node");
        Ok(self.state().node_resources())
    }

    async fn node_status(&self, node: &str) -> Result<NodeStatus, PveError> {
        tracing::debug!(node, "sim: pvesh get /nodes/{node}/status");
        self.state().node_status(node)
    }

    async fn storage_status(&self, node: &str) -> Result<Vec<StorageStatus>, PveError> {
        tracing::debug!(node, "sim: pvesm status");
        self.state().storage_status(node)
    }
}
