//! Request logging and the guard in front of every state-changing route.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

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

/// Compares in time independent of where the first difference is.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `ALLOW_IPS` (403) and `API_TOKENS` (401) for every state-changing request.
/// The client address is the TCP peer's: a forwarded-for header is not
/// trusted, as anyone can send one.
pub async fn guard_changes(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !changes_state(req.method()) {
        return next.run(req).await;
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    let allowed = match peer {
        Some(ip) => state.config.allow_ips.allows(ip),
        // No peer address (an in-process call): only an open server lets it through.
        None => state.config.allow_ips == crate::net::AllowList::Everyone,
    };
    if !allowed {
        let who = peer.map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
        tracing::warn!(
            client = who,
            path = req.uri().path(),
            "refused by ALLOW_IPS"
        );
        return (
            StatusCode::FORBIDDEN,
            format!("client {who} is not allowed to change anything (ALLOW_IPS)"),
        )
            .into_response();
    }
    if !state.config.api_tokens.is_empty() {
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let ok = presented.is_some_and(|token| {
            state
                .config
                .api_tokens
                .iter()
                .any(|t| same_secret(t.expose().as_bytes(), token.as_bytes()))
        });
        if !ok {
            return (
                StatusCode::UNAUTHORIZED,
                "a valid 'Authorization: Bearer <token>' header is required (API_TOKENS)",
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
    fn secrets_compare_by_content() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }

    #[test]
    fn reads_do_not_change_state() {
        assert!(!changes_state(&Method::GET));
        assert!(changes_state(&Method::POST));
        assert!(changes_state(&Method::DELETE));
    }
}
