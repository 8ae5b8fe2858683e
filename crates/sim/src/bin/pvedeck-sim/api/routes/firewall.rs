//! `/cluster/firewall/options` and a VM's `…/firewall/{options,ipset}`, as
//! pve-firewall's `PVE/API2/Firewall/{Cluster,VM,IPSet}.pm` answer them,
//! with their privileges: `Sys.Audit`/`Sys.Modify` on `/` for the
//! datacenter's, `VM.Audit`/`VM.Config.Network` on the VM for a VM's
//! (`rules_audit_permissions`, `rules_modify_permissions`).

use std::sync::Arc;

use axum::extract::{Path, State};
use serde_json::Value;

use super::super::params::Params;
use super::super::{Api, ApiResult, data};
use super::{Vm, VmParams};

pub async fn cluster_options(State(api): State<Arc<Api>>) -> ApiResult {
    api.privs.require("/", "Sys.Audit")?;
    Ok(data(api.sim.fw_cluster_options().await?))
}

pub async fn set_cluster_options(State(api): State<Arc<Api>>, params: Params) -> ApiResult {
    api.privs.require("/", "Sys.Modify")?;
    api.sim
        .fw_set_cluster_options(&params.options(&["digest"]))
        .await?;
    Ok(data(Value::Null))
}

/// The node answers (the calls are proxied to it) and the token may act.
fn open(api: &Api, vm: &Vm, privilege: &str) -> Result<(), super::super::error::ApiError> {
    api.node_up(&vm.node)?;
    api.privs.require(&vm.acl(), privilege)
}

pub async fn vm_options(State(api): State<Arc<Api>>, vm: Vm) -> ApiResult {
    open(&api, &vm, "VM.Audit")?;
    Ok(data(api.sim.fw_vm_options(&vm.node, vm.id).await?))
}

pub async fn set_vm_options(
    State(api): State<Arc<Api>>,
    VmParams(vm, params): VmParams,
) -> ApiResult {
    open(&api, &vm, "VM.Config.Network")?;
    api.sim
        .fw_set_vm_options(&vm.node, vm.id, &params.options(&["digest"]))
        .await?;
    Ok(data(Value::Null))
}

pub async fn ipsets(State(api): State<Arc<Api>>, vm: Vm) -> ApiResult {
    open(&api, &vm, "VM.Audit")?;
    Ok(data(api.sim.fw_ipsets(&vm.node, vm.id).await?))
}

pub async fn create_ipset(
    State(api): State<Arc<Api>>,
    VmParams(vm, params): VmParams,
) -> ApiResult {
    open(&api, &vm, "VM.Config.Network")?;
    let name = params.required("name")?;
    api.sim
        .fw_create_ipset(&vm.node, vm.id, name, params.get("comment"))
        .await?;
    Ok(data(Value::Null))
}

/// The path's `{name}` beside the VM's segments.
#[derive(serde::Deserialize)]
pub struct Named {
    name: String,
}

pub async fn ipset(
    State(api): State<Arc<Api>>,
    vm: Vm,
    Path(Named { name }): Path<Named>,
) -> ApiResult {
    open(&api, &vm, "VM.Audit")?;
    Ok(data(api.sim.fw_ipset(&vm.node, vm.id, &name).await?))
}

pub async fn add_ip(
    State(api): State<Arc<Api>>,
    Path(Named { name }): Path<Named>,
    VmParams(vm, params): VmParams,
) -> ApiResult {
    open(&api, &vm, "VM.Config.Network")?;
    let cidr = params.required("cidr")?;
    api.sim.fw_add_ip(&vm.node, vm.id, &name, cidr).await?;
    Ok(data(Value::Null))
}

pub async fn delete_ipset(
    State(api): State<Arc<Api>>,
    Path(Named { name }): Path<Named>,
    VmParams(vm, params): VmParams,
) -> ApiResult {
    open(&api, &vm, "VM.Config.Network")?;
    let force = params.flag("force")?;
    api.sim
        .fw_delete_ipset(&vm.node, vm.id, &name, force)
        .await?;
    Ok(data(Value::Null))
}

/// The path's `{name}` and `{cidr}`.
#[derive(serde::Deserialize)]
pub struct Entry {
    name: String,
    cidr: String,
}

pub async fn remove_ip(
    State(api): State<Arc<Api>>,
    vm: Vm,
    Path(Entry { name, cidr }): Path<Entry>,
) -> ApiResult {
    open(&api, &vm, "VM.Config.Network")?;
    api.sim.fw_remove_ip(&vm.node, vm.id, &name, &cidr).await?;
    Ok(data(Value::Null))
}
