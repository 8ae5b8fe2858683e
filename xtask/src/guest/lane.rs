//! `cargo xtask guest`: the pipeline against real Debian guests. The
//! simulated cluster's VMs are QEMU machines (`SIM_GUESTS=qemu`, the
//! simulator's `real` module) booted from the image `image::ensure` builds;
//! pvedeck runs with the `cli` backend over the simulator's stand-ins, so its
//! own code does the rest: real `ssh` with the pinned host key, the real
//! init script, reboots, the guest agent, template cleaning.
//!
//! Stages, each timed: (a) an import install to ready, and its serial and
//! graphical consoles through pvedeck (`console`), (b) a golden
//! template build, (c) two linked clones at once, ready by the agent and
//! `cloud-init status --wait`, checked for distinct machine-ids and host
//! keys, each host key the one `ssh-keyscan` sees; the faults a real guest
//! can show (cloud-init's error, a host key changed after it was pinned);
//! (d) everything destroyed, no QEMU and no disk left.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::image::{self, GuestImage};
use crate::e2e::{SIM, Server, binary, closed_port, start_logged, start_server};
use crate::http;
use crate::run::{Failed, step};

/// What the image is published as: pvedeck asks the mirror for Debian 12's
/// own file name.
const IMAGE_NAME: &str = "debian-12-generic-amd64.qcow2";

fn io(what: &str) -> impl Fn(std::io::Error) -> Failed + '_ {
    move |e| Failed(format!("{what}: {e}"))
}

/// `build` is the server's release build of the test command (the same
/// package set, so nothing is built twice).
pub fn run(root: &Path, build: impl FnOnce(&Path) -> Result<(), Failed>) -> Result<(), Failed> {
    let image = step(
        "the guest image (built once, cached in target/guest)",
        || image::ensure(root),
    )?;
    build(root)?;
    let out = root.join("target/guest/run");
    let lane = step("start the mirror and the server", || {
        Lane::start(root, &out, &image)
    })?;
    let result = lane.stages();
    lane.stop_machines();
    result
}

struct Lane {
    out: PathBuf,
    url: String,
    /// The stand-ins' directory, first on the server's `PATH`.
    bin: PathBuf,
    /// The simulator's binary (`pvedeck-sim fault …`).
    sim: PathBuf,
    env: Vec<(&'static str, String)>,
    _mirror: Server,
    _server: Server,
}

impl Lane {
    fn start(root: &Path, out: &Path, image: &GuestImage) -> Result<Lane, Failed> {
        let previous = Lane::runtime_dirs(out);
        Lane::kill_machines(&previous);
        if out.exists() {
            std::fs::remove_dir_all(out).map_err(io("the previous run"))?;
        }
        let mirror_dir = out.join("mirror");
        let bin = out.join("bin");
        for dir in [&mirror_dir, &bin, &out.join("data")] {
            std::fs::create_dir_all(dir).map_err(io("target/guest/run"))?;
        }
        // The image under Debian's name, with the checksum list beside it.
        std::fs::hard_link(&image.disk, mirror_dir.join(IMAGE_NAME))
            .or_else(|_| std::fs::copy(&image.disk, mirror_dir.join(IMAGE_NAME)).map(drop))
            .map_err(io("the mirror's image"))?;
        std::fs::write(
            mirror_dir.join("SHA512SUMS"),
            format!("{}  {IMAGE_NAME}\n", image.sha512),
        )
        .map_err(io("SHA512SUMS"))?;
        for tool in crate::e2e::STAND_INS {
            std::os::unix::fs::symlink(root.join(SIM), bin.join(tool))
                .map_err(io("the stand-ins"))?;
        }
        let mut mirror = binary(root, SIM, out);
        mirror.arg("mirror").env("SIM_MIRROR_DIR", &mirror_dir);
        let (mirror, mirror_url) = start_logged(mirror, out, "mirror.log", "http://")?;

        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let guest_dir = image
            .kernel
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let env: Vec<(&'static str, String)> = vec![
            ("PATH", path),
            ("PVE_BACKEND", "cli".into()),
            ("MAIN_NODE", "pve1".into()),
            ("NODE_pve1", "127.0.0.1".into()),
            ("NODE_pve2", "127.0.0.12".into()),
            ("NODE_pve3", "127.0.0.13".into()),
            ("GATEWAY", "127.0.0.1".into()),
            ("ASSIGN_STORAGE", "local-zfs".into()),
            // A port of its own on every VM address, where no host sshd
            // answers for it.
            ("SSH_PORT", closed_port()?.to_string()),
            ("SIM_GUESTS", "qemu".into()),
            ("SIM_GUEST_DIR", guest_dir.display().to_string()),
            ("SIM_SPEED", "2000".into()),
            ("SIM_JITTER", "0".into()),
            ("INIT_SCRIPTS", "real".into()),
            ("IMAGE_BASE_DEBIAN", format!("{mirror_url}/")),
            // TCG boots take a minute or more: patience, checked often.
            ("SSH_POLL_INTERVAL_MS", "2000".into()),
            ("SSH_POLL_ATTEMPTS", "300".into()),
            ("RUST_LOG", "info".into()),
        ];
        let shown: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (server, url) = start_server(root, out, &shown)?;
        println!("    server at {url}, logs in {}", out.display());
        Ok(Lane {
            out: out.to_path_buf(),
            url,
            bin,
            sim: root.join(SIM),
            env,
            _mirror: mirror,
            _server: server,
        })
    }

    fn addr(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string()
    }

    fn stages(&self) -> Result<(), Failed> {
        let started = Instant::now();
        let install = step("(a) import install to ready, on a real guest", || {
            self.install(r#"{"os":"debian","version":"12"}"#, "import install")
        })?;
        step(
            "(a) the VM's serial and graphical consoles through pvedeck",
            || self.consoles(install),
        )?;
        let template = step(
            "(b) golden template build (identity cleaned by the agent)",
            || {
                let began = Instant::now();
                let events = self.stream(
                    "POST",
                    "/api/templates",
                    r#"{"os":"debian","version":"12"}"#,
                )?;
                check(&events, "template build")?;
                println!("    template built in {:.0?}", began.elapsed());
                self.template_id()
            },
        )?;
        let clones = step(
            "(c) two linked clones at once, ready by agent and cloud-init",
            || {
                let body = r#"{"os":"debian","version":"12","method":"clone"}"#;
                let (a, b) = std::thread::scope(|s| {
                    let one = s.spawn(|| self.install(body, "clone 1"));
                    let two = s.spawn(|| self.install(body, "clone 2"));
                    (join(one), join(two))
                });
                let clones = [a?, b?];
                self.distinct(&clones)?;
                Ok(clones)
            },
        )?;
        let failed = step(
            "faults: cloud-init reports an error on a real guest",
            || self.cloud_init_error(),
        )?;
        step(
            "faults: a host key that changes after it was pinned",
            || self.changed_host_key(install),
        )?;
        step("(d) destroy everything", || {
            for vmid in [install, clones[0], clones[1], failed] {
                self.destroy(vmid)?;
            }
            self.ok("DELETE", &format!("/api/templates/{template}"), "")?;
            self.nothing_left()
        })?;
        println!("    all stages in {:.0?}", started.elapsed());
        Ok(())
    }

    /// VM `vmid`'s consoles as a script opens them: the serial line's
    /// getty (the kernel's `console=ttyS0`), then QEMU's VNC display
    /// through `qm vncproxy`, drawn.
    fn consoles(&self, vmid: u32) -> Result<(), Failed> {
        let began = Instant::now();
        let prompt = super::console::serial(&self.addr(), vmid)
            .map_err(|e| Failed(format!("serial console of VM {vmid}: {e}")))?;
        println!("    serial console: {prompt:?} in {:.0?}", began.elapsed());
        let began = Instant::now();
        let screen = super::console::graphical(&self.addr(), vmid)
            .map_err(|e| Failed(format!("graphical console of VM {vmid}: {e}")))?;
        println!(
            "    graphical console: {:?}, {}×{}, {} pixels lit, in {:.0?}",
            screen.name,
            screen.width,
            screen.height,
            screen.lit,
            began.elapsed()
        );
        if screen.lit == 0 {
            return Err(Failed(format!("VM {vmid}'s graphical console is blank")));
        }
        Ok(())
    }

    /// An install followed to its end: the VMID, the time printed.
    fn install(&self, body: &str, what: &str) -> Result<u32, Failed> {
        let began = Instant::now();
        let events = self.stream("POST", "/api/vm/install", body)?;
        check(&events, what)?;
        let vmid =
            vmid_of(&events).ok_or_else(|| Failed(format!("{what}: no VMID in its events")))?;
        println!(
            "    {what}: VM {vmid}, request → ready in {:.0?}",
            began.elapsed()
        );
        Ok(vmid)
    }

    /// The simulator's `cloud-init` fault, planted in the next clone's
    /// seed: the real guest's cloud-init fails in its own words, the
    /// install fails at readiness and the VM is kept (failure contract).
    fn cloud_init_error(&self) -> Result<u32, Failed> {
        self.tool(
            &self.sim,
            &[
                "fault",
                r#"{"op":"cloud-init","action":"fail","times":1,"message":"planted by cargo xtask guest"}"#,
            ],
        )?;
        let events = self.stream(
            "POST",
            "/api/vm/install",
            r#"{"os":"debian","version":"12","method":"clone"}"#,
        )?;
        let vmid = vmid_of(&events).ok_or_else(|| {
            Failed(format!(
                "no VMID in the failed install's events: {events:?}"
            ))
        })?;
        self.failed_and_kept(&events, vmid, "cloud-init reported an error")?;
        Ok(vmid)
    }

    /// A request that must answer 200; anything else fails the stage
    /// with the status and body.
    fn ok(&self, method: &str, path: &str, body: &str) -> Result<http::Response, Failed> {
        let answer = http::request(&self.addr(), method, path, body).map_err(Failed)?;
        if answer.status == 200 {
            Ok(answer)
        } else {
            Err(Failed(format!(
                "{method} {path}: {} {}",
                answer.status, answer.body
            )))
        }
    }

    /// A streamed answer's events (`data:` lines), once it has closed.
    fn stream(
        &self,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<Vec<serde_json::Value>, Failed> {
        let answer = self.ok(method, path, body)?;
        let job = answer.head.lines().find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-job-id:")
                .map(|v| v.trim().to_string())
        });
        let mut events: Vec<serde_json::Value> = answer
            .body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect();
        // The job's own record names its VM.
        if let Some(job) = job
            && let Ok(detail) = http::request(&self.addr(), "GET", &format!("/api/jobs/{job}"), "")
            && let Ok(detail) = serde_json::from_str::<serde_json::Value>(&detail.body)
        {
            events.push(detail);
        }
        Ok(events)
    }

    fn template_id(&self) -> Result<u32, Failed> {
        let answer = http::request(&self.addr(), "GET", "/api/templates", "").map_err(Failed)?;
        let list: serde_json::Value =
            serde_json::from_str(&answer.body).map_err(|e| Failed(format!("templates: {e}")))?;
        list.as_array()
            .and_then(|l| l.iter().find_map(|t| t["vmid"].as_u64()))
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| Failed(format!("no template listed: {list}")))
    }

    /// The stand-in `qm` as the server runs it.
    fn qm(&self, args: &[&str]) -> Result<String, Failed> {
        self.tool(&self.bin.join("qm"), args)
    }

    /// `program` (a stand-in, or the simulator itself) with the server's
    /// environment and data.
    fn tool(&self, program: &Path, args: &[&str]) -> Result<String, Failed> {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&self.out)
            .env_clear()
            .env("HOME", &self.out)
            .env("DATA_DIR", self.out.join("data"))
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())));
        let output = command.output().map_err(io("qm"))?;
        if !output.status.success() {
            return Err(Failed(format!(
                "{} {}: {}",
                program.display(),
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// What the guest's agent says a command prints.
    fn in_guest(&self, vmid: u32, argv: &[&str]) -> Result<String, Failed> {
        let id = vmid.to_string();
        let mut args = vec!["guest", "exec", id.as_str(), "--timeout", "60", "--"];
        args.extend(argv);
        let report: serde_json::Value = serde_json::from_str(&self.qm(&args)?)
            .map_err(|e| Failed(format!("qm guest exec {vmid}: {e}")))?;
        if report["exitcode"] != 0 {
            return Err(Failed(format!("{argv:?} in VM {vmid}: {report}")));
        }
        Ok(report["out-data"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string())
    }

    /// Each clone is its own machine: machine-id, host key, and the host key
    /// is what answers on its address.
    fn distinct(&self, clones: &[u32]) -> Result<(), Failed> {
        let port = self
            .env
            .iter()
            .find(|(k, _)| *k == "SSH_PORT")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let mut ids = BTreeSet::new();
        let mut keys = BTreeSet::new();
        for &vmid in clones {
            let status = self.in_guest(vmid, &["cloud-init", "status"])?;
            if !status.contains("status: done") {
                return Err(Failed(format!("VM {vmid}: cloud-init says {status}")));
            }
            let id = self.in_guest(vmid, &["cat", "/etc/machine-id"])?;
            let key = self.in_guest(vmid, &["cat", "/etc/ssh/ssh_host_ed25519_key.pub"])?;
            let key: String = key.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            let ip = format!("127.0.0.{}", vmid % 256);
            let scanned = Command::new("ssh-keyscan")
                .args(["-t", "ed25519", "-p", &port, &ip])
                .output()
                .map_err(io("ssh-keyscan"))?;
            let scanned = String::from_utf8_lossy(&scanned.stdout);
            if !scanned.contains(&key) {
                return Err(Failed(format!(
                    "VM {vmid}: ssh-keyscan of {ip}:{port} saw {scanned:?}, the guest has {key}"
                )));
            }
            println!("    VM {vmid}: machine-id {id}, host key {key} (= ssh-keyscan)");
            ids.insert(id);
            keys.insert(key);
        }
        if ids.len() != clones.len() || keys.len() != clones.len() {
            return Err(Failed(format!(
                "the clones share an identity: machine-ids {ids:?}, host keys {keys:?}"
            )));
        }
        Ok(())
    }

    /// The guest makes itself new host keys; the next reboot's SSH wait
    /// must refuse it in `ssh`'s words, and the VM stays (failure contract:
    /// a lifecycle action removes nothing).
    fn changed_host_key(&self, vmid: u32) -> Result<(), Failed> {
        self.in_guest(
            vmid,
            &[
                "sh",
                "-c",
                "rm -f /etc/ssh/ssh_host_* && ssh-keygen -A && systemctl restart ssh",
            ],
        )?;
        let events = self.stream("POST", &format!("/api/vm/{vmid}/reboot"), "")?;
        self.failed_and_kept(&events, vmid, "host key is not the one recorded")
    }

    /// The job failed with `words` in its error and VM `vmid` runs on (the
    /// failure contract keeps it).
    fn failed_and_kept(
        &self,
        events: &[serde_json::Value],
        vmid: u32,
        words: &str,
    ) -> Result<(), Failed> {
        let refused = events.iter().find(|e| {
            e["status"] == "error" && e["message"].as_str().is_some_and(|m| m.contains(words))
        });
        let Some(refused) = refused else {
            return Err(Failed(format!(
                "VM {vmid}: no error saying {words:?}: {events:?}"
            )));
        };
        println!(
            "    VM {vmid}: {}",
            refused["message"].as_str().unwrap_or_default()
        );
        let status = self.qm(&["status", &vmid.to_string()])?;
        if !status.contains("running") {
            return Err(Failed(format!("VM {vmid} after the failure: {status}")));
        }
        println!("    VM {vmid} kept, {}", status.trim());
        Ok(())
    }

    fn destroy(&self, vmid: u32) -> Result<(), Failed> {
        for action in ["stop", "destroy"] {
            self.ok("POST", &format!("/api/vm/{vmid}/{action}"), "")?;
        }
        Ok(())
    }

    /// No QEMU runs and no disk file is left.
    fn nothing_left(&self) -> Result<(), Failed> {
        let running: Vec<PathBuf> = Lane::runtime_dirs(&self.out)
            .into_iter()
            .filter(|dir| pid(dir).is_some())
            .collect();
        let disks: Vec<_> = std::fs::read_dir(self.out.join("data/sim/disks"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        if running.is_empty() && disks.is_empty() {
            println!("    no QEMU runs, no disk is left");
            Ok(())
        } else {
            Err(Failed(format!(
                "left behind: machines {running:?}, disks {disks:?}"
            )))
        }
    }

    fn runtime_dirs(out: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(out.join("data/sim/m"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    fn kill_machines(dirs: &[PathBuf]) {
        for dir in dirs {
            if let Some(pid) = pid(dir) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }

    /// Whatever a failed stage left running.
    fn stop_machines(&self) {
        Lane::kill_machines(&Lane::runtime_dirs(&self.out));
    }
}

/// The pid in a VM's runtime directory, if that process lives.
fn pid(dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(dir.join("qemu.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// The VM a job made: its record's `vmid` (pushed last by `stream`), else
/// the first "VM <n>" its messages name.
fn vmid_of(events: &[serde_json::Value]) -> Option<u32> {
    events
        .iter()
        .filter_map(|e| e["vmid"].as_u64())
        .next_back()
        .or_else(|| {
            events.iter().find_map(|e| {
                let msg = e["message"].as_str()?;
                msg.split("VM ")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
        })
        .and_then(|v| u32::try_from(v).ok())
}

fn join<T>(handle: std::thread::ScopedJoinHandle<'_, Result<T, Failed>>) -> Result<T, Failed> {
    handle
        .join()
        .unwrap_or_else(|_| Err(Failed("a stage's thread panicked".into())))
}

/// A stream that ended in an error fails the stage with the step's words.
fn check(events: &[serde_json::Value], what: &str) -> Result<(), Failed> {
    let errors: Vec<String> = events
        .iter()
        .filter(|e| e["status"] == "error")
        .map(|e| {
            format!(
                "{} | {}",
                e["step"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            )
        })
        .collect();
    if errors.is_empty() && !events.is_empty() {
        Ok(())
    } else {
        Err(Failed(format!("{what} failed: {}", errors.join("; "))))
    }
}
