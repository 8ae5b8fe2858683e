//! The `/api` routes: go-pve-qemu's, plus pvedeck's additions. Handlers parse,
//! call the engine and render; the rules are the engine's.

mod audit;
pub mod auth;
mod body;
mod cluster;
mod console;
mod cross_site;
mod error;
pub mod headers;
mod jobs;
pub mod middleware;
mod openapi;
mod responses;
pub mod sh;
mod sim;
mod sse;
mod state;
mod templates;
mod vm;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};

pub use error::{ApiError, status_of};
pub use state::AppState;

/// The routes; who may reach them is `middleware::identify`'s, in front
/// of the whole server.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi::openapi))
        .route("/vm/list", get(vm::list))
        .route("/vm/install", post(vm::install))
        .route("/clusters", get(vm::clusters))
        .route("/jobs", get(jobs::list))
        .route("/jobs/{id}", get(jobs::show))
        .route("/jobs/{id}/events", get(jobs::events))
        .route("/audit", get(audit::list))
        .merge(cluster_routes())
        .nest("/clusters/{cluster}", cluster_routes())
        .fallback(not_found)
}

/// The routes of one cluster's VMs, templates and simulator: at `/api/…`
/// the default cluster's, at `/api/clusters/:cluster/…` any one's.
fn cluster_routes() -> Router<AppState> {
    Router::new()
        .route("/vm/{id}/status", get(vm::status))
        .route("/vm/{id}/console", get(console::console))
        .route("/vm/{id}/start", post(vm::start))
        .route("/vm/{id}/stop", post(vm::stop))
        .route("/vm/{id}/shutdown", post(vm::shutdown))
        .route("/vm/{id}/reboot", post(vm::reboot))
        .route("/vm/{id}/destroy", post(vm::destroy))
        .route("/vm/{id}/set/cpu", post(vm::set_cpu))
        .route("/vm/{id}/set/memory", post(vm::set_memory))
        .route("/vm/{id}/set/disk", post(vm::set_disk))
        .route("/vm/{id}/set/node", post(vm::set_node))
        .route("/templates", get(templates::list).post(templates::build))
        .route("/templates/{id}", delete(templates::delete))
        .route("/templates/{id}/rebuild", post(templates::rebuild))
        .route("/sim/node/{node}/{state}", post(sim::set_node_state))
        .route(
            "/sim/faults",
            get(sim::faults)
                .post(sim::add_fault)
                .delete(sim::clear_faults),
        )
        .route("/sim/commands", get(sim::commands))
        .route("/sim/firewall/{state}", post(sim::set_firewall))
        .route("/sim/claim/{vmid}/{ip}", post(sim::claim))
        .route("/sim/vm/{vmid}/set", post(sim::set_behind))
}

/// Liveness.
#[utoipa::path(
    get,
    tag = "server",
    path = "/api/health",
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain"))
)]
async fn health() -> &'static str {
    "ok"
}

/// `GET /metrics`: for admins once sign-in is configured (the middleware
/// sees to it); open like every read without.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state.engine.metrics_text(),
    )
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "404 page not found")
}
