use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};

use app::types::{ListFilter, VmList};

use super::ApiError;
use crate::server::AppState;

/// `GET /api/vm/list[?disable=0|1]`
pub async fn list(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<VmList>, ApiError> {
    let filter = ListFilter::from_disable(query.get("disable").map(String::as_str));
    Ok(Json(state.engine.list(filter).await?))
}
