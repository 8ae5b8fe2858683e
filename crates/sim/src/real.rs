//! Real guests (`SIM_GUESTS=qemu`, for `cargo xtask guest`): the simulated
//! cluster's VMs are real QEMU machines booted from a Debian image
//! (`machine`), so that pvedeck's SSH, init script, cloud-init settings,
//! identity cleaning and agent readiness meet a real Linux.
//!
//! The cluster's state stays the simulator's (configs, volumes, locks,
//! tasks); this module only mirrors what a node would do to real things:
//! a volume is a qcow2 file under `DATA_DIR/sim/disks/`, `qm start` boots
//! it with a cloud-init drive made from the VM's `ci*` settings, the agent
//! calls go to the guest's `qemu-guest-agent`, and `ssh` to a VM is the real
//! `ssh` (the stand-in hands over). All nodes are this one host: a
//! migration moves no file.
//!
//! One translation: the VM's address (`ipconfig0`, `127.0.0.N` with
//! `GATEWAY=127.0.0.1`) is where QEMU's user-mode network forwards
//! `SSH_PORT` to the guest's port 22; inside, the guest is QEMU's
//! `10.0.2.15/24`, and it reaches nothing outside (`restrict=on`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pvedeck_proxmox::escape::uri_unescape;
use pvedeck_proxmox::{AgentExec, PveError};
use sha2::{Digest, Sha256};

use crate::machine::{self, MachineError, MachineSpec, Seed, SeedNetwork};
use crate::state::SimVm;

/// How long `qm shutdown` waits for the guest to power off.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(180);
/// `qm agent ping`'s wait for an answer (Proxmox's `guest-ping` timeout).
const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// Where the real guests' files live and how they are reached.
#[derive(Debug, Clone)]
pub struct RealGuests {
    /// `DATA_DIR/sim`.
    dir: PathBuf,
    kernel: PathBuf,
    initrd: PathBuf,
    ssh_port: u16,
}

fn failed(command: &str, e: MachineError) -> PveError {
    PveError::command(command, e.to_string(), 255)
}

impl RealGuests {
    /// `SIM_GUESTS=qemu` with `SIM_GUEST_DIR` (the kernel and initrd the
    /// image was built with); `None` otherwise: the simulated guests.
    pub fn from_env(sim_dir: &Path) -> Option<RealGuests> {
        if std::env::var("SIM_GUESTS").as_deref() != Ok("qemu") {
            return None;
        }
        let images = PathBuf::from(std::env::var("SIM_GUEST_DIR").ok()?);
        Some(RealGuests {
            dir: sim_dir.to_path_buf(),
            kernel: images.join("vmlinuz"),
            initrd: images.join("initrd.img"),
            ssh_port: std::env::var("SSH_PORT")
                .ok()
                .and_then(|p| p.parse().ok())
                .unwrap_or(22),
        })
    }

    /// A volume's file: `local-zfs:base-9001-disk-0/vm-107-disk-0` →
    /// `disks/local-zfs_base-9001-disk-0_vm-107-disk-0.qcow2`.
    pub fn disk(&self, volid: &str) -> PathBuf {
        let name: String = volid
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir.join("disks").join(format!("{name}.qcow2"))
    }

    /// The VM's runtime directory (sockets, pidfile, serial log): short,
    /// since a unix socket's path holds 107 bytes.
    pub fn runtime(&self, vmid: u32) -> PathBuf {
        self.dir.join("m").join(vmid.to_string())
    }

    async fn disks_dir(&self, command: &str) -> Result<(), PveError> {
        let dir = self.dir.join("disks");
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| PveError::command(command, format!("{}: {e}", dir.display()), 255))
    }

    /// `qm disk import`: the image converted into the new volume's file.
    pub async fn import(&self, image: &Path, volid: &str, command: &str) -> Result<(), PveError> {
        self.disks_dir(command).await?;
        machine::import(image, &self.disk(volid))
            .await
            .map_err(|e| failed(command, e))
    }

    pub async fn resize(&self, volid: &str, bytes: u64, command: &str) -> Result<(), PveError> {
        machine::resize(&self.disk(volid), bytes)
            .await
            .map_err(|e| failed(command, e))
    }

    /// `qm template`: the disks become base volumes, their files renamed.
    pub async fn rename(&self, from: &str, to: &str, command: &str) -> Result<(), PveError> {
        if from == to {
            return Ok(());
        }
        tokio::fs::rename(self.disk(from), self.disk(to))
            .await
            .map_err(|e| PveError::command(command, format!("rename {from} to {to}: {e}"), 255))
    }

    /// A clone's disk: a qcow2 on its base's file (linked) or a copy.
    pub async fn clone_disk(
        &self,
        source: &str,
        volid: &str,
        linked: bool,
        command: &str,
    ) -> Result<(), PveError> {
        self.disks_dir(command).await?;
        let (base, disk) = (self.disk(source), self.disk(volid));
        let made = if linked {
            machine::linked(&base, &disk).await
        } else {
            machine::import(&base, &disk).await
        };
        made.map_err(|e| failed(command, e))
    }

    /// `qm start`: the VM's boot disk booted with a cloud-init drive made
    /// from its settings, as Proxmox regenerates it at every start.
    /// `planted`: the `cloud-init` fault's message, which a `bootcmd` that
    /// prints it and exits 1 makes the guest's own cloud-init fail with.
    pub async fn start(
        &self,
        vm: &SimVm,
        planted: Option<&str>,
        command: &str,
    ) -> Result<(), PveError> {
        let mut spec = self
            .spec(vm)
            .map_err(|why| PveError::command(command, why, 255))?;
        if let Some(message) = planted {
            spec.seed = plant_failure(spec.seed, message);
        }
        machine::start(&spec)
            .await
            .map(drop)
            .map_err(|e| failed(command, e))
    }

    fn spec(&self, vm: &SimVm) -> Result<MachineSpec, String> {
        let boot = ["scsi0", "virtio0", "sata0"]
            .iter()
            .find_map(|key| vm.conf(key))
            .map(|drive| drive.split(',').next().unwrap_or(drive).to_string())
            .ok_or_else(|| format!("VM {} has no boot disk", vm.vmid))?;
        let address: Ipv4Addr = vm
            .conf("ipconfig0")
            .and_then(|c| c.split(',').find_map(|p| p.strip_prefix("ip=")))
            .and_then(|cidr| cidr.split('/').next())
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| format!("VM {} has no static ipconfig0 to forward", vm.vmid))?;
        let number =
            |key: &str, default: u32| vm.conf(key).and_then(|v| v.parse().ok()).unwrap_or(default);
        let seed = self.seed(vm);
        let host_cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        Ok(MachineSpec {
            vmid: vm.vmid,
            name: vm.conf("name").unwrap_or("vm").to_string(),
            dir: self.runtime(vm.vmid),
            disk: self.disk(&boot),
            kernel: self.kernel.clone(),
            initrd: self.initrd.clone(),
            memory_mib: number("memory", 2048),
            cores: number("cores", 1).clamp(1, host_cores),
            ssh: SocketAddrV4::new(address, self.ssh_port),
            seed,
        })
    }

    /// The NoCloud seed of the VM's `ci*` settings (qemu-server
    /// `PVE/QemuServer/Cloudinit.pm`). The instance-id is a digest of the
    /// settings, as Proxmox's SHA-1 of user-data and network-config is: a
    /// clone, with its own name, address and keys, is a new instance.
    fn seed(&self, vm: &SimVm) -> Seed {
        let keys: Vec<String> = vm
            .conf("sshkeys")
            .map(|k| uri_unescape(k).into_owned())
            .unwrap_or_default()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        let mut seed = Seed {
            instance_id: String::new(),
            hostname: vm.conf("name").unwrap_or("vm").to_string(),
            searchdomain: vm.conf("searchdomain").map(str::to_string),
            user: vm.conf("ciuser").unwrap_or("root").to_string(),
            password_hash: vm.conf("cipassword").map(str::to_string),
            ssh_keys: keys,
            ssh_pwauth: None,
            package_upgrade: vm.conf("ciupgrade") != Some("0"),
            mac: machine::mac_for(vm.vmid),
            network: SeedNetwork::user_mode(),
            nameservers: vec![Ipv4Addr::new(10, 0, 2, 3)],
            bootcmd: vec![],
        };
        seed.instance_id = instance_id(&seed);
        seed
    }

    pub fn running(&self, vmid: u32) -> bool {
        machine::running(&self.runtime(vmid))
    }

    /// `qm stop`: the plug pulled.
    pub async fn stop(&self, vmid: u32, command: &str) -> Result<(), PveError> {
        machine::kill(&self.runtime(vmid))
            .await
            .map_err(|e| failed(command, e))
    }

    /// `qm shutdown`: ACPI, waited for.
    pub async fn shutdown(&self, vmid: u32, command: &str) -> Result<(), PveError> {
        let dir = self.runtime(vmid);
        if !machine::running(&dir) {
            return Ok(());
        }
        machine::shutdown(&dir, SHUTDOWN_TIMEOUT)
            .await
            .map_err(|e| failed(command, e))
    }

    /// `qm reboot`: Proxmox shuts the VM down and starts it again (a new
    /// QEMU, a new cloud-init drive).
    pub async fn reboot(&self, vm: &SimVm, command: &str) -> Result<(), PveError> {
        self.shutdown(vm.vmid, command).await?;
        self.start(vm, None, command).await
    }

    /// `qm agent <vmid> ping`, in Proxmox's words when nothing answers.
    pub async fn ping(&self, vmid: u32, command: &str) -> Result<(), PveError> {
        let socket = machine::RuntimeFiles::of(&self.runtime(vmid)).qga;
        machine::qga_ping(&socket, PING_TIMEOUT)
            .await
            .map_err(|e| failed(command, e))
    }

    /// `qm guest exec`: the guest's own agent runs `argv`.
    pub async fn exec(
        &self,
        vmid: u32,
        argv: &[String],
        timeout: Duration,
        command: &str,
    ) -> Result<AgentExec, PveError> {
        let socket = machine::RuntimeFiles::of(&self.runtime(vmid)).qga;
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        let result = machine::qga_exec(&socket, &words, timeout)
            .await
            .map_err(|e| failed(command, e))?;
        Ok(AgentExec {
            exitcode: result.exited.then_some(result.exitcode).flatten(),
            signal: result.signal,
            out: result.out,
            err: result.err,
        })
    }

    /// `qm vncproxy` / `qm terminal`: QEMU's own VNC server or serial
    /// port. QEMU's VNC asks for no password here (no `password=on`: it
    /// would refuse everyone until QMP set one); with a `password`, the
    /// RFB security is the simulator's, in front of QEMU's
    /// ([`rfb::guard`](crate::console::rfb::guard)).
    pub async fn console(
        &self,
        vmid: u32,
        kind: pvedeck_proxmox::ConsoleKind,
        password: Option<String>,
        command: &str,
    ) -> Result<Box<dyn pvedeck_proxmox::ConsoleIo>, PveError> {
        let files = machine::RuntimeFiles::of(&self.runtime(vmid));
        let socket = match kind {
            pvedeck_proxmox::ConsoleKind::Vnc => files.vnc,
            pvedeck_proxmox::ConsoleKind::Serial => files.serial_socket,
        };
        let stream = tokio::net::UnixStream::connect(&socket)
            .await
            .map_err(|e| {
                PveError::command(
                    command,
                    format!("unable to connect to VM {vmid} socket - {e}"),
                    255,
                )
            })?;
        Ok(match (kind, password) {
            (pvedeck_proxmox::ConsoleKind::Vnc, Some(password)) => {
                Box::new(crate::console::rfb::guard(stream, password))
            }
            _ => Box::new(stream),
        })
    }

    /// `qm destroy`: the machine gone (it is stopped already) and the files
    /// of the volumes that went with it.
    pub async fn destroy(&self, vmid: u32, volumes: &[String]) {
        let _ = machine::kill(&self.runtime(vmid)).await;
        let _ = tokio::fs::remove_dir_all(self.runtime(vmid)).await;
        for volid in volumes {
            let _ = machine::remove(&self.disk(volid)).await;
        }
    }
}

/// The seed with a `bootcmd` that fails with `message`, and a new
/// instance-id (the user-data changed, as Proxmox's digest would say).
fn plant_failure(mut seed: Seed, message: &str) -> Seed {
    let quoted = message.replace('\'', "'\\''");
    seed.bootcmd = vec![format!("echo '{quoted}' >&2; exit 1")];
    seed.instance_id = instance_id(&seed);
    seed
}

/// A digest of user-data and network-config, as Proxmox's instance-id is.
fn instance_id(seed: &Seed) -> String {
    let digest = Sha256::digest(format!(
        "{}{}",
        machine::user_data(seed),
        machine::network_config(seed)
    ));
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guests() -> RealGuests {
        RealGuests {
            dir: PathBuf::from("/d/sim"),
            kernel: PathBuf::from("/img/vmlinuz"),
            initrd: PathBuf::from("/img/initrd.img"),
            ssh_port: 2222,
        }
    }

    #[test]
    fn a_volume_is_one_file_named_after_it() {
        assert_eq!(
            guests().disk("local-zfs:base-9001-disk-0/vm-107-disk-0"),
            PathBuf::from("/d/sim/disks/local-zfs_base-9001-disk-0_vm-107-disk-0.qcow2")
        );
    }

    #[test]
    fn the_seed_and_forward_come_from_the_vm_s_cloud_init_settings() {
        let vm: SimVm = serde_json::from_value(serde_json::json!({
            "vmid": 107, "node": "pve1", "kind": "qemu",
            "config": {
                "name": "web-107", "ciuser": "debian", "cipassword": "$6$s$h",
                "sshkeys": "ssh-ed25519%20AAAA%20me%0A", "ipconfig0": "ip=127.0.0.107/24,gw=127.0.0.1",
                "scsi0": "local-zfs:vm-107-disk-0,size=16G", "memory": "2048", "cores": "1"
            },
            "running": false, "guest": "off", "mem_plateau": 0, "cpu_load": 0.0
        }))
        .unwrap();
        let spec = guests().spec(&vm).unwrap();
        assert_eq!(spec.ssh, "127.0.0.107:2222".parse().unwrap());
        assert_eq!(spec.seed.user, "debian");
        assert_eq!(spec.seed.ssh_keys, ["ssh-ed25519 AAAA me"]);
        assert_eq!(spec.seed.password_hash.as_deref(), Some("$6$s$h"));
        assert_eq!(
            spec.disk,
            PathBuf::from("/d/sim/disks/local-zfs_vm-107-disk-0.qcow2")
        );
        let planted = plant_failure(spec.seed.clone(), "it's broken");
        assert_eq!(planted.bootcmd, ["echo 'it'\\''s broken' >&2; exit 1"]);
        assert_ne!(planted.instance_id, spec.seed.instance_id);
        // Another name is another instance: cloud-init runs again.
        let mut other = vm.clone();
        other.config.insert("name".into(), "web-108".into());
        assert_ne!(
            guests().spec(&other).unwrap().seed.instance_id,
            spec.seed.instance_id
        );
    }
}
