//! pvedeck's own SSH key: the one it puts into every VM and logs in with.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The public key files looked for, in order (as go-pve-qemu did).
const PUBLIC_KEYS: [&str; 3] = ["id_ed25519.pub", "id_rsa.pub", "id_ecdsa.pub"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPair {
    pub public: PathBuf,
    pub private: PathBuf,
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
pub async fn create(dir: &Path) -> Result<KeyPair, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let private = dir.join("id_ed25519");
    let out = tokio::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "pvedeck", "-f"])
        .arg(&private)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run ssh-keygen: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ssh-keygen failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    find(dir).ok_or_else(|| format!("ssh-keygen left no key in {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn creates_a_key_once_and_then_finds_it() {
        let dir = std::env::temp_dir().join(format!("pvedeck-sshkey-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
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
        assert!(err.contains("cannot create"), "{err}");
    }
}
