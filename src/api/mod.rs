//! The `/api` routes: go-pve-qemu's, plus pvedeck's additions. Handlers parse,
//! call the engine and render; the rules are the engine's.

mod error;
pub mod middleware;
mod sim;
mod vm;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};

use crate::server::AppState;
pub use error::ApiError;

pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/vm/list", get(vm::list))
        .route("/sim/node/{node}/{state}", post(sim::set_node_state))
        .fallback(not_found)
        // Every state-changing request passes the allow-list and token check.
        .layer(axum::middleware::from_fn_with_state(
            state,
            middleware::guard_changes,
        ))
}

async fn health() -> &'static str {
    "ok"
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "404 page not found")
}
