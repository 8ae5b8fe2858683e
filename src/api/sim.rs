//! Control of the simulated cluster (demo and tests): only there when
//! `PVE_BACKEND=sim`.

use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::ApiError;
use crate::server::AppState;

/// `POST /api/sim/node/<node>/offline|online`
pub async fn set_node_state(
    State(state): State<AppState>,
    Path((node, wanted)): Path<(String, String)>,
) -> Result<&'static str, ApiError> {
    let sim = state
        .sim
        .as_ref()
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "404 page not found"))?;
    let online = match wanted.as_str() {
        "online" => true,
        "offline" => false,
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("node state '{other}' is not one of: online, offline"),
            ));
        }
    };
    sim.set_node_online(&node, online)?;
    tracing::info!(node, online, "sim: node state changed");
    Ok("ok")
}
