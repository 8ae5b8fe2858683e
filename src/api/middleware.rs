//! Request logging and the guard in front of every state-changing route.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::server::AppState;

/// One log line per request, written when the response starts.
pub async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let started = Instant::now();
    let response = next.run(req).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_do_not_change_state() {
        assert!(!changes_state(&Method::GET));
        assert!(changes_state(&Method::POST));
        assert!(changes_state(&Method::DELETE));
    }
}
