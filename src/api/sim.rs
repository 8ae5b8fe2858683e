//! Control of the simulated cluster (demo and tests): only there when
//! `PVE_BACKEND=sim`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::Path;
use pvedeck_sim::SimCluster;
use pvedeck_sim::faults::Fault;

use super::ApiError;
use super::AppState;
use super::cluster::On;

/// The simulated cluster the route names (the default one when it names
/// none); 404 where that cluster is not simulated.
fn sim(state: &AppState) -> Result<&Arc<SimCluster>, ApiError> {
    state
        .sims
        .get(&state.engine.config().cluster)
        .ok_or_else(|| ApiError::not_found("404 page not found"))
}

#[derive(serde::Deserialize)]
pub struct NodeState {
    node: String,
    state: String,
}

#[derive(serde::Deserialize)]
pub struct Wanted {
    state: String,
}

#[derive(serde::Deserialize)]
pub struct Claim {
    vmid: u32,
    ip: std::net::Ipv4Addr,
}

#[derive(serde::Deserialize)]
pub struct Vmid {
    vmid: u32,
}

/// `POST /api/sim/node/<node>/offline|online`
pub async fn set_node_state(
    On(state): On,
    Path(NodeState {
        node,
        state: wanted,
    }): Path<NodeState>,
) -> Result<&'static str, ApiError> {
    let sim = sim(&state)?;
    let online = match wanted.as_str() {
        "online" => true,
        "offline" => false,
        other => {
            return Err(ApiError::bad(format!(
                "node state '{other}' is not one of: online, offline"
            )));
        }
    };
    sim.set_node_online(&node, online)?;
    state.engine.cluster_changed();
    tracing::info!(node, online, "sim: node state changed");
    Ok("ok")
}

/// `POST /api/sim/faults` with a fault as JSON (see `pvedeck_sim::faults`).
pub async fn add_fault(On(state): On, body: Bytes) -> Result<&'static str, ApiError> {
    let sim = sim(&state)?;
    let fault: Fault =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad(format!("invalid fault: {e}")))?;
    sim.add_fault(fault)
        .map_err(|e| ApiError::bad(e.to_string()))?;
    Ok("ok")
}

/// `DELETE /api/sim/faults`
pub async fn clear_faults(On(state): On) -> Result<&'static str, ApiError> {
    sim(&state)?.clear_faults();
    Ok("ok")
}

/// `GET /api/sim/faults`
pub async fn faults(On(state): On) -> Result<Json<Vec<Fault>>, ApiError> {
    Ok(Json(sim(&state)?.faults()))
}

/// `GET /api/sim/commands`: every command the simulated cluster has run.
pub async fn commands(On(state): On) -> Result<Json<Vec<String>>, ApiError> {
    Ok(Json(sim(&state)?.commands()))
}

/// `POST /api/sim/firewall/on|off`: the datacenter firewall, as an admin
/// sets it in Datacenter → Firewall → Options.
pub async fn set_firewall(
    On(state): On,
    Path(Wanted { state: wanted }): Path<Wanted>,
) -> Result<&'static str, ApiError> {
    let sim = sim(&state)?;
    let enable = match wanted.as_str() {
        "on" => "1",
        "off" => "0",
        other => {
            return Err(ApiError::bad(format!(
                "firewall state '{other}' is not one of: on, off"
            )));
        }
    };
    sim.fw_set_cluster_options(&[("enable".to_string(), enable.to_string())])
        .await?;
    Ok("ok")
}

/// `POST /api/sim/claim/<vmid>/<ip>`: VM `vmid`'s guest answers for `ip`
/// too, as a hostile tenant would (`SimCluster::stage_claim`).
pub async fn claim(
    On(state): On,
    Path(Claim { vmid, ip }): Path<Claim>,
) -> Result<&'static str, ApiError> {
    sim(&state)?.stage_claim(vmid, ip)?;
    Ok("ok")
}

/// `POST /api/sim/vm/<vmid>/set` with `{"option": "value", …}`: what an
/// admin's `qm set` on the node does behind pvedeck's back (a test's
/// changed tags or notes).
pub async fn set_behind(
    On(state): On,
    Path(Vmid { vmid }): Path<Vmid>,
    Json(options): Json<std::collections::BTreeMap<String, String>>,
) -> Result<&'static str, ApiError> {
    let sim = sim(&state)?;
    let node = sim
        .read(|s| s.vms.get(&vmid).map(|vm| vm.node.clone()))
        .ok_or_else(|| ApiError::not_found(format!("VM {vmid} not found")))?;
    let options: Vec<(String, String)> = options.into_iter().collect();
    pvedeck_proxmox::Pve::set(sim.as_ref(), &node, vmid, &options)
        .await
        .map_err(|e| ApiError::bad(e.to_string()))?;
    Ok("ok")
}
