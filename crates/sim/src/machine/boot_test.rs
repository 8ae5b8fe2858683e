//! One real guest's life, end to end, on the image `cargo xtask` builds
//! (`target/guest/`): first boot with a seed, SSH through the loopback
//! forward, the guest agent, the project's init script offline, a reboot
//! from inside, then a template made of its disk and a linked clone of it
//! that must come up as a new machine. Minutes under TCG, so ignored:
//!
//! `cargo test -j2 --release -p pvedeck-sim machine -- --ignored --nocapture`

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pvedeck_domain::scripts::{ScriptSet, script, with_root_hash};

use super::*;

/// SHA-512 crypt of "pvedeck-test".
const HASH: &str = "$6$pvedecktestsalt$fNksNC/hHYfGED8nB7oj3YqqxEWB6Ur.PgzSNKaFIi7WZg4cx/QdyKKu0I/x.37ul3.JdkAdpqqM7kBwh0NLG0";
const USER: &str = "deck";
/// A first boot under TCG takes a minute or two; a loaded CI machine more.
const BOOT: Duration = Duration::from_secs(900);

struct Image {
    disk: PathBuf,
    kernel: PathBuf,
    initrd: PathBuf,
}

fn image() -> Image {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/guest");
    let image = Image {
        disk: dir.join("debian-12-guest.qcow2"),
        kernel: dir.join("vmlinuz"),
        initrd: dir.join("initrd.img"),
    };
    assert!(
        image.disk.is_file(),
        "{} is missing: build it with `cargo test -p xtask --release builds_the_guest_image -- --ignored`",
        image.disk.display()
    );
    image
}

/// Kills the VMs whatever happens to the test; with `PVEDECK_KEEP_GUEST`
/// set, a failed run leaves them running for a look inside (and any run
/// keeps its work directory: key, disks, serial logs).
struct Cleanup(Vec<PathBuf>);

fn keep() -> bool {
    std::env::var_os("PVEDECK_KEEP_GUEST").is_some()
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if keep() && std::thread::panicking() {
            return;
        }
        for dir in &self.0 {
            if let Some(pid) = pid(dir) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// A free port on `ip` (the race with another binder is harmless here).
fn free_port(ip: Ipv4Addr) -> u16 {
    TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Guest {
    spec: MachineSpec,
    key: PathBuf,
}

impl Guest {
    fn ssh(&self, command: &str, stdin: Option<&str>) -> Output {
        use std::io::Write as _;
        let mut child = Command::new("ssh")
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"])
            .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
            .args(["-o", "ConnectTimeout=10", "-i"])
            .arg(&self.key)
            .args(["-p", &self.spec.ssh.port().to_string()])
            .arg(format!("{USER}@{}", self.spec.ssh.ip()))
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    }

    fn ssh_ok(&self, command: &str) -> String {
        let out = self.ssh(command, None);
        assert!(
            out.status.success(),
            "ssh {command}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn qga(&self, argv: &[&str]) -> ExecResult {
        let result = qga_exec(
            &RuntimeFiles::of(&self.spec.dir).qga,
            argv,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        assert_eq!(result.exitcode, Some(0), "{argv:?}: {result:?}");
        result
    }

    /// Waits for the agent, then SSH, printing when each answered.
    async fn wait_up(&self, since: Instant, what: &str) {
        let socket = RuntimeFiles::of(&self.spec.dir).qga;
        loop {
            assert!(
                since.elapsed() < BOOT,
                "{what}: no guest agent after {BOOT:?}"
            );
            assert!(running(&self.spec.dir), "{what}: QEMU exited");
            if qga_ping(&socket, Duration::from_secs(3)).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        println!("{what}: guest agent answers after {:.1?}", since.elapsed());
        loop {
            assert!(since.elapsed() < BOOT, "{what}: no SSH after {BOOT:?}");
            if self.ssh("true", None).status.success() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        println!("{what}: SSH answers after {:.1?}", since.elapsed());
    }

    fn keyscan(&self) -> String {
        let out = Command::new("ssh-keyscan")
            .args([
                "-T",
                "10",
                "-t",
                "ed25519",
                "-p",
                &self.spec.ssh.port().to_string(),
            ])
            .arg(self.spec.ssh.ip().to_string())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| !l.starts_with('#') && l.contains("ssh-ed25519"))
            .unwrap_or_else(|| panic!("ssh-keyscan found no ed25519 key: {text}"));
        // "[127.0.0.N]:PORT ssh-ed25519 AAAA…" → the key blob.
        line.split_whitespace().nth(2).unwrap().to_string()
    }
}

fn seed(instance: &str, hostname: &str, vmid: u32, public_key: &str) -> Seed {
    Seed {
        instance_id: instance.into(),
        hostname: hostname.into(),
        searchdomain: None,
        user: USER.into(),
        password_hash: Some(HASH.into()),
        ssh_keys: vec![public_key.trim().to_string()],
        ssh_pwauth: None,
        package_upgrade: true,
        mac: mac_for(vmid),
        network: SeedNetwork::Dhcp,
        nameservers: vec![],
        bootcmd: vec![],
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "boots a real Debian guest under QEMU (minutes); needs target/guest from the xtask"]
async fn a_real_guest_boots_reboots_and_clones() {
    let image = image();
    // Short: the QMP and agent sockets live in it (107 bytes at most).
    let mut work = tempfile::Builder::new()
        .prefix("pvm")
        .tempdir_in("/tmp")
        .unwrap();
    work.disable_cleanup(keep());
    println!("work directory: {}", work.path().display());
    let key = work.path().join("id_ed25519");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "pvedeck-test", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success());
    let public_key = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let mut cleanup = Cleanup(vec![]);

    // The template-to-be: a linked clone of the image, grown as Proxmox
    // grows an imported cloud image (the init script wants 2 GiB of swap).
    let base_disk = work.path().join("base.qcow2");
    linked(&image.disk, &base_disk).await.unwrap();
    resize(&base_disk, 6 << 30).await.unwrap();
    let ip = Ipv4Addr::new(127, 0, 0, 105);
    let spec = MachineSpec {
        vmid: 105,
        name: "pvedeck-105".into(),
        dir: work.path().join("105"),
        disk: base_disk.clone(),
        kernel: image.kernel.clone(),
        initrd: image.initrd.clone(),
        memory_mib: 1024,
        cores: 2,
        ssh: SocketAddrV4::new(ip, free_port(ip)),
        seed: seed("pvedeck-105-a", "web-1", 105, &public_key),
    };
    cleanup.0.push(spec.dir.clone());
    let guest = Guest {
        spec,
        key: key.clone(),
    };
    println!("accelerator: {}", accel(&image.kernel).name());
    println!(
        "qemu-system-x86_64 {}",
        command_line(&guest.spec, accel(&image.kernel)).join(" ")
    );

    // (1) first boot: cloud-init done, with the seed's user and key.
    let boot = Instant::now();
    let pid = start(&guest.spec).await.unwrap();
    println!("first boot: QEMU pid {pid} after {:.1?}", boot.elapsed());
    assert!(running(&guest.spec.dir));
    guest.wait_up(boot, "first boot").await;
    let status = guest.ssh_ok("cloud-init status --wait");
    println!("first boot: cloud-init done after {:.1?}", boot.elapsed());
    assert!(status.contains("status: done"), "{status}");
    assert_eq!(guest.ssh_ok("id -un").trim(), USER);
    assert_eq!(guest.ssh_ok("hostname").trim(), "web-1");
    assert!(
        guest
            .ssh_ok("cat ~/.ssh/authorized_keys")
            .contains(public_key.split_whitespace().nth(1).unwrap())
    );
    let shadow = guest.ssh_ok(&format!("sudo grep '^{USER}:' /etc/shadow"));
    assert!(
        shadow.contains(HASH),
        "the seed's password hash is set: {shadow}"
    );
    // The root filesystem grew to the disk's new size.
    let size = guest.ssh_ok("df --output=size -B1G / | tail -1");
    assert!(
        size.trim().parse::<u32>().unwrap() >= 5,
        "root is {size} GiB"
    );

    // (2) the host key SSH shows is the guest's own ed25519 key.
    let scanned = guest.keyscan();
    let on_disk = guest
        .qga(&["cat", "/etc/ssh/ssh_host_ed25519_key.pub"])
        .await
        .out;
    assert!(on_disk.contains(&scanned), "{scanned} not in {on_disk}");

    // (3) the guest agent runs commands.
    let machine_id = guest
        .qga(&["cat", "/etc/machine-id"])
        .await
        .out
        .trim()
        .to_string();
    assert_eq!(machine_id.len(), 32, "{machine_id:?}");
    let failing = qga_exec(
        &RuntimeFiles::of(&guest.spec.dir).qga,
        &["false"],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!((failing.exited, failing.exitcode), (true, Some(1)));

    // (4) the project's init script, as pvedeck sends it, offline.
    let started = Instant::now();
    let body = with_root_hash(
        &script("debian_12.sh", ScriptSet::Real).unwrap(),
        Some(HASH),
    );
    let out = guest.ssh("sudo bash -s", Some(&body));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "init script: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("[pvedeck] initialization complete"),
        "{stdout}"
    );
    println!("init script: done in {:.1?}", started.elapsed());
    assert!(guest.ssh_ok("cat /proc/swaps").contains("/swapfile"));
    assert!(
        guest
            .ssh_ok("sudo grep '^root:' /etc/shadow")
            .contains(HASH)
    );

    // (5) a reboot from inside keeps the VM and brings SSH and the agent back.
    let boot_id = guest
        .qga(&["cat", "/proc/sys/kernel/random/boot_id"])
        .await
        .out;
    let _ = guest.ssh("sudo systemctl reboot", None);
    let reboot = Instant::now();
    loop {
        assert!(reboot.elapsed() < BOOT, "no new boot after {BOOT:?}");
        assert!(
            running(&guest.spec.dir),
            "QEMU ended with the guest's reboot"
        );
        let now = qga_exec(
            &RuntimeFiles::of(&guest.spec.dir).qga,
            &["cat", "/proc/sys/kernel/random/boot_id"],
            Duration::from_secs(10),
        )
        .await;
        if now.is_ok_and(|r| r.exited && !r.out.is_empty() && r.out != boot_id) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    guest.wait_up(reboot, "reboot").await;
    // SSH comes up before cloud-init's last stages: `--wait` prints dots.
    assert!(
        guest
            .ssh_ok("cloud-init status --wait")
            .ends_with("status: done\n")
    );
    assert_eq!(
        guest.keyscan(),
        scanned,
        "the same instance keeps its host key"
    );

    // (6) a template of its disk, then a linked clone with a new instance.
    guest.ssh_ok(
        "sudo cloud-init clean --logs --machine-id && sudo rm -f /etc/ssh/ssh_host_* \
         && sudo truncate -s0 /etc/machine-id && sync",
    );
    let down = Instant::now();
    shutdown(&guest.spec.dir, Duration::from_secs(180))
        .await
        .unwrap();
    println!("shutdown: QEMU gone after {:.1?}", down.elapsed());
    assert!(!running(&guest.spec.dir));

    let clone_disk = work.path().join("clone.qcow2");
    linked(&base_disk, &clone_disk).await.unwrap();
    let clone_spec = MachineSpec {
        vmid: 106,
        name: "pvedeck-106".into(),
        dir: work.path().join("106"),
        disk: clone_disk.clone(),
        ssh: SocketAddrV4::new(
            Ipv4Addr::new(127, 0, 0, 106),
            free_port(Ipv4Addr::new(127, 0, 0, 106)),
        ),
        seed: seed("pvedeck-106-a", "web-2", 106, &public_key),
        ..guest.spec.clone()
    };
    cleanup.0.push(clone_spec.dir.clone());
    let clone = Guest {
        spec: clone_spec,
        key,
    };
    let boot = Instant::now();
    start(&clone.spec).await.unwrap();
    clone.wait_up(boot, "clone").await;
    assert!(
        clone
            .ssh_ok("cloud-init status --wait")
            .contains("status: done")
    );
    println!("clone: cloud-init done after {:.1?}", boot.elapsed());
    let clone_id = clone
        .qga(&["cat", "/etc/machine-id"])
        .await
        .out
        .trim()
        .to_string();
    assert_eq!(clone_id.len(), 32, "{clone_id:?}");
    assert_ne!(
        clone_id, machine_id,
        "the clone has a machine-id of its own"
    );
    let clone_key = clone.keyscan();
    assert_ne!(clone_key, scanned, "the clone has host keys of its own");
    assert_eq!(clone.ssh_ok("hostname").trim(), "web-2");
    // What the init script did to the template stays in the clone.
    assert!(clone.ssh_ok("cat /proc/swaps").contains("/swapfile"));

    // A hard stop; then the runtime directory holds no stale pidfile.
    kill(&clone.spec.dir).await.unwrap();
    assert!(!running(&clone.spec.dir));
    assert!(!RuntimeFiles::of(&clone.spec.dir).pidfile.exists());
    remove(&clone_disk).await.unwrap();
}
