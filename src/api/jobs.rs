//! pvedeck's job routes: history, one job, its events (replayable SSE).

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::{Extension, Json};

use pvedeck_domain::types::{Job, JobDetail};

use super::AppState;
use super::responses::{Events, Refused};
use super::{ApiError, sse};
use crate::engine::Actor;

fn job_id(raw: &str) -> Result<u64, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::bad(format!("invalid job id '{raw}'")))
}

/// `GET /api/jobs[?limit=n]`: newest first.
#[utoipa::path(
    get,
    tag = "jobs",
    path = "/api/jobs",
    params(("limit" = Option<u32>, Query, description = "at most this many (1-10000, default 100)")),
    responses((status = 200, description = "every job, newest first", body = Vec<Job>))
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Vec<Job>>, ApiError> {
    let limit = match query.get("limit") {
        None => 100,
        Some(raw) => raw
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| ApiError::bad("limit must be a number from 1 to 10000"))?,
    };
    Ok(Json(state.engine.jobs_for(&actor, limit).await?))
}

/// `GET /api/jobs/:id`: the job and all its events.
#[utoipa::path(
    get,
    tag = "jobs",
    path = "/api/jobs/{id}",
    params(("id" = u64, Path, description = "job id")),
    responses((status = 200, description = "the job and its events", body = JobDetail), (status = "default", response = Refused))
)]
pub async fn show(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
) -> Result<Json<JobDetail>, ApiError> {
    Ok(Json(state.engine.job_for(&actor, job_id(&id)?).await?))
}

/// `GET /api/jobs/:id/events`: replay, then follow; `Last-Event-ID` (or
/// `?after=`) resumes after that event.
#[utoipa::path(
    get,
    tag = "jobs",
    path = "/api/jobs/{id}/events",
    params(
        ("id" = u64, Path, description = "job id"),
        ("after" = Option<u64>, Query, description = "resume after this event"),
        ("Last-Event-ID" = Option<u64>, Header, description = "resume after this event")
    ),
    responses((status = 200, response = Events), (status = "default", response = Refused))
)]
pub async fn events(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| query.get("after").cloned())
        .map(|raw| {
            raw.trim()
                .parse::<u64>()
                .map_err(|_| ApiError::bad(format!("invalid event id '{raw}'")))
        })
        .transpose()?
        .unwrap_or(0);
    sse::job_events(&state.engine, &actor, id, after, false).await
}
