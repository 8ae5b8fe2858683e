//! The simulated cluster's command-line face: this binary, called as `qm`,
//! `pvesh`, `pvesm` or `ssh` (through a link of that name on `PATH`), or as
//! `pvedeck-sim <tool> …`, answers like the real tool: same argument
//! forms, output formats, error texts and exit codes. Every call is its own
//! process; they share the cluster through `DATA_DIR/sim` (locked).
//!
//! The `ssh` stand-in routes `ssh root@<node-ip> qm …` to that node and
//! `ssh <user>@<vm-ip> <command>` to the simulated guest.

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::Value;

use pvedeck_config::Config;
use pvedeck_proxmox::{ConsoleIo, ConsoleKind, GuestCommand, GuestTarget, PowerAction, PveError};
use pvedeck_sim::console::ConsoleOptions;
use pvedeck_sim::{SimCluster, SimSettings};

/// `socat`: what pvedeck's cli backend reads a VM's serial socket with, on
/// the main node itself or over `ssh`.
const TOOLS: [&str; 5] = ["qm", "pvesh", "pvesm", "socat", "ssh"];

/// What `args` (the process's, program name first) asks for: a stand-in
/// called through a link named `qm`, `pvesh`, `pvesm` or `ssh`, a
/// long-running face (`pvedeck-sim api`, `pvedeck-sim mirror`), or a
/// one-shot command (`pvedeck-sim qm …`, `pvedeck-sim fault …`). Returns
/// the exit code.
pub fn dispatch(args: &[String]) -> i32 {
    let name = args
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    if TOOLS.contains(&name.as_str()) {
        let mut argv = vec![name];
        argv.extend(args.iter().skip(1).cloned());
        return run(argv);
    }
    match args.get(1).map(String::as_str) {
        // The REST face: a long-running server, not a one-shot tool.
        Some("api") => crate::api::run(),
        // The images over HTTP for IMAGE_BASE_<OS>: a server as well.
        Some("mirror") => crate::mirror::run(),
        Some("--version" | "-V") => {
            println!("pvedeck-sim {}", env!("CARGO_PKG_VERSION"));
            0
        }
        _ => run(args.iter().skip(1).cloned().collect()),
    }
}

/// A stand-in must not outlive whoever called it (a hung `qm` whose
/// caller was killed at its timeout): it exits once its parent is gone.
fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(1);
            }
        }
    });
}

fn run(argv: Vec<String>) -> i32 {
    exit_with_parent();
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let settings = SimSettings::from_config(&config);
    let sim = match SimCluster::shared(&config.data_dir.join("sim"), &settings) {
        Ok(sim) => sim,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let node = std::env::var("PVEDECK_SIM_NODE").unwrap_or_else(|_| config.main_node.clone());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start: {e}");
            return 1;
        }
    };
    sim.record_argv(&argv);
    // Its stdout is the pipe pvedeck reads: a guest's flood goes there as
    // bytes, for pvedeck to bound.
    sim.print_guest_floods_raw();
    let code = runtime.block_on(async {
        let face = Face {
            sim: &sim,
            node,
            remote: false,
            env: Vec::new(),
            terminal: std::io::IsTerminal::is_terminal(&std::io::stdin()),
        };
        match face.tool(&argv).await {
            Ok(code) => code,
            Err(e) => face.fail(e),
        }
    });
    // A console's read of stdin may still be blocked: not waited for.
    runtime.shutdown_background();
    code
}

const USAGE: &str = "\
usage: pvedeck-sim qm|pvesh|pvesm|ssh <args>   one command, as the real tool answers it
       pvedeck-sim fault '<json>' | fault clear
       pvedeck-sim node <node> online|offline
       pvedeck-sim storage <id> content <list>
       pvedeck-sim claim <vmid> <ip>              VM <vmid>'s guest answers for <ip> too (hostile)
       pvedeck-sim log                            the commands run so far
       pvedeck-sim world                          simulated ms of one install (benchmarks)
       pvedeck-sim api                            the REST face over HTTPS (long-running)
       pvedeck-sim mirror                         the cloud images over HTTP (long-running)
A link named qm, pvesh, pvesm, socat or ssh to this binary answers as that tool.
The cluster lives in DATA_DIR/sim, configured like the server's (SIM_SPEED, GATEWAY, NODE_<name>…).";

struct Face<'a> {
    sim: &'a SimCluster,
    /// The node this command runs on.
    node: String,
    /// Reached through the `ssh` stand-in: the command runs on another
    /// machine than its caller's, whose files it cannot read.
    remote: bool,
    /// `NAME=value` words before the command, as the node's shell sets
    /// them for it (`LC_PVE_TICKET=… qm vncproxy 101`).
    env: Vec<(String, String)>,
    /// Its stdin is a terminal: a tty of its own, or the pty `ssh -tt`
    /// makes on the node (`qm terminal`'s socat needs one).
    terminal: bool,
}

/// Options that take no value (a bare `--purge` means 1).
const FLAGS: [&str; 6] = [
    "purge",
    "skiplock",
    "with-local-disks",
    "online",
    "force",
    "destroy-unreferenced-disks",
];

struct Parsed {
    positional: Vec<String>,
    options: Vec<(String, String)>,
}

/// `qm`'s option syntax: `--key value` or `-key value`; flags may stand alone.
fn parse(args: &[String]) -> Result<Parsed, PveError> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let is_option = arg.starts_with('-') && arg.parse::<f64>().is_err() && arg.len() > 1;
        if !is_option {
            positional.push(arg.clone());
            i += 1;
            continue;
        }
        let key = arg.trim_start_matches('-').to_string();
        let next = args.get(i + 1);
        let value = if FLAGS.contains(&key.as_str())
            && next.is_none_or(|n| n.starts_with('-') || !matches!(n.as_str(), "0" | "1"))
        {
            i += 1;
            "1".to_string()
        } else {
            let Some(value) = next else {
                return Err(PveError::command(
                    "qm",
                    format!("Option {key} requires an argument\n400 unable to parse option"),
                    255,
                ));
            };
            i += 2;
            value.clone()
        };
        options.push((key, value));
    }
    Ok(Parsed {
        positional,
        options,
    })
}

fn vmid(raw: Option<&String>) -> Result<u32, PveError> {
    let raw = raw.ok_or_else(|| PveError::command("qm", "400 not enough arguments", 255))?;
    raw.parse::<u32>().map_err(|_| {
        PveError::command(
            "qm",
            format!("400 Parameter verification failed.\nvmid: type check ('integer') failed - got '{raw}'"),
            255,
        )
    })
}

fn flag(options: &[(String, String)], key: &str) -> bool {
    options.iter().any(|(k, v)| k == key && v == "1")
}

/// `--output-format json`: one line, keys sorted, as `pvesh` prints.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let ordered: BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(ordered.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// Perl's `to_json(pretty, canonical)`, as `qm guest …` prints: keys
/// sorted, three-space indents, ` : ` between key and value.
fn pretty(value: &Value) -> String {
    fn write(value: &Value, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent + 3);
        match value {
            Value::Object(map) => {
                let ordered: BTreeMap<&String, &Value> = map.iter().collect();
                out.push_str("{\n");
                for (i, (key, v)) in ordered.iter().enumerate() {
                    out.push_str(&format!("{pad}{} : ", Value::from(key.as_str())));
                    write(v, indent + 3, out);
                    out.push_str(if i + 1 < ordered.len() { ",\n" } else { "\n" });
                }
                out.push_str(&format!("{}}}", " ".repeat(indent)));
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, 0, &mut out);
    out
}

fn print_json<T: serde::Serialize>(value: &T) -> i32 {
    match serde_json::to_value(value) {
        Ok(v) => {
            println!("{}", sorted(v));
            0
        }
        Err(e) => {
            eprintln!("{e}");
            255
        }
    }
}

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// Options with their file arguments resolved, and the file that must
/// live as long as the command.
type WithFiles = (Vec<(String, String)>, Option<TempKeys>);

/// Keys read from stdin, in a file for the library's `qm set`.
struct TempKeys(std::path::PathBuf);

impl TempKeys {
    fn write(text: &str) -> std::io::Result<TempKeys> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("pvedeck-sim-sshkeys-{}-{n}", std::process::id()));
        std::fs::write(&path, text)?;
        Ok(TempKeys(path))
    }
}

impl Drop for TempKeys {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Face<'_> {
    fn fail(&self, e: PveError) -> i32 {
        let (message, exit) = match &e {
            PveError::Command { message, exit, .. } => (message.clone(), exit.unwrap_or(255)),
            other => (other.to_string(), 255),
        };
        eprintln!("{message}");
        exit
    }

    /// A variable of the command's environment: set on its command line,
    /// else the process's (`ssh` passes `LC_*` on, as Debian's
    /// `SendEnv`/`AcceptEnv` do).
    fn env(&self, name: &str) -> Option<String> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(name).ok())
    }

    async fn tool(&self, argv: &[String]) -> Result<i32, PveError> {
        let args = &argv[1.min(argv.len())..];
        // `/usr/sbin/qm` is `qm`, as the node's PATH finds it.
        let program = argv.first().map(|p| p.rsplit('/').next().unwrap_or(p));
        match program {
            Some("qm") => self.qm(args).await,
            Some("socat") => self.socat(args).await,
            Some("pvesh") => self.pvesh(args).await,
            Some("pvesm") => self.pvesm(args).await,
            Some("ssh") => self.ssh(args).await,
            Some("fault") => self.fault(args),
            Some("node") => self.node_state(args),
            Some("storage") => self.storage_content(args),
            Some("claim") => self.claim(args),
            Some("log") => {
                for line in self.sim.commands() {
                    out(&line);
                }
                Ok(0)
            }
            Some("world") => {
                // For benchmarks: the simulated world's time in one install.
                out(&pvedeck_sim::install_world_ms().to_string());
                Ok(0)
            }
            _ => {
                eprintln!("{USAGE}");
                Ok(2)
            }
        }
    }

    /// `--sshkeys FILE` as `qm` reads it: on the node where it runs
    /// (qemu-server `PVE/CLI/qm.pm`, `param_mapping`). Run through `ssh`,
    /// the caller's files are not there: only `/dev/stdin` (what the
    /// caller piped into `ssh`) can be read. The keys read from it are
    /// handed on in a file of this process, removed when it is dropped.
    fn files_on_node(
        &self,
        verb: &str,
        options: &[(String, String)],
    ) -> Result<WithFiles, PveError> {
        let mut kept = None;
        let mut out = Vec::with_capacity(options.len());
        for (key, value) in options {
            if key != "sshkeys" || !self.remote {
                out.push((key.clone(), value.clone()));
                continue;
            }
            let cant_open = || {
                PveError::command(
                    format!("qm {verb}"),
                    format!("can't open '{value}' - No such file or directory"),
                    255,
                )
            };
            if value != "/dev/stdin" {
                return Err(cant_open());
            }
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|_| cant_open())?;
            let file = TempKeys::write(&text).map_err(|_| cant_open())?;
            out.push((key.clone(), file.0.to_string_lossy().into_owned()));
            kept = Some(file);
        }
        Ok((out, kept))
    }

    async fn qm(&self, args: &[String]) -> Result<i32, PveError> {
        let (verb, rest) = match args.split_first() {
            Some((v, rest)) if v == "disk" || v == "guest" => match rest.split_first() {
                Some((sub, rest)) => (format!("{v} {sub}"), rest),
                None => (v.clone(), rest),
            },
            Some((v, rest)) => (v.clone(), rest),
            None => {
                eprintln!("USAGE: qm <COMMAND> [ARGS] [OPTIONS]");
                return Ok(255);
            }
        };
        // `qm guest exec <vmid> [options] -- <command…>`: what follows `--`
        // is the guest's argument vector, not options.
        let (rest, guest_argv) = match rest.iter().position(|a| a == "--") {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let parsed = parse(rest)?;
        let p = &parsed.positional;
        let node = self.node.as_str();
        let sim = self.sim;
        match verb.as_str() {
            "clone" => {
                let Some(source) = p.first() else {
                    return Err(PveError::command("qm", "400 not enough arguments", 255));
                };
                let newid = vmid(p.get(1))?;
                let full = parsed.options.iter().find(|(k, _)| k == "full");
                let template = sim.is_template(vmid(Some(source))?);
                // Linked is the default from a template, full from a VM.
                let linked = match full {
                    Some((_, v)) => v == "0",
                    None => template,
                };
                let mode = if linked {
                    pvedeck_proxmox::CloneMode::Linked
                } else {
                    pvedeck_proxmox::CloneMode::Full
                };
                let name = parsed
                    .options
                    .iter()
                    .find(|(k, _)| k == "name")
                    .map_or_else(|| format!("Copy-of-VM-{source}"), |(_, v)| v.clone());
                sim.qm_clone(node, vmid(Some(source))?, newid, &name, mode, &out)
                    .await?;
            }
            "template" => {
                // The conversion runs as a task that qm does not wait on
                // for its exit code: a failed one is printed, and qm exits 0.
                let id = vmid(p.first())?;
                sim.qm_template_check(node, id)?;
                if let Err(e) = sim.qm_template_task(id).await {
                    eprintln!("{}", e.message());
                }
            }
            "agent" | "guest cmd" => {
                if p.get(1).map(String::as_str) != Some("ping") {
                    eprintln!(
                        "400 Parameter verification failed.\ncommand: only ping is simulated"
                    );
                    return Ok(255);
                }
                sim.qm_agent_ping(node, vmid(p.first())?).await?;
            }
            "guest exec" => {
                // `--timeout`, 30 s by default as qm.pm has it.
                let timeout = parsed
                    .options
                    .iter()
                    .find(|(k, _)| k == "timeout")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(30);
                let result = sim
                    .qm_guest_exec(node, vmid(p.first())?, guest_argv, timeout)
                    .await?;
                let mut json = serde_json::Map::new();
                if !result.err.is_empty() {
                    json.insert("err-data".into(), Value::from(result.err));
                }
                match (result.exitcode, result.signal) {
                    (Some(code), _) => {
                        json.insert("exitcode".into(), Value::from(code));
                        json.insert("exited".into(), Value::from(1));
                    }
                    (None, Some(signal)) => {
                        json.insert("signal".into(), Value::from(signal));
                        json.insert("exited".into(), Value::from(1));
                    }
                    (None, None) => {
                        json.insert("exited".into(), Value::from(0));
                    }
                }
                if !result.out.is_empty() {
                    json.insert("out-data".into(), Value::from(result.out));
                }
                out(&pretty(&Value::Object(json)));
            }
            "create" => {
                let (options, _keys) = self.files_on_node(&verb, &parsed.options)?;
                sim.qm_create(node, vmid(p.first())?, &options).await?
            }
            "set" => {
                let (options, _keys) = self.files_on_node(&verb, &parsed.options)?;
                for line in sim.qm_set(node, vmid(p.first())?, &options).await? {
                    out(&line);
                }
            }
            "importdisk" | "disk import" => {
                let (Some(source), Some(storage)) = (p.get(1), p.get(2)) else {
                    return Err(PveError::command("qm", "400 not enough arguments", 255));
                };
                sim.qm_importdisk(
                    node,
                    vmid(p.first())?,
                    std::path::Path::new(source),
                    storage,
                    &out,
                )
                .await?;
            }
            "resize" | "disk resize" => {
                let (Some(disk), Some(size)) = (p.get(1), p.get(2)) else {
                    return Err(PveError::command("qm", "400 not enough arguments", 255));
                };
                // The resize task's failure is printed, but qm exits 0.
                if let Err(e) = sim.qm_resize(node, vmid(p.first())?, disk, size).await {
                    eprintln!("{}", e.message());
                }
            }
            "config" => {
                for (key, value) in sim.qm_config(node, vmid(p.first())?).await? {
                    // The notes on one line, as qm.pm's `config` printer
                    // passes them through `encode_text`.
                    let value = if key == "description" {
                        pvedeck_proxmox::escape::encode_text(&value)
                    } else {
                        value
                    };
                    out(&format!("{key}: {value}"));
                }
            }
            "status" => out(&format!(
                "status: {}",
                sim.qm_status(node, vmid(p.first())?).await?
            )),
            "start" | "shutdown" | "reboot" | "stop" => {
                let action = match verb.as_str() {
                    "start" => PowerAction::Start,
                    "shutdown" => PowerAction::Shutdown,
                    "reboot" => PowerAction::Reboot,
                    _ => PowerAction::Stop {
                        skiplock: flag(&parsed.options, "skiplock"),
                    },
                };
                sim.qm_power(node, vmid(p.first())?, action).await?;
            }
            "destroy" => {
                let skiplock = flag(&parsed.options, "skiplock");
                let unreferenced = flag(&parsed.options, "destroy-unreferenced-disks");
                for line in sim
                    .qm_destroy(node, vmid(p.first())?, skiplock, unreferenced)
                    .await?
                {
                    out(&line);
                }
            }
            "migrate" => {
                let Some(target) = p.get(1) else {
                    return Err(PveError::command("qm", "400 not enough arguments", 255));
                };
                sim.qm_migrate(node, vmid(p.first())?, target, &out).await?;
            }
            "vncproxy" => return self.vncproxy(vmid(p.first())?).await,
            "terminal" => {
                let option = |key: &str| {
                    parsed
                        .options
                        .iter()
                        .find(|(k, _)| k == key)
                        .map(|(_, v)| v.clone())
                };
                return self
                    .terminal(vmid(p.first())?, option("iface"), option("escape"))
                    .await;
            }
            other => {
                eprintln!("ERROR: unknown command 'qm {other}'");
                return Ok(255);
            }
        }
        Ok(0)
    }

    async fn pvesh(&self, args: &[String]) -> Result<i32, PveError> {
        let parsed = parse(args)?;
        let p = &parsed.positional;
        let (Some(verb), Some(path)) = (p.first(), p.get(1)) else {
            return Err(PveError::command("pvesh", "400 not enough arguments", 255));
        };
        if path.contains("/firewall") {
            return self.pvesh_firewall(verb, path, &parsed.options).await;
        }
        if verb != "get" {
            return Err(PveError::command(
                "pvesh",
                format!("No '{verb}' handler defined for '{path}'"),
                255,
            ));
        }
        let kind = parsed
            .options
            .iter()
            .find(|(k, _)| k == "type")
            .map(|(_, v)| v.as_str());
        let path = path.trim_end_matches('/');
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        match parts.as_slice() {
            ["cluster", "resources"] => {
                let vms = || async { pvedeck_proxmox::Pve::cluster_vms(self.sim).await };
                let nodes = || async { pvedeck_proxmox::Pve::cluster_nodes(self.sim).await };
                let mut all: Vec<Value> = Vec::new();
                if kind.is_none_or(|k| k == "vm") {
                    for vm in vms().await? {
                        all.push(serde_json::to_value(vm).unwrap_or(Value::Null));
                    }
                }
                if kind.is_none_or(|k| k == "node") {
                    for node in nodes().await? {
                        all.push(serde_json::to_value(node).unwrap_or(Value::Null));
                    }
                }
                Ok(print_json(&all))
            }
            ["nodes"] => {
                let nodes = pvedeck_proxmox::Pve::cluster_nodes(self.sim).await?;
                Ok(print_json(&nodes))
            }
            ["nodes", node, "status"] => {
                let status = pvedeck_proxmox::Pve::node_status(self.sim, node).await?;
                Ok(print_json(&status))
            }
            ["nodes", node, "rrddata"] => {
                let asked = parsed
                    .options
                    .iter()
                    .find(|(k, _)| k == "timeframe")
                    .map(|(_, v)| v.as_str());
                let timeframe = pvedeck_sim::rrd::timeframe(asked).map_err(|why| {
                    PveError::command(
                        "pvesh",
                        format!("400 Parameter verification failed.\ntimeframe: {why}"),
                        255,
                    )
                })?;
                let rows = pvedeck_proxmox::Pve::rrddata(self.sim, node, timeframe).await?;
                Ok(print_json(&rows))
            }
            _ => Err(PveError::command(
                "pvesh",
                format!("No 'get' handler defined for '{path}'"),
                255,
            )),
        }
    }

    /// The firewall's paths (`/cluster/firewall/options`,
    /// `/nodes/<node>/qemu/<vmid>/firewall/…`): `pvesh` runs the API
    /// handler; what a `get` returns is printed, a change prints nothing.
    async fn pvesh_firewall(
        &self,
        verb: &str,
        path: &str,
        options: &[(String, String)],
    ) -> Result<i32, PveError> {
        let sim = self.sim;
        let option = |key: &str| {
            options
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let given: Vec<(String, String)> = options
            .iter()
            .filter(|(k, _)| k != "output-format" && k != "digest")
            .cloned()
            .collect();
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let no_handler = || {
            PveError::command(
                "pvesh",
                format!("No '{verb}' handler defined for '{path}'"),
                255,
            )
        };
        let shown = match (verb, parts.as_slice()) {
            ("get", ["cluster", "firewall", "options"]) => Some(sim.fw_cluster_options().await?),
            ("set", ["cluster", "firewall", "options"]) => {
                sim.fw_set_cluster_options(&given).await?;
                None
            }
            (verb, ["nodes", node, "qemu", id, "firewall", rest @ ..]) => {
                let id = vmid(Some(&id.to_string()))?;
                match (verb, rest) {
                    ("get", ["options"]) => Some(sim.fw_vm_options(node, id).await?),
                    ("set", ["options"]) => {
                        sim.fw_set_vm_options(node, id, &given).await?;
                        None
                    }
                    ("get", ["ipset"]) => Some(sim.fw_ipsets(node, id).await?),
                    ("create", ["ipset"]) => {
                        let name = option("name").ok_or_else(|| {
                            PveError::command(
                                "pvesh",
                                "400 Parameter verification failed.\nname: property is missing and it is not optional",
                                255,
                            )
                        })?;
                        sim.fw_create_ipset(node, id, name, option("comment"))
                            .await?;
                        None
                    }
                    ("get", ["ipset", name]) => Some(sim.fw_ipset(node, id, name).await?),
                    ("create", ["ipset", name]) => {
                        let cidr = option("cidr").ok_or_else(|| {
                            PveError::command(
                                "pvesh",
                                "400 Parameter verification failed.\ncidr: property is missing and it is not optional",
                                255,
                            )
                        })?;
                        sim.fw_add_ip(node, id, name, cidr).await?;
                        None
                    }
                    ("delete", ["ipset", name]) => {
                        sim.fw_delete_ipset(node, id, name, flag(options, "force"))
                            .await?;
                        None
                    }
                    ("delete", ["ipset", name, cidr]) => {
                        sim.fw_remove_ip(node, id, name, cidr).await?;
                        None
                    }
                    _ => return Err(no_handler()),
                }
            }
            _ => return Err(no_handler()),
        };
        Ok(match shown {
            Some(value) => print_json(&value),
            None => 0,
        })
    }

    async fn pvesm(&self, args: &[String]) -> Result<i32, PveError> {
        if args.first().map(String::as_str) != Some("status") {
            eprintln!("ERROR: unknown command 'pvesm {}'", args.join(" "));
            return Ok(255);
        }
        let content = args
            .windows(2)
            .find(|w| w[0] == "--content")
            .map(|w| w[1].as_str());
        let rows = self.sim.pvesm_status(&self.node, content).await?;
        let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(4) + 1;
        out(&format!(
            "{:<width$} {:>10} {:>10} {:>15} {:>15} {:>15} {:>8}",
            "Name", "Type", "Status", "Total (KiB)", "Used (KiB)", "Available (KiB)", "%"
        ));
        for r in rows {
            if r.status == "inactive" {
                eprintln!("storage '{}' is not online", r.name);
            }
            let pct = if r.status == "disabled" {
                format!("{:>8}", "N/A")
            } else if r.total_kib == 0 {
                format!("{:>7.2}%", 0.0)
            } else {
                format!("{:>7.2}%", r.used_kib as f64 * 100.0 / r.total_kib as f64)
            };
            out(&format!(
                "{:<width$} {:>10} {:>10} {:>15} {:>15} {:>15} {pct}",
                r.name, r.kind, r.status, r.total_kib, r.used_kib, r.avail_kib
            ));
        }
        Ok(0)
    }

    /// `ssh [options] user@host [command…]`.
    async fn ssh(&self, args: &[String]) -> Result<i32, PveError> {
        const WITH_VALUE: &str = "BbcDEeFIiJLlmOoPpQRSWw";
        let mut i = 0;
        let mut login = None;
        let mut port = 22u16;
        let mut options: Vec<String> = Vec::new();
        // `-t` asks for a pty when ssh's stdin is a terminal, `-tt` always;
        // `-T` never.
        let mut ttys = 0;
        while i < args.len() && args[i].starts_with('-') {
            let opt = &args[i];
            if opt == "--" {
                i += 1;
                break;
            }
            if opt.len() > 1 && opt[1..].chars().all(|c| "tT".contains(c)) {
                for c in opt[1..].chars() {
                    ttys = if c == 'T' { -1 } else { ttys.max(0) + 1 };
                }
                i += 1;
                continue;
            }
            let letter = opt.chars().nth(1).unwrap_or(' ');
            if WITH_VALUE.contains(letter) && opt.len() == 2 {
                let value = args.get(i + 1).cloned().unwrap_or_default();
                match letter {
                    'l' => login = Some(value),
                    'p' => port = value.parse().unwrap_or(22),
                    'o' => options.push(value),
                    _ => {}
                }
                i += 2;
            } else {
                i += 1;
            }
        }
        let Some(destination) = args.get(i) else {
            eprintln!("usage: ssh [options] destination [command]");
            return Ok(255);
        };
        let (user, host) = match destination.split_once('@') {
            Some((u, h)) => (u.to_string(), h.to_string()),
            None => (login.unwrap_or_else(|| "root".into()), destination.clone()),
        };
        let command = args[i + 1..].join(" ");
        let Ok(ip) = host.parse::<std::net::Ipv4Addr>() else {
            eprintln!("ssh: Could not resolve hostname {host}: Name or service not known");
            return Ok(255);
        };

        let node = self.sim.read(|s| {
            s.nodes
                .values()
                .find(|n| n.ip == Some(ip))
                .map(|n| (n.name.clone(), n.online))
        });
        if let Some((node, online)) = node {
            if !online {
                eprintln!("ssh: connect to host {ip} port {port}: No route to host");
                return Ok(255);
            }
            if user != "root" {
                eprintln!("{user}@{ip}: Permission denied (publickey).");
                return Ok(255);
            }
            // As the node's shell splits what `ssh` hands it, and sets
            // the variables written before the command.
            let Some(mut words) = shlex::split(&command) else {
                eprintln!("bash: -c: line 1: unexpected EOF while looking for matching quote");
                return Ok(2);
            };
            let assignments = words.iter().take_while(|w| is_assignment(w)).count();
            let env = words
                .drain(..assignments)
                .filter_map(|w| {
                    w.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect();
            let face = Face {
                sim: self.sim,
                node,
                remote: true,
                env,
                terminal: ttys >= 2 || (ttys == 1 && self.terminal),
            };
            return Box::pin(face.tool(&words)).await;
        }

        // A real guest answers for itself: the real `ssh`, with every
        // option pvedeck gave, in this process's place.
        if self.sim.has_real_guests() {
            use std::os::unix::process::CommandExt;
            let program = std::env::var("SIM_REAL_SSH").unwrap_or_else(|_| "/usr/bin/ssh".into());
            let err = std::process::Command::new(&program).args(args).exec();
            eprintln!("ssh: cannot run {program}: {err}");
            return Ok(255);
        }
        // A VM: the readiness probe or the init script. Its host key is
        // checked as `ssh` would with these options.
        let option = |name: &str| {
            options
                .iter()
                .find_map(|o| o.strip_prefix(&format!("{name}=")).map(str::to_string))
        };
        let strict = option("StrictHostKeyChecking").unwrap_or_else(|| "ask".into());
        let file = option("UserKnownHostsFile")
            .filter(|f| f != "/dev/null" && strict != "no")
            .map(std::path::PathBuf::from);
        if let (Some(file), "yes") = (&file, strict.as_str()) {
            let token = pvedeck_proxmox::known_hosts::host_token(ip, port);
            if pvedeck_proxmox::known_hosts::lookup(file, &token).is_none() {
                eprintln!(
                    "No ED25519 host key is known for {token} and you have requested strict checking.\nHost key verification failed."
                );
                return Ok(255);
            }
        }
        let target = GuestTarget {
            ip,
            port,
            user,
            key: std::path::PathBuf::new(),
            known_hosts: file,
        };
        let guest = if [pvedeck_proxmox::READY_COMMAND, "echo ready"].contains(&command.trim()) {
            GuestCommand::Ready
        } else if command.starts_with("f=$(mktemp) && cat > ") {
            // The init script, on stdin.
            let mut body = String::new();
            let _ = std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut body);
            GuestCommand::InitScript {
                name: String::new(),
                body,
            }
        } else {
            eprintln!("bash: line 1: {command}: command not found");
            return Ok(127);
        };
        pvedeck_proxmox::Pve::guest_exec(self.sim, &target, &guest, &out).await?;
        Ok(0)
    }

    /// `qm vncproxy <vmid>` (qm.pm `vncproxy`, `run_vnc_proxy`): the VM's
    /// VNC server on stdin/stdout, its password `LC_PVE_TICKET` (QMP
    /// `set_password`); without it, refused.
    async fn vncproxy(&self, id: u32) -> Result<i32, PveError> {
        let command = format!("qm vncproxy {id}");
        self.sim
            .read(|s| pvedeck_sim::qm::vm_on(s, &self.node, id, &command, true).map(drop))?;
        let Some(ticket) = self.env("LC_PVE_TICKET").filter(|t| !t.is_empty()) else {
            return Err(PveError::command(
                &command,
                "LC_PVE_TICKET not set, VNC proxy without password is forbidden",
                255,
            ));
        };
        let options = ConsoleOptions {
            password: Some(ticket),
            iface: None,
        };
        let console = self
            .sim
            .open_console(&self.node, id, ConsoleKind::Vnc, options)
            .await?;
        relay(console.io, None).await;
        Ok(0)
    }

    /// `qm terminal <vmid> [-iface serialN] [-escape X]` (qm.pm
    /// `terminal`): checks, a banner, then socat between the serial
    /// port's socket and stdio, which needs a terminal (`raw,echo=0`).
    async fn terminal(
        &self,
        id: u32,
        iface: Option<String>,
        escape: Option<String>,
    ) -> Result<i32, PveError> {
        let command = format!("qm terminal {id}");
        let escape = parse_escape(escape.as_deref().unwrap_or("^O")).ok_or_else(|| {
            PveError::command(
                &command,
                format!(
                    "invalid escape character definition: {}",
                    escape.as_deref().unwrap_or_default()
                ),
                255,
            )
        })?;
        let iface = self.sim.read(|s| {
            let vm = pvedeck_sim::qm::vm_on(s, &self.node, id, &command, true)?;
            pvedeck_sim::console::serial_iface(vm, iface.as_deref(), &command)
        })?;
        let options = ConsoleOptions {
            password: None,
            iface: Some(iface.clone()),
        };
        let console = self
            .sim
            .open_console(&self.node, id, ConsoleKind::Serial, options)
            .await?;
        let exit = if escape == 0 {
            String::new()
        } else {
            format!(" (press Ctrl+{} to exit)", char::from(escape + 0x40))
        };
        // A terminal turns the banner's newline into CR LF (socat has not
        // made it raw yet).
        let newline = if self.terminal { "\r\n" } else { "\n" };
        let banner = format!("starting serial terminal on interface {iface}{exit}{newline}");
        {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(banner.as_bytes());
            let _ = stdout.flush();
        }
        if !self.terminal {
            // socat's `raw,echo=0` on a pipe; qm ignores socat's exit.
            eprintln!(
                "socat[{}] E tcgetattr(0, 0x7ffc0c4e2a40): Inappropriate ioctl for device",
                std::process::id()
            );
            return Ok(0);
        }
        relay(console.io, (escape != 0).then_some(escape)).await;
        Ok(0)
    }

    /// `socat - UNIX-CONNECT:/var/run/qemu-server/<vmid>.serialN` on a
    /// node: the serial port's socket, byte for byte, which exists while
    /// the VM runs with that port a socket.
    async fn socat(&self, args: &[String]) -> Result<i32, PveError> {
        let stdio = ["-", "STDIO", "STDIN", "STDOUT"];
        let (socket, other): (Vec<&String>, Vec<&String>) = args
            .iter()
            .filter(|a| !a.starts_with('-') || *a == "-")
            .partition(|a| a.starts_with("UNIX-CONNECT:") || a.starts_with("UNIX:"));
        let (Some(socket), [io]) = (socket.first(), other.as_slice()) else {
            eprintln!(
                "socat[{}] E exactly 2 addresses required",
                std::process::id()
            );
            return Ok(1);
        };
        if !stdio.contains(&io.split(',').next().unwrap_or_default()) {
            eprintln!(
                "socat[{}] E unknown device/address \"{io}\"",
                std::process::id()
            );
            return Ok(1);
        }
        let path = socket.split_once(':').map_or("", |(_, p)| p);
        let path = path.split(',').next().unwrap_or_default();
        let port = path
            .strip_prefix("/var/run/qemu-server/")
            .or_else(|| path.strip_prefix("/run/qemu-server/"))
            .and_then(|name| name.split_once('.'))
            .and_then(|(id, iface)| Some((id.parse::<u32>().ok()?, iface.to_string())));
        let missing = || {
            eprintln!(
                "socat[{}] E connect(5, AF=1 \"{path}\", {}): No such file or directory",
                std::process::id(),
                path.len() + 2
            );
            Ok(1)
        };
        let Some((id, iface)) = port.filter(|(_, iface)| iface.starts_with("serial")) else {
            return missing();
        };
        let options = ConsoleOptions {
            password: None,
            iface: Some(iface),
        };
        // QEMU's socket is there only while the VM runs with that port.
        match self
            .sim
            .open_console(&self.node, id, ConsoleKind::Serial, options)
            .await
        {
            Ok(console) => {
                relay(console.io, None).await;
                Ok(0)
            }
            Err(_) => missing(),
        }
    }

    /// `pvedeck-sim fault '<json>'` or `pvedeck-sim fault clear`.
    fn fault(&self, args: &[String]) -> Result<i32, PveError> {
        match args.first().map(String::as_str) {
            Some("clear") => {
                self.sim.clear_faults();
                Ok(0)
            }
            Some(json) => {
                let fault = serde_json::from_str(json)
                    .map_err(|e| PveError::command("fault", format!("invalid fault: {e}"), 2))?;
                self.sim
                    .add_fault(fault)
                    .map_err(|e| PveError::command("fault", e.to_string(), 2))?;
                Ok(0)
            }
            None => {
                eprintln!("usage: pvedeck-sim fault '<json>' | clear");
                Ok(2)
            }
        }
    }

    /// `pvedeck-sim storage <id> content <list>`: what `pvesm set <id>
    /// --content <list>` does (the list replaces the old one), e.g. a
    /// `local` without `import`, as on PVE 8.4 or an upgraded host.
    fn storage_content(&self, args: &[String]) -> Result<i32, PveError> {
        let (Some(id), Some("content"), Some(list)) =
            (args.first(), args.get(1).map(String::as_str), args.get(2))
        else {
            eprintln!("usage: pvedeck-sim storage <id> content <list>");
            return Ok(2);
        };
        let found = self.sim.change(|s| {
            s.storages
                .iter_mut()
                .find(|st| &st.id == id)
                .map(|st| st.content = list.clone())
                .is_some()
        });
        if found {
            Ok(0)
        } else {
            eprintln!("storage '{id}' does not exist");
            Ok(255)
        }
    }

    /// `pvedeck-sim claim <vmid> <ip>`: a hostile guest takes another
    /// VM's address (`SimCluster::stage_claim`).
    fn claim(&self, args: &[String]) -> Result<i32, PveError> {
        let (Some(id), Some(ip)) = (
            args.first().and_then(|v| v.parse::<u32>().ok()),
            args.get(1)
                .and_then(|v| v.parse::<std::net::Ipv4Addr>().ok()),
        ) else {
            eprintln!("usage: pvedeck-sim claim <vmid> <ip>");
            return Ok(2);
        };
        self.sim.stage_claim(id, ip)?;
        Ok(0)
    }

    /// `pvedeck-sim node <node> online|offline`.
    fn node_state(&self, args: &[String]) -> Result<i32, PveError> {
        let online = match args.get(1).map(String::as_str) {
            Some("online") => true,
            Some("offline") => false,
            _ => {
                eprintln!("usage: pvedeck-sim node <node> online|offline");
                return Ok(2);
            }
        };
        let node = args.first().cloned().unwrap_or_default();
        self.sim.set_node_online(&node, online)?;
        Ok(0)
    }
}

/// `NAME=value`, a shell's variable assignment before a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// `qm terminal -escape`: `^X`, `0x…` or a number; 0 is none.
fn parse_escape(text: &str) -> Option<u8> {
    if let Some(c) = text.strip_prefix('^') {
        let mut chars = c.chars();
        return match (chars.next(), chars.next()) {
            (Some(c @ '\x40'..='\x7a'), None) => Some(c as u8 & 0x1f),
            _ => None,
        };
    }
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        return u8::from_str_radix(hex, 16).ok();
    }
    text.parse().ok()
}

/// A console between this process's stdin and stdout, until either side
/// ends; `escape` on stdin ends it too (socat's `escape=`).
async fn relay(io: Box<dyn ConsoleIo>, escape: Option<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut from_vm, mut to_vm) = tokio::io::split(io);
    let up = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; 4096];
        loop {
            let n = stdin.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            let chunk = &buf[..n];
            let end = escape.and_then(|e| chunk.iter().position(|b| *b == e));
            to_vm.write_all(&chunk[..end.unwrap_or(n)]).await?;
            to_vm.flush().await?;
            if end.is_some() {
                return Ok(());
            }
        }
    };
    let down = async {
        // Each chunk flushed at once: the peer waits on it, and std's
        // stdout would hold bytes until a newline.
        let mut stdout = tokio::io::stdout();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from_vm.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            stdout.write_all(&buf[..n]).await?;
            stdout.flush().await?;
        }
    };
    let ended = tokio::select! {
        up = up => up,
        down = down => down,
    };
    if let Err(e) = ended {
        tracing::debug!("console relay: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_assignments_read_as_qm_and_bash_read_them() {
        assert_eq!(parse_escape("^O"), Some(0x0f));
        assert_eq!(parse_escape("0"), Some(0));
        assert_eq!(parse_escape("0x1d"), Some(0x1d));
        assert_eq!(parse_escape("^"), None);
        assert_eq!(parse_escape("ctrl-o"), None);
        assert!(is_assignment("LC_PVE_TICKET=a:b=c"));
        assert!(!is_assignment("/usr/sbin/qm"));
        assert!(!is_assignment("1A=b"));
        assert!(!is_assignment("--name=x"));
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_and_flags_parse_like_qm() {
        let p = parse(&strings(&[
            "101",
            "--purge",
            "--skiplock",
            "--name",
            "web",
            "-cores",
            "2",
        ]))
        .unwrap();
        assert_eq!(p.positional, ["101"]);
        assert_eq!(
            p.options,
            [
                ("purge".to_string(), "1".to_string()),
                ("skiplock".to_string(), "1".to_string()),
                ("name".to_string(), "web".to_string()),
                ("cores".to_string(), "2".to_string()),
            ]
        );
        let p = parse(&strings(&["101", "--skiplock", "0"])).unwrap();
        assert_eq!(p.options, [("skiplock".to_string(), "0".to_string())]);
        assert!(parse(&strings(&["101", "--name"])).is_err());
    }

    #[test]
    fn json_keys_come_out_sorted() {
        let v = serde_json::json!({"b": 1, "a": {"d": 2, "c": 3}});
        assert_eq!(sorted(v).to_string(), r#"{"a":{"c":3,"d":2},"b":1}"#);
    }
}
