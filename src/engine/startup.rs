//! What an admin is told when pvedeck starts: settings that put tenants at
//! risk against the cluster as it is (docs/security.md#vm-user-passwords).
//! Each note is one line, printed before pvedeck says it listens.

use std::time::Duration;

use pvedeck_config::{BackendKind, IpFilterMode, RootPassword};

use super::Engine;

/// How long start-up waits to read the datacenter firewall: a Proxmox
/// that does not answer should not hold the server for a command timeout.
const FIREWALL_READ: Duration = Duration::from_secs(10);

/// How serious a start-up note is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Printed to standard error as `WARNING: …` and logged as a warning.
    Warning,
    /// Logged only.
    Note,
}

impl Engine {
    /// The start-up notes, in the order they are printed.
    pub async fn startup_notes(&self) -> Vec<(Level, String)> {
        let mut notes = Vec::new();
        if let Some(risk) = self.shared_root_password() {
            notes.push((Level::Warning, risk));
        }
        if let Some((level, note)) = self.ip_filter_note().await {
            // The simulated cluster risks nothing: its notes are logged only.
            let level = if self.config.backend == BackendKind::Sim {
                Level::Note
            } else {
                level
            };
            notes.push((level, note));
        }
        notes
    }

    /// What `VM_IP_FILTER` does on this cluster, and what to change when
    /// the VMs are not kept from taking each other's addresses
    /// (docs/security.md#addresses-cannot-be-taken).
    async fn ip_filter_note(&self) -> Option<(Level, String)> {
        let mode = self.config.vm_ip_filter;
        if mode == IpFilterMode::Off {
            return Some((
                Level::Note,
                "VM_IP_FILTER=off: the VMs pvedeck makes get no IP filter; a VM can send from \
                 another VM's address"
                    .to_string(),
            ));
        }
        let read = tokio::time::timeout(FIREWALL_READ, self.proxmox.cluster_firewall()).await;
        let enabled = match read {
            Ok(Ok(enabled)) => enabled,
            Ok(Err(e)) => {
                return Some((
                    Level::Warning,
                    format!(
                        "VM_IP_FILTER={}: the datacenter firewall's options cannot be read ({}); \
                         each VM gets the IP filter, which works only once the datacenter firewall \
                         is enabled",
                        mode.name(),
                        super::one_line(&e.message())
                    ),
                ));
            }
            Err(_) => {
                return Some((
                    Level::Warning,
                    format!(
                        "VM_IP_FILTER={}: the datacenter firewall's options did not come within \
                         {}s; each VM gets the IP filter, which works only once the datacenter \
                         firewall is enabled",
                        mode.name(),
                        FIREWALL_READ.as_secs()
                    ),
                ));
            }
        };
        Some(match (enabled, mode) {
            (true, _) => (
                Level::Note,
                format!(
                    "VM_IP_FILTER={}: the datacenter firewall is enabled; each VM pvedeck makes \
                     sends only from its own address",
                    mode.name()
                ),
            ),
            (false, IpFilterMode::On) => (
                Level::Warning,
                "VM_IP_FILTER=on, but the datacenter firewall is disabled: the IP filter pvedeck \
                 sets on each VM has no effect until it is enabled (Datacenter → Firewall → \
                 Options → Firewall)"
                    .to_string(),
            ),
            (false, _) => (
                Level::Warning,
                "VM_IP_FILTER=auto: the datacenter firewall is disabled, so the VMs pvedeck makes \
                 get no IP filter and a VM can take another's address, answering pvedeck's first \
                 SSH in its place. Enable it (Datacenter → Firewall → Options → Firewall), or set \
                 VM_IP_FILTER=on to set the filter now for when it is"
                    .to_string(),
            ),
        })
    }

    /// One root password for every VM while people sign in: every tenant
    /// reads its hash in its own VM's `/etc/shadow` and can crack it offline
    /// for root on everyone else's. Without sign-in everyone is an admin,
    /// as with go-pve-qemu, and there are no tenants to keep apart.
    fn shared_root_password(&self) -> Option<String> {
        let shared = matches!(self.config.vm_root_password, Some(RootPassword::Shared(_)));
        (shared && self.sign_in_configured()).then(|| {
            "VM_ROOT_PASSWORD is one password for every VM while users sign in: each of them \
             finds its hash in /etc/shadow of their own VM and can crack it offline for root on \
             everyone's. Set VM_ROOT_PASSWORD=random (each VM its own, shown once) or leave it \
             unset (root logs in with keys only)."
                .to_string()
        })
    }
}
