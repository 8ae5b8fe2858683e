//! `GET /sh/<os>_<version>.sh`: the OS init scripts VMs fetch.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::IntoResponse;

use super::ApiError;
use crate::scripts;
use crate::server::AppState;

pub async fn script(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let body = scripts::script(&name, state.config.init_scripts)
        .ok_or_else(|| ApiError::not_found("404 page not found"))?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body))
}
