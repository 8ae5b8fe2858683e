//! A VM's identity, read through the guest agent (a channel through the
//! hypervisor, not the network): its machine-id and SSH host key. A VM that
//! shares either with another VM or template pvedeck made — a clone of a
//! template whose identity was not cleaned — is not called ready.

use std::net::Ipv4Addr;

use base64::Engine as _;
use pvedeck_proxmox::{GuestCommandFailed, PveError, known_hosts};
use pvedeck_support::clock::now_ms;
use sha2::Digest;

use super::Engine;
use crate::store::StoreError;

/// Why a VM's identity could not be read, or is not its own.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot record the host key: {0}")]
    Record(std::io::Error),
    /// The guest agent could not be asked, or the snapshot not read.
    #[error(transparent)]
    Proxmox(#[from] PveError),
    #[error(transparent)]
    Command(#[from] GuestCommandFailed),
    #[error("the guest reported no usable identity (machine-id '{machine_id}', host key '{line}')")]
    Unusable { machine_id: String, line: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "VM {vmid} has the same {what} as template {name} (VM {other}): it was cloned from a \
         template whose identity was not cleaned"
    )]
    SharedWithTemplate {
        vmid: u32,
        what: &'static str,
        name: String,
        other: u32,
    },
    #[error("VM {vmid} has the same {what} as VM {other} ({name}): two guests must not share it")]
    SharedWithVm {
        vmid: u32,
        what: &'static str,
        name: String,
        other: u32,
    },
}

/// What makes a guest itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub machine_id: String,
    /// `ssh-ed25519 AAAA…` (type and key, no comment).
    pub host_key: String,
}

impl Identity {
    /// `SHA256:…`, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> Option<String> {
        fingerprint(&self.host_key)
    }
}

pub fn fingerprint(host_key: &str) -> Option<String> {
    let blob = host_key.split_whitespace().nth(1)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .ok()?;
    let digest = sha2::Sha256::digest(&bytes);
    Some(format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest)
    ))
}

/// Which part two identities share, if any.
fn shared(a: &Identity, b_machine_id: &str, b_host_key: &str) -> Option<&'static str> {
    if !a.machine_id.is_empty() && a.machine_id == b_machine_id {
        Some("machine-id")
    } else if !a.host_key.is_empty() && a.host_key == b_host_key {
        Some("SSH host key")
    } else {
        None
    }
}

impl Engine {
    /// pvedeck's known-hosts file.
    pub(super) fn known_hosts(&self) -> std::path::PathBuf {
        self.config.data_dir.join("known_hosts")
    }

    fn host_token(&self, ip: Ipv4Addr) -> String {
        known_hosts::host_token(ip, self.config.ssh_port)
    }

    /// A new VM at `ip` (or none): the key recorded for the old one no
    /// longer applies. A failure is logged: the next contact then fails
    /// closed ("Host key verification failed"), it does not trust blindly.
    pub(super) fn forget_host(&self, ip: Ipv4Addr) {
        if let Err(e) = known_hosts::forget(&self.known_hosts(), &self.host_token(ip)) {
            tracing::warn!(%ip, "known_hosts: {e}");
        }
    }

    /// The fingerprint of the key SSH requires at `ip`, once recorded.
    pub(super) fn pinned_fingerprint(&self, ip: Ipv4Addr) -> Option<String> {
        known_hosts::lookup(&self.known_hosts(), &self.host_token(ip))
            .and_then(|key| fingerprint(&key))
    }

    /// The key a VM proved through its guest agent: required of whoever
    /// answers at `ip` from now on.
    pub(super) fn pin_host(&self, ip: Ipv4Addr, host_key: &str) -> Result<(), IdentityError> {
        known_hosts::pin(&self.known_hosts(), &self.host_token(ip), host_key)
            .map_err(IdentityError::Record)
    }

    /// The identity of a VM without a guest agent, as its first SSH contact
    /// told it: the machine-id the readiness probe printed and the host key
    /// SSH recorded. Claimed like an agent's; the key's fingerprint.
    pub(super) async fn first_contact_identity(
        &self,
        vmid: u32,
        ip: Ipv4Addr,
        machine_id: Option<String>,
    ) -> Result<Option<String>, IdentityError> {
        let host_key = known_hosts::lookup(&self.known_hosts(), &self.host_token(ip));
        if machine_id.is_none() && host_key.is_none() {
            return Ok(None);
        }
        let identity = Identity {
            machine_id: machine_id.unwrap_or_default(),
            host_key: host_key.unwrap_or_default(),
        };
        self.claim_identity(vmid, &identity).await?;
        Ok(identity.fingerprint())
    }

    /// The machine-id and ed25519 host key, through the guest agent.
    pub(super) async fn read_identity(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<Identity, IdentityError> {
        let read = |path: &'static str| async move {
            let argv = vec!["cat".to_string(), path.to_string()];
            let out = self
                .proxmox
                .agent_exec(node, vmid, &argv, false)
                .await?
                .output(&format!("cat {path}"))?;
            Ok::<_, IdentityError>(out.trim().to_string())
        };
        let machine_id = read("/etc/machine-id").await?;
        let line = read("/etc/ssh/ssh_host_ed25519_key.pub").await?;
        // `<type> <key> [comment]`: the comment is the guest's host name.
        let host_key = line
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        if machine_id.is_empty() || fingerprint(&host_key).is_none() {
            return Err(IdentityError::Unusable { machine_id, line });
        }
        Ok(Identity {
            machine_id,
            host_key,
        })
    }

    /// Refuses an identity another VM or template pvedeck made (one that
    /// still exists) has; else records it for `vmid`. The refusal names both.
    pub(super) async fn claim_identity(
        &self,
        vmid: u32,
        identity: &Identity,
    ) -> Result<(), IdentityError> {
        let known = self.jobs.identities(&self.config.cluster).await?;
        let sharing: Vec<(u32, &'static str)> = known
            .iter()
            .filter(|(other, ..)| *other != vmid)
            .filter_map(|(other, machine_id, host_key)| {
                shared(identity, machine_id, host_key).map(|what| (*other, what))
            })
            .collect();
        if !sharing.is_empty() {
            // Only a match asks which VMs still exist: a fresh read, so that
            // one destroyed since is no conflict.
            let view = self.cluster.read().await?;
            for (other, what) in sharing {
                let Some(vm) = view.snapshot.vms.iter().find(|vm| vm.vmid == other) else {
                    continue;
                };
                let name = vm.name.clone().unwrap_or_default();
                return Err(if vm.template {
                    IdentityError::SharedWithTemplate {
                        vmid,
                        what,
                        name,
                        other,
                    }
                } else {
                    IdentityError::SharedWithVm {
                        vmid,
                        what,
                        name,
                        other,
                    }
                });
            }
        }
        Ok(self.jobs.record_identity(
            &self.config.cluster,
            vmid,
            &identity.machine_id,
            &identity.host_key,
            now_ms(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_sha256_of_the_key_blob_as_ssh_keygen_prints_them() {
        // What `ssh-keygen -lf` printed for this key.
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOw2TvqgEE1mMDlRYVIf6mF+Zqy4DPzTIxfGaezAA4aB";
        assert_eq!(
            fingerprint(key).as_deref(),
            Some("SHA256:Wz4rar7AS9FYAb9Pt0hkFweHI0wTxtdVHhvUPJbRqBs")
        );
        assert_eq!(fingerprint("ssh-ed25519 not*base64"), None);
        assert_eq!(fingerprint(""), None);
    }

    #[test]
    fn a_shared_machine_id_or_host_key_is_named() {
        let a = Identity {
            machine_id: "m1".into(),
            host_key: "ssh-ed25519 K1".into(),
        };
        assert_eq!(shared(&a, "m1", "other"), Some("machine-id"));
        assert_eq!(shared(&a, "m2", "ssh-ed25519 K1"), Some("SSH host key"));
        assert_eq!(shared(&a, "m2", "ssh-ed25519 K2"), None);
    }
}

/// Property tests: any host-key line a guest reports gets a fingerprint
/// or none, never a panic; a real one gets `ssh-keygen -l`'s.
#[cfg(test)]
mod fuzz {
    use base64::Engine as _;
    use proptest::prelude::*;

    use super::*;
    use pvedeck_testkit::{config, output};

    const SEEDS: &[&str] = &[
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl root@web1\n",
        "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY=",
    ];

    proptest! {
        #![proptest_config(config(3000))]

        #[test]
        fn any_host_key_line_has_a_fingerprint_or_none(line in output(SEEDS)) {
            if let Some(print) = fingerprint(&line) {
                prop_assert!(print.starts_with("SHA256:") && print.len() == 50, "{}", print);
            }
        }

        #[test]
        fn a_key_blob_gets_its_sha256(
            kind in "[a-z0-9-]{1,20}",
            blob in prop::collection::vec(any::<u8>(), 1..120),
            comment in "( [^\\s]{1,20}){0,2}",
        ) {
            let b64 = base64::engine::general_purpose::STANDARD;
            let line = format!("{kind} {}{comment}", b64.encode(&blob));
            let expected = base64::engine::general_purpose::STANDARD_NO_PAD
                .encode(sha2::Sha256::digest(&blob));
            prop_assert_eq!(fingerprint(&line), Some(format!("SHA256:{expected}")));
        }
    }
}
