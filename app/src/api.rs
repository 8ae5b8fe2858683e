//! Server functions: thin calls into the server's engine (see `backend`).
//! Their URLs live under `/fn/` so that `/api/` stays go-pve-qemu's.

use leptos::prelude::*;

use crate::types::VmList;

#[cfg(feature = "ssr")]
fn backend() -> Result<crate::backend::SharedBackend, ServerFnError> {
    use_context::<crate::backend::SharedBackend>()
        .ok_or_else(|| ServerFnError::new("the server did not provide its engine"))
}

/// The cluster overview: every VM and every node.
#[server(prefix = "/fn", endpoint = "overview")]
pub async fn get_overview() -> Result<VmList, ServerFnError> {
    backend()?
        .0
        .list(crate::types::ListFilter::All)
        .await
        .map_err(ServerFnError::new)
}
