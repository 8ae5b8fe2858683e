//! `/nodes/{node}/qemu…`: create, config (GET, async POST, sync PUT),
//! resize, status, power, destroy, migrate, clone, template. What Proxmox
//! checks before it forks its worker is answered at once (HTTP error);
//! the operation itself is the simulator's `qm_*` function run as a task.

use std::sync::Arc;

use axum::extract::{Path, State};
use pvedeck_proxmox::escape;
use pvedeck_proxmox::{CloneMode, PowerAction, PveError, QmOptions};
use pvedeck_sim::params::{self as qm_params, Verb};
use serde_json::{Value, json};
use sha2::Digest;

use super::super::error::ApiError;
use super::super::params::Params;
use super::super::tasks::{TaskLog, TaskState};
use super::super::{Api, ApiResult, data};
use super::{Vm, VmParams, vmid};

/// Options only root may use: a token never is root (Qemu.pm).
fn refuse_root_only(params: &Params, keys: &[&str]) -> Result<(), ApiError> {
    match keys.iter().find(|k| params.has(k)) {
        Some(key) => Err(ApiError::param(key, "Only root may use this option.")),
        None => Ok(()),
    }
}

fn is_disk_key(key: &str) -> bool {
    let bus = key.trim_end_matches(|c: char| c.is_ascii_digit());
    bus.len() < key.len() && matches!(bus, "scsi" | "virtio" | "sata" | "ide" | "efidisk")
}

/// A drive to import: `<key>=<target>:0,import-from=<source>[,opts]`.
#[derive(Debug, Clone, PartialEq)]
struct Import {
    key: String,
    target: String,
    source: String,
    /// The drive's other options, kept on the attached disk.
    extra: Vec<String>,
}

/// Splits the drives that import from the other options; the syntax is
/// checked as Qemu.pm's `$check_drive_param` does.
fn split_imports(options: Vec<(String, String)>) -> Result<(QmOptions, Vec<Import>), ApiError> {
    let mut plain = Vec::new();
    let mut imports = Vec::new();
    for (key, value) in options {
        if !(is_disk_key(&key) && value.contains("import-from=")) {
            plain.push((key, value));
            continue;
        }
        let mut parts = value.split(',');
        let first = parts.next().unwrap_or_default();
        let target = first
            .strip_suffix(":0")
            .filter(|t| !t.is_empty() && !t.contains('='));
        let mut source = None;
        let mut extra = Vec::new();
        for part in parts {
            match part.strip_prefix("import-from=") {
                Some(s) => source = Some(s.to_string()),
                None => extra.push(part.to_string()),
            }
        }
        let (Some(target), Some(source)) = (target, source) else {
            return Err(ApiError::param(
                &key,
                "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>",
            ));
        };
        imports.push(Import {
            key,
            target: target.to_string(),
            source,
            extra,
        });
    }
    Ok((plain, imports))
}

/// The storage a drive value allocates on or uses (`local-zfs:…`).
fn drive_storage(value: &str) -> Option<&str> {
    let volid = value.split(',').next()?;
    let (storage, _) = volid.split_once(':')?;
    (!storage.is_empty() && !storage.starts_with('/')).then_some(storage)
}

/// `sshkeys` arrives URL-encoded (format `urlencoded`); Proxmox decodes it
/// and checks every key. Returns the decoded text.
fn decode_sshkeys(value: &str) -> Result<String, ApiError> {
    if !escape::is_urlencoded(value) {
        return Err(ApiError::param(
            "sshkeys",
            format!("invalid urlencoded string: {value}"),
        ));
    }
    let text = escape::uri_unescape(value).into_owned();
    let valid = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .all(|l| pvedeck_domain::rules::is_openssh_key(l.trim()));
    if !valid {
        return Err(ApiError::new(500, "SSH public key validation error"));
    }
    Ok(text)
}

impl Api {
    /// The privileges setting `key` needs on `/vms/<vmid>`
    /// (`$check_vm_modify_config_perm`; any one of a group will do).
    fn check_option(&self, vmid: u32, key: &str, value: &str) -> Result<(), ApiError> {
        let path = format!("/vms/{vmid}");
        let group: &[&str] = match key {
            "cores" | "cpu" | "sockets" | "numa" | "vcpus" => &["VM.Config.CPU"],
            "memory" | "balloon" => &["VM.Config.Memory"],
            "scsihw" | "vga" => &["VM.Config.HWType"],
            k if k.starts_with("serial") => &["VM.Config.HWType"],
            k if k.starts_with("net") => {
                if let Some(bridge) = value.split(',').find_map(|p| p.strip_prefix("bridge=")) {
                    self.privs
                        .require(&format!("/sdn/zones/localnetwork/{bridge}"), "SDN.Use")?;
                }
                &["VM.Config.Network"]
            }
            "sshkeys" | "ciuser" | "cipassword" | "ciupgrade" | "nameserver" | "searchdomain"
            | "citype" => &["VM.Config.Cloudinit", "VM.Config.Network"],
            k if k.starts_with("ipconfig") => &["VM.Config.Cloudinit", "VM.Config.Network"],
            k if is_disk_key(k) && value.contains("cloudinit") => {
                self.privs.require(&path, "VM.Config.Cloudinit")?;
                &["VM.Config.CDROM"]
            }
            k if is_disk_key(k) || k.starts_with("unused") => &["VM.Config.Disk"],
            "boot" | "bootdisk" => &["VM.Config.Disk"],
            _ => &["VM.Config.Options"],
        };
        self.privs.require_any(&path, group)
    }

    /// Storage privileges of drives: allocating on a target, reading an
    /// import source.
    fn check_storage(
        &self,
        options: &[(String, String)],
        imports: &[Import],
    ) -> Result<(), ApiError> {
        for (key, value) in options {
            if is_disk_key(key)
                && let Some(storage) = drive_storage(value)
            {
                self.privs
                    .require(&format!("/storage/{storage}"), "Datastore.AllocateSpace")?;
            }
        }
        for import in imports {
            self.privs.require(
                &format!("/storage/{}", import.target),
                "Datastore.AllocateSpace",
            )?;
            if import.source.starts_with('/') {
                return Err(ApiError::new(
                    500,
                    "Only root can pass arbitrary filesystem paths.",
                ));
            }
            let Some((storage, path)) = import.source.split_once(':') else {
                return Err(ApiError::new(
                    500,
                    format!("unable to parse volume ID '{}'", import.source),
                ));
            };
            if !path.starts_with("import/") {
                return Err(ApiError::new(
                    500,
                    format!(
                        "{}: the simulator imports only from 'import' content",
                        import.source
                    ),
                ));
            }
            self.privs.require_any(
                &format!("/storage/{storage}"),
                &["Datastore.Audit", "Datastore.AllocateSpace"],
            )?;
        }
        Ok(())
    }

    /// Imports one drive into `vmid` (the simulator's importdisk, then the
    /// disk attached where it was asked for).
    async fn import(
        &self,
        node: &str,
        vmid: u32,
        import: &Import,
        log: &TaskLog,
    ) -> Result<(), PveError> {
        let command = format!(
            "qm set {vmid} --{} {}:0,import-from={}",
            import.key, import.target, import.source
        );
        let file = import
            .source
            .split_once(":import/")
            .map(|(storage, name)| self.import_dir(node, storage).join(name))
            .filter(|f| f.is_file())
            .ok_or_else(|| {
                PveError::command(
                    &command,
                    format!("could not get size of {}", import.source),
                    255,
                )
            })?;
        let sink = |line: &str| log.line(line);
        let volid = self
            .sim
            .qm_importdisk(node, vmid, &file, &import.target, &sink)
            .await?;
        let mut value = volid;
        for part in &import.extra {
            value.push(',');
            value.push_str(part);
        }
        for line in self
            .sim
            .attach_imported(node, vmid, &[(import.key.clone(), value)])
            .await?
        {
            log.line(&line);
        }
        Ok(())
    }

    /// `qm set` with `sshkeys` handed over as the CLI does: in a file.
    async fn set(
        &self,
        node: &str,
        vmid: u32,
        options: Vec<(String, String)>,
        log: &TaskLog,
    ) -> Result<(), PveError> {
        if options.is_empty() {
            return Ok(());
        }
        let mut key_file = None;
        let mut resolved = Vec::with_capacity(options.len());
        for (key, value) in options {
            if key == "sshkeys" {
                let dir = self.dir.join("api");
                let file = tempfile::Builder::new()
                    .prefix("sshkeys")
                    .tempfile_in(&dir)
                    .map_err(|e| PveError::command("qm set", e.to_string(), 255))?;
                std::fs::write(file.path(), &value)
                    .map_err(|e| PveError::command("qm set", e.to_string(), 255))?;
                resolved.push((key, file.path().to_string_lossy().into_owned()));
                key_file = Some(file);
            } else {
                resolved.push((key, value));
            }
        }
        let lines = self.sim.qm_set(node, vmid, &resolved).await;
        drop(key_file);
        for line in lines? {
            log.line(&line);
        }
        Ok(())
    }

    /// The checks of `PUT|POST …/config`, and the options with `sshkeys`
    /// decoded, split from the imports.
    fn config_request(
        &self,
        vm: &Vm,
        params: &Params,
    ) -> Result<(QmOptions, Vec<Import>), ApiError> {
        let vmid = vm.id;
        refuse_root_only(params, &["skiplock"])?;
        let options = params.options(&["node", "vmid", "background_delay", "digest"]);
        if options.is_empty() {
            return Err(ApiError::new(500, "no options specified"));
        }
        for (key, value) in &options {
            if key == "delete" {
                for k in value.split(',').filter(|k| !k.is_empty()) {
                    self.check_option(vmid, k.trim(), "")?;
                }
            } else {
                self.check_option(vmid, key, value)?;
            }
        }
        let (plain, imports) = split_imports(options)?;
        self.check_storage(&plain, &imports)?;
        // After the privileges, as Proxmox checks them before the handler runs.
        vm.found(self)?;
        let mut decoded = Vec::with_capacity(plain.len());
        for (key, value) in plain {
            let value = if key == "sshkeys" {
                decode_sshkeys(&value)?
            } else {
                value
            };
            decoded.push((key, value));
        }
        let check: Vec<(String, String)> = decoded
            .iter()
            .filter(|(k, _)| k != "sshkeys")
            .cloned()
            .collect();
        qm_params::verify(Verb::Set, &check)
            .map_err(|m| ApiError::from_pve(&PveError::command("qm set", m.to_string(), 255)))?;
        Ok((decoded, imports))
    }
}

fn task_result(upid: super::super::tasks::Upid) -> ApiResult {
    Ok(data(upid.to_string()))
}

/// `POST /nodes/{node}/qemu`: task `qmcreate`; drives with `import-from`
/// are imported by the same task; a failed task leaves no VM.
pub async fn create(
    State(api): State<Arc<Api>>,
    Path(node): Path<String>,
    params: Params,
) -> ApiResult {
    let id = vmid(params.required("vmid")?)?;
    api.node_up(&node)?;
    api.privs.require(&format!("/vms/{id}"), "VM.Allocate")?;
    let start = params.flag("start")?;
    let options = params.options(&["node", "vmid", "start", "pool", "import-working-storage"]);
    let (plain, imports) = split_imports(options)?;
    api.check_storage(&plain, &imports)?;
    for (key, value) in &plain {
        if key.starts_with("net")
            && let Some(bridge) = value.split(',').find_map(|p| p.strip_prefix("bridge="))
        {
            api.privs
                .require(&format!("/sdn/zones/localnetwork/{bridge}"), "SDN.Use")?;
        }
        if key == "sshkeys" {
            decode_sshkeys(value)?;
        }
    }
    qm_params::verify(Verb::Create, &plain)
        .map_err(|m| ApiError::from_pve(&PveError::command("qm create", m.to_string(), 255)))?;
    if let Some(owner) = api.sim.read(|s| s.vms.get(&id).map(|vm| vm.node.clone())) {
        return Err(ApiError::new(
            500,
            format!("unable to create VM {id} - VM {id} already exists on node '{owner}'"),
        ));
    }
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, "qmcreate", &id.to_string()),
        move |log| async move {
            let api = task_api;
            api.sim.qm_create(&node, id, &plain).await?;
            for import in &imports {
                if let Err(e) = api.import(&node, id, import, &log).await {
                    // Proxmox's create worker removes what it made.
                    api.sim.change(|s| s.vms.remove(&id));
                    return Err(e);
                }
            }
            if start {
                api.sim.qm_power(&node, id, PowerAction::Start).await?;
            }
            Ok(())
        },
    );
    task_result(upid)
}

/// Config keys whose values Proxmox's API types as numbers
/// (`check_type` did `int()` on them): integers and booleans.
const NUMERIC_KEYS: &[&str] = &[
    "cores",
    "sockets",
    "vcpus",
    "balloon",
    "cpuunits",
    "shares",
    "numa",
    "onboot",
    "template",
    "ciupgrade",
    "protection",
    "acpi",
    "kvm",
    "tablet",
    "reboot",
    "localtime",
    "freeze",
];

/// `GET …/config`: pending changes applied, `digest` added.
pub async fn config(State(api): State<Arc<Api>>, vm: Vm) -> ApiResult {
    // The node first: `qm_config` finds the VM (or says it has none).
    api.node_up(&vm.node)?;
    api.privs.require(&vm.acl(), "VM.Audit")?;
    let Vm { node, id } = vm;
    let config = api.sim.qm_config(&node, id).await?;
    let mut text = String::new();
    let mut out = serde_json::Map::new();
    for (key, value) in &config {
        text.push_str(&format!("{key}: {value}\n"));
        let typed = match (NUMERIC_KEYS.contains(&key.as_str()), value.parse::<i64>()) {
            (true, Ok(n)) => json!(n),
            _ => json!(value),
        };
        out.insert(key.clone(), typed);
    }
    let digest: String = sha2::Sha256::digest(text.as_bytes())
        .iter()
        .take(20)
        .map(|b| format!("{b:02x}"))
        .collect();
    out.insert("digest".into(), json!(digest));
    Ok(data(Value::Object(out)))
}

/// `PUT …/config`: synchronous, `null`.
pub async fn config_sync(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    let (options, imports) = api.config_request(&vm, &params)?;
    let Vm { node, id } = vm;
    // No task: the lines go nowhere, as over a synchronous call.
    let log = TaskLog::discard();
    api.set(&node, id, options, &log).await?;
    for import in &imports {
        api.import(&node, id, import, &log).await?;
    }
    Ok(data(Value::Null))
}

/// `POST …/config`: task `qmconfig`. With `background_delay=<s>` it waits
/// that long: `null` if the task ended OK, its error as
/// `failed to update VM <id>: <status>`, else the UPID (Qemu.pm).
pub async fn config_async(
    State(api): State<Arc<Api>>,
    VmParams(vm, params): VmParams,
) -> ApiResult {
    let delay = params.int("background_delay")?;
    if let Some(d) = delay
        && !(1..=30).contains(&d)
    {
        let bound = if d < 1 {
            "minimum value of 1"
        } else {
            "maximum value of 30"
        };
        return Err(ApiError::param(
            "background_delay",
            format!("value must have a {bound}"),
        ));
    }
    let (options, imports) = api.config_request(&vm, &params)?;
    let Vm { node, id } = vm;
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, "qmconfig", &id.to_string()),
        move |log| async move {
            task_api.set(&node, id, options, &log).await?;
            for import in &imports {
                task_api.import(&node, id, import, &log).await?;
            }
            Ok(())
        },
    );
    let Some(delay) = delay else {
        return task_result(upid);
    };
    // Wall-clock seconds, as pvedaemon waits them.
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(delay);
    while tokio::time::Instant::now() < until {
        if let Some(TaskState::Stopped(exit)) = api.tasks.state(&upid) {
            if exit == "OK" || exit.starts_with("WARNINGS") {
                return Ok(data(Value::Null));
            }
            return Err(ApiError::new(
                500,
                format!("failed to update VM {id}: {exit}"),
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    task_result(upid)
}

/// `PUT …/resize`: task `resize` (PVE ≥ 8).
pub async fn resize(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    refuse_root_only(&params, &["skiplock"])?;
    let disk = params.required("disk")?.to_string();
    let size = params.required("size")?.to_string();
    vm.open(&api, &["VM.Config.Disk"])?;
    let Vm { node, id } = vm;
    let drive = api.sim.read(|s| {
        s.vms
            .get(&id)
            .and_then(|vm| vm.conf(&disk).map(str::to_string))
    });
    if let Some(storage) = drive.as_deref().and_then(drive_storage) {
        api.privs
            .require(&format!("/storage/{storage}"), "Datastore.AllocateSpace")?;
    }
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, "resize", &id.to_string()),
        move |_log| async move { task_api.sim.qm_resize(&node, id, &disk, &size).await },
    );
    task_result(upid)
}

/// `GET …/status/current`.
pub async fn status(State(api): State<Arc<Api>>, vm: Vm) -> ApiResult {
    // The node first: `qm_status` finds the VM (or says it has none).
    api.node_up(&vm.node)?;
    api.privs.require(&vm.acl(), "VM.Audit")?;
    let Vm { node, id } = vm;
    let status = api.sim.qm_status(&node, id).await?;
    let sim = &api.sim;
    let (resource, agent, lock) = sim.read(|s| {
        let vm = s.vms.get(&id);
        (
            s.vm_resources(sim.clock(), sim.jitter())
                .into_iter()
                .find(|r| r.vmid == id),
            vm.and_then(|v| v.conf("agent"))
                .is_some_and(|a| !a.starts_with('0') && !a.starts_with("enabled=0")),
            vm.and_then(|v| v.lock().map(str::to_string)),
        )
    });
    let mut out = json!({
        "vmid": id, "status": status, "qmpstatus": status, "ha": {"managed": 0},
    });
    if let Some(r) = resource {
        for (key, value) in [
            ("name", json!(r.name)),
            ("cpus", json!(r.maxcpu)),
            ("cpu", json!(r.cpu)),
            ("maxmem", json!(r.maxmem)),
            ("mem", json!(r.mem)),
            ("maxdisk", json!(r.maxdisk)),
            ("disk", json!(0)),
            ("uptime", json!(r.uptime)),
            ("netin", json!(0)),
            ("netout", json!(0)),
            ("diskread", json!(0)),
            ("diskwrite", json!(0)),
        ] {
            out[key] = value;
        }
        if r.template {
            out["template"] = json!(1);
        }
        if let Some(tags) = r.tags {
            out["tags"] = json!(tags);
        }
    }
    if agent {
        out["agent"] = json!(1);
    }
    if let Some(lock) = lock {
        out["lock"] = json!(lock);
    }
    if status == "running" {
        out["pid"] = json!(10_000 + id);
    }
    Ok(data(out))
}

/// The action segment of `…/status/{action}`.
#[derive(serde::Deserialize)]
pub struct PowerPath {
    action: String,
}

/// `POST …/status/{start|stop|shutdown|reboot}`: tasks `qm<action>`.
pub async fn power(
    State(api): State<Arc<Api>>,
    Path(action): Path<PowerPath>,
    VmParams(vm, params): VmParams,
) -> ApiResult {
    let action = match action.action.as_str() {
        "start" => PowerAction::Start,
        "stop" => PowerAction::Stop { skiplock: false },
        "shutdown" => PowerAction::Shutdown,
        "reboot" => PowerAction::Reboot,
        other => {
            return Err(ApiError::new(
                501,
                format!(
                    "Method 'POST /nodes/{}/qemu/{}/status/{other}' not implemented",
                    vm.node, vm.id
                ),
            ));
        }
    };
    refuse_root_only(&params, &["skiplock"])?;
    vm.open(&api, &["VM.PowerMgmt"])?;
    let Vm { node, id } = vm;
    if action == PowerAction::Reboot && !api.sim.read(|s| s.vms.get(&id).is_some_and(|v| v.running))
    {
        return Err(ApiError::new(500, format!("VM {id} not running")));
    }
    let kind = format!("qm{}", action.verb());
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, &kind, &id.to_string()),
        move |_log| async move { task_api.sim.qm_power(&node, id, action).await },
    );
    task_result(upid)
}

/// `DELETE /nodes/{node}/qemu/{vmid}`: task `qmdestroy`.
pub async fn destroy(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    refuse_root_only(&params, &["skiplock"])?;
    params.flag("purge")?;
    let unreferenced = params.flag("destroy-unreferenced-disks")?;
    vm.open(&api, &["VM.Allocate"])?;
    let Vm { node, id } = vm;
    if api.sim.read(|s| s.vms.get(&id).is_some_and(|v| v.running)) {
        return Err(ApiError::new(
            500,
            format!("VM {id} is running - destroy failed"),
        ));
    }
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, "qmdestroy", &id.to_string()),
        move |log| async move {
            for line in task_api
                .sim
                .qm_destroy(&node, id, false, unreferenced)
                .await?
            {
                log.line(&line);
            }
            Ok(())
        },
    );
    task_result(upid)
}

/// `POST …/migrate`: task `qmigrate`, the migration log in the task log.
pub async fn migrate(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    refuse_root_only(&params, &["force", "migration_type", "migration_network"])?;
    let target = params.required("target")?.to_string();
    let online = params.flag("online")?;
    params.flag("with-local-disks")?;
    if target == vm.node {
        return Err(ApiError::param("target", "target is local node."));
    }
    vm.open(&api, &["VM.Migrate"])?;
    let Vm { node, id } = vm;
    let running = api.sim.read(|s| s.vms.get(&id).is_some_and(|v| v.running));
    if running && !online {
        return Err(ApiError::new(
            500,
            "can't migrate running VM without --online",
        ));
    }
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, "qmigrate", &id.to_string()),
        move |log| async move {
            let sink = |line: &str| log.line(line);
            task_api.sim.qm_migrate(&node, id, &target, &sink).await
        },
    );
    task_result(upid)
}

/// `POST …/clone`: task `qmclone` (linked from a template unless `full`).
pub async fn clone(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    let newid = vmid(params.required("newid")?)
        .map_err(|_| ApiError::param("newid", "value must have a minimum value of 100"))?;
    // Both privileges before the VM is looked for.
    api.privs.require(&vm.acl(), "VM.Clone")?;
    api.privs.require(&format!("/vms/{newid}"), "VM.Allocate")?;
    vm.found(&api)?;
    let Vm { node, id: source } = vm;
    if let Some(target) = params.get("target").filter(|t| *t != node) {
        return Err(ApiError::new(
            500,
            format!("clone to another node ('{target}') is not simulated"),
        ));
    }
    if api.sim.read(|s| s.vms.contains_key(&newid)) {
        return Err(ApiError::new(
            500,
            format!("unable to create VM {newid}: config file already exists"),
        ));
    }
    let template = api.sim.is_template(source);
    let mode = match (params.has("full"), params.flag("full")?) {
        (true, true) => CloneMode::Full,
        (true, false) => CloneMode::Linked,
        (false, _) if template => CloneMode::Linked,
        (false, _) => CloneMode::Full,
    };
    let name = params
        .get("name")
        .map_or_else(|| format!("Copy-of-VM-{source}"), str::to_string);
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, "qmclone", &source.to_string()),
        move |log| async move {
            let sink = |line: &str| log.line(line);
            task_api
                .sim
                .qm_clone(&node, source, newid, &name, mode, &sink)
                .await
        },
    );
    task_result(upid)
}

/// `POST …/template`: task `qmtemplate`, its pre-checks answered at once.
pub async fn template(State(api): State<Arc<Api>>, vm: Vm) -> ApiResult {
    vm.open(&api, &["VM.Allocate"])?;
    let Vm { node, id } = vm;
    api.sim.qm_template_check(&node, id)?;
    let task_api = api.clone();
    let upid = api.tasks.spawn(
        api.tasks.upid(&node, "qmtemplate", &id.to_string()),
        move |_log| async move { task_api.sim.qm_template_task(id).await },
    );
    task_result(upid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn import_drives_are_split_and_checked() {
        let (plain, imports) = split_imports(opts(&[
            ("cores", "2"),
            (
                "scsi0",
                "local-zfs:0,import-from=local:import/d.qcow2,iothread=1",
            ),
        ]))
        .unwrap();
        assert_eq!(plain, opts(&[("cores", "2")]));
        assert_eq!(
            imports,
            [Import {
                key: "scsi0".into(),
                target: "local-zfs".into(),
                source: "local:import/d.qcow2".into(),
                extra: vec!["iothread=1".into()],
            }]
        );
        let e = split_imports(opts(&[(
            "scsi0",
            "local-zfs:32,import-from=local:import/d.qcow2",
        )]))
        .unwrap_err();
        assert!(
            e.errors["scsi0"].contains("requires special syntax"),
            "{e:?}"
        );
    }

    #[test]
    fn sshkeys_are_decoded_as_proxmox_does() {
        let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host";
        let encoded = escape::uri_escape(key);
        assert_eq!(decode_sshkeys(&encoded).unwrap(), key);
        assert_eq!(decode_sshkeys("ssh-ed25519 AAAA").unwrap_err().status, 400);
        assert_eq!(decode_sshkeys("not%20a%20key").unwrap_err().status, 500);
    }
}
