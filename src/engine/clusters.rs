//! Several Proxmox clusters from one pvedeck (docs/operations.md#several-clusters):
//! one engine per cluster, each with its own snapshot, VMID pool, templates
//! and owners, over the one store and job history. The first is the
//! default one, the cluster of `/api/vm/:id/*` and of installs that name
//! none; the VM list and the overview are every cluster's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pvedeck_domain::request::{InstallRequest, NodeChoice};
use pvedeck_domain::types::{ClusterInfo, ListFilter, NodeSummary, VmList};
use pvedeck_support::sync::lock;

use super::snapshot::Listed;
use super::{Actor, Engine, EngineError, Listing};

/// How many merged lists are kept (one per filter and user seen since
/// the snapshots last changed).
const MERGED_KEPT: usize = 256;

/// The merged list of a key: which listings it was made of.
type MergedKey = (Vec<usize>, ListFilter, Option<String>);

/// A merged list and the lists it was made of.
type Merged = (Arc<Listed>, Vec<Arc<Listed>>);

pub struct Clusters {
    /// The default cluster first.
    engines: Vec<Arc<Engine>>,
    /// Each merged list with the lists it was made of: kept alive, their
    /// addresses in its key cannot be another list's.
    merged: Mutex<HashMap<MergedKey, Merged>>,
}

impl Clusters {
    /// `engines` in the order of `CLUSTERS`; there is at least one.
    pub fn new(engines: Vec<Arc<Engine>>) -> Result<Clusters, EngineError> {
        if engines.is_empty() {
            return Err(EngineError::Internal("no cluster to serve".to_string()));
        }
        Ok(Clusters {
            engines,
            merged: Mutex::default(),
        })
    }

    /// The default cluster's engine: `/api/vm/:id/*`, sign-in, people.
    pub fn first(&self) -> &Arc<Engine> {
        &self.engines[0]
    }

    pub fn all(&self) -> &[Arc<Engine>] {
        &self.engines
    }

    /// The engine of cluster `name`; 404 for one this server does not
    /// serve.
    pub fn named(&self, name: &str) -> Result<&Arc<Engine>, EngineError> {
        self.engines
            .iter()
            .find(|e| e.config().cluster == name)
            .ok_or_else(|| EngineError::NotFound(format!("cluster '{name}' not found")))
    }

    pub fn names(&self) -> Vec<String> {
        self.engines
            .iter()
            .map(|e| e.config().cluster.clone())
            .collect()
    }

    /// The VM list of every cluster `actor` sees, each entry naming its
    /// cluster. A cluster that cannot be read shows what was last read of
    /// it (nothing, if never): the others' lists are not held up by it.
    pub async fn list_for(
        &self,
        actor: &Actor,
        filter: ListFilter,
    ) -> Result<Listing, EngineError> {
        if self.engines.len() == 1 {
            return self.first().list_for(actor, filter).await;
        }
        let reads = self.engines.iter().map(|e| e.list_for(actor, filter));
        let results = futures_util::future::join_all(reads).await;
        let mut listings = Vec::new();
        let mut failures = Vec::new();
        let mut first_error = None;
        for (engine, result) in self.engines.iter().zip(results) {
            match result {
                Ok(listing) => {
                    if let Some(why) = &listing.failure {
                        failures.push(format!("{}: {why}", engine.config().cluster));
                    }
                    listings.push(listing);
                }
                Err(e) => {
                    failures.push(format!("{}: {e}", engine.config().cluster));
                    first_error.get_or_insert(e);
                }
            }
        }
        if listings.is_empty() {
            return Err(first_error
                .unwrap_or_else(|| EngineError::Internal("no cluster answered".to_string())));
        }
        let key: MergedKey = (
            listings
                .iter()
                .map(|l| Arc::as_ptr(&l.listed) as usize)
                .collect(),
            filter,
            actor.limited_to().map(str::to_string),
        );
        let cached = lock(&self.merged)
            .get(&key)
            .map(|(listed, _)| listed.clone());
        let listed = match cached {
            Some(listed) => listed,
            None => {
                let listed = Arc::new(merge(&listings));
                let mut merged = lock(&self.merged);
                if merged.len() >= MERGED_KEPT {
                    merged.clear();
                }
                let sources = listings.iter().map(|l| l.listed.clone()).collect();
                merged.insert(key, (listed.clone(), sources));
                listed
            }
        };
        Ok(Listing {
            listed,
            age_ms: listings.iter().map(|l| l.age_ms).max().unwrap_or(0),
            stale: listings.iter().any(|l| l.stale) || first_error.is_some(),
            failure: (!failures.is_empty()).then(|| failures.join("; ")),
        })
    }

    /// Each cluster's state, for the overview's headings.
    pub fn states(&self) -> Vec<ClusterInfo> {
        self.engines
            .iter()
            .map(|engine| {
                let (age_ms, stale, failure) = engine.cluster_state();
                ClusterInfo {
                    name: engine.config().cluster.clone(),
                    age_ms,
                    stale,
                    failure,
                }
            })
            .collect()
    }

    /// The engine an install goes to: the cluster it names, the default
    /// one, or, with `"node":"auto"` and no cluster named, the cluster
    /// whose best node has the most free memory for it.
    pub async fn for_install(&self, request: &InstallRequest) -> Result<Arc<Engine>, EngineError> {
        if let Some(name) = &request.cluster {
            return self.named(name).cloned();
        }
        if self.engines.len() == 1 || request.node != Some(NodeChoice::Auto) {
            return Ok(self.first().clone());
        }
        let tries = self.engines.iter().map(|e| e.room_for(request));
        let rooms = futures_util::future::join_all(tries).await;
        let mut best: Option<(i64, &Arc<Engine>)> = None;
        let mut first_refusal = None;
        for (engine, room) in self.engines.iter().zip(rooms) {
            match room {
                Ok(free) if best.is_none_or(|(most, _)| free > most) => {
                    best = Some((free, engine));
                }
                Ok(_) => {}
                Err(e) => {
                    first_refusal.get_or_insert(e);
                }
            }
        }
        // No cluster fits: the default cluster's reason, as without others.
        match (best, first_refusal) {
            (Some((_, engine)), _) => Ok(engine.clone()),
            (None, Some(refused)) => Err(refused),
            (None, None) => Ok(self.first().clone()),
        }
    }

    /// Starts the install on its cluster (see [`Clusters::for_install`]).
    pub async fn install_as(
        &self,
        actor: &Actor,
        request: InstallRequest,
    ) -> Result<(Arc<Engine>, u64), EngineError> {
        let engine = self.for_install(&request).await?;
        let job = engine.install_as(actor, request).await?;
        Ok((engine, job))
    }
}

/// Every cluster's list as one: VMs by cluster in `CLUSTERS`' order, then
/// by VMID; nodes likewise.
fn merge(listings: &[Listing]) -> Listed {
    let list: Vec<_> = listings
        .iter()
        .flat_map(|l| l.listed.list.list.iter().cloned())
        .collect();
    let cluster: Vec<NodeSummary> = listings
        .iter()
        .flat_map(|l| l.listed.list.cluster.iter().cloned())
        .collect();
    Listed::new(VmList {
        count: list.len(),
        list,
        cluster,
    })
}
