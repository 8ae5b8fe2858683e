//! What the server functions need from the server, declared here so that the
//! app does not depend on the server crate; the server implements it over its
//! engine and provides it as context.

use std::sync::Arc;

use crate::types::{ListFilter, VmList};

#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    async fn list(&self, filter: ListFilter) -> Result<VmList, String>;
}

#[derive(Clone)]
pub struct SharedBackend(pub Arc<dyn Backend>);
