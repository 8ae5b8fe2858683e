//! pvedeck's golden templates (docs/provisioning.md#golden-templates): list,
//! build (streamed like an install), delete.

use axum::Json;
use axum::extract::State;
use axum::response::Response;

use pvedeck_domain::request::TemplateBody;
use pvedeck_domain::types::TemplateInfo;

use super::AppState;
use super::body::Checked;
use super::responses::{Done, Events, Refused};
use super::vm::VmId;
use super::{ApiError, sse};

/// The templates pvedeck built, and those it is building.
#[utoipa::path(
    get,
    tag = "templates",
    path = "/api/templates",
    responses((status = 200, description = "templates, by VMID", body = Vec<TemplateInfo>))
)]
pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<TemplateInfo>>, ApiError> {
    Ok(Json(state.engine.templates().await?))
}

/// Builds the template of a release, streamed like an install; 409 when it
/// exists or is being built.
#[utoipa::path(
    post,
    tag = "templates",
    path = "/api/templates",
    request_body = TemplateBody,
    responses((status = 200, response = Events), (status = "default", response = Refused))
)]
pub async fn build(
    State(state): State<AppState>,
    Checked(release): Checked<TemplateBody>,
) -> Result<Response, ApiError> {
    let job = state.engine.build_template(release).await?;
    sse::job_events(state.engine.jobs(), job, 0).await
}

/// Builds the template's release anew, streamed like a build; the old
/// template serves clones until the new one is ready, then is destroyed, or
/// kept as `retired` while linked clones use its disk. 404 for a VM that is
/// not a template pvedeck built, 409 while one of its release is being built.
#[utoipa::path(
    post,
    tag = "templates",
    path = "/api/templates/{id}/rebuild",
    params(("id" = u32, Path, description = "the template's VMID")),
    responses((status = 200, response = Events), (status = "default", response = Refused))
)]
pub async fn rebuild(State(state): State<AppState>, VmId(id): VmId) -> Result<Response, ApiError> {
    let job = state.engine.rebuild_template(id).await?;
    sse::job_events(state.engine.jobs(), job, 0).await
}

/// `qm destroy --purge` of a template pvedeck built; 409 while it is being
/// built or linked clones use it.
#[utoipa::path(
    delete,
    tag = "templates",
    path = "/api/templates/{id}",
    params(("id" = u32, Path, description = "the template's VMID")),
    responses((status = 200, response = Done), (status = "default", response = Refused))
)]
pub async fn delete(
    State(state): State<AppState>,
    VmId(id): VmId,
) -> Result<&'static str, ApiError> {
    state.engine.delete_template(id).await?;
    Ok("ok")
}
