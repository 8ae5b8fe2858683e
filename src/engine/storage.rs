//! `preparation > checking storage pool` (docs/provisioning.md#storage-check):
//! `ASSIGN_STORAGE` must be listed by `pvesm status --content images` (so its
//! content allows disk images), active, and of a type that holds VM disks.

use pvedeck_proxmox::{PveError, StorageStatus};

use super::report::one_line;

/// Storage types a VM disk can be imported to.
const STORAGE_TYPES: [&str; 4] = ["dir", "zfspool", "lvmthin", "nfs"];

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage pool {0} does not exist or does not allow disk images (content 'images')")]
    Missing(String),
    #[error("storage pool {name} is {status}")]
    NotActive { name: String, status: String },
    #[error("storage pool {name} is of type {kind}, not one of: {}", STORAGE_TYPES.join(", "))]
    WrongType { name: String, kind: String },
    #[error("{}", one_line(&.0.to_string()))]
    Pve(#[from] PveError),
}

/// The rule, on `pvesm status` rows (the cluster snapshot's).
pub fn check(rows: &[StorageStatus], storage: &str) -> Result<(), StorageError> {
    let row = rows
        .iter()
        .find(|r| r.name == storage)
        .ok_or_else(|| StorageError::Missing(storage.to_string()))?;
    if row.status != "active" {
        return Err(StorageError::NotActive {
            name: storage.to_string(),
            status: row.status.clone(),
        });
    }
    if !STORAGE_TYPES.contains(&row.kind.as_str()) {
        return Err(StorageError::WrongType {
            name: storage.to_string(),
            kind: row.kind.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, kind: &str, status: &str) -> StorageStatus {
        StorageStatus {
            name: name.into(),
            kind: kind.into(),
            status: status.into(),
            total_kib: 1,
            used_kib: 0,
            avail_kib: 1,
        }
    }

    #[test]
    fn active_storages_of_disk_types_pass() {
        let rows = [
            row("local-zfs", "zfspool", "active"),
            row("nas", "nfs", "inactive"),
            row("iso", "cifs", "active"),
        ];
        assert!(check(&rows, "local-zfs").is_ok());
        let text = |s: &str| check(&rows, s).unwrap_err().to_string();
        assert_eq!(text("nas"), "storage pool nas is inactive");
        assert_eq!(
            text("gone"),
            "storage pool gone does not exist or does not allow disk images (content 'images')"
        );
        assert_eq!(
            text("iso"),
            "storage pool iso is of type cifs, not one of: dir, zfspool, lvmthin, nfs"
        );
    }
}
