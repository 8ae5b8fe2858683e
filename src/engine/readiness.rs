//! When a VM is ready: `<user>@<ip> echo ready` over SSH answers (SPEC §3
//! `waiting for ready`, §4 `waiting for SSH`), tried every
//! `SSH_POLL_INTERVAL_MS`, at most `SSH_POLL_ATTEMPTS` times.

use super::Engine;
use super::report::Step;
use crate::pve::GuestTarget;

#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    #[error("SSH timeout after {0} attempts")]
    Timeout(u32),
}

impl Engine {
    pub(super) async fn wait_for_ssh(
        &self,
        step: &Step<'_>,
        target: &GuestTarget,
    ) -> Result<(), ReadyError> {
        let attempts = self.config.ssh_poll_attempts;
        for attempt in 1..=attempts {
            if self.proxmox.guest_ready(target).await.is_ok() {
                return Ok(());
            }
            if attempt % 6 == 0 {
                step.processing(format!(
                    "[*] waiting for SSH on {}:{} ({attempt}/{attempts})",
                    target.ip, target.port
                ));
            }
            if attempt < attempts {
                tokio::time::sleep(self.config.ssh_poll_interval).await;
            }
        }
        Err(ReadyError::Timeout(attempts))
    }
}
