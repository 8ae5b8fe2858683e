//! `qm agent <vmid> ping` and `qm guest exec`: the QEMU guest agent answers
//! only when the VM's config enables it, the VM runs, its OS has booted and
//! the agent is installed in it. `guest exec` runs the few commands pvedeck
//! sends (reading the identity, cloud-init, cleaning the identity); any
//! other is "not found", so nothing relies on a command the guest would not
//! understand.

use pvedeck_proxmox::{AgentExec, PveError};
use pvedeck_support::clock::now_ms;

use super::{fail, vm_mut, vm_on};
use crate::state::{Guest, SimVm};
use crate::{SimCluster, timing};

/// Whether `agent: 1` (or `enabled=1,…`) is in the config.
fn agent_enabled(vm: &SimVm) -> bool {
    vm.conf("agent").is_some_and(|a| {
        a.split(',')
            .any(|part| matches!(part, "1" | "enabled=1" | "enabled=yes" | "enabled=on"))
    })
}

/// Why the agent does not answer, in `qm`'s words; `Ok(true)` when it
/// answers, `Ok(false)` when it would, after a boot not finished yet.
fn answers(vm: &SimVm, command: &str) -> Result<bool, PveError> {
    if vm.conf("agent").is_none() {
        return Err(fail(command, "No QEMU guest agent configured"));
    }
    if !vm.running {
        return Err(fail(command, format!("VM {} is not running", vm.vmid)));
    }
    let booted = match vm.guest {
        Guest::Up => true,
        Guest::Booting { ready_at } => now_ms() >= ready_at,
        Guest::Off => false,
    };
    Ok(agent_enabled(vm) && vm.inside.agent && booted)
}

/// What the guest's shell does with one command line.
fn run_line(vm: &mut SimVm, line: &str) -> (i32, String, String) {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [] => (0, String::new(), String::new()),
        ["cat", "/etc/machine-id"] => (0, format!("{}\n", vm.inside.machine_id), String::new()),
        ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"] if !vm.inside.host_key.is_empty() => {
            let name = vm.conf("name").unwrap_or("localhost").to_string();
            (
                0,
                format!("{} root@{name}\n", vm.inside.host_key),
                String::new(),
            )
        }
        ["cloud-init", "status", rest @ ..] if rest.iter().all(|w| *w == "--wait") => {
            (0, "status: done\n".to_string(), String::new())
        }
        ["cloud-init", "status", "--long"] => (
            0,
            "status: done\ntime: Sun, 06 Dec 2026 12:00:00 +0000\ndetail:\n\
             DataSourceNoCloud [seed=/dev/sr0][dsmode=net]\n"
                .to_string(),
            String::new(),
        ),
        ["cloud-init", "clean", flags @ ..] => {
            if flags.contains(&"--machine-id") {
                // An empty file: the next boot writes a new id.
                vm.inside.machine_id.clear();
            }
            (0, String::new(), String::new())
        }
        ["rm", "-f", files @ ..] => {
            if files.iter().any(|f| f.starts_with("/etc/ssh/ssh_host_")) {
                vm.inside.host_key.clear();
            }
            (0, String::new(), String::new())
        }
        // The shell killing itself: what a command killed looks like.
        ["kill", "-9", "$$"] => (137, String::new(), String::new()),
        [program, ..] => (127, String::new(), format!("sh: 1: {program}: not found\n")),
    }
}

/// `sh -c "a && b"` runs its lines in turn; anything else is one line.
fn run(vm: &mut SimVm, argv: &[String]) -> (i32, String, String) {
    let script = match argv {
        [sh, c, script] if sh == "sh" && c == "-c" => script.clone(),
        _ => argv.join(" "),
    };
    let (mut out, mut err) = (String::new(), String::new());
    for line in script.split(['\n', ';']).flat_map(|l| l.split("&&")) {
        let (code, o, e) = run_line(vm, line.trim());
        out.push_str(&o);
        err.push_str(&e);
        if code != 0 {
            return (code, out, err);
        }
    }
    (0, out, err)
}

impl SimCluster {
    /// Waits for the agent as `qm` does: it is either there or, after the
    /// ping's timeout, reported missing.
    async fn agent_there(&self, node: &str, vmid: u32, command: &str) -> Result<(), PveError> {
        self.fault("agent", Some(vmid), command).await?;
        let there = self.read(|s| answers(vm_on(s, node, vmid, command, false)?, command))?;
        if there {
            self.clock.sleep(timing::AGENT_CALL).await;
            Ok(())
        } else {
            self.clock.sleep(timing::AGENT_TIMEOUT).await;
            Err(fail(command, "QEMU guest agent is not running"))
        }
    }

    pub async fn qm_agent_ping(&self, node: &str, vmid: u32) -> Result<(), PveError> {
        let command = format!("qm agent {vmid} ping");
        self.record(&command);
        if let Some(real) = &self.real {
            self.read(|s| vm_on(s, node, vmid, &command, false).map(drop))?;
            return real.ping(vmid, &command).await;
        }
        self.agent_there(node, vmid, &command).await
    }

    /// `qm guest cmd <vmid> network-get-interfaces`: QGA's answer, `lo`
    /// and `eth0` with the MAC of `net0` and the address cloud-init gave
    /// (or, with DHCP, the one the simulated network hands out: the VMID's).
    pub async fn qm_agent_interfaces(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<serde_json::Value, PveError> {
        let command = format!("qm guest cmd {vmid} network-get-interfaces");
        self.record(&command);
        self.agent_there(node, vmid, &command).await?;
        let (mac, ip) = self.read(|s| {
            let vm = s.vms.get(&vmid);
            let mac = vm
                .and_then(|v| v.conf("net0"))
                .and_then(|n| n.split(',').next())
                .and_then(|m| m.split_once('=').map(|(_, mac)| mac.to_ascii_lowercase()))
                .unwrap_or_default();
            let ip = vm
                .and_then(|v| v.conf("ipconfig0"))
                .and_then(|c| c.split(',').find_map(|p| p.strip_prefix("ip=")))
                .and_then(|cidr| cidr.split_once('/'))
                .and_then(|(ip, prefix)| {
                    Some((
                        ip.parse::<std::net::Ipv4Addr>().ok()?,
                        prefix.parse::<u8>().ok()?,
                    ))
                });
            (mac, ip)
        });
        let [a, b, c, _] = self.gateway.octets();
        let (ip, prefix) = ip.unwrap_or((std::net::Ipv4Addr::new(a, b, c, (vmid % 256) as u8), 24));
        Ok(serde_json::json!([
            {"name": "lo", "hardware-address": "00:00:00:00:00:00",
             "ip-addresses": [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}]},
            {"name": "eth0", "hardware-address": mac,
             "ip-addresses": [{"ip-address": ip.to_string(), "ip-address-type": "ipv4", "prefix": prefix}]},
        ]))
    }

    pub async fn qm_guest_exec(
        &self,
        node: &str,
        vmid: u32,
        argv: &[String],
        timeout_secs: u32,
    ) -> Result<AgentExec, PveError> {
        let command = format!("qm guest exec {vmid} -- {}", argv.join(" "));
        self.record(&command);
        if let Some(real) = &self.real {
            self.read(|s| vm_on(s, node, vmid, &command, false).map(drop))?;
            let timeout = std::time::Duration::from_secs(u64::from(timeout_secs));
            return real.exec(vmid, argv, timeout, &command).await;
        }
        self.agent_there(node, vmid, &command).await?;
        if argv.first().is_some_and(|p| p == "cloud-init")
            && let Err(e) = self.fault("cloud-init", Some(vmid), &command).await
        {
            // cloud-init ran and failed: `--wait` says only so (22.4's
            // `cmd/status.py`), `--long` names what failed in its detail.
            let out = if argv.iter().any(|a| a == "--long") {
                format!(
                    "status: error\ntime: {}\ndetail:\n{}\n",
                    "Sun, 06 Dec 2026 12:00:00 +0000",
                    e.message()
                )
            } else {
                "status: error\n".to_string()
            };
            return Ok(AgentExec {
                exitcode: Some(1),
                out,
                ..AgentExec::default()
            });
        }
        if argv.iter().any(|a| a.contains("cloud-init clean"))
            && self.fault("clean", Some(vmid), &command).await.is_err()
        {
            return Ok(AgentExec {
                exitcode: Some(0),
                ..AgentExec::default()
            });
        }
        let (code, out, err) = self.change(|s| {
            let vm = vm_mut(s, vmid).ok_or_else(|| fail(&command, "VM vanished"))?;
            Ok::<_, PveError>(run(vm, argv))
        })?;
        // A command killed (SIGKILL, as `kill -9 $$` does) ends with a
        // signal and no exit code, as qemu-ga reports it.
        let (exitcode, signal) = if code == 137 && argv.iter().any(|a| a.contains("kill -9 $$")) {
            (None, Some(9))
        } else {
            (Some(code), None)
        };
        Ok(AgentExec {
            exitcode,
            signal,
            out,
            err,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{GuestKind, Inside};

    fn vm(agent: Option<&str>, running: bool, installed: bool) -> SimVm {
        let mut config = std::collections::BTreeMap::new();
        if let Some(a) = agent {
            config.insert("agent".to_string(), a.to_string());
        }
        SimVm {
            vmid: 107,
            node: "pve1".into(),
            kind: GuestKind::Qemu,
            config,
            volumes: Default::default(),
            running,
            guest: if running { Guest::Up } else { Guest::Off },
            started: None,
            mem_plateau: 0,
            cpu_load: 0.0,
            initialized: installed,
            inside: Inside {
                machine_id: "0123456789abcdef0123456789abcdef".into(),
                host_key: "ssh-ed25519 AAAAkey".into(),
                agent: installed,
                root_hash: String::new(),
                claims: Vec::new(),
            },
            firewall: Default::default(),
        }
    }

    #[test]
    fn the_agent_answers_only_when_enabled_running_and_installed() {
        let msg = |r: Result<bool, PveError>| r.map_err(|e| e.message());
        assert_eq!(
            msg(answers(&vm(None, true, true), "c")),
            Err("No QEMU guest agent configured".into())
        );
        assert_eq!(
            msg(answers(&vm(Some("1"), false, true), "c")),
            Err("VM 107 is not running".into())
        );
        assert_eq!(msg(answers(&vm(Some("0"), true, true), "c")), Ok(false));
        assert_eq!(msg(answers(&vm(Some("1"), true, false), "c")), Ok(false));
        assert_eq!(msg(answers(&vm(Some("1"), true, true), "c")), Ok(true));
        assert_eq!(
            msg(answers(
                &vm(Some("enabled=1,fstrim_cloned_disks=1"), true, true),
                "c"
            )),
            Ok(true)
        );
    }

    #[test]
    fn cleaning_forgets_the_identity_and_unknown_commands_are_not_found() {
        let mut guest = vm(Some("1"), true, true);
        let argv = |s: &str| vec!["sh".to_string(), "-c".to_string(), s.to_string()];
        let (code, out, _) = run(&mut guest, &argv("cat /etc/machine-id"));
        assert_eq!(
            (code, out.as_str()),
            (0, "0123456789abcdef0123456789abcdef\n")
        );
        let clean = "cloud-init clean --logs --machine-id && rm -f /etc/ssh/ssh_host_*";
        assert_eq!(run(&mut guest, &argv(clean)).0, 0);
        assert_eq!(guest.inside.machine_id, "");
        assert_eq!(guest.inside.host_key, "");
        let (code, _, err) = run(&mut guest, &argv("apt-get install foo"));
        assert_eq!((code, err.as_str()), (127, "sh: 1: apt-get: not found\n"));
    }
}
