//! `/version`, `/cluster/resources`, `/cluster/nextid`, `/nodes`,
//! `/nodes/{node}/status`, `/access/permissions`.

use std::sync::Arc;

use axum::extract::{Path, State};
use pvedeck_proxmox::Pve;
use serde_json::{Value, json};

use super::super::params::Params;
use super::super::{Api, ApiResult, data};
use super::vmid;
use crate::api::error::ApiError;

pub async fn version(_api: State<Arc<Api>>) -> ApiResult {
    Ok(data(
        json!({"version": "9.1.2", "release": "9.1", "repoid": "9d436f37"}),
    ))
}

/// VMs need `VM.Audit` to be listed at all; nodes without `Sys.Audit` show
/// no figures (Cluster.pm `resources`).
pub async fn resources(State(api): State<Arc<Api>>, params: Params) -> ApiResult {
    let kind = params.get("type");
    if let Some(k) = kind
        && !["vm", "storage", "node", "sdn"].contains(&k)
    {
        return Err(ApiError::param(
            "type",
            format!(
                "value '{k}' does not have a value in the enumeration 'vm, storage, node, sdn'"
            ),
        ));
    }
    let mut all: Vec<Value> = Vec::new();
    if kind.is_none_or(|k| k == "vm") && api.privs.has("VM.Audit") {
        for vm in api.sim.cluster_vms().await? {
            all.push(serde_json::to_value(vm).unwrap_or(Value::Null));
        }
    }
    if kind.is_none_or(|k| k == "node") {
        let audit = api.privs.has("Sys.Audit");
        for node in api.sim.cluster_nodes().await? {
            let mut node = serde_json::to_value(node).unwrap_or(Value::Null);
            if !audit && let Value::Object(map) = &mut node {
                for key in ["cpu", "mem", "disk", "uptime"] {
                    map.remove(key);
                }
            }
            all.push(node);
        }
    }
    if kind.is_none_or(|k| k == "storage") {
        all.extend(storage_resources(&api));
    }
    Ok(data(all))
}

/// One entry per node and storage the token may audit (Cluster.pm:
/// `Datastore.Audit` or `Datastore.AllocateSpace`), as `pvesh` shows them.
fn storage_resources(api: &Api) -> Vec<Value> {
    if !["Datastore.Audit", "Datastore.AllocateSpace"]
        .iter()
        .any(|p| api.privs.has(p))
    {
        return Vec::new();
    }
    api.sim.read(|s| {
        let mut out = Vec::new();
        for node in s.nodes.keys() {
            let rows = s.storage_status(node, None);
            for st in &s.storages {
                let shared = matches!(st.kind.as_str(), "nfs" | "cifs" | "rbd");
                let mut entry = json!({
                    "id": format!("storage/{node}/{}", st.id), "storage": st.id,
                    "node": node, "type": "storage", "plugintype": st.kind,
                    "content": st.content, "shared": u8::from(shared),
                    "status": if st.is_active() { "available" } else { "unknown" },
                });
                if let Some(row) = rows.iter().find(|r| r.name == st.id && st.is_active()) {
                    entry["maxdisk"] = json!(row.total_kib * 1024);
                    entry["disk"] = json!(row.used_kib * 1024);
                }
                out.push(entry);
            }
        }
        out
    })
}

pub async fn nodes(State(api): State<Arc<Api>>) -> ApiResult {
    let mut list = Vec::new();
    for node in api.sim.cluster_nodes().await? {
        let mut value = serde_json::to_value(node).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut value {
            // One certificate serves every simulated node.
            map.insert("ssl_fingerprint".into(), json!(api.fingerprint));
        }
        list.push(value);
    }
    Ok(data(list))
}

pub async fn node_status(State(api): State<Arc<Api>>, Path(node): Path<String>) -> ApiResult {
    api.node_up(&node)?;
    api.privs.require(&format!("/nodes/{node}"), "Sys.Audit")?;
    Ok(data(api.sim.node_status(&node).await?))
}

pub async fn rrddata(
    State(api): State<Arc<Api>>,
    Path(node): Path<String>,
    params: Params,
) -> ApiResult {
    api.node_up(&node)?;
    api.privs.require(&format!("/nodes/{node}"), "Sys.Audit")?;
    let timeframe = pvedeck_sim::rrd::timeframe(params.get("timeframe"))
        .map_err(|why| ApiError::param("timeframe", why.to_string()))?;
    Ok(data(
        pvedeck_proxmox::Pve::rrddata(&api.sim, &node, timeframe).await?,
    ))
}

/// The lowest free VMID from 100; a given one is echoed when free.
pub async fn nextid(State(api): State<Arc<Api>>, params: Params) -> ApiResult {
    let taken = |id: u32| api.sim.read(|s| s.vms.contains_key(&id));
    if let Some(raw) = params.get("vmid") {
        let id = vmid(raw)?;
        if taken(id) {
            return Err(ApiError::param("vmid", format!("VM {id} already exists")));
        }
        return Ok(data(raw));
    }
    let free = (100..1_000_000u32).find(|id| !taken(*id));
    match free {
        Some(id) => Ok(data(id)),
        None => Err(ApiError::new(
            500,
            "unable to get any free VMID in range [100, 1000000]",
        )),
    }
}

/// The token's effective privileges on `path` (or on `/`), as
/// `{"<path>":{"<priv>":1,…}}` (1 = propagate).
/// `GET /cluster/options`: datacenter.cfg as pve-cluster's
/// `PVE/DataCenterConfig.pm` parses it (`user-tag-access` an object, its
/// `user-allow-list` and `registered-tags` lists split at `;`), here only
/// what `SIM_USER_TAG_ACCESS` (`user-allow=list,user-allow-list=a;b`) and
/// `SIM_REGISTERED_TAGS` (`a;b`) set. Needs `Sys.Audit` on `/`
/// (pve-manager `PVE/API2/Cluster.pm`, `get_options`).
pub async fn options(State(api): State<Arc<Api>>) -> ApiResult {
    api.privs.require("/", "Sys.Audit")?;
    let mut out = serde_json::Map::new();
    let split = |v: &str| -> Value {
        v.split(';')
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .into()
    };
    if let Ok(access) = std::env::var("SIM_USER_TAG_ACCESS") {
        let mut fields = serde_json::Map::new();
        for pair in access.split(',') {
            match pair.split_once('=') {
                Some(("user-allow-list", v)) => fields.insert("user-allow-list".into(), split(v)),
                Some((k, v)) => fields.insert(k.to_string(), json!(v)),
                None => fields.insert("user-allow".into(), json!(pair)),
            };
        }
        out.insert("user-tag-access".into(), Value::Object(fields));
    }
    if let Ok(tags) = std::env::var("SIM_REGISTERED_TAGS") {
        out.insert("registered-tags".into(), split(&tags));
    }
    Ok(data(Value::Object(out)))
}

pub async fn permissions(State(api): State<Arc<Api>>, params: Params) -> ApiResult {
    let path = params.get("path").unwrap_or("/").to_string();
    let privs: serde_json::Map<String, Value> =
        api.privs.all().map(|p| (p.clone(), json!(1))).collect();
    let mut tree = serde_json::Map::new();
    tree.insert(path, Value::Object(privs));
    Ok(data(tree))
}
