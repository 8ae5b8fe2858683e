//! Server functions: thin calls into the server's engine (see `backend`).
//! Their URLs live under `/fn/` so that `/api/` stays go-pve-qemu's.
//!
//! A refusal of the engine (400, 403, 409…) is an answer, not a failed
//! request: it comes back inside `Ok`, so that the browser does not log a
//! failed request for a message the page shows. Call `.and_then(|a| a)`.

use leptos::prelude::*;
use pvedeck_domain::account::{AuditEntry, AuditFilter, Me, TokenInfo, UserChange, UserRow};
use pvedeck_domain::request::{InstallBody, SetNode, TemplateBody};
use pvedeck_domain::types::{
    Catalog, Job, JobDetail, ListFilter, NodeCharts, Overview, Resize, TemplatesPage, Timeframe,
    VmAction, VmDetail,
};

use crate::codec::Json;
use crate::error::UiError;

/// What the engine answered: the value, or its refusal.
pub type Answer<T> = Result<T, UiError>;

/// The cookie that holds a UI session's token (when `API_TOKENS` is set).
pub const SESSION_COOKIE: &str = "pvedeck_session";

#[cfg(feature = "ssr")]
mod server {
    use std::net::SocketAddr;

    use axum::Extension;
    use axum::extract::ConnectInfo;
    use leptos::prelude::*;

    use crate::backend::{Caller, SharedBackend};
    use crate::error::UiError;

    pub fn backend() -> Result<SharedBackend, UiError> {
        use_context::<SharedBackend>().ok_or_else(|| UiError {
            status: 500,
            message: "the server did not provide its engine".to_string(),
        })
    }

    /// Who asks, as the server's middleware found (its address alone
    /// when no middleware ran).
    pub async fn caller() -> Caller {
        if let Ok(Extension(caller)) = leptos_axum::extract::<Extension<Caller>>().await {
            return caller;
        }
        let ip = leptos_axum::extract::<ConnectInfo<SocketAddr>>()
            .await
            .ok()
            .map(|ConnectInfo(addr)| addr.ip());
        Caller {
            ip,
            ..Caller::default()
        }
    }

    /// A `Set-Cookie` on the server function's response (session ids are
    /// hex: always a valid header).
    pub fn set_cookie(cookie: &str) {
        let Ok(value) = axum::http::HeaderValue::from_str(cookie) else {
            return;
        };
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.insert_header(axum::http::header::SET_COOKIE, value);
        }
    }
}

/// The cluster overview: every VM and every node, read from the server's
/// snapshot of the cluster (no Proxmox call per open page).
#[server(prefix = "/fn", endpoint = "overview", output = Json)]
pub async fn get_overview(filter: ListFilter, page: usize) -> Result<Answer<Overview>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.list(caller, filter, page).await)
}

/// A node's charts over a timeframe, drawn on the server.
#[server(prefix = "/fn", endpoint = "node_charts", output = Json)]
pub async fn get_node_charts(
    node: String,
    timeframe: Timeframe,
) -> Result<Answer<NodeCharts>, UiError> {
    Ok(server::backend()?.0.node_charts(node, timeframe).await)
}

/// The OS table, the limits and the nodes, for the create form.
#[server(prefix = "/fn", endpoint = "catalog", output = Json)]
pub async fn get_catalog() -> Result<Answer<Catalog>, UiError> {
    Ok(server::backend()?.0.catalog().await)
}

#[server(prefix = "/fn", endpoint = "vm", output = Json)]
pub async fn get_vm(vmid: u32) -> Result<Answer<VmDetail>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.vm(caller, vmid).await)
}

#[server(prefix = "/fn", endpoint = "jobs", output = Json)]
pub async fn get_jobs() -> Result<Answer<Vec<Job>>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.jobs(caller).await)
}

#[server(prefix = "/fn", endpoint = "job", output = Json)]
pub async fn get_job(id: u64) -> Result<Answer<JobDetail>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.job(caller, id).await)
}

/// Starts an install; returns its job id.
#[server(prefix = "/fn", endpoint = "install", input = Json, output = Json)]
pub async fn start_install(body: InstallBody) -> Result<Answer<u64>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.install(caller, body).await)
}

/// A power action or destroy; start and reboot return their job id.
#[server(prefix = "/fn", endpoint = "action", input = Json, output = Json)]
pub async fn act_on_vm(vmid: u32, action: VmAction) -> Result<Answer<Option<u64>>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.action(caller, vmid, action).await)
}

/// `set/cpu`, `set/memory` or `set/disk`, with the same body.
#[server(prefix = "/fn", endpoint = "resize", input = Json, output = Json)]
pub async fn resize_vm(vmid: u32, change: Resize) -> Result<Answer<()>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.resize(caller, vmid, change).await)
}

/// Moves a VM to another node; returns the migration's job id.
#[server(prefix = "/fn", endpoint = "migrate", input = Json, output = Json)]
pub async fn migrate_vm(vmid: u32, body: SetNode) -> Result<Answer<u64>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.migrate(caller, vmid, body).await)
}

/// The golden templates, and the server's clock for their age.
#[server(prefix = "/fn", endpoint = "templates", output = Json)]
pub async fn get_templates() -> Result<Answer<TemplatesPage>, UiError> {
    Ok(server::backend()?.0.templates().await)
}

/// Starts a template build; returns its job id.
#[server(prefix = "/fn", endpoint = "build-template", input = Json, output = Json)]
pub async fn build_template(body: TemplateBody) -> Result<Answer<u64>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.build_template(caller, body).await)
}

/// Builds a template anew, retiring the old one; returns the job id.
#[server(prefix = "/fn", endpoint = "rebuild-template", input = Json, output = Json)]
pub async fn rebuild_template(vmid: u32) -> Result<Answer<u64>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.rebuild_template(caller, vmid).await)
}

#[server(prefix = "/fn", endpoint = "delete-template", input = Json, output = Json)]
pub async fn delete_template(vmid: u32) -> Result<Answer<()>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.delete_template(caller, vmid).await)
}

/// Whether this server wants a login before changes (`API_TOKENS`).
#[server(prefix = "/fn", endpoint = "needs-login", output = Json)]
pub async fn needs_login() -> Result<bool, UiError> {
    Ok(server::backend()?.0.needs_login())
}

/// Checks a token and opens a session: its id (not the token) goes in an
/// HttpOnly, SameSite=Strict cookie that ends with the session.
#[server(prefix = "/fn", endpoint = "login", input = Json, output = Json)]
pub async fn login(token: String) -> Result<Answer<()>, UiError> {
    let caller = server::caller().await;
    let session = match server::backend()?.0.login(caller, &token).await {
        Ok(session) => session,
        Err(refused) => return Ok(Err(refused)),
    };
    let secure = if session.secure { "; Secure" } else { "" };
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        session.id, session.max_age_secs
    );
    server::set_cookie(&cookie);
    Ok(Ok(()))
}

/// Ends this browser's session.
#[server(prefix = "/fn", endpoint = "logout", input = Json, output = Json)]
pub async fn logout() -> Result<Answer<()>, UiError> {
    if let Some(session) = server::caller().await.session {
        server::backend()?.0.logout(&session);
    }
    server::set_cookie(&format!(
        "{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
    ));
    Ok(Ok(()))
}

/// Who this browser is signed in as, how one signs in here, and a user's
/// quota and holdings.
#[server(prefix = "/fn", endpoint = "me", output = Json)]
pub async fn get_me() -> Result<Answer<Me>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.me(caller).await)
}

/// The caller's personal tokens (an admin: everyone's).
#[server(prefix = "/fn", endpoint = "tokens", output = Json)]
pub async fn get_tokens() -> Result<Answer<Vec<TokenInfo>>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.tokens(caller).await)
}

/// A new personal token: shown this once, kept only as a hash.
#[server(prefix = "/fn", endpoint = "create-token", input = Json, output = Json)]
pub async fn create_token(
    name: String,
    expires_days: Option<u32>,
) -> Result<Answer<String>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?
        .0
        .create_token(caller, name, expires_days)
        .await)
}

#[server(prefix = "/fn", endpoint = "revoke-token", input = Json, output = Json)]
pub async fn revoke_token(id: String) -> Result<Answer<()>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.revoke_token(caller, id).await)
}

/// Admins: the users, their quotas and holdings.
#[server(prefix = "/fn", endpoint = "users", output = Json)]
pub async fn get_users() -> Result<Answer<Vec<UserRow>>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.users(caller).await)
}

#[server(prefix = "/fn", endpoint = "update-user", input = Json, output = Json)]
pub async fn update_user(change: UserChange) -> Result<Answer<()>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.update_user(caller, change).await)
}

/// Admins: gives a VM to a user (`None`: back to the admins).
#[server(prefix = "/fn", endpoint = "assign", input = Json, output = Json)]
pub async fn assign_vm(vmid: u32, user: Option<String>) -> Result<Answer<()>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.assign_vm(caller, vmid, user).await)
}

/// Admins: the audit log, newest first.
#[server(prefix = "/fn", endpoint = "audit", input = Json, output = Json)]
pub async fn get_audit(filter: AuditFilter) -> Result<Answer<Vec<AuditEntry>>, UiError> {
    let caller = server::caller().await;
    Ok(server::backend()?.0.audit(caller, filter).await)
}
