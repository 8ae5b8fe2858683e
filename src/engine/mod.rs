//! The provisioning engine: every rule of docs/provisioning.md lives here once, behind
//! both faces (the `/api` handlers and the UI's server functions). It takes
//! checked values (`pvedeck_domain::request`), reaches Proxmox only through the timed
//! port (`pvedeck_proxmox::Timed`), and does not know which backend is behind it.

mod access;
pub use access::Credential;
pub mod accounts;
mod allocator;
mod cloning;
pub mod clusters;
pub mod console;
mod cpu;
mod detail;
pub mod directory;
mod disk;
mod error;
mod failure;
mod identity;
pub mod images;
mod install;
mod ipfilter;
mod lifecycle;
pub mod list;
mod memory;
mod people;
mod placement;
mod quota;
mod readiness;
mod reads;
mod report;
mod rrd;
pub mod scope;
pub mod sessions;
pub mod signin;
mod snapshot;
mod sshkey;
pub mod startup;
mod stopping;
mod storage;
mod templates;
pub mod tenancy;
pub mod throttle;

use std::collections::BTreeMap;
use std::sync::Arc;

use pvedeck_config::{Config, Limits};
use pvedeck_domain::types::{Job, JobDetail, ListFilter, NodeHistory, Timeframe};
use pvedeck_mirror::Mirror;
use pvedeck_proxmox::{Pve, Timed, VmResource};
use pvedeck_support::clock::Clock;

use crate::jobs::Jobs;
pub use allocator::Allocator;
pub use clusters::Clusters;
pub use error::EngineError;
use images::Images;
pub use report::one_line;
pub use tenancy::{Actor, Command, TemplateCommand};

pub struct Engine {
    /// The only way to Proxmox: every call under its timeout.
    proxmox: Arc<Timed>,
    /// What the cluster looked like when last read.
    cluster: Arc<snapshot::Cluster>,
    /// The nodes' history (`rrddata`) for the charts.
    history: Arc<rrd::History>,
    config: Arc<Config>,
    jobs: Arc<Jobs>,
    allocator: Arc<Allocator>,
    images: Images,
    cpu_baseline: cpu::Baseline,
    /// Pauses of the pipeline (between retries) run on the backend's clock.
    clock: Clock,
    /// Serializes the SSH key step: two installs must not both run ssh-keygen.
    key_lock: tokio::sync::Mutex<()>,
    /// Golden templates being built.
    template_builds: templates::Builds,
    /// The UI's logins.
    sessions: sessions::Sessions,
    /// `qm status` and `qm config` of one VM as last read, and how often
    /// a client may ask.
    statuses: reads::Recent<String>,
    configs: reads::Recent<Vec<(String, String)>>,
    read_rate: reads::ReadRate,
    /// Failed logins and failed bearer tokens, per client.
    logins: throttle::Throttle,
    tokens: throttle::Throttle,
    /// A SIGTERM's grace, the job tasks it waits for.
    stopping: stopping::Stopping,
    /// Users, tokens and owners, as last read.
    directory: Arc<directory::Directory>,
    /// What users were admitted to hold that no snapshot shows yet.
    ledger: quota::Ledger,
    /// Installs placed by `"node":"auto"` whose VMs no snapshot counts yet.
    placements: Arc<placement::Ledger>,
    storage_reads: placement::StorageReads,
    /// The VM list as users and admins see it.
    views: tenancy::Views,
    /// Sign-in through OpenID Connect (`OIDC_*`).
    oidc: Option<signin::Oidc>,
    /// The consoles open, every cluster's.
    consoles: Arc<console::Consoles>,
}

/// What an engine is made of besides its configuration.
pub struct Parts {
    pub pve: Arc<dyn Pve>,
    /// Where cloud images come from.
    pub mirror: Arc<dyn Mirror>,
    /// The backend's time: real, or the simulated cluster's `SIM_SPEED`.
    pub clock: Clock,
    pub jobs: Arc<Jobs>,
    /// The people, read from the jobs' database.
    pub directory: Arc<directory::Directory>,
    pub oidc: Option<signin::Oidc>,
    /// What each OS's images must show, the keyrings read at start.
    pub image_policy: BTreeMap<pvedeck_domain::os::Os, images::Policy>,
    /// The consoles open, shared by every cluster's engine.
    pub consoles: Arc<console::Consoles>,
}

/// The list with how old its data is.
pub struct Listing {
    pub listed: Arc<snapshot::Listed>,
    pub age_ms: u64,
    pub stale: bool,
    pub failure: Option<String>,
}

/// A VM as the cluster resource list shows it, located for a command.
#[derive(Debug, Clone)]
pub struct VmRef {
    pub vmid: u32,
    pub node: String,
    pub resource: VmResource,
}

impl Engine {
    /// Builds the engine and starts its cluster snapshot's refresher (on
    /// the current runtime).
    pub fn new(config: Arc<Config>, parts: Parts) -> Engine {
        let config_ttl = config.session_ttl;
        let store = parts.jobs.store().clone();
        let mut timed = Timed::bounded(
            parts.pve,
            (config.command_timeout, config.long_command_timeout),
            config.max_pve_commands,
        )
        .observed(parts.jobs.metrics().clone());
        if store.shared() {
            // What this replica changes, the others read again at once.
            let (store, me) = (store.clone(), parts.jobs.replica().name.clone());
            timed = timed.announcing(Arc::new(move || store.announce_change(&me)));
        }
        let proxmox = Arc::new(timed);
        let history = Arc::new(rrd::History::default());
        Engine {
            cluster: snapshot::Cluster::start(
                proxmox.clone(),
                parts.jobs.metrics().clone(),
                history.clone(),
                config.main_node.clone(),
                config.snapshot_interval,
                config.snapshot_idle,
            ),
            history,
            proxmox,
            images: Images::bounded(
                parts.mirror,
                config.image_cache_dir.clone(),
                config.image_base.clone(),
                config.image_max_bytes,
            )
            .verifying(parts.image_policy)
            .within(config.image_download_timeout),
            allocator: Arc::new(Allocator::new(&config).shared(parts.jobs.clone())),
            config,
            jobs: parts.jobs,
            cpu_baseline: cpu::Baseline::default(),
            clock: parts.clock,
            key_lock: tokio::sync::Mutex::new(()),
            template_builds: Default::default(),
            sessions: sessions::Sessions::on(config_ttl, store),
            statuses: reads::Recent::default(),
            configs: reads::Recent::default(),
            read_rate: reads::ReadRate::default(),
            logins: throttle::Throttle::new("logins"),
            tokens: throttle::Throttle::new("tokens"),
            stopping: stopping::Stopping::default(),
            directory: parts.directory,
            ledger: quota::Ledger::default(),
            placements: Arc::default(),
            storage_reads: placement::StorageReads::default(),
            views: tenancy::Views::default(),
            oidc: parts.oidc,
            consoles: parts.consoles,
        }
    }

    pub fn directory(&self) -> &Arc<directory::Directory> {
        &self.directory
    }

    /// Whether people may sign in through an OpenID Connect provider.
    pub fn has_oidc(&self) -> bool {
        self.oidc.is_some()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `VM_MAX_*`, as the request checks read them.
    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    pub fn jobs(&self) -> &Arc<Jobs> {
        &self.jobs
    }

    /// `GET /metrics`: the counters, and the snapshot's age as of now
    /// (reading it is not a reader's read: it keeps no refresher going).
    pub fn metrics_text(&self) -> String {
        self.jobs.metrics().render(self.cluster.age())
    }

    /// `GET /api/vm/list` (docs/provisioning.md#the-vm-list), from the cluster
    /// snapshot, with its age.
    pub async fn list(&self, filter: ListFilter) -> Result<Listing, EngineError> {
        let view = self.cluster.read().await?;
        Ok(Listing {
            listed: list::listed(&view.snapshot, &self.allocator, self.config.manage, filter),
            age_ms: u64::try_from(view.age.as_millis()).unwrap_or(u64::MAX),
            stale: view.stale,
            failure: view.failure,
        })
    }

    /// `/node/:name`: a node's history over a timeframe. A node the
    /// cluster does not have is 404.
    pub async fn node_history(
        &self,
        node: &str,
        timeframe: Timeframe,
    ) -> Result<Arc<NodeHistory>, EngineError> {
        let view = self.cluster.recent().await?;
        if !view.snapshot.nodes.iter().any(|n| n.node == node) {
            return Err(EngineError::NotFound(format!("node '{node}' not found")));
        }
        Ok(self.history.get(&self.proxmox, node, timeframe).await?)
    }

    /// The last hour of each online node (whose history can be read),
    /// for the node cards.
    pub async fn node_hours(&self) -> Vec<Arc<NodeHistory>> {
        let online = self.cluster.online_nodes();
        self.history.hours(&self.proxmox, &online).await
    }

    /// This cluster's health without reading it: the snapshot's age in
    /// ms (0 when never read), whether it is stale, why reading it fails.
    pub fn cluster_state(&self) -> (u64, bool, Option<String>) {
        let (age, stale, failure) = self.cluster.health();
        let age_ms = age.map_or(0, |a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX));
        (age_ms, stale, failure)
    }

    /// The cluster changed behind the port's back (the simulator's control
    /// routes): the next read refreshes.
    pub fn cluster_changed(&self) {
        self.proxmox.note_change();
    }

    /// Finds a VM for an action in the cluster snapshot: reserved ids are
    /// refused, unknown ones are 404.
    pub async fn locate(&self, vmid: u32) -> Result<VmRef, EngineError> {
        if let Some(label) = self.allocator.reserved(vmid) {
            return Err(EngineError::bad(format!(
                "VM {vmid} is reserved ({label}): pvedeck does not act on it"
            )));
        }
        let resource = self
            .cluster
            .read()
            .await?
            .snapshot
            .vms
            .iter()
            .find(|vm| vm.vmid == vmid && vm.is_qemu() && !vm.template)
            .cloned()
            .ok_or_else(|| EngineError::NotFound(format!("VM {vmid} not found")))?;
        Ok(VmRef {
            vmid,
            node: resource.node.clone(),
            resource,
        })
    }

    /// `GET /api/jobs`: newest first.
    pub async fn job_list(&self, limit: u32) -> Result<Vec<Job>, EngineError> {
        Ok(self.jobs.list(limit).await?)
    }

    /// `GET /api/jobs/:id`: the job and its whole timeline so far.
    pub async fn job_detail(&self, id: u64) -> Result<JobDetail, EngineError> {
        let job = self
            .jobs
            .job(id)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("job {id} not found")))?;
        let events = self.jobs.events(id, 0).await?;
        Ok(JobDetail { job, events })
    }
}
