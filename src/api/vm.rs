//! go-pve-qemu's VM routes.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;

use app::types::{ListFilter, VmList};

use super::{ApiError, sse};
use crate::server::AppState;

/// A path id: where go-pve-qemu answered 500, we answer 400.
fn vmid(raw: &str) -> Result<u32, ApiError> {
    raw.parse::<u32>()
        .ok()
        .filter(|id| (100..=999_999_999).contains(id))
        .ok_or_else(|| {
            ApiError::bad(format!(
                "invalid VM id '{raw}': a VMID is a number from 100"
            ))
        })
}

/// `GET /api/vm/list[?disable=0|1]`
pub async fn list(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<VmList>, ApiError> {
    let filter = ListFilter::from_disable(query.get("disable").map(String::as_str));
    Ok(Json(state.engine.list(filter).await?))
}

/// `POST /api/vm/install`: checks the request, starts the job, streams it.
pub async fn install(State(state): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let job = state.engine.install(&body).await?;
    sse::job_events(state.engine.jobs(), job, 0)
}

pub async fn status(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<String, ApiError> {
    Ok(state.engine.vm_status(vmid(&id)?).await?)
}

pub async fn start(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = state.engine.start(vmid(&id)?).await?;
    sse::job_events(state.engine.jobs(), job, 0)
}

pub async fn reboot(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = state.engine.reboot(vmid(&id)?).await?;
    sse::job_events(state.engine.jobs(), job, 0)
}

pub async fn stop(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<&'static str, ApiError> {
    state.engine.stop(vmid(&id)?).await?;
    Ok("ok")
}

pub async fn shutdown(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<&'static str, ApiError> {
    state.engine.shutdown(vmid(&id)?).await?;
    Ok("ok")
}

pub async fn destroy(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<&'static str, ApiError> {
    state.engine.destroy(vmid(&id)?).await?;
    Ok("ok")
}

pub async fn set_cpu(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<&'static str, ApiError> {
    state.engine.set_cpu(vmid(&id)?, &body).await?;
    Ok("ok")
}

pub async fn set_memory(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<&'static str, ApiError> {
    state.engine.set_memory(vmid(&id)?, &body).await?;
    Ok("ok")
}

pub async fn set_disk(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<&'static str, ApiError> {
    state.engine.set_disk(vmid(&id)?, &body).await?;
    Ok("ok")
}

pub async fn set_node(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let job = state.engine.migrate(vmid(&id)?, &body).await?;
    sse::job_events(state.engine.jobs(), job, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_ids_are_vmids_or_400() {
        assert_eq!(vmid("101").ok(), Some(101));
        for bad in ["abc", "99", "-1", "1e3", ""] {
            assert_eq!(
                vmid(bad).err().map(|e| e.status.as_u16()),
                Some(400),
                "{bad}"
            );
        }
    }
}
