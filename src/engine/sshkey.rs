//! pvedeck's own SSH key, the one it puts into every VM and logs in with:
//! the `SSH preparation` stage of an install, and the `--sshkeys` file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tempfile::NamedTempFile;

use super::Engine;
use super::failure::{Cleanup, Failure};
use super::report::{Out, Step};

/// The public key files looked for, in order (as go-pve-qemu did).
const PUBLIC_KEYS: [&str; 3] = ["id_ed25519.pub", "id_rsa.pub", "id_ecdsa.pub"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPair {
    pub public: PathBuf,
    pub private: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot run ssh-keygen: {0}")]
    Spawn(std::io::Error),
    #[error("ssh-keygen failed: {0}")]
    Keygen(String),
    #[error("ssh-keygen left no key in {}", .0.display())]
    NoKey(PathBuf),
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub fn find(dir: &Path) -> Option<KeyPair> {
    PUBLIC_KEYS
        .iter()
        .map(|name| dir.join(name))
        .find_map(|public| {
            let private = public.with_extension("");
            (public.is_file() && private.is_file()).then_some(KeyPair { public, private })
        })
}

/// `ssh-keygen -t ed25519 -N '' -f <dir>/id_ed25519`.
pub async fn create(dir: &Path) -> Result<KeyPair, KeyError> {
    std::fs::create_dir_all(dir).map_err(|source| KeyError::Create {
        path: dir.to_path_buf(),
        source,
    })?;
    {
        use std::os::unix::fs::PermissionsExt;
        // Best effort: a directory we do not own keeps its mode.
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let private = dir.join("id_ed25519");
    let out = tokio::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "pvedeck", "-f"])
        .arg(&private)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(KeyError::Spawn)?;
    if !out.status.success() {
        return Err(KeyError::Keygen(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    find(dir).ok_or_else(|| KeyError::NoKey(dir.to_path_buf()))
}

fn read(path: &Path) -> Result<String, KeyError> {
    std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The file for `qm set --sshkeys`: pvedeck's key, the admin keys
/// (`ADMIN_PUBKEY_FILE`), the request's key, one per line. Created 0600
/// under a random name in `dir`; removed when dropped.
pub fn key_file(
    pair: &KeyPair,
    admin: Option<&Path>,
    request_key: Option<&str>,
    dir: &Path,
) -> Result<NamedTempFile, KeyError> {
    let mut text = read(&pair.public)?;
    if let Some(admin) = admin {
        text.push('\n');
        text.push_str(&read(admin)?);
    }
    if let Some(key) = request_key {
        text.push('\n');
        text.push_str(key);
    }
    let lines: String = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let create = |source| KeyError::Create {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(create)?;
    let mut file = tempfile::Builder::new()
        .prefix("sshkeys-")
        .suffix(".pub")
        .tempfile_in(dir)
        .map_err(create)?;
    file.write_all(lines.as_bytes())
        .and_then(|()| file.flush())
        .map_err(|source| KeyError::Write {
            path: file.path().to_path_buf(),
            source,
        })?;
    Ok(file)
}

impl Engine {
    /// Stage `SSH preparation`: pvedeck's key, created when there is none.
    pub(super) async fn ssh_key_stage(&self, out: Out<'_>) -> Result<KeyPair, Failure> {
        let dir = &self.config.ssh_key_dir;
        let step = Step::new(out, Some("SSH preparation"), "checking SSH key");
        step.processing("[*] SSH preparation");
        // Two installs must not both run ssh-keygen.
        let _one_at_a_time = self.key_lock.lock().await;
        if let Some(pair) = find(dir) {
            step.success(&format!(
                "[+] completed SSH preparation: {}",
                pair.public.display()
            ));
            return Ok(pair);
        }
        step.processing(format!("[*] no SSH key in {}", dir.display()));
        let step = Step::new(out, Some("SSH preparation"), "creating SSH key");
        step.processing("[*] create SSH key");
        let pair = create(dir).await.map_err(|e| {
            Failure::new(
                &step,
                format!("[-] failed to create SSH key: {e}"),
                Cleanup::Nothing,
            )
        })?;
        step.success(&format!(
            "[+] successfully created SSH key pair {}",
            pair.public.display()
        ));
        Ok(pair)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pvedeck-sshkey-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[tokio::test]
    async fn creates_a_key_once_and_then_finds_it() {
        let dir = temp("create");
        assert_eq!(find(&dir), None);
        let pair = create(&dir).await.unwrap();
        assert_eq!(find(&dir), Some(pair.clone()));
        let text = std::fs::read_to_string(&pair.public).unwrap();
        assert!(text.starts_with("ssh-ed25519 "), "{text}");
    }

    #[tokio::test]
    async fn an_unwritable_directory_is_an_error() {
        let err = create(Path::new("/proc/pvedeck-cannot-be-here"))
            .await
            .unwrap_err();
        assert!(err.to_string().starts_with("cannot create"), "{err}");
    }

    #[tokio::test]
    async fn the_key_file_is_private_holds_every_key_and_goes_away() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp("file");
        let pair = create(&dir.join("ssh")).await.unwrap();
        let admin = dir.join("admin.pub");
        std::fs::write(&admin, "ssh-ed25519 AAAAadmin admin@site\n\n").unwrap();
        let file = key_file(
            &pair,
            Some(&admin),
            Some("ssh-rsa AAAAuser me"),
            &dir.join("tmp"),
        )
        .unwrap();
        let path = file.path().to_path_buf();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1], "ssh-ed25519 AAAAadmin admin@site");
        assert_eq!(lines[2], "ssh-rsa AAAAuser me");
        drop(file);
        assert!(!path.exists());
    }
}
