//! `/auth/login` and `/auth/callback`: the browser's round trip through the
//! OpenID Connect provider. The flow is the engine's (`engine::signin`);
//! here it meets HTTP: redirects, the session cookie, a page that says why
//! a sign-in was refused.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::{AppState, status_of};
use crate::engine::Actor;

fn see_other(location: &str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, location.to_string())],
    )
        .into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A refused sign-in: a page of its own (the app's pages need a session),
/// with the reason and the way back.
fn refused(status: StatusCode, why: &str) -> Response {
    let page = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Sign-in refused - pvedeck</title>\
         <link rel=\"stylesheet\" href=\"/pkg/{}.css\"></head><body><main>\
         <h1>Sign-in refused</h1><p class=\"note error\" role=\"alert\">Sign-in refused: {}</p>\
         <p><a href=\"/login\">Sign in again</a></p></main></body></html>",
        app::OUTPUT_NAME,
        escape(why)
    );
    (status, Html(page)).into_response()
}

/// `GET /auth/login?next=/path`: off to the provider.
pub async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let base = format!("http://{host}");
    let next = query.get("next").map_or("/", String::as_str);
    match state.engine.sign_in_url(&base, next).await {
        Ok(url) => see_other(&url),
        Err(e) => {
            let (status, why) = status_of(&e);
            refused(status, &why)
        }
    }
}

/// `GET /auth/callback?code=…&state=…` (or `?error=…`): a session, or why
/// not. The cookie is `SameSite=Lax`: it must reach the page the provider's
/// redirect goes on to, a navigation another site began.
pub async fn callback(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let text = |key: &str| query.get(key).map(String::as_str);
    let provider_error = text("error").map(|error| match text("error_description") {
        Some(description) => format!("{error}: {description}"),
        None => error.to_string(),
    });
    let result = state
        .engine
        .sign_in_callback(
            actor.client,
            text("state"),
            text("code"),
            provider_error.as_deref(),
        )
        .await;
    match result {
        Ok((session, next)) => {
            let secure = if state.engine.secure_cookies() {
                "; Secure"
            } else {
                ""
            };
            let cookie = format!(
                "{}={session}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
                app::api::SESSION_COOKIE,
                state.engine.session_ttl().as_secs()
            );
            let mut response = see_other(&next);
            if let Ok(value) = header::HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(e) => {
            let (status, why) = status_of(&e);
            refused(status, &why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_shown_as_text() {
        assert_eq!(
            escape("<b>\"x\" & y</b>"),
            "&lt;b&gt;&quot;x&quot; &amp; y&lt;/b&gt;"
        );
    }
}
