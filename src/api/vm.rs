//! go-pve-qemu's VM routes.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, header};
use axum::response::{IntoResponse, Response};

use pvedeck_domain::request::{InstallBody, SetCpu, SetDisk, SetMemory, SetNode};
use pvedeck_domain::types::{ClusterInfo, ListFilter, VmList};

use super::AppState;
use super::body::Checked;
use super::cluster::On;
use super::responses::{Done, Events, Refused};
use super::{ApiError, sse};
use crate::engine::{Actor, Command};

/// The `:id` of a VM route. Read before the body: a bad id is the first
/// thing a client hears of. Where go-pve-qemu answered 500, we answer 400.
pub struct VmId(pub u32);

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

impl<S: Send + Sync> FromRequestParts<S> for VmId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let raw = super::cluster::param(parts, state, "id").await?;
        vmid(&raw).map(VmId)
    }
}

/// `GET /api/vm/list[?disable=0|1]`
#[utoipa::path(
    get,
    tag = "vm",
    path = "/api/vm/list",
    params(("disable" = Option<u8>, Query, description = "1: only stopped VMs, 0: only running ones")),
    responses((
        status = 200,
        description = "VMs and per-node figures (docs/provisioning.md#the-vm-list), from the cluster snapshot",
        body = VmList,
        headers(
            ("X-Data-Age-Ms" = u64, description = "how long ago the cluster was read"),
            ("X-Data-Stale" = bool, description = "`true` when older than three refresh intervals"),
        )
    ))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let filter = ListFilter::from_disable(query.get("disable").map(String::as_str));
    let listing = state.clusters.list_for(&actor, filter).await?;
    let headers = [
        (header::CONTENT_TYPE, "application/json".to_string()),
        (
            HeaderName::from_static("x-data-age-ms"),
            listing.age_ms.to_string(),
        ),
        (
            HeaderName::from_static("x-data-stale"),
            listing.stale.to_string(),
        ),
    ];
    // Written once per snapshot: every reader gets the same bytes.
    Ok((headers, listing.listed.json.clone()))
}

/// `POST /api/vm/install`: checks the request, starts the job, streams it.
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/install",
    request_body = InstallBody,
    responses((status = 200, response = Events), (status = "default", response = Refused))
)]
pub async fn install(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    Checked(request): Checked<InstallBody>,
) -> Result<Response, ApiError> {
    let (engine, job) = state.clusters.install_as(&actor, request).await?;
    sse::job_events(&engine, &actor, job, 0, true).await
}

/// `GET /api/clusters`: each cluster this server serves, the default one
/// first, with how old its data is and why reading it fails.
#[utoipa::path(
    get,
    tag = "vm",
    path = "/api/clusters",
    responses((status = 200, description = "the clusters", body = Vec<ClusterInfo>))
)]
pub async fn clusters(State(state): State<AppState>) -> axum::Json<Vec<ClusterInfo>> {
    axum::Json(state.clusters.states())
}

/// `running` or `stopped`, from `qm status`.
#[utoipa::path(
    get,
    tag = "vm",
    path = "/api/vm/{id}/status",
    params(("id" = u32, Path, description = "VMID")),
    responses(
        (status = 200, description = "`running` or `stopped`", body = String, content_type = "text/plain"),
        (status = "default", response = Refused)
    )
)]
pub async fn status(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
) -> Result<String, ApiError> {
    Ok(state.engine.status_for(&actor, id).await?)
}

/// `qm start`, streamed until SSH answers (the VM must be stopped).
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/start",
    params(("id" = u32, Path, description = "VMID")),
    responses((status = 200, response = Events), (status = "default", response = Refused))
)]
pub async fn start(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
) -> Result<Response, ApiError> {
    streamed(&state, &actor, id, Command::Start).await
}

/// `qm reboot`, streamed until SSH answers again (the VM must be running).
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/reboot",
    params(("id" = u32, Path, description = "VMID")),
    responses((status = 200, response = Events), (status = "default", response = Refused))
)]
pub async fn reboot(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
) -> Result<Response, ApiError> {
    streamed(&state, &actor, id, Command::Reboot).await
}

/// `qm stop`: a hard stop (the VM must be running).
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/stop",
    params(("id" = u32, Path, description = "VMID")),
    responses((status = 200, response = Done), (status = "default", response = Refused))
)]
pub async fn stop(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
) -> Result<&'static str, ApiError> {
    done(&state, &actor, id, Command::Stop).await
}

/// `qm shutdown`: ACPI (the VM must be running).
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/shutdown",
    params(("id" = u32, Path, description = "VMID")),
    responses((status = 200, response = Done), (status = "default", response = Refused))
)]
pub async fn shutdown(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
) -> Result<&'static str, ApiError> {
    done(&state, &actor, id, Command::Shutdown).await
}

/// `qm destroy --purge` (the VM must be stopped).
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/destroy",
    params(("id" = u32, Path, description = "VMID")),
    responses((status = 200, response = Done), (status = "default", response = Refused))
)]
pub async fn destroy(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
) -> Result<&'static str, ApiError> {
    done(&state, &actor, id, Command::Destroy).await
}

/// `qm set --cores` (the VM must be stopped).
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/set/cpu",
    params(("id" = u32, Path, description = "VMID")),
    request_body = SetCpu,
    responses((status = 200, response = Done), (status = "default", response = Refused))
)]
pub async fn set_cpu(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
    Checked(cores): Checked<SetCpu>,
) -> Result<&'static str, ApiError> {
    done(&state, &actor, id, Command::SetCpu(cores)).await
}

/// `qm set --memory`, with the balloon rules; the VM must be stopped.
///
/// The balloon rules: docs/provisioning.md#balloon-rules.
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/set/memory",
    params(("id" = u32, Path, description = "VMID")),
    request_body = SetMemory,
    responses((status = 200, response = Done), (status = "default", response = Refused))
)]
pub async fn set_memory(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
    Checked(memory): Checked<SetMemory>,
) -> Result<&'static str, ApiError> {
    done(&state, &actor, id, Command::SetMemory(memory)).await
}

/// `qm disk resize scsi0 +<n>G` (the VM must be stopped).
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/set/disk",
    params(("id" = u32, Path, description = "VMID")),
    request_body = SetDisk,
    responses((status = 200, response = Done), (status = "default", response = Refused))
)]
pub async fn set_disk(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
    Checked(growth): Checked<SetDisk>,
) -> Result<&'static str, ApiError> {
    done(&state, &actor, id, Command::GrowDisk(growth)).await
}

/// `qm migrate --with-local-disks`, its log streamed (the VM must be stopped).
#[utoipa::path(
    post,
    tag = "vm",
    path = "/api/vm/{id}/set/node",
    params(("id" = u32, Path, description = "VMID")),
    request_body = SetNode,
    responses((status = 200, response = Events), (status = "default", response = Refused))
)]
pub async fn set_node(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
    Checked(node): Checked<SetNode>,
) -> Result<Response, ApiError> {
    streamed(&state, &actor, id, Command::Migrate(node)).await
}

/// A command that answers `ok` when done.
async fn done(
    state: &AppState,
    actor: &Actor,
    id: u32,
    command: Command,
) -> Result<&'static str, ApiError> {
    state.engine.command(actor, id, command).await?;
    Ok("ok")
}

/// A command run as a job, answered with the job's events.
async fn streamed(
    state: &AppState,
    actor: &Actor,
    id: u32,
    command: Command,
) -> Result<Response, ApiError> {
    let job = state
        .engine
        .command(actor, id, command)
        .await?
        .ok_or_else(|| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "no job"))?;
    sse::job_events(&state.engine, actor, job, 0, true).await
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
