//! When a VM is ready: `<user>@<ip> echo ready` over SSH answers
//! (docs/provisioning.md#readiness: the install's `waiting for ready`, a
//! lifecycle action's `waiting for SSH`; the same session tells the
//! machine-id, see `pvedeck_proxmox::READY_COMMAND`).
//!
//! `ssh` is tried every `SSH_POLL_INTERVAL_MS`, at most `SSH_POLL_ATTEMPTS`
//! times, as go-pve-qemu did; between tries a TCP connect to
//! `<ip>:SSH_PORT` every 200 ms notices the moment sshd starts listening,
//! and `ssh` is tried at once then. After a reboot the port is first seen
//! closed, so the session of the old boot is not taken for the new one.

use std::time::{Duration, Instant};

use pvedeck_proxmox::GuestTarget;

use super::Engine;
use super::report::Step;

/// How often the port is knocked on.
const PROBE_EVERY: Duration = Duration::from_millis(200);
/// How long a reboot may take to close the old boot's port (or two poll
/// intervals, when shorter).
const CLOSE_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boot {
    /// After `qm start`: nothing ran before.
    Start,
    /// After `qm reboot`: the old boot's sshd may still answer.
    Reboot,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    #[error("SSH timeout after {0} attempts")]
    Timeout(u32),
    /// Whoever answers does not have the host key recorded for the VM:
    /// no retry, nothing is sent to it.
    #[error(
        "{ip}: the host key is not the one recorded for this VM (Host key verification failed)"
    )]
    HostKey { ip: std::net::Ipv4Addr },
}

/// Whether to try `ssh` now: its turn came, or the port just opened.
fn ssh_due(now: Instant, next_turn: Instant, open: bool, was_open: bool) -> bool {
    now >= next_turn || (open && !was_open)
}

impl Engine {
    pub(super) async fn wait_for_ssh(
        &self,
        step: &Step<'_>,
        target: &GuestTarget,
        boot: Boot,
    ) -> Result<Option<String>, ReadyError> {
        let attempts = self.config.ssh_poll_attempts;
        let interval = self.config.ssh_poll_interval;
        let pause = PROBE_EVERY.min(interval);
        if boot == Boot::Reboot {
            let until = Instant::now() + CLOSE_GRACE.min(interval * 2);
            while Instant::now() < until && self.proxmox.probe(target.ip, target.port).await {
                tokio::time::sleep(pause).await;
            }
        }
        let mut tries = 0;
        let mut next_turn = Instant::now();
        let mut was_open = false;
        loop {
            let open = self.proxmox.probe(target.ip, target.port).await;
            let now = Instant::now();
            if ssh_due(now, next_turn, open, was_open) {
                match self.proxmox.guest_ready(target).await {
                    Ok(machine_id) => return Ok(machine_id),
                    Err(e) if e.is_host_key_refused() => {
                        return Err(ReadyError::HostKey { ip: target.ip });
                    }
                    Err(_) => {}
                }
                tries += 1;
                if tries >= attempts {
                    return Err(ReadyError::Timeout(attempts));
                }
                if tries % 6 == 0 {
                    step.processing(format!(
                        "[*] waiting for SSH on {}:{} ({tries}/{attempts})",
                        target.ip, target.port
                    ));
                }
                next_turn = Instant::now() + interval;
            }
            was_open = open;
            tokio::time::sleep(pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_is_tried_on_its_turn_or_when_the_port_opens() {
        let now = Instant::now();
        let later = now + Duration::from_secs(5);
        assert!(ssh_due(now, now, false, false), "the first turn");
        assert!(!ssh_due(now, later, false, false), "closed, not its turn");
        assert!(ssh_due(now, later, true, false), "the port just opened");
        assert!(
            !ssh_due(now, later, true, true),
            "open before: wait for the turn"
        );
        assert!(ssh_due(later, later, true, true));
    }
}
