//! `GET /nodes/{node}/tasks/{upid}/status` and `…/log`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use serde_json::json;

use super::super::error::ApiError;
use super::super::params::Params;
use super::super::tasks::{self, TaskState, Upid, page};
use super::super::{Api, ApiResult, data};

fn upid(raw: &str) -> Result<Upid, ApiError> {
    tasks::parse(raw)
        .ok_or_else(|| ApiError::param("upid", format!("unable to parse worker upid '{raw}'")))
}

pub async fn status(
    State(api): State<Arc<Api>>,
    Path((_node, raw)): Path<(String, String)>,
) -> ApiResult {
    let upid = upid(&raw)?;
    let state = api
        .tasks
        .state(&upid)
        .ok_or_else(|| ApiError::new(500, "no such task"))?;
    let (user, token) = upid
        .user
        .split_once('!')
        .unwrap_or((upid.user.as_str(), ""));
    let mut out = json!({
        "upid": upid.to_string(), "node": upid.node, "pid": upid.pid, "pstart": upid.pstart,
        "starttime": upid.starttime, "type": upid.kind, "id": upid.id, "user": user,
    });
    if !token.is_empty() {
        out["tokenid"] = json!(token);
    }
    match state {
        TaskState::Running => out["status"] = json!("running"),
        TaskState::Stopped(exit) => {
            out["status"] = json!("stopped");
            out["exitstatus"] = json!(exit);
        }
    }
    Ok(data(out))
}

/// `DELETE /nodes/{node}/tasks/{upid}`: stops a running task (pvedeck
/// stops a node's download that passed `IMAGE_DOWNLOAD_TIMEOUT_SECS`).
pub async fn stop(
    State(api): State<Arc<Api>>,
    Path((_node, raw)): Path<(String, String)>,
) -> ApiResult {
    let upid = upid(&raw)?;
    api.sim
        .record(&format!("pvesh delete /nodes/{}/tasks/{upid}", upid.node));
    if !api.tasks.stop(&upid) && api.tasks.state(&upid).is_none() {
        return Err(ApiError::new(500, "no such task"));
    }
    Ok(data(serde_json::Value::Null))
}

/// `{"data":[{"n":1,"t":"…"}],"total":N}`; `limit` defaults to 50, 0 = all.
pub async fn log(
    State(api): State<Arc<Api>>,
    Path((_node, raw)): Path<(String, String)>,
    params: Params,
) -> ApiResult {
    let upid = upid(&raw)?;
    let lines = api
        .tasks
        .log(&upid)
        .ok_or_else(|| ApiError::new(500, "no such task"))?;
    let start = usize::try_from(params.int("start")?.unwrap_or(0)).unwrap_or(usize::MAX);
    let limit = usize::try_from(params.int("limit")?.unwrap_or(50)).unwrap_or(0);
    let (lines, total) = page(&lines, start, limit);
    let rows: Vec<_> = lines
        .into_iter()
        .map(|(n, t)| json!({"n": n, "t": t}))
        .collect();
    let mut body = json!({ "data": rows });
    if total > 0 {
        body["total"] = json!(total);
    }
    Ok(axum::Json(body).into_response())
}
