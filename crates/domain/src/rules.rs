//! The rules of what a request may hold and of what the install does with the
//! sizes it is given (docs/provisioning.md#clamping), in one place. The request checks
//! (`request.rs`), the engine and the pages (which check as you type) all call
//! these; none of them words a rule of its own.

use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

/// VMIDs pvedeck installs: the VMID is the last octet of the VM's address.
pub const VMID_ADDRESSES: RangeInclusive<u32> = 100..=254;
/// go-pve-qemu's sizes for a field left out (or sent as zero).
pub const DEFAULT_CPU: i64 = 2;
pub const DEFAULT_RAM_MB: i64 = 2048;
pub const DEFAULT_DISK_GB: u64 = 16;
/// vCPUs a VM may have, whatever `VM_MAX_CPU` says.
pub const CPU_CEILING: u32 = 32;
/// Below this much RAM (MB) the guests do not boot reliably.
pub const MIN_RAM_MB: u64 = 512;
/// The cloud images need this much disk (GB).
pub const MIN_DISK_GB: u64 = 16;

/// A VM's name: `<name>-<vmid>`, or go-pve-qemu's bare `<vmid>` when the
/// request names none. A clone (pvedeck's own path) is `vm-<vmid>` then:
/// Proxmox writes the name unquoted as cloud-init's `hostname:`
/// (qemu-server `PVE/QemuServer/Cloudinit.pm`, `cloudinit_userdata`), so
/// `hostname: 106` is a number to YAML, cloud-init's `set_hostname` fails
/// and `cloud-init status` says `error` — which a clone's readiness reads
/// (seen on a real guest, `cargo xtask guest`).
pub fn vm_name(asked: &str, vmid: u32, clone: bool) -> String {
    match (asked.is_empty(), clone) {
        (false, _) => format!("{asked}-{vmid}"),
        (true, false) => vmid.to_string(),
        (true, true) => format!("vm-{vmid}"),
    }
}

/// A request refused because of what it holds: a 400, its message naming
/// the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// `VM_MAX_CPU`, `VM_MAX_RAM`, `VM_MAX_DISK`: read once into the
/// configuration, shown to the pages, applied by the engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub max_cpu: Option<u32>,
    pub max_ram_mb: Option<u32>,
    pub max_disk_gb: Option<u32>,
}

/// What the install's validation steps do to a size (docs/provisioning.md#clamping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clamp<T> {
    Kept(T),
    /// Raised to the minimum.
    Raised(T),
    /// Lowered to the maximum.
    Lowered(T),
}

impl<T: Copy> Clamp<T> {
    pub fn value(self) -> T {
        match self {
            Clamp::Kept(v) | Clamp::Raised(v) | Clamp::Lowered(v) => v,
        }
    }
}

impl Limits {
    /// The most vCPUs a VM may have: `VM_MAX_CPU`, at most 32.
    pub fn cpu(&self) -> u32 {
        self.max_cpu.unwrap_or(CPU_CEILING).min(CPU_CEILING)
    }

    /// `validating CPU and RAM`: cpu ≤ 0 → 1; above the maximum → the maximum.
    pub fn clamp_cpu(&self, asked: i64) -> Clamp<u32> {
        let max = self.cpu();
        match u32::try_from(asked) {
            Err(_) | Ok(0) => Clamp::Raised(1),
            Ok(n) if n > max => Clamp::Lowered(max),
            Ok(n) => Clamp::Kept(n),
        }
    }

    /// ram < 512 → 512; above `VM_MAX_RAM` → `VM_MAX_RAM`.
    pub fn clamp_ram(&self, asked: i64) -> Clamp<u64> {
        match u64::try_from(asked) {
            Ok(n) if n >= MIN_RAM_MB => match self.max_ram_mb.map(u64::from) {
                Some(max) if n > max => Clamp::Lowered(max),
                _ => Clamp::Kept(n),
            },
            _ => Clamp::Raised(MIN_RAM_MB),
        }
    }

    /// `validating disk size`: < 16 → 16; at or above `VM_MAX_DISK` → the
    /// maximum (the seed's `>=`: a size equal to the limit is reported too).
    pub fn clamp_disk(&self, asked: u64) -> Clamp<u64> {
        if asked < MIN_DISK_GB {
            return Clamp::Raised(MIN_DISK_GB);
        }
        match self.max_disk_gb.map(u64::from) {
            Some(max) if asked >= max => Clamp::Lowered(max),
            _ => Clamp::Kept(asked),
        }
    }

    /// `set/cpu`: 1 to the maximum, refused otherwise.
    pub fn allows_cpu(&self, n: i64) -> bool {
        (1..=i64::from(self.cpu())).contains(&n)
    }

    /// `set/memory`: at least 512, at most `VM_MAX_RAM`, refused otherwise.
    pub fn allows_memory(&self, mb: i64) -> bool {
        u64::try_from(mb).is_ok_and(|mb| {
            mb >= MIN_RAM_MB && self.max_ram_mb.is_none_or(|max| mb <= u64::from(max))
        })
    }

    /// `set/disk` grows by `grow` GiB a disk of `current` GiB: refused
    /// above `VM_MAX_DISK`.
    pub fn check_growth(&self, current_gib: u64, grow: u64) -> Result<(), Refusal> {
        let after = current_gib + grow;
        match self.max_disk_gb.map(u64::from) {
            Some(max) if after > max => Err(Refusal(format!(
                "disk would grow to {after}G, above the limit of {max}G"
            ))),
            _ => Ok(()),
        }
    }
}

/// `16G` → 16. Only whole gigabytes, as go-pve-qemu read them.
pub fn parse_gigabytes(raw: &str) -> Option<u64> {
    let digits = raw.strip_suffix('G')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 6 {
        return None;
    }
    digits.parse().ok()
}

/// A host name label: what `<name>-<vmid>` must stay, and what a Proxmox
/// node name is.
/// Whether `name` may name a cluster (`CLUSTERS`): it is part of variable
/// names and URLs, so letters and digits only, from a letter.
pub fn is_cluster_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric())
}

pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A VM name: empty (the VMID alone), or a label that `-<vmid>` keeps valid.
pub fn is_vm_name(s: &str) -> bool {
    s.is_empty() || (is_dns_label(s) && s.len() <= 59)
}

/// A Linux user name as `useradd` accepts it by default.
pub fn is_linux_user(s: &str) -> bool {
    let mut bytes = s.bytes();
    !s.is_empty()
        && s.len() <= 32
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// One OpenSSH public key line: `<type> <base64> [comment]`.
pub fn is_openssh_key(s: &str) -> bool {
    if s.contains(['\n', '\r']) {
        return false;
    }
    let mut parts = s.split_whitespace();
    let (Some(kind), Some(blob)) = (parts.next(), parts.next()) else {
        return false;
    };
    let known = matches!(kind, "ssh-ed25519" | "ssh-rsa" | "ssh-dss")
        || kind.starts_with("ecdsa-sha2-nistp")
        || kind.starts_with("sk-ssh-ed25519@")
        || kind.starts_with("sk-ecdsa-sha2-");
    // The base64 blob starts with the encoded key type: "AAAA" + length.
    known
        && blob.len() >= 32
        && blob.starts_with("AAAA")
        && blob
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
}

/// A password that fits on the one line `chpasswd` and cloud-init read.
pub fn is_single_line(s: &str) -> bool {
    !s.contains(['\n', '\r', '\0'])
}

/// The messages the server gives, for the pages to show the same words.
pub mod messages {
    use super::MIN_RAM_MB;

    pub fn required(field: &str) -> String {
        format!("{field} is required")
    }
    pub fn string(field: &str) -> String {
        format!("{field} must be a string")
    }
    pub fn integer(field: &str) -> String {
        format!("{field} must be an integer")
    }
    pub fn name(name: &str) -> String {
        format!(
            "name '{name}' is not a valid host name (letters, digits and inner '-', at most 59)"
        )
    }
    pub fn user(user: &str) -> String {
        format!(
            "user '{user}' is not a valid Linux user name (lower-case letters, digits, '_' and '-')"
        )
    }
    pub fn node(node: &str) -> String {
        format!("node '{node}' is not a node name")
    }
    pub fn disk(disk: &str) -> String {
        format!("disk '{disk}' is not a size like 16G")
    }
    pub const PUBKEY: &str =
        "pubkey is not an OpenSSH public key (like 'ssh-ed25519 AAAA… comment')";
    pub const PASSWD: &str = "passwd must be a single line";
    pub fn cpu_range(max: u32) -> String {
        format!("cpu must be an integer from 1 to {max}")
    }
    pub fn memory_range(max: Option<u32>) -> String {
        match max {
            Some(max) => format!("memory must be an integer from {MIN_RAM_MB} to {max} (MB)"),
            None => format!("memory must be an integer of at least {MIN_RAM_MB} (MB)"),
        }
    }
    pub const DISK_GROWTH: &str = "disk must be a size to add, like \"10G\"";
    pub const TARGET_NODE: &str = "node must be the name of a cluster node";
    /// What the create form says of a size the install will change.
    pub fn clamped(to: impl std::fmt::Display) -> String {
        format!("will be clamped to {to}")
    }
}

/// The create form's per-field errors: the same checks as the install's.
pub fn name_error(name: &str) -> Option<String> {
    (!is_vm_name(name)).then(|| messages::name(name))
}

pub fn user_error(user: &str) -> Option<String> {
    (!user.is_empty() && !is_linux_user(user)).then(|| messages::user(user))
}

pub fn pubkey_error(key: &str) -> Option<String> {
    let key = key.trim();
    (!key.is_empty() && !is_openssh_key(key)).then(|| messages::PUBKEY.to_string())
}

pub fn passwd_error(passwd: &str) -> Option<String> {
    (!is_single_line(passwd)).then(|| messages::PASSWD.to_string())
}

/// The page a sign-in may go back to: a path of this server, never
/// another site (`//evil.example` is one).
pub fn local_path(next: &str) -> &str {
    let local = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && !next.chars().any(char::is_control);
    if local { next } else { "/" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_is_never_named_by_digits_alone() {
        assert_eq!(vm_name("", 106, false), "106");
        assert_eq!(vm_name("", 106, true), "vm-106");
        assert_eq!(vm_name("web", 106, true), "web-106");
        assert_eq!(vm_name("web", 106, false), "web-106");
    }

    #[test]
    fn a_sign_in_goes_back_to_this_server_only() {
        assert_eq!(local_path("/vm/101?x=1"), "/vm/101?x=1");
        for other in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil",
            "vm",
            "",
        ] {
            assert_eq!(local_path(other), "/", "{other}");
        }
    }

    #[test]
    fn gigabytes_names_users_keys() {
        assert_eq!(parse_gigabytes("40G"), Some(40));
        assert_eq!(parse_gigabytes("G"), None);
        assert_eq!(parse_gigabytes("-4G"), None);
        assert_eq!(parse_gigabytes("16GB"), None);
        assert!(is_vm_name(""));
        assert!(is_vm_name("web-01"));
        assert!(!is_vm_name("-web"));
        assert!(!is_vm_name(&"a".repeat(60)));
        assert!(is_linux_user("deploy"));
        assert!(is_linux_user("root"));
        assert!(!is_linux_user("9lives"));
        assert!(!is_linux_user("Bob"));
        let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host";
        assert!(is_openssh_key(key));
        assert!(!is_openssh_key(&format!("{key}\nssh-rsa AAAA")));
        assert!(!is_openssh_key("hello"));
        assert!(is_dns_label("pve-2"));
        assert!(!is_dns_label("pve 2"));
        assert!(!is_single_line("a\nb"));
    }

    const LIMITED: Limits = Limits {
        max_cpu: Some(8),
        max_ram_mb: Some(16384),
        max_disk_gb: Some(64),
    };

    #[test]
    fn cpu_is_clamped_to_one_and_to_the_limit_or_the_ceiling() {
        assert_eq!(LIMITED.clamp_cpu(-3), Clamp::Raised(1));
        assert_eq!(LIMITED.clamp_cpu(0), Clamp::Raised(1));
        assert_eq!(LIMITED.clamp_cpu(4), Clamp::Kept(4));
        assert_eq!(LIMITED.clamp_cpu(8), Clamp::Kept(8));
        assert_eq!(LIMITED.clamp_cpu(9), Clamp::Lowered(8));
        assert_eq!(Limits::default().clamp_cpu(999), Clamp::Lowered(32));
        assert_eq!(Limits::default().cpu(), 32);
    }

    #[test]
    fn ram_is_clamped_to_512_and_to_the_limit() {
        assert_eq!(LIMITED.clamp_ram(100), Clamp::Raised(512));
        assert_eq!(LIMITED.clamp_ram(-1), Clamp::Raised(512));
        assert_eq!(LIMITED.clamp_ram(512), Clamp::Kept(512));
        assert_eq!(LIMITED.clamp_ram(32768), Clamp::Lowered(16384));
        assert_eq!(Limits::default().clamp_ram(1 << 20), Clamp::Kept(1 << 20));
    }

    #[test]
    fn disk_is_clamped_to_16_and_at_the_limit() {
        assert_eq!(LIMITED.clamp_disk(8), Clamp::Raised(16));
        assert_eq!(LIMITED.clamp_disk(16), Clamp::Kept(16));
        assert_eq!(LIMITED.clamp_disk(64), Clamp::Lowered(64));
        assert_eq!(LIMITED.clamp_disk(100), Clamp::Lowered(64));
        assert_eq!(Limits::default().clamp_disk(500), Clamp::Kept(500));
    }

    #[test]
    fn resizing_is_refused_outside_the_limits() {
        assert!(LIMITED.allows_cpu(8));
        assert!(!LIMITED.allows_cpu(0));
        assert!(!LIMITED.allows_cpu(9));
        assert!(LIMITED.allows_memory(512));
        assert!(!LIMITED.allows_memory(256));
        assert!(!LIMITED.allows_memory(16385));
        assert!(Limits::default().allows_memory(1 << 20));
        assert_eq!(LIMITED.check_growth(60, 4), Ok(()));
        assert_eq!(
            LIMITED.check_growth(64, 20).map_err(|r| r.0),
            Err("disk would grow to 84G, above the limit of 64G".to_string())
        );
    }

    #[test]
    fn form_errors_use_the_server_s_words() {
        assert!(name_error("-x").is_some());
        assert!(user_error("").is_none());
        assert!(pubkey_error("hello").is_some());
        assert_eq!(
            passwd_error("a\nb").as_deref(),
            Some("passwd must be a single line")
        );
        assert_eq!(messages::cpu_range(8), "cpu must be an integer from 1 to 8");
        assert_eq!(
            messages::memory_range(Some(16384)),
            "memory must be an integer from 512 to 16384 (MB)"
        );
    }
}
