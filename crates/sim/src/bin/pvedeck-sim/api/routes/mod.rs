//! The `/api2/json` routes, grouped as Proxmox's API modules are: cluster
//! and access, storage, qemu, the guest agent, tasks.

mod agent;
mod cluster;
mod qemu;
mod storage;
mod tasks;
mod upload;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use pvedeck_sim::qm::vm_on;

use super::Api;
use super::auth;
use super::error::ApiError;

pub fn router(api: Arc<Api>) -> Router {
    let q = "/api2/json/nodes/{node}/qemu/{vmid}";
    Router::new()
        .route("/api2/json/version", get(cluster::version))
        .route("/api2/json/cluster/resources", get(cluster::resources))
        .route("/api2/json/cluster/nextid", get(cluster::nextid))
        .route("/api2/json/access/permissions", get(cluster::permissions))
        .route("/api2/json/nodes", get(cluster::nodes))
        .route("/api2/json/nodes/{node}/status", get(cluster::node_status))
        .route("/api2/json/nodes/{node}/rrddata", get(cluster::rrddata))
        .route("/api2/json/nodes/{node}/storage", get(storage::list))
        .route(
            "/api2/json/nodes/{node}/storage/{storage}/content",
            get(storage::content),
        )
        .route(
            "/api2/json/nodes/{node}/storage/{storage}/download-url",
            post(storage::download_url),
        )
        .route(
            "/api2/json/nodes/{node}/storage/{storage}/upload",
            // The body is streamed to disk under its own limit
            // (`SIM_UPLOAD_MAX_BYTES`), not gathered under axum's 2 MB.
            post(upload::upload).layer(DefaultBodyLimit::disable()),
        )
        .route("/api2/json/nodes/{node}/qemu", post(qemu::create))
        .route(q, axum::routing::delete(qemu::destroy))
        .route(
            &format!("{q}/config"),
            get(qemu::config)
                .post(qemu::config_async)
                .put(qemu::config_sync),
        )
        .route(&format!("{q}/resize"), put(qemu::resize))
        .route(&format!("{q}/status/current"), get(qemu::status))
        .route(&format!("{q}/status/{{action}}"), post(qemu::power))
        .route(&format!("{q}/migrate"), post(qemu::migrate))
        .route(&format!("{q}/clone"), post(qemu::clone))
        .route(&format!("{q}/template"), post(qemu::template))
        .route(&format!("{q}/agent/ping"), post(agent::ping))
        .route(&format!("{q}/agent/exec"), post(agent::exec))
        .route(&format!("{q}/agent/exec-status"), get(agent::exec_status))
        .route(
            &format!("{q}/agent/network-get-interfaces"),
            get(agent::interfaces),
        )
        .route(
            "/api2/json/nodes/{node}/tasks/{upid}/status",
            get(tasks::status),
        )
        .route("/api2/json/nodes/{node}/tasks/{upid}/log", get(tasks::log))
        .fallback(not_implemented)
        .layer(axum::middleware::from_fn_with_state(
            api.clone(),
            authenticate,
        ))
        .with_state(api)
}

/// Every request carries the token (pveproxy checks it before routing).
async fn authenticate(State(api): State<Arc<Api>>, req: Request, next: Next) -> Response {
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match auth::check(header, &api.secret) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

async fn not_implemented(req: Request) -> ApiError {
    let path = req.uri().path().trim_start_matches("/api2/json");
    ApiError::new(
        501,
        format!("Method '{} {path}' not implemented", req.method()),
    )
}

/// A `{vmid}` path segment, checked as Proxmox's `pve-vmid`.
fn vmid(raw: &str) -> Result<u32, ApiError> {
    let n: u32 = raw.parse().map_err(|_| {
        ApiError::param(
            "vmid",
            format!("type check ('integer') failed - got '{raw}'"),
        )
    })?;
    if n < 100 {
        return Err(ApiError::param(
            "vmid",
            "value must have a minimum value of 100",
        ));
    }
    Ok(n)
}

impl Api {
    /// pveproxy proxies `/nodes/{node}/…` to that node: an unknown name
    /// does not resolve, an offline node does not answer.
    fn node_up(&self, node: &str) -> Result<(), ApiError> {
        let online = self.sim.read(|s| s.nodes.get(node).map(|n| n.online));
        match online {
            None => Err(ApiError::new(
                500,
                format!(
                    "hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
                ),
            )),
            Some(false) => Err(ApiError::new(595, "No route to host")),
            Some(true) => Ok(()),
        }
    }

    /// What every VM call checks before its worker starts: the node
    /// answers and the VM's config is there (Proxmox's `load_config`).
    fn vm_here(&self, node: &str, vmid: u32) -> Result<(), ApiError> {
        self.node_up(node)?;
        self.sim
            .read(|s| vm_on(s, node, vmid, "api", true).map(drop))
            .map_err(ApiError::from)
    }
}
