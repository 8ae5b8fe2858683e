//! What every route and server function shares: the engine, the
//! configuration, the Leptos options, and the simulated cluster when it is
//! the backend. It lives beside the routes that take it; `server` makes it.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;
use pvedeck_config::Config;
use pvedeck_sim::SimCluster;

use std::collections::BTreeMap;

use crate::engine::{Clusters, Engine};

#[derive(Clone)]
pub struct AppState {
    pub leptos: LeptosOptions,
    /// The default cluster's engine: sign-in, people, `/api/vm/:id/*`.
    pub engine: Arc<Engine>,
    /// Every cluster's engine, the default one first.
    pub clusters: Arc<Clusters>,
    pub config: Arc<Config>,
    /// The simulated clusters by name: their control routes (fault
    /// injection) drive them directly.
    pub sims: Arc<BTreeMap<String, Arc<SimCluster>>>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}
