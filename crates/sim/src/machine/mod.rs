//! Real guests for the simulated cluster: a Debian cloud image booted under
//! QEMU, so that what pvedeck does to a new VM (cloud-init's first boot,
//! SSH with the seeded key, the init script, the guest agent, reboots and
//! clones of a template) meets a real Linux rather than a model of one.
//!
//! One VM is one `qemu-system-x86_64 -daemonize` process and one runtime
//! directory holding its pidfile, QMP and guest-agent sockets, serial log
//! and seed ISO: everything here finds a VM by that directory alone, so a
//! restarted simulator picks up the VMs it left running.
//!
//! The guest's network is QEMU's user-mode stack with `restrict=on`: the
//! guest reaches nothing (no host service, no internet); only its port 22
//! is forwarded from a loopback address of the host.
//!
//! The image is built by `cargo xtask` (`xtask/src/guest/image.rs`):
//! `target/guest/{debian-12-guest.qcow2,vmlinuz,initrd.img}`. It has no
//! partition table and no boot loader: QEMU boots its kernel directly with
//! `root=/dev/vda`.

mod disk;
mod qga;
mod qmp;
mod seed;

#[cfg(test)]
mod boot_test;

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use disk::{import, linked, remove, resize};
pub use qga::{ExecResult, QgaClient, qga_exec, qga_ping};
pub use qmp::qmp_command;
pub use seed::{Seed, SeedNetwork, meta_data, network_config, seed_iso, user_data};

/// The QEMU binary: the Debian package `qemu-system-x86` installs it here
/// and the xtask installs that package.
const QEMU: &str = "qemu-system-x86_64";

/// Longest path a unix socket address holds (`sun_path`, NUL included):
/// QEMU refuses longer ones only when it starts, with a terse message.
const SUN_PATH_MAX: usize = 108;

/// What went wrong, with the command line and what it printed, so that a
/// failed boot can be understood from the error alone.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("{command} failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Proxmox's wording (`PVE::QemuServer::Helpers` users, `qm`).
    #[error("VM {0} is not running")]
    NotRunning(String),
    /// Proxmox's wording (`PVE::QemuServer::Agent::assert_agent_available`),
    /// with the reason after it as in `qga_check_running`'s warning.
    #[error("QEMU guest agent is not running - {0}")]
    AgentNotRunning(String),
    /// Proxmox's wording (`PVE::QemuServer::Agent::check_agent_error`).
    #[error("Agent error: {0}")]
    Agent(String),
    /// Proxmox's wording (`PVE::QMPClient`): "… command '…' failed - …".
    #[error("VM {dir} qmp command '{command}' failed - {detail}")]
    Qmp {
        dir: String,
        command: String,
        detail: String,
    },
    #[error("timeout after {after:.0?} waiting for {what}")]
    Timeout { what: String, after: Duration },
    #[error("invalid machine spec: {0}")]
    Spec(String),
}

impl MachineError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        MachineError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// One guest to boot. Everything QEMU needs is here so that a VM can be
/// started again after a host restart from its stored spec alone.
#[derive(Debug, Clone)]
pub struct MachineSpec {
    pub vmid: u32,
    pub name: String,
    /// The VM's runtime directory: `qemu.pid`, `qmp.sock`, `qga.sock`,
    /// `serial.log`, `seed.iso`. Kept short: the socket paths must fit in
    /// 107 bytes.
    pub dir: PathBuf,
    /// The VM's own qcow2 (a linked clone of the image, or a full copy).
    pub disk: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub memory_mib: u32,
    pub cores: u32,
    /// Host side of the SSH forward (a loopback address per VM, so that
    /// every guest can keep port 22's usual number or any other).
    pub ssh: SocketAddrV4,
    pub seed: Seed,
}

impl MachineSpec {
    /// The NIC's MAC, fixed by the VMID as Proxmox fixes it in the VM's
    /// config: the seed's network config matches the interface by it, so it
    /// must not change between boots. `52:54:00` is QEMU's own prefix.
    pub fn mac(&self) -> String {
        mac_for(self.vmid)
    }
}

/// The MAC [`MachineSpec::mac`] gives a VMID, for building its [`Seed`]
/// before the spec exists.
pub fn mac_for(vmid: u32) -> String {
    let [_, a, b, c] = vmid.to_be_bytes();
    format!("52:54:00:{a:02x}:{b:02x}:{c:02x}")
}

/// The files of a VM's runtime directory, named in one place.
#[derive(Debug, Clone)]
pub struct RuntimeFiles {
    pub pidfile: PathBuf,
    pub qmp: PathBuf,
    pub qga: PathBuf,
    pub serial: PathBuf,
    /// The first serial port, for `qm terminal` (its output also goes
    /// to `serial`).
    pub serial_socket: PathBuf,
    /// QEMU's VNC server, for `qm vncproxy`.
    pub vnc: PathBuf,
    pub seed: PathBuf,
}

impl RuntimeFiles {
    pub fn of(dir: &Path) -> Self {
        RuntimeFiles {
            pidfile: dir.join("qemu.pid"),
            qmp: dir.join("qmp.sock"),
            qga: dir.join("qga.sock"),
            serial: dir.join("serial.log"),
            serial_socket: dir.join("serial.sock"),
            vnc: dir.join("vnc.sock"),
            seed: dir.join("seed.iso"),
        }
    }
}

/// How QEMU runs guest code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// KVM when it really runs a kernel, else TCG; decided once per process.
///
/// Opening `/dev/kvm` is not enough: in a nested setup KVM can open, run
/// SeaBIOS in real mode, and then hang for ever at the kernel's switch to
/// long mode. So the probe boots `kernel` (no disk, no initrd) with
/// `panic=-1` and `-no-reboot`: a working KVM reaches the "no root" panic
/// and QEMU exits within a second or two; a broken one is killed after
/// five seconds. `PVEDECK_QEMU_ACCEL=kvm|tcg` skips the probe.
pub fn accel(kernel: &Path) -> Accel {
    static ACCEL: OnceLock<Accel> = OnceLock::new();
    *ACCEL.get_or_init(|| match std::env::var("PVEDECK_QEMU_ACCEL").as_deref() {
        Ok("kvm") => Accel::Kvm,
        Ok("tcg") => Accel::Tcg,
        _ => probe_kvm(kernel),
    })
}

fn probe_kvm(kernel: &Path) -> Accel {
    let opens = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if !opens {
        return Accel::Tcg;
    }
    let child = Command::new(QEMU)
        .args(["-accel", "kvm", "-cpu", "host", "-m", "256", "-nodefaults"])
        .args(["-display", "none", "-serial", "none", "-monitor", "none"])
        .args(["-no-reboot", "-append", "panic=-1", "-kernel"])
        .arg(kernel)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return Accel::Tcg;
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        match child.try_wait() {
            Ok(Some(status)) => {
                return if status.success() {
                    Accel::Kvm
                } else {
                    Accel::Tcg
                };
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    Accel::Tcg
}

/// The QEMU command line for a spec, apart from running it: tests and
/// error messages show it, and a person can paste it into a shell.
pub fn command_line(spec: &MachineSpec, accel: Accel) -> Vec<String> {
    let files = RuntimeFiles::of(&spec.dir);
    let path = |p: &Path| p.display().to_string();
    let mut args: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
    push(&[
        "-name",
        &spec.name,
        "-daemonize",
        "-pidfile",
        &path(&files.pidfile),
    ]);
    // TCG: QEMU's default CPU model (qemu64) is what TCG runs fastest; the
    // Debian 12 userland needs nothing beyond baseline x86-64.
    match accel {
        Accel::Kvm => push(&["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => push(&["-accel", "tcg,thread=multi"]),
    }
    // A VGA card for the VNC console (`-nodefaults` drops the default one);
    // `-display none` leaves VNC, QEMU's own window is what it turns off.
    push(&["-machine", "pc", "-nodefaults", "-display", "none"]);
    push(&["-device", "VGA"]);
    push(&["-vnc", &format!("unix:{}", socket_path(&files.vnc))]);
    push(&["-m", &spec.memory_mib.to_string()]);
    push(&["-smp", &spec.cores.to_string()]);
    push(&[
        "-kernel",
        &path(&spec.kernel),
        "-initrd",
        &path(&spec.initrd),
    ]);
    // `rw`: systemd writes a new machine-id before anything remounts.
    push(&["-append", "root=/dev/vda rw console=ttyS0"]);
    push(&[
        "-drive",
        &format!(
            "file={},if=virtio,format=qcow2,cache=unsafe",
            drive_path(&spec.disk)
        ),
    ]);
    // Where Proxmox puts the cloud-init drive: an IDE CD-ROM (ide2).
    push(&[
        "-drive",
        &format!(
            "file={},if=ide,index=2,media=cdrom,format=raw,readonly=on",
            drive_path(&files.seed)
        ),
    ]);
    push(&[
        "-netdev",
        &format!(
            "user,id=n0,restrict=on,hostfwd=tcp:{}:{}-:22",
            spec.ssh.ip(),
            spec.ssh.port()
        ),
    ]);
    push(&[
        "-device",
        &format!("virtio-net-pci,netdev=n0,mac={}", spec.mac()),
    ]);
    // Entropy for the guest's first boot (host keys, Python's random) under
    // TCG, where the guest's own sources are slow.
    push(&["-device", "virtio-rng-pci"]);
    push(&[
        "-chardev",
        &format!(
            "socket,id=qga0,path={},server=on,wait=off",
            path(&files.qga)
        ),
    ]);
    push(&["-device", "virtio-serial-pci"]);
    push(&[
        "-device",
        "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
    ]);
    push(&[
        "-qmp",
        &format!("unix:{},server=on,wait=off", path(&files.qmp)),
    ]);
    // The serial port is a socket for the console, logged to a file as
    // before (`logfile` keeps what was said while nobody listened).
    push(&[
        "-chardev",
        &format!(
            "socket,id=serial0,path={},server=on,wait=off,logfile={}",
            socket_path(&files.serial_socket),
            socket_path(&files.serial)
        ),
    ]);
    push(&["-serial", "chardev:serial0"]);
    args
}

/// A path inside a `-chardev` or `-vnc` option, where a comma ends the
/// value unless doubled.
fn socket_path(path: &Path) -> String {
    drive_path(path)
}

/// A path inside a `-drive` option, where a comma ends the value unless
/// doubled.
fn drive_path(path: &Path) -> String {
    path.display().to_string().replace(',', ",,")
}

/// Writes the seed ISO and starts the VM; returns QEMU's pid once the VM
/// exists (`-daemonize` returns after the sockets listen, long before the
/// guest has booted: wait for [`qga_ping`] or SSH for that).
///
/// Starting a VM that runs is refused: two QEMUs on one disk corrupt it.
pub async fn start(spec: &MachineSpec) -> Result<u32, MachineError> {
    let files = RuntimeFiles::of(&spec.dir);
    for socket in [&files.qmp, &files.qga, &files.serial_socket, &files.vnc] {
        if socket.as_os_str().len() >= SUN_PATH_MAX {
            return Err(MachineError::Spec(format!(
                "{} is longer than a unix socket path may be ({} bytes)",
                socket.display(),
                SUN_PATH_MAX - 1
            )));
        }
    }
    if running(&spec.dir) {
        return Err(MachineError::Spec(format!(
            "VM {} already runs (pidfile {})",
            spec.vmid,
            files.pidfile.display()
        )));
    }
    for file in [&spec.disk, &spec.kernel, &spec.initrd] {
        if !file.is_file() {
            return Err(MachineError::Spec(format!(
                "{} does not exist",
                file.display()
            )));
        }
    }
    tokio::fs::create_dir_all(&spec.dir)
        .await
        .map_err(|e| MachineError::io(&spec.dir, e))?;
    // Left behind by a killed QEMU: a stale socket file makes the new
    // listener fail, a stale pidfile would name someone else's process.
    for stale in [&files.qmp, &files.qga, &files.pidfile] {
        let _ = tokio::fs::remove_file(stale).await;
    }
    seed_iso(&spec.seed, &files.seed).await?;
    let accel = {
        let kernel = spec.kernel.clone();
        blocking(move || accel(&kernel)).await?
    };
    let args = command_line(spec, accel);
    let mut cmd = Command::new(QEMU);
    cmd.args(&args);
    run(cmd).await?;
    read_pid(&files.pidfile).ok_or_else(|| MachineError::Command {
        command: shown(QEMU, &args),
        status: "exit status: 0".into(),
        stderr: format!("no pid in {}", files.pidfile.display()),
    })
}

/// Whether the VM of `dir` runs: its pidfile names a live QEMU that was
/// started with this directory's pidfile (a pid reused by another process
/// after a crash is not taken for the VM).
pub fn running(dir: &Path) -> bool {
    pid(dir).is_some()
}

/// The QEMU pid of the VM in `dir`, if it runs.
pub fn pid(dir: &Path) -> Option<u32> {
    let files = RuntimeFiles::of(dir);
    let pid = read_pid(&files.pidfile)?;
    alive_qemu(pid, &files.pidfile).then_some(pid)
}

fn read_pid(pidfile: &Path) -> Option<u32> {
    std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}

fn alive_qemu(pid: u32, pidfile: &Path) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    // A daemonized QEMU is reparented; where nothing reaps it, it stays a
    // zombie after exiting, and a zombie is not a running VM.
    let zombie = std::fs::read_to_string(proc.join("stat")).map_or(true, |stat| {
        stat.rsplit_once(')')
            .is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
    });
    if zombie {
        return false;
    }
    let Ok(cmdline) = std::fs::read(proc.join("cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let wanted = pidfile.as_os_str().as_encoded_bytes();
    args.windows(2)
        .any(|pair| pair[0] == b"-pidfile" && pair[1] == wanted)
}

/// ACPI power button, then waits for QEMU to exit (the guest powers off,
/// QEMU ends with it). A guest that ignores the button is left running and
/// the error says so: the caller decides whether to [`kill`] it, as
/// `qm shutdown --forceStop` does.
pub async fn shutdown(dir: &Path, timeout: Duration) -> Result<(), MachineError> {
    let Some(pid) = pid(dir) else {
        return Err(MachineError::NotRunning(dir.display().to_string()));
    };
    qmp_command(dir, "system_powerdown", None).await?;
    wait_exit(dir, pid, timeout).await?;
    clean_runtime(dir).await;
    Ok(())
}

/// Hard stop (`qm stop`): SIGKILL, as pulling the plug. Stopping a VM that
/// does not run is not an error: the wanted state holds.
pub async fn kill(dir: &Path) -> Result<(), MachineError> {
    if let Some(pid) = pid(dir) {
        let mut cmd = Command::new("kill");
        cmd.args(["-KILL", &pid.to_string()]);
        run(cmd).await?;
        wait_exit(dir, pid, Duration::from_secs(10)).await?;
    }
    clean_runtime(dir).await;
    Ok(())
}

/// Hard reset (`qm reset`): the guest restarts without shutting down.
pub async fn reset(dir: &Path) -> Result<(), MachineError> {
    if !running(dir) {
        return Err(MachineError::NotRunning(dir.display().to_string()));
    }
    qmp_command(dir, "system_reset", None).await.map(drop)
}

/// Polls `/proc`: QEMU is not our child after `-daemonize`, so there is
/// no handle to wait on.
async fn wait_exit(dir: &Path, pid: u32, timeout: Duration) -> Result<(), MachineError> {
    let pidfile = RuntimeFiles::of(dir).pidfile;
    let started = Instant::now();
    while alive_qemu(pid, &pidfile) {
        if started.elapsed() >= timeout {
            return Err(MachineError::Timeout {
                what: format!("QEMU (pid {pid}) of {} to exit", dir.display()),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// What a QEMU that is gone leaves behind (it removes its pidfile itself
/// only when it exits cleanly).
async fn clean_runtime(dir: &Path) {
    let files = RuntimeFiles::of(dir);
    for file in [&files.pidfile, &files.qmp, &files.qga] {
        let _ = tokio::fs::remove_file(file).await;
    }
}

/// A command run to its end off the async threads (QEMU's daemonizing
/// parent, qemu-img, genisoimage): failure carries the command and stderr.
async fn run(cmd: Command) -> Result<String, MachineError> {
    blocking(move || run_blocking(cmd)).await?
}

fn run_blocking(mut cmd: Command) -> Result<String, MachineError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let command = shown(&program, &args);
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| MachineError::Spawn {
            command: command.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(MachineError::Command {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, MachineError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| MachineError::Spec(format!("blocking task failed: {e}")))
}

/// A command line as a shell would take it back.
fn shown(program: &str, args: &[String]) -> String {
    let mut line = program.to_string();
    for arg in args {
        line.push(' ');
        match shlex::try_quote(arg) {
            Ok(quoted) => line.push_str(&quoted),
            Err(_) => line.push_str(arg),
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn spec(dir: &Path) -> MachineSpec {
        MachineSpec {
            vmid: 105,
            name: "web-1".into(),
            dir: dir.to_path_buf(),
            disk: dir.join("disk,0.qcow2"),
            kernel: "/k/vmlinuz".into(),
            initrd: "/k/initrd.img".into(),
            memory_mib: 1024,
            cores: 2,
            ssh: "127.0.0.105:2222".parse().unwrap(),
            seed: Seed::example(),
        }
    }

    #[test]
    fn the_command_line_forwards_only_ssh_and_keeps_reboots() {
        let args = command_line(&spec(Path::new("/run/vm/105")), Accel::Tcg);
        let line = args.join(" ");
        assert!(line.contains("user,id=n0,restrict=on,hostfwd=tcp:127.0.0.105:2222-:22"));
        assert!(line.contains("-accel tcg,thread=multi"));
        assert!(line.contains("mac=52:54:00:00:00:69"));
        assert!(line.contains("file=/run/vm/105/disk,,0.qcow2,if=virtio"));
        assert!(line.contains("-pidfile /run/vm/105/qemu.pid"));
        assert!(line.contains("path=/run/vm/105/qga.sock,server=on,wait=off"));
        assert!(line.contains("name=org.qemu.guest_agent.0"));
        assert!(line.contains("-vnc unix:/run/vm/105/vnc.sock"));
        assert!(line.contains(
            "socket,id=serial0,path=/run/vm/105/serial.sock,server=on,wait=off,logfile=/run/vm/105/serial.log"
        ));
        assert!(line.contains("-serial chardev:serial0"));
        assert!(
            !line.contains("-no-reboot"),
            "a guest's reboot must not end QEMU"
        );
        let kvm = command_line(&spec(Path::new("/run/vm/105")), Accel::Kvm).join(" ");
        assert!(kvm.contains("-accel kvm -cpu host"));
    }

    #[test]
    fn macs_follow_the_vmid() {
        assert_eq!(mac_for(105), "52:54:00:00:00:69");
        assert_eq!(mac_for(999_999), "52:54:00:0f:42:3f");
    }

    #[test]
    fn a_pidfile_of_another_process_is_not_a_running_vm() {
        let dir = tempfile::tempdir().unwrap();
        // This test process is alive, but it is no QEMU with this pidfile.
        std::fs::write(dir.path().join("qemu.pid"), std::process::id().to_string()).unwrap();
        assert!(!running(dir.path()));
        std::fs::write(dir.path().join("qemu.pid"), "not a pid").unwrap();
        assert!(!running(dir.path()));
    }

    #[tokio::test]
    async fn a_too_long_socket_path_is_refused_before_qemu_runs() {
        let long = PathBuf::from(format!("/tmp/{}", "d".repeat(110)));
        let err = start(&spec(&long)).await.unwrap_err();
        assert!(matches!(err, MachineError::Spec(_)), "{err}");
    }

    #[tokio::test]
    async fn stopping_a_stopped_vm_is_fine_but_a_reset_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        kill(dir.path()).await.unwrap();
        let err = reset(dir.path()).await.unwrap_err();
        assert!(err.to_string().ends_with("is not running"), "{err}");
        let err = shutdown(dir.path(), Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(err, MachineError::NotRunning(_)), "{err}");
    }
}
