//! The engine as the UI's server functions see it (`app::backend::Backend`).

use app::backend::Backend;
use app::types::{ListFilter, VmList};

use crate::engine::Engine;

#[async_trait::async_trait]
impl Backend for Engine {
    async fn list(&self, filter: ListFilter) -> Result<VmList, String> {
        Engine::list(self, filter).await.map_err(|e| e.to_string())
    }
}
