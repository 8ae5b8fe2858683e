//! Request logging and the guards in front of every state-changing route.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, cross_site};

/// One log line per request, written when the response starts, and one
/// count in `/metrics` under the route it matched (its template: ids and
/// names as sent are not labels).
pub async fn log_request(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("(none)", MatchedPath::as_str)
        .to_string();
    let started = Instant::now();
    let response = next.run(req).await;
    state
        .engine
        .jobs()
        .metrics()
        .request(&route, method.as_str(), response.status().as_u16());
    tracing::info!(
        %method,
        path,
        status = response.status().as_u16(),
        ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// `ALLOW_IPS` (403) and `API_TOKENS` (401) for every state-changing request,
/// as the engine rules them. The client address is the TCP peer's: a
/// forwarded-for header is not trusted, as anyone can send one.
pub async fn guard_changes(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !changes_state(req.method()) {
        return next.run(req).await;
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if let Err(e) = state.engine.authorize(peer, token) {
        tracing::warn!(path = req.uri().path(), "refused: {e}");
        return ApiError::from(e).into_response();
    }
    next.run(req).await
}

/// Whether a request carries a body: a length above zero, or one sent in
/// chunks.
fn has_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    length.is_some_and(|n| n > 0) || headers.contains_key(header::TRANSFER_ENCODING)
}

/// Cross-site requests and DNS rebinding, for every state-changing request
/// to `/api` and `/fn`: `Host`, `Origin` and `Sec-Fetch-Site` as
/// `cross_site` rules them (403), and on `/api` a body only as JSON
/// (415): an HTML form or a `text/plain` fetch, which a browser sends
/// cross-site without asking, is not one.
pub async fn guard_cross_site(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let api = path.starts_with("/api/");
    if !changes_state(req.method()) || !(api || path.starts_with("/fn/")) {
        return next.run(req).await;
    }
    let headers = req.headers();
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let host = text(header::HOST).or_else(|| req.uri().authority().map(|a| a.as_str()));
    let checked = cross_site::check(
        &state.config.sites,
        host,
        text(header::ORIGIN),
        headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()),
    );
    if let Err(refused) = checked {
        tracing::warn!(path, "refused: {refused}");
        return ApiError::new(StatusCode::FORBIDDEN, refused.to_string()).into_response();
    }
    if api && has_body(headers) {
        let sent = text(header::CONTENT_TYPE).unwrap_or("");
        if !cross_site::is_json(sent) {
            let shown = if sent.is_empty() { "none" } else { sent };
            return ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "a request body must be JSON: Content-Type: application/json (got {shown})"
                ),
            )
            .into_response();
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_do_not_change_state() {
        assert!(!changes_state(&Method::GET));
        assert!(changes_state(&Method::POST));
        assert!(changes_state(&Method::DELETE));
    }

    #[test]
    fn a_body_is_a_length_above_zero_or_chunks() {
        let mut headers = HeaderMap::new();
        assert!(!has_body(&headers));
        headers.insert(header::CONTENT_LENGTH, "0".parse().unwrap());
        assert!(!has_body(&headers));
        headers.insert(header::CONTENT_LENGTH, "12".parse().unwrap());
        assert!(has_body(&headers));
        let mut chunked = HeaderMap::new();
        chunked.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        assert!(has_body(&chunked));
    }
}
