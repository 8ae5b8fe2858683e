//! The port as the engine holds it: every call to Proxmox under the timeout
//! of its class. Nothing else in the engine reaches a backend, so no call
//! can hang a job for ever. A call that outlives its timeout is dropped,
//! which kills the command it ran (`cli`), and answers `PveError::Timeout`,
//! which the edge maps to 504.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pvedeck_support::sync::{into_inner, lock};

use super::{
    AgentExec, CloneMode, DiskImage, Fetched, GuestCommand, GuestTarget, IpFilter, LineSink,
    NodeFetch, NodeResource, NodeStatus, PowerAction, Pve, PveError, QmOptions, RrdRow,
    StorageStatus, VmResource,
};

/// One try to reach a VM (a TCP probe, `ssh … echo ready`) is not a
/// command: it is given up after this long, or the short timeout if less.
const ATTEMPT: Duration = Duration::from_secs(20);

/// Hears of every call the port makes: which one, whether it succeeded,
/// how long it took (the server's `/metrics`). The port does not know who
/// listens.
pub trait CallObserver: Send + Sync {
    fn call(&self, operation: &'static str, ok: bool, took: Duration);
}

/// No one listens.
struct Unobserved;

impl CallObserver for Unobserved {
    fn call(&self, _: &'static str, _: bool, _: Duration) {}
}

/// How long a call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `COMMAND_TIMEOUT_SECS`: reads, `qm create`, `qm set`, power actions.
    Short,
    /// `LONG_COMMAND_TIMEOUT_SECS`: `qm importdisk`, `qm migrate`, the init script.
    Long,
    /// One readiness try.
    Attempt,
}

pub struct Timed {
    pve: Arc<dyn Pve>,
    short: Duration,
    long: Duration,
    /// Calls that may have changed the cluster, counted when they return
    /// (done or failed): what a cluster snapshot read before is out of date.
    changes: AtomicU64,
    /// `MAX_PVE_COMMANDS`: calls running at once (each a process on a
    /// node with the `cli` backend); the rest wait their turn, which does
    /// not count against their timeout.
    running: tokio::sync::Semaphore,
    observer: Arc<dyn CallObserver>,
    /// Told of each change this port made (not of `note_change`): other
    /// processes on the same cluster read it again.
    announce: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Timed {
    pub fn new(pve: Arc<dyn Pve>, short: Duration, long: Duration) -> Timed {
        Timed::bounded(pve, (short, long), 64)
    }

    pub fn bounded(pve: Arc<dyn Pve>, (short, long): (Duration, Duration), max: usize) -> Timed {
        Timed {
            pve,
            short,
            long,
            changes: AtomicU64::new(0),
            running: tokio::sync::Semaphore::new(max.max(1)),
            observer: Arc::new(Unobserved),
            announce: None,
        }
    }

    /// Tells `observer` of every call.
    pub fn observed(mut self, observer: Arc<dyn CallObserver>) -> Timed {
        self.observer = observer;
        self
    }

    /// Calls `announce` after each change made through this port.
    pub fn announcing(mut self, announce: Arc<dyn Fn() + Send + Sync>) -> Timed {
        self.announce = Some(announce);
        self
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        if let Some(announce) = &self.announce {
            announce();
        }
    }

    /// How many changes went through (or around, see `note_change`) the port.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// The cluster changed by other means (the simulator's control routes).
    pub fn note_change(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// A call that changes the cluster: timed, and counted when it returns.
    async fn changing<T>(
        &self,
        class: Class,
        operation: &'static str,
        command: impl FnOnce() -> String,
        call: impl Future<Output = Result<T, PveError>>,
    ) -> Result<T, PveError> {
        let result = self.within(class, operation, command, call).await;
        self.changed();
        result
    }

    pub fn limit(&self, class: Class) -> Duration {
        match class {
            Class::Short => self.short,
            Class::Long => self.long,
            Class::Attempt => self.short.min(ATTEMPT),
        }
    }

    /// `operation` names the call in `/metrics`: the port's method, the
    /// same whichever backend runs it.
    async fn within<T>(
        &self,
        class: Class,
        operation: &'static str,
        command: impl FnOnce() -> String,
        call: impl Future<Output = Result<T, PveError>>,
    ) -> Result<T, PveError> {
        let limit = self.limit(class);
        // Never closed: a permit always comes.
        let _turn = self.running.acquire().await.ok();
        // Timed from the turn on: the wait for one is pvedeck's, not Proxmox's.
        let began = std::time::Instant::now();
        let result = match tokio::time::timeout(limit, call).await {
            Ok(result) => result,
            Err(_) => Err(PveError::Timeout {
                command: command(),
                secs: limit.as_secs(),
            }),
        };
        self.observer
            .call(operation, result.is_ok(), began.elapsed());
        result
    }

    pub async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError> {
        let what = || "pvesh get /cluster/resources --type vm".to_string();
        self.within(Class::Short, "cluster_vms", what, self.pve.cluster_vms())
            .await
    }

    pub async fn cluster_nodes(&self) -> Result<Vec<NodeResource>, PveError> {
        let what = || "pvesh get /cluster/resources --type node".to_string();
        self.within(
            Class::Short,
            "cluster_nodes",
            what,
            self.pve.cluster_nodes(),
        )
        .await
    }

    pub async fn node_status(&self, node: &str) -> Result<NodeStatus, PveError> {
        let what = || format!("pvesh get /nodes/{node}/status");
        self.within(
            Class::Short,
            "node_status",
            what,
            self.pve.node_status(node),
        )
        .await
    }

    pub async fn rrddata(
        &self,
        node: &str,
        timeframe: pvedeck_domain::types::Timeframe,
    ) -> Result<Vec<RrdRow>, PveError> {
        let what = || {
            format!(
                "pvesh get /nodes/{node}/rrddata --timeframe {}",
                timeframe.as_str()
            )
        };
        let call = self.pve.rrddata(node, timeframe);
        self.within(Class::Short, "rrddata", what, call).await
    }

    pub async fn storage_status(&self, node: &str) -> Result<Vec<StorageStatus>, PveError> {
        let what = || "pvesm status".to_string();
        self.within(
            Class::Short,
            "storage_status",
            what,
            self.pve.storage_status(node),
        )
        .await
    }

    pub async fn create(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError> {
        let what = || "qm create".to_string();
        self.changing(
            Class::Short,
            "create",
            what,
            self.pve.create(node, vmid, options),
        )
        .await
    }

    pub async fn import_disk(
        &self,
        node: &str,
        vmid: u32,
        image: &DiskImage,
        storage: &str,
        out: LineSink<'_>,
    ) -> Result<String, PveError> {
        let what = || "qm importdisk".to_string();
        let call = self.pve.import_disk(node, vmid, image, storage, out);
        self.changing(Class::Long, "import_disk", what, call).await
    }

    pub fn fetches_images(&self) -> bool {
        self.pve.fetches_images()
    }

    pub fn imports_on_any_node(&self) -> bool {
        self.pve.imports_on_any_node()
    }

    /// A download: the long limit. It changes no VM, so the snapshot is
    /// not marked stale.
    pub async fn fetch_image(
        &self,
        node: &str,
        fetch: &NodeFetch<'_>,
        out: LineSink<'_>,
    ) -> Result<Fetched, PveError> {
        let what = || format!("download-url {}", fetch.url);
        self.within(
            Class::Long,
            "fetch_image",
            what,
            self.pve.fetch_image(node, fetch, out),
        )
        .await
    }

    pub async fn set(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError> {
        let what = || "qm set".to_string();
        self.changing(Class::Short, "set", what, self.pve.set(node, vmid, options))
            .await
    }

    pub async fn resize(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<String, PveError> {
        let what = || "qm resize".to_string();
        let call = self.pve.resize(node, vmid, disk, size);
        self.changing(Class::Short, "resize", what, call).await
    }

    pub async fn cluster_firewall(&self) -> Result<bool, PveError> {
        let what = || "pvesh get /cluster/firewall/options".to_string();
        self.within(
            Class::Short,
            "cluster_firewall",
            what,
            self.pve.cluster_firewall(),
        )
        .await
    }

    /// The ipset and the options: a few calls under one short timeout.
    pub async fn ip_filter(&self, node: &str, vmid: u32, filter: IpFilter) -> Result<(), PveError> {
        let what = || format!("pvesh set /nodes/{node}/qemu/{vmid}/firewall");
        let call = self.pve.ip_filter(node, vmid, filter);
        self.changing(Class::Short, "ip_filter", what, call).await
    }

    pub async fn config(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<BTreeMap<String, String>, PveError> {
        let what = || "qm config".to_string();
        self.within(Class::Short, "config", what, self.pve.config(node, vmid))
            .await
    }

    pub async fn status(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        let what = || "qm status".to_string();
        self.within(Class::Short, "status", what, self.pve.status(node, vmid))
            .await
    }

    pub async fn power(&self, node: &str, vmid: u32, action: PowerAction) -> Result<(), PveError> {
        let what = || format!("qm {}", action.verb());
        self.changing(
            Class::Short,
            "power",
            what,
            self.pve.power(node, vmid, action),
        )
        .await
    }

    pub async fn destroy(&self, node: &str, vmid: u32, skiplock: bool) -> Result<(), PveError> {
        let what = || "qm destroy".to_string();
        self.changing(
            Class::Short,
            "destroy",
            what,
            self.pve.destroy(node, vmid, skiplock),
        )
        .await
    }

    pub async fn migrate(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let what = || "qm migrate".to_string();
        let call = self.pve.migrate(node, vmid, target, out);
        self.changing(Class::Long, "migrate", what, call).await
    }

    /// A task a previous process waited on, to its end. Not under a
    /// timeout class: it runs on Proxmox's clock, within the backend's own
    /// limit for a task.
    pub async fn task_end(&self, upid: &str, out: LineSink<'_>) -> Option<Result<(), PveError>> {
        let ended = self.pve.task_end(upid, out).await;
        if ended.is_some() {
            self.changed();
        }
        ended
    }

    /// A clone: linked is a short task, a full copy a long one.
    pub async fn clone_vm(
        &self,
        node: &str,
        source: u32,
        vmid: u32,
        name: &str,
        mode: CloneMode,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let what = || "qm clone".to_string();
        let class = match mode {
            CloneMode::Linked => Class::Short,
            CloneMode::Full => Class::Long,
        };
        let call = self.pve.clone_vm(node, source, vmid, name, mode, out);
        self.changing(class, "clone_vm", what, call).await
    }

    pub async fn template(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        let what = || "qm template".to_string();
        self.changing(
            Class::Short,
            "template",
            what,
            self.pve.template(node, vmid),
        )
        .await
    }

    /// One try to reach the guest agent.
    pub async fn agent_ping(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        let what = || "qm agent ping".to_string();
        self.within(
            Class::Attempt,
            "agent_ping",
            what,
            self.pve.agent_ping(node, vmid),
        )
        .await
    }

    /// A command run by the guest agent; `long` for one that waits (for
    /// cloud-init to finish).
    pub async fn agent_exec(
        &self,
        node: &str,
        vmid: u32,
        argv: &[String],
        long: bool,
    ) -> Result<AgentExec, PveError> {
        let what = || "qm guest exec".to_string();
        let class = if long { Class::Long } else { Class::Short };
        let secs = u32::try_from(self.limit(class).as_secs()).unwrap_or(u32::MAX);
        let call = self.pve.agent_exec(node, vmid, argv, secs);
        self.within(class, "agent_exec", what, call)
            .await
            .map(AgentExec::bounded)
    }

    /// Opens a VM's console: the opening (a `vncproxy` call, an `ssh`
    /// start) under the short timeout; the stream itself is the relay's.
    pub async fn console(
        &self,
        node: &str,
        vmid: u32,
        kind: crate::ConsoleKind,
    ) -> Result<crate::ConsoleStream, PveError> {
        let what = || format!("console {} of {vmid}", kind.name());
        let call = self.pve.console(node, vmid, kind);
        self.within(Class::Short, "console", what, call).await
    }

    /// Whether something answers on `ip:port`; a probe that hangs is "no".
    pub async fn probe(&self, ip: Ipv4Addr, port: u16) -> bool {
        tokio::time::timeout(self.limit(Class::Attempt), self.pve.probe(ip, port))
            .await
            .unwrap_or(false)
    }

    /// One readiness try: `ssh <user>@<ip> '<READY_COMMAND>'`; the
    /// machine-id the guest told, if any.
    pub async fn guest_ready(&self, target: &GuestTarget) -> Result<Option<String>, PveError> {
        let what = || "ssh echo ready".to_string();
        let told = std::sync::Mutex::new(None);
        let keep = |line: &str| {
            let line = line.trim();
            if line.len() == 32 && line.bytes().all(|b| b.is_ascii_hexdigit()) {
                *lock(&told) = Some(line.to_string());
            }
        };
        let call = self.pve.guest_exec(target, &GuestCommand::Ready, &keep);
        self.within(Class::Attempt, "guest_ready", what, call)
            .await?;
        Ok(into_inner(told))
    }

    /// The init script over SSH, its output relayed.
    pub async fn guest_init(
        &self,
        target: &GuestTarget,
        command: &GuestCommand,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let what = || "ssh init script".to_string();
        let call = self.pve.guest_exec(target, command, out);
        self.within(Class::Long, "guest_init", what, call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend whose every call never returns — but `cluster_vms` when
    /// `gated`: that one counts the calls inside it and returns when the
    /// gate opens.
    #[derive(Default)]
    struct Stuck {
        gated: bool,
        inside: AtomicU64,
        most: AtomicU64,
        gate: tokio::sync::Notify,
    }

    #[async_trait::async_trait]
    impl Pve for Stuck {
        async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError> {
            if !self.gated {
                return std::future::pending().await;
            }
            let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            self.gate.notified().await;
            self.inside.fetch_sub(1, Ordering::SeqCst);
            Ok(Vec::new())
        }
        async fn cluster_nodes(&self) -> Result<Vec<NodeResource>, PveError> {
            std::future::pending().await
        }
        async fn node_status(&self, _: &str) -> Result<NodeStatus, PveError> {
            std::future::pending().await
        }
        async fn storage_status(&self, _: &str) -> Result<Vec<StorageStatus>, PveError> {
            std::future::pending().await
        }
        async fn rrddata(
            &self,
            _: &str,
            _: pvedeck_domain::types::Timeframe,
        ) -> Result<Vec<RrdRow>, PveError> {
            std::future::pending().await
        }
        async fn create(&self, _: &str, _: u32, _: &QmOptions) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn import_disk(
            &self,
            _: &str,
            _: u32,
            _: &DiskImage,
            _: &str,
            _: LineSink<'_>,
        ) -> Result<String, PveError> {
            std::future::pending().await
        }
        async fn set(&self, _: &str, _: u32, _: &QmOptions) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn resize(&self, _: &str, _: u32, _: &str, _: &str) -> Result<String, PveError> {
            std::future::pending().await
        }
        async fn config(&self, _: &str, _: u32) -> Result<BTreeMap<String, String>, PveError> {
            std::future::pending().await
        }
        async fn status(&self, _: &str, _: u32) -> Result<String, PveError> {
            std::future::pending().await
        }
        async fn power(&self, _: &str, _: u32, _: PowerAction) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn destroy(&self, _: &str, _: u32, _: bool) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn migrate(&self, _: &str, _: u32, _: &str, _: LineSink<'_>) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn clone_vm(
            &self,
            _: &str,
            _: u32,
            _: u32,
            _: &str,
            _: CloneMode,
            _: LineSink<'_>,
        ) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn template(&self, _: &str, _: u32) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn agent_ping(&self, _: &str, _: u32) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn agent_exec(
            &self,
            _: &str,
            _: u32,
            _: &[String],
            _: u32,
        ) -> Result<AgentExec, PveError> {
            std::future::pending().await
        }
        async fn cluster_firewall(&self) -> Result<bool, PveError> {
            std::future::pending().await
        }
        async fn ip_filter(&self, _: &str, _: u32, _: IpFilter) -> Result<(), PveError> {
            std::future::pending().await
        }
        async fn probe(&self, _: Ipv4Addr, _: u16) -> bool {
            std::future::pending().await
        }
        async fn guest_exec(
            &self,
            _: &GuestTarget,
            _: &GuestCommand,
            _: LineSink<'_>,
        ) -> Result<(), PveError> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn at_most_max_pve_commands_run_at_once() {
        let pve = Arc::new(Stuck {
            gated: true,
            ..Stuck::default()
        });
        let long = Duration::from_secs(60);
        let timed = Arc::new(Timed::bounded(pve.clone(), (long, long), 2));
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let timed = timed.clone();
                tokio::spawn(async move { timed.cluster_vms().await })
            })
            .collect();
        // Let every task reach its turn or the semaphore.
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(pve.inside.load(Ordering::SeqCst), 2, "two run, three wait");
        for call in calls {
            // Each release lets one waiting call in; each call then waits too.
            pve.gate.notify_waiters();
            while !call.is_finished() {
                tokio::task::yield_now().await;
                pve.gate.notify_waiters();
            }
            assert!(call.await.expect("task").is_ok());
        }
        assert_eq!(pve.most.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn every_call_ends_at_its_class_timeout() {
        let timed = Timed::new(
            Arc::new(Stuck::default()),
            Duration::from_millis(20),
            Duration::from_millis(40),
        );
        let e = timed.node_status("pve1").await.unwrap_err();
        assert_eq!(
            e,
            PveError::Timeout {
                command: "pvesh get /nodes/pve1/status".into(),
                secs: 0
            }
        );
        let quiet = |_: &str| {};
        let started = std::time::Instant::now();
        let e = timed
            .migrate("pve1", 101, "pve2", &quiet)
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "qm migrate: no answer within 0s");
        assert!(
            started.elapsed() >= Duration::from_millis(40),
            "the long class"
        );
        assert!(!timed.probe(Ipv4Addr::LOCALHOST, 22).await);
        let e = timed.config("pve1", 101).await.unwrap_err();
        assert!(matches!(e, PveError::Timeout { .. }), "{e}");
        assert_eq!(timed.limit(Class::Attempt), Duration::from_millis(20));
        // Changes are counted, failed or not; reads are not.
        assert_eq!(timed.changes(), 1, "the migration");
    }
}
