//! Who sees and does what (docs/security.md#users-owners-and-quotas): an
//! admin everything, a user their own VMs and jobs, within their quota.
//! Another user's VM or job is answered as if it did not exist (404), and
//! nothing runs for it. Every change is audited here, once for `/api` and
//! the UI alike.
//!
//! The `/api` handlers and the server functions call these, never the
//! engine's unguarded operations.

use std::net::IpAddr;
use std::sync::Arc;

use pvedeck_domain::account::{Allowance, AuditEntry, Principal, Usage};
use pvedeck_domain::os::Release;
use pvedeck_domain::request::{Cores, Growth, InstallRequest, MemoryMb, NodeName};
use pvedeck_domain::types::{Job, JobDetail, ListFilter, VmDetail, VmList};
use tokio::sync::mpsc;

use super::directory::People;
use super::quota::{Ticket, quota_of};
use super::snapshot::Listed;
use super::{Engine, EngineError, Listing};
use pvedeck_config::allow::ClientKey;

use crate::jobs::{FollowError, Follower, Update};

/// What a job started in a scope carries: the user it belongs to, and
/// the quota admission it runs under.
#[derive(Debug, Clone, Default)]
pub(super) struct Starting {
    pub owner: Option<String>,
    pub ticket: Option<Ticket>,
}

tokio::task_local! {
    static STARTING: Starting;
}

/// What a job started now carries (see [`Engine::start_job`]).
pub(super) fn starting() -> Starting {
    STARTING.try_with(Clone::clone).unwrap_or_default()
}

/// Runs `work` with the jobs it starts carrying `owner` (and `ticket`).
async fn as_owner<F: std::future::Future>(
    owner: Option<String>,
    ticket: Option<Ticket>,
    work: F,
) -> F::Output {
    STARTING.scope(Starting { owner, ticket }, work).await
}

/// What the Proxmox notes of a VM a user made say, so that a fresh
/// database (or another pvedeck) can tell whose it is.
pub fn owner_notes(owner: &str) -> String {
    format!("pvedeck-owner: {owner}")
}

/// The owner a VM's notes name, if any. Proxmox answers the notes as they
/// were set: it encodes them into the configuration file's comment lines
/// and decodes them when it reads the file (qemu-server
/// `PVE/QemuServer.pm`, `encode_text`/`decode_text`).
pub fn owner_in_notes(notes: &str) -> Option<String> {
    notes
        .lines()
        .find_map(|line| line.trim().strip_prefix("pvedeck-owner:"))
        .map(|owner| owner.trim().to_string())
        .filter(|o| pvedeck_domain::account::is_user_name(o))
}

/// Who asks: signed in (a principal), or anyone on a server without
/// sign-in (`None`: an administrator, as every caller was before users).
#[derive(Debug, Clone, Default)]
pub struct Actor {
    pub principal: Option<Principal>,
    pub client: Option<IpAddr>,
}

impl Actor {
    pub fn is_admin(&self) -> bool {
        self.principal.as_ref().is_none_or(Principal::is_admin)
    }

    /// As the audit log names them.
    pub fn name(&self) -> &str {
        self.principal.as_ref().map_or("anonymous", |p| &p.name)
    }

    /// The user whose view is limited to their own: `None` for admins.
    pub(super) fn limited_to(&self) -> Option<&str> {
        self.principal
            .as_ref()
            .filter(|p| !p.is_admin())
            .map(|p| p.name.as_str())
    }
}

/// A change to one VM.
#[derive(Debug, Clone)]
pub enum Command {
    Start,
    Reboot,
    Stop,
    Shutdown,
    Destroy,
    SetCpu(Cores),
    SetMemory(MemoryMb),
    GrowDisk(Growth),
    Migrate(NodeName),
}

impl Command {
    fn word(&self) -> &'static str {
        match self {
            Command::Start => "start",
            Command::Reboot => "reboot",
            Command::Stop => "stop",
            Command::Shutdown => "shutdown",
            Command::Destroy => "destroy",
            Command::SetCpu(_) => "set cpu",
            Command::SetMemory(_) => "set memory",
            Command::GrowDisk(_) => "set disk",
            Command::Migrate(_) => "migrate",
        }
    }

    fn summary(&self) -> String {
        match self {
            Command::SetCpu(c) => format!("cores={}", c.get()),
            Command::SetMemory(m) => format!("memory={} MiB", m.get()),
            Command::GrowDisk(g) => format!("disk +{} GiB", g.gib()),
            Command::Migrate(n) => format!("to node {n}"),
            _ => String::new(),
        }
    }
}

/// A change to the golden templates: admins only.
#[derive(Debug, Clone)]
pub enum TemplateCommand {
    Build(Release),
    Rebuild(u32),
    Delete(u32),
}

fn outcome<T>(result: &Result<T, EngineError>, job: impl Fn(&T) -> Option<u64>) -> String {
    match result {
        Ok(value) => job(value).map_or_else(|| "ok".to_string(), |id| format!("job {id}")),
        Err(e) => format!("refused: {e}"),
    }
}

/// 403 for a user: `what` is the whole server's (the counters, the
/// simulator's controls, the users, the audit log, the templates' changes).
pub fn admins_only(actor: &Actor, what: &str) -> Result<(), EngineError> {
    if actor.is_admin() {
        Ok(())
    } else {
        Err(EngineError::Forbidden(format!("{what} is for admins")))
    }
}

fn not_found(vmid: u32) -> EngineError {
    EngineError::NotFound(format!("VM {vmid} not found"))
}

impl Engine {
    fn people(&self) -> Arc<People> {
        self.directory.people()
    }

    /// Whether `actor` sees VM `vmid`.
    fn sees_vm(actor: &Actor, people: &People, vmid: u32) -> bool {
        match actor.limited_to() {
            None => true,
            Some(user) => people.owners.get(&vmid).is_some_and(|o| o == user),
        }
    }

    /// Whether `actor` sees a job of this owner.
    fn sees_job(actor: &Actor, owner: Option<&str>) -> bool {
        actor.limited_to().is_none_or(|user| owner == Some(user))
    }

    /// 404 for a VM `actor` does not see, before anything runs.
    pub fn visible_vm(&self, actor: &Actor, vmid: u32) -> Result<(), EngineError> {
        if Self::sees_vm(actor, &self.people(), vmid) {
            Ok(())
        } else {
            Err(not_found(vmid))
        }
    }

    /// The owner a VM `actor` makes gets: a user of the database (an
    /// admin's too), not one of `API_TOKENS` or an anonymous caller.
    fn owner_for(actor: &Actor, people: &People) -> Option<String> {
        actor
            .principal
            .as_ref()
            .filter(|p| people.users.contains_key(&p.name))
            .map(|p| p.name.clone())
    }

    /// The VM list as `actor` may see it: their own VMs (a user), or all
    /// with their owners (an admin, once VMs have owners).
    pub async fn list_for(
        &self,
        actor: &Actor,
        filter: ListFilter,
    ) -> Result<Listing, EngineError> {
        let listing = self.list(filter).await?;
        let people = self.people();
        let limited = actor.limited_to();
        if limited.is_none() && people.owners.is_empty() {
            return Ok(listing);
        }
        let key = (
            Arc::as_ptr(&listing.listed) as usize,
            people.generation,
            limited.map(str::to_string),
        );
        if let Some(listed) = self.views.get(&key) {
            return Ok(Listing { listed, ..listing });
        }
        let all = &listing.listed.list;
        let list: Vec<_> = all
            .list
            .iter()
            .filter(|vm| {
                Self::sees_vm(actor, &people, vm.vmid) && !(limited.is_some() && vm.reserved)
            })
            .map(|vm| {
                let mut vm = vm.clone();
                vm.owner = people.owners.get(&vm.vmid).cloned();
                vm
            })
            .collect();
        let listed = Arc::new(Listed::new(VmList {
            count: list.len(),
            list,
            cluster: all.cluster.clone(),
        }));
        self.views.put(key, listed.clone(), listing.listed.clone());
        Ok(Listing { listed, ..listing })
    }

    pub async fn jobs_for(&self, actor: &Actor, limit: u32) -> Result<Vec<Job>, EngineError> {
        match actor.limited_to() {
            None => self.job_list(limit).await,
            Some(user) => Ok(self.jobs.list_of(user, limit).await?),
        }
    }

    pub async fn job_for(&self, actor: &Actor, id: u64) -> Result<JobDetail, EngineError> {
        let detail = self.job_detail(id).await?;
        if Self::sees_job(actor, detail.job.owner.as_deref()) {
            Ok(detail)
        } else {
            Err(EngineError::NotFound(format!("job {id} not found")))
        }
    }

    /// Follows a job `actor` sees (else `None`, as for no job): what is
    /// shown once (a generated root password) reaches only the job's
    /// owner, or an admin for a job without one.
    /// `started`: the stream is the one of the request that started the
    /// job (never refused, see [`Follower::Starter`]).
    pub async fn follow_for(
        &self,
        actor: &Actor,
        id: u64,
        after: u64,
        started: bool,
    ) -> Result<Option<mpsc::Receiver<Update>>, FollowError> {
        let Some(job) = self.jobs.job(id).await? else {
            return Ok(None);
        };
        let owner = job.owner.as_deref();
        if !Self::sees_job(actor, owner) {
            return Ok(None);
        }
        let reveal = match owner {
            Some(owner) => actor.principal.as_ref().is_some_and(|p| p.name == owner),
            None => actor.is_admin(),
        };
        let owns =
            owner.is_some_and(|owner| actor.principal.as_ref().is_some_and(|p| p.name == owner));
        let who = match (started, owns) {
            (true, _) => Follower::Starter,
            (false, true) => Follower::Owner,
            (false, false) => Follower::Reader(actor.client.map(ClientKey::of)),
        };
        self.jobs.follow(id, after, reveal, who).await
    }

    pub async fn status_for(&self, actor: &Actor, vmid: u32) -> Result<String, EngineError> {
        self.read_rate
            .take(actor.client, std::time::Instant::now())?;
        self.visible_vm(actor, vmid)?;
        self.statuses.get(vmid, || self.vm_status(vmid)).await
    }

    pub async fn vm_detail_for(&self, actor: &Actor, vmid: u32) -> Result<VmDetail, EngineError> {
        self.read_rate
            .take(actor.client, std::time::Instant::now())?;
        self.visible_vm(actor, vmid)?;
        let mut detail = self.vm_detail(vmid).await?;
        detail.vm.owner = self.people().owners.get(&vmid).cloned();
        Ok(detail)
    }

    /// What `actor` may hold and holds (users; admins have no quota).
    pub async fn allowance(&self, actor: &Actor) -> Result<Option<Allowance>, EngineError> {
        let Some(user) = actor.limited_to() else {
            return Ok(None);
        };
        let people = self.people();
        let Some(info) = people.users.get(user) else {
            return Ok(None);
        };
        let view = self.cluster.read().await?;
        let jobs = self.jobs.clone();
        let used = self
            .ledger
            .usage(&view.snapshot, &people, user, &|id| jobs.is_running(id));
        Ok(Some(Allowance {
            quota: quota_of(&self.config, info),
            used,
        }))
    }

    /// Admits `ask` under `actor`'s quota (users only: admins have none).
    async fn admit(
        &self,
        actor: &Actor,
        ask: Usage,
        vmid: Option<u32>,
        whole: bool,
    ) -> Result<Option<Ticket>, EngineError> {
        let Some(user) = actor.limited_to() else {
            return Ok(None);
        };
        let people = self.people();
        let info = people
            .users
            .get(user)
            .ok_or_else(|| EngineError::Unauthorized(format!("no user '{user}'")))?;
        let quota = quota_of(&self.config, info);
        let view = self.cluster.read().await?;
        let jobs = self.jobs.clone();
        let ticket = self.ledger.admit(
            &view.snapshot,
            &people,
            user,
            quota,
            ask,
            vmid,
            whole,
            &|id| jobs.is_running(id),
        )?;
        Ok(Some(ticket))
    }

    /// `POST /api/vm/install` as `actor`: within their quota, the VM
    /// theirs.
    pub async fn install_as(
        self: &Arc<Self>,
        actor: &Actor,
        request: InstallRequest,
    ) -> Result<u64, EngineError> {
        let summary = format!(
            "{} {}{}: {} vCPU, {} MiB, {} GiB",
            request.release.os,
            request.release.version,
            match request.name.as_str() {
                "" => String::new(),
                name => format!(" \"{name}\""),
            },
            request.cpu,
            request.ram,
            request.disk_gb
        );
        let result = async {
            let ask = Usage {
                vms: 1,
                cores: u64::try_from(request.cpu).unwrap_or(0),
                memory_mib: u64::try_from(request.ram).unwrap_or(0),
                disk_gib: request.disk_gb,
            };
            let ticket = self.admit(actor, ask, None, true).await?;
            let owner = Self::owner_for(actor, &self.people());
            // The job takes its admission over when it starts (before it
            // can name its VM); a refusal before that gives it back.
            let started = as_owner(owner, ticket, self.install(request)).await;
            if let (Err(_), Some(t)) = (&started, ticket) {
                self.ledger.cancel(t);
            }
            started
        }
        .await;
        let target = None;
        self.audit(
            actor,
            "install",
            target,
            summary,
            outcome(&result, |j| Some(*j)),
        )
        .await;
        result
    }

    /// A power action, destroy, resize or migration of a VM `actor` sees.
    pub async fn command(
        self: &Arc<Self>,
        actor: &Actor,
        vmid: u32,
        command: Command,
    ) -> Result<Option<u64>, EngineError> {
        let result = self.run_command(actor, vmid, &command).await;
        self.audit(
            actor,
            command.word(),
            Some(format!("vm {vmid}")),
            command.summary(),
            outcome(&result, |j| *j),
        )
        .await;
        result
    }

    async fn run_command(
        self: &Arc<Self>,
        actor: &Actor,
        vmid: u32,
        command: &Command,
    ) -> Result<Option<u64>, EngineError> {
        self.visible_vm(actor, vmid)?;
        let ticket = match command {
            Command::SetCpu(_) | Command::SetMemory(_) | Command::GrowDisk(_) => {
                let ask = self.resize_ask(vmid, command).await?;
                self.admit(actor, ask, Some(vmid), false).await?
            }
            _ => None,
        };
        let owner = Self::owner_for(actor, &self.people());
        let run = async {
            match command.clone() {
                Command::Start => self.start(vmid).await.map(Some),
                Command::Reboot => self.reboot(vmid).await.map(Some),
                Command::Stop => self.stop(vmid).await.map(|()| None),
                Command::Shutdown => self.shutdown(vmid).await.map(|()| None),
                Command::Destroy => self.destroy(vmid).await.map(|()| None),
                Command::SetCpu(cores) => self.set_cpu(vmid, cores).await.map(|()| None),
                Command::SetMemory(mb) => self.set_memory(vmid, mb).await.map(|()| None),
                Command::GrowDisk(g) => self.grow_disk(vmid, g).await.map(|()| None),
                Command::Migrate(node) => self.migrate(vmid, node).await.map(Some),
            }
        };
        let result = as_owner(owner, None, run).await;
        if let Some(ticket) = ticket {
            match result {
                Ok(_) => self.ledger.done(ticket),
                Err(_) => self.ledger.cancel(ticket),
            }
        }
        if matches!(command, Command::Destroy) && result.is_ok() {
            self.forget_owner(vmid).await;
        }
        result
    }

    /// What a resize adds to what the VM holds (never below nothing).
    async fn resize_ask(&self, vmid: u32, command: &Command) -> Result<Usage, EngineError> {
        let vm = self.locate(vmid).await?.resource;
        Ok(match command {
            Command::SetCpu(cores) => Usage {
                cores: u64::from(cores.get()).saturating_sub(u64::from(vm.maxcpu)),
                ..Usage::default()
            },
            Command::SetMemory(mb) => Usage {
                memory_mib: mb.get().saturating_sub(vm.maxmem >> 20),
                ..Usage::default()
            },
            Command::GrowDisk(growth) => Usage {
                disk_gib: growth.gib(),
                ..Usage::default()
            },
            _ => Usage::default(),
        })
    }

    /// Template builds, rebuilds and deletions: admins only (users clone
    /// from the templates).
    pub async fn template_command(
        self: &Arc<Self>,
        actor: &Actor,
        command: TemplateCommand,
    ) -> Result<Option<u64>, EngineError> {
        let (action, target, summary) = match &command {
            TemplateCommand::Build(release) => (
                "template build",
                None,
                format!("{} {}", release.os, release.version),
            ),
            TemplateCommand::Rebuild(vmid) => (
                "template rebuild",
                Some(format!("vm {vmid}")),
                String::new(),
            ),
            TemplateCommand::Delete(vmid) => {
                ("template delete", Some(format!("vm {vmid}")), String::new())
            }
        };
        let result = match admins_only(actor, "building, rebuilding and deleting templates") {
            Err(refused) => Err(refused),
            Ok(()) => {
                let owner = Self::owner_for(actor, &self.people());
                as_owner(owner, None, async {
                    match command {
                        TemplateCommand::Build(release) => {
                            self.build_template(release).await.map(Some)
                        }
                        TemplateCommand::Rebuild(vmid) => {
                            self.rebuild_template(vmid).await.map(Some)
                        }
                        TemplateCommand::Delete(vmid) => {
                            self.delete_template(vmid).await.map(|()| None)
                        }
                    }
                })
                .await
            }
        };
        self.audit(actor, action, target, summary, outcome(&result, |j| *j))
            .await;
        result
    }

    /// Owners the database lacks, read back from the VMs' Proxmox notes, so
    /// that a fresh database (or another pvedeck's) learns whose each VM
    /// is. Once at start, in the background, and only where owners matter
    /// (users, or an OpenID provider) while no VM has one: one `qm config`
    /// per VM tagged `pvedeck`. An idle server without users reads nothing.
    pub fn adopt_owners(self: &Arc<Self>) {
        let people = self.people();
        let matters = !people.users.is_empty() || self.has_oidc();
        if !matters || !people.owners.is_empty() {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            let Ok(view) = engine.cluster.read().await else {
                return;
            };
            let ours: Vec<(u32, String)> = view
                .snapshot
                .vms
                .iter()
                .filter(|vm| vm.is_qemu() && !vm.template && vm.has_tag(super::scope::TAG))
                .map(|vm| (vm.vmid, vm.node.clone()))
                .collect();
            let mut found = 0;
            for (vmid, node) in ours {
                let Ok(config) = engine.proxmox.config(&node, vmid).await else {
                    continue;
                };
                let Some(owner) = config.get("description").and_then(|d| owner_in_notes(d)) else {
                    continue;
                };
                if engine.people().owners.contains_key(&vmid) {
                    continue;
                }
                let store = engine.directory.store().clone();
                let at = pvedeck_support::clock::now_ms();
                let cluster = engine.config.cluster.clone();
                let saved = tokio::task::spawn_blocking(move || {
                    store.set_owner(&cluster, vmid, &owner, at)
                })
                .await;
                if matches!(saved, Ok(Ok(()))) {
                    found += 1;
                }
            }
            if found > 0 {
                tracing::info!(found, "VM owners read back from the VMs' Proxmox notes");
                let directory = engine.directory.clone();
                let _ = tokio::task::spawn_blocking(move || directory.reload()).await;
            }
        });
    }

    /// A VM a job is making gets the job's owner (or loses an earlier
    /// VM's of that id, when the job has none).
    pub(super) fn claim(&self, job: &crate::jobs::JobHandle, vmid: u32) {
        let store = self.directory.store();
        let result = match job.owner() {
            Some(owner) => {
                self.ledger.for_vm(job.id(), vmid);
                store.set_owner(
                    &self.config.cluster,
                    vmid,
                    owner,
                    pvedeck_support::clock::now_ms(),
                )
            }
            None => store.remove_owner(&self.config.cluster, vmid),
        };
        if let Err(e) = result.and_then(|()| self.directory.reload()) {
            tracing::error!(vmid, "cannot record the VM's owner: {e}");
        }
    }

    async fn forget_owner(&self, vmid: u32) {
        let directory = self.directory.clone();
        let cluster = self.config.cluster.clone();
        let result = tokio::task::spawn_blocking(move || {
            directory.store().remove_owner(&cluster, vmid)?;
            directory.reload()
        })
        .await;
        if !matches!(result, Ok(Ok(()))) {
            tracing::error!(vmid, "cannot forget the destroyed VM's owner");
        }
    }

    /// `GET /api/audit`: admins only.
    pub async fn audit_log(
        &self,
        actor: &Actor,
        query: crate::store::AuditQuery,
    ) -> Result<Vec<AuditEntry>, EngineError> {
        admins_only(actor, "the audit log")?;
        let store = self.directory.store().clone();
        tokio::task::spawn_blocking(move || store.audit(&query))
            .await
            .map_err(|e| EngineError::Internal(e.to_string()))?
            .map_err(EngineError::from)
    }

    /// Records a change in the audit log (never a secret: callers pass
    /// summaries made of what is not).
    pub async fn audit(
        &self,
        actor: &Actor,
        action: &str,
        target: Option<String>,
        summary: String,
        outcome: String,
    ) {
        let entry = AuditEntry {
            id: 0,
            at: pvedeck_support::clock::now_ms(),
            user: actor.name().to_string(),
            client: actor.client.map(|ip| ip.to_string()),
            action: action.to_string(),
            target,
            summary,
            outcome,
        };
        let store = self.directory.store().clone();
        let written = tokio::task::spawn_blocking(move || store.append_audit(&entry)).await;
        match written {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(action, "the audit log cannot be written: {e}"),
            Err(e) => tracing::error!(action, "the audit log cannot be written: {e}"),
        }
    }
}

/// The VM lists as each kind of reader sees them, built once per snapshot
/// list and reading of the people.
#[derive(Default)]
pub struct Views {
    /// Keyed by the list they were made from (which they hold, so that its
    /// address is not reused), the people's generation and the user.
    built: std::sync::Mutex<ViewMap>,
}

type ViewKey = (usize, u64, Option<String>);
type ViewMap = std::collections::HashMap<ViewKey, (Arc<Listed>, Arc<Listed>)>;

impl Views {
    fn get(&self, key: &ViewKey) -> Option<Arc<Listed>> {
        pvedeck_support::sync::lock(&self.built)
            .get(key)
            .map(|(view, _)| view.clone())
    }

    fn put(&self, key: ViewKey, view: Arc<Listed>, from: Arc<Listed>) {
        let mut built = pvedeck_support::sync::lock(&self.built);
        // Views of an older reading of the people, or of a list its
        // snapshot no longer holds (only this cache does), are not asked
        // for again.
        built.retain(|(_, generation, _), (_, list)| {
            *generation == key.1 && Arc::strong_count(list) > 1
        });
        // A bound whatever the number of users.
        if built.len() >= 256 {
            built.clear();
        }
        built.insert(key, (view, from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_name_the_owner_and_nothing_else_passes_for_one() {
        assert_eq!(owner_notes("alice"), "pvedeck-owner: alice");
        assert_eq!(
            owner_in_notes("made by pvedeck\npvedeck-owner: alice\n").as_deref(),
            Some("alice")
        );
        assert_eq!(owner_in_notes("pvedeck-owner: a b"), None);
        assert_eq!(owner_in_notes("owner: alice"), None);
    }

    #[test]
    fn anonymous_callers_are_admins_and_users_see_their_own() {
        let open = Actor::default();
        assert!(open.is_admin());
        assert_eq!(open.name(), "anonymous");
        let alice = Actor {
            principal: Some(Principal {
                name: "alice".into(),
                role: pvedeck_domain::account::Role::User,
                groups: vec![],
            }),
            client: None,
        };
        let people = People {
            owners: [(101, "alice".to_string()), (102, "bob".to_string())].into(),
            ..People::default()
        };
        assert!(Engine::sees_vm(&alice, &people, 101));
        assert!(!Engine::sees_vm(&alice, &people, 102));
        assert!(
            !Engine::sees_vm(&alice, &people, 103),
            "no owner: the admins'"
        );
        assert!(Engine::sees_vm(&open, &people, 102));
        assert!(Engine::sees_job(&alice, Some("alice")));
        assert!(!Engine::sees_job(&alice, None));
    }
}
