//! The Proxmox firewall's IP filter, as pvedeck uses it to keep a VM from
//! sending from an address that is not its own (docs/security.md#addresses-cannot-be-taken).
//!
//! pve-firewall (`src/PVE/Firewall.pm`) drops what a VM's NIC sends from
//! an address outside the ipset `ipfilter-net<N>` when all of these hold:
//! the datacenter firewall is enabled (`compile` returns no rules at all
//! otherwise), the VM's firewall options say `enable: 1`
//! (`compile_iptables_filter`, `compile_ebtables_filter` skip the VM
//! otherwise), the NIC has `firewall=1` (its traffic passes the firewall
//! bridge only then), and the VM has `ipfilter: 1` or an `ipfilter-net<N>`
//! ipset (`generate_tap_rules_direction`). For a VM, unlike a container,
//! nothing fills that ipset from the configuration: the implicit one
//! `ipfilter: 1` brings holds only the IPv6 link-local address of the
//! NIC's MAC (`compile_ipsets`), so pvedeck adds the cloud-init address
//! itself. The same entries make the ARP filter (`compile_ebtables_filter`),
//! so the VM cannot answer ARP for another address either.

use std::net::Ipv4Addr;

use serde_json::Value;

/// The ipset pve-firewall reads for `net0` (`compute_ipfilter_ipset_name`).
pub const IPSET: &str = "ipfilter-net0";

/// What the ipset's comment says, for whoever finds it in the Proxmox UI.
pub const IPSET_COMMENT: &str = "pvedeck: the one address net0 may send from";

/// What pvedeck asks of a VM's firewall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpFilter {
    /// `net0` sends only from this address.
    Only(Ipv4Addr),
    /// Nothing address-specific: the ipset gone and the VM's firewall off.
    /// A template's: each clone gets its own address (a template's config,
    /// firewall file included, is copied to its clones: qemu-server
    /// `PVE/API2/Qemu.pm` `clone_vm`, `clone_vmfw_conf`).
    Lifted,
}

/// The VM firewall options of an IP filter (`$vm_option_properties`):
/// `enable` and `ipfilter` turn it on; the policies are set to `ACCEPT`
/// both ways because `policy_in` defaults to `DROP` once the VM's
/// firewall is enabled (`generate_tap_rules_direction`), which would shut
/// out everything, pvedeck's own SSH included: only spoofing is stopped.
pub fn options(filter: IpFilter) -> Vec<(&'static str, &'static str)> {
    match filter {
        IpFilter::Only(_) => vec![
            ("enable", "1"),
            ("ipfilter", "1"),
            ("policy_in", "ACCEPT"),
            ("policy_out", "ACCEPT"),
        ],
        IpFilter::Lifted => vec![("enable", "0")],
    }
}

/// Whether `/cluster/firewall/options` says the datacenter firewall is
/// enabled. `enable` is a number (pve-firewall `parse_clusterfw_option`:
/// a timestamp counts while the GUI's 60 s rollback runs, and reads 0
/// after it), absent when never set (default 0); `pvesh` and the API give
/// it as JSON, possibly as a string.
pub fn cluster_enabled(options: &Value) -> bool {
    match options.get("enable") {
        Some(Value::Number(n)) => n.as_f64().is_some_and(|n| n >= 1.0),
        Some(Value::String(s)) => s.trim().parse::<u64>().is_ok_and(|n| n >= 1),
        Some(Value::Bool(b)) => *b,
        _ => false,
    }
}

/// Whether a VM's ipset list (`…/firewall/ipset`) has pvedeck's ipset.
pub fn has_ipset(list: &Value) -> bool {
    list.as_array().is_some_and(|sets| {
        sets.iter()
            .any(|set| set.get("name").and_then(Value::as_str) == Some(IPSET))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_datacenter_firewall_is_on_only_when_enable_says_so() {
        assert!(!cluster_enabled(&json!({})), "default 0");
        assert!(!cluster_enabled(&json!({"enable": 0})));
        assert!(cluster_enabled(&json!({"enable": 1})));
        assert!(cluster_enabled(&json!({"enable": "1"})));
        // The GUI's enable with rollback: a timestamp while it runs.
        assert!(cluster_enabled(&json!({"enable": 1_767_000_000})));
    }

    #[test]
    fn an_ipset_list_names_its_sets() {
        assert!(has_ipset(
            &json!([{"name": "ipfilter-net0", "digest": "x"}])
        ));
        assert!(!has_ipset(&json!([{"name": "ipfilter-net1"}])));
        assert!(!has_ipset(&json!(null)));
    }

    #[test]
    fn a_filter_opens_both_policies_and_a_lifted_one_turns_the_firewall_off() {
        let on = options(IpFilter::Only(Ipv4Addr::new(192, 168, 0, 106)));
        assert!(on.contains(&("policy_in", "ACCEPT")), "{on:?}");
        assert!(on.contains(&("ipfilter", "1")), "{on:?}");
        assert_eq!(options(IpFilter::Lifted), [("enable", "0")]);
    }
}
