//! `qm` on the simulated cluster: the same checks, locks, error texts and
//! output lines as Proxmox VE 9 (docs/backends.md#what-qm-prints), taking
//! simulated time. One file per group of verbs: `create` (create,
//! importdisk, destroy), `config` (set, resize, config), `power` (status,
//! start, stop, shutdown, reboot), `migrate`, `clone` (clone, template),
//! `agent` (agent ping, guest exec).

mod agent;
mod clone;
mod config;
mod create;
mod migrate;
mod power;

use pvedeck_proxmox::PveError;
use pvedeck_support::clock::now_ms;

use super::state::{ClusterState, GuestKind, SimVm};

/// Exit code of a Perl `die` after ENOENT (a missing VM config).
const EXIT_ENOENT: i32 = 2;
/// Exit code of a failed task and of most failures.
pub(super) const EXIT_FAIL: i32 = 255;

pub(super) fn fail(command: &str, message: impl Into<String>) -> PveError {
    PveError::command(command, message, EXIT_FAIL)
}

/// `qm` on `node` can act on `vmid`: the node is up, the VM's config lives
/// there and (unless `skiplock`) no lock is held.
pub fn vm_on<'a>(
    s: &'a ClusterState,
    node: &str,
    vmid: u32,
    command: &str,
    skiplock: bool,
) -> Result<&'a SimVm, PveError> {
    s.online_node(node, command)?;
    let vm = s
        .vms
        .get(&vmid)
        .filter(|vm| vm.node == node && vm.kind == GuestKind::Qemu)
        .ok_or_else(|| {
            PveError::command(
                command,
                format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"),
                EXIT_ENOENT,
            )
        })?;
    if let (Some(lock), false) = (vm.lock(), skiplock) {
        return Err(fail(command, format!("VM is locked ({lock})")));
    }
    Ok(vm)
}

pub(super) fn vm_mut(s: &mut ClusterState, vmid: u32) -> Option<&mut SimVm> {
    s.vms.get_mut(&vmid)
}

/// `transferred 20.5 MiB of 2.0 GiB (1.00%)`, as `render_bytes` writes sizes.
pub(super) fn render_bytes(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", units[unit])
}

/// What Proxmox writes into every new VM's config, a clone's too: its
/// creation stamp, SMBIOS UUID and VM generation id.
pub(super) fn fresh_ids(vmid: u32) -> [(String, String); 3] {
    [
        (
            "meta".into(),
            format!("creation-qemu=9.2.0,ctime={}", now_ms() / 1000),
        ),
        (
            "smbios1".into(),
            format!("uuid=5a0c{vmid:04x}-0000-4000-8000-00000000{vmid:04x}"),
        ),
        (
            "vmgenid".into(),
            format!("8b1f{vmid:04x}-0000-4000-8000-00000000{vmid:04x}"),
        ),
    ]
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) for migration log lines.
pub(super) fn timestamp() -> String {
    pvedeck_domain::format::utc(now_ms())
}

/// `qm set` prints `update VM 101: -key value …` with the password hidden.
pub(super) fn update_line(vmid: u32, options: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = options.iter().collect();
    sorted.sort();
    let shown: Vec<String> = sorted
        .iter()
        .map(|(k, v)| match k.as_str() {
            "cipassword" => format!("-{k} <hidden>"),
            _ => format!("-{k} {v}"),
        })
        .collect();
    format!("update VM {vmid}: {}", shown.join(" "))
}

/// `qm <verb> <vmid> --k v …` as a process list would show it, the
/// password hidden.
pub(super) fn render(verb: &str, vmid: u32, options: &[(String, String)]) -> String {
    let mut line = format!("qm {verb} {vmid}");
    for (key, value) in options {
        let value = if key == "cipassword" {
            "<hidden>"
        } else {
            value.as_str()
        };
        line.push_str(&format!(" --{key} {value}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvedeck_proxmox::drive::GIB;

    #[test]
    fn bytes_render_like_proxmox() {
        assert_eq!(render_bytes(0), "0.0 B");
        assert_eq!(render_bytes(21_495_808), "20.5 MiB");
        assert_eq!(render_bytes(2 * GIB), "2.0 GiB");
    }

    #[test]
    fn update_lines_hide_the_password() {
        let line = update_line(
            101,
            &[
                ("cipassword".into(), "$6$x".into()),
                ("ciupgrade".into(), "0".into()),
            ],
        );
        assert_eq!(line, "update VM 101: -cipassword <hidden> -ciupgrade 0");
    }

    #[test]
    fn timestamps_have_the_migration_log_shape() {
        let t = timestamp();
        assert_eq!(t.len(), 19, "{t}");
        assert_eq!(&t[4..5], "-");
        assert_eq!(&t[10..11], " ");
    }
}
