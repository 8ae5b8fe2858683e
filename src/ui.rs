//! The engine as the UI's server functions see it (`app::backend::Backend`):
//! the same engine calls as the `/api` handlers, the same checks, the same
//! status mapping.

use std::sync::Arc;

use app::backend::{Backend, Caller};
use app::types::{
    Catalog, InstallForm, Job, JobDetail, ListFilter, Resize, UiError, VmAction, VmDetail, VmList,
};
use serde_json::{Value, json};

use crate::api::status_of;
use crate::engine::{Engine, EngineError};

pub struct UiBackend(pub Arc<Engine>);

fn ui(e: EngineError) -> UiError {
    let (status, message) = status_of(&e);
    UiError {
        status: status.as_u16(),
        message,
    }
}

/// A form value as the API's JSON would carry it: a number when it is one.
fn number_or_text(value: &str) -> Value {
    match value.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(value.trim()),
    }
}

impl UiBackend {
    fn authorize(&self, caller: &Caller) -> Result<(), UiError> {
        self.0
            .authorize(caller.ip, caller.token.as_deref())
            .map_err(ui)
    }
}

#[async_trait::async_trait]
impl Backend for UiBackend {
    fn needs_login(&self) -> bool {
        self.0.needs_token()
    }

    fn check_token(&self, token: &str) -> Result<(), UiError> {
        // Address rules do not apply to checking a token.
        self.0.authorize(None, Some(token)).or_else(|e| match e {
            EngineError::Forbidden(_) => Ok(()),
            other => Err(ui(other)),
        })
    }

    async fn list(&self) -> Result<VmList, UiError> {
        self.0.list(ListFilter::All).await.map_err(ui)
    }

    async fn catalog(&self) -> Result<Catalog, UiError> {
        self.0.catalog().await.map_err(ui)
    }

    async fn vm(&self, vmid: u32) -> Result<VmDetail, UiError> {
        self.0.vm_detail(vmid).await.map_err(ui)
    }

    async fn jobs(&self) -> Result<Vec<Job>, UiError> {
        self.0.jobs().list(200).map_err(|e| ui(e.into()))
    }

    async fn job(&self, id: u64) -> Result<JobDetail, UiError> {
        let jobs = self.0.jobs();
        let job = jobs
            .job(id)
            .map_err(|e| ui(e.into()))?
            .ok_or_else(|| ui(EngineError::NotFound(format!("job {id} not found"))))?;
        let events = jobs.events(id, 0).map_err(|e| ui(e.into()))?;
        Ok(JobDetail { job, events })
    }

    async fn install(&self, caller: Caller, form: InstallForm) -> Result<u64, UiError> {
        self.authorize(&caller)?;
        let body = serde_json::to_vec(&form).map_err(|e| ui(EngineError::bad(e.to_string())))?;
        self.0.install(&body).await.map_err(ui)
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

    async fn resize(
        &self,
        caller: Caller,
        vmid: u32,
        what: Resize,
        value: String,
    ) -> Result<(), UiError> {
        self.authorize(&caller)?;
        let value = number_or_text(&value);
        let (key, engine) = (
            match what {
                Resize::Cpu => "cpu",
                Resize::Memory => "memory",
                Resize::Disk => "disk",
            },
            &self.0,
        );
        let body = json!({ key: value }).to_string();
        let result = match what {
            Resize::Cpu => engine.set_cpu(vmid, body.as_bytes()).await,
            Resize::Memory => engine.set_memory(vmid, body.as_bytes()).await,
            Resize::Disk => engine.set_disk(vmid, body.as_bytes()).await,
        };
        result.map_err(ui)
    }

    async fn migrate(&self, caller: Caller, vmid: u32, node: String) -> Result<u64, UiError> {
        self.authorize(&caller)?;
        let body = json!({ "node": node }).to_string();
        self.0.migrate(vmid, body.as_bytes()).await.map_err(ui)
    }
}
