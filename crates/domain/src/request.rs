//! The bodies of the requests that change something: one wire type each, as
//! `/api` reads it from go-pve-qemu clients and the server functions receive
//! it from the browser. `check` turns a body into the checked values the
//! engine takes, refusing with a message that names the field.

use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::os::{self, Os, Release};
pub use crate::rules::Refusal;
use crate::rules::{self, Clamp, Limits, messages};
use crate::secret::Secret;

fn refuse<T>(message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(message.into()))
}

/// A request body and what it turns into once checked. `limits` are the
/// server's `VM_MAX_*`.
pub trait Body: DeserializeOwned + Serialize {
    type Checked;
    fn check(self, limits: &Limits) -> Result<Self::Checked, Refusal>;
}

/// One field of a JSON body as it was sent: absent (or `null`), a value of
/// the expected type, or something else (`"cpu":"4"`), which `check`
/// refuses naming the field. Decoding a body never fails on a field, so the
/// checks run in one fixed order whatever order the client wrote.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Field<T> {
    #[default]
    Absent,
    Given(T),
    Wrong,
}

impl<T> Field<T> {
    pub fn is_absent(&self) -> bool {
        matches!(self, Field::Absent)
    }
}

impl Field<i64> {
    /// What a number input holds: empty is absent, anything but an integer
    /// is wrong.
    pub fn number(raw: &str) -> Field<i64> {
        match raw.trim() {
            "" => Field::Absent,
            raw => raw.parse().map_or(Field::Wrong, Field::Given),
        }
    }
}

impl Field<String> {
    /// What a text input holds: empty is absent.
    pub fn text(raw: &str) -> Field<String> {
        match raw.trim() {
            "" => Field::Absent,
            raw => Field::Given(raw.to_string()),
        }
    }
}

/// A JSON value reduced to what the fields distinguish.
enum Scalar {
    Null,
    Int(i64),
    Float(f64),
    Text(String),
    Other,
}

/// How a field type reads a JSON value.
pub trait FromScalar: Sized {
    #[doc(hidden)]
    fn from_int(_: i64) -> Option<Self> {
        None
    }
    #[doc(hidden)]
    fn from_float(_: f64) -> Option<Self> {
        None
    }
    #[doc(hidden)]
    fn from_text(_: String) -> Option<Self> {
        None
    }
}

impl FromScalar for i64 {
    fn from_int(n: i64) -> Option<i64> {
        Some(n)
    }
}

impl FromScalar for String {
    fn from_text(s: String) -> Option<String> {
        Some(s)
    }
}

/// A release version: a string, or a JSON number (`12`, `22.04`) as
/// go-pve-qemu clients may send it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Version(pub String);

impl FromScalar for Version {
    fn from_int(n: i64) -> Option<Version> {
        Some(Version(n.to_string()))
    }
    fn from_float(x: f64) -> Option<Version> {
        Some(Version(x.to_string()))
    }
    fn from_text(s: String) -> Option<Version> {
        Some(Version(s))
    }
}

impl<'de, T: FromScalar> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = match deserializer.deserialize_any(ScalarVisitor)? {
            Scalar::Null => return Ok(Field::Absent),
            Scalar::Int(n) => T::from_int(n),
            Scalar::Float(x) => T::from_float(x),
            Scalar::Text(s) => T::from_text(s),
            Scalar::Other => None,
        };
        Ok(value.map_or(Field::Wrong, Field::Given))
    }
}

impl<T: Serialize> Serialize for Field<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::Given(value) => value.serialize(serializer),
            Field::Absent | Field::Wrong => serializer.serialize_none(),
        }
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Scalar, E> {
        Ok(Scalar::Int(n))
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Scalar, E> {
        Ok(i64::try_from(n).map_or(Scalar::Other, Scalar::Int))
    }
    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Scalar, E> {
        Ok(Scalar::Float(x))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Scalar, E> {
        Ok(Scalar::Text(s.to_string()))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<Scalar, E> {
        Ok(Scalar::Text(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

fn text(field: Field<String>, name: &str) -> Result<Option<String>, Refusal> {
    match field {
        Field::Absent => Ok(None),
        Field::Given(s) => Ok(Some(s)),
        Field::Wrong => refuse(messages::string(name)),
    }
}

fn integer(field: Field<i64>, name: &str) -> Result<Option<i64>, Refusal> {
    match field {
        Field::Absent => Ok(None),
        Field::Given(n) => Ok(Some(n)),
        Field::Wrong => refuse(messages::integer(name)),
    }
}

/// A Proxmox node name, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeName(String);

impl NodeName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where an install's VM goes: a node named, or `auto`, the node
/// placement picks (docs/provisioning.md#placement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeChoice {
    Auto,
    Named(NodeName),
}

impl NodeChoice {
    /// The word that asks for placement. A node of that name could only
    /// be reached by placement: `auto` means placement everywhere.
    pub const AUTO: &'static str = "auto";

    /// The node asked for by name, if one was.
    pub fn named(&self) -> Option<&NodeName> {
        match self {
            NodeChoice::Auto => None,
            NodeChoice::Named(node) => Some(node),
        }
    }
}

/// `POST /api/vm/install` (docs/provisioning.md#install-request).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Install))]
pub struct InstallBody {
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Os, required = true))]
    pub os: Field<String>,
    /// `12`, `24.04`, `9`; a JSON number is taken too.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true))]
    pub version: Field<Version>,
    /// A host name label; the VM is named `<name>-<vmid>`.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub name: Field<String>,
    /// A VMID of the assignable range; absent or 0: the first free one.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>))]
    pub id: Field<i64>,
    /// A node the VM moves to once configured, or `auto`: the VM is made
    /// on the node with the most free memory that fits it. Absent: the
    /// main node.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub node: Field<String>,
    /// vCPUs; 0 or less becomes 1, more than `VM_MAX_CPU` (at most 32) the maximum.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub cpu: Field<i64>,
    /// MB; less than 512 becomes 512, more than `VM_MAX_RAM` the maximum.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub ram: Field<i64>,
    /// `<n>G`; less than 16G becomes 16G, `VM_MAX_DISK` or more the maximum.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = "^[0-9]+G$"))]
    pub disk: Field<String>,
    /// The cloud-init user; absent: the image's default user.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub user: Field<String>,
    /// The user's password (one line); absent or empty: none, the account
    /// is key-only (go-pve-qemu gave it `passwd`; send that to keep it).
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = Password))]
    pub passwd: Field<String>,
    /// One OpenSSH public key, put into the VM beside pvedeck's own.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub pubkey: Field<String>,
    /// `import` (the seed's pipeline) or `clone` (a linked clone of the
    /// release's golden template); absent: `INSTALL_METHOD`.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<InstallMethod>))]
    pub method: Field<String>,
    /// The cluster (`CLUSTERS`) the VM is made in; absent: the default
    /// one, or with `"node":"auto"` whichever cluster has the most room.
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub cluster: Field<String>,
}

/// How an install makes its VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum InstallMethod {
    /// Import the cloud image, boot, run the init script, reboot
    /// (docs/provisioning.md#the-install-pipeline).
    #[default]
    Import,
    /// Clone the golden template; ready when cloud-init is done.
    Clone,
}

impl InstallMethod {
    pub fn parse(word: &str) -> Option<InstallMethod> {
        match word {
            "import" => Some(InstallMethod::Import),
            "clone" => Some(InstallMethod::Clone),
            _ => None,
        }
    }
}

/// A checked install request. The sizes keep the values asked for:
/// clamping them is a pipeline step of its own, with events (docs/provisioning.md#clamping).
#[derive(Debug, Clone)]
pub struct InstallRequest {
    pub release: Release,
    pub name: String,
    /// The VMID asked for, unchecked: `Allocator::check_asked` judges it.
    pub id: Option<i64>,
    /// `None`: the main node, as go-pve-qemu did.
    pub node: Option<NodeChoice>,
    pub cpu: i64,
    pub ram: i64,
    /// The `<n>` of `<n>G`.
    pub disk_gb: u64,
    pub user: String,
    /// `None`: no `--cipassword`, the account logs in with keys only.
    pub passwd: Option<Secret>,
    pub pubkey: Option<String>,
    /// `None`: the server's default.
    pub method: Option<InstallMethod>,
    /// `None`: the default cluster (or, placed automatically, any).
    pub cluster: Option<String>,
}

/// go-pve-qemu's zero values: 0 means "not given".
fn size_or(field: Field<i64>, name: &str, default: i64) -> Result<i64, Refusal> {
    Ok(match integer(field, name)? {
        None | Some(0) => default,
        Some(n) => n,
    })
}

/// The vCPUs an install gets for what was sent, as its validation step
/// will set them.
pub fn install_cpu(field: Field<i64>, limits: &Limits) -> Result<Clamp<u32>, Refusal> {
    Ok(limits.clamp_cpu(size_or(field, "cpu", rules::DEFAULT_CPU)?))
}

/// The RAM (MB) an install gets for what was sent.
pub fn install_ram(field: Field<i64>, limits: &Limits) -> Result<Clamp<u64>, Refusal> {
    Ok(limits.clamp_ram(size_or(field, "ram", rules::DEFAULT_RAM_MB)?))
}

/// The `<n>` of a `disk` field (`16G`), the default when none was sent.
fn disk_gb(field: Field<String>) -> Result<u64, Refusal> {
    match text(field, "disk")?.filter(|d| !d.is_empty()) {
        None => Ok(rules::DEFAULT_DISK_GB),
        Some(d) => rules::parse_gigabytes(&d).ok_or_else(|| Refusal(messages::disk(&d))),
    }
}

/// The disk (GB) an install gets for what was sent.
pub fn install_disk(field: Field<String>, limits: &Limits) -> Result<Clamp<u64>, Refusal> {
    Ok(limits.clamp_disk(disk_gb(field)?))
}

/// The release an `os` and a `version` field name.
fn release(os: Field<String>, version: Field<Version>) -> Result<Release, Refusal> {
    let os_name = text(os, "os")?.ok_or_else(|| Refusal(messages::required("os")))?;
    let os = Os::parse(&os_name)
        .ok_or_else(|| Refusal(format!("os '{os_name}' is not one of: {}", Os::names())))?;
    let version = match version {
        Field::Absent => return refuse(messages::required("version")),
        Field::Wrong => return refuse(messages::string("version")),
        Field::Given(Version(v)) => v,
    };
    os::find(os, &version).ok_or_else(|| {
        Refusal(format!(
            "version '{version}' of {os} is not supported (supported: {})",
            os.versions().join(", ")
        ))
    })
}

/// `POST /api/templates`: which golden template to build.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TemplateBody {
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = Os, required = true))]
    pub os: Field<String>,
    #[serde(default, skip_serializing_if = "Field::is_absent")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true))]
    pub version: Field<Version>,
}

impl Body for TemplateBody {
    type Checked = Release;

    fn check(self, _: &Limits) -> Result<Release, Refusal> {
        release(self.os, self.version)
    }
}

impl Body for InstallBody {
    type Checked = InstallRequest;

    /// Checks in the order go-pve-qemu clients have seen: os, version,
    /// name, id, node, sizes, user, password, key.
    fn check(self, _: &Limits) -> Result<InstallRequest, Refusal> {
        let release = release(self.os, self.version)?;

        let name = text(self.name, "name")?.unwrap_or_default();
        if let Some(refused) = rules::name_error(&name) {
            return refuse(refused);
        }

        // A VMID asked for is the allocator's to judge (docs/provisioning.md#vmid-allocation).
        let id = integer(self.id, "id")?.filter(|id| *id != 0);

        let node = match text(self.node, "node")?.filter(|n| !n.is_empty()) {
            None => None,
            Some(n) if n == NodeChoice::AUTO => Some(NodeChoice::Auto),
            Some(n) if rules::is_dns_label(&n) => Some(NodeChoice::Named(NodeName(n))),
            Some(n) => return refuse(messages::node(&n)),
        };

        let cpu = size_or(self.cpu, "cpu", rules::DEFAULT_CPU)?;
        let ram = size_or(self.ram, "ram", rules::DEFAULT_RAM_MB)?;
        let disk_gb = disk_gb(self.disk)?;

        let user = match text(self.user, "user")?.filter(|u| !u.is_empty()) {
            None => release.os.default_user().to_string(),
            Some(u) if rules::is_linux_user(&u) => u,
            Some(u) => return refuse(messages::user(&u)),
        };
        // No fixed default: a password every VM shares is one every tenant
        // knows (docs/security.md#vm-user-passwords).
        let passwd = match text(self.passwd, "passwd")?.filter(|p| !p.is_empty()) {
            None => None,
            Some(p) if rules::is_single_line(&p) => Some(Secret::new(&p)),
            Some(_) => return refuse(messages::PASSWD),
        };
        let pubkey = match text(self.pubkey, "pubkey")?.map(|k| k.trim().to_string()) {
            None => None,
            Some(k) if k.is_empty() => None,
            Some(k) if rules::is_openssh_key(&k) => Some(k),
            Some(_) => return refuse(messages::PUBKEY),
        };

        let method = match text(self.method, "method")? {
            None => None,
            Some(m) => Some(
                InstallMethod::parse(&m)
                    .ok_or_else(|| Refusal(format!("method '{m}' is not one of: clone, import")))?,
            ),
        };

        // Only its form is checked here: which clusters there are is
        // the server's (an unknown one is 404, not 400).
        let cluster = match text(self.cluster, "cluster")?.filter(|c| !c.is_empty()) {
            None => None,
            Some(c) if rules::is_cluster_name(&c) => Some(c),
            Some(c) => {
                return refuse(format!(
                    "cluster '{c}' is not a cluster name (letters and digits, from a letter)"
                ));
            }
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
            method,
            cluster,
        })
    }
}

/// `POST /api/vm/:id/set/cpu` `{"cpu":4}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SetCpu {
    /// vCPUs, from 1 to `VM_MAX_CPU` (at most 32).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = i64, required = true))]
    pub cpu: Field<i64>,
}

/// A vCPU count within the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cores(u32);

impl Cores {
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Body for SetCpu {
    type Checked = Cores;

    fn check(self, limits: &Limits) -> Result<Cores, Refusal> {
        match self.cpu {
            Field::Absent => refuse(messages::required("cpu")),
            Field::Given(n) if limits.allows_cpu(n) => Ok(Cores(n as u32)),
            _ => refuse(messages::cpu_range(limits.cpu())),
        }
    }
}

/// `POST /api/vm/:id/set/memory` `{"memory":8192}` (MB).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SetMemory {
    /// MB, at least 512, at most `VM_MAX_RAM`; balloon: docs/provisioning.md#balloon-rules.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = i64, required = true))]
    pub memory: Field<i64>,
}

/// A memory size (MB) within the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryMb(u64);

impl MemoryMb {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl Body for SetMemory {
    type Checked = MemoryMb;

    fn check(self, limits: &Limits) -> Result<MemoryMb, Refusal> {
        match self.memory {
            Field::Absent => refuse(messages::required("memory")),
            Field::Given(mb) if limits.allows_memory(mb) => Ok(MemoryMb(mb as u64)),
            _ => refuse(messages::memory_range(limits.max_ram_mb)),
        }
    }
}

/// `POST /api/vm/:id/set/disk` `{"disk":"10G"}`: how much to add.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SetDisk {
    /// `<n>G` to add to scsi0, at least 1G; never past `VM_MAX_DISK`.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = String, required = true, pattern = "^[0-9]+G$")
    )]
    pub disk: Field<String>,
}

/// Whole GiB to add to a disk, at least one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Growth(u64);

impl Growth {
    pub fn gib(self) -> u64 {
        self.0
    }
}

impl Body for SetDisk {
    type Checked = Growth;

    /// `VM_MAX_DISK` needs the disk's size: the engine checks it with
    /// `Limits::check_growth` once it has read it.
    fn check(self, _: &Limits) -> Result<Growth, Refusal> {
        match self.disk {
            Field::Absent => refuse(messages::required("disk")),
            Field::Given(s) => rules::parse_gigabytes(&s)
                .filter(|g| *g > 0)
                .map(Growth)
                .ok_or_else(|| Refusal(messages::DISK_GROWTH.to_string())),
            Field::Wrong => refuse(messages::DISK_GROWTH),
        }
    }
}

/// `POST /api/vm/:id/set/node` `{"node":"pve2"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SetNode {
    /// An online cluster node other than the VM's.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true))]
    pub node: Field<String>,
}

impl Body for SetNode {
    type Checked = NodeName;

    fn check(self, _: &Limits) -> Result<NodeName, Refusal> {
        match self.node {
            Field::Absent => refuse(messages::required("node")),
            Field::Given(n) if rules::is_dns_label(&n) => Ok(NodeName(n)),
            _ => refuse(messages::TARGET_NODE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host";

    fn install(body: &str) -> Result<InstallRequest, Refusal> {
        serde_json::from_str::<InstallBody>(body)
            .unwrap_or_else(|e| panic!("{body}: {e}"))
            .check(&Limits::default())
    }

    fn refused(body: &str) -> String {
        match install(body) {
            Ok(r) => panic!("{body} accepted as {r:?}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn defaults_follow_go_pve_qemu() {
        let r = install(r#"{"os":"rockylinux","version":"9"}"#).unwrap();
        assert_eq!((r.cpu, r.ram, r.disk_gb), (2, 2048, 16));
        assert_eq!(r.user, "rocky");
        assert!(r.passwd.is_none(), "no password: the account is key-only");
        let r = install(r#"{"os":"debian","version":"12","passwd":"passwd"}"#).unwrap();
        assert_eq!(
            r.passwd.map(|p| p.expose().to_string()).as_deref(),
            Some("passwd")
        );
        let r = install(r#"{"os":"debian","version":"12","passwd":""}"#).unwrap();
        assert!(
            r.passwd.is_none(),
            "empty counts as none, go-pve-qemu's zero value"
        );
        assert_eq!(r.id, None);
        let r = install(&format!(
            r#"{{"os":"ubuntu","version":22.04,"cpu":-3,"ram":100,"disk":"8G","pubkey":"{KEY}","id":0,"name":null}}"#
        ))
        .unwrap();
        assert_eq!((r.cpu, r.ram, r.disk_gb), (-3, 100, 8));
        assert_eq!(r.release.version, "22.04");
        assert!(r.pubkey.is_some());
        assert_eq!(r.id, None);
        assert_eq!(
            install(r#"{"os":"debian","version":12}"#)
                .unwrap()
                .release
                .version,
            "12"
        );
        // `auto` asks for placement; any other name is a node's; empty or
        // absent is the main node.
        let node = |body: &str| install(body).unwrap().node;
        assert_eq!(
            node(r#"{"os":"debian","version":"12","node":"auto"}"#),
            Some(NodeChoice::Auto)
        );
        assert_eq!(
            node(r#"{"os":"debian","version":"12","node":"pve2"}"#)
                .as_ref()
                .and_then(NodeChoice::named)
                .map(NodeName::as_str),
            Some("pve2")
        );
        assert_eq!(node(r#"{"os":"debian","version":"12","node":""}"#), None);
        assert_eq!(node(r#"{"os":"debian","version":"12"}"#), None);
    }

    #[test]
    fn every_bad_field_is_named() {
        assert_eq!(refused(r#"{"version":"12"}"#), "os is required");
        assert_eq!(
            refused(r#"{"os":"arch","version":"1"}"#),
            "os 'arch' is not one of: debian, ubuntu, rockylinux"
        );
        assert_eq!(refused(r#"{"os":"debian"}"#), "version is required");
        assert_eq!(
            refused(r#"{"os":"debian","version":true}"#),
            "version must be a string"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"10"}"#),
            "version '10' of debian is not supported (supported: 11, 12, 13)"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","id":"99"}"#),
            "id must be an integer"
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
            refused(r#"{"os":"debian","version":"12","ram":[1]}"#),
            "ram must be an integer"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","disk":"10GB"}"#),
            "disk '10GB' is not a size like 16G"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","disk":16}"#),
            "disk must be a string"
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
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","node":"a b"}"#),
            "node 'a b' is not a node name"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","name":7}"#),
            "name must be a string"
        );
        assert_eq!(
            refused(r#"{"os":"debian","version":"12","passwd":"a\nb"}"#),
            "passwd must be a single line"
        );
    }

    #[test]
    fn checks_run_in_a_fixed_order_whatever_the_field_order() {
        assert_eq!(
            refused(r#"{"cpu":"x","name":"-bad","os":"debian","version":"12"}"#),
            refused(r#"{"os":"debian","version":"12","name":"-bad","cpu":"x"}"#),
        );
    }

    #[test]
    fn a_body_sent_by_the_browser_reads_back_the_same() {
        let body = InstallBody {
            os: Field::Given("debian".into()),
            version: Field::Given(Version("12".into())),
            cpu: Field::number("4"),
            ram: Field::number(""),
            ..InstallBody::default()
        };
        let json = serde_json::to_string(&body).unwrap();
        assert_eq!(json, r#"{"os":"debian","version":"12","cpu":4}"#);
        assert_eq!(serde_json::from_str::<InstallBody>(&json).unwrap(), body);
    }

    #[test]
    fn sizes_the_form_shows_are_the_ones_the_install_sets() {
        let limits = Limits {
            max_cpu: Some(8),
            ..Limits::default()
        };
        assert_eq!(
            install_cpu(Field::number("99"), &limits),
            Ok(Clamp::Lowered(8))
        );
        assert_eq!(install_cpu(Field::number("0"), &limits), Ok(Clamp::Kept(2)));
        assert_eq!(
            install_cpu(Field::number("-1"), &limits),
            Ok(Clamp::Raised(1))
        );
        assert_eq!(
            install_cpu(Field::number("two"), &limits),
            Err(Refusal("cpu must be an integer".into()))
        );
        assert_eq!(
            install_ram(Field::number("100"), &limits),
            Ok(Clamp::Raised(512))
        );
        assert_eq!(
            install_disk(Field::text("8G"), &limits),
            Ok(Clamp::Raised(16))
        );
    }

    fn set<B: Body>(json: &str, limits: &Limits) -> Result<B::Checked, String> {
        serde_json::from_str::<B>(json)
            .unwrap_or_else(|e| panic!("{json}: {e}"))
            .check(limits)
            .map_err(|e| e.0)
    }

    #[test]
    fn set_bodies_are_checked_against_the_limits() {
        let limits = Limits {
            max_cpu: Some(8),
            max_ram_mb: Some(16384),
            max_disk_gb: None,
        };
        assert_eq!(
            set::<SetCpu>(r#"{"cpu":4}"#, &limits).map(Cores::get),
            Ok(4)
        );
        for bad in [r#"{"cpu":0}"#, r#"{"cpu":16}"#, r#"{"cpu":"4"}"#] {
            assert_eq!(
                set::<SetCpu>(bad, &limits),
                Err("cpu must be an integer from 1 to 8".to_string())
            );
        }
        assert_eq!(
            set::<SetCpu>("{}", &limits),
            Err("cpu is required".to_string())
        );
        assert_eq!(
            set::<SetMemory>(r#"{"memory":256}"#, &limits),
            Err("memory must be an integer from 512 to 16384 (MB)".to_string())
        );
        assert_eq!(
            set::<SetMemory>(r#"{"memory":8192}"#, &limits).map(MemoryMb::get),
            Ok(8192)
        );
        assert_eq!(
            set::<SetDisk>(r#"{"disk":"10G"}"#, &limits).map(Growth::gib),
            Ok(10)
        );
        for bad in [r#"{"disk":"-5G"}"#, r#"{"disk":10}"#, r#"{"disk":"0G"}"#] {
            assert_eq!(
                set::<SetDisk>(bad, &limits),
                Err("disk must be a size to add, like \"10G\"".to_string())
            );
        }
        assert_eq!(
            set::<SetNode>(r#"{"node":"pve2"}"#, &limits).map(|n| n.to_string()),
            Ok("pve2".to_string())
        );
        assert_eq!(
            set::<SetNode>(r#"{"node":5}"#, &limits),
            Err("node must be the name of a cluster node".to_string())
        );
    }
}

/// Property tests: any JSON, as a body of any route, decodes without
/// panicking and is either a checked request within the rules or a
/// refusal that says something.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};
    use serde_json::{Map, Value};

    use super::*;

    /// A fixed seed: `cargo test` answers the same on every run;
    /// `PROPTEST_RNG_SEED` and `PROPTEST_CASES` explore further.
    fn config(cases: u32) -> Config {
        let base = Config::default();
        let set = |name: &str| std::env::var_os(name).is_some();
        Config {
            cases: if set("PROPTEST_CASES") {
                base.cases
            } else {
                cases
            },
            rng_seed: if set("PROPTEST_RNG_SEED") {
                base.rng_seed
            } else {
                RngSeed::Fixed(0x11_f022)
            },
            failure_persistence: None,
            ..base
        }
    }

    fn any_text() -> impl Strategy<Value = String> {
        prop::collection::vec(any::<char>(), 0..40).prop_map(String::from_iter)
    }

    /// Any JSON value: numbers past every integer type, fractions, any
    /// text, nested arrays and objects.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any_text().prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(any_text(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host";

    /// What a client may put in a field: what the field takes, something
    /// close to it, or anything at all.
    fn value(field: &'static str) -> BoxedStrategy<Value> {
        let text = |re: &'static str| re.prop_map(Value::from).boxed();
        let (valid, near): (BoxedStrategy<Value>, BoxedStrategy<Value>) = match field {
            "name" => (
                text("([a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?)?"),
                text("[a-zA-Z0-9_. -]{0,70}"),
            ),
            "node" => (text("pve[1-9]"), text("[a-zA-Z0-9_. -]{0,70}")),
            "id" => (
                (-10i64..300).prop_map(Value::from).boxed(),
                prop_oneof![
                    9000i64..9100,
                    Just(i64::MAX),
                    Just(i64::MIN),
                    Just(4_294_967_397)
                ]
                .prop_map(Value::from)
                .boxed(),
            ),
            "cpu" | "ram" | "memory" => (
                (-10i64..70_000).prop_map(Value::from).boxed(),
                any::<i64>().prop_map(Value::from).boxed(),
            ),
            "disk" => (text("[0-9]{1,6}G"), text("-?[0-9]{0,9}[GgMT]?B?")),
            "user" => (
                text("[a-z_][a-z0-9_-]{0,20}"),
                text("[a-zA-Z_][a-z0-9_-]{0,34}"),
            ),
            "passwd" => (
                text("[^\n\r\x00]{0,30}"),
                any_text().prop_map(Value::from).boxed(),
            ),
            "pubkey" => (
                Just(Value::from(KEY)).boxed(),
                prop_oneof![
                    (0usize..KEY.len()).prop_map(|n| KEY[..n].to_string()),
                    any_text().prop_map(|t| format!("{KEY}{t}")),
                ]
                .prop_map(Value::from)
                .boxed(),
            ),
            "method" => (
                prop::sample::select(&["import", "clone"][..])
                    .prop_map(Value::from)
                    .boxed(),
                prop::sample::select(&["Clone", "", " import"][..])
                    .prop_map(Value::from)
                    .boxed(),
            ),
            _ => (any_text().prop_map(Value::from).boxed(), json().boxed()),
        };
        prop_oneof![6 => valid, 2 => near, 1 => json()].boxed()
    }

    /// The release fields: a release pvedeck knows, or not.
    fn release() -> impl Strategy<Value = Vec<(&'static str, Value)>> {
        let known = prop::sample::select(
            os::RELEASES
                .iter()
                .map(|r| (r.os.name(), r.version))
                .collect::<Vec<_>>(),
        )
        .prop_map(|(os, version)| vec![("os", Value::from(os)), ("version", Value::from(version))]);
        let other = (
            proptest::option::of(prop_oneof![
                prop::sample::select(&["debian", "ubuntu", "rockylinux", "Debian", "arch", ""][..])
                    .prop_map(Value::from),
                json(),
            ]),
            proptest::option::of(prop_oneof![
                prop::sample::select(&["12", "22.04", "9", "10", " 12", ""][..])
                    .prop_map(Value::from),
                prop::sample::select(&[12.0, 22.04, 9.0, 1e300][..]).prop_map(Value::from),
                (0i64..30).prop_map(Value::from),
                json(),
            ]),
        )
            .prop_map(|(os, version)| {
                [("os", os), ("version", version)]
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k, v)))
                    .collect()
            });
        prop_oneof![3 => known, 1 => other]
    }

    const FIELDS: &[&str] = &[
        "name", "id", "node", "cpu", "ram", "disk", "user", "passwd", "pubkey", "method", "memory",
    ];

    /// An object of some of the fields a request has, and others.
    fn body() -> impl Strategy<Value = Value> {
        let fields: Vec<BoxedStrategy<Option<Value>>> = FIELDS
            .iter()
            .map(|f| proptest::option::weighted(0.4, value(f)).boxed())
            .collect();
        let object = (
            release(),
            fields,
            prop::collection::btree_map(any_text(), json(), 0..3),
        )
            .prop_map(|(release, values, extra)| {
                let mut object: Map<String, Value> = extra.into_iter().collect();
                let named = FIELDS
                    .iter()
                    .zip(values)
                    .filter_map(|(k, v)| v.map(|v| (*k, v)));
                for (name, value) in release.into_iter().chain(named) {
                    object.insert(name.to_string(), value);
                }
                Value::Object(object)
            });
        prop_oneof![6 => object, 1 => json()]
    }

    /// `VM_MAX_*` as the server's configuration admits them.
    fn limits() -> impl Strategy<Value = Limits> {
        use proptest::option::of;
        let ram = rules::MIN_RAM_MB as u32;
        let disk = rules::MIN_DISK_GB as u32;
        (
            of(1..=rules::CPU_CEILING),
            of(prop_oneof![Just(ram), ram..]),
            of(prop_oneof![Just(disk), disk..]),
        )
            .prop_map(|(max_cpu, max_ram_mb, max_disk_gb)| Limits {
                max_cpu,
                max_ram_mb,
                max_disk_gb,
            })
    }

    /// `value` as a body of type `B`, checked: whatever it decodes to is
    /// accepted with `accepted` holding, or refused with a message.
    fn judged<B: Body>(
        value: &Value,
        limits: &Limits,
        accepted: impl FnOnce(B::Checked) -> Result<(), TestCaseError>,
    ) -> Result<(), TestCaseError> {
        // A JSON text that is no body is the server's to refuse (`decode`).
        let Ok(body) = serde_json::from_value::<B>(value.clone()) else {
            return Ok(());
        };
        match body.check(limits) {
            Ok(checked) => accepted(checked),
            Err(Refusal(message)) => {
                prop_assert!(!message.trim().is_empty());
                Ok(())
            }
        }
    }

    proptest! {
        #![proptest_config(config(4000))]

        #[test]
        fn any_install_body_is_a_request_within_the_rules_or_refused(
            value in body(),
            limits in limits(),
        ) {
            if value.is_object() {
                // Every field takes any value: only `check` may refuse.
                prop_assert!(serde_json::from_value::<InstallBody>(value.clone()).is_ok());
            }
            judged::<InstallBody>(&value, &limits, |r| {
                prop_assert!(os::find(r.release.os, r.release.version).is_some());
                prop_assert!(rules::is_vm_name(&r.name), "{}", r.name);
                let node_ok = r.node.as_ref().is_none_or(|n| match n {
                    NodeChoice::Auto => true,
                    NodeChoice::Named(n) => rules::is_dns_label(n.as_str()),
                });
                prop_assert!(node_ok);
                prop_assert!(rules::is_linux_user(&r.user), "{}", r.user);
                prop_assert!(r.passwd.as_ref().is_none_or(|p| rules::is_single_line(p.expose())));
                prop_assert!(r.pubkey.as_deref().is_none_or(rules::is_openssh_key));
                prop_assert!(r.id != Some(0));
                prop_assert!(r.disk_gb <= 999_999);
                let clamped = limits.clamp_cpu(r.cpu).value();
                prop_assert!((1..=limits.cpu()).contains(&clamped));
                prop_assert!(limits.clamp_ram(r.ram).value() >= rules::MIN_RAM_MB);
                prop_assert!(limits.clamp_disk(r.disk_gb).value() >= rules::MIN_DISK_GB);
                Ok(())
            })?;
            judged::<TemplateBody>(&value, &limits, |release| {
                prop_assert!(os::find(release.os, release.version).is_some());
                Ok(())
            })?;
        }

        #[test]
        fn any_set_body_is_a_value_within_the_limits_or_refused(
            value in body(),
            limits in limits(),
        ) {
            judged::<SetCpu>(&value, &limits, |cores| {
                prop_assert!((1..=limits.cpu()).contains(&cores.get()));
                Ok(())
            })?;
            judged::<SetMemory>(&value, &limits, |mb| {
                prop_assert!(mb.get() >= rules::MIN_RAM_MB);
                prop_assert!(limits.max_ram_mb.is_none_or(|max| mb.get() <= u64::from(max)));
                Ok(())
            })?;
            judged::<SetDisk>(&value, &limits, |growth| {
                prop_assert!((1..=999_999).contains(&growth.gib()));
                Ok(())
            })?;
            judged::<SetNode>(&value, &limits, |node| {
                prop_assert!(rules::is_dns_label(node.as_str()));
                Ok(())
            })?;
        }

        #[test]
        fn any_json_text_decodes_or_fails_without_panicking(text in any_text()) {
            let _ = serde_json::from_str::<InstallBody>(&text);
            let _ = serde_json::from_str::<SetCpu>(&text);
        }

        #[test]
        fn form_inputs_read_as_fields(raw in any_text(), n in any::<i64>()) {
            let _ = (Field::number(&raw), Field::text(&raw));
            prop_assert_eq!(Field::number(&format!(" {n} ")), Field::Given(n));
            prop_assert_eq!(Field::text(&raw).is_absent(), raw.trim().is_empty());
        }

        #[test]
        fn a_body_the_browser_sends_reads_back_the_same(value in body()) {
            // What the create form sends: the fields it holds, nothing wrong.
            let Ok(mut body) = serde_json::from_value::<InstallBody>(value) else {
                return Ok(());
            };
            for wrong in [&mut body.os, &mut body.name, &mut body.node, &mut body.disk,
                          &mut body.user, &mut body.passwd, &mut body.pubkey, &mut body.method] {
                if *wrong == Field::Wrong {
                    *wrong = Field::Absent;
                }
            }
            for wrong in [&mut body.id, &mut body.cpu, &mut body.ram] {
                if *wrong == Field::Wrong {
                    *wrong = Field::Absent;
                }
            }
            if body.version == Field::Wrong {
                body.version = Field::Absent;
            }
            let json = serde_json::to_string(&body).unwrap();
            prop_assert_eq!(serde_json::from_str::<InstallBody>(&json).unwrap(), body);
        }
    }
}
