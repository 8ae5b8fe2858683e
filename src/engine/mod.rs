//! The provisioning engine: every rule of SPEC §2–§5 lives here once, behind
//! both faces (the `/api` handlers and the UI's server functions).

mod error;
pub mod list;

use std::sync::Arc;

use app::types::{ListFilter, VmList};

use crate::config::Config;
use crate::pve::Pve;
pub use error::EngineError;

pub struct Engine {
    pve: Arc<dyn Pve>,
    config: Arc<Config>,
}

impl Engine {
    pub fn new(pve: Arc<dyn Pve>, config: Arc<Config>) -> Engine {
        Engine { pve, config }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `GET /api/vm/list` (SPEC §5).
    pub async fn list(&self, filter: ListFilter) -> Result<VmList, EngineError> {
        let (vms, nodes) = tokio::try_join!(self.pve.cluster_vms(), self.pve.cluster_nodes())?;
        Ok(list::build(&vms, &nodes, &self.config, filter))
    }
}
