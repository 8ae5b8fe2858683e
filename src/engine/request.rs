//! Reading and checking request bodies before anything runs. Every refusal
//! names the field; a refused request reaches no `qm`.

use serde_json::{Map, Value};

use crate::config::{Config, Secret};
use crate::os::{self, Release};

use super::EngineError;

/// go-pve-qemu's sizes for a field left out (or sent as zero).
pub const DEFAULT_CPU: i64 = 2;
pub const DEFAULT_RAM_MB: i64 = 2048;
pub const DEFAULT_DISK_GB: u64 = 16;

/// A checked `POST /api/vm/install` body. Numbers keep the values asked for:
/// clamping them is a pipeline step of its own, with events (SPEC §3).
#[derive(Debug, Clone)]
pub struct InstallRequest {
    pub release: &'static Release,
    pub name: String,
    pub id: Option<u32>,
    pub node: Option<String>,
    pub cpu: i64,
    pub ram: i64,
    /// The `<n>` of `<n>G`.
    pub disk_gb: u64,
    pub user: String,
    pub passwd: Secret,
    pub pubkey: Option<String>,
}

fn bad(msg: impl Into<String>) -> EngineError {
    EngineError::BadRequest(msg.into())
}

/// The body as a JSON object.
pub fn object(body: &[u8]) -> Result<Map<String, Value>, EngineError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| bad(format!("request body is not valid JSON: {e}")))?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(bad("request body must be a JSON object")),
    }
}

/// A string field; `null` and absence are both "not given".
fn string(map: &Map<String, Value>, field: &str) -> Result<Option<String>, EngineError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(format!("{field} must be a string"))),
    }
}

/// An integer field (JSON numbers without a fraction).
pub fn integer(map: &Map<String, Value>, field: &str) -> Result<Option<i64>, EngineError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| bad(format!("{field} must be an integer"))),
        Some(_) => Err(bad(format!("{field} must be an integer"))),
    }
}

pub use app::rules::{is_dns_label, is_linux_user, is_openssh_key, parse_gigabytes};
use app::rules::{is_vm_name, messages};

impl InstallRequest {
    pub fn parse(body: &[u8], config: &Config) -> Result<InstallRequest, EngineError> {
        let map = object(body)?;

        let os_name = string(&map, "os")?.ok_or_else(|| bad("os is required"))?;
        if !crate::config::OS_NAMES.contains(&os_name.as_str()) {
            return Err(bad(format!(
                "os '{os_name}' is not one of: debian, ubuntu, rockylinux"
            )));
        }
        // A version may come as a JSON number (`12`, `22.04`).
        let version = match map.get("version") {
            None | Some(Value::Null) => return Err(bad("version is required")),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => return Err(bad("version must be a string")),
        };
        let release = os::find(&os_name, &version).ok_or_else(|| {
            bad(format!(
                "version '{version}' of {os_name} is not supported (supported: {})",
                os::versions(&os_name).join(", ")
            ))
        })?;

        let name = string(&map, "name")?.unwrap_or_default();
        // `<name>-<vmid>` must still be a host name label.
        if !is_vm_name(&name) {
            return Err(bad(messages::name(&name)));
        }

        let id = match integer(&map, "id")? {
            None | Some(0) => None,
            Some(id) => {
                let range = u32::from(config.assign_ip_start)..=u32::from(config.assign_ip_end);
                let id = u32::try_from(id)
                    .ok()
                    .filter(|id| (100..=254).contains(id))
                    .ok_or_else(|| bad(format!("id {id} is outside 100-254")))?;
                if !range.contains(&id) {
                    return Err(bad(format!(
                        "id {id} is outside the assignable range {}-{}",
                        range.start(),
                        range.end()
                    )));
                }
                Some(id)
            }
        };

        let node = string(&map, "node")?.filter(|n| !n.is_empty());
        if let Some(n) = &node
            && !crate::config::is_node_name(n)
        {
            return Err(bad(format!("node '{n}' is not a node name")));
        }

        // go-pve-qemu's zero values: 0 means "not given".
        let cpu = match integer(&map, "cpu")? {
            None | Some(0) => DEFAULT_CPU,
            Some(n) => n,
        };
        let ram = match integer(&map, "ram")? {
            None | Some(0) => DEFAULT_RAM_MB,
            Some(n) => n,
        };
        let disk_gb = match string(&map, "disk")?.filter(|d| !d.is_empty()) {
            None => DEFAULT_DISK_GB,
            Some(d) => parse_gigabytes(&d).ok_or_else(|| bad(messages::disk(&d)))?,
        };

        let user = match string(&map, "user")?.filter(|u| !u.is_empty()) {
            None => release.default_user.to_string(),
            Some(u) if is_linux_user(&u) => u,
            Some(u) => return Err(bad(messages::user(&u))),
        };
        let passwd = match string(&map, "passwd")?.filter(|p| !p.is_empty()) {
            None => Secret::new("passwd"),
            Some(p) if p.contains(['\n', '\r', '\0']) => {
                return Err(bad("passwd must be a single line"));
            }
            Some(p) => Secret::new(&p),
        };
        let pubkey = match string(&map, "pubkey")?.map(|k| k.trim().to_string()) {
            None => None,
            Some(k) if k.is_empty() => None,
            Some(k) if is_openssh_key(&k) => Some(k),
            Some(_) => return Err(bad(messages::PUBKEY)),
        };

        Ok(InstallRequest {
            release,
            name,
            id,
            node,
            cpu,
            ram,
            disk_gb,
            user,
            passwd,
            pubkey,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host";

    fn config() -> Config {
        Config::from_vars([("ASSIGN_IP_START", "100"), ("ASSIGN_IP_END", "200")]).unwrap()
    }

    fn refused(body: &str) -> String {
        match InstallRequest::parse(body.as_bytes(), &config()) {
            Ok(r) => panic!("{body} accepted as {r:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults_follow_go_pve_qemu() {
        let r = InstallRequest::parse(br#"{"os":"rockylinux","version":"9"}"#, &config()).unwrap();
        assert_eq!((r.cpu, r.ram, r.disk_gb), (2, 2048, 16));
        assert_eq!(r.user, "rocky");
        assert_eq!(r.passwd.expose(), "passwd");
        assert_eq!(r.id, None);
        let r = InstallRequest::parse(
            format!(r#"{{"os":"ubuntu","version":22.04,"cpu":-3,"ram":100,"disk":"8G","pubkey":"{KEY}"}}"#).as_bytes(),
            &config(),
        )
        .unwrap();
        assert_eq!((r.cpu, r.ram, r.disk_gb), (-3, 100, 8));
        assert_eq!(r.release.version, "22.04");
        assert!(r.pubkey.is_some());
    }

    #[test]
    fn every_bad_field_is_named() {
        assert!(refused("{").starts_with("request body is not valid JSON"));
        assert_eq!(refused("[1]"), "request body must be a JSON object");
        assert_eq!(refused(r#"{"version":"12"}"#), "os is required");
        assert_eq!(
            refused(r#"{"os":"arch","version":"1"}"#),
            "os 'arch' is not one of: debian, ubuntu, rockylinux"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"10"}"#),
            "version '10' of debian is not supported (supported: 11, 12, 13)"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","id":99}"#),
            "id 99 is outside 100-254"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","id":220}"#),
            "id 220 is outside the assignable range 100-200"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","cpu":"4"}"#),
            "cpu must be an integer"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","ram":1.5}"#),
            "ram must be an integer"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","disk":"10GB"}"#),
            "disk '10GB' is not a size like 16G"
        );
        assert!(
            refused(r#"{"os":"debian","version":"12","name":"web_01"}"#)
                .starts_with("name 'web_01'")
        );
        assert!(
            refused(r#"{"os":"debian","version":"12","user":"Bob"}"#).starts_with("user 'Bob'")
        );
        assert!(
            refused(r#"{"os":"debian","version":"12","pubkey":"hello"}"#).starts_with("pubkey")
        );
        assert!(
            refused(r#"{"os":"debian","version":"12","node":"a b"}"#).starts_with("node 'a b'")
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","name":7}"#),
            "name must be a string"
        );
    }
}
