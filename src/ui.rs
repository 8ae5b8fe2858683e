//! The engine as the UI's server functions see it (`app::backend::Backend`):
//! the same wire types as `/api`, the same checks, the same engine calls,
//! the same status for a refusal.

use std::sync::Arc;

use app::backend::{Backend, Caller, SessionCookie};
use app::error::UiError;
use pvedeck_domain::account::{
    Allowance, AuditEntry, AuditFilter, Me, TokenInfo, UserChange, UserRow,
};
use pvedeck_domain::request::{Body, InstallBody, SetNode, TemplateBody};
use pvedeck_domain::types::{
    Catalog, Job, JobDetail, ListFilter, NodeCharts, OVERVIEW_PAGE, Overview, Resize,
    TemplatesPage, Timeframe, VmAction, VmDetail, VmList,
};

use crate::api::status_of;
use crate::engine::{Actor, Clusters, Command, Engine, EngineError, TemplateCommand};

/// Every cluster's engines: the overview and installs are all clusters',
/// sign-in, people and the VM pages the default one's.
pub struct UiBackend(pub Arc<Clusters>);

fn ui(e: EngineError) -> UiError {
    let (status, message) = status_of(&e);
    UiError {
        status: status.as_u16(),
        message,
    }
}

fn actor(caller: &Caller) -> Actor {
    Actor {
        principal: caller.principal.clone(),
        client: caller.ip,
    }
}

impl UiBackend {
    /// The default cluster's engine.
    fn engine(&self) -> &Arc<Engine> {
        self.0.first()
    }

    /// Who may change anything, as `/api` rules it: the actor.
    fn authorize(&self, caller: &Caller) -> Result<Actor, UiError> {
        let actor = actor(caller);
        self.engine().authorize_change(&actor).map_err(ui)?;
        Ok(actor)
    }

    /// A body checked as `/api` checks it.
    fn check<B: Body>(&self, body: B) -> Result<B::Checked, UiError> {
        body.check(self.engine().limits())
            .map_err(|refused| ui(refused.into()))
    }
}

impl UiBackend {
    async fn template_job(&self, actor: &Actor, command: TemplateCommand) -> Result<u64, UiError> {
        self.engine()
            .template_command(actor, command)
            .await
            .map_err(ui)?
            .ok_or_else(|| {
                ui(EngineError::Internal(
                    "a template build without a job".into(),
                ))
            })
    }
}

#[async_trait::async_trait]
impl Backend for UiBackend {
    fn needs_login(&self) -> bool {
        self.engine().sign_in_configured()
    }

    async fn login(&self, caller: Caller, token: &str) -> Result<SessionCookie, UiError> {
        let id = self.engine().login(caller.ip, token).await.map_err(ui)?;
        Ok(SessionCookie {
            id,
            max_age_secs: self.engine().session_ttl().as_secs(),
            secure: self.engine().secure_cookies(),
        })
    }

    fn logout(&self, session: &str) {
        self.engine().logout(session);
    }

    async fn allowance(&self, caller: Caller) -> Result<Option<Allowance>, UiError> {
        self.engine().allowance(&actor(&caller)).await.map_err(ui)
    }

    async fn list(
        &self,
        caller: Caller,
        filter: ListFilter,
        page: usize,
    ) -> Result<Overview, UiError> {
        let actor = actor(&caller);
        let listing = self.0.list_for(&actor, filter).await.map_err(ui)?;
        // The node figures are over all VMs, whatever the table shows.
        let all = match filter {
            ListFilter::All => listing.listed.clone(),
            _ => {
                self.0
                    .list_for(&actor, ListFilter::All)
                    .await
                    .map_err(ui)?
                    .listed
            }
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
                .engine()
                .node_hours()
                .await
                .iter()
                .map(|hour| app::charts::sparks(hour))
                .collect(),
            clusters: match self.0.all().len() {
                1 => Vec::new(),
                _ => self.0.states(),
            },
        })
    }

    async fn node_charts(&self, node: String, timeframe: Timeframe) -> Result<NodeCharts, UiError> {
        let history = self
            .engine()
            .node_history(&node, timeframe)
            .await
            .map_err(ui)?;
        Ok(app::charts::draw(&history))
    }

    async fn catalog(&self) -> Result<Catalog, UiError> {
        self.engine().catalog().await.map_err(ui)
    }

    async fn vm(&self, caller: Caller, vmid: u32) -> Result<VmDetail, UiError> {
        self.engine()
            .vm_detail_for(&actor(&caller), vmid)
            .await
            .map_err(ui)
    }

    async fn jobs(&self, caller: Caller) -> Result<Vec<Job>, UiError> {
        self.engine()
            .jobs_for(&actor(&caller), 200)
            .await
            .map_err(ui)
    }

    async fn job(&self, caller: Caller, id: u64) -> Result<JobDetail, UiError> {
        self.engine().job_for(&actor(&caller), id).await.map_err(ui)
    }

    async fn install(&self, caller: Caller, body: InstallBody) -> Result<u64, UiError> {
        let actor = self.authorize(&caller)?;
        let request = self.check(body)?;
        let (_, job) = self.0.install_as(&actor, request).await.map_err(ui)?;
        Ok(job)
    }

    async fn action(
        &self,
        caller: Caller,
        vmid: u32,
        action: VmAction,
    ) -> Result<Option<u64>, UiError> {
        let actor = self.authorize(&caller)?;
        let command = match action {
            VmAction::Start => Command::Start,
            VmAction::Reboot => Command::Reboot,
            VmAction::Stop => Command::Stop,
            VmAction::Shutdown => Command::Shutdown,
            VmAction::Destroy => Command::Destroy,
        };
        self.engine()
            .command(&actor, vmid, command)
            .await
            .map_err(ui)
    }

    async fn resize(&self, caller: Caller, vmid: u32, change: Resize) -> Result<(), UiError> {
        let actor = self.authorize(&caller)?;
        let command = match change {
            Resize::Cpu(body) => Command::SetCpu(self.check(body)?),
            Resize::Memory(body) => Command::SetMemory(self.check(body)?),
            Resize::Disk(body) => Command::GrowDisk(self.check(body)?),
        };
        self.engine()
            .command(&actor, vmid, command)
            .await
            .map(|_| ())
            .map_err(ui)
    }

    async fn migrate(&self, caller: Caller, vmid: u32, body: SetNode) -> Result<u64, UiError> {
        let actor = self.authorize(&caller)?;
        let node = self.check(body)?;
        self.engine()
            .command(&actor, vmid, Command::Migrate(node))
            .await
            .map_err(ui)?
            .ok_or_else(|| {
                ui(EngineError::Internal(
                    "a migration without a job".to_string(),
                ))
            })
    }

    async fn templates(&self) -> Result<TemplatesPage, UiError> {
        Ok(TemplatesPage {
            now: pvedeck_support::clock::now_ms(),
            templates: self.engine().templates().await.map_err(ui)?,
        })
    }

    async fn build_template(&self, caller: Caller, body: TemplateBody) -> Result<u64, UiError> {
        let actor = self.authorize(&caller)?;
        let release = self.check(body)?;
        self.template_job(&actor, TemplateCommand::Build(release))
            .await
    }

    async fn rebuild_template(&self, caller: Caller, vmid: u32) -> Result<u64, UiError> {
        let actor = self.authorize(&caller)?;
        self.template_job(&actor, TemplateCommand::Rebuild(vmid))
            .await
    }

    async fn delete_template(&self, caller: Caller, vmid: u32) -> Result<(), UiError> {
        let actor = self.authorize(&caller)?;
        self.engine()
            .template_command(&actor, TemplateCommand::Delete(vmid))
            .await
            .map(|_| ())
            .map_err(ui)
    }

    async fn me(&self, caller: Caller) -> Result<Me, UiError> {
        self.engine().me(&actor(&caller)).await.map_err(ui)
    }

    async fn tokens(&self, caller: Caller) -> Result<Vec<TokenInfo>, UiError> {
        Ok(self.engine().tokens_of(&actor(&caller)))
    }

    async fn create_token(
        &self,
        caller: Caller,
        name: String,
        expires_days: Option<u32>,
    ) -> Result<String, UiError> {
        let actor = self.authorize(&caller)?;
        self.engine()
            .create_token_as(&actor, name, expires_days)
            .await
            .map_err(ui)
    }

    async fn revoke_token(&self, caller: Caller, id: String) -> Result<(), UiError> {
        let actor = self.authorize(&caller)?;
        self.engine().revoke_token_as(&actor, id).await.map_err(ui)
    }

    async fn users(&self, caller: Caller) -> Result<Vec<UserRow>, UiError> {
        self.engine().users_as(&actor(&caller)).await.map_err(ui)
    }

    async fn update_user(&self, caller: Caller, change: UserChange) -> Result<(), UiError> {
        let actor = self.authorize(&caller)?;
        self.engine()
            .update_user_as(&actor, change)
            .await
            .map_err(ui)
    }

    async fn assign_vm(
        &self,
        caller: Caller,
        vmid: u32,
        user: Option<String>,
    ) -> Result<(), UiError> {
        let actor = self.authorize(&caller)?;
        self.engine()
            .assign_as(&actor, vmid, user)
            .await
            .map_err(ui)
    }

    async fn audit(&self, caller: Caller, filter: AuditFilter) -> Result<Vec<AuditEntry>, UiError> {
        let query = crate::store::AuditQuery {
            user: filter.user.filter(|u| !u.trim().is_empty()),
            vmid: filter.vmid,
            before: filter.before,
            limit: 100,
            ..Default::default()
        };
        self.engine()
            .audit_log(&actor(&caller), query)
            .await
            .map_err(ui)
    }
}
