//! The real-SSH lane: readiness polling and SSH initialization with the real
//! `ssh` client against a real `sshd` (started here, on loopback, with its
//! own host key and configuration), which receives the (harmless) init
//! script over the SSH session itself. `qm`, `pvesh` and `pvesm` are the simulator's
//! stand-ins; the VM address falls in 127.0.0.0/8 (`GATEWAY=127.0.0.1`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::Killed;

const SSHD: &str = "/usr/sbin/sshd";
const VMID: u32 = 150;

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen");
    assert!(out.status.success(), "{out:?}");
}

/// Starts sshd on `127.0.0.<VMID>:<port>` (the VM's address), accepting the
/// key of `authorized`; returns once it says it listens.
fn start_sshd(dir: &Path, port: u16, authorized: &Path) -> Killed {
    assert!(
        Path::new(SSHD).exists(),
        "{SSHD} is missing: `cargo xtask test` installs openssh-server"
    );
    // sshd's privilege separation directory (exists wherever sshd is set up).
    let _ = std::fs::create_dir_all("/run/sshd");
    keygen(&dir.join("host_ed25519"));
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\n\
             ListenAddress 127.0.0.{VMID}\n\
             HostKey {dir}/host_ed25519\n\
             PidFile {dir}/sshd.pid\n\
             AuthorizedKeysFile {keys}\n\
             PermitRootLogin prohibit-password\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             UsePAM no\n\
             StrictModes no\n\
             LogLevel INFO\n",
            dir = dir.display(),
            keys = authorized.display(),
        ),
    )
    .expect("sshd_config");
    let mut child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sshd");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("Server listening on") => break,
            Some(Ok(line)) => seen.push(line),
            _ => panic!("sshd did not start: {seen:?}"),
        }
    }
    // Keep draining its log so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Killed(child)
}

#[tokio::test]
async fn install_over_real_ssh_sends_the_init_script_over_the_session() {
    let dir = common::temp_dir("realssh");
    let keys = dir.join("ssh");
    std::fs::create_dir_all(&keys).unwrap();
    keygen(&keys.join("id_ed25519"));
    let port = common::closed_port();
    let _sshd = start_sshd(&dir, port, &keys.join("id_ed25519.pub"));

    let port = port.to_string();
    let env = common::with(
        common::cli_env(&dir, true).await,
        &[
            ("SSH_PORT", port.as_str()),
            ("INIT_SCRIPTS", "test"),
            ("VM_ROOT_PASSWORD", "r00t-pw"),
            ("SSH_POLL_INTERVAL_MS", "100"),
        ],
    );
    let (child, url) = common::start_process(&dir, &env);
    let _server = Killed(child);

    let body = format!(r#"{{"os":"debian","version":"12","id":{VMID},"user":"root"}}"#);
    let (job, events) = common::install(&url, &body).await;
    let job = common::json(&format!("{url}/api/jobs/{job}")).await;
    assert_eq!(job["state"], "succeeded", "{events:#?}");

    let script: Vec<&str> = events
        .iter()
        .filter(|e| e.step() == "VM initialization > SSH initialization")
        .map(common::Sse::message)
        .collect();
    for line in [
        "  [pvedeck] test init for debian 12",
        // A SHA-512 crypt hash reached the script, not the password.
        "  [pvedeck] root password hash received: $6$",
        r#"  [pvedeck] quoting survives: "double" 'single' back\slash and ünïcödé"#,
        "  [pvedeck] initialization complete",
    ] {
        assert!(script.contains(&line), "{line} in {script:#?}");
    }
    let finals = events
        .iter()
        .filter(|e| e.step() == "VM initialization > finalizing")
        .count();
    assert_eq!(finals, 4);
    // The script came over the session: the guest fetched nothing.
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    assert!(!log.contains("/sh/debian_12.sh"), "{log}");
    assert!(script.iter().all(|l| !l.contains("r00t-pw")), "{script:#?}");
}
