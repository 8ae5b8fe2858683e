//! `PVE_BACKEND=cli`: the `Pve` port over the real commands. `qm` and
//! `pvesm` run on the VM's node (locally on `MAIN_NODE`, else through
//! `ssh root@<NODE_ip>`); `pvesh` runs locally (it proxies to other nodes
//! itself); VMs are reached with `ssh` as the cloud-init user.

mod parse;
mod run;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use pvedeck_config::Config;
use run::{Output, Runner};

use crate::firewall::{self, IpFilter};
use crate::output::Limits;
use crate::{
    AgentExec, CloneMode, DiskImage, GuestCommand, GuestTarget, LineSink, NodeResource, NodeStatus,
    PowerAction, Pve, PveError, QmOptions, RrdRow, StorageStatus, VmResource,
};

/// What `probe` allows a connection attempt.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub struct CliBackend {
    runner: Runner,
    main_node: String,
}

fn strings<const N: usize>(words: [&str; N]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// A VNC password for one `qm vncproxy`: eight characters from `!` to
/// `` ` ``, as Proxmox makes its own (pve-common `PVE::Ticket`,
/// `generate_vnc_password`); VNC uses eight bytes of it.
fn vnc_password() -> Result<String, PveError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| PveError::command("qm vncproxy", format!("no randomness: {e}"), 2))?;
    Ok(bytes.iter().map(|b| char::from(0x21 + b % 64)).collect())
}

impl CliBackend {
    pub fn new(config: &Config) -> CliBackend {
        CliBackend {
            runner: Runner::new(config.main_node.clone(), config.nodes.clone()),
            main_node: config.main_node.clone(),
        }
    }

    async fn on(&self, node: &str, program: &str, args: Vec<String>) -> Result<Output, PveError> {
        let argv = self.runner.on_node(node, program, &args)?;
        self.runner.run(&argv, None, None).await
    }

    /// [`Self::on`] for a command whose output a guest writes.
    async fn on_bounded(
        &self,
        node: &str,
        program: &str,
        args: Vec<String>,
        limits: Limits,
    ) -> Result<Output, PveError> {
        let argv = self.runner.on_node(node, program, &args)?;
        self.runner.run_bounded(&argv, None, None, limits).await
    }

    async fn on_streaming(
        &self,
        node: &str,
        program: &str,
        args: Vec<String>,
        out: LineSink<'_>,
    ) -> Result<Output, PveError> {
        let argv = self.runner.on_node(node, program, &args)?;
        self.runner.run(&argv, None, Some(out)).await
    }

    async fn pvesh<T: serde::de::DeserializeOwned>(
        &self,
        args: Vec<String>,
    ) -> Result<T, PveError> {
        let shown = format!("pvesh {}", args.join(" "));
        let out = self.on(&self.main_node, "pvesh", args).await?;
        parse::json(&shown, &out.stdout)
    }

    /// A `pvesh` listing, read entry by entry (`json::listing`).
    async fn pvesh_list<T: serde::de::DeserializeOwned>(
        &self,
        args: Vec<String>,
    ) -> Result<Vec<T>, PveError> {
        let shown = format!("pvesh {}", args.join(" "));
        let all: serde_json::Value = self.pvesh(args).await?;
        crate::json::listing(&shown, all).map_err(|detail| PveError::Parse {
            command: shown,
            detail,
        })
    }

    /// `qm create|set <vmid> --k v …`. `--sshkeys FILE` is read by `qm` on
    /// the node where it runs (qemu-server `PVE/CLI/qm.pm`,
    /// `param_mapping`: `file_get_contents`), where pvedeck's file is not:
    /// on another node the keys travel on ssh's stdin, named `/dev/stdin`.
    async fn qm_with_files(
        &self,
        node: &str,
        verb: &str,
        vmid: u32,
        options: &QmOptions,
    ) -> Result<(), PveError> {
        let mut stdin = None;
        let mut args = vec![verb.to_string(), vmid.to_string()];
        for (key, value) in options {
            let value = if key == "sshkeys" && node != self.main_node {
                let keys = tokio::fs::read(value).await.map_err(|e| {
                    PveError::command(
                        format!("qm {verb} {vmid}"),
                        format!("cannot read the SSH keys file {value}: {e}"),
                        2,
                    )
                })?;
                stdin = Some(keys);
                "/dev/stdin".to_string()
            } else {
                value.clone()
            };
            args.push(format!("--{key}"));
            args.push(value);
        }
        let argv = self.runner.on_node(node, "qm", &args)?;
        self.runner
            .run(&argv, stdin.as_deref(), None)
            .await
            .map(drop)
    }

    /// The ssh argument vector for a VM: pvedeck's key only, no prompt, the
    /// host key checked against pvedeck's known-hosts file.
    fn guest_argv(target: &GuestTarget, remote: &str) -> Vec<String> {
        // `-F /dev/null`: the system's and the service user's ssh_config do
        // not apply to a guest (a `Host *` with agent forwarding or a
        // control master meant for the nodes would hand a tenant's VM a
        // way back); what a guest session may do is said here, in full.
        let mut argv = strings([
            "ssh",
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ForwardAgent=no",
            "-o",
            "ForwardX11=no",
            "-o",
            "ClearAllForwardings=yes",
            "-o",
            "ControlMaster=no",
            "-o",
            "ControlPath=none",
            "-o",
            "PermitLocalCommand=no",
            // A guest may not add host keys to pvedeck's pinned file.
            "-o",
            "UpdateHostKeys=no",
        ]);
        // The host key is checked against pvedeck's own file: required once
        // recorded, recorded at first contact.
        let checking = match &target.known_hosts {
            Some(file) => {
                let token = super::known_hosts::host_token(target.ip, target.port);
                let mode = super::known_hosts::strictness(file, &token);
                vec![
                    format!("UserKnownHostsFile={}", file.display()),
                    format!("StrictHostKeyChecking={mode}"),
                    "HashKnownHosts=no".to_string(),
                ]
            }
            None => vec![
                "UserKnownHostsFile=/dev/null".to_string(),
                "StrictHostKeyChecking=no".to_string(),
            ],
        };
        for option in checking {
            argv.push("-o".into());
            argv.push(option);
        }
        argv.push("-i".into());
        argv.push(target.key.to_string_lossy().into_owned());
        argv.push("-p".into());
        argv.push(target.port.to_string());
        // Options end here: no destination can pass for one (`-oProxyCommand=…`).
        argv.push("--".into());
        argv.push(format!("{}@{}", target.user, target.ip));
        argv.push(remote.to_string());
        argv
    }
}

/// The remote command of SSH initialization: the script comes on stdin,
/// is kept whole in a private file, then runs as root (through sudo unless
/// already root) with stdin closed — a package step reading stdin cannot
/// swallow the rest of the script.
const INIT_COMMAND: &str = "f=$(mktemp) && cat > \"$f\" && \
     if [ \"$(id -u)\" = 0 ]; then bash \"$f\"; else sudo bash \"$f\"; fi </dev/null; \
     rc=$?; rm -f \"$f\"; exit $rc";

#[async_trait]
impl Pve for CliBackend {
    async fn cluster_vms(&self) -> Result<Vec<VmResource>, PveError> {
        self.pvesh_list(strings([
            "get",
            "/cluster/resources",
            "--type",
            "vm",
            "--output-format",
            "json",
        ]))
        .await
    }

    async fn cluster_nodes(&self) -> Result<Vec<NodeResource>, PveError> {
        self.pvesh_list(strings([
            "get",
            "/cluster/resources",
            "--type",
            "node",
            "--output-format",
            "json",
        ]))
        .await
    }

    async fn node_status(&self, node: &str) -> Result<NodeStatus, PveError> {
        let path = format!("/nodes/{node}/status");
        self.pvesh(vec![
            "get".into(),
            path,
            "--output-format".into(),
            "json".into(),
        ])
        .await
    }

    async fn rrddata(
        &self,
        node: &str,
        timeframe: pvedeck_domain::types::Timeframe,
    ) -> Result<Vec<RrdRow>, PveError> {
        self.pvesh_list(strings([
            "get",
            &format!("/nodes/{node}/rrddata"),
            "--timeframe",
            timeframe.as_str(),
            "--output-format",
            "json",
        ]))
        .await
    }

    async fn storage_status(&self, node: &str) -> Result<Vec<StorageStatus>, PveError> {
        // Only the storages that may hold VM disks: a storage without
        // `images` in its content is refused before anything is made.
        let out = self
            .on(node, "pvesm", strings(["status", "--content", "images"]))
            .await?;
        parse::pvesm_status(&out.stdout)
    }

    async fn create(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError> {
        self.qm_with_files(node, "create", vmid, options).await
    }

    /// `qm disk import` reads the image on the node where it runs
    /// (qemu-server `PVE/CLI/qm.pm`), and pvedeck's cache is on the main
    /// node: a VM placed elsewhere is made there and migrated.
    fn imports_on_any_node(&self) -> bool {
        false
    }

    async fn import_disk(
        &self,
        node: &str,
        vmid: u32,
        image: &DiskImage,
        storage: &str,
        out: LineSink<'_>,
    ) -> Result<String, PveError> {
        // `qm disk import`: `qm importdisk` is the alias kept for old
        // scripts (qemu-server `PVE/CLI/qm.pm`, `$cmddef`).
        let args = vec![
            "disk".to_string(),
            "import".to_string(),
            vmid.to_string(),
            image.file()?.to_string_lossy().into_owned(),
            storage.to_string(),
        ];
        let output = self.on_streaming(node, "qm", args, out).await?;
        parse::imported_volume(&output.stdout)
    }

    async fn set(&self, node: &str, vmid: u32, options: &QmOptions) -> Result<(), PveError> {
        self.qm_with_files(node, "set", vmid, options).await
    }

    async fn resize(
        &self,
        node: &str,
        vmid: u32,
        disk: &str,
        size: &str,
    ) -> Result<String, PveError> {
        // `qm disk resize` (`qm resize` is its old alias): it exits 0 when
        // its task failed, so the engine reads the size back.
        let mut args: Vec<String> = strings(["disk", "resize"]);
        args.extend([vmid.to_string(), disk.to_string(), size.to_string()]);
        let out = self.on(node, "qm", args).await?;
        let printed = out.stderr.trim();
        if !printed.is_empty() {
            tracing::warn!(vmid, "qm resize printed: {printed}");
        }
        Ok(printed.to_string())
    }

    async fn config(&self, node: &str, vmid: u32) -> Result<BTreeMap<String, String>, PveError> {
        let out = self
            .on(node, "qm", vec!["config".into(), vmid.to_string()])
            .await?;
        parse::qm_config(&out.stdout)
    }

    async fn status(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        let out = self
            .on(node, "qm", vec!["status".into(), vmid.to_string()])
            .await?;
        parse::qm_status(&out.stdout)
    }

    async fn power(&self, node: &str, vmid: u32, action: PowerAction) -> Result<(), PveError> {
        let mut args = vec![action.verb().to_string(), vmid.to_string()];
        if let PowerAction::Stop { skiplock: true } = action {
            args.push("--skiplock".into());
        }
        self.on(node, "qm", args).await.map(drop)
    }

    async fn destroy(&self, node: &str, vmid: u32, skiplock: bool) -> Result<(), PveError> {
        // `--destroy-unreferenced-disks 1`: a disk an interrupted import
        // left unattached goes with the VM (it defaults to 0), as the api
        // backend asks it too.
        let mut args = strings([
            "destroy",
            &vmid.to_string(),
            "--purge",
            "--destroy-unreferenced-disks",
            "1",
        ]);
        if skiplock {
            args.push("--skiplock".into());
        }
        self.on(node, "qm", args).await.map(drop)
    }

    async fn migrate(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let args = vec![
            "migrate".to_string(),
            vmid.to_string(),
            target.to_string(),
            "--with-local-disks".to_string(),
        ];
        self.on_streaming(node, "qm", args, out).await.map(drop)
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
        let args = vec![
            "clone".to_string(),
            source.to_string(),
            vmid.to_string(),
            "--name".into(),
            name.to_string(),
            "--full".into(),
            full.into(),
        ];
        self.on_streaming(node, "qm", args, out).await.map(drop)
    }

    async fn template(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        let out = self
            .on(node, "qm", vec!["template".into(), vmid.to_string()])
            .await?;
        // A failed conversion task still exits 0: the config says whether
        // the VM became a template.
        let config = self.config(node, vmid).await?;
        if config.get("template").map(String::as_str) == Some("1") {
            return Ok(());
        }
        let said = out.stderr.trim();
        Err(PveError::command(
            format!("qm template {vmid}"),
            if said.is_empty() {
                format!("VM {vmid} is not a template after qm template")
            } else {
                said.to_string()
            },
            0,
        ))
    }

    async fn agent_ping(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        // `qm guest cmd` (`qm agent` is its old alias).
        let args = strings(["guest", "cmd", &vmid.to_string(), "ping"]);
        self.on(node, "qm", args).await.map(drop)
    }

    async fn agent_exec(
        &self,
        node: &str,
        vmid: u32,
        argv: &[String],
        timeout_secs: u32,
    ) -> Result<AgentExec, PveError> {
        let mut args = vec![
            "guest".to_string(),
            "exec".into(),
            vmid.to_string(),
            "--timeout".into(),
            timeout_secs.to_string(),
            "--".into(),
        ];
        args.extend(argv.iter().cloned());
        let shown = format!("qm guest exec {vmid}");
        let out = self.on_bounded(node, "qm", args, Limits::AGENT).await?;
        parse::agent_exec(&shown, &out.stdout)
    }

    async fn cluster_firewall(&self) -> Result<bool, PveError> {
        let options: serde_json::Value = self
            .pvesh(strings([
                "get",
                "/cluster/firewall/options",
                "--output-format",
                "json",
            ]))
            .await?;
        Ok(firewall::cluster_enabled(&options))
    }

    /// `pvesh` proxies to the VM's node itself (`proxyto => 'node'`), and
    /// the VM's firewall file is cluster-wide (`/etc/pve/firewall`): it
    /// runs on the main node like every `pvesh`.
    async fn ip_filter(&self, node: &str, vmid: u32, filter: IpFilter) -> Result<(), PveError> {
        let base = format!("/nodes/{node}/qemu/{vmid}/firewall");
        let ipsets = format!("{base}/ipset");
        let ipset = format!("{ipsets}/{}", firewall::IPSET);
        let run = |args: Vec<String>| async move {
            self.on(&self.main_node, "pvesh", args).await.map(drop)
        };
        let listed: serde_json::Value = self
            .pvesh(vec![
                "get".into(),
                ipsets.clone(),
                "--output-format".into(),
                "json".into(),
            ])
            .await?;
        if firewall::has_ipset(&listed) {
            // A clone's, copied from its template, or an earlier try's.
            run(vec![
                "delete".into(),
                ipset.clone(),
                "--force".into(),
                "1".into(),
            ])
            .await?;
        }
        if let IpFilter::Only(ip) = filter {
            run(vec![
                "create".into(),
                ipsets,
                "--name".into(),
                firewall::IPSET.into(),
                "--comment".into(),
                firewall::IPSET_COMMENT.into(),
            ])
            .await?;
            run(vec![
                "create".into(),
                ipset,
                "--cidr".into(),
                ip.to_string(),
            ])
            .await?;
        }
        let mut args = vec!["set".to_string(), format!("{base}/options")];
        for (key, value) in firewall::options(filter) {
            args.push(format!("--{key}"));
            args.push(value.to_string());
        }
        run(args).await
    }

    /// `qm vncproxy <vmid>` speaks RFB on its standard input and output,
    /// with the VNC password `LC_PVE_TICKET` gives it (without one it
    /// refuses); the serial port's socket is read with `socat`, as `qm
    /// terminal` does, without the terminal `qm terminal` insists on
    /// (docs/proxmox.md#consoles). On another node through `ssh`, which
    /// passes `LC_*` as Proxmox's own `sshd` accepts them.
    async fn console(
        &self,
        node: &str,
        vmid: u32,
        kind: crate::ConsoleKind,
    ) -> Result<crate::ConsoleStream, PveError> {
        let (program, args, password) = match kind {
            crate::ConsoleKind::Vnc => (
                "qm",
                strings(["vncproxy", &vmid.to_string()]),
                Some(vnc_password()?),
            ),
            crate::ConsoleKind::Serial => (
                "socat",
                strings([
                    "-",
                    &format!("UNIX-CONNECT:/var/run/qemu-server/{vmid}.serial0"),
                ]),
                None,
            ),
        };
        let mut argv = self.runner.on_node(node, program, &args)?;
        if argv.first().is_some_and(|p| p == "ssh") && password.is_some() {
            argv.splice(1..1, strings(["-o", "SendEnv=LC_PVE_TICKET"]));
        }
        let env: Vec<(&str, &str)> = password
            .as_deref()
            .map(|p| ("LC_PVE_TICKET", p))
            .into_iter()
            .collect();
        let stream = self.runner.stream(&argv, &env)?;
        Ok(crate::ConsoleStream {
            io: Box::new(stream),
            password,
        })
    }

    async fn probe(&self, ip: Ipv4Addr, port: u16) -> bool {
        let addr = SocketAddr::from((ip, port));
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await,
            Ok(Ok(_))
        )
    }

    async fn guest_exec(
        &self,
        target: &GuestTarget,
        command: &GuestCommand,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        match command {
            GuestCommand::Ready => {
                let argv = CliBackend::guest_argv(target, super::READY_COMMAND);
                self.runner
                    .run_bounded(&argv, None, Some(out), Limits::GUEST)
                    .await
                    .map(drop)
            }
            GuestCommand::InitScript { body, .. } => {
                let argv = CliBackend::guest_argv(target, INIT_COMMAND);
                // The script travels on the session pvedeck opened to the
                // host whose key it checked: nothing to fetch, nothing in an
                // argument list.
                self.runner
                    .run_bounded(&argv, Some(body.as_bytes()), Some(out), Limits::GUEST)
                    .await
                    .map(drop)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_script_comes_on_stdin_and_runs_with_stdin_closed() {
        assert!(INIT_COMMAND.starts_with("f=$(mktemp) && cat > \"$f\" && "));
        assert!(INIT_COMMAND.contains("sudo bash \"$f\"; fi </dev/null"));
        assert!(!INIT_COMMAND.contains("curl"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        let target = GuestTarget {
            ip: Ipv4Addr::new(10, 0, 0, 101),
            port: 22,
            user: "debian".into(),
            key: "/root/.ssh/id_ed25519".into(),
            known_hosts: Some(file.clone()),
        };
        let argv = CliBackend::guest_argv(&target, "echo ready");
        assert_eq!(argv.last().map(String::as_str), Some("echo ready"));
        assert!(argv.contains(&"debian@10.0.0.101".to_string()));
        assert_eq!(argv[1..3], ["-F", "/dev/null"], "no ssh_config applies");
        for off in [
            "ForwardAgent=no",
            "ForwardX11=no",
            "ControlMaster=no",
            "ControlPath=none",
            "ClearAllForwardings=yes",
            "UpdateHostKeys=no",
        ] {
            assert!(argv.windows(2).any(|w| w == ["-o", off]), "{off}");
        }
        assert!(
            argv.windows(2)
                .any(|w| w == ["-i", "/root/.ssh/id_ed25519"])
        );
        let option = |o: &str| argv.windows(2).any(|w| w[0] == "-o" && w[1] == o);
        assert!(
            option("StrictHostKeyChecking=accept-new"),
            "first contact records"
        );
        assert!(option(&format!("UserKnownHostsFile={}", file.display())));
        crate::known_hosts::pin(&file, "10.0.0.101", "ssh-ed25519 AAAA").unwrap();
        let argv = CliBackend::guest_argv(&target, "echo ready");
        assert!(
            argv.windows(2)
                .any(|w| w == ["-o", "StrictHostKeyChecking=yes"]),
            "a recorded key is required"
        );
    }

    #[tokio::test]
    async fn probe_tells_open_from_closed_ports_on_loopback() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().port();
        // Bound but not listening: connections are refused, and no other
        // test can take the port meanwhile (a dropped listener's could be).
        let closed_socket = tokio::net::TcpSocket::new_v4().unwrap();
        closed_socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let closed = closed_socket.local_addr().unwrap().port();
        let config = Config::from_vars([("PORT", "0")]).unwrap();
        let backend = CliBackend::new(&config);
        assert!(backend.probe(Ipv4Addr::LOCALHOST, open).await);
        assert!(!backend.probe(Ipv4Addr::LOCALHOST, closed).await);
    }
}
