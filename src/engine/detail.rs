//! What the UI shows beyond `/api/vm/list`: the create form's catalog and
//! one VM's page.

use app::rules::Limits;
use app::types::{Catalog, ListFilter, OsInfo, VmDetail};

use super::{Engine, EngineError, Length};
use crate::os::RELEASES;

impl Engine {
    /// `VM_MAX_*`, as the request rules read them.
    pub fn limits(&self) -> Limits {
        Limits {
            max_cpu: self.config.vm_max_cpu,
            max_ram_mb: self.config.vm_max_ram_mb,
            max_disk_gb: self.config.vm_max_disk_gb,
        }
    }

    pub async fn catalog(&self) -> Result<Catalog, EngineError> {
        let mut oses: Vec<OsInfo> = Vec::new();
        for release in RELEASES {
            match oses.iter_mut().find(|o| o.os == release.os) {
                Some(info) => info.versions.push(release.version.to_string()),
                None => oses.push(OsInfo {
                    os: release.os.to_string(),
                    versions: vec![release.version.to_string()],
                    default_user: release.default_user.to_string(),
                }),
            }
        }
        let mut nodes: Vec<String> = self
            .cluster_nodes()
            .await?
            .into_iter()
            .filter(|n| n.is_online())
            .map(|n| n.node)
            .collect();
        nodes.sort();
        Ok(Catalog {
            oses,
            max_cpu: self.config.vm_max_cpu,
            max_ram_mb: self.config.vm_max_ram_mb,
            max_disk_gb: self.config.vm_max_disk_gb,
            nodes,
            main_node: self.config.main_node.clone(),
        })
    }

    pub async fn vm_detail(&self, vmid: u32) -> Result<VmDetail, EngineError> {
        let located = self.locate(vmid).await?;
        let list = self.list(ListFilter::All).await?;
        let vm = list
            .list
            .into_iter()
            .find(|v| v.vmid == vmid)
            .ok_or_else(|| EngineError::NotFound(format!("VM {vmid} not found")))?;
        // The keys (URL-encoded) and the masked password say nothing useful.
        let config = if located.resource.status == "unknown" {
            Vec::new()
        } else {
            self.call(
                Length::Short,
                "qm config",
                self.pve.config(&located.node, vmid),
            )
            .await?
            .into_iter()
            .filter(|(k, _)| k != "sshkeys" && k != "cipassword" && k != "digest")
            .collect()
        };
        let targets = list
            .cluster
            .iter()
            .filter(|n| n.running && n.node != vm.node)
            .map(|n| n.node.clone())
            .collect();
        Ok(VmDetail {
            vm,
            config,
            targets,
            max_cpu: self.config.vm_max_cpu,
            max_ram_mb: self.config.vm_max_ram_mb,
            max_disk_gb: self.config.vm_max_disk_gb,
        })
    }
}
