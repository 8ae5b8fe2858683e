//! The IP filter of the VMs pvedeck makes (docs/security.md#addresses-cannot-be-taken):
//! `firewall=1` on `net0`, the ipset `ipfilter-net0` holding the VM's
//! cloud-init address, and the VM's firewall options that make
//! pve-firewall drop whatever the VM sends from any other address — all
//! set before the VM's first boot, so it never runs unfiltered.

use std::net::Ipv4Addr;

use pvedeck_config::IpFilterMode;
use pvedeck_proxmox::IpFilter;

use super::failure::{Cleanup, Failure, failed};
use super::report::{Out, Step};
use super::{Engine, one_line};

/// `net0` as pvedeck makes it: on the bridge, and through the firewall
/// when the VM gets the filter (qemu-server `PVE/QemuServer/Network.pm`:
/// only a NIC with `firewall=1` passes the firewall bridge).
pub(super) fn net0(filtered: bool) -> String {
    if filtered {
        "virtio,bridge=vmbr0,firewall=1".to_string()
    } else {
        "virtio,bridge=vmbr0".to_string()
    }
}

impl Engine {
    /// Whether the VM being made gets the filter (`VM_IP_FILTER`); when
    /// it does not, `step` says why. `auto` reads the datacenter firewall
    /// now: an admin who enables it needs no restart. A datacenter
    /// firewall that cannot be read gets the filter all the same: set
    /// where the firewall is off it changes nothing, and where it is on it
    /// is what was wanted.
    pub(super) async fn ip_filter_wanted(&self, step: &Step<'_>) -> bool {
        match self.config.vm_ip_filter {
            IpFilterMode::Off => false,
            IpFilterMode::On => true,
            IpFilterMode::Auto => match self.proxmox.cluster_firewall().await {
                Ok(true) => true,
                Ok(false) => {
                    step.processing(
                        "[*] no IP filter: the datacenter firewall is disabled (VM_IP_FILTER=auto)",
                    );
                    false
                }
                Err(e) => {
                    step.processing(format!(
                        "[*] the datacenter firewall's options cannot be read ({}): the IP filter \
                         is set anyway",
                        one_line(&e.message())
                    ));
                    true
                }
            },
        }
    }

    /// `<stage> > setting IP filter`: after the VM's configuration, before
    /// its first start. A failure destroys the half-made VM
    /// (docs/provisioning.md#failure-contract).
    pub(super) async fn ip_filter_step(
        &self,
        out: Out<'_>,
        stage: &str,
        (node, vmid): (&str, u32),
        ip: Ipv4Addr,
    ) -> Result<(), Failure> {
        let step = Step::new(out, Some(stage), "setting IP filter");
        step.processing(format!(
            "[*] firewall on net0: VM {vmid} may send only from {ip}"
        ));
        self.proxmox
            .ip_filter(node, vmid, IpFilter::Only(ip))
            .await
            .map_err(failed(
                &step,
                "failed to set the IP filter",
                Cleanup::Destroy,
            ))?;
        step.success(&format!(
            "[+] IP filter set: net0 sends only from {ip} (ipset {})",
            pvedeck_proxmox::firewall::IPSET
        ));
        Ok(())
    }
}
