//! The simulated VMs' consoles (issue 30): what `qm vncproxy`, `qm
//! terminal` and the REST face's `vncwebsocket` reach on a node, and what
//! the `Pve` port's `console` gives the relay in-process.
//!
//! A console is a byte stream (one end of a `tokio::io::duplex`) whose
//! other end a spawned task serves: the RFB server of `rfb` for
//! [`ConsoleKind::Vnc`], the serial line of `serial` for
//! [`ConsoleKind::Serial`]. The stream ends (EOF) when the VM's QEMU would
//! go: the VM stopped, destroyed, migrated away or restarted (`qm reboot`
//! is a new QEMU), or its node went offline; a console of a real guest
//! (`SIM_GUESTS=qemu`) is QEMU's own socket, which ends with QEMU.

pub mod rfb;
pub mod serial;
mod tty;

use std::future::Future;
use std::sync::Arc;

use pvedeck_proxmox::{ConsoleKind, ConsoleStream, PveError};
use tokio::io::DuplexStream;

pub use tty::{GuestInfo, GuestOs};

use crate::SimCluster;
use crate::qm::vm_on;
use crate::state::SimVm;
use crate::store::Store;

/// Room for a whole 640×400 Raw frame in flight, so that the server does
/// not wait on a reader for every few rows.
const BUFFER: usize = 1 << 20;

/// The serial ports `qm terminal` looks at, in its order.
const SERIAL_PORTS: [&str; 4] = ["serial0", "serial1", "serial2", "serial3"];

/// How a console is opened beyond its kind.
#[derive(Debug, Clone, Default)]
pub struct ConsoleOptions {
    /// VNC authentication's password (`qm vncproxy`'s `LC_PVE_TICKET`,
    /// the REST face's ticket); `None`: security type None.
    pub password: Option<String>,
    /// `qm terminal -iface`: the serial port; `None`: the first one
    /// configured as a socket.
    pub iface: Option<String>,
}

/// A console of `guest` served on a new stream until `until` completes
/// (then the stream ends) or the peer closes.
pub fn open<F>(
    kind: ConsoleKind,
    guest: GuestInfo,
    password: Option<String>,
    until: F,
) -> DuplexStream
where
    F: Future<Output = ()> + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(BUFFER);
    tokio::spawn(async move {
        let served = async {
            match kind {
                ConsoleKind::Vnc => rfb::serve(theirs, &guest, password.as_deref())
                    .await
                    .map_err(|e| e.to_string()),
                ConsoleKind::Serial => serial::serve(theirs, &guest)
                    .await
                    .map_err(|e| e.to_string()),
            }
        };
        tokio::select! {
            result = served => {
                if let Err(e) = result {
                    tracing::debug!(vmid = guest.vmid, "sim: console ended: {e}");
                }
            }
            () = until => tracing::debug!(vmid = guest.vmid, "sim: console's VM is gone"),
        }
    });
    ours
}

/// The command a console is, as the node runs it (messages, the log).
pub fn command(kind: ConsoleKind, vmid: u32) -> String {
    match kind {
        ConsoleKind::Vnc => format!("qm vncproxy {vmid}"),
        ConsoleKind::Serial => format!("qm terminal {vmid}"),
    }
}

fn fail(command: &str, message: String) -> PveError {
    PveError::command(command, message, crate::qm::EXIT_FAIL)
}

/// The serial port `qm terminal` would open on `vm` (`asked`, else the
/// first configured as a socket), or its refusal in qm's words.
pub fn serial_iface(vm: &SimVm, asked: Option<&str>, command: &str) -> Result<String, PveError> {
    match asked {
        Some(iface) => match vm.conf(iface) {
            _ if !SERIAL_PORTS.contains(&iface) => Err(PveError::command(
                command,
                format!(
                    "400 Parameter verification failed.\niface: value '{iface}' does not have a value in the enumeration '{}'",
                    SERIAL_PORTS.join(", ")
                ),
                crate::qm::EXIT_FAIL,
            )),
            None => Err(fail(
                command,
                format!("serial interface '{iface}' is not configured"),
            )),
            Some("socket") => Ok(iface.to_string()),
            Some(_) => Err(fail(
                command,
                format!("wrong serial type on interface '{iface}'"),
            )),
        },
        None => SERIAL_PORTS
            .iter()
            .find(|port| vm.conf(port) == Some("socket"))
            .map(|port| port.to_string())
            .ok_or_else(|| fail(command, "unable to find a serial interface".to_string())),
    }
}

/// Which QEMU a console belongs to: while it is the same, the console
/// stays.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Instance {
    node: String,
    started: Option<i64>,
}

impl Instance {
    fn of(vm: &SimVm) -> Instance {
        Instance {
            node: vm.node.clone(),
            started: vm.started,
        }
    }

    fn still(&self, store: &Store, vmid: u32) -> bool {
        store.read(|s| {
            s.node_online(&self.node)
                && s.vms
                    .get(&vmid)
                    .is_some_and(|vm| vm.running && Instance::of(vm) == *self)
        })
    }
}

/// Completes when VM `vmid`'s QEMU `instance` is gone.
async fn gone(
    store: Arc<Store>,
    mut changes: crate::store::Changes,
    vmid: u32,
    instance: Instance,
) {
    while instance.still(&store, vmid) {
        if !changes.next().await {
            // The cluster itself is gone; the console's peer ends it.
            std::future::pending::<()>().await;
        }
    }
}

impl SimCluster {
    /// Opens VM `vmid`'s console on `node`, with the checks and messages
    /// of `qm vncproxy` / `qm terminal`: the VM's config on the node, a
    /// serial port configured as a socket (`Serial`), the VM running.
    pub async fn open_console(
        &self,
        node: &str,
        vmid: u32,
        kind: ConsoleKind,
        options: ConsoleOptions,
    ) -> Result<ConsoleStream, PveError> {
        let command = command(kind, vmid);
        self.strike("console", Some(vmid), &command).await?;
        // Taken before the VM is looked at, so that no change between the
        // look and the watch goes unseen.
        let changes = self.store.changes();
        let (guest, instance) = self.read(|s| {
            let vm = vm_on(s, node, vmid, &command, true)?;
            if kind == ConsoleKind::Serial {
                serial_iface(vm, options.iface.as_deref(), &command)?;
            }
            if !vm.running {
                return Err(fail(&command, format!("VM {vmid} not running")));
            }
            Ok((GuestInfo::of(vm), Instance::of(vm)))
        })?;
        if let Some(real) = &self.real {
            // A guest that powered itself off has no QEMU to connect to.
            if !real.running(vmid) {
                return Err(fail(&command, format!("VM {vmid} not running")));
            }
            let io = real
                .console(vmid, kind, options.password.clone(), &command)
                .await?;
            return Ok(ConsoleStream {
                io,
                password: options.password,
            });
        }
        let until = gone(self.store.clone(), changes, vmid, instance);
        let io = open(kind, guest, options.password.clone(), until);
        Ok(ConsoleStream {
            io: Box::new(io),
            password: options.password,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ClusterState;
    use pvedeck_proxmox::{PowerAction, Pve};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One node, pve1, fast.
    fn settings() -> crate::SimSettings {
        crate::SimSettings {
            speed: 1000.0,
            jitter: 0.0,
            gateway: "10.0.0.1".parse().unwrap(),
            nodes: [("pve1".to_string(), "10.0.0.11".parse().unwrap())]
                .into_iter()
                .collect(),
            pvesh: std::time::Duration::ZERO,
            size: None,
            node_memory: vec![],
        }
    }

    fn sim() -> SimCluster {
        let settings = settings();
        let state: ClusterState = crate::seed::demo_cluster(settings.gateway, &settings.nodes);
        SimCluster::with_store(Store::memory(state, None), &settings)
    }

    /// Reads until EOF; what came.
    async fn drain(io: &mut Box<dyn pvedeck_proxmox::ConsoleIo>) -> Vec<u8> {
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.unwrap();
        all
    }

    #[tokio::test]
    async fn a_stopped_vm_has_no_console_and_a_vm_without_serial0_no_terminal() {
        let sim = sim();
        let err = sim
            .console("pve2", 103, ConsoleKind::Vnc)
            .await
            .unwrap_err();
        assert_eq!(err.message(), "VM 103 not running");
        let err = sim
            .console("pve1", 103, ConsoleKind::Vnc)
            .await
            .unwrap_err();
        assert!(
            err.message()
                .contains("Configuration file 'nodes/pve1/qemu-server/103.conf' does not exist"),
            "{err}"
        );
        sim.change(|s| s.vms.get_mut(&101).map(|vm| vm.config.remove("serial0")));
        let err = sim
            .console("pve1", 101, ConsoleKind::Serial)
            .await
            .unwrap_err();
        assert_eq!(err.message(), "unable to find a serial interface");
        let err = sim
            .open_console(
                "pve1",
                102,
                ConsoleKind::Serial,
                ConsoleOptions {
                    iface: Some("serial1".into()),
                    ..ConsoleOptions::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.message(),
            "serial interface 'serial1' is not configured"
        );
        // The VNC console needs no serial port.
        let console = sim.console("pve1", 101, ConsoleKind::Vnc).await.unwrap();
        assert_eq!(console.password, None);
    }

    #[tokio::test]
    async fn the_serial_console_greets_with_the_vm_s_name() {
        let sim = sim();
        let mut console = sim.console("pve1", 102, ConsoleKind::Serial).await.unwrap();
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        while !seen.ends_with("db-01-102 login: ") {
            let n = console.io.read(&mut buf).await.unwrap();
            assert!(n > 0, "{seen:?}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        console.io.write_all(b"admin").await.unwrap();
        let n = console.io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"admin");
    }

    #[tokio::test]
    async fn the_console_ends_when_its_vm_stops_and_is_destroyed() {
        let sim = sim();
        let mut vnc = sim.console("pve1", 101, ConsoleKind::Vnc).await.unwrap();
        let mut serial = sim.console("pve1", 101, ConsoleKind::Serial).await.unwrap();
        let mut other = sim.console("pve1", 102, ConsoleKind::Serial).await.unwrap();
        sim.power("pve1", 101, PowerAction::Stop { skiplock: false })
            .await
            .unwrap();
        let vnc_bytes = drain(&mut vnc.io).await;
        assert!(vnc_bytes.starts_with(b"RFB 003.008\n"), "{vnc_bytes:?}");
        drain(&mut serial.io).await;

        // Another VM's console stays; its VM destroyed, it ends.
        other.io.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 8192];
        let mut seen = Vec::new();
        while !seen.ends_with(b"login: x") {
            let n = other.io.read(&mut buf).await.unwrap();
            assert!(n > 0, "the other console still runs");
            seen.extend_from_slice(&buf[..n]);
        }
        sim.power("pve1", 102, PowerAction::Stop { skiplock: false })
            .await
            .unwrap();
        sim.destroy("pve1", 102, false).await.unwrap();
        assert!(drain(&mut other.io).await.is_empty());
    }

    #[tokio::test]
    async fn a_qm_reboot_ends_the_console_as_a_new_qemu_would() {
        let sim = sim();
        let mut vnc = sim.console("pve1", 101, ConsoleKind::Vnc).await.unwrap();
        sim.power("pve1", 101, PowerAction::Reboot).await.unwrap();
        let bytes = drain(&mut vnc.io).await;
        assert!(bytes.starts_with(b"RFB"));
    }

    #[tokio::test]
    async fn a_console_of_the_shared_store_ends_when_another_process_stops_its_vm() {
        let dir = tempfile::tempdir().unwrap();
        let settings = settings();
        let one = SimCluster::shared(dir.path(), &settings).unwrap();
        // Another process's view: a second store on the same directory,
        // whose changes reach `one` only through the file.
        let two = SimCluster::shared(dir.path(), &settings).unwrap();
        let mut serial = one.console("pve1", 101, ConsoleKind::Serial).await.unwrap();
        two.power("pve1", 101, PowerAction::Stop { skiplock: false })
            .await
            .unwrap();
        let bytes = drain(&mut serial.io).await;
        assert!(bytes.ends_with(b"login: "), "{bytes:?}");
    }
}
