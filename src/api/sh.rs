//! `GET /sh/<os>_<version>.sh`: the OS init scripts VMs fetch.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;
use pvedeck_domain::scripts;

use super::ApiError;
use super::AppState;

/// The OS init scripts VMs fetch during SSH initialization.
#[utoipa::path(
    get,
    tag = "server",
    path = "/sh/{script}",
    params(("script" = String, Path, description = "`<os>_<version>.sh`, e.g. `debian_12.sh`")),
    responses(
        (status = 200, description = "the script", body = String, content_type = "text/plain"),
        (status = 404, description = "no such script")
    )
)]
pub async fn script(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let body = scripts::script(&name, state.config.init_scripts)
        .ok_or_else(|| ApiError::not_found("404 page not found"))?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body))
}
