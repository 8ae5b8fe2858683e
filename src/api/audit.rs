//! `GET /api/audit`: the audit log, for admins, filtered and paged.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::{Extension, Json};
use pvedeck_domain::account::AuditEntry;

use super::responses::Refused;
use super::{ApiError, AppState};
use crate::engine::Actor;
use crate::store::AuditQuery;

/// Milliseconds since the epoch, or an RFC 3339 time (`2026-12-06T08:00:00Z`).
fn time(name: &str, raw: &str) -> Result<i64, ApiError> {
    raw.parse::<i64>()
        .ok()
        .or_else(|| pvedeck_domain::format::parse_utc(raw))
        .ok_or_else(|| {
            ApiError::bad(format!(
                "{name}={raw}: not a time (milliseconds since 1970, or 2026-12-06T08:00:00Z)"
            ))
        })
}

#[utoipa::path(
    get,
    tag = "audit",
    path = "/api/audit",
    params(
        ("user" = Option<String>, Query, description = "only this user's changes"),
        ("vmid" = Option<u32>, Query, description = "only changes to this VM"),
        ("since" = Option<String>, Query, description = "from this time (ms since 1970, or RFC 3339 UTC)"),
        ("until" = Option<String>, Query, description = "up to this time"),
        ("before" = Option<u64>, Query, description = "entries older than this id (the next page)"),
        ("limit" = Option<u32>, Query, description = "at most this many (1-1000, default 100)"),
    ),
    responses(
        (status = 200, description = "changes, newest first", body = Vec<AuditEntry>),
        (status = "default", response = Refused)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    let known = ["user", "vmid", "since", "until", "before", "limit"];
    if let Some(unknown) = query.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::bad(format!(
            "unknown parameter '{unknown}' (user, vmid, since, until, before, limit)"
        )));
    }
    let number = |name: &str, max: u64| -> Result<Option<u64>, ApiError> {
        query
            .get(name)
            .map(|raw| {
                raw.parse::<u64>()
                    .ok()
                    .filter(|n| (1..=max).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad(format!("{name}={raw}: not a number from 1 to {max}"))
                    })
            })
            .transpose()
    };
    let audit = AuditQuery {
        user: query.get("user").cloned(),
        vmid: number("vmid", 999_999_999)?.and_then(|n| u32::try_from(n).ok()),
        since: query
            .get("since")
            .map(|raw| time("since", raw))
            .transpose()?,
        until: query
            .get("until")
            .map(|raw| time("until", raw))
            .transpose()?,
        before: number("before", u64::MAX)?,
        limit: number("limit", 1000)?.map_or(100, |n| n as u32),
    };
    Ok(Json(state.engine.audit_log(&actor, audit).await?))
}
