//! The NoCloud seed: the cloud-init drive of a VM, written as Proxmox
//! writes it (`PVE::QemuServer::Cloudinit`, qemu-server: `cloudinit_userdata`
//! for user-data, `nocloud_network` for network-config, `nocloud_metadata`
//! for meta-data, `generate_nocloud` for the set of files and
//! `commit_cloudinit_disk` for the `genisoimage` call), so that the guest's
//! cloud-init sees what it would see on a real Proxmox node.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use super::{MachineError, run};

/// What `qm set --ciuser/--cipassword/--sshkeys/--ipconfig0/…` stores, as
/// the seed needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// cloud-init runs its per-instance modules (users, keys, host keys,
    /// machine identity) again when this changes: a clone needs a new one.
    /// Proxmox derives it from the SHA-1 of user-data and network-config.
    pub instance_id: String,
    /// The VM's name: a dotted name is the FQDN, its first label the host
    /// name (`get_hostname_fqdn`).
    pub hostname: String,
    pub searchdomain: Option<String>,
    /// `ciuser`: the name of cloud-init's default user (sudo without a
    /// password); `root` keeps root's SSH login instead.
    pub user: String,
    /// `cipassword` as Proxmox stores it: a SHA-512 crypt hash.
    pub password_hash: Option<String>,
    pub ssh_keys: Vec<String>,
    /// Proxmox writes no `ssh_pwauth`; `Some` adds it (the image's sshd
    /// allows passwords by default).
    pub ssh_pwauth: Option<bool>,
    /// `ciupgrade` (Proxmox's default: on): `package_upgrade: true` makes
    /// the first boot run apt, which the offline image must survive.
    pub package_upgrade: bool,
    /// The NIC the network config is for, matched by MAC (see
    /// [`super::mac_for`]); named `eth0` as Proxmox names `net0`.
    pub mac: String,
    pub network: SeedNetwork,
    pub nameservers: Vec<Ipv4Addr>,
    /// Not Proxmox's: shell commands cloud-init's `bootcmd` runs first,
    /// which the simulator's `cloud-init` fault uses to make the real
    /// guest's cloud-init fail in its own way (a module that exits 1).
    pub bootcmd: Vec<String>,
}

/// `ipconfig0`'s IPv4 part. Inside QEMU's user-mode network the guest is
/// 10.0.2.15/24 with gateway 10.0.2.2 either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedNetwork {
    Dhcp,
    Static {
        address: Ipv4Addr,
        prefix: u8,
        gateway: Option<Ipv4Addr>,
    },
}

impl SeedNetwork {
    /// The address QEMU's user-mode network gives its one guest.
    pub fn user_mode() -> Self {
        SeedNetwork::Static {
            address: Ipv4Addr::new(10, 0, 2, 15),
            prefix: 24,
            gateway: Some(Ipv4Addr::new(10, 0, 2, 2)),
        }
    }
}

impl Seed {
    /// A complete seed for tests.
    #[cfg(test)]
    pub(crate) fn example() -> Self {
        Seed {
            instance_id: "9f2c1e".into(),
            hostname: "web-1".into(),
            searchdomain: None,
            user: "debian".into(),
            password_hash: Some("$6$salt$hash".into()),
            ssh_keys: vec!["ssh-ed25519 AAAAC3Nz me@laptop".into()],
            ssh_pwauth: None,
            package_upgrade: true,
            mac: super::mac_for(105),
            network: SeedNetwork::user_mode(),
            nameservers: vec![Ipv4Addr::new(10, 0, 2, 3)],
            bootcmd: vec![],
        }
    }
}

/// `meta-data`: only the instance id, as `nocloud_metadata`.
pub fn meta_data(seed: &Seed) -> String {
    format!("instance-id: {}\n", yaml(&seed.instance_id))
}

/// `user-data`, line for line what `cloudinit_userdata` writes.
pub fn user_data(seed: &Seed) -> String {
    let (hostname, fqdn) = match (seed.hostname.split_once('.'), &seed.searchdomain) {
        (Some((host, _)), _) => (host.to_string(), seed.hostname.clone()),
        (None, Some(search)) => (seed.hostname.clone(), format!("{}.{search}", seed.hostname)),
        (None, None) => (seed.hostname.clone(), seed.hostname.clone()),
    };
    let mut out = String::from("#cloud-config\n");
    out += &format!("hostname: {}\n", yaml(&hostname));
    out += "manage_etc_hosts: true\n";
    out += &format!("fqdn: {}\n", yaml(&fqdn));
    out += &format!("user: {}\n", yaml(&seed.user));
    if seed.user == "root" {
        out += "disable_root: False\n";
    }
    if let Some(hash) = &seed.password_hash {
        out += &format!("password: {}\n", yaml(hash));
    }
    let keys: Vec<&str> = seed
        .ssh_keys
        .iter()
        .map(|k| k.trim())
        .filter(|k| !k.is_empty())
        .collect();
    if !keys.is_empty() {
        out += "ssh_authorized_keys:\n";
        for key in keys {
            out += &format!("  - {}\n", yaml(key));
        }
    }
    out += "chpasswd:\n  expire: False\n";
    if seed.user != "root" {
        out += "users:\n  - default\n";
    }
    if let Some(pwauth) = seed.ssh_pwauth {
        out += &format!("ssh_pwauth: {pwauth}\n");
    }
    if seed.package_upgrade {
        out += "package_upgrade: true\n";
    }
    if !seed.bootcmd.is_empty() {
        out += "bootcmd:\n";
        for command in &seed.bootcmd {
            out += &format!("  - [sh, -c, {}]\n", yaml_quoted(command));
        }
    }
    out
}

/// `network-config`, version 1, as `nocloud_network` writes it for `net0`.
pub fn network_config(seed: &Seed) -> String {
    let mut out = String::from("version: 1\nconfig:\n");
    out += "    - type: physical\n      name: eth0\n";
    out += &format!("      mac_address: '{}'\n", seed.mac.to_lowercase());
    out += "      subnets:\n";
    match &seed.network {
        SeedNetwork::Dhcp => out += "      - type: dhcp4\n",
        SeedNetwork::Static {
            address,
            prefix,
            gateway,
        } => {
            out += "      - type: static\n";
            out += &format!("        address: '{address}'\n");
            out += &format!("        netmask: '{}'\n", netmask(*prefix));
            if let Some(gw) = gateway {
                out += &format!("        gateway: '{gw}'\n");
            }
        }
    }
    if !seed.nameservers.is_empty() || seed.searchdomain.is_some() {
        out += "    - type: nameserver\n";
        if !seed.nameservers.is_empty() {
            out += "      address:\n";
            for ns in &seed.nameservers {
                out += &format!("      - '{ns}'\n");
            }
        }
        if let Some(search) = &seed.searchdomain {
            out += &format!("      search:\n      - {}\n", yaml(search));
        }
    }
    out
}

fn netmask(prefix: u8) -> Ipv4Addr {
    let bits = u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0);
    Ipv4Addr::from(bits)
}

/// A YAML scalar: as Proxmox writes it (plain) when it reads back the
/// same, JSON-quoted otherwise (a key comment with ` #`, a leading `*`, a
/// `: ` would change the meaning of a plain scalar).
/// Always double-quoted (JSON's string syntax is YAML's).
fn yaml_quoted(value: &str) -> String {
    serde_json::Value::String(value.to_string()).to_string()
}

fn yaml(value: &str) -> String {
    let plain = !value.is_empty()
        && !value.starts_with(|c: char| "!&*-?|>'\"%@`{}[],#: ".contains(c))
        && !value.ends_with([' ', ':'])
        && !value.contains(": ")
        && !value.contains(" #")
        && !value.contains(['\n', '\r', '\t'])
        && !matches!(
            value.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "~"
        );
    if plain {
        value.to_string()
    } else {
        yaml_quoted(value)
    }
}

/// Writes the seed's files next to `dest` and makes the ISO from them with
/// Proxmox's `genisoimage` options (`-J -R`, volume `cidata`, the label
/// cloud-init's NoCloud looks for).
pub async fn seed_iso(seed: &Seed, dest: &Path) -> Result<(), MachineError> {
    let dir = dest.with_extension("d");
    let _ = tokio::fs::remove_dir_all(&dir).await;
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| MachineError::io(&dir, e))?;
    for (name, text) in [
        ("user-data", user_data(seed)),
        ("network-config", network_config(seed)),
        ("meta-data", meta_data(seed)),
        ("vendor-data", String::new()),
    ] {
        let file = dir.join(name);
        tokio::fs::write(&file, text)
            .await
            .map_err(|e| MachineError::io(&file, e))?;
    }
    let mut cmd = Command::new("genisoimage");
    cmd.args([
        "-quiet",
        "-iso-level",
        "3",
        "-J",
        "-R",
        "-V",
        "cidata",
        "-o",
    ])
    .arg(dest)
    .arg(&dir);
    let made = run(cmd).await;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    made.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_is_what_proxmox_writes() {
        assert_eq!(
            user_data(&Seed::example()),
            "#cloud-config\n\
             hostname: web-1\n\
             manage_etc_hosts: true\n\
             fqdn: web-1\n\
             user: debian\n\
             password: $6$salt$hash\n\
             ssh_authorized_keys:\n  - ssh-ed25519 AAAAC3Nz me@laptop\n\
             chpasswd:\n  expire: False\n\
             users:\n  - default\n\
             package_upgrade: true\n"
        );
    }

    #[test]
    fn root_keeps_its_login_and_dotted_names_are_fqdns() {
        let seed = Seed {
            user: "root".into(),
            hostname: "db.example.org".into(),
            password_hash: None,
            package_upgrade: false,
            ssh_pwauth: Some(true),
            ..Seed::example()
        };
        let text = user_data(&seed);
        assert!(text.contains("hostname: db\n"));
        assert!(text.contains("fqdn: db.example.org\n"));
        assert!(text.contains("disable_root: False\n"));
        assert!(!text.contains("users:"));
        assert!(!text.contains("password:"));
        assert!(text.contains("ssh_pwauth: true\n"));
        assert!(!text.contains("package_upgrade"));
        let searched = Seed {
            searchdomain: Some("lan".into()),
            ..Seed::example()
        };
        assert!(user_data(&searched).contains("fqdn: web-1.lan\n"));
    }

    #[test]
    fn odd_values_are_quoted_so_that_yaml_reads_them_back() {
        let seed = Seed {
            ssh_keys: vec!["ssh-ed25519 AAAA a #comment".into(), "  ".into()],
            hostname: "yes".into(),
            ..Seed::example()
        };
        let text = user_data(&seed);
        assert!(
            text.contains("  - \"ssh-ed25519 AAAA a #comment\"\n"),
            "{text}"
        );
        assert!(text.contains("hostname: \"yes\"\n"));
        assert_eq!(text.matches("  - ").count(), 2, "{text}");
    }

    #[test]
    fn network_config_is_version_1_matched_by_mac() {
        assert_eq!(
            network_config(&Seed::example()),
            "version: 1\nconfig:\n\
             \x20   - type: physical\n\
             \x20     name: eth0\n\
             \x20     mac_address: '52:54:00:00:00:69'\n\
             \x20     subnets:\n\
             \x20     - type: static\n\
             \x20       address: '10.0.2.15'\n\
             \x20       netmask: '255.255.255.0'\n\
             \x20       gateway: '10.0.2.2'\n\
             \x20   - type: nameserver\n\
             \x20     address:\n\
             \x20     - '10.0.2.3'\n"
        );
        let dhcp = Seed {
            network: SeedNetwork::Dhcp,
            nameservers: vec![],
            ..Seed::example()
        };
        assert!(network_config(&dhcp).ends_with("      - type: dhcp4\n"));
        assert_eq!(netmask(0), Ipv4Addr::new(0, 0, 0, 0));
        assert_eq!(netmask(20), Ipv4Addr::new(255, 255, 240, 0));
        assert_eq!(netmask(32), Ipv4Addr::new(255, 255, 255, 255));
    }

    #[test]
    fn a_planted_bootcmd_is_quoted_whole() {
        let seed = Seed {
            bootcmd: vec!["echo 'disk \"full\"' >&2; exit 1".into()],
            ..Seed::example()
        };
        assert!(
            user_data(&seed)
                .ends_with("bootcmd:\n  - [sh, -c, \"echo 'disk \\\"full\\\"' >&2; exit 1\"]\n"),
            "{}",
            user_data(&seed)
        );
        assert!(!user_data(&Seed::example()).contains("bootcmd"));
    }

    #[test]
    fn meta_data_names_the_instance() {
        assert_eq!(meta_data(&Seed::example()), "instance-id: 9f2c1e\n");
    }

    #[tokio::test]
    async fn the_iso_is_a_cidata_volume_with_the_four_files() {
        if Command::new("genisoimage")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("genisoimage is not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let iso = dir.path().join("seed.iso");
        seed_iso(&Seed::example(), &iso).await.unwrap();
        let bytes = std::fs::read(&iso).unwrap();
        // The primary volume descriptor (sector 16) holds the volume id.
        let pvd = &bytes[16 * 2048..17 * 2048];
        assert_eq!(&pvd[1..6], b"CD001");
        assert_eq!(std::str::from_utf8(&pvd[40..46]).unwrap(), "cidata");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("instance-id: 9f2c1e"));
        assert!(text.contains("#cloud-config"));
        assert!(
            !dir.path().join("seed.d").exists(),
            "the staging files are gone"
        );
    }
}
