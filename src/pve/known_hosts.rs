//! pvedeck's own known-hosts file (`DATA_DIR/known_hosts`), in OpenSSH's
//! format: a VM's host key recorded there (pinned from the guest agent, or
//! by `ssh` itself at first contact) is required of whoever answers at that
//! address later. Entries are written unhashed (`HashKnownHosts=no`) so
//! that pvedeck can find and replace them.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Mutex;

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
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
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
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
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
