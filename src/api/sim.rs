//! Control of the simulated cluster (demo and tests): only there when
//! `PVE_BACKEND=sim`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use pvedeck_sim::SimCluster;
use pvedeck_sim::faults::Fault;

use super::ApiError;
use super::AppState;

fn sim(state: &AppState) -> Result<&Arc<SimCluster>, ApiError> {
    state
        .sim
        .as_ref()
        .ok_or_else(|| ApiError::not_found("404 page not found"))
}

/// `POST /api/sim/node/<node>/offline|online`
pub async fn set_node_state(
    State(state): State<AppState>,
    Path((node, wanted)): Path<(String, String)>,
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
pub async fn add_fault(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<&'static str, ApiError> {
    let sim = sim(&state)?;
    let fault: Fault =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad(format!("invalid fault: {e}")))?;
    sim.add_fault(fault)
        .map_err(|e| ApiError::bad(e.to_string()))?;
    Ok("ok")
}

/// `DELETE /api/sim/faults`
pub async fn clear_faults(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    sim(&state)?.clear_faults();
    Ok("ok")
}

/// `GET /api/sim/faults`
pub async fn faults(State(state): State<AppState>) -> Result<Json<Vec<Fault>>, ApiError> {
    Ok(Json(sim(&state)?.faults()))
}

/// `GET /api/sim/commands`: every command the simulated cluster has run.
pub async fn commands(State(state): State<AppState>) -> Result<Json<Vec<String>>, ApiError> {
    Ok(Json(sim(&state)?.commands()))
}

/// `POST /api/sim/firewall/on|off`: the datacenter firewall, as an admin
/// sets it in Datacenter → Firewall → Options.
pub async fn set_firewall(
    State(state): State<AppState>,
    Path(wanted): Path<String>,
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
    State(state): State<AppState>,
    Path((vmid, ip)): Path<(u32, std::net::Ipv4Addr)>,
) -> Result<&'static str, ApiError> {
    sim(&state)?.stage_claim(vmid, ip)?;
    Ok("ok")
}

/// `POST /api/sim/vm/<vmid>/set` with `{"option": "value", …}`: what an
/// admin's `qm set` on the node does behind pvedeck's back (a test's
/// changed tags or notes).
pub async fn set_behind(
    State(state): State<AppState>,
    Path(vmid): Path<u32>,
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
