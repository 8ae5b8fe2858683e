//! VM disks with `qemu-img`, the tool Proxmox itself uses for file-based
//! storages: `qm importdisk` (convert), linked clones (a qcow2 overlay on
//! the template's disk), `qm disk resize`, removal.

use std::path::Path;
use std::process::Command;

use super::{MachineError, run};

/// A full, independent qcow2 copy of `src` (any format qemu-img reads),
/// as `qm importdisk` makes it. Written beside `dst` and renamed, so a
/// failed import leaves no half disk under the final name.
pub async fn import(src: &Path, dst: &Path) -> Result<(), MachineError> {
    let partial = dst.with_extension("partial");
    let mut cmd = Command::new("qemu-img");
    cmd.args(["convert", "-q", "-O", "qcow2"])
        .arg(src)
        .arg(&partial);
    if let Err(err) = run(cmd).await {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(err);
    }
    tokio::fs::rename(&partial, dst)
        .await
        .map_err(|e| MachineError::io(dst, e))
}

/// A linked clone: a qcow2 overlay whose unwritten blocks are read from
/// `base`. The base must never be written again while clones exist (a
/// Proxmox template's disk is read-only for that reason). `base` is
/// recorded as given: pass an absolute path.
pub async fn linked(base: &Path, dst: &Path) -> Result<(), MachineError> {
    let mut cmd = Command::new("qemu-img");
    cmd.args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(base)
        .arg(dst);
    run(cmd).await.map(drop)
}

/// Grows the disk to `bytes` (`qm disk resize`). The guest's filesystem
/// follows at its next boot: the image's root filesystem is the whole
/// disk and cloud-init's `resizefs` grows it.
pub async fn resize(disk: &Path, bytes: u64) -> Result<(), MachineError> {
    let mut cmd = Command::new("qemu-img");
    cmd.args(["resize", "-q", "-f", "qcow2"])
        .arg(disk)
        .arg(bytes.to_string());
    run(cmd).await.map(drop)
}

/// Removes a disk; one that is already gone is no error (the wanted state
/// holds).
pub async fn remove(disk: &Path) -> Result<(), MachineError> {
    match tokio::fs::remove_file(disk).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(MachineError::io(disk, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has_qemu_img() -> bool {
        Command::new("qemu-img").arg("--version").output().is_ok()
    }

    fn info(disk: &Path) -> serde_json::Value {
        let out = Command::new("qemu-img")
            .args(["info", "--output=json"])
            .arg(disk)
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }

    #[tokio::test]
    async fn import_link_resize_remove() {
        if !has_qemu_img() {
            eprintln!("qemu-img is not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("src.raw");
        std::fs::File::create(&raw)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let base = dir.path().join("base.qcow2");
        import(&raw, &base).await.unwrap();
        assert_eq!(info(&base)["format"], "qcow2");
        let clone = dir.path().join("clone.qcow2");
        linked(&base, &clone).await.unwrap();
        assert_eq!(info(&clone)["backing-filename"], base.display().to_string());
        resize(&clone, 4 << 20).await.unwrap();
        assert_eq!(info(&clone)["virtual-size"], 4 << 20);
        remove(&clone).await.unwrap();
        remove(&clone).await.unwrap();
        assert!(!clone.exists());
        let err = import(&dir.path().join("missing"), &clone)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, MachineError::Command { command, stderr, .. }
                if command.starts_with("qemu-img convert") && !stderr.is_empty()),
            "{err}"
        );
        assert!(!dir.path().join("clone.partial").exists());
    }
}
