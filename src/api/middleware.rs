//! Request logging and the guards in front of every state-changing route.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, cross_site};
use crate::engine::{Actor, Credential};

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

/// Who sent a request: the TCP peer, unless it is one of
/// `TRUSTED_PROXIES`; then the client its `X-Forwarded-For` names (anyone
/// else's header is their own say and is not read).
pub fn client_address(state: &AppState, req: &Request) -> Option<IpAddr> {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())?;
    let proxies = &state.config.trusted_proxies;
    if proxies.is_empty() {
        return Some(peer);
    }
    let forwarded: Vec<&str> = req
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    Some(proxies.client(peer, &forwarded))
}

/// The largest request body taken, on every route (`/fn` included).
pub const MAX_BODY: usize = 1024 * 1024;

/// Bodies above [`MAX_BODY`] get 413 before anything reads them: one
/// announced larger is refused unread, one sent in chunks is read up to the
/// limit and no further. What passes is handed on whole, so no handler or
/// server function decodes more than the limit.
pub async fn limit_body(req: Request, next: Next) -> Response {
    if !has_body(req.headers()) {
        return next.run(req).await;
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {MAX_BODY} bytes"),
        )
        .into_response()
    };
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(_) => too_large(),
    }
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Paths anyone may reach whatever the sign-in: the sign-in itself, the
/// health check, the built files and the init scripts guests fetch.
fn open_to_all(path: &str) -> bool {
    const EXACT: [&str; 7] = [
        "/login",
        "/auth/login",
        "/auth/callback",
        "/api/health",
        "/fn/login",
        "/fn/logout",
        "/fn/needs-login",
    ];
    if EXACT.contains(&path) || path.starts_with("/pkg/") || path.starts_with("/sh/") {
        return true;
    }
    // A static file of the site root (`/favicon.svg`): a name with a dot,
    // at the top, that is no route's.
    let rest = path.trim_start_matches('/');
    !rest.contains('/') && rest.contains('.')
}

/// A page a browser asks for (not `/api`, `/fn` or `/metrics`).
fn is_page(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
        && !path.starts_with("/api/")
        && !path.starts_with("/fn/")
        && path != "/metrics"
}

/// The value of a cookie the request carries.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
}

/// Who sends each request, as the engine tells from its token or session
/// ([`Actor`], left in the request for the handlers and the server
/// functions), and what follows from it: with sign-in configured, no one
/// reads or changes anything but the sign-in (401 for scripts, a redirect
/// to `/login` for pages); `/metrics` is for admins; a state-changing
/// `/api` request passes `ALLOW_IPS` (403). On `/api`, a session cookie
/// counts for reads only (the browser's event streams): a change takes a
/// bearer token. The client address is the TCP peer's, or with
/// `TRUSTED_PROXIES` what a trusted proxy's `X-Forwarded-For` says
/// ([`client_address`]).
pub async fn identify(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let api = path.starts_with("/api/");
    let peer = client_address(&state, &req);
    let headers = req.headers();
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let session = cookie(headers, app::api::SESSION_COOKIE)
        .filter(|_| !(api && changes_state(&method)))
        .map(str::to_string);
    let credential = Credential {
        token,
        session: session.as_deref(),
    };
    // A change to `/api` is refused as go-pve-qemu clients know it:
    // ALLOW_IPS first (403), then the token (401, its old message).
    let change = api && changes_state(&method);
    let anyone = Actor {
        principal: None,
        client: peer,
    };
    let actor = match state.engine.identify(peer, credential) {
        Ok(actor) => actor,
        Err(e) if open_to_all(&path) => {
            tracing::debug!(path, "credential ignored on an open path: {e}");
            anyone
        }
        Err(e) => {
            tracing::warn!(path, "refused: {e}");
            let refusal = match change {
                true => state.engine.authorize_change(&anyone).err().unwrap_or(e),
                false => e,
            };
            return ApiError::from(refusal).into_response();
        }
    };
    if change && let Err(e) = state.engine.authorize_change(&actor) {
        tracing::warn!(path, "refused: {e}");
        return ApiError::from(e).into_response();
    }
    if actor.principal.is_none() && state.engine.sign_in_configured() && !open_to_all(&path) {
        if is_page(&method, &path) {
            let next = req
                .uri()
                .path_and_query()
                .map_or("/", |pq| pq.as_str())
                .to_string();
            let target = format!(
                "/login?next={}",
                percent_encoding::utf8_percent_encode(&next, percent_encoding::NON_ALPHANUMERIC)
            );
            return (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, target)],
                "sign in first",
            )
                .into_response();
        }
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "sign in first: send 'Authorization: Bearer <token>' (a token of API_TOKENS or a \
             personal one), or sign in at /login",
        )
        .into_response();
    }
    // The counters and the simulator's controls are the whole server's.
    let sim_control = path.starts_with("/api/sim/")
        || (path.starts_with("/api/clusters/") && path.split('/').nth(4) == Some("sim"));
    if (path == "/metrics" || sim_control)
        && let Err(e) = crate::engine::tenancy::admins_only(&actor, &path)
    {
        return ApiError::from(e).into_response();
    }
    req.extensions_mut().insert(app::backend::Caller {
        ip: peer,
        session,
        principal: actor.principal.clone(),
    });
    req.extensions_mut().insert(actor);
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
    // A WebSocket is opened by a GET and changes what it reaches (a VM's
    // console): a page of another site must not open one with the
    // browser's session.
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if !(changes_state(req.method()) || upgrade) || !(api || path.starts_with("/fn/")) {
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
    fn only_the_sign_in_health_built_files_and_scripts_are_open_to_all() {
        for open in [
            "/login",
            "/api/health",
            "/fn/login",
            "/pkg/pvedeck.js",
            "/sh/debian_12.sh",
            "/favicon.svg",
        ] {
            assert!(open_to_all(open), "{open}");
        }
        for closed in [
            "/",
            "/api/jobs",
            "/fn/overview",
            "/vm/101",
            "/metrics",
            "/api/x.json",
        ] {
            assert!(!open_to_all(closed), "{closed}");
        }
        assert!(is_page(&Method::GET, "/vm/101"));
        assert!(!is_page(&Method::GET, "/api/jobs"));
        assert!(!is_page(&Method::POST, "/new"));
    }

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
