//! The `/api2/json` routes, grouped as Proxmox's API modules are: cluster
//! and access, storage, qemu, the guest agent, tasks.

mod agent;
mod cluster;
mod console;
mod firewall;
mod qemu;
mod storage;
mod tasks;
mod upload;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use pvedeck_sim::qm::vm_on;

use super::Api;
use super::auth;
use super::error::ApiError;
use super::params::Params;

pub use console::Consoles;

pub fn router(api: Arc<Api>) -> Router {
    let q = "/api2/json/nodes/{node}/qemu/{vmid}";
    Router::new()
        .route("/api2/json/version", get(cluster::version))
        .route("/api2/json/cluster/resources", get(cluster::resources))
        .route("/api2/json/cluster/nextid", get(cluster::nextid))
        .route("/api2/json/cluster/options", get(cluster::options))
        .route("/api2/json/access/permissions", get(cluster::permissions))
        .route(
            "/api2/json/cluster/firewall/options",
            get(firewall::cluster_options).put(firewall::set_cluster_options),
        )
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
        .route(
            &format!("{q}/firewall/options"),
            get(firewall::vm_options).put(firewall::set_vm_options),
        )
        .route(
            &format!("{q}/firewall/ipset"),
            get(firewall::ipsets).post(firewall::create_ipset),
        )
        .route(
            &format!("{q}/firewall/ipset/{{name}}"),
            get(firewall::ipset)
                .post(firewall::add_ip)
                .delete(firewall::delete_ipset),
        )
        .route(
            &format!("{q}/firewall/ipset/{{name}}/{{cidr}}"),
            axum::routing::delete(firewall::remove_ip),
        )
        .route(&format!("{q}/vncproxy"), post(console::vncproxy))
        .route(&format!("{q}/termproxy"), post(console::termproxy))
        .route(&format!("{q}/vncwebsocket"), get(console::vncwebsocket))
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
        .route(
            "/api2/json/nodes/{node}/tasks/{upid}",
            axum::routing::delete(tasks::stop),
        )
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

/// The VM a `/nodes/{node}/qemu/{vmid}/…` route is about: the node as
/// the path names it, the vmid checked as `pve-vmid`. Extracting it is the
/// first check of every VM call; [`Vm::open`] is the rest of the prologue.
pub struct Vm {
    pub node: String,
    pub id: u32,
}

/// The path's segments as they came.
#[derive(serde::Deserialize)]
struct VmSegments {
    node: String,
    vmid: String,
}

async fn vm_segments(parts: &mut Parts, api: &Arc<Api>) -> Result<VmSegments, ApiError> {
    let Path(segments) = Path::<VmSegments>::from_request_parts(parts, api)
        .await
        .map_err(|e| ApiError::new(500, e.body_text()))?;
    Ok(segments)
}

impl FromRequestParts<Arc<Api>> for Vm {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Api>) -> Result<Vm, ApiError> {
        let segments = vm_segments(parts, api).await?;
        Ok(Vm {
            id: vmid(&segments.vmid)?,
            node: segments.node,
        })
    }
}

impl Vm {
    /// Where the VM's privileges are granted.
    pub fn acl(&self) -> String {
        format!("/vms/{}", self.id)
    }

    /// The rest of a VM call's prologue, in pveproxy's order: the token
    /// holds one of `privileges` on the VM (a 403 names the first), then
    /// the node answers and holds the VM.
    pub fn open(&self, api: &Api, privileges: &[&str]) -> Result<(), ApiError> {
        api.privs.require_any(&self.acl(), privileges)?;
        self.found(api)
    }

    /// The node answers and holds the VM (Proxmox's `load_config`).
    pub fn found(&self, api: &Api) -> Result<(), ApiError> {
        api.node_up(&self.node)?;
        let (node, id) = (&self.node, self.id);
        api.sim
            .read(|s| vm_on(s, node, id, "api", true).map(drop))
            .map_err(ApiError::from)
    }
}

/// A VM call with parameters: the body is read first (its refusals come
/// first, as pveproxy reads a request whole), then the vmid is checked.
pub struct VmParams(pub Vm, pub Params);

impl FromRequest<Arc<Api>> for VmParams {
    type Rejection = ApiError;

    async fn from_request(req: Request, api: &Arc<Api>) -> Result<VmParams, ApiError> {
        let (mut parts, body) = req.into_parts();
        let segments = vm_segments(&mut parts, api).await?;
        let params = Params::from_request(Request::from_parts(parts, body), api).await?;
        let vm = Vm {
            id: vmid(&segments.vmid)?,
            node: segments.node,
        };
        Ok(VmParams(vm, params))
    }
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
}
