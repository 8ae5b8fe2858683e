//! What every route and server function shares: the engine, the
//! configuration, the Leptos options, and the simulated cluster when it is
//! the backend. It lives beside the routes that take it; `server` makes it.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;
use pvedeck_config::Config;
use pvedeck_sim::SimCluster;

use crate::engine::Engine;

#[derive(Clone)]
pub struct AppState {
    pub leptos: LeptosOptions,
    pub engine: Arc<Engine>,
    pub config: Arc<Config>,
    /// Present when the backend is the simulated cluster: its control routes
    /// (fault injection) drive it directly.
    pub sim: Option<Arc<SimCluster>>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}
