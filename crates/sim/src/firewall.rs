//! The Proxmox firewall's API as the simulated cluster answers it: the
//! datacenter options (`/cluster/firewall/options`), a VM's options and
//! ipsets (`/nodes/<node>/qemu/<vmid>/firewall/…`), with pve-firewall's
//! checks and messages (`src/PVE/API2/Firewall/{Cluster,VM,IPSet}.pm`).
//! What the rules then do to a guest's packets is `ClusterState::sends_from`;
//! a guest that claims another VM's address is staged by `stage_claim`.

use std::net::Ipv4Addr;

use pvedeck_proxmox::PveError;
use pvedeck_proxmox::firewall::{self, IpFilter};
use serde_json::{Value, json};

use crate::state::{Claim, ClusterState, Inside, Ipset, IpsetEntry, SimVm, VmFirewall};
use crate::{SimCluster, timing};

/// `pvesh`'s exit code for a failed call.
const EXIT: i32 = 255;

fn param_error(param: &str, why: &str) -> PveError {
    PveError::command(
        "pvesh",
        format!("400 Parameter verification failed.\n{param}: {why}"),
        EXIT,
    )
}

/// pve-firewall's `$vm_option_properties` (those simulated).
const VM_OPTIONS: [&str; 10] = [
    "enable",
    "ipfilter",
    "macfilter",
    "dhcp",
    "ndp",
    "radv",
    "policy_in",
    "policy_out",
    "log_level_in",
    "log_level_out",
];

/// pve-firewall's `$vm_option_properties`: booleans, and the two policies.
fn check_vm_option(key: &str, value: &str) -> Result<(), PveError> {
    let ok = match key {
        "enable" | "ipfilter" | "macfilter" | "dhcp" | "ndp" | "radv" => {
            matches!(value, "0" | "1")
        }
        "policy_in" | "policy_out" => matches!(value, "ACCEPT" | "REJECT" | "DROP"),
        "log_level_in" | "log_level_out" => matches!(
            value,
            "emerg" | "alert" | "crit" | "err" | "warning" | "notice" | "info" | "debug" | "nolog"
        ),
        _ => {
            return Err(param_error(
                key,
                "property is not defined in schema and the schema does not allow additional properties",
            ));
        }
    };
    if ok {
        Ok(())
    } else {
        Err(param_error(key, &format!("value '{value}' is not valid")))
    }
}

/// `ipset-name`: `[A-Za-z][A-Za-z0-9\-\_]+`, 2 to 64 characters.
fn check_ipset_name(name: &str) -> Result<(), PveError> {
    let mut chars = name.chars();
    let fits = (2..=64).contains(&name.len())
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if fits {
        Ok(())
    } else {
        Err(param_error(
            "name",
            "value does not match the regex pattern",
        ))
    }
}

/// An IPv4 address or network as pve-firewall keeps it (`clean_cidr`,
/// `parse_ip_or_cidr`: `/32` dropped); IPv6 is not simulated.
fn clean_cidr(raw: &str) -> Result<String, PveError> {
    let (addr, bits) = match raw.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (raw, None),
    };
    let bad = || {
        param_error(
            "cidr",
            &format!("value '{raw}' does not look like a valid CIDR network"),
        )
    };
    addr.parse::<Ipv4Addr>().map_err(|_| bad())?;
    match bits.map(str::parse::<u8>) {
        None | Some(Ok(32)) => Ok(addr.to_string()),
        Some(Ok(0)) => Err(param_error(
            "cidr",
            "a zero prefix is not allowed in ipset entries",
        )),
        Some(Ok(n)) if n < 32 => Ok(format!("{addr}/{n}")),
        _ => Err(bad()),
    }
}

/// The VM whose firewall a path names: the API proxies to `node`
/// (`proxyto => 'node'`), which must answer; the file itself is
/// cluster-wide. ≠ Proxmox writes a `.fw` file for any id; the simulator
/// keeps it with the VM, so the VM must exist.
fn vm_fw<'a>(
    s: &'a mut ClusterState,
    node: &str,
    vmid: u32,
    command: &str,
) -> Result<&'a mut VmFirewall, PveError> {
    s.online_node(node, command)?;
    s.vms
        .get_mut(&vmid)
        .map(|vm| &mut vm.firewall)
        .ok_or_else(|| {
            PveError::command(
                command,
                format!("Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"),
                EXIT,
            )
        })
}

fn no_such_ipset(name: &str) -> PveError {
    PveError::command("pvesh", format!("no such IPSet '{name}'"), EXIT)
}

/// A fresh identity for a claim, as a guest makes one (`Inside::boot`).
fn forged_identity(vmid: u32) -> (String, String) {
    let mut inside = Inside::default();
    inside.boot(vmid);
    (inside.machine_id, inside.host_key)
}

/// Options as pve-firewall answers them: numbers as numbers.
fn options_json(options: &std::collections::BTreeMap<String, String>) -> Value {
    Value::Object(
        options
            .iter()
            .map(|(k, v)| {
                let value = v.parse::<u64>().map_or_else(|_| json!(v), |n| json!(n));
                (k.clone(), value)
            })
            .collect(),
    )
}

/// A `set_options` call on `to`: `delete` removes the options it names,
/// every other option is set.
fn apply_options(
    to: &mut std::collections::BTreeMap<String, String>,
    options: &[(String, String)],
) {
    for (key, value) in options {
        if key == "delete" {
            for gone in value.split([',', ';', ' ']) {
                to.remove(gone);
            }
        } else {
            to.insert(key.clone(), value.clone());
        }
    }
}

impl SimCluster {
    /// A firewall call: recorded, faults applied (op `firewall`), a read's time.
    async fn fw_call(&self, vmid: Option<u32>, command: &str) -> Result<(), PveError> {
        self.strike("firewall", vmid, command).await?;
        self.clock.sleep(timing::READ).await;
        Ok(())
    }

    /// `GET /cluster/firewall/options`.
    pub async fn fw_cluster_options(&self) -> Result<Value, PveError> {
        self.fw_call(None, "pvesh get /cluster/firewall/options")
            .await?;
        Ok(self.read(|s| options_json(&s.firewall)))
    }

    /// `PUT /cluster/firewall/options`: `enable`, `ebtables`, the policies.
    pub async fn fw_set_cluster_options(
        &self,
        options: &[(String, String)],
    ) -> Result<(), PveError> {
        let shown: Vec<String> = options.iter().map(|(k, v)| format!("--{k} {v}")).collect();
        let command = format!("pvesh set /cluster/firewall/options {}", shown.join(" "));
        self.fw_call(None, &command).await?;
        for (key, value) in options {
            let ok = match key.as_str() {
                "enable" => value.parse::<u64>().is_ok(),
                "ebtables" => matches!(value.as_str(), "0" | "1"),
                "policy_in" | "policy_out" | "policy_forward" => {
                    matches!(value.as_str(), "ACCEPT" | "REJECT" | "DROP")
                }
                "delete" => true,
                _ => false,
            };
            if !ok {
                return Err(param_error(key, &format!("value '{value}' is not valid")));
            }
        }
        self.change(|s| apply_options(&mut s.firewall, options));
        Ok(())
    }

    /// `GET …/firewall/options`.
    pub async fn fw_vm_options(&self, node: &str, vmid: u32) -> Result<Value, PveError> {
        let command = format!("pvesh get /nodes/{node}/qemu/{vmid}/firewall/options");
        self.fw_call(Some(vmid), &command).await?;
        self.change(|s| {
            let fw = vm_fw(s, node, vmid, &command)?;
            Ok(options_json(&fw.options))
        })
    }

    /// `PUT …/firewall/options` (`set_options`), `delete` included.
    pub async fn fw_set_vm_options(
        &self,
        node: &str,
        vmid: u32,
        options: &[(String, String)],
    ) -> Result<(), PveError> {
        let shown: Vec<String> = options.iter().map(|(k, v)| format!("--{k} {v}")).collect();
        let command = format!(
            "pvesh set /nodes/{node}/qemu/{vmid}/firewall/options {}",
            shown.join(" ")
        );
        self.fw_call(Some(vmid), &command).await?;
        for (key, value) in options {
            if key == "delete" {
                for gone in value.split([',', ';', ' ']).filter(|g| !g.is_empty()) {
                    if !VM_OPTIONS.contains(&gone) {
                        return Err(param_error("delete", &format!("no such option '{gone}'")));
                    }
                }
            } else {
                check_vm_option(key, value)?;
            }
        }
        self.change(|s| {
            let fw = vm_fw(s, node, vmid, &command)?;
            apply_options(&mut fw.options, options);
            Ok(())
        })
    }

    /// `GET …/firewall/ipset`: `name`, `comment`, `digest` of each.
    pub async fn fw_ipsets(&self, node: &str, vmid: u32) -> Result<Value, PveError> {
        let command = format!("pvesh get /nodes/{node}/qemu/{vmid}/firewall/ipset");
        self.fw_call(Some(vmid), &command).await?;
        self.change(|s| {
            let fw = vm_fw(s, node, vmid, &command)?;
            Ok(Value::Array(
                fw.ipsets
                    .iter()
                    .map(|(name, set)| {
                        let mut entry = json!({"name": name, "digest": digest(set)});
                        if let Some(c) = &set.comment {
                            entry["comment"] = json!(c);
                        }
                        entry
                    })
                    .collect(),
            ))
        })
    }

    /// `POST …/firewall/ipset` (`create_ipset`, without `rename`).
    pub async fn fw_create_ipset(
        &self,
        node: &str,
        vmid: u32,
        name: &str,
        comment: Option<&str>,
    ) -> Result<(), PveError> {
        let command =
            format!("pvesh create /nodes/{node}/qemu/{vmid}/firewall/ipset --name {name}");
        self.fw_call(Some(vmid), &command).await?;
        check_ipset_name(name)?;
        self.change(|s| {
            let fw = vm_fw(s, node, vmid, &command)?;
            if fw.ipsets.contains_key(name) {
                return Err(param_error(
                    "name",
                    &format!("IPSet '{name}' already exists"),
                ));
            }
            fw.ipsets.insert(
                name.to_string(),
                Ipset {
                    comment: comment.map(str::to_string),
                    entries: Vec::new(),
                },
            );
            Ok(())
        })
    }

    /// `DELETE …/firewall/ipset/<name>` (`delete_ipset`): refused while it
    /// has entries, unless `force`.
    pub async fn fw_delete_ipset(
        &self,
        node: &str,
        vmid: u32,
        name: &str,
        force: bool,
    ) -> Result<(), PveError> {
        let command = format!("pvesh delete /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}");
        self.fw_call(Some(vmid), &command).await?;
        self.change(|s| {
            let fw = vm_fw(s, node, vmid, &command)?;
            let set = fw.ipsets.get(name).ok_or_else(|| no_such_ipset(name))?;
            if !set.entries.is_empty() && !force {
                return Err(PveError::command(
                    &command,
                    format!("IPSet '{name}' is not empty"),
                    EXIT,
                ));
            }
            fw.ipsets.remove(name);
            Ok(())
        })
    }

    /// `GET …/firewall/ipset/<name>`: its entries.
    pub async fn fw_ipset(&self, node: &str, vmid: u32, name: &str) -> Result<Value, PveError> {
        let command = format!("pvesh get /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}");
        self.fw_call(Some(vmid), &command).await?;
        self.change(|s| {
            let fw = vm_fw(s, node, vmid, &command)?;
            let set = fw.ipsets.get(name).ok_or_else(|| no_such_ipset(name))?;
            Ok(Value::Array(
                set.entries
                    .iter()
                    .map(|e| {
                        let mut entry = json!({"cidr": e.cidr, "digest": digest(set)});
                        if e.nomatch {
                            entry["nomatch"] = json!(1);
                        }
                        entry
                    })
                    .collect(),
            ))
        })
    }

    /// `POST …/firewall/ipset/<name>` (`create_ip`): added first.
    pub async fn fw_add_ip(
        &self,
        node: &str,
        vmid: u32,
        name: &str,
        cidr: &str,
    ) -> Result<(), PveError> {
        let command =
            format!("pvesh create /nodes/{node}/qemu/{vmid}/firewall/ipset/{name} --cidr {cidr}");
        self.fw_call(Some(vmid), &command).await?;
        let cidr = clean_cidr(cidr)?;
        self.change(|s| {
            let fw = vm_fw(s, node, vmid, &command)?;
            let set = fw.ipsets.get_mut(name).ok_or_else(|| no_such_ipset(name))?;
            if set.entries.iter().any(|e| e.cidr == cidr) {
                return Err(param_error(
                    "cidr",
                    &format!("address '{cidr}' already exists"),
                ));
            }
            set.entries.insert(
                0,
                IpsetEntry {
                    cidr,
                    nomatch: false,
                },
            );
            Ok(())
        })
    }

    /// `DELETE …/firewall/ipset/<name>/<cidr>` (`remove_ip`).
    pub async fn fw_remove_ip(
        &self,
        node: &str,
        vmid: u32,
        name: &str,
        cidr: &str,
    ) -> Result<(), PveError> {
        let command =
            format!("pvesh delete /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}");
        self.fw_call(Some(vmid), &command).await?;
        let cidr = clean_cidr(cidr)?;
        self.change(|s| {
            let fw = vm_fw(s, node, vmid, &command)?;
            let set = fw.ipsets.get_mut(name).ok_or_else(|| no_such_ipset(name))?;
            set.entries.retain(|e| e.cidr != cidr);
            Ok(())
        })
    }

    /// The port's `ip_filter`, made of the calls a backend makes.
    pub(crate) async fn sim_ip_filter(
        &self,
        node: &str,
        vmid: u32,
        filter: IpFilter,
    ) -> Result<(), PveError> {
        let listed = self.fw_ipsets(node, vmid).await?;
        if firewall::has_ipset(&listed) {
            self.fw_delete_ipset(node, vmid, firewall::IPSET, true)
                .await?;
        }
        if let IpFilter::Only(ip) = filter {
            self.fw_create_ipset(node, vmid, firewall::IPSET, Some(firewall::IPSET_COMMENT))
                .await?;
            self.fw_add_ip(node, vmid, firewall::IPSET, &ip.to_string())
                .await?;
        }
        let options: Vec<(String, String)> = firewall::options(filter)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.fw_set_vm_options(node, vmid, &options).await
    }

    /// Stages a hostile guest: VM `vmid` answers for `ip` too, with an
    /// identity of its own making. Whether that reaches the wire is the
    /// firewall's to say (`ClusterState::sends_from`).
    pub fn stage_claim(&self, vmid: u32, ip: Ipv4Addr) -> Result<(), PveError> {
        let (machine_id, host_key) = forged_identity(vmid);
        self.change(|s| {
            let vm: &mut SimVm = s.vms.get_mut(&vmid).ok_or_else(|| {
                PveError::command("claim", format!("VM {vmid} does not exist"), 2)
            })?;
            vm.inside.claims.retain(|c| c.ip != ip);
            vm.inside.claims.push(Claim {
                ip,
                machine_id,
                host_key,
                received: Vec::new(),
            });
            Ok(())
        })
    }
}

/// A digest of an ipset, as the API hands one out with every read.
fn digest(set: &Ipset) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for e in &set.entries {
        e.cidr.hash(&mut h);
        e.nomatch.hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::cidr_holds;

    #[test]
    fn cidrs_are_kept_as_pve_firewall_keeps_them() {
        assert_eq!(clean_cidr("192.168.0.106").unwrap(), "192.168.0.106");
        assert_eq!(clean_cidr("192.168.0.106/32").unwrap(), "192.168.0.106");
        assert_eq!(clean_cidr("192.168.0.0/24").unwrap(), "192.168.0.0/24");
        assert!(
            clean_cidr("10.0.0.0/0")
                .unwrap_err()
                .message()
                .contains("zero prefix")
        );
        assert!(clean_cidr("nonsense").is_err());
        assert!(cidr_holds("192.168.0.0/24", Ipv4Addr::new(192, 168, 0, 9)));
        assert!(!cidr_holds(
            "192.168.0.106",
            Ipv4Addr::new(192, 168, 0, 107)
        ));
    }

    #[test]
    fn vm_options_are_checked_as_the_schema_says() {
        assert!(check_vm_option("policy_in", "ACCEPT").is_ok());
        assert!(check_vm_option("policy_in", "maybe").is_err());
        assert!(check_vm_option("ipfilter", "2").is_err());
        let e = check_vm_option("colour", "1").unwrap_err().message();
        assert!(
            e.starts_with("400 Parameter verification failed.\ncolour: "),
            "{e}"
        );
        assert!(check_ipset_name("ipfilter-net0").is_ok());
        assert!(check_ipset_name("0net").is_err());
    }
}
