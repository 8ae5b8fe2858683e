//! `PVE_BACKEND=api`: the `Pve` port over Proxmox's REST API. Every long
//! operation is a task: its UPID comes back at once, its log is relayed as
//! the step's output and its exit status decides. The VMs themselves are
//! reached as with the `cli` backend (a TCP probe, `ssh` to the guest with
//! its pinned host key): nothing here needs a shell on a node.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use pvedeck_config::ImageFetch;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::client::ApiClient;
use super::tasks::{self, TaskDone, TaskSource, TaskStatus, Upid};
use crate::cli::CliBackend;
use crate::firewall::{self, IpFilter};
use crate::{
    AgentExec, CloneMode, DiskImage, Fetched, GuestCommand, GuestTarget, LineSink, NodeFetch,
    NodeResource, NodeStatus, PowerAction, Pve, PveError, QmOptions, RrdRow, StorageStatus,
    VmResource,
};

/// How often a running task is looked at.
const TASK_POLL: Duration = Duration::from_millis(250);
/// Limits for a task: what moves data (import, clone, migration) may take
/// long; anything else that runs this long is stuck.
const TASK_LONG: Duration = Duration::from_secs(4 * 3600);
const TASK_SHORT: Duration = Duration::from_secs(15 * 60);

pub struct ApiBackend {
    client: ApiClient,
    /// Where images are put for `import-from` (`IMPORT_STORAGE`).
    import_storage: String,
    /// `IMAGE_FETCH`: the node downloads images, or pvedeck uploads them.
    image_fetch: ImageFetch,
    /// The guests are reached as with the `cli` backend: from pvedeck.
    guest: CliBackend,
}

fn bad(command: &str, detail: impl Into<String>) -> PveError {
    PveError::Parse {
        command: command.to_string(),
        detail: detail.into(),
    }
}

fn decode<T: DeserializeOwned>(command: &str, value: Value) -> Result<T, PveError> {
    serde_json::from_value(value).map_err(|e| bad(command, e.to_string()))
}

/// A listing, read entry by entry (`json::listing`).
fn decode_list<T: DeserializeOwned>(command: &str, value: Value) -> Result<Vec<T>, PveError> {
    crate::json::listing(command, value).map_err(|e| bad(command, e))
}

/// A config value as `qm config` prints it: numbers and strings alike.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The name an image gets in the `import` content: Proxmox takes only
/// `.qcow2`, `.raw`, `.vmdk` (and `.ova`) there, and only plain characters,
/// so Ubuntu's `.img` (a qcow2) is renamed. `tag` (a checksum's start) goes
/// before the extension: a newer image the mirror publishes under the same
/// name gets a volume of its own instead of colliding with the old one.
pub fn import_name(file: &str, tag: Option<&str>) -> String {
    let stem = file.strip_suffix(".img").unwrap_or(file);
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let (base, ext) = match [".qcow2", ".raw", ".vmdk", ".ova"]
        .iter()
        .find_map(|ext| clean.strip_suffix(ext).map(|base| (base, *ext)))
    {
        Some(split) => split,
        None => (clean.as_str(), ".qcow2"),
    };
    match tag {
        Some(tag) => format!("{base}-{tag}{ext}"),
        None => format!("{base}{ext}"),
    }
}

/// The checksum's first 16 hex digits: 64 bits tell images apart.
fn checksum_tag(hex: &str) -> &str {
    hex.get(..16).unwrap_or(hex)
}

impl ApiBackend {
    pub fn new(
        client: ApiClient,
        import_storage: String,
        image_fetch: ImageFetch,
        guest: CliBackend,
    ) -> ApiBackend {
        ApiBackend {
            client,
            import_storage,
            image_fetch,
            guest,
        }
    }

    /// Whether `volid` is in the import storage's `import` content on
    /// `node` (and of `size` bytes, when given).
    async fn has_import(
        &self,
        node: &str,
        volid: &str,
        size: Option<u64>,
    ) -> Result<bool, PveError> {
        let storage = &self.import_storage;
        let listed = self
            .client
            .get(
                &format!("/nodes/{node}/storage/{storage}/content"),
                &[("content", "import".to_string())],
            )
            .await?;
        Ok(listed.as_array().is_some_and(|volumes| {
            volumes.iter().any(|v| {
                v.get("volid").and_then(Value::as_str) == Some(volid)
                    && size.is_none_or(|size| v.get("size").and_then(Value::as_u64) == Some(size))
            })
        }))
    }

    fn vm_path(node: &str, vmid: u32) -> String {
        format!("/nodes/{node}/qemu/{vmid}")
    }

    /// The parameters of a create or a config change. `sshkeys` names a
    /// file (as for `qm`): the API takes its content, percent-encoded.
    async fn params(options: &QmOptions) -> Result<Vec<(&str, String)>, PveError> {
        let mut params = Vec::with_capacity(options.len());
        for (key, value) in options {
            let value = if key == "sshkeys" {
                let keys = tokio::fs::read_to_string(value).await.map_err(|e| {
                    PveError::command("sshkeys", format!("cannot read {value}: {e}"), 1)
                })?;
                crate::escape::uri_escape(&keys)
            } else {
                value.clone()
            };
            params.push((key.as_str(), value));
        }
        Ok(params)
    }

    /// Follows the task an answer names (if it names one) to its end.
    async fn finish(
        &self,
        answer: Value,
        out: LineSink<'_>,
        limit: Duration,
    ) -> Result<TaskDone, PveError> {
        match answer {
            Value::String(text) => {
                let upid: Upid = text
                    .trim()
                    .parse()
                    .map_err(|_| bad("task", format!("not a UPID: {text}")))?;
                // In the job's record before the wait: a restart follows it.
                crate::owner::started(&upid.to_string());
                let done = tasks::follow(self, &upid, 0, out, TASK_POLL, limit).await;
                crate::owner::ended();
                done
            }
            // Synchronous answers (PUT config; resize before PVE 8).
            _ => Ok(TaskDone { warnings: 0 }),
        }
    }

    async fn task(
        &self,
        answer: Result<Value, PveError>,
        out: LineSink<'_>,
        limit: Duration,
    ) -> Result<(), PveError> {
        self.finish(answer?, out, limit).await.map(drop)
    }

    /// Uploads a cached image into the node's `import` content, unless a
    /// file of that name and size is there; its volume id.
    async fn upload(
        &self,
        node: &str,
        image: &Path,
        out: LineSink<'_>,
    ) -> Result<String, PveError> {
        let file = image
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = import_name(&file, None);
        let storage = &self.import_storage;
        let volid = format!("{storage}:import/{name}");
        let size = tokio::fs::metadata(image)
            .await
            .map_err(|e| PveError::command("upload", format!("{}: {e}", image.display()), 1))?
            .len();
        if self.has_import(node, &volid, Some(size)).await? {
            out(&format!("{volid} is on node {node} already"));
            return Ok(volid);
        }
        out(&format!(
            "uploading {} to {volid} on node {node}",
            image.display()
        ));
        let answer = self
            .client
            .upload(
                &format!("/nodes/{node}/storage/{storage}/upload"),
                &[("content", "import")],
                &name,
                image,
                size,
            )
            .await?;
        self.finish(answer, out, TASK_LONG).await?;
        Ok(volid)
    }
}

/// The privileges pvedeck's token needs, by ACL path, and why (the README
/// lists the same). `{assign}`, `{import}`, `{node}` are the settings'.
const NEEDED: &[(&str, &[&str])] = &[
    (
        "/vms",
        &[
            "VM.Allocate",
            "VM.Audit",
            "VM.Clone",
            "VM.Config.CPU",
            "VM.Config.Memory",
            "VM.Config.Disk",
            "VM.Config.Network",
            "VM.Config.Cloudinit",
            "VM.Config.Options",
            "VM.Config.HWType",
            "VM.Config.CDROM",
            "VM.PowerMgmt",
            "VM.Migrate",
        ],
    ),
    (
        "/storage/{assign}",
        &["Datastore.AllocateSpace", "Datastore.Audit"],
    ),
    (
        "/storage/{import}",
        &["Datastore.AllocateTemplate", "Datastore.Audit"],
    ),
    ("/nodes/{node}", &["Sys.Audit"]),
    // net0's bridge (PVE 8 checks bridges as SDN vnets).
    ("/sdn/zones/localnetwork/vmbr0", &["SDN.Use"]),
];

/// The guest agent's privileges: PVE 9 split them out of `VM.Monitor`.
/// `ping` takes `VM.GuestAgent.Audit` or `…Unrestricted`, `exec` and
/// `exec-status` only `…Unrestricted` (qemu-server
/// `PVE/API2/Qemu/Agent.pm`, `register_command` and `exec`): that one
/// covers all pvedeck asks of the agent.
fn agent_privileges(major: u32) -> &'static [&'static str] {
    if major >= 9 {
        &["VM.GuestAgent.Unrestricted"]
    } else {
        &["VM.Monitor"]
    }
}

/// A privilege check of the preflight, as Proxmox's permission schemas
/// combine them.
enum Need {
    One(String, &'static str),
    /// All of the first's privileges, or all of the second's.
    Either(
        (String, &'static [&'static str]),
        (String, &'static [&'static str]),
    ),
}

impl Need {
    fn paths(&self) -> Vec<&str> {
        match self {
            Need::One(path, _) => vec![path],
            Need::Either((a, _), (b, _)) => vec![a, b],
        }
    }

    /// What the token lacks, in words, or `None`.
    fn missing(&self, has: &dyn Fn(&str, &str) -> bool) -> Option<String> {
        match self {
            Need::One(path, privilege) => {
                (!has(path, privilege)).then(|| format!("token lacks {privilege} on {path}"))
            }
            Need::Either((a, first), (b, second)) => {
                let all = |path: &str, privs: &[&str]| privs.iter().all(|p| has(path, p));
                (!all(a, first) && !all(b, second)).then(|| {
                    format!(
                        "token lacks {} on {a} (or {} on {b})",
                        first.join(" and "),
                        second.join(" and ")
                    )
                })
            }
        }
    }
}

/// The tags pvedeck sets: its own on VMs and templates, and the OS's.
fn own_tags() -> Vec<&'static str> {
    let mut tags = vec!["pvedeck", "pvedeck-template"];
    tags.extend(pvedeck_domain::os::Os::ALL.iter().map(|os| os.name()));
    tags
}

/// Whether datacenter.cfg's `user-tag-access` and `registered-tags` refuse
/// pvedeck's tags to a token without `Sys.Modify` on `/` (pve-guest-common
/// `PVE/GuestHelpers.pm`, `assert_tag_permissions` and `get_allowed_tags`):
/// `free` (the default) and `existing` allow them (`existing`: once any VM
/// has them), `list` only those listed, `none` none; a privileged tag
/// never (`registered-tags`). The refusal in words, or `None`.
fn tags_refused(options: &Value) -> Option<String> {
    let access = options.get("user-tag-access");
    let mode = access
        .and_then(|a| a.get("user-allow"))
        .and_then(Value::as_str)
        .unwrap_or("free");
    let listed: Vec<&str> = access
        .and_then(|a| a.get("user-allow-list"))
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let privileged: Vec<&str> = options
        .get("registered-tags")
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let refused: Vec<&str> = own_tags()
        .into_iter()
        .filter(|tag| {
            privileged.contains(tag)
                || match mode {
                    "none" => true,
                    "list" => !listed.contains(tag),
                    _ => false,
                }
        })
        .collect();
    (!refused.is_empty()).then(|| {
        format!(
            "datacenter.cfg refuses the tags {} to this token (user-tag-access: user-allow={mode}{}): \
             grant it Sys.Modify on /, or allow the tags (e.g. `user-allow-list` in Datacenter → \
             Options → User Tag Access)",
            refused.join(", "),
            if privileged.is_empty() { "" } else { ", registered-tags" }
        )
    })
}

/// `9.1.2` → `(9, 1)`.
fn version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

impl ApiBackend {
    /// `tags_refused` on `/cluster/options`, unless the token has
    /// `Sys.Modify` on `/`. Without `Sys.Audit` on `/` the options answer
    /// leaves the tag settings out (pve-manager `PVE/API2/Cluster.pm`,
    /// `get_options`) rather than refusing: the check is then left to the
    /// first `qm set`, whose 403 names the tag.
    async fn tag_access(&self, has: &dyn Fn(&str, &str) -> bool) -> Option<String> {
        if has("/", "Sys.Modify") {
            return None;
        }
        if !has("/", "Sys.Audit") {
            tracing::info!("no Sys.Audit on /: datacenter.cfg's tag access not checked");
            return None;
        }
        match self.client.get("/cluster/options", &[]).await {
            Ok(options) => tags_refused(&options),
            Err(e) => {
                tracing::info!(
                    "cannot read /cluster/options ({}): tag access not checked",
                    e.message()
                );
                None
            }
        }
    }

    /// Checks at start-up what would otherwise fail mid-install: the
    /// certificate and the token (`/version`), Proxmox 8.4 or later (for
    /// the `import` content), each privilege pvedeck uses, and the `import`
    /// content on `IMPORT_STORAGE`. Every problem found, in words that name
    /// the setting or the privilege.
    pub async fn preflight(&self, config: &pvedeck_config::Config) -> Result<(), Vec<String>> {
        let about = self
            .client
            .get("/version", &[])
            .await
            .map_err(|e| vec![e.message()])?;
        let shown = about
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut problems = Vec::new();
        let (major, minor) = version(&shown).unwrap_or((0, 0));
        if (major, minor) < (8, 4) {
            problems.push(format!(
                "Proxmox VE {shown} is older than 8.4, the first with the `import` content the api \
                 backend puts images into"
            ));
        }
        let node = config.main_node.as_str();
        // Every node's status is read (the CPU baseline of the whole
        // cluster), so `Sys.Audit` is needed on each, not only on MAIN_NODE.
        let mut nodes = vec![node.to_string()];
        match self.cluster_nodes().await {
            Ok(all) => nodes.extend(all.into_iter().map(|n| n.node).filter(|n| n != node)),
            Err(e) => problems.push(e.message()),
        }
        let mut wanted: Vec<Need> = Vec::new();
        for (path, privileges) in NEEDED {
            let paths: Vec<String> = if path.contains("{node}") {
                nodes.iter().map(|n| path.replace("{node}", n)).collect()
            } else {
                vec![
                    path.replace("{assign}", &config.assign_storage)
                        .replace("{import}", &self.import_storage),
                ]
            };
            for path in paths {
                wanted.extend(privileges.iter().map(|p| Need::One(path.clone(), p)));
            }
        }
        wanted.extend(
            agent_privileges(major)
                .iter()
                .map(|p| Need::One("/vms".into(), p)),
        );
        if self.image_fetch == ImageFetch::Download {
            // `download-url` lets the node open connections: Proxmox takes
            // `Sys.AccessNetwork` on the node, or `Sys.Audit` with
            // `Sys.Modify` on `/` (pve-storage `PVE/API2/Storage/Status.pm`,
            // `download_url`'s permissions).
            wanted.push(Need::Either(
                (format!("/nodes/{node}"), &["Sys.AccessNetwork"]),
                ("/".to_string(), &["Sys.Audit", "Sys.Modify"]),
            ));
        }
        let mut granted: BTreeMap<String, Option<Value>> = BTreeMap::new();
        let root = Need::One("/".into(), "Sys.Modify");
        for need in wanted.iter().chain([&root]) {
            for path in need.paths() {
                if granted.contains_key(path) {
                    continue;
                }
                let answer = match self
                    .client
                    .get("/access/permissions", &[("path", path.to_string())])
                    .await
                {
                    Ok(all) => all.get(path).cloned(),
                    Err(e) => {
                        problems.push(e.message());
                        None
                    }
                };
                granted.insert(path.to_string(), answer);
            }
        }
        let has = |path: &str, privilege: &str| {
            granted
                .get(path)
                .and_then(Option::as_ref)
                .and_then(|at| at.get(privilege))
                .is_some()
        };
        for need in &wanted {
            if let Some(missing) = need.missing(&has) {
                problems.push(missing);
            }
        }
        // Only the consoles need it: without it everything else works, and
        // a console says Proxmox's refusal.
        if !has("/vms", "VM.Console") {
            tracing::warn!(
                "the API token lacks VM.Console on /vms: VM consoles will be refused by Proxmox \
                 (vncproxy, termproxy, vncwebsocket; docs/backends.md#the-api-token)"
            );
        }
        if let Some(refusal) = self.tag_access(&has).await {
            problems.push(refusal);
        }
        match self
            .client
            .get(
                &format!("/nodes/{node}/storage"),
                &[("storage", self.import_storage.clone())],
            )
            .await
        {
            Ok(rows) => {
                // Found by its id: a server that ignores the filter lists all.
                let content = rows
                    .as_array()
                    .and_then(|rows| {
                        rows.iter().find(|row| {
                            row.get("storage").and_then(Value::as_str)
                                == Some(self.import_storage.as_str())
                        })
                    })
                    .and_then(|row| row.get("content"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                if !content.split(',').any(|c| c.trim() == "import") {
                    let storage = &self.import_storage;
                    let with = if content.is_empty() {
                        "import".to_string()
                    } else {
                        format!("{content},import")
                    };
                    problems.push(format!(
                        "IMPORT_STORAGE {storage} does not allow the `import` content (it has \
                         '{content}'): run `pvesm set {storage} --content {with}` on a node"
                    ));
                }
            }
            Err(e) => problems.push(e.message()),
        }
        if problems.is_empty() {
            tracing::info!(version = shown, "Proxmox API ready");
            Ok(())
        } else {
            Err(problems)
        }
    }
}

#[async_trait]
impl TaskSource for ApiBackend {
    async fn status(&self, upid: &Upid) -> Result<TaskStatus, PveError> {
        let path = format!("/nodes/{}/tasks/{upid}/status", upid.node);
        let status = self.client.get(&path, &[]).await?;
        Ok(TaskStatus {
            running: status.get("status").and_then(Value::as_str) == Some("running"),
            exitstatus: status
                .get("exitstatus")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    async fn log(&self, upid: &Upid, start: u64) -> Result<Vec<(u64, String)>, PveError> {
        let path = format!("/nodes/{}/tasks/{upid}/log", upid.node);
        let lines = self
            .client
            .get(
                &path,
                &[("start", start.to_string()), ("limit", "500".to_string())],
            )
            .await?;
        Ok(lines
            .as_array()
            .map(|lines| {
                lines
                    .iter()
                    .filter_map(|l| {
                        Some((l.get("n")?.as_u64()?, l.get("t")?.as_str()?.to_string()))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}

fn quiet(_: &str) {}

#[async_trait]
impl Pve for ApiBackend {
    async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError> {
        let all = self
            .client
            .get("/cluster/resources", &[("type", "vm".to_string())])
            .await?;
        decode_list("GET /cluster/resources?type=vm", all)
    }

    async fn cluster_nodes(&self) -> Result<Vec<NodeResource>, PveError> {
        let all = self
            .client
            .get("/cluster/resources", &[("type", "node".to_string())])
            .await?;
        decode_list("GET /cluster/resources?type=node", all)
    }

    async fn node_status(&self, node: &str) -> Result<NodeStatus, PveError> {
        let path = format!("/nodes/{node}/status");
        let status = self.client.get(&path, &[]).await?;
        decode(&format!("GET {path}"), status)
    }

    async fn rrddata(
        &self,
        node: &str,
        timeframe: pvedeck_domain::types::Timeframe,
    ) -> Result<Vec<RrdRow>, PveError> {
        let path = format!("/nodes/{node}/rrddata");
        let query = [("timeframe", timeframe.as_str().to_string())];
        let rows = self.client.get(&path, &query).await?;
        decode_list(
            &format!("GET {path}?timeframe={}", timeframe.as_str()),
            rows,
        )
    }

    async fn storage_status(&self, node: &str) -> Result<Vec<StorageStatus>, PveError> {
        let path = format!("/nodes/{node}/storage");
        let rows = self
            .client
            .get(&path, &[("content", "images".to_string())])
            .await?;
        let command = format!("GET {path}?content=images");
        let rows = rows.as_array().ok_or_else(|| bad(&command, "not a list"))?;
        let kib = |row: &Value, key: &str| row.get(key).and_then(Value::as_u64).unwrap_or(0) / 1024;
        let flag = |row: &Value, key: &str| row.get(key).and_then(Value::as_u64).unwrap_or(0) == 1;
        // A row without a name cannot be chosen: skipped, the rest listed.
        rows.iter()
            .filter_map(|row| {
                let name = row.get("storage").and_then(Value::as_str)?;
                let status = match (flag(row, "enabled"), flag(row, "active")) {
                    (false, _) => "disabled",
                    (true, true) => "active",
                    (true, false) => "inactive",
                };
                Some(Ok(StorageStatus {
                    name: name.to_string(),
                    kind: row
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    status: status.to_string(),
                    total_kib: kib(row, "total"),
                    used_kib: kib(row, "used"),
                    avail_kib: kib(row, "avail"),
                }))
            })
            .collect()
    }

    async fn create(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError> {
        let mut params = Self::params(options).await?;
        params.insert(0, ("vmid", vmid.to_string()));
        let answer = self
            .client
            .post(&format!("/nodes/{node}/qemu"), &params)
            .await;
        self.task(answer, &quiet, TASK_SHORT).await
    }

    async fn import_disk(
        &self,
        node: &str,
        vmid: u32,
        image: &DiskImage,
        storage: &str,
        out: LineSink<'_>,
    ) -> Result<String, PveError> {
        let source = match image {
            DiskImage::File(path) => self.upload(node, path, out).await?,
            DiskImage::Volume(volid) => volid.clone(),
        };
        // The disk is imported where the CLI's `importdisk` would put it,
        // attached as it is imported (the engine attaches the same volume
        // again, which changes nothing).
        let path = format!("{}/config", Self::vm_path(node, vmid));
        let answer = self
            .client
            .post(
                &path,
                &[("scsi0", format!("{storage}:0,import-from={source}"))],
            )
            .await;
        self.task(answer, out, TASK_LONG).await?;
        let config = self.config(node, vmid).await?;
        config
            .get("scsi0")
            .and_then(|drive| drive.split(',').next())
            .map(str::to_string)
            .ok_or_else(|| bad(&format!("POST {path}"), "no scsi0 after the import"))
    }

    fn fetches_images(&self) -> bool {
        self.image_fetch == ImageFetch::Download
    }

    /// `download-url` into the `import` content, the mirror's checksum
    /// passed on so that the node checks what it fetched. The volume's
    /// name carries the checksum: one that is there is the same image.
    async fn fetch_image(
        &self,
        node: &str,
        fetch: &NodeFetch<'_>,
        out: LineSink<'_>,
    ) -> Result<Fetched, PveError> {
        let name = import_name(fetch.file, fetch.checksum.map(|(_, hex)| checksum_tag(hex)));
        let storage = &self.import_storage;
        let volid = format!("{storage}:import/{name}");
        if self.has_import(node, &volid, None).await? {
            return Ok(Fetched {
                volid,
                present: true,
            });
        }
        let mut params = vec![
            ("content", "import".to_string()),
            ("filename", name),
            ("url", fetch.url.to_string()),
        ];
        if let Some((algo, hex)) = fetch.checksum {
            params.push(("checksum", hex.to_string()));
            params.push(("checksum-algorithm", algo.extension().to_string()));
        }
        let answer = self
            .client
            .post(
                &format!("/nodes/{node}/storage/{storage}/download-url"),
                &params,
            )
            .await?;
        let upid = answer
            .as_str()
            .and_then(|text| text.trim().parse::<Upid>().ok());
        match self.finish(answer, out, fetch.deadline).await {
            // A mirror that trickles keeps wget going for ever: the task is
            // stopped (Proxmox removes its partial file), not left to hold
            // the node's bandwidth and the storage's space.
            Err(PveError::Timeout { .. }) => {
                if let Some(upid) = upid {
                    let path = format!("/nodes/{}/tasks/{upid}", upid.node);
                    if let Err(e) = self.client.delete(&path, &[]).await {
                        tracing::warn!(%upid, error = %e, "cannot stop the node's image download");
                    }
                }
                return Err(PveError::command(
                    format!("download-url {}", fetch.url),
                    format!(
                        "the download on node {node} did not complete within \
                         IMAGE_DOWNLOAD_TIMEOUT_SECS ({}s); its task was stopped",
                        fetch.deadline.as_secs()
                    ),
                    1,
                ));
            }
            done => done?,
        };
        Ok(Fetched {
            volid,
            present: false,
        })
    }

    async fn set(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError> {
        let params = Self::params(options).await?;
        // POST: a task, so that allocating a disk (cloud-init's) does not
        // run into the proxy's 30 s limit of a synchronous call.
        let answer = self
            .client
            .post(&format!("{}/config", Self::vm_path(node, vmid)), &params)
            .await;
        self.task(answer, &quiet, TASK_SHORT).await
    }

    async fn resize(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<String, PveError> {
        let answer = self
            .client
            .put(
                &format!("{}/resize", Self::vm_path(node, vmid)),
                &[("disk", disk.to_string()), ("size", size.to_string())],
            )
            .await;
        self.task(answer, &quiet, TASK_SHORT).await?;
        Ok(String::new())
    }

    async fn config(&self, node: &str, vmid: u32) -> Result<BTreeMap<String, String>, PveError> {
        let path = format!("{}/config", Self::vm_path(node, vmid));
        let config = self.client.get(&path, &[]).await?;
        let map = config
            .as_object()
            .ok_or_else(|| bad(&format!("GET {path}"), "not an object"))?;
        Ok(map.iter().map(|(k, v)| (k.clone(), text(v))).collect())
    }

    async fn status(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        let path = format!("{}/status/current", Self::vm_path(node, vmid));
        let status = self.client.get(&path, &[]).await?;
        status
            .get("qmpstatus")
            .or_else(|| status.get("status"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad(&format!("GET {path}"), "no status"))
    }

    async fn power(&self, node: &str, vmid: u32, action: PowerAction) -> Result<(), PveError> {
        // `skiplock` is root@pam's alone; a token's stop waits for the lock
        // like any other.
        let path = format!("{}/status/{}", Self::vm_path(node, vmid), action.verb());
        let answer = self.client.post(&path, &[]).await;
        self.task(answer, &quiet, TASK_SHORT).await
    }

    async fn destroy(&self, node: &str, vmid: u32, _skiplock: bool) -> Result<(), PveError> {
        let answer = self
            .client
            .delete(
                &Self::vm_path(node, vmid),
                &[
                    ("purge", "1".to_string()),
                    ("destroy-unreferenced-disks", "1".to_string()),
                ],
            )
            .await;
        self.task(answer, &quiet, TASK_SHORT).await
    }

    async fn migrate(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let answer = self
            .client
            .post(
                &format!("{}/migrate", Self::vm_path(node, vmid)),
                &[
                    ("target", target.to_string()),
                    ("with-local-disks", "1".to_string()),
                ],
            )
            .await;
        self.task(answer, out, TASK_LONG).await
    }

    async fn clone_vm(
        &self,
        node: &str,
        source: u32,
        vmid: u32,
        name: &str,
        mode: CloneMode,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let full = if mode == CloneMode::Full { "1" } else { "0" };
        let answer = self
            .client
            .post(
                &format!("{}/clone", Self::vm_path(node, source)),
                &[
                    ("newid", vmid.to_string()),
                    ("name", name.to_string()),
                    ("full", full.to_string()),
                ],
            )
            .await;
        self.task(answer, out, TASK_LONG).await
    }

    async fn template(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        let answer = self
            .client
            .post(&format!("{}/template", Self::vm_path(node, vmid)), &[])
            .await;
        self.task(answer, &quiet, TASK_SHORT).await
    }

    async fn agent_ping(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        self.client
            .post(&format!("{}/agent/ping", Self::vm_path(node, vmid)), &[])
            .await
            .map(drop)
    }

    async fn agent_exec(
        &self,
        node: &str,
        vmid: u32,
        argv: &[String],
        timeout_secs: u32,
    ) -> Result<AgentExec, PveError> {
        let base = Self::vm_path(node, vmid);
        let params: Vec<(&str, String)> = argv.iter().map(|a| ("command", a.clone())).collect();
        let started = self
            .client
            .post(&format!("{base}/agent/exec"), &params)
            .await?;
        let command = format!("POST {base}/agent/exec");
        let pid = started
            .get("pid")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad(&command, "no pid"))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(timeout_secs));
        loop {
            // What the guest printed is in this answer: bounded as the
            // cli backend bounds `qm guest exec`.
            let status = self
                .client
                .get_bounded(
                    &format!("{base}/agent/exec-status"),
                    &[("pid", pid.to_string())],
                    crate::output::Limits::AGENT.kept,
                )
                .await?;
            let exited = status.get("exited").and_then(Value::as_u64) == Some(1);
            if exited {
                let field = |key: &str| {
                    status
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                let number = |key: &str| {
                    status
                        .get(key)
                        .and_then(Value::as_i64)
                        .and_then(|c| i32::try_from(c).ok())
                };
                return Ok(AgentExec {
                    exitcode: number("exitcode"),
                    signal: number("signal"),
                    out: field("out-data"),
                    err: field("err-data"),
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(AgentExec::default());
            }
            tokio::time::sleep(TASK_POLL).await;
        }
    }

    async fn task_end(&self, upid: &str, out: LineSink<'_>) -> Option<Result<(), PveError>> {
        let upid: Upid = upid.trim().parse().ok()?;
        // What it logged before the restart was relayed then: its count is
        // the log's `total`, not the last line of a first page (500 at most).
        let path = format!("/nodes/{}/tasks/{upid}/log", upid.node);
        let logged = match self
            .client
            .get_page(
                &path,
                &[("start", "0".to_string()), ("limit", "1".to_string())],
            )
            .await
        {
            // An empty log reads as one line, "no content" (pve-common
            // `dump_logfile_by_filehandle`): nothing logged yet.
            Ok((lines, _))
                if lines.get(0).and_then(|l| l.get("t")) == Some(&Value::from("no content")) =>
            {
                0
            }
            Ok((_, Some(total))) => total,
            Ok((lines, None)) => lines
                .as_array()
                .and_then(|l| l.last())
                .and_then(|l| l.get("n"))
                .and_then(Value::as_u64)
                .unwrap_or(0),
            Err(e) => return Some(Err(e)),
        };
        Some(
            tasks::follow(self, &upid, logged, out, TASK_POLL, TASK_LONG)
                .await
                .map(drop),
        )
    }

    async fn cluster_firewall(&self) -> Result<bool, PveError> {
        let options = self.client.get("/cluster/firewall/options", &[]).await?;
        Ok(firewall::cluster_enabled(&options))
    }

    /// pve-firewall's `PVE/API2/Firewall/VM.pm` and `IPSet.pm`, mounted at
    /// `/nodes/<node>/qemu/<vmid>/firewall` (qemu-server
    /// `PVE/API2/Qemu.pm`); each change needs `VM.Config.Network` on the VM
    /// (`rules_modify_permissions`, `set_options`).
    async fn ip_filter(&self, node: &str, vmid: u32, filter: IpFilter) -> Result<(), PveError> {
        let base = format!("{}/firewall", Self::vm_path(node, vmid));
        let ipsets = format!("{base}/ipset");
        let ipset = format!("{ipsets}/{}", firewall::IPSET);
        let listed = self.client.get(&ipsets, &[]).await?;
        if firewall::has_ipset(&listed) {
            // A clone's, copied from its template, or an earlier try's.
            self.client
                .delete(&ipset, &[("force", "1".to_string())])
                .await?;
        }
        if let IpFilter::Only(ip) = filter {
            self.client
                .post(
                    &ipsets,
                    &[
                        ("name", firewall::IPSET.to_string()),
                        ("comment", firewall::IPSET_COMMENT.to_string()),
                    ],
                )
                .await?;
            self.client
                .post(&ipset, &[("cidr", ip.to_string())])
                .await?;
        }
        let options: Vec<(&str, String)> = firewall::options(filter)
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        self.client
            .put(&format!("{base}/options"), &options)
            .await
            .map(drop)
    }

    async fn console(
        &self,
        node: &str,
        vmid: u32,
        kind: crate::ConsoleKind,
    ) -> Result<crate::ConsoleStream, PveError> {
        self.client.console(node, vmid, kind).await
    }

    async fn probe(&self, ip: Ipv4Addr, port: u16) -> bool {
        self.guest.probe(ip, port).await
    }

    async fn guest_exec(
        &self,
        target: &GuestTarget,
        command: &GuestCommand,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        self.guest.guest_exec(target, command, out).await
    }
}

#[cfg(test)]
mod preflight_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tags_are_refused_only_where_datacenter_cfg_says() {
        assert_eq!(tags_refused(&json!({})), None, "free by default");
        assert_eq!(
            tags_refused(&json!({"user-tag-access": {"user-allow": "existing"}})),
            None
        );
        let none = tags_refused(&json!({"user-tag-access": {"user-allow": "none"}})).unwrap();
        assert!(none.contains("pvedeck, pvedeck-template, debian"), "{none}");
        let listed = json!({"user-tag-access": {"user-allow": "list",
            "user-allow-list": ["pvedeck", "pvedeck-template", "debian", "ubuntu", "rockylinux"]}});
        assert_eq!(tags_refused(&listed), None);
        let registered = tags_refused(&json!({"registered-tags": ["pvedeck"]})).unwrap();
        assert!(
            registered.starts_with("datacenter.cfg refuses the tags pvedeck "),
            "{registered}"
        );
    }

    #[test]
    fn either_grant_of_download_url_satisfies_it() {
        let need = Need::Either(
            ("/nodes/pve1".into(), &["Sys.AccessNetwork"]),
            ("/".into(), &["Sys.Audit", "Sys.Modify"]),
        );
        let root_only =
            |path: &str, p: &str| path == "/" && ["Sys.Audit", "Sys.Modify"].contains(&p);
        assert_eq!(need.missing(&root_only), None);
        let audit_only = |path: &str, p: &str| path == "/" && p == "Sys.Audit";
        assert_eq!(
            need.missing(&audit_only).as_deref(),
            Some("token lacks Sys.AccessNetwork on /nodes/pve1 (or Sys.Audit and Sys.Modify on /)")
        );
    }

    #[test]
    fn the_agent_needs_unrestricted_alone_on_pve_9() {
        assert_eq!(agent_privileges(9), ["VM.GuestAgent.Unrestricted"]);
        assert_eq!(agent_privileges(8), ["VM.Monitor"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_the_agent_privileges_of_each() {
        assert_eq!(version("9.1.2"), Some((9, 1)));
        assert_eq!(version("8.4"), Some((8, 4)));
        assert_eq!(version("pve"), None);
        assert_eq!(agent_privileges(8), ["VM.Monitor"]);
        assert!(agent_privileges(9).contains(&"VM.GuestAgent.Unrestricted"));
    }

    #[test]
    fn import_names_end_as_proxmox_requires() {
        let name = |p: &str| import_name(p, None);
        assert_eq!(
            name("debian-12-generic-amd64.qcow2"),
            "debian-12-generic-amd64.qcow2"
        );
        assert_eq!(
            name("noble-server-cloudimg-amd64.img"),
            "noble-server-cloudimg-amd64.qcow2"
        );
        assert_eq!(
            name("Rocky-9-GenericCloud.latest.x86_64.qcow2"),
            "Rocky-9-GenericCloud.latest.x86_64.qcow2"
        );
        assert_eq!(name("we ird+name"), "we_ird_name.qcow2");
    }

    #[test]
    fn a_checksum_tag_goes_before_the_extension() {
        let sum = "0123456789abcdef0123456789abcdef";
        let tag = Some(checksum_tag(sum));
        assert_eq!(
            import_name("noble-server-cloudimg-amd64.img", tag),
            "noble-server-cloudimg-amd64-0123456789abcdef.qcow2"
        );
        assert_eq!(
            import_name("Rocky-9-GenericCloud.latest.x86_64.qcow2", tag),
            "Rocky-9-GenericCloud.latest.x86_64-0123456789abcdef.qcow2"
        );
        assert_eq!(checksum_tag("abc"), "abc");
    }
}
