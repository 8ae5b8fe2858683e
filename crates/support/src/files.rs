//! Files that are never seen half-written, and directories only their
//! owner reads.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Writes `bytes` to `file` whole or not at all, readable by its owner
/// only (0600): a reader (another process of the simulator, a restart)
/// sees the old content or the new, never a part, and a secret in it is
/// never readable by others, not even for a moment.
///
/// The content goes to a temporary file beside `file` first (same
/// directory, so the rename stays on one file system) and is renamed over
/// it; the parent directory is created when missing.
pub fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    // The process id keeps two processes writing the same file apart.
    name.push(format!(".tmp{}", std::process::id()));
    let tmp = file.with_file_name(name);
    let written = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, file));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Creates `dir` (and its parents) readable by its owner only (0700). A
/// directory that exists keeps its mode: that is an admin's choice.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Creates `dir` like [`private_dir`] for a directory that holds secrets
/// (a private key, a token): one that exists is made 0700 too, whatever
/// mode an older version or a careless umask left it with.
pub fn secret_dir(dir: &Path) -> std::io::Result<()> {
    private_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_file_is_replaced_whole_and_kept_private() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("deep/state.json");
        write_atomically(&file, b"first").expect("write");
        write_atomically(&file, b"second").expect("rewrite");
        assert_eq!(std::fs::read(&file).expect("read"), b"second");
        assert_eq!(mode(&file), 0o600);
        let left: Vec<_> = std::fs::read_dir(file.parent().expect("parent"))
            .expect("list")
            .collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_new_directory_is_private_and_an_old_one_keeps_its_mode() {
        let dir = tempfile::tempdir().expect("temp dir");
        let new = dir.path().join("a/b");
        private_dir(&new).expect("create");
        assert_eq!(mode(&new), 0o700);
        let old = dir.path().join("old");
        std::fs::create_dir(&old).expect("create");
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        private_dir(&old).expect("exists");
        assert_eq!(mode(&old), 0o750);
    }

    #[test]
    fn a_secret_directory_is_private_even_when_it_existed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let new = dir.path().join("a/api");
        secret_dir(&new).expect("create");
        assert_eq!(mode(&new), 0o700);
        std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        secret_dir(&new).expect("exists");
        assert_eq!(mode(&new), 0o700);
    }
}
