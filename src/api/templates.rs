//! pvedeck's golden templates (docs/provisioning.md#golden-templates): list,
//! build (streamed like an install), delete.

use super::cluster::On;
use axum::response::Response;
use axum::{Extension, Json};

use pvedeck_domain::request::TemplateBody;
use pvedeck_domain::types::TemplateInfo;

use super::AppState;
use super::body::Checked;
use super::responses::{Done, Events, Refused};
use super::vm::VmId;
use super::{ApiError, sse};
use crate::engine::{Actor, TemplateCommand};

/// The templates pvedeck built, and those it is building.
#[utoipa::path(
    get,
    tag = "templates",
    path = "/api/templates",
    responses((status = 200, description = "templates, by VMID", body = Vec<TemplateInfo>))
)]
pub async fn list(On(state): On) -> Result<Json<Vec<TemplateInfo>>, ApiError> {
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
    On(state): On,
    Extension(actor): Extension<Actor>,
    Checked(release): Checked<TemplateBody>,
) -> Result<Response, ApiError> {
    streamed(&state, &actor, TemplateCommand::Build(release)).await
}

async fn streamed(
    state: &AppState,
    actor: &Actor,
    command: TemplateCommand,
) -> Result<Response, ApiError> {
    let job = state
        .engine
        .template_command(actor, command)
        .await?
        .ok_or_else(|| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "no job"))?;
    sse::job_events(&state.engine, actor, job, 0, true).await
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
pub async fn rebuild(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
) -> Result<Response, ApiError> {
    streamed(&state, &actor, TemplateCommand::Rebuild(id)).await
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
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
) -> Result<&'static str, ApiError> {
    state
        .engine
        .template_command(&actor, TemplateCommand::Delete(id))
        .await?;
    Ok("ok")
}
