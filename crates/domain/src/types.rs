//! Types shared by the browser and the server: what `/api/vm/list` returns and
//! what the overview page renders are the same values.

use serde::{Deserialize, Serialize};

use crate::request::{SetCpu, SetDisk, SetMemory};
use crate::rules::Limits;

/// Which VMs `/api/vm/list` returns (`?disable=`): go-pve-qemu's
/// "disabled" means stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum ListFilter {
    #[default]
    All,
    Running,
    Stopped,
}

impl ListFilter {
    /// `?disable=1` → stopped only, `?disable=0` → running only; any other
    /// value (or none) → all, as go-pve-qemu treated it.
    pub fn from_disable(value: Option<&str>) -> ListFilter {
        match value {
            Some("1") => ListFilter::Stopped,
            Some("0") => ListFilter::Running,
            _ => ListFilter::All,
        }
    }
}

/// The response of `GET /api/vm/list` (docs/provisioning.md#the-vm-list). The first keys are
/// go-pve-qemu's; the ones after them are pvedeck's additions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VmList {
    pub count: usize,
    pub list: Vec<VmSummary>,
    pub cluster: Vec<NodeSummary>,
}

/// One Proxmox cluster a pvedeck serves (`CLUSTERS`), as last read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterInfo {
    pub name: String,
    /// Milliseconds since it was last read (0: never yet).
    pub age_ms: u64,
    /// Not read within three refresh intervals, or its last read failed:
    /// down, as far as pvedeck can tell.
    pub stale: bool,
    /// Why its last read failed.
    pub failure: Option<String>,
}

/// VMs the overview shows at a time: a page of a large cluster renders fast.
pub const OVERVIEW_PAGE: usize = 200;

/// The list with how old its data is: what the overview shows. `list.list`
/// is one page of the VMs the filter keeps (`list.count` of them in all);
/// `list.cluster` is every node's figures over all VMs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub list: VmList,
    /// The page shown, from 0, and how many there are.
    pub page: usize,
    pub pages: usize,
    /// Milliseconds since the cluster was read.
    pub age_ms: u64,
    /// Older than three refresh intervals: refreshes have been failing.
    pub stale: bool,
    /// Why the last refresh failed, when it did.
    pub failure: Option<String>,
    /// Each online node's last hour (CPU and RAM), for the node cards.
    #[serde(default)]
    pub sparks: Vec<NodeSpark>,
    /// The clusters, when there are several: the node cards are grouped
    /// under them.
    #[serde(default)]
    pub clusters: Vec<ClusterInfo>,
}

/// Which stretch of a node's history (`pvesh get /nodes/<n>/rrddata
/// --timeframe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Timeframe {
    #[default]
    Hour,
    Day,
    Week,
}

impl Timeframe {
    pub const ALL: [Timeframe; 3] = [Timeframe::Hour, Timeframe::Day, Timeframe::Week];

    pub fn as_str(self) -> &'static str {
        match self {
            Timeframe::Hour => "hour",
            Timeframe::Day => "day",
            Timeframe::Week => "week",
        }
    }

    /// `hour`, `day`, `week`; anything else is not a timeframe.
    pub fn parse(raw: &str) -> Option<Timeframe> {
        Timeframe::ALL.into_iter().find(|t| t.as_str() == raw)
    }
}

/// A node card's sparklines, drawn on the server: the browser only places
/// them (no drawing code in its bundle).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct NodeSpark {
    pub node: String,
    pub cpu: Spark,
    pub memory: Spark,
}

/// One sparkline: its SVG path and its figures in words.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Spark {
    pub d: String,
    pub words: String,
}

/// A node page's charts, drawn on the server (`charts::draw`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCharts {
    pub node: String,
    pub timeframe: Timeframe,
    /// Rows of history drawn.
    pub points: usize,
    pub charts: Vec<ChartView>,
}

/// One chart: its scale, its reach and its lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChartView {
    pub title: String,
    /// For its element id and `data-chart`.
    pub key: String,
    /// The scale's top and bottom as text (`100%`, `0 GiB`).
    pub top: String,
    pub bottom: String,
    /// `69 min ago`.
    pub reach: String,
    pub lines: Vec<LineView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineView {
    pub name: String,
    /// Its colour by CSS class; the legend names it, so colour is never
    /// the only carrier.
    pub class: String,
    pub d: String,
    /// `now 23%, average 20%, peak 35%`.
    pub words: String,
}

/// One row of `pvesh get /nodes/<node>/rrddata --timeframe <t>`: a step
/// of Proxmox's round-robin history of the node. Rows from before it had
/// data carry only `time`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct RrdRow {
    /// Unix time, seconds.
    pub time: i64,
    /// Share of the node's CPUs in use, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxcpu: Option<f64>,
    /// Share of CPU time waiting for I/O, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iowait: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loadavg: Option<f64>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memused: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memtotal: Option<f64>,
    /// Bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netin: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netout: Option<f64>,
}

/// A node's history over a timeframe, as the server read it (the
/// charts' input; never sent to the browser).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeHistory {
    pub node: String,
    pub timeframe: Timeframe,
    pub rows: Vec<RrdRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VmSummary {
    /// The cluster it is in (`CLUSTERS`; `default` without it).
    #[serde(default)]
    pub cluster: String,
    pub vmid: u32,
    pub name: String,
    /// The VM's first tag; `-` for a reserved id.
    pub os: String,
    pub running: bool,
    /// `-` for a reserved id.
    pub node: String,
    /// vCPUs.
    pub cpu: u32,
    /// GiB, 2 decimals.
    pub disk: f64,
    /// GiB, 2 decimals.
    pub memory: f64,
    /// GiB, 2 decimals.
    pub memory_used: f64,
    /// Proxmox's own status word (`running`, `stopped`, `paused`, `unknown`…);
    /// `reserved` for a reserved id.
    pub status: String,
    /// The address pvedeck gives this id (gateway prefix + vmid).
    pub ip: String,
    pub reserved: bool,
    /// Whether pvedeck acts on it (`MANAGE`): the others are listed, marked,
    /// and their actions answer 403.
    #[serde(default)]
    pub managed: bool,
    /// Set while Proxmox holds a lock on the VM (`create`, `migrate`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    /// The user it belongs to, where one does (shown to admins; a VM
    /// without one is the admins').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeSummary {
    /// The cluster it is in (`CLUSTERS`; `default` without it).
    #[serde(default)]
    pub cluster: String,
    pub node: String,
    pub running: bool,
    /// Logical CPUs.
    pub max_cpu: u32,
    /// GiB.
    pub max_memory: f64,
    /// % of the node's CPUs allocated to the VMs listed.
    pub cpu: f64,
    /// % of the node's memory allocated to the VMs listed.
    pub memory: f64,
    /// % of the node's memory in use.
    pub memory_used: f64,
    /// GiB of disk allocated to the VMs listed.
    pub disk: f64,
    /// `online`, `offline` or `unknown`.
    pub status: String,
    /// % of CPU time in use.
    pub cpu_used: f64,
    /// vCPUs allocated to the VMs listed.
    pub vcpus: u32,
    /// GiB of the node's disk.
    pub max_disk: f64,
    /// GiB of the node's disk in use.
    pub disk_used: f64,
    /// How many of the listed VMs live on this node.
    pub vms: usize,
}

/// How an event of a job's timeline went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum StepStatus {
    Processing,
    Success,
    Error,
}

/// One event of a job's timeline: what go-pve-qemu's SSE `data:` lines carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepEvent {
    /// `<stage> > <step>`, or just the step for lifecycle jobs.
    pub step: String,
    pub status: StepStatus,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The VM's SSH host key fingerprint (`SHA256:…`), as its guest agent
    /// reported it: on the install's last events, clone path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
}

/// A stored event: its place in the job's log and when it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "JobEventFields")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobEvent {
    pub seq: u64,
    /// Unix time, milliseconds.
    pub at: i64,
    #[serde(flatten)]
    pub event: StepEvent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum JobKind {
    Install,
    Start,
    Reboot,
    Migrate,
    /// Building a golden template (`POST /api/templates`).
    Template,
}

impl JobState {
    /// The word the API uses (`running`, `succeeded`…).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Interrupted => "interrupted",
        }
    }
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Install => "install",
            JobKind::Start => "start",
            JobKind::Reboot => "reboot",
            JobKind::Migrate => "migrate",
            JobKind::Template => "template",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum JobState {
    Running,
    Succeeded,
    Failed,
    /// The server stopped while the job ran.
    Interrupted,
}

/// What became of the VM when a job failed (docs/provisioning.md#failure-contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum VmOutcome {
    /// No VM was created.
    None,
    /// The half-made VM was destroyed.
    Destroyed,
    /// The VM stays, for debugging.
    Kept,
}

/// A golden template pvedeck built (or is building): `GET /api/templates`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TemplateInfo {
    pub vmid: u32,
    /// `tpl-<os>-<version>`.
    pub name: String,
    pub os: String,
    pub version: String,
    pub node: String,
    /// `ready`; `building` while its job runs; `retired` when a rebuild
    /// replaced it but linked clones still use its disk (no new clone
    /// comes from it; delete it once they are gone).
    pub state: String,
    /// The build job: while it runs, or the one that built it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// When it was built (milliseconds since the epoch), where pvedeck
    /// recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub built: Option<i64>,
    /// The cloud image it was built from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// The `/templates` page: the templates, and the server's clock to tell
/// their age by (the same on the server and after hydration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplatesPage {
    pub now: i64,
    pub templates: Vec<TemplateInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    pub id: u64,
    pub kind: JobKind,
    pub vmid: Option<u32>,
    pub state: JobState,
    /// A line for lists: `install debian 12 "web"`, `migrate 101 → pve2`.
    pub title: String,
    /// Unix time, milliseconds.
    pub created: i64,
    pub finished: Option<i64>,
    /// Set when the job failed: what became of the VM.
    pub outcome: Option<VmOutcome>,
    /// Set when the job failed: the `step` that failed.
    pub failed_step: Option<String>,
    /// Who started it, when it was a user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A job and its whole timeline so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "JobDetailFields")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobDetail {
    #[serde(flatten)]
    pub job: Job,
    pub events: Vec<JobEvent>,
}

// `JobEvent` and `JobDetail` are read field by field, as their JSON has
// them, not through `#[serde(flatten)]`: its buffering deserializer would
// add about 10 KB (gzip) to the browser bundle.

#[derive(Deserialize)]
struct JobEventFields {
    seq: u64,
    at: i64,
    step: String,
    status: StepStatus,
    message: String,
    #[serde(default)]
    vm_id: Option<u32>,
    #[serde(default)]
    ip: Option<String>,
    #[serde(default)]
    host_key: Option<String>,
}

impl From<JobEventFields> for JobEvent {
    fn from(f: JobEventFields) -> JobEvent {
        JobEvent {
            seq: f.seq,
            at: f.at,
            event: StepEvent {
                step: f.step,
                status: f.status,
                message: f.message,
                vm_id: f.vm_id,
                ip: f.ip,
                host_key: f.host_key,
            },
        }
    }
}

#[derive(Deserialize)]
struct JobDetailFields {
    id: u64,
    kind: JobKind,
    vmid: Option<u32>,
    state: JobState,
    title: String,
    created: i64,
    finished: Option<i64>,
    outcome: Option<VmOutcome>,
    failed_step: Option<String>,
    #[serde(default)]
    owner: Option<String>,
    events: Vec<JobEvent>,
}

impl From<JobDetailFields> for JobDetail {
    fn from(f: JobDetailFields) -> JobDetail {
        JobDetail {
            job: Job {
                id: f.id,
                kind: f.kind,
                vmid: f.vmid,
                state: f.state,
                title: f.title,
                created: f.created,
                finished: f.finished,
                outcome: f.outcome,
                failed_step: f.failed_step,
                owner: f.owner,
            },
            events: f.events,
        }
    }
}

/// An OS pvedeck installs, with its versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsInfo {
    pub os: String,
    pub versions: Vec<String>,
    pub default_user: String,
}

/// What the create form needs from the server: the OS table, the limits of
/// its configuration (`VM_MAX_*`), the nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub oses: Vec<OsInfo>,
    pub limits: Limits,
    pub nodes: Vec<String>,
    pub main_node: String,
    /// Names of the golden templates ready to clone (`tpl-debian-12`).
    #[serde(default)]
    pub templates: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VmAction {
    Start,
    Stop,
    Shutdown,
    Reboot,
    Destroy,
}

impl VmAction {
    pub fn label(self) -> &'static str {
        match self {
            VmAction::Start => "Start",
            VmAction::Stop => "Stop",
            VmAction::Shutdown => "Shut down",
            VmAction::Reboot => "Reboot",
            VmAction::Destroy => "Destroy",
        }
    }

    /// go-pve-qemu's preconditions: these need the VM running, the others stopped.
    pub fn needs_running(self) -> bool {
        matches!(self, VmAction::Stop | VmAction::Shutdown | VmAction::Reboot)
    }
}

/// A change of a VM's resources, as the `set/*` routes take it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Resize {
    Cpu(SetCpu),
    Memory(SetMemory),
    Disk(SetDisk),
}

/// One VM for its page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmDetail {
    pub vm: VmSummary,
    /// `qm config`, as Proxmox shows it (the password masked).
    pub config: Vec<(String, String)>,
    /// Nodes it could move to: online, not its own.
    pub targets: Vec<String>,
    pub limits: Limits,
    /// The fingerprint of the host key SSH requires at the VM's address
    /// (pinned from its guest agent, or recorded at first contact).
    #[serde(default)]
    pub host_key: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_reads_back_what_it_writes() {
        let detail = JobDetail {
            job: Job {
                id: 7,
                kind: JobKind::Install,
                vmid: Some(101),
                state: JobState::Failed,
                title: "install debian 12".into(),
                created: 1,
                finished: Some(2),
                outcome: Some(VmOutcome::Destroyed),
                failed_step: Some("VM creation > creating VM".into()),
                owner: Some("alice".into()),
            },
            events: vec![JobEvent {
                seq: 1,
                at: 5,
                event: StepEvent {
                    step: "preparation > checking VMID".into(),
                    status: StepStatus::Success,
                    message: "[+] auto-assigned VMID: 101".into(),
                    vm_id: Some(101),
                    ip: None,
                    host_key: None,
                },
            }],
        };
        let json = serde_json::to_value(&detail).unwrap();
        // The API's shape: the job's and the event's fields at the top.
        assert_eq!(json["id"], 7);
        assert_eq!(json["events"][0]["step"], "preparation > checking VMID");
        assert!(json["events"][0].get("ip").is_none());
        let back: JobDetail = serde_json::from_value(json).unwrap();
        assert_eq!(back, detail);
    }
}
