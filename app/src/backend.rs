//! What the server functions need from the server, declared here so that the
//! app does not depend on the server crate; the server implements it over its
//! engine (the same calls `/api` makes) and provides it as context.

use std::net::IpAddr;
use std::sync::Arc;

use pvedeck_domain::request::{InstallBody, SetNode, TemplateBody};
use pvedeck_domain::types::{
    Catalog, Job, JobDetail, ListFilter, NodeCharts, Overview, Resize, TemplatesPage, Timeframe,
    VmAction, VmDetail,
};

use crate::error::UiError;

/// Who asks for a change: the TCP peer (`ALLOW_IPS`) and the UI session
/// (`API_TOKENS`).
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub ip: Option<IpAddr>,
    /// The session id from the cookie.
    pub session: Option<String>,
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
    /// Whether changes need a token (`API_TOKENS` is set): the UI then asks
    /// to log in.
    fn needs_login(&self) -> bool;
    /// Opens a session for a valid token (the login form).
    fn login(&self, caller: Caller, token: &str) -> Result<SessionCookie, UiError>;
    fn logout(&self, session: &str);
    /// One page of the list from the cluster snapshot, with its age.
    async fn list(&self, filter: ListFilter, page: usize) -> Result<Overview, UiError>;
    /// A node's charts over a timeframe (its page), drawn.
    async fn node_charts(&self, node: String, timeframe: Timeframe) -> Result<NodeCharts, UiError>;
    async fn catalog(&self) -> Result<Catalog, UiError>;
    async fn vm(&self, vmid: u32) -> Result<VmDetail, UiError>;
    async fn jobs(&self) -> Result<Vec<Job>, UiError>;
    async fn job(&self, id: u64) -> Result<JobDetail, UiError>;

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
}

#[derive(Clone)]
pub struct SharedBackend(pub Arc<dyn Backend>);
