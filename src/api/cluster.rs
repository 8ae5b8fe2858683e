//! Which cluster a route acts on: `/api/clusters/:cluster/…` names one,
//! every other route is the default cluster's (go-pve-qemu's routes keep
//! meaning what they meant).

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;

use super::{ApiError, AppState};

/// The server's state with `engine` the engine of the cluster the route
/// names (the default one when it names none). An unknown cluster is 404.
pub struct On(pub AppState);

impl FromRequestParts<AppState> for On {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad(e.body_text()))?;
        let named = params.iter().find(|(key, _)| *key == "cluster");
        let Some((_, name)) = named else {
            return Ok(On(state.clone()));
        };
        let engine = state.clusters.named(name)?.clone();
        Ok(On(AppState {
            engine,
            ..state.clone()
        }))
    }
}

/// A path parameter by name, from routes with or without `{cluster}`.
pub async fn param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::bad(e.body_text()))?;
    params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
        .ok_or_else(|| ApiError::bad(format!("no {name} in the path")))
}
