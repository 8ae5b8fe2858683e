//! `cargo xtask bench`: the figures of pvedeck's speed and memory, measured
//! on the release server and the simulated cluster (made as slow as a real
//! node where it matters: `SIM_PVESH_MS=300`, each `qm`/`pvesh`/`pvesm` a
//! Perl start-up). Not part of the test command; the README's table quotes
//! what it prints.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod replicas;

use crate::e2e::{Server, start_server};
use crate::http::{self, Response};
use crate::run::{Failed, output, step};

/// Each simulated Proxmox command costs this much, as on a real node.
const PVESH_MS: &str = "300";

/// One figure of the report.
struct Figure {
    what: String,
    value: String,
}

fn io(what: &str) -> impl Fn(std::io::Error) -> Failed + '_ {
    move |e| Failed(format!("{what}: {e}"))
}

pub fn run(root: &Path, only: &[String]) -> Result<(), Failed> {
    if output(Command::new("wrk").arg("--version")).is_none() && !Path::new("/usr/bin/wrk").exists()
    {
        crate::setup::apt_install(&["wrk"])?;
    }
    let out = root.join("target/bench");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).map_err(io("target/bench"))?;

    let mut figures = Vec::new();
    // `cargo xtask bench list-api large`: only those; none named, all.
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    type Bench = fn(&Path, &Path, &mut Vec<Figure>) -> Result<(), Failed>;
    let benches: [(&str, &str, Bench); 14] = [
        (
            "list-sim",
            "list under load, simulated cluster in-process",
            |r, d, f| list_load(r, d, Face::InProcess, f),
        ),
        (
            "list-cli",
            "list under load, through the cli face (qm/pvesh stand-ins)",
            |r, d, f| list_load(r, d, Face::Cli, f),
        ),
        (
            "list-api",
            "list under load, through the api face (REST, 50 ms an answer)",
            |r, d, f| list_load(r, d, Face::Api, f),
        ),
        ("install", "one install at SIM_SPEED=1", install_overhead),
        ("concurrent", "50 concurrent installs", concurrent_installs),
        (
            "placement",
            "50 installs with node auto over 3 nodes of unequal free memory",
            placement,
        ),
        (
            "followers",
            "memory: idle, and 1,000 followers of one job",
            followers,
        ),
        ("large", "5,000 VMs on 32 nodes", large_cluster),
        (
            "clusters",
            "3 simulated clusters of 5,000 VMs each",
            three_clusters,
        ),
        (
            "bundle",
            "the browser bundle, as Chromium loads each page",
            bundle,
        ),
        (
            "tenancy",
            "the VM list as anyone, a user and an admin see it",
            tenancy_overhead,
        ),
        (
            "signin",
            "OpenID Connect sign-in against the test provider",
            sign_in,
        ),
        (
            "replicas",
            "replicas on one PostgreSQL: installs, list, follow, kill -9",
            replicas::replicas,
        ),
        (
            "consoles",
            "the console relay under 20 open consoles",
            |r, _, f| consoles(r, f),
        ),
    ];
    for (name, title, bench) in benches {
        if wanted(name) {
            step(title, || bench(root, &out.join(name), &mut figures))?;
        }
    }

    println!("\n| figure | measured |\n|---|---|");
    for f in &figures {
        println!("| {} | {} |", f.what, f.value);
    }
    Ok(())
}

fn figure(figures: &mut Vec<Figure>, what: impl Into<String>, value: impl Into<String>) {
    let (what, value) = (what.into(), value.into());
    println!("    {what}: {value}");
    figures.push(Figure { what, value });
}

// --- servers ---------------------------------------------------------------

fn start(root: &Path, dir: &Path, env: &[(&str, &str)]) -> Result<(Server, String), Failed> {
    std::fs::create_dir_all(dir).map_err(io("bench dir"))?;
    let (server, url) = start_server(root, dir, env)?;
    let addr = url.trim_start_matches("http://").to_string();
    Ok((server, addr))
}

/// `PATH` with `dir/bin` first, where `tools` are the simulator's
/// stand-ins.
pub(crate) fn stand_ins(root: &Path, dir: &Path, tools: &[&str]) -> Result<String, Failed> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).map_err(io("stand-ins"))?;
    for tool in tools {
        let link = bin.join(tool);
        if !link.exists() {
            std::os::unix::fs::symlink(root.join(crate::e2e::SIM), &link)
                .map_err(io("stand-in link"))?;
        }
    }
    Ok(format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    ))
}

/// The environment of a `cli` server whose Proxmox commands are the
/// simulator's stand-ins, on loopback addresses.
fn cli_env(root: &Path, dir: &Path) -> Result<Vec<(String, String)>, Failed> {
    let path = stand_ins(root, dir, &crate::e2e::STAND_INS)?;
    // A loopback port where nothing listens: the VMID probe's.
    let closed = crate::e2e::closed_port()?;
    let data = |sub: &str| dir.join(sub).display().to_string();
    Ok([
        ("PATH", path),
        ("PVE_BACKEND", "cli".into()),
        ("GATEWAY", "127.0.0.1".into()),
        ("MAIN_NODE", "pve1".into()),
        ("NODE_pve1", "127.0.0.1".into()),
        ("ASSIGN_STORAGE", "local-zfs".into()),
        ("ASSIGN_IP_START", "101".into()),
        ("SSH_PORT", closed.to_string()),
        ("SSH_KEY_DIR", data("ssh")),
        ("IMAGE_CACHE_DIR", data("images")),
        ("SIM_PVESH_MS", PVESH_MS.into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect())
}

fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The commands the simulated cluster ran, in order.
fn commands(addr: &str, dir: &Path, cli: bool) -> Result<Vec<String>, Failed> {
    if cli {
        return Ok(std::fs::read_to_string(dir.join("data/sim/commands.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect());
    }
    let body = get(addr, "/api/sim/commands")?.body;
    // A JSON array of strings: split on the quotes (commands hold none).
    Ok(body
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect())
}

fn count(commands: &[String], prefixes: &[&str]) -> usize {
    commands
        .iter()
        .filter(|c| prefixes.iter().any(|p| c.starts_with(p)))
        .count()
}

fn rss_kib(server: &Server) -> Result<u64, Failed> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.0.id()))
        .map_err(io("/proc/<pid>/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Failed("no VmRSS".into()))
}

// --- HTTP ------------------------------------------------------------------

fn request(addr: &str, method: &str, path: &str, body: &str) -> Result<Response, Failed> {
    http::request(addr, method, path, body).map_err(Failed)
}

fn get(addr: &str, path: &str) -> Result<Response, Failed> {
    request(addr, "GET", path, "")
}

/// A JSON string field of an event line, unescaped well enough for step
/// names and messages.
fn field(line: &str, name: &str) -> Option<String> {
    let start = line.find(&format!("\"{name}\":\""))? + name.len() + 4;
    let mut out = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => out.push(chars.next()?),
            c => out.push(c),
        }
    }
    None
}

/// An install's events: `(step, message)` of every `data:` line.
const DEBIAN_12: &str = r#"{"os":"debian","version":"12"}"#;

fn install(addr: &str) -> Result<(Duration, Vec<(String, String)>), Failed> {
    run_job(addr, "/api/vm/install", DEBIAN_12)
}

/// A streamed job (install, template build) to its end: wall time and
/// `(step, message)` of each event.
fn run_job(
    addr: &str,
    path: &str,
    body: &str,
) -> Result<(Duration, Vec<(String, String)>), Failed> {
    let started = Instant::now();
    let res = request(addr, "POST", path, body)?;
    let wall = started.elapsed();
    if res.status != 200 {
        return Err(Failed(format!(
            "{path} answered {}: {}",
            res.status, res.body
        )));
    }
    let events = res
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| Some((field(l, "step")?, field(l, "message")?)))
        .collect::<Vec<_>>();
    if let Some((step, message)) = events.iter().find(|(_, m)| m.starts_with("[-]")) {
        return Err(Failed(format!("the install failed at {step}: {message}")));
    }
    Ok((wall, events))
}

// --- wrk -------------------------------------------------------------------

struct Load {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn to_ms(value: &str) -> Option<f64> {
    let (number, unit) = value.split_at(value.find(|c: char| c.is_alphabetic())?);
    let n: f64 = number.parse().ok()?;
    Some(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

fn wrk(addr: &str, path: &str, clients: u32, secs: u32) -> Result<Load, Failed> {
    wrk_as(addr, path, clients, secs, None)
}

/// [`wrk`] with a bearer token on every request.
fn wrk_as(
    addr: &str,
    path: &str,
    clients: u32,
    secs: u32,
    token: Option<&str>,
) -> Result<Load, Failed> {
    let mut command = Command::new("wrk");
    // wrk wants a connection per thread at least.
    command.args([
        &format!("-t{}", clients.clamp(1, 2)),
        &format!("-c{clients}"),
        &format!("-d{secs}s"),
        "--latency",
    ]);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let out = command
        .arg(format!("http://{addr}{path}"))
        .output()
        .map_err(io("wrk"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let find = |key: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .map(str::to_string)
    };
    let bad = || Failed(format!("cannot read wrk's output:\n{text}"));
    let rps = find("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .ok_or_else(bad)?;
    let p50_ms = find("50%").and_then(|v| to_ms(&v)).ok_or_else(bad)?;
    let p99_ms = find("99%").and_then(|v| to_ms(&v)).ok_or_else(bad)?;
    if text.contains("Non-2xx") {
        return Err(Failed(format!("errors under load:\n{text}")));
    }
    Ok(Load {
        rps,
        p50_ms,
        p99_ms,
    })
}

// --- the figures -----------------------------------------------------------

/// How the listing server reaches its cluster.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Face {
    InProcess,
    /// `qm`/`pvesh` stand-ins, each call `PVESH_MS`.
    Cli,
    /// The simulator's REST face, each answer `API_MS`.
    Api,
}

/// Each answer of the simulated REST API: what a busy Proxmox takes.
const API_MS: &str = "50";

/// `pvedeck-sim api` on `dir`'s cluster, each answer `API_MS` late; the
/// api backend's settings to reach it.
fn sim_api(root: &Path, dir: &Path) -> Result<(Server, Vec<(String, String)>), Failed> {
    std::fs::create_dir_all(dir.join("data")).map_err(io("bench dir"))?;
    let (face, settings) = crate::e2e::start_sim_api(root, dir, &[("SIM_API_MS", API_MS)])?;
    let mut env: Vec<(String, String)> = settings
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    for (k, v) in [
        ("MAIN_NODE", "pve1"),
        // Loopback VM addresses: nothing leaves the machine.
        ("GATEWAY", "127.0.0.1"),
        ("ASSIGN_STORAGE", "local-zfs"),
    ] {
        env.push((k.to_string(), v.to_string()));
    }
    Ok((face, env))
}

fn list_load(root: &Path, dir: &Path, face: Face, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let mut _face_process = None;
    let env = match face {
        Face::Cli => cli_env(root, dir)?,
        Face::InProcess => vec![
            ("PVE_BACKEND".to_string(), "sim".to_string()),
            ("SIM_PVESH_MS".to_string(), PVESH_MS.to_string()),
        ],
        Face::Api => {
            let (process, env) = sim_api(root, dir)?;
            _face_process = Some(process);
            env
        }
    };
    let (_server, addr) = start(root, dir, &pairs(&env))?;
    let cli = face != Face::InProcess;
    let (shown, cost, call) = match face {
        Face::InProcess => ("in-process", format!("{PVESH_MS} ms pvesh"), "pvesh"),
        Face::Cli => ("cli face", format!("{PVESH_MS} ms pvesh"), "pvesh"),
        Face::Api => (
            "api face",
            format!("{API_MS} ms per API answer"),
            "API reads",
        ),
    };
    get(&addr, "/api/vm/list")?;
    for clients in [8, 64] {
        let before = count(&commands(&addr, dir, cli)?, &["pvesh"]);
        let secs = 10;
        let load = wrk(&addr, "/api/vm/list", clients, secs)?;
        let reads = count(&commands(&addr, dir, cli)?, &["pvesh"]) - before;
        figure(
            figures,
            format!("`/api/vm/list`, {clients} clients, {cost}, {shown}"),
            format!(
                "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms; {} {call} in {secs} s ({} per minute)",
                load.rps,
                load.p50_ms,
                load.p99_ms,
                reads,
                reads * 60 / secs as usize
            ),
        );
    }
    Ok(())
}

/// Steps' own elapsed times, from their `(1.23s)` endings.
fn breakdown(events: &[(String, String)]) -> Vec<(String, f64)> {
    let mut steps: Vec<(String, f64)> = Vec::new();
    for (step, message) in events {
        let secs = message
            .strip_suffix("s)")
            .and_then(|m| m.rsplit_once(" ("))
            .and_then(|(_, n)| n.parse::<f64>().ok());
        if let (Some(secs), true) = (secs, message.starts_with("[+]")) {
            match steps.iter_mut().find(|(s, _)| s == step) {
                Some(entry) => entry.1 = secs,
                None => steps.push((step.clone(), secs)),
            }
        }
    }
    steps
}

/// `checking VMID 0.65 · assigning IP 0.00 · …`
fn step_times(events: &[(String, String)]) -> String {
    let steps: Vec<String> = breakdown(events)
        .into_iter()
        .map(|(s, t)| format!("{} {t:.2}", s.rsplit(" > ").next().unwrap_or(&s)))
        .collect();
    steps.join(" · ")
}

/// The simulated external time of one install (import, boots, script,
/// Proxmox's tasks), in seconds, as the simulator computes it.
fn world(root: &Path, dir: &Path) -> Result<f64, Failed> {
    let ms: u64 = output(
        Command::new(root.join(crate::e2e::SIM))
            .arg("world")
            .env("DATA_DIR", dir.join("data")),
    )
    .and_then(|o| o.trim().parse().ok())
    .ok_or_else(|| Failed("pvedeck-sim world".into()))?;
    Ok(ms as f64 / 1000.0)
}

fn install_overhead(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    // The image is fetched once, fast; the installs measured use the cache,
    // as every install but a site's first does.
    {
        let (_warm, addr) = start(root, dir, &[("PVE_BACKEND", "sim"), ("SIM_SPEED", "100")])?;
        install(&addr)?;
        // The clone path's template, built once, as a site does.
        run_job(&addr, "/api/templates", DEBIAN_12)?;
    }
    let env = [
        ("PVE_BACKEND", "sim"),
        ("SIM_SPEED", "1"),
        ("SIM_PVESH_MS", PVESH_MS),
    ];
    // Nobody reads the list meanwhile: the snapshot's refresher sleeps.
    let (_server, addr) = start(root, dir, &env)?;
    // The first install of a process also reads what a process reads once
    // (the nodes' CPU flags); the second is what a running server does.
    let mut import_wall = Duration::ZERO;
    for which in [
        "first install of a fresh process",
        "second install, same process",
    ] {
        let calls_before = commands(&addr, dir, false)?.len();
        let (wall, events) = install(&addr)?;
        let ran = commands(&addr, dir, false)?.split_off(calls_before);
        let world = world(root, dir)?;
        let calls = count(&ran, &["qm ", "pvesh ", "pvesm "]);
        // Reads a process makes once (the snapshot's first refresh, the CPU
        // flags) run beside the VMID probe; the install's own VM read is the
        // fresh one of the allocation.
        let snapshot_vms =
            count(&ran, &["pvesh get /cluster/resources --type vm"]).saturating_sub(1);
        let once = snapshot_vms
            + count(
                &ran,
                &[
                    "pvesh get /cluster/resources --type node",
                    "pvesm status",
                    "pvesh get /nodes/",
                ],
            );
        let path = calls - once.min(calls);
        let perl = path as f64 * 0.3;
        figure(
            figures,
            format!("install at SIM_SPEED=1, 300 ms per Proxmox call: {which}"),
            format!(
                "{:.2} s wall; simulated world {world:.2} s (import, boots, script, Proxmox's \
                 tasks); {path} Proxmox calls on the install's path ({perl:.1} s of start-ups) + \
                 {once} reads beside the VMID probe; overhead {:.2} s",
                wall.as_secs_f64(),
                wall.as_secs_f64() - world - perl
            ),
        );
        figure(figures, "its steps (s)", step_times(&events));
        import_wall = wall;
    }
    // The same request by the clone path, the template already built.
    let clone = r#"{"os":"debian","version":"12","method":"clone"}"#;
    let (wall, events) = run_job(&addr, "/api/vm/install", clone)?;
    figure(
        figures,
        "request → ready at SIM_SPEED=1, 300 ms per Proxmox call: import vs clone",
        format!(
            "import {:.2} s, clone {:.2} s ({:.2}× the import's time)",
            import_wall.as_secs_f64(),
            wall.as_secs_f64(),
            wall.as_secs_f64() / import_wall.as_secs_f64()
        ),
    );
    figure(figures, "the clone's steps (s)", step_times(&events));
    Ok(())
}

fn concurrent_installs(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let env = [("PVE_BACKEND", "sim"), ("SIM_SPEED", "20")];
    let (_server, addr) = start(root, dir, &env)?;
    // The first install fetches the image; the ones measured use it.
    install(&addr)?;
    let (one, _) = install(&addr)?;
    let started = Instant::now();
    let runs: Vec<_> = (0..50)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || install(&addr))
        })
        .collect();
    let mut vmids = Vec::new();
    for run in runs {
        let (_, events) = run
            .join()
            .map_err(|_| Failed("an install thread panicked".into()))??;
        vmids.extend(
            events
                .iter()
                .find_map(|(_, m)| m.strip_prefix("[*] VMID: ").map(str::to_string)),
        );
    }
    let all = started.elapsed();
    vmids.sort();
    vmids.dedup();
    figure(
        figures,
        "50 concurrent installs vs one, SIM_SPEED=20",
        format!(
            "{:.2} s vs {:.2} s ({:.2}×); {} distinct VMIDs",
            all.as_secs_f64(),
            one.as_secs_f64(),
            all.as_secs_f64() / one.as_secs_f64(),
            vmids.len()
        ),
    );
    Ok(())
}

/// The placement target: 50 installs with `"node":"auto"` over 3 nodes of
/// unequal free memory end within 10 % of proportional to free memory,
/// none over `MAX_OVERCOMMIT`.
///
/// The rule places each VM on the node with the most free memory, so the
/// nodes fill toward equal free memory ("water-filling"), not toward
/// counts proportional to what each had free. The two agree when the VMs
/// use up the free memory: each node then takes its free memory's worth.
/// So the measured run sizes its VMs to fill the cluster exactly — nodes
/// of 108, 68 and 48 GiB with 8 GiB of host use each (100, 60 and 40 GiB
/// free), 50 VMs of 4 GiB (200 GiB) — and checks the shares and the
/// overcommit; a second run, VMs of 2 GiB filling half the free memory,
/// is printed to show the same rule leaving equal free memory instead.
fn placement(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let (filled, shares) = place_fifty(root, &dir.join("filled"), 4096)?;
    figure(
        figures,
        "placement: 50 × 4 GiB, 1 vCPU, `node: auto`, concurrent, nodes 100/60/40 GiB free, MAX_OVERCOMMIT=1",
        filled,
    );
    let worst = shares.iter().copied().fold(0.0, f64::max);
    if worst > 0.10 {
        return Err(Failed(format!(
            "a node's share is {:.1} % off proportional (target: within 10 %)",
            worst * 100.0
        )));
    }
    let (half, _) = place_fifty(root, &dir.join("half"), 2048)?;
    figure(
        figures,
        "placement, not a target: 50 × 2 GiB (half the free memory): greedy levels free memory",
        half,
    );
    Ok(())
}

/// A node of the VM list: name, GiB, logical CPUs, % of memory in use,
/// % of memory and vCPUs given to its VMs.
struct NodeFigures {
    node: String,
    memory: f64,
    cores: f64,
    used_pct: f64,
    given_pct: f64,
    vcpus: f64,
}

fn node_figures(addr: &str) -> Result<Vec<NodeFigures>, Failed> {
    let res = get(addr, "/api/vm/list")?;
    let list: serde_json::Value = serde_json::from_str(&res.body)
        .map_err(|e| Failed(format!("the VM list is not JSON: {e}")))?;
    let nodes = list["cluster"].as_array().cloned().unwrap_or_default();
    let number = |n: &serde_json::Value, key: &str| n[key].as_f64().unwrap_or(0.0);
    Ok(nodes
        .iter()
        .map(|n| NodeFigures {
            node: n["node"].as_str().unwrap_or_default().to_string(),
            memory: number(n, "max_memory"),
            cores: number(n, "max_cpu"),
            used_pct: number(n, "memory_used"),
            given_pct: number(n, "memory"),
            vcpus: number(n, "vcpus"),
        })
        .collect())
}

/// 50 concurrent installs of `ram_mb` each with `node: auto` on a fresh
/// cluster of three nodes; the report, and each node's deviation from its
/// proportional share (a fraction of that share).
fn place_fifty(root: &Path, dir: &Path, ram_mb: u32) -> Result<(String, Vec<f64>), Failed> {
    let env = [
        ("PVE_BACKEND", "sim"),
        ("SIM_SPEED", "50"),
        ("SIM_JITTER", "0"),
        ("SIM_NODES", "3"),
        ("SIM_VMS", "0"),
        ("SIM_NODE_MEMORY", "108,68,48"),
        ("MAX_OVERCOMMIT", "1"),
    ];
    let (_server, addr) = start(root, dir, &env)?;
    let before = node_figures(&addr)?;
    let free: Vec<f64> = before
        .iter()
        .map(|n| n.memory * (1.0 - n.used_pct / 100.0))
        .collect();
    let body = format!(r#"{{"os":"debian","version":"12","node":"auto","cpu":1,"ram":{ram_mb}}}"#);
    let runs: Vec<_> = (0..50)
        .map(|_| {
            let (addr, body) = (addr.clone(), body.clone());
            std::thread::spawn(move || run_job(&addr, "/api/vm/install", &body))
        })
        .collect();
    let mut placed: Vec<String> = Vec::new();
    for run in runs {
        let (_, events) = run
            .join()
            .map_err(|_| Failed("an install thread panicked".into()))??;
        let on = events.iter().find_map(|(_, m)| {
            let rest = m.strip_prefix("[+] placed on ")?;
            rest.split_once(':').map(|(node, _)| node.to_string())
        });
        placed
            .push(on.ok_or_else(|| Failed("an install said nowhere where it was placed".into()))?);
    }
    let after = node_figures(&addr)?;
    let total_free: f64 = free.iter().sum();
    let mut parts = Vec::new();
    let mut off = Vec::new();
    for ((n, free), later) in before.iter().zip(&free).zip(&after) {
        let count = placed.iter().filter(|p| **p == n.node).count();
        let share = count as f64 / 50.0;
        let proportional = free / total_free;
        let deviation = (share - proportional).abs() / proportional;
        off.push(deviation);
        // What the node's VMs are given, of what it has: memory or vCPUs,
        // whichever is higher.
        let overcommit = (later.given_pct / 100.0).max(later.vcpus / later.cores.max(1.0));
        // Free as placement counts it: what the new VMs are given is taken.
        // (The list's percentages leave a few MiB either way: no "-0.0".)
        let given_free_after = match free - count as f64 * f64::from(ram_mb) / 1024.0 {
            tiny if tiny.abs() < 0.05 => 0.0,
            left => left,
        };
        parts.push(format!(
            "{}: {:.1} GiB free before, {count} VMs, share {:.1} % vs {:.1} % proportional \
             ({:.1} % off), {:.1} GiB free after, overcommit {:.2}",
            n.node,
            free,
            share * 100.0,
            proportional * 100.0,
            deviation * 100.0,
            given_free_after,
            overcommit
        ));
        if overcommit > 1.0 {
            return Err(Failed(format!(
                "{} is over MAX_OVERCOMMIT=1: {overcommit:.2}",
                n.node
            )));
        }
    }
    Ok((parts.join("; "), off))
}

/// An install started on `addr`, read only up to its job id; the stream
/// stays open (the job goes on either way).
fn start_install(addr: &str) -> Result<(TcpStream, u64), Failed> {
    let mut stream = http::connect(addr).map_err(Failed)?;
    write!(
        stream,
        "POST /api/vm/install HTTP/1.0\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{DEBIAN_12}",
        DEBIAN_12.len()
    )
    .map_err(io("send"))?;
    let mut head = [0u8; 1024];
    let n = stream.read(&mut head).map_err(io("receive"))?;
    let head = String::from_utf8_lossy(&head[..n]);
    let job = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-job-id: ")
                .and_then(|v| v.trim().parse().ok())
        })
        .ok_or_else(|| Failed(format!("no job id in {head}")))?;
    Ok((stream, job))
}

fn followers(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let env = [("PVE_BACKEND", "sim"), ("SIM_SPEED", "1")];
    let (server, addr) = start(root, dir, &env)?;
    get(&addr, "/api/vm/list")?;
    let idle = rss_kib(&server)?;
    // A long install to follow: its stream is read only up to the job id.
    let (_install, job) = start_install(&addr)?;
    let mut follows = Vec::new();
    for _ in 0..1000 {
        let mut s = TcpStream::connect(&addr).map_err(io("connect"))?;
        write!(s, "GET /api/jobs/{job}/events HTTP/1.0\r\n\r\n").map_err(io("send"))?;
        follows.push(s);
    }
    // Each follower has its answer (the stream is open) before measuring.
    for s in &mut follows {
        let mut first = [0u8; 64];
        s.read(&mut first).map_err(io("follow"))?;
    }
    let with = rss_kib(&server)?;
    figure(
        figures,
        "RSS idle; with 1,000 SSE followers of one job",
        format!(
            "{:.1} MB; {:.1} MB (+{:.1} MB)",
            idle as f64 / 1024.0,
            with as f64 / 1024.0,
            (with.saturating_sub(idle)) as f64 / 1024.0
        ),
    );
    Ok(())
}

fn large_cluster(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let env = [
        ("PVE_BACKEND", "sim"),
        ("SIM_NODES", "32"),
        ("SIM_VMS", "5000"),
        ("SIM_PVESH_MS", PVESH_MS),
    ];
    let (_server, addr) = start(root, dir, &env)?;
    let res = get(&addr, "/api/vm/list")?;
    if res.status != 200 || !res.body.contains("\"count\":5000") {
        return Err(Failed(format!("the large list: {}", res.head)));
    }
    let load = wrk(&addr, "/api/vm/list", 8, 10)?;
    let ssr = ssr_times(&addr)?;
    figure(
        figures,
        "5,000 VMs on 32 nodes: `/api/vm/list` at 8 clients; SSR of `/`",
        format!(
            "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms; SSR median {:.1} ms, worst {:.1} ms",
            load.rps,
            load.p50_ms,
            load.p99_ms,
            ssr[ssr.len() / 2],
            ssr[ssr.len() - 1]
        ),
    );
    Ok(())
}

/// 20 server renderings of the overview, one after another, in ms,
/// fastest first.
fn ssr_times(addr: &str) -> Result<Vec<f64>, Failed> {
    let mut ssr: Vec<f64> = (0..20)
        .map(|_| {
            let started = Instant::now();
            get(addr, "/").map(|_| started.elapsed().as_secs_f64() * 1000.0)
        })
        .collect::<Result<_, _>>()?;
    ssr.sort_by(f64::total_cmp);
    Ok(ssr)
}

/// `SIM_CLUSTERS=3`, each cluster 5,000 VMs on 32 nodes: the merged list
/// under load and the overview's server rendering.
fn three_clusters(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let env = [
        ("PVE_BACKEND", "sim"),
        ("SIM_CLUSTERS", "3"),
        ("SIM_NODES", "32"),
        ("SIM_VMS", "5000"),
        ("SIM_PVESH_MS", PVESH_MS),
    ];
    let (_server, addr) = start(root, dir, &env)?;
    let res = get(&addr, "/api/vm/list")?;
    if res.status != 200 || !res.body.contains("\"count\":15000") {
        return Err(Failed(format!("the list of 3 clusters: {}", res.head)));
    }
    // One reader: how long a list takes; eight: what the server sustains
    // (15,000 entries are 3.7 MB a response, copied on the same two cores).
    let alone = wrk(&addr, "/api/vm/list", 1, 5)?;
    let load = wrk(&addr, "/api/vm/list", 8, 10)?;
    let ssr = ssr_times(&addr)?;
    figure(
        figures,
        "3 clusters × 5,000 VMs: `/api/vm/list` at 1 client",
        format!(
            "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
            alone.rps, alone.p50_ms, alone.p99_ms
        ),
    );
    figure(
        figures,
        "3 clusters × 5,000 VMs: `/api/vm/list` at 8 clients; SSR of `/`",
        format!(
            "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms; SSR median {:.1} ms, p95 {:.1} ms, worst {:.1} ms",
            load.rps,
            load.p50_ms,
            load.p99_ms,
            ssr[ssr.len() / 2],
            ssr[ssr.len() * 95 / 100],
            ssr[ssr.len() - 1]
        ),
    );
    Ok(())
}

/// A file of the bundle as the server sends it: raw and its `.gz`.
fn served(pkg: &Path, name: &str) -> Result<(u64, u64), Failed> {
    let size = |n: &str| {
        std::fs::metadata(pkg.join(n))
            .map(|m| m.len())
            .map_err(|e| Failed(format!("{}: {e}", pkg.join(n).display())))
    };
    Ok((size(name)?, size(&format!("{name}.gz"))?))
}

/// The most WASM requests and bytes (gzip, as sent) a page may take to
/// hydrate (issue 30).
const PAGE_REQUESTS: u64 = 12;
const PAGE_BYTES: u64 = 200_000;
/// The bench server's API token: with one, the sign-in form and the
/// account page have their islands (`end2end/bench/bundle.mjs` signs in).
const BUNDLE_TOKEN: &str = "bench-bundle-token-0123456789abcdef";

/// What each page's browser downloads to hydrate, as Chromium sees it
/// (`end2end/bench/bundle.mjs`): the release server on the simulated
/// cluster, each page in a fresh context, its `.wasm` requests counted
/// with the bytes that came over the wire until its islands are hydrated.
/// Fails when a page takes more than [`PAGE_REQUESTS`] or [`PAGE_BYTES`].
fn bundle(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    crate::setup::test_tools(root)?;
    let pkg: PathBuf = root.join("target/site/pkg");
    let mut rest = (0, 0);
    for name in [
        "pvedeck.js",
        "__wasm_split.______________________.js",
        "pvedeck.css",
    ] {
        let (raw, gz) = served(&pkg, name)?;
        rest = (rest.0 + raw, rest.1 + gz);
    }
    let env = [
        ("PVE_BACKEND", "sim"),
        ("SIM_SPEED", "50"),
        ("API_TOKENS", BUNDLE_TOKEN),
    ];
    let (_server, addr) = start(root, dir, &env)?;
    let out = Command::new("node")
        .arg("bench/bundle.mjs")
        .current_dir(root.join("end2end"))
        .env("BASE_URL", format!("http://{addr}"))
        .env("CHROMIUM", crate::e2e::CHROMIUM)
        .env("TOKEN", BUNDLE_TOKEN)
        .output()
        .map_err(io("node end2end/bench/bundle.mjs"))?;
    if !out.status.success() {
        return Err(Failed(format!(
            "end2end/bench/bundle.mjs: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Failed(format!("end2end/bench/bundle.mjs printed no report: {e}")))?;
    let loads = |what: &serde_json::Value| -> Result<PageLoad, Failed> {
        serde_json::from_value(what.clone())
            .map_err(|e| Failed(format!("end2end/bench/bundle.mjs: {e}: {what}")))
    };
    let pages = report["pages"]
        .as_array()
        .ok_or_else(|| Failed("end2end/bench/bundle.mjs reported no pages".to_string()))?;
    let mut over = Vec::new();
    let mut largest = (0, String::new());
    for page in pages {
        let page = loads(page)?;
        if page.bytes > largest.0 {
            largest = (page.bytes, page.page.clone());
        }
        if page.console.requests > 0 {
            over.push(format!(
                "{} loaded the console's files: {}",
                page.page,
                page.console.files.join(", ")
            ));
        }
        if page.requests > PAGE_REQUESTS || page.bytes > PAGE_BYTES {
            over.push(format!(
                "{}: {} requests, {} bytes",
                page.page, page.requests, page.bytes
            ));
        }
        figure(
            figures,
            format!("bundle: WASM of {} ({})", page.page, page.path),
            page.shown(),
        );
        page.check()?;
    }
    let start = loads(&report["start"])?;
    figure(
        figures,
        "bundle: fetched when a VM page's Start begins a job (its timeline)",
        start.shown(),
    );
    start.check()?;
    let console = loads(&report["console"])?;
    figure(
        figures,
        "bundle: the console page (/vm/:id/console), its own files: script, styles, noVNC or xterm.js",
        format!(
            "{} requests, {} bytes as sent; WASM: {}",
            console.console.requests,
            console.console.bytes,
            console.shown()
        ),
    );
    figure(
        figures,
        "bundle: JS and CSS every page loads besides",
        format!("{} bytes, {} gzip", rest.0, rest.1),
    );
    figure(
        figures,
        "bundle: largest page's WASM",
        format!("{} gzip ({})", largest.0, largest.1),
    );
    if over.is_empty() {
        Ok(())
    } else {
        Err(Failed(format!(
            "pages over {PAGE_REQUESTS} WASM requests or {PAGE_BYTES} bytes, or with the console's files: {}",
            over.join("; ")
        )))
    }
}

/// The `.wasm` responses of one page load, as `bundle.mjs` reports them.
#[derive(serde::Deserialize)]
struct PageLoad {
    page: String,
    path: String,
    requests: u64,
    bytes: u64,
    files: Vec<WasmFile>,
    /// The console page's own files this load fetched.
    console: ConsoleFiles,
}

#[derive(serde::Deserialize)]
struct ConsoleFiles {
    requests: u64,
    bytes: u64,
    files: Vec<String>,
}

#[derive(serde::Deserialize)]
struct WasmFile {
    file: String,
    status: u16,
    encoding: String,
    bytes: u64,
}

impl PageLoad {
    fn shown(&self) -> String {
        let files: Vec<String> = self
            .files
            .iter()
            .map(|f| format!("{} {}", f.file, f.bytes))
            .collect();
        let s = if self.requests == 1 { "" } else { "s" };
        format!(
            "{} request{s}, {} bytes gzip ({})",
            self.requests,
            self.bytes,
            files.join(", ")
        )
    }

    /// Every module came, gzip-compressed as the budget counts it.
    fn check(&self) -> Result<(), Failed> {
        match self
            .files
            .iter()
            .find(|f| f.status != 200 || f.encoding != "gzip")
        {
            Some(f) => Err(Failed(format!(
                "{}: {} came with status {} and encoding {}",
                self.path, f.file, f.status, f.encoding
            ))),
            None => Ok(()),
        }
    }
}

// --- people ----------------------------------------------------------------

/// `pvedeck <args>` on the bench's data directory (the admin commands):
/// what it printed on stdout.
fn admin_command(root: &Path, dir: &Path, args: &[&str]) -> Result<String, Failed> {
    let out = crate::e2e::binary(root, crate::e2e::SERVER, dir)
        .args(args)
        .output()
        .map_err(io("pvedeck admin command"))?;
    if !out.status.success() {
        return Err(Failed(format!(
            "pvedeck {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

const BENCH_ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef";

/// What ownership costs the list: the same cluster read by anyone on an
/// open server, then by a user (their own VMs) and an admin (every VM,
/// with owners) once there are users.
fn tenancy_overhead(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let env = [("PVE_BACKEND", "sim"), ("SIM_PVESH_MS", PVESH_MS)];
    let (secs, clients) = (10, 8);
    let open = {
        let (_server, addr) = start(root, dir, &env)?;
        get(&addr, "/api/vm/list")?;
        wrk(&addr, "/api/vm/list", clients, secs)?
    };
    admin_command(root, dir, &["user", "add", "alice"])?;
    let token = admin_command(root, dir, &["token", "create", "alice"])?;
    let token = token.trim();
    for vmid in ["101", "102", "103"] {
        admin_command(root, dir, &["vm", "assign", vmid, "alice"])?;
    }
    let mut with_users = env.to_vec();
    with_users.push(("API_TOKENS", BENCH_ADMIN_TOKEN));
    let (_server, addr) = start(root, dir, &with_users)?;
    // As the open server's first read above: the first snapshot is read
    // before anything is measured.
    wrk_as(&addr, "/api/vm/list", clients, 1, Some(token))?;
    let user = wrk_as(&addr, "/api/vm/list", clients, secs, Some(token))?;
    let admin = wrk_as(
        &addr,
        "/api/vm/list",
        clients,
        secs,
        Some(BENCH_ADMIN_TOKEN),
    )?;
    let shown = |what: &str, load: &Load| {
        format!(
            "{what}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms ({:+.2} ms p99 against the open server)",
            load.rps,
            load.p50_ms,
            load.p99_ms,
            load.p99_ms - open.p99_ms
        )
    };
    figure(
        figures,
        format!("`/api/vm/list`, {clients} clients, no sign-in"),
        format!(
            "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
            open.rps, open.p50_ms, open.p99_ms
        ),
    );
    figure(
        figures,
        format!("`/api/vm/list`, {clients} clients, a user's token (3 VMs theirs)"),
        shown("user", &user),
    );
    figure(
        figures,
        format!("`/api/vm/list`, {clients} clients, an admin token (every VM, owners shown)"),
        shown("admin", &admin),
    );
    Ok(())
}

/// A header of a response head.
fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_string())
    })
}

/// `http://host:port/path?query` split into `host:port` and `/path?query`.
fn split_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let slash = rest.find('/').unwrap_or(rest.len());
    let path = if slash == rest.len() {
        "/"
    } else {
        &rest[slash..]
    };
    Some((rest[..slash].to_string(), path.to_string()))
}

/// A sign-in from `/auth/login` to the session cookie, through the test
/// provider (which signs alice in without a form): its wall time.
fn one_sign_in(addr: &str) -> Result<Duration, Failed> {
    let started = Instant::now();
    let redirect = |res: &Response, what: &str| {
        header_of(&res.head, "location").ok_or_else(|| {
            Failed(format!(
                "{what} answered {} without a redirect: {}",
                res.status, res.body
            ))
        })
    };
    let to_provider = redirect(&get(addr, "/auth/login?next=/")?, "/auth/login")?;
    let (provider, path) =
        split_url(&to_provider).ok_or_else(|| Failed(format!("provider URL {to_provider}")))?;
    let back = redirect(&get(&provider, &path)?, "the provider")?;
    let (_, callback) = split_url(&back).ok_or_else(|| Failed(format!("callback URL {back}")))?;
    let done = get(addr, &callback)?;
    let cookie = header_of(&done.head, "set-cookie").unwrap_or_default();
    if !cookie.starts_with("pvedeck_session=") {
        return Err(Failed(format!(
            "the callback opened no session ({}): {}",
            done.status, done.body
        )));
    }
    Ok(started.elapsed())
}

/// Sign-in round trips against the test OpenID provider
/// (`end2end/oidc/provider.mjs`, run with Node): the first (discovery and
/// keys read), then warm ones.
fn sign_in(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    crate::setup::test_tools(root)?;
    let port = crate::e2e::closed_port()?;
    let secret = "bench-client-secret";
    let mut provider = Command::new("node")
        .arg(root.join("end2end/oidc/provider.mjs"))
        .args([
            "--port",
            "0",
            "--client-id",
            "pvedeck",
            "--client-secret",
            secret,
        ])
        .args([
            "--redirect",
            &format!("http://127.0.0.1:{port}/auth/callback"),
        ])
        .args(["--auto-login", "alice"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(io("node end2end/oidc/provider.mjs"))?;
    let mut first = String::new();
    if let Some(out) = provider.stdout.as_mut() {
        let mut byte = [0u8; 1];
        while out.read(&mut byte).map_err(io("provider output"))? == 1 && byte[0] != b'\n' {
            first.push(byte[0] as char);
        }
    }
    let _provider = Server(provider);
    let issuer = first
        .split('"')
        .find(|part| part.starts_with("http://"))
        .ok_or_else(|| Failed(format!("the provider printed no issuer: {first}")))?
        .to_string();
    let public = format!("http://127.0.0.1:{port}");
    let port = port.to_string();
    let env = [
        ("PVE_BACKEND", "sim"),
        ("PORT", port.as_str()),
        ("PUBLIC_URL", public.as_str()),
        ("OIDC_ISSUER", issuer.as_str()),
        ("OIDC_CLIENT_ID", "pvedeck"),
        ("OIDC_CLIENT_SECRET", secret),
    ];
    let (_server, addr) = start(root, dir, &env)?;
    let cold = one_sign_in(&addr)?;
    let mut warm: Vec<Duration> = (0..50)
        .map(|_| one_sign_in(&addr))
        .collect::<Result<_, _>>()?;
    warm.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    figure(
        figures,
        "sign-in round trip (OpenID Connect, test provider, loopback)",
        format!(
            "first {:.1} ms (discovery and keys read); then median {:.1} ms, p95 {:.1} ms, max {:.1} ms over {}",
            ms(cold),
            ms(warm[warm.len() / 2]),
            ms(warm[warm.len() * 95 / 100]),
            ms(warm[warm.len() - 1]),
            warm.len()
        ),
    );
    Ok(())
}

/// The console relay's figure: `tests/console.rs`'s benchmark (ignored in
/// the test command), which prints `FIGURE <what>: <value>` lines.
fn consoles(root: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let printed = output(
        Command::new(cargo)
            .args([
                "test",
                "-j2",
                "--release",
                "--test",
                "console",
                "--",
                "--ignored",
                "--nocapture",
                "bench_relay",
            ])
            .current_dir(root),
    )
    .ok_or_else(|| Failed("the console relay benchmark failed (cargo test --release --test console -- --ignored bench_relay)".into()))?;
    let mut found = false;
    for line in printed.lines() {
        if let Some((what, value)) = line
            .strip_prefix("FIGURE ")
            .and_then(|rest| rest.split_once(": "))
        {
            figure(figures, what, value);
            found = true;
        }
    }
    if found {
        Ok(())
    } else {
        Err(Failed(
            "the console relay benchmark printed no figure".into(),
        ))
    }
}
