//! What the server functions need from the server, declared here so that the
//! app does not depend on the server crate; the server implements it over its
//! engine (the same calls `/api` makes) and provides it as context.

use std::net::IpAddr;
use std::sync::Arc;

use pvedeck_domain::account::{
    Allowance, AuditEntry, AuditFilter, Me, Principal, TokenInfo, UserChange, UserRow,
};
use pvedeck_domain::request::{InstallBody, SetNode, TemplateBody};
use pvedeck_domain::types::{
    Catalog, Job, JobDetail, ListFilter, NodeCharts, Overview, Resize, TemplatesPage, Timeframe,
    VmAction, VmDetail,
};

use crate::error::UiError;

/// Who asks: the TCP peer (`ALLOW_IPS`), the UI session, and who the
/// server found them to be (set by the server's middleware for every
/// request; `None` on a server without sign-in, or before signing in).
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub ip: Option<IpAddr>,
    /// The session id from the cookie.
    pub session: Option<String>,
    pub principal: Option<Principal>,
}

/// What a login leaves in the browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCookie {
    /// An opaque session id, not the token.
    pub id: String,
    pub max_age_secs: u64,
    /// `PUBLIC_URL` is https: the cookie goes over TLS only.
    pub secure: bool,
}

#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// Whether sign-in is configured (`API_TOKENS` or users): the UI then
    /// asks to sign in.
    fn needs_login(&self) -> bool;
    /// Opens a session for a valid token (the login form).
    async fn login(&self, caller: Caller, token: &str) -> Result<SessionCookie, UiError>;
    fn logout(&self, session: &str);
    /// What the caller may hold and holds (a user; `None` for admins).
    async fn allowance(&self, caller: Caller) -> Result<Option<Allowance>, UiError>;
    /// One page of the list from the cluster snapshot, with its age: the
    /// VMs the caller sees.
    async fn list(
        &self,
        caller: Caller,
        filter: ListFilter,
        page: usize,
    ) -> Result<Overview, UiError>;
    /// A node's charts over a timeframe (its page), drawn.
    async fn node_charts(&self, node: String, timeframe: Timeframe) -> Result<NodeCharts, UiError>;
    async fn catalog(&self) -> Result<Catalog, UiError>;
    async fn vm(&self, caller: Caller, vmid: u32) -> Result<VmDetail, UiError>;
    async fn jobs(&self, caller: Caller) -> Result<Vec<Job>, UiError>;
    async fn job(&self, caller: Caller, id: u64) -> Result<JobDetail, UiError>;

    // State-changing calls say who asks.
    async fn install(&self, caller: Caller, body: InstallBody) -> Result<u64, UiError>;
    /// A job id for the streamed actions (start, reboot).
    async fn action(
        &self,
        caller: Caller,
        vmid: u32,
        action: VmAction,
    ) -> Result<Option<u64>, UiError>;
    async fn resize(&self, caller: Caller, vmid: u32, change: Resize) -> Result<(), UiError>;
    async fn migrate(&self, caller: Caller, vmid: u32, body: SetNode) -> Result<u64, UiError>;

    async fn templates(&self) -> Result<TemplatesPage, UiError>;
    /// Build, rebuild: the job's id.
    async fn build_template(&self, caller: Caller, body: TemplateBody) -> Result<u64, UiError>;
    async fn rebuild_template(&self, caller: Caller, vmid: u32) -> Result<u64, UiError>;
    async fn delete_template(&self, caller: Caller, vmid: u32) -> Result<(), UiError>;

    // The people.
    /// Who the browser is, how one signs in here, their allowance.
    async fn me(&self, caller: Caller) -> Result<Me, UiError>;
    /// The caller's tokens (an admin: everyone's).
    async fn tokens(&self, caller: Caller) -> Result<Vec<TokenInfo>, UiError>;
    /// A new personal token, shown this once.
    async fn create_token(
        &self,
        caller: Caller,
        name: String,
        expires_days: Option<u32>,
    ) -> Result<String, UiError>;
    async fn revoke_token(&self, caller: Caller, id: String) -> Result<(), UiError>;
    /// Admins: every user with quota and holdings.
    async fn users(&self, caller: Caller) -> Result<Vec<UserRow>, UiError>;
    async fn update_user(&self, caller: Caller, change: UserChange) -> Result<(), UiError>;
    /// Admins: a VM to a user (`None`: back to the admins).
    async fn assign_vm(
        &self,
        caller: Caller,
        vmid: u32,
        user: Option<String>,
    ) -> Result<(), UiError>;
    /// Admins: the audit log, newest first, a page at a time.
    async fn audit(&self, caller: Caller, filter: AuditFilter) -> Result<Vec<AuditEntry>, UiError>;
}

#[derive(Clone)]
pub struct SharedBackend(pub Arc<dyn Backend>);
