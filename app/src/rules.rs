//! Rules of what a request may hold, shared by the server (which enforces
//! them) and the create form (which checks them as you type).

/// `16G` → 16. Only whole gigabytes, as go-pve-qemu read them.
pub fn parse_gigabytes(raw: &str) -> Option<u64> {
    let digits = raw.strip_suffix('G')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 6 {
        return None;
    }
    digits.parse().ok()
}

/// A host name label: what `<name>-<vmid>` must stay.
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

/// The messages the server gives, for the form to show the same words.
pub mod messages {
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
    pub fn disk(disk: &str) -> String {
        format!("disk '{disk}' is not a size like 16G")
    }
    pub const PUBKEY: &str =
        "pubkey is not an OpenSSH public key (like 'ssh-ed25519 AAAA… comment')";
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}

/// vCPUs a VM may be given by resizing, whatever `VM_MAX_CPU` says.
pub const CPU_CEILING: u32 = 32;
/// Below this much RAM (MB) the guests do not boot reliably.
pub const MIN_RAM_MB: i64 = 512;
/// The cloud images need this much disk (GB).
pub const MIN_DISK_GB: i64 = 16;

/// The create form's limits, from the server's configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_cpu: Option<u32>,
    pub max_ram_mb: Option<u32>,
    pub max_disk_gb: Option<u32>,
}

impl Limits {
    pub fn cpu(&self) -> i64 {
        i64::from(self.max_cpu.unwrap_or(CPU_CEILING).min(CPU_CEILING))
    }
}

fn whole(raw: &str) -> Option<i64> {
    raw.trim().parse().ok()
}

/// vCPUs: 1 to `VM_MAX_CPU` (at most 32).
pub fn cpu_error(raw: &str, limits: &Limits) -> Option<String> {
    let max = limits.cpu();
    match whole(raw) {
        Some(n) if (1..=max).contains(&n) => None,
        _ => Some(format!("cpu must be an integer from 1 to {max}")),
    }
}

/// RAM in MB: at least 512, at most `VM_MAX_RAM`.
pub fn ram_error(raw: &str, limits: &Limits) -> Option<String> {
    let max = limits.max_ram_mb.map(i64::from);
    match (whole(raw), max) {
        (Some(n), Some(max)) if (MIN_RAM_MB..=max).contains(&n) => None,
        (Some(n), None) if n >= MIN_RAM_MB => None,
        (_, Some(max)) => Some(format!(
            "ram must be an integer from {MIN_RAM_MB} to {max} (MB)"
        )),
        (_, None) => Some(format!(
            "ram must be an integer of at least {MIN_RAM_MB} (MB)"
        )),
    }
}

/// Disk in GB: at least 16, at most `VM_MAX_DISK`.
pub fn disk_error(raw: &str, limits: &Limits) -> Option<String> {
    let max = limits.max_disk_gb.map(i64::from);
    match (whole(raw), max) {
        (Some(n), Some(max)) if (MIN_DISK_GB..=max).contains(&n) => None,
        (Some(n), None) if (MIN_DISK_GB..=999_999).contains(&n) => None,
        (_, Some(max)) => Some(format!("disk must be from {MIN_DISK_GB} to {max} (GB)")),
        (_, None) => Some(format!("disk must be at least {MIN_DISK_GB} (GB)")),
    }
}

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
    passwd
        .contains(['\n', '\r'])
        .then(|| "passwd must be a single line".to_string())
}

#[cfg(test)]
mod form_tests {
    use super::*;

    #[test]
    fn limits_bound_the_form() {
        let limits = Limits {
            max_cpu: Some(8),
            max_ram_mb: Some(16384),
            max_disk_gb: Some(64),
        };
        assert_eq!(cpu_error("4", &limits), None);
        assert_eq!(
            cpu_error("9", &limits).as_deref(),
            Some("cpu must be an integer from 1 to 8")
        );
        assert!(cpu_error("two", &limits).is_some());
        assert_eq!(ram_error("512", &limits), None);
        assert!(ram_error("256", &limits).is_some());
        assert!(ram_error("32768", &limits).is_some());
        assert_eq!(disk_error("64", &limits), None);
        assert!(disk_error("8", &limits).is_some());
        assert!(disk_error("65", &Limits::default()).is_none());
        assert!(name_error("-x").is_some());
        assert!(user_error("").is_none());
        assert!(pubkey_error("hello").is_some());
        assert!(passwd_error("a\nb").is_some());
    }
}
