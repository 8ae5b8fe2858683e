//! Serde helpers for `pvesh --output-format json`, which prints booleans as
//! the numbers 0 and 1.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serializer};

pub mod int_bool {
    use super::*;

    pub fn serialize<S: Serializer>(value: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(u8::from(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Flag {
            Int(i64),
            Bool(bool),
        }
        Ok(match Flag::deserialize(d)? {
            Flag::Int(n) => n != 0,
            Flag::Bool(b) => b,
        })
    }
}

/// A count Proxmox prints as a number that need not be whole: an LXC's
/// `maxcpu` in `/cluster/resources` is its `cpulimit` (`0.5`), read as
/// whole vCPUs rounded up — what the container may occupy
/// (pve-manager `PVE/API2Tools.pm`, `extract_vm_stats`).
pub mod cpu_count {
    use super::*;

    pub fn serialize<S: Serializer>(value: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(*value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let n = f64::deserialize(d)?;
        if !n.is_finite() || n < 0.0 {
            return Err(serde::de::Error::custom(format!("{n} is not a CPU count")));
        }
        // Saturating: no real count comes near u32::MAX.
        Ok(n.ceil().min(f64::from(u32::MAX)) as u32)
    }
}

/// A field Proxmox prints as a string or as a number depending on where it
/// came from (`cpuinfo.mhz` is `"2400.000"` from `/proc/cpuinfo`'s line and
/// the number 0 when there is none: pve-common `PVE/ProcFSTools.pm`,
/// `read_cpuinfo`): kept as text.
pub mod text_or_number {
    use super::*;

    pub fn serialize<S: Serializer>(value: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => s,
            serde_json::Value::Null => String::new(),
            other => other.to_string(),
        })
    }
}

/// Entries already reported unreadable, so that a listing read every second
/// logs each one once, not once a second.
static SKIPPED: std::sync::Mutex<Option<std::collections::BTreeSet<String>>> =
    std::sync::Mutex::new(None);

/// A listing decoded entry by entry: one entry Proxmox prints in a shape
/// pvedeck does not read (a field of another type, from a newer Proxmox or
/// a plugin) is skipped and logged once, and the rest are listed. `Err`
/// only when the answer is not a list at all.
pub fn listing<T: DeserializeOwned>(
    what: &str,
    value: serde_json::Value,
) -> Result<Vec<T>, String> {
    let serde_json::Value::Array(entries) = value else {
        return Err(format!("expected a list, got {}", kind(&value)));
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let id = entry
            .get("id")
            .map(|id| id.to_string())
            .unwrap_or_else(|| entry.to_string().chars().take(80).collect());
        match serde_json::from_value::<T>(entry) {
            Ok(item) => out.push(item),
            Err(e) => {
                let key = format!("{what} {id}: {e}");
                let first = pvedeck_support::sync::lock(&SKIPPED)
                    .get_or_insert_with(Default::default)
                    .insert(key.clone());
                if first {
                    tracing::warn!("skipped an entry pvedeck cannot read: {key}");
                }
            }
        }
    }
    Ok(out)
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{NodeResource, NodeStatus, VmResource};

    #[test]
    fn a_container_with_a_fractional_cpu_limit_is_listed() {
        let vms: Vec<VmResource> = listing(
            "vms",
            json!([
                {"id":"lxc/200","vmid":200,"node":"pve1","type":"lxc","status":"running","maxcpu":0.5},
                {"id":"qemu/101","vmid":101,"node":"pve1","type":"qemu","status":"running","maxcpu":2}
            ]),
        )
        .unwrap();
        assert_eq!(vms.len(), 2);
        assert_eq!(vms[0].maxcpu, 1, "0.5 CPU occupies one vCPU");
        assert_eq!(vms[1].maxcpu, 2);
    }

    #[test]
    fn an_odd_entry_is_skipped_and_the_rest_listed() {
        let vms: Vec<VmResource> = listing(
            "vms",
            json!([
                {"id":"qemu/101","vmid":101,"node":"pve1","type":"qemu","status":"running"},
                {"id":"qemu/102","vmid":"one-hundred-two","node":"pve1","type":"qemu","status":"running"},
                {"id":"qemu/103","vmid":103,"node":"pve1","type":"qemu","status":"stopped","maxmem":"lots"}
            ]),
        )
        .unwrap();
        assert_eq!(vms.iter().map(|v| v.vmid).collect::<Vec<_>>(), [101]);
        let nodes: Vec<NodeResource> = listing(
            "nodes",
            json!([{"id":"node/a","node":"a","type":"node","status":"online","maxcpu":"x"},
                   {"id":"node/b","node":"b","type":"node","status":"online","maxcpu":4}]),
        )
        .unwrap();
        assert_eq!(nodes.len(), 1);
        assert!(listing::<VmResource>("vms", json!({"data": []})).is_err());
    }

    #[test]
    fn cpu_mhz_is_read_as_a_string_or_a_number() {
        for (mhz, want) in [
            (json!("2400.000"), "2400.000"),
            (json!(0), "0"),
            (json!(3000.5), "3000.5"),
        ] {
            let status: NodeStatus =
                serde_json::from_value(json!({"cpuinfo": {"cpus": 4, "mhz": mhz}})).unwrap();
            assert_eq!(status.cpuinfo.mhz, want);
        }
    }
}
