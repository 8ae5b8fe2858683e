//! The provisioning engine: every rule of SPEC §2–§5 lives here once, behind
//! both faces (the `/api` handlers and the UI's server functions).

mod access;
mod allocator;
mod cpu;
mod detail;
mod error;
mod images;
mod install;
mod lifecycle;
pub mod list;
mod report;
pub mod request;
mod sshkey;

use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use app::types::{ListFilter, VmList};

use crate::config::{BackendKind, Config};
use crate::jobs::Jobs;
use crate::pve::{Pve, PveError, VmResource};
use crate::sim::clock::Clock;
pub use allocator::Allocator;
pub use error::EngineError;
use images::Images;
pub use report::one_line;

pub struct Engine {
    pve: Arc<dyn Pve>,
    config: Arc<Config>,
    jobs: Arc<Jobs>,
    allocator: Arc<Allocator>,
    images: Images,
    /// The cluster CPU type, and the node list it was detected for.
    cpu_type: Mutex<Option<(Vec<String>, &'static str)>>,
    /// Serializes the SSH key step: two installs must not both run ssh-keygen.
    key_lock: tokio::sync::Mutex<()>,
    /// The port pvedeck really listens on (`PORT=0` picks one), for the
    /// init script URL VMs fetch.
    listen_port: u16,
}

/// A VM as the cluster resource list shows it, located for a command.
#[derive(Debug, Clone)]
pub struct VmRef {
    pub vmid: u32,
    pub node: String,
    pub resource: VmResource,
}

/// Which timeout applies to a Proxmox command.
#[derive(Debug, Clone, Copy)]
enum Length {
    Short,
    Long,
}

impl Engine {
    pub fn new(
        pve: Arc<dyn Pve>,
        config: Arc<Config>,
        jobs: Arc<Jobs>,
        listen_port: u16,
    ) -> Result<Engine, String> {
        Ok(Engine {
            images: Images::new(&config)?,
            pve,
            config,
            jobs,
            allocator: Arc::new(Allocator::default()),
            cpu_type: Mutex::new(None),
            key_lock: tokio::sync::Mutex::new(()),
            listen_port,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn jobs(&self) -> &Arc<Jobs> {
        &self.jobs
    }

    /// Runs a Proxmox call under its timeout. A timed-out call is dropped,
    /// which kills the command it ran.
    async fn call<T>(
        &self,
        length: Length,
        what: &str,
        fut: impl Future<Output = Result<T, PveError>>,
    ) -> Result<T, PveError> {
        let limit = match length {
            Length::Short => self.config.command_timeout,
            Length::Long => self.config.long_command_timeout,
        };
        tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| {
            Err(PveError::Timeout {
                command: what.to_string(),
                secs: limit.as_secs(),
            })
        })
    }

    /// `pvesh get /cluster/resources --type vm`, under its timeout.
    async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError> {
        let what = "pvesh get /cluster/resources --type vm";
        self.call(Length::Short, what, self.pve.cluster_vms()).await
    }

    /// `pvesh get /cluster/resources --type node`, under its timeout.
    async fn cluster_nodes(&self) -> Result<Vec<crate::pve::NodeResource>, PveError> {
        let what = "pvesh get /cluster/resources --type node";
        self.call(Length::Short, what, self.pve.cluster_nodes())
            .await
    }

    /// A pause of the pipeline (between retries). The simulated cluster runs
    /// `SIM_SPEED` times faster, and so do its pauses.
    async fn pause(&self, ms: u64) {
        let wait = match self.config.backend {
            BackendKind::Sim => Clock::new(self.config.sim_speed).scaled(ms),
            BackendKind::Cli => Duration::from_millis(ms),
        };
        tokio::time::sleep(wait).await;
    }

    fn vm_ip(&self, vmid: u32) -> Result<Ipv4Addr, EngineError> {
        self.config.vm_ip(vmid).ok_or_else(|| {
            EngineError::bad(format!("VM {vmid} has no address: ids above 255 have none"))
        })
    }

    /// `GET /api/vm/list` (SPEC §5).
    pub async fn list(&self, filter: ListFilter) -> Result<VmList, EngineError> {
        let (vms, nodes) = tokio::try_join!(self.cluster_vms(), self.cluster_nodes())?;
        Ok(list::build(&vms, &nodes, &self.config, filter))
    }

    /// Finds a VM for an action: reserved ids are refused, unknown ones are 404.
    pub async fn locate(&self, vmid: u32) -> Result<VmRef, EngineError> {
        if let Some(label) = self.config.reserved.get(&vmid) {
            return Err(EngineError::bad(format!(
                "VM {vmid} is reserved ({label}): pvedeck does not act on it"
            )));
        }
        let vms = self.cluster_vms().await?;
        let resource = vms
            .into_iter()
            .find(|vm| vm.vmid == vmid && vm.is_qemu() && !vm.template)
            .ok_or_else(|| EngineError::NotFound(format!("VM {vmid} not found")))?;
        Ok(VmRef {
            vmid,
            node: resource.node.clone(),
            resource,
        })
    }

    /// The cluster's CPU baseline, detected once per node list (SPEC §3.3).
    async fn cluster_cpu_type(&self) -> &'static str {
        let nodes = match self.pve.cluster_nodes().await {
            Ok(nodes) => nodes,
            Err(e) => {
                tracing::warn!("CPU baseline: cannot list nodes ({e}); using kvm64");
                return "kvm64";
            }
        };
        let mut names: Vec<String> = nodes.iter().map(|n| n.node.clone()).collect();
        names.sort();
        if let Some((cached_for, cpu)) = &*self.cpu_type.lock().unwrap_or_else(|p| p.into_inner())
            && *cached_for == names
        {
            return cpu;
        }
        let mut levels = Vec::new();
        for name in &names {
            match self.pve.node_status(name).await {
                Ok(status) => levels.push(cpu::node_level(&status.cpuinfo.flags)),
                Err(e) => {
                    tracing::warn!(node = name, "CPU baseline: {e}; using kvm64");
                    return "kvm64";
                }
            }
        }
        let cpu = cpu::cluster_type(&levels);
        tracing::info!(cpu, nodes = ?names, "CPU baseline detected");
        *self.cpu_type.lock().unwrap_or_else(|p| p.into_inner()) = Some((names, cpu));
        cpu
    }

    /// SPEC §3.4: `--numa 1 --balloon <n>` for a VM of `ram_mb`.
    fn balloon(&self, ram_mb: u64) -> Option<u64> {
        let min = u64::from(self.config.vm_balloon_min_mb?);
        if ram_mb <= min {
            None
        } else if ram_mb >= 65_536 {
            Some(49_152)
        } else if ram_mb >= min + 1024 {
            Some(ram_mb - min)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(vars: &[(&str, &str)]) -> Engine {
        let config = Arc::new(Config::from_vars(vars.iter().copied()).unwrap());
        let dir = std::env::temp_dir().join(format!(
            "pvedeck-engine-{}-{}",
            std::process::id(),
            vars.len()
        ));
        let jobs = Jobs::open(&dir.join("jobs.db")).unwrap();
        let sim = Arc::new(crate::sim::SimCluster::in_memory(config.gateway, 1000.0));
        Engine::new(sim, config, jobs, 8080).unwrap()
    }

    #[test]
    fn balloon_rules_of_spec_3_4() {
        let e = engine(&[("VM_BALLOON_MIN", "2048")]);
        assert_eq!(e.balloon(2048), None);
        assert_eq!(e.balloon(3000), None);
        assert_eq!(e.balloon(3072), Some(1024));
        assert_eq!(e.balloon(8192), Some(6144));
        assert_eq!(e.balloon(65_536), Some(49_152));
        assert_eq!(engine(&[]).balloon(8192), None);
    }

    #[tokio::test]
    async fn the_demo_cluster_baseline_is_v2_aes() {
        let e = engine(&[("SIM_SPEED", "1000")]);
        assert_eq!(e.cluster_cpu_type().await, "x86-64-v2-AES");
    }
}
