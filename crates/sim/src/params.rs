//! Parameter checks of `qm create` and `qm set`, with Proxmox's wording
//! (`400 Parameter verification failed.` then one `<param>: <error>` line per
//! bad parameter), for the options a provisioning tool sends. An option the
//! simulator does not know is refused the way `qm` refuses an unknown option.

use std::net::Ipv4Addr;

/// CPU models a PVE 9 node accepts for `--cpu` (built-in PVE models, a
/// selection of QEMU's, `host`). Notably absent: `x86-64-v1`.
const CPU_MODELS: &[&str] = &[
    "x86-64-v2",
    "x86-64-v2-AES",
    "x86-64-v3",
    "x86-64-v4",
    "kvm32",
    "kvm64",
    "qemu32",
    "qemu64",
    "max",
    "host",
    "Nehalem",
    "Westmere",
    "SandyBridge",
    "IvyBridge",
    "Haswell",
    "Broadwell",
    "Skylake-Client",
    "Skylake-Server",
    "Cascadelake-Server",
    "Icelake-Server",
    "SapphireRapids",
    "EPYC",
    "EPYC-Rome",
    "EPYC-Milan",
    "EPYC-Genoa",
    "Opteron_G5",
];
const SCSIHW: &[&str] = &[
    "lsi",
    "lsi53c810",
    "virtio-scsi-pci",
    "virtio-scsi-single",
    "megasas",
    "pvscsi",
];
const OSTYPES: &[&str] = &[
    "other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24",
    "l26", "solaris",
];
const NIC_MODELS: &[&str] = &["virtio", "e1000", "e1000e", "rtl8139", "vmxnet3"];

/// Which command the options belong to (some only make sense in one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Create,
    Set,
}

/// Why one option's value is refused, in Proxmox's words (what follows
/// `<option>: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("type check ('integer') failed - got '{0}'")]
    NotInteger(String),
    #[error("value must have a minimum value of {0}")]
    BelowMinimum(i64),
    #[error("type check ('boolean') failed - got '{0}'")]
    NotBoolean(String),
    #[error("value '{value}' does not have a value in the enumeration '{allowed}'")]
    NotListed { value: String, allowed: String },
    #[error("Built-in cputype '{0}' is not defined (missing 'custom-' prefix?)")]
    CpuModel(String),
    /// `invalid format - <why>`.
    #[error("invalid format - {0}")]
    Format(String),
}

/// Why an option list is refused: the message `qm` prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("Unknown option: {0}\n400 unable to parse option")]
    Unknown(String),
    /// Every refused option with why, in the list's order.
    #[error("400 Parameter verification failed.\n{}", lines(.0))]
    Invalid(Vec<(String, Invalid)>),
}

/// `<option>: <why>`, one a line.
fn lines(errors: &[(String, Invalid)]) -> String {
    errors
        .iter()
        .map(|(key, why)| format!("{key}: {why}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn format_error(why: impl Into<String>) -> Invalid {
    Invalid::Format(why.into())
}

fn int_min(value: &str, min: i64) -> Result<(), Invalid> {
    let n: i64 = value
        .parse()
        .map_err(|_| Invalid::NotInteger(value.to_string()))?;
    if n < min {
        return Err(Invalid::BelowMinimum(min));
    }
    Ok(())
}

fn boolean(value: &str) -> Result<(), Invalid> {
    match value {
        "0" | "1" | "yes" | "no" | "on" | "off" | "true" | "false" => Ok(()),
        _ => Err(Invalid::NotBoolean(value.to_string())),
    }
}

fn one_of(value: &str, allowed: &[&str]) -> Result<(), Invalid> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(Invalid::NotListed {
            value: value.to_string(),
            allowed: allowed.join(", "),
        })
    }
}

pub fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

pub fn is_tag(tag: &str) -> bool {
    let mut chars = tag.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || "_-+.".contains(c))
}

fn ipconfig(value: &str) -> Result<(), Invalid> {
    for part in value.split(',') {
        let (key, val) = part
            .split_once('=')
            .ok_or_else(|| format_error(format!("unable to parse '{part}'")))?;
        match key {
            "ip" if val == "dhcp" => {}
            "ip" => {
                let (addr, prefix) = val
                    .split_once('/')
                    .ok_or_else(|| format_error("ip must be CIDR or 'dhcp'"))?;
                addr.parse::<Ipv4Addr>()
                    .map_err(|_| format_error(format!("'{addr}' is not an IPv4 address")))?;
                prefix
                    .parse::<u8>()
                    .ok()
                    .filter(|p| *p <= 32)
                    .ok_or_else(|| format_error("bad prefix length"))?;
            }
            "gw" => {
                val.parse::<Ipv4Addr>()
                    .map_err(|_| format_error(format!("'{val}' is not an IPv4 address")))?;
            }
            "ip6" | "gw6" => {}
            other => return Err(format_error(format!("unknown key '{other}'"))),
        }
    }
    Ok(())
}

/// Checks one option; `None` for an option the verb does not have.
fn check(verb: Verb, key: &str, value: &str) -> Option<Result<(), Invalid>> {
    let result = match key {
        "name" => {
            if is_dns_name(value) {
                Ok(())
            } else {
                Err(format_error("value does not look like a valid DNS name"))
            }
        }
        "cores" | "sockets" | "vcpus" => int_min(value, 1),
        "memory" => int_min(value.trim_start_matches("current="), 16),
        "balloon" => int_min(value, 0),
        "numa" | "ciupgrade" | "onboot" | "protection" | "template" => boolean(value),
        "cpu" => {
            let model = value
                .split(',')
                .next()
                .unwrap_or("")
                .trim_start_matches("cputype=");
            if CPU_MODELS.contains(&model) || model.starts_with("custom-") {
                Ok(())
            } else {
                Err(Invalid::CpuModel(model.to_string()))
            }
        }
        "scsihw" => one_of(value, SCSIHW),
        "ostype" => one_of(value, OSTYPES),
        "agent" => boolean(
            value
                .trim_start_matches("enabled=")
                .split(',')
                .next()
                .unwrap_or(""),
        ),
        "net0" | "net1" => {
            let model = value.split([',', '=']).next().unwrap_or("");
            one_of(model, NIC_MODELS)
        }
        "serial0" => {
            if value == "socket" || value.starts_with("/dev/") {
                Ok(())
            } else {
                Err(format_error("value does not match the regex pattern"))
            }
        }
        "tags" => {
            let bad = value
                .split([';', ',', ' '])
                .filter(|t| !t.is_empty())
                .find(|t| !is_tag(t));
            match bad {
                Some(tag) => Err(format_error(format!("invalid tag '{tag}'"))),
                None => Ok(()),
            }
        }
        "ipconfig0" | "ipconfig1" => ipconfig(value),
        "boot" | "bootdisk" | "ide2" | "scsi0" | "scsi1" | "sshkeys" | "cipassword" | "ciuser"
        | "description" | "nameserver" | "searchdomain" | "citype" => Ok(()),
        "delete" | "digest" | "skiplock" if verb == Verb::Set => Ok(()),
        _ => return None,
    };
    Some(result)
}

/// Checks a whole option list, as `qm` does before it runs.
pub fn verify(verb: Verb, options: &[(String, String)]) -> Result<(), VerifyError> {
    let mut errors = Vec::new();
    for (key, value) in options {
        match check(verb, key, value) {
            None => return Err(VerifyError::Unknown(key.clone())),
            Some(Err(e)) => errors.push((key.clone(), e)),
            Some(Ok(())) => {}
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(VerifyError::Invalid(errors))
    }
}

/// Proxmox's handling of `--tags`: split on `;`, `,` or space, lower-cased,
/// de-duplicated, sorted, joined with `;`.
pub fn normalize_tags(value: &str) -> String {
    let mut tags: Vec<String> = value
        .split([';', ',', ' '])
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    tags.sort();
    tags.dedup();
    tags.join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_cpu_model_go_pve_qemu_sent_is_refused() {
        let err = verify(Verb::Create, &opts(&[("cpu", "x86-64-v1")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "400 Parameter verification failed.\n\
             cpu: Built-in cputype 'x86-64-v1' is not defined (missing 'custom-' prefix?)"
        );
        assert!(verify(Verb::Create, &opts(&[("cpu", "x86-64-v2-AES")])).is_ok());
    }

    #[test]
    fn every_bad_parameter_gets_its_line() {
        let err = verify(
            Verb::Create,
            &opts(&[("cores", "0"), ("memory", "lots"), ("name", "bad_name")]),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err.lines().collect::<Vec<_>>(),
            [
                "400 Parameter verification failed.",
                "cores: value must have a minimum value of 1",
                "memory: type check ('integer') failed - got 'lots'",
                "name: invalid format - value does not look like a valid DNS name",
            ]
        );
    }

    #[test]
    fn unknown_options_are_refused_like_getopt() {
        assert_eq!(
            verify(Verb::Set, &opts(&[("frobnicate", "1")]))
                .unwrap_err()
                .to_string(),
            "Unknown option: frobnicate\n400 unable to parse option"
        );
    }

    #[test]
    fn tags_are_normalized() {
        assert_eq!(normalize_tags("Web;db web"), "db;web");
        assert!(verify(Verb::Set, &opts(&[("tags", "ok;no/slash")])).is_err());
    }

    #[test]
    fn ipconfig_is_checked() {
        assert!(
            verify(
                Verb::Set,
                &opts(&[("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1")])
            )
            .is_ok()
        );
        assert!(
            verify(
                Verb::Set,
                &opts(&[("ipconfig0", "ip=10.0.0.5,gw=10.0.0.1")])
            )
            .is_err()
        );
    }
}

/// Property tests: any option list gets `qm`'s answer — accepted, or
/// refused in its words — never a panic; tags normalise once and for all.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use pvedeck_testkit::{config, output, text};

    const KEYS: &[&str] = &[
        "name",
        "cores",
        "sockets",
        "vcpus",
        "memory",
        "balloon",
        "numa",
        "ciupgrade",
        "onboot",
        "cpu",
        "scsihw",
        "ostype",
        "agent",
        "net0",
        "serial0",
        "tags",
        "ipconfig0",
        "boot",
        "scsi0",
        "sshkeys",
        "cipassword",
        "ciuser",
        "delete",
        "digest",
        "skiplock",
        "frobnicate",
    ];

    /// Values of the options pvedeck sends, to be edited.
    const VALUES: &[&str] = &[
        "web-106",
        "2",
        "current=2048",
        "x86-64-v2-AES",
        "virtio-scsi-single",
        "l26",
        "enabled=1,fstrim_cloned_disks=1",
        "virtio,bridge=vmbr0",
        "socket",
        "debian;pvedeck",
        "ip=192.168.0.106/24,gw=192.168.0.1",
        "ip=dhcp,ip6=auto",
        "order=scsi0",
        "local-zfs:vm-106-disk-0,iothread=1,size=16G",
        "$6$rounds=5000$salt$hash",
    ];

    fn option() -> impl Strategy<Value = (String, String)> {
        (
            prop_oneof![prop::sample::select(KEYS).prop_map(str::to_string), text()],
            output(VALUES),
        )
    }

    proptest! {
        #![proptest_config(config(3000))]

        #[test]
        fn any_option_list_gets_qms_answer(
            verb in prop_oneof![Just(Verb::Create), Just(Verb::Set)],
            options in prop::collection::vec(option(), 0..6),
        ) {
            if let Err(message) = verify(verb, &options) {
                let message = message.to_string();
                prop_assert!(
                    message.starts_with("400 Parameter verification failed.\n")
                        || (message.starts_with("Unknown option: ")
                            && message.ends_with("\n400 unable to parse option")),
                    "{}", message
                );
            }
        }

        #[test]
        fn tags_normalise_once(tags in output(VALUES)) {
            let once = normalize_tags(&tags);
            prop_assert_eq!(normalize_tags(&once), once.clone());
            prop_assert!(!once.split(';').any(|t| t.contains([',', ' '])));
            let _ = (is_dns_name(&tags), is_tag(&tags));
        }
    }
}
