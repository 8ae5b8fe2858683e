//! Running Proxmox's commands: argument vectors (never a local shell),
//! output captured, lines relayed while a long command runs, a non-zero exit
//! turned into an error that carries the command's own message. A command
//! whose future is dropped (its timeout passed) is killed.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::output::{Collector, Limits};
use crate::{LineSink, PveError};

/// Where commands run: locally on the main node, over SSH on the others.
pub struct Runner {
    main_node: String,
    nodes: BTreeMap<String, Ipv4Addr>,
}

#[derive(Debug)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

/// An argument vector as a log line, the password value hidden.
pub fn display(argv: &[String]) -> String {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide = false;
    for arg in argv {
        if hide {
            out.push("<hidden>".to_string());
            hide = false;
            continue;
        }
        hide = arg == "--cipassword";
        out.push(arg.clone());
    }
    out.join(" ")
}

/// The ssh options pvedeck always uses: never a prompt, a bounded connect.
pub const SSH_BATCH: [&str; 4] = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"];

impl Runner {
    pub fn new(main_node: String, nodes: BTreeMap<String, Ipv4Addr>) -> Runner {
        Runner { main_node, nodes }
    }

    /// `program args…` on `node`: as is on the main node, else
    /// `ssh -o BatchMode=yes -o ConnectTimeout=10 root@<node-ip> <program args…>`.
    pub fn on_node(
        &self,
        node: &str,
        program: &str,
        args: &[String],
    ) -> Result<Vec<String>, PveError> {
        let mut argv = vec![program.to_string()];
        argv.extend(args.iter().cloned());
        if node == self.main_node {
            return Ok(argv);
        }
        let ip = self.nodes.get(node).ok_or_else(|| {
            PveError::command(
                display(&argv),
                format!("no address for node '{node}': set NODE_{node}"),
                2,
            )
        })?;
        // `ssh` hands its command to the node's shell: every word quoted.
        let remote = shlex::try_join(argv.iter().map(String::as_str))
            .map_err(|_| PveError::command(display(&argv), "an argument holds a NUL byte", 2))?;
        let mut ssh: Vec<String> = vec!["ssh".into()];
        ssh.extend(SSH_BATCH.iter().map(|s| s.to_string()));
        ssh.push("--".into());
        ssh.push(format!("root@{ip}"));
        ssh.push(remote);
        Ok(ssh)
    }

    /// Runs a Proxmox command (`qm`, `pvesh`, `pvesm`, on a node): its
    /// output held up to [`Limits::PROXMOX`].
    pub async fn run(
        &self,
        argv: &[String],
        stdin: Option<&[u8]>,
        lines: Option<LineSink<'_>>,
    ) -> Result<Output, PveError> {
        self.run_bounded(argv, stdin, lines, Limits::PROXMOX).await
    }

    /// Runs `argv`; `stdin` is written and closed; every output line goes to
    /// `lines` as it comes; each stream is held within `limits`.
    pub async fn run_bounded(
        &self,
        argv: &[String],
        stdin: Option<&[u8]>,
        lines: Option<LineSink<'_>>,
        limits: Limits,
    ) -> Result<Output, PveError> {
        let started = Instant::now();
        let (mut child, shown) = spawn(argv, &[], stdin.is_some())?;
        if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A command that exits without reading its input is not an error here.
            let _ = pipe.write_all(data).await;
            drop(pipe);
        }
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(PveError::command(shown, "output was not captured", 2));
        };
        let (stdout, stderr) = tokio::join!(
            collect(stdout, lines, limits),
            collect(stderr, lines, limits)
        );
        let status = child.wait().await.map_err(|e| PveError::Command {
            command: shown.clone(),
            message: e.to_string(),
            exit: None,
        })?;
        let code = status.code();
        tracing::info!(
            command = shown,
            exit = code.unwrap_or(-1),
            ms = started.elapsed().as_millis() as u64,
            "ran"
        );
        if status.success() {
            return Ok(Output { stdout, stderr });
        }
        let message = match (stderr.trim(), stdout.trim()) {
            ("", "") => format!("exited with {status}"),
            ("", out) => out.lines().last().unwrap_or_default().to_string(),
            (err, _) => err.to_string(),
        };
        Err(PveError::Command {
            command: shown,
            message,
            exit: code,
        })
    }
}

/// Starts `argv` with `env` added, its output piped and its input piped
/// or closed; it is killed when dropped. Also what it is shown as.
fn spawn(
    argv: &[String],
    env: &[(&str, &str)],
    stdin_piped: bool,
) -> Result<(tokio::process::Child, String), PveError> {
    let shown = display(argv);
    let Some((program, args)) = argv.split_first() else {
        return Err(PveError::command(shown, "empty command", 2));
    };
    let child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(if stdin_piped {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| PveError::Command {
            command: shown.clone(),
            message: format!("cannot run {program}: {e}"),
            exit: None,
        })?;
    Ok((child, shown))
}

/// Reads a pipe to its end in fixed-size chunks, handing each line on:
/// what is held never passes `limits`, however much the command prints.
async fn collect(
    mut pipe: impl AsyncRead + Unpin,
    lines: Option<LineSink<'_>>,
    limits: Limits,
) -> String {
    let mut collector = Collector::new(limits, lines);
    let mut chunk = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = pipe.read(&mut chunk).await {
        collector.feed(&chunk[..n]);
    }
    collector.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner() -> Runner {
        Runner::new(
            "pve1".into(),
            [
                ("pve1".to_string(), Ipv4Addr::new(10, 0, 0, 11)),
                ("pve2".to_string(), Ipv4Addr::new(10, 0, 0, 12)),
            ]
            .into_iter()
            .collect(),
        )
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn main_node_commands_run_locally_others_over_ssh() {
        let r = runner();
        assert_eq!(
            r.on_node("pve1", "qm", &s(&["start", "101"])).unwrap(),
            ["qm", "start", "101"]
        );
        assert_eq!(
            r.on_node(
                "pve2",
                "qm",
                &s(&["set", "101", "--cipassword", "$6$a$b", "--name", "x y"])
            )
            .unwrap(),
            [
                "ssh",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                "--",
                "root@10.0.0.12",
                r"qm set 101 --cipassword '$6$a$b' --name 'x y'",
            ]
        );
        let err = r.on_node("pve3", "qm", &s(&["status", "101"])).unwrap_err();
        assert_eq!(err.to_string(), "no address for node 'pve3': set NODE_pve3");
    }

    #[test]
    fn quoting_and_display() {
        let words = s(&[
            "qm", "set", "1", "--name", "it's", "--x", "", "--y", "$HOME a",
        ]);
        let argv = runner().on_node("pve2", "qm", &words[1..]).unwrap();
        let remote = argv.last().unwrap();
        assert_eq!(shlex::split(remote), Some(words));
        assert_eq!(
            display(&s(&[
                "qm",
                "set",
                "1",
                "--cipassword",
                "$6$x",
                "--ciupgrade",
                "0"
            ])),
            "qm set 1 --cipassword <hidden> --ciupgrade 0"
        );
    }

    #[tokio::test]
    async fn output_lines_are_relayed_and_failures_carry_the_message() {
        let r = runner();
        let seen = std::sync::Mutex::new(Vec::new());
        let sink = |l: &str| seen.lock().unwrap().push(l.to_string());
        let out = r
            .run(
                &s(&["sh", "-c", "echo one; echo two >&2; echo three"]),
                None,
                Some(&sink),
            )
            .await
            .unwrap();
        assert_eq!(out.stdout, "one\nthree\n");
        let mut lines = pvedeck_support::sync::into_inner(seen);
        lines.sort();
        assert_eq!(lines, ["one", "three", "two"]);

        let err = r
            .run(
                &s(&["sh", "-c", "echo 'VM 101 not running' >&2; exit 255"]),
                None,
                None,
            )
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "VM 101 not running");
        assert!(matches!(
            err,
            PveError::Command {
                exit: Some(255),
                ..
            }
        ));

        let err = r.run(&s(&["/no/such/qm"]), None, None).await.unwrap_err();
        assert!(
            err.to_string().starts_with("cannot run /no/such/qm"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_flood_without_newlines_is_held_to_its_bounds() {
        let script = "head -c 20000000 /dev/zero | tr '\\0' x; printf '\\033]0;t\\007done\\n' >&2";
        let out = runner()
            .run_bounded(&s(&["sh", "-c", script]), None, None, Limits::GUEST)
            .await
            .unwrap();
        assert!(out.stdout.len() < 4200, "{}", out.stdout.len());
        assert!(
            out.stdout
                .ends_with(&format!("… ({} bytes cut)\n", 20_000_000 - 4000)),
            "{}",
            &out.stdout[4000..]
        );
        assert_eq!(out.stderr, "]0;tdone\n");
    }

    #[tokio::test]
    async fn stdin_reaches_the_command() {
        let out = runner()
            .run(
                &s(&["sh", "-c", "read -r x; echo got:$x"]),
                Some(b"secret\n"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(out.stdout, "got:secret\n");
    }

    #[tokio::test]
    async fn a_dropped_command_is_killed() {
        // The command holds a lock on a file while it lives and says so;
        // once it is dropped the lock must come free (waited for, not polled).
        let lockfile = std::env::temp_dir().join(format!("pvedeck-kill-{}", std::process::id()));
        std::fs::write(&lockfile, "").unwrap();
        let script = format!(
            "exec flock -o {} sh -c 'echo locked; exec sleep 30'",
            lockfile.display()
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        let tx = std::sync::Mutex::new(Some(tx));
        let sink = |line: &str| {
            if let (true, Some(tx)) = (line == "locked", tx.lock().unwrap().take()) {
                let _ = tx.send(());
            }
        };
        {
            let r = runner();
            let argv = s(&["sh", "-c", &script]);
            let run = r.run(&argv, None, Some(&sink));
            tokio::pin!(run);
            tokio::select! {
                _ = &mut run => panic!("the command ended by itself"),
                _ = rx => {}
            }
            let probe = std::fs::File::open(&lockfile).unwrap();
            assert!(probe.try_lock().is_err(), "the command holds the lock");
        } // The run future is dropped here: its timeout, as the engine applies it.
        let file = std::fs::File::open(&lockfile).unwrap();
        let freed = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            tokio::task::spawn_blocking(move || file.lock().is_ok()),
        )
        .await;
        assert!(matches!(freed, Ok(Ok(true))), "the command was not killed");
    }
}

/// Property tests: whatever the arguments hold (quotes, `$`, newlines,
/// any character), the node's shell gets back exactly the words pvedeck
/// meant, and a password value never reaches a log line.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use pvedeck_testkit::{config, text};

    fn runner() -> Runner {
        Runner::new(
            "pve1".into(),
            [("pve2".to_string(), Ipv4Addr::new(10, 0, 0, 12))]
                .into_iter()
                .collect(),
        )
    }

    proptest! {
        #![proptest_config(config(2000))]

        #[test]
        fn a_remote_command_is_split_back_into_its_words(
            args in prop::collection::vec(text(), 0..6),
        ) {
            match runner().on_node("pve2", "qm", &args) {
                Ok(argv) => {
                    let remote = argv.last().unwrap();
                    let mut words = vec!["qm".to_string()];
                    words.extend(args.iter().cloned());
                    prop_assert_eq!(shlex::split(remote), Some(words));
                    prop_assert_eq!(&argv[..7], ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--", "root@10.0.0.12"]);
                }
                Err(e) => {
                    prop_assert!(args.iter().any(|a| a.contains('\0')), "{e}");
                    prop_assert_eq!(e.to_string(), "an argument holds a NUL byte");
                }
            }
        }

        #[test]
        fn a_password_value_is_never_shown(
            mut argv in prop::collection::vec(text(), 0..6),
            at in any::<prop::sample::Index>(),
            secret in "[$][0-9][$][A-Za-z0-9./]{8,40}",
        ) {
            prop_assume!(!argv.iter().any(|a| a.contains(&secret)));
            let at = at.index(argv.len() + 1);
            argv.splice(at..at, ["--cipassword".to_string(), secret.clone()]);
            let shown = display(&argv);
            prop_assert!(!shown.contains(&secret), "{}", shown);
            prop_assert!(shown.contains("--cipassword <hidden>"), "{}", shown);
        }
    }
}

/// A long-running command's standard input and output as one stream: a
/// console (`qm vncproxy`, `qm terminal`) whose bytes are relayed. The
/// command is killed when the stream is dropped; what it says on standard
/// error is logged.
pub struct ChildStream {
    _child: tokio::process::Child,
    stdout: tokio::process::ChildStdout,
    stdin: tokio::process::ChildStdin,
}

impl Runner {
    /// Starts `argv` with its standard input and output as a stream.
    pub fn stream(&self, argv: &[String], env: &[(&str, &str)]) -> Result<ChildStream, PveError> {
        let (mut child, shown) = spawn(argv, env, true)?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(PveError::command(
                shown,
                "its input and output were not piped",
                2,
            ));
        };
        tokio::spawn(async move {
            let mut said = String::new();
            let _ = stderr.take(64 * 1024).read_to_string(&mut said).await;
            let said = said.trim();
            if !said.is_empty() {
                tracing::warn!(command = %shown, "console command said: {said}");
            }
        });
        Ok(ChildStream {
            _child: child,
            stdout,
            stdin,
        })
    }
}

impl tokio::io::AsyncRead for ChildStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ChildStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stdin).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stdin).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stdin).poll_shutdown(cx)
    }
}
