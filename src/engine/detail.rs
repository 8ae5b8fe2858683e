//! What the UI shows beyond `/api/vm/list`: the create form's catalog and
//! one VM's page.

use pvedeck_domain::os::Os;
use pvedeck_domain::types::{Catalog, ListFilter, OsInfo, VmDetail};

use super::scope::Scope;
use super::{Engine, EngineError};

impl Engine {
    pub async fn catalog(&self) -> Result<Catalog, EngineError> {
        let oses = Os::ALL
            .into_iter()
            .map(|os| OsInfo {
                os: os.to_string(),
                versions: os.versions().into_iter().map(str::to_string).collect(),
                default_user: os.default_user().to_string(),
            })
            .collect();
        let view = self.cluster.read().await?;
        let templates = self
            .ready_templates(&view.snapshot.vms)
            .filter_map(|vm| vm.name.clone())
            .collect();
        let mut nodes: Vec<String> = view
            .snapshot
            .nodes
            .iter()
            .filter(|n| n.is_online())
            .map(|n| n.node.clone())
            .collect();
        nodes.sort();
        Ok(Catalog {
            oses,
            limits: self.config.limits,
            nodes,
            main_node: self.config.main_node.clone(),
            templates,
        })
    }

    pub async fn vm_detail(&self, vmid: u32) -> Result<VmDetail, EngineError> {
        let located = self.locate(vmid).await?;
        let listing = self.list(ListFilter::All).await?;
        let list = &listing.listed.list;
        let vm = list
            .list
            .iter()
            .find(|v| v.vmid == vmid)
            .cloned()
            .ok_or_else(|| EngineError::NotFound(format!("VM {vmid} not found")))?;
        // Only a VM pvedeck manages shows its configuration (another's —
        // a router's, a domain controller's — is not pvedeck's to read out),
        // from a read at most a few seconds old. The keys (URL-encoded) and
        // the masked password say nothing useful.
        let config = if located.resource.status == "unknown"
            || !self.config.manage.covers(&located.resource)
        {
            Vec::new()
        } else {
            self.configs
                .get(vmid, || async {
                    Ok(self
                        .proxmox
                        .config(&located.node, vmid)
                        .await?
                        .into_iter()
                        .filter(|(k, _)| k != "sshkeys" && k != "cipassword" && k != "digest")
                        .collect())
                })
                .await?
        };
        let targets = list
            .cluster
            .iter()
            .filter(|n| n.running && n.node != vm.node)
            .map(|n| n.node.clone())
            .collect();
        let host_key = self
            .allocator
            .address(vmid)
            .ok()
            .and_then(|ip| self.pinned_fingerprint(ip));
        Ok(VmDetail {
            vm,
            config,
            targets,
            limits: self.config.limits,
            host_key,
        })
    }
}
