//! The VM's disk, scsi0: its size as `qm config` shows it, and the install's
//! `qm resize` to a size, tried three times and read back (it exits 0 when
//! its task failed, docs/backends.md#how-qm-runs-tasks-and-exits).

use pvedeck_proxmox::PveError;
use pvedeck_proxmox::drive::drive_size;

use super::Engine;
use super::report::{Step, one_line};

/// Tries of `qm resize`, and the pause between them.
const RESIZE_TRIES: u32 = 3;
const RESIZE_PAUSE_MS: u64 = 5000;

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("scsi0 has no size in qm config")]
    NoSize,
    /// The size read back is not the one asked for; what `qm resize`
    /// printed, if anything, says why.
    #[error("scsi0 is not {size} after qm resize{}", why(.printed))]
    NotResized { size: String, printed: String },
    #[error("failed to resize disk: {0}")]
    Resize(Box<DiskError>),
    #[error(transparent)]
    Pve(#[from] PveError),
}

fn why(printed: &str) -> String {
    match one_line(printed) {
        p if p.is_empty() => String::new(),
        p => format!(": {p}"),
    }
}

impl Engine {
    /// `size=` of scsi0 in `qm config`, bytes.
    pub(super) async fn disk_size(&self, node: &str, vmid: u32) -> Result<u64, DiskError> {
        let config = self.proxmox.config(node, vmid).await?;
        config
            .get("scsi0")
            .and_then(|d| drive_size(d))
            .ok_or(DiskError::NoSize)
    }

    /// Whether scsi0 now has `bytes`, read back: `qm resize` and `qm disk
    /// resize` exit 0 when their task failed
    /// (docs/backends.md#how-qm-runs-tasks-and-exits). `printed` is what the
    /// command said besides, the reason when the size disagrees.
    pub(super) async fn resized_to(
        &self,
        node: &str,
        vmid: u32,
        bytes: u64,
        size: &str,
        printed: String,
    ) -> Result<(), DiskError> {
        if self.disk_size(node, vmid).await? == bytes {
            return Ok(());
        }
        Err(DiskError::NotResized {
            size: size.to_string(),
            printed,
        })
    }

    /// `qm resize <vmid> scsi0 <gb>G`, three tries five seconds apart, each
    /// confirmed by reading the size back.
    pub(super) async fn resize_to(
        &self,
        step: &Step<'_>,
        node: &str,
        vmid: u32,
        gb: u64,
    ) -> Result<(), DiskError> {
        let size = format!("{gb}G");
        let mut attempt = 1;
        loop {
            let result = match self.proxmox.resize(node, vmid, "scsi0", &size).await {
                Ok(printed) => match self.resized_to(node, vmid, gb << 30, &size, printed).await {
                    Ok(()) => return Ok(()),
                    Err(e) => e,
                },
                Err(e) => DiskError::Pve(e),
            };
            if attempt == RESIZE_TRIES {
                return Err(DiskError::Resize(Box::new(result)));
            }
            step.processing(format!(
                "[*] resize attempt {attempt} failed: {}; retrying in 5s",
                one_line(&result.to_string())
            ));
            self.clock.sleep(RESIZE_PAUSE_MS).await;
            attempt += 1;
        }
    }
}
