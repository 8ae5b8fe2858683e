//! pvedeck's own known-hosts file (`DATA_DIR/known_hosts`), in OpenSSH's
//! format: a VM's host key recorded there (pinned from the guest agent, or
//! by `ssh` itself at first contact) is required of whoever answers at that
//! address later. Entries are written unhashed (`HashKnownHosts=no`) so
//! that pvedeck can find and replace them.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Mutex;

use pvedeck_support::sync::lock;

/// One writer at a time within the process.
static WRITING: Mutex<()> = Mutex::new(());

/// The host as `ssh` names it in the file: `ip`, or `[ip]:port`.
pub fn host_token(ip: Ipv4Addr, port: u16) -> String {
    if port == 22 {
        ip.to_string()
    } else {
        format!("[{ip}]:{port}")
    }
}

/// The recorded key (`type base64`) for a host.
pub fn lookup(file: &Path, token: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let hosts = words.next()?;
        hosts
            .split(',')
            .any(|h| h == token)
            .then(|| words.take(2).collect::<Vec<_>>().join(" "))
    })
}

/// `StrictHostKeyChecking` for a host: `yes` once its key is recorded,
/// `accept-new` (record it at first contact) before.
pub fn strictness(file: &Path, token: &str) -> &'static str {
    if lookup(file, token).is_some() {
        "yes"
    } else {
        "accept-new"
    }
}

/// Replaces what is recorded for `token` with `key` (or with nothing).
fn rewrite(file: &Path, token: &str, key: Option<&str>) -> std::io::Result<()> {
    let _one = lock(&WRITING);
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut kept: String = text
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .next()
                .is_none_or(|hosts| !hosts.split(',').any(|h| h == token))
        })
        .map(|line| format!("{line}\n"))
        .collect();
    if let Some(key) = key {
        kept.push_str(&format!("{token} {key}\n"));
    }
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(kept.as_bytes())?;
    tmp.persist(file).map_err(|e| e.error)?;
    Ok(())
}

/// A new VM at that address: the old one's key no longer applies.
pub fn forget(file: &Path, token: &str) -> std::io::Result<()> {
    rewrite(file, token, None)
}

/// The key a VM proved through its guest agent.
pub fn pin(file: &Path, token: &str, key: &str) -> std::io::Result<()> {
    rewrite(file, token, Some(key))
}

/// What `ssh` does with `StrictHostKeyChecking=accept-new` at first contact.
pub fn append(file: &Path, token: &str, key: &str) -> std::io::Result<()> {
    let _one = lock(&WRITING);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?;
    writeln!(f, "{token} {key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_recorded_found_replaced_and_forgotten_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        let a = host_token(Ipv4Addr::new(192, 168, 0, 106), 22);
        let b = host_token(Ipv4Addr::LOCALHOST, 2222);
        assert_eq!(
            (a.as_str(), b.as_str()),
            ("192.168.0.106", "[127.0.0.1]:2222")
        );
        assert_eq!(strictness(&file, &a), "accept-new");
        append(&file, &a, "ssh-ed25519 AAAA1").unwrap();
        pin(&file, &b, "ssh-ed25519 BBBB").unwrap();
        assert_eq!(lookup(&file, &a).as_deref(), Some("ssh-ed25519 AAAA1"));
        assert_eq!(strictness(&file, &b), "yes");
        pin(&file, &a, "ssh-ed25519 AAAA2").unwrap();
        assert_eq!(lookup(&file, &a).as_deref(), Some("ssh-ed25519 AAAA2"));
        forget(&file, &a).unwrap();
        assert_eq!(lookup(&file, &a), None);
        assert_eq!(lookup(&file, &b).as_deref(), Some("ssh-ed25519 BBBB"));
    }
}

/// Property tests: whatever the file holds (written by hand, by `ssh`, cut
/// short, not even UTF-8), a lookup answers without panicking, and a key
/// pinned or forgotten is found or not for its host alone.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use pvedeck_testkit::{config, output};

    const SEEDS: &[&str] = &[
        "192.168.0.106 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n\
         [127.0.0.1]:2222 ssh-ed25519 AAAA1 root@web1\n",
        "10.0.0.101,10.0.0.102 ecdsa-sha2-nistp256 AAAAE2VjZHNh\n# a comment\n\n\
         |1|hashed= ssh-rsa AAAAB3Nza\n@cert-authority *.example ssh-ed25519 AAAAC\n",
    ];

    fn token() -> impl Strategy<Value = String> {
        (any::<[u8; 4]>(), prop_oneof![Just(22u16), any::<u16>()])
            .prop_map(|(ip, port)| host_token(Ipv4Addr::from(ip), port))
    }

    /// `<type> <base64>`, as `ssh` records a key.
    fn key() -> impl Strategy<Value = String> {
        ("[a-z0-9-]{1,20}", "[A-Za-z0-9+/=]{1,80}").prop_map(|(t, b)| format!("{t} {b}"))
    }

    /// The file's text: anything, real entries edited, or entries for the
    /// hosts in play among others.
    fn contents(tokens: Vec<String>) -> impl Strategy<Value = String> {
        let entry = (
            prop::collection::vec(prop::sample::select(tokens), 1..3),
            key(),
            "[ \t]{0,2}",
        )
            .prop_map(|(hosts, key, pad)| format!("{pad}{} {key}\n", hosts.join(",")));
        prop_oneof![
            output(SEEDS),
            prop::collection::vec(entry, 0..6).prop_map(|e| e.concat()),
        ]
    }

    fn file_with(text: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        std::fs::write(&file, text).unwrap();
        (dir, file)
    }

    /// What a known-hosts line says about a host, if it names it.
    fn names(line: &str, host: &str) -> bool {
        line.split_whitespace()
            .next()
            .is_some_and(|hosts| hosts.split(',').any(|h| h == host))
    }

    proptest! {
        #![proptest_config(config(500))]

        #[test]
        fn a_lookup_reads_any_file(
            (a, b, text) in (token(), token()).prop_flat_map(|(a, b)| {
                (Just(a.clone()), Just(b.clone()), contents(vec![a, b, "10.0.0.1".into()]))
            }),
            bytes in prop::collection::vec(any::<u8>(), 0..200),
            odd in output(SEEDS),
        ) {
            let (_dir, file) = file_with(text.as_bytes());
            for host in [&a, &b, &odd] {
                match lookup(&file, host) {
                    Some(key) => {
                        let line = text.lines().find(|l| names(l, host));
                        let recorded = line.map(|l| l.split_whitespace().skip(1).take(2).collect::<Vec<_>>().join(" "));
                        prop_assert_eq!(recorded, Some(key));
                        prop_assert_eq!(strictness(&file, host), "yes");
                    }
                    None => {
                        prop_assert!(!text.lines().any(|l| names(l, host)));
                        prop_assert_eq!(strictness(&file, host), "accept-new");
                    }
                }
            }
            let (_dir, file) = file_with(&bytes);
            let _ = lookup(&file, &a);
        }

        #[test]
        fn a_pinned_key_is_found_and_a_forgotten_one_is_not(
            (a, b, text) in (token(), token()).prop_flat_map(|(a, b)| {
                (Just(a.clone()), Just(b.clone()), contents(vec![a, b, "10.0.0.1".into()]))
            }),
            new in key(),
        ) {
            prop_assume!(a != b);
            let (_dir, file) = file_with(text.as_bytes());
            let other = lookup(&file, &b);
            // Only a line naming both hosts is dropped for both.
            let shared = text.lines().any(|l| names(l, &a) && names(l, &b));
            pin(&file, &a, &new).unwrap();
            prop_assert_eq!(lookup(&file, &a), Some(new.clone()));
            if !shared {
                prop_assert_eq!(lookup(&file, &b), other.clone());
            }
            forget(&file, &a).unwrap();
            prop_assert_eq!(lookup(&file, &a), None);
            if !shared {
                prop_assert_eq!(lookup(&file, &b), other);
            }
            // `ssh`'s own record at first contact, to a file it wrote
            // (every line ended).
            append(&file, &a, &new).unwrap();
            prop_assert_eq!(lookup(&file, &a), Some(new));
        }
    }
}
