//! What every response tells the browser about itself: no framing (a page
//! of another site cannot put pvedeck under the user's mouse and have them
//! press Destroy), no content sniffing, no referrer beyond this server,
//! HSTS once served over HTTPS, and a Content-Security-Policy that lets
//! only pvedeck's own files run — the inline scripts of a page (Leptos'
//! hydration and its streamed resources) carry a fresh nonce per page,
//! which the policy names.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine as _;

use super::AppState;

/// A page's nonce, for its inline scripts (`server::build` hands it to
/// Leptos, which writes it on every `<script>` it emits).
#[derive(Debug, Clone)]
pub struct CspNonce(pub String);

/// A year, as HSTS preload lists ask.
const HSTS: &str = "max-age=31536000";

/// The policy: scripts and WASM from this server only (the WASM bundle
/// needs `'wasm-unsafe-eval'` to be compiled), a page's inline scripts only
/// with its nonce; inline `style` attributes are allowed (the charts and
/// bars are sized with them; no script runs from a style).
pub fn policy(nonce: Option<&str>) -> String {
    let scripts = match nonce {
        Some(n) => format!("script-src 'self' 'wasm-unsafe-eval' 'nonce-{n}'"),
        None => "script-src 'self' 'wasm-unsafe-eval'".to_string(),
    };
    format!(
        "default-src 'self'; {scripts}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
         connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    )
}

/// A request that may render a page (and so carry inline scripts).
fn renders_a_page(method: &Method, path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD)
        && !["/api/", "/fn/", "/pkg/", "/sh/"]
            .iter()
            .any(|p| path.starts_with(p))
        && path != "/metrics"
}

fn fresh_nonce() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

pub async fn security_headers(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let nonce = renders_a_page(req.method(), req.uri().path())
        .then(fresh_nonce)
        .flatten();
    if let Some(n) = &nonce {
        req.extensions_mut().insert(CspNonce(n.clone()));
    }
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    if let Ok(csp) = HeaderValue::from_str(&policy(nonce.as_deref())) {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if state.config.serves_https() {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_forbids_framing_and_foreign_or_inline_scripts() {
        let p = policy(Some("abc"));
        assert!(p.contains("frame-ancestors 'none'"), "{p}");
        assert!(
            p.contains("script-src 'self' 'wasm-unsafe-eval' 'nonce-abc';"),
            "{p}"
        );
        let scripts = p.split(';').find(|d| d.trim().starts_with("script-src"));
        assert!(scripts.is_some_and(|d| !d.contains("unsafe-inline")), "{p}");
        assert!(!policy(None).contains("nonce"));
    }

    #[test]
    fn pages_get_nonces_and_files_and_apis_do_not() {
        assert!(renders_a_page(&Method::GET, "/vm/101"));
        assert!(renders_a_page(&Method::GET, "/"));
        for path in [
            "/api/vm/list",
            "/fn/overview",
            "/pkg/pvedeck.js",
            "/metrics",
        ] {
            assert!(!renders_a_page(&Method::GET, path), "{path}");
        }
        assert!(!renders_a_page(&Method::POST, "/login"));
        let (a, b) = (fresh_nonce().unwrap(), fresh_nonce().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 22);
    }
}
