//! The engine as the UI's server functions see it (`app::backend::Backend`):
//! the same wire types as `/api`, the same checks, the same engine calls,
//! the same status for a refusal.

use std::sync::Arc;

use app::backend::{Backend, Caller, SessionCookie};
use app::error::UiError;
use pvedeck_domain::request::{Body, InstallBody, SetNode, TemplateBody};
use pvedeck_domain::types::{
    Catalog, Job, JobDetail, ListFilter, NodeCharts, OVERVIEW_PAGE, Overview, Resize,
    TemplatesPage, Timeframe, VmAction, VmDetail, VmList,
};

use crate::api::status_of;
use crate::engine::{Credential, Engine, EngineError};

pub struct UiBackend(pub Arc<Engine>);

fn ui(e: EngineError) -> UiError {
    let (status, message) = status_of(&e);
    UiError {
        status: status.as_u16(),
        message,
    }
}

impl UiBackend {
    fn authorize(&self, caller: &Caller) -> Result<(), UiError> {
        self.0
            .authorize_as(caller.ip, Credential::Session(caller.session.as_deref()))
            .map_err(ui)
    }

    /// A body checked as `/api` checks it.
    fn check<B: Body>(&self, body: B) -> Result<B::Checked, UiError> {
        body.check(self.0.limits())
            .map_err(|refused| ui(refused.into()))
    }
}

#[async_trait::async_trait]
impl Backend for UiBackend {
    fn needs_login(&self) -> bool {
        self.0.needs_token()
    }

    fn login(&self, caller: Caller, token: &str) -> Result<SessionCookie, UiError> {
        let id = self.0.login(caller.ip, token).map_err(ui)?;
        Ok(SessionCookie {
            id,
            max_age_secs: self.0.session_ttl().as_secs(),
            secure: self.0.secure_cookies(),
        })
    }

    fn logout(&self, session: &str) {
        self.0.logout(session);
    }

    async fn list(&self, filter: ListFilter, page: usize) -> Result<Overview, UiError> {
        let listing = self.0.list(filter).await.map_err(ui)?;
        // The node figures are over all VMs, whatever the table shows.
        let all = match filter {
            ListFilter::All => listing.listed.clone(),
            _ => self.0.list(ListFilter::All).await.map_err(ui)?.listed,
        };
        let vms = &listing.listed.list.list;
        let pages = vms.len().div_ceil(OVERVIEW_PAGE).max(1);
        let page = page.min(pages - 1);
        Ok(Overview {
            list: VmList {
                count: vms.len(),
                list: vms
                    .iter()
                    .skip(page * OVERVIEW_PAGE)
                    .take(OVERVIEW_PAGE)
                    .cloned()
                    .collect(),
                cluster: all.list.cluster.clone(),
            },
            page,
            pages,
            age_ms: listing.age_ms,
            stale: listing.stale,
            failure: listing.failure,
            sparks: self
                .0
                .node_hours()
                .await
                .iter()
                .map(|hour| app::charts::sparks(hour))
                .collect(),
        })
    }

    async fn node_charts(&self, node: String, timeframe: Timeframe) -> Result<NodeCharts, UiError> {
        let history = self.0.node_history(&node, timeframe).await.map_err(ui)?;
        Ok(app::charts::draw(&history))
    }

    async fn catalog(&self) -> Result<Catalog, UiError> {
        self.0.catalog().await.map_err(ui)
    }

    async fn vm(&self, vmid: u32) -> Result<VmDetail, UiError> {
        self.0.vm_detail(vmid).await.map_err(ui)
    }

    async fn jobs(&self) -> Result<Vec<Job>, UiError> {
        self.0.job_list(200).await.map_err(ui)
    }

    async fn job(&self, id: u64) -> Result<JobDetail, UiError> {
        self.0.job_detail(id).await.map_err(ui)
    }

    async fn install(&self, caller: Caller, body: InstallBody) -> Result<u64, UiError> {
        self.authorize(&caller)?;
        let request = self.check(body)?;
        self.0.install(request).await.map_err(ui)
    }

    async fn action(
        &self,
        caller: Caller,
        vmid: u32,
        action: VmAction,
    ) -> Result<Option<u64>, UiError> {
        self.authorize(&caller)?;
        let engine = &self.0;
        let result = match action {
            VmAction::Start => engine.start(vmid).await.map(Some),
            VmAction::Reboot => engine.reboot(vmid).await.map(Some),
            VmAction::Stop => engine.stop(vmid).await.map(|()| None),
            VmAction::Shutdown => engine.shutdown(vmid).await.map(|()| None),
            VmAction::Destroy => engine.destroy(vmid).await.map(|()| None),
        };
        result.map_err(ui)
    }

    async fn resize(&self, caller: Caller, vmid: u32, change: Resize) -> Result<(), UiError> {
        self.authorize(&caller)?;
        let engine = &self.0;
        let result = match change {
            Resize::Cpu(body) => engine.set_cpu(vmid, self.check(body)?).await,
            Resize::Memory(body) => engine.set_memory(vmid, self.check(body)?).await,
            Resize::Disk(body) => engine.grow_disk(vmid, self.check(body)?).await,
        };
        result.map_err(ui)
    }

    async fn migrate(&self, caller: Caller, vmid: u32, body: SetNode) -> Result<u64, UiError> {
        self.authorize(&caller)?;
        let node = self.check(body)?;
        self.0.migrate(vmid, node).await.map_err(ui)
    }

    async fn templates(&self) -> Result<TemplatesPage, UiError> {
        Ok(TemplatesPage {
            now: pvedeck_support::clock::now_ms(),
            templates: self.0.templates().await.map_err(ui)?,
        })
    }

    async fn build_template(&self, caller: Caller, body: TemplateBody) -> Result<u64, UiError> {
        self.authorize(&caller)?;
        let release = self.check(body)?;
        self.0.build_template(release).await.map_err(ui)
    }

    async fn rebuild_template(&self, caller: Caller, vmid: u32) -> Result<u64, UiError> {
        self.authorize(&caller)?;
        self.0.rebuild_template(vmid).await.map_err(ui)
    }

    async fn delete_template(&self, caller: Caller, vmid: u32) -> Result<(), UiError> {
        self.authorize(&caller)?;
        self.0.delete_template(vmid).await.map_err(ui)
    }
}
