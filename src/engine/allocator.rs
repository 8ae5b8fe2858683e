//! VMID allocation (SPEC §3.1). A VMID handed to an install stays reserved
//! inside the server until that install ends, so concurrent installs never
//! get the same one (go-pve-qemu raced here).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// Ids reserved by running installs.
#[derive(Default)]
pub struct Allocator {
    taken: Mutex<BTreeSet<u32>>,
}

/// An id held for an install; released when dropped.
pub struct Reservation {
    pub vmid: u32,
    allocator: Arc<Allocator>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.allocator.taken().remove(&self.vmid);
    }
}

impl Allocator {
    fn taken(&self) -> MutexGuard<'_, BTreeSet<u32>> {
        self.taken.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves `vmid` if no other install holds it.
    pub fn reserve(self: &Arc<Self>, vmid: u32) -> Option<Reservation> {
        self.taken().insert(vmid).then(|| Reservation {
            vmid,
            allocator: self.clone(),
        })
    }

    /// Reserves the first id of `candidates` that `free` does not exclude
    /// and no install holds.
    pub fn reserve_first(
        self: &Arc<Self>,
        candidates: impl IntoIterator<Item = u32>,
    ) -> Option<Reservation> {
        let mut taken = self.taken();
        let vmid = candidates.into_iter().find(|id| !taken.contains(id))?;
        taken.insert(vmid);
        Some(Reservation {
            vmid,
            allocator: self.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ids_are_skipped_until_released() {
        let a = Arc::new(Allocator::default());
        let first = a.reserve_first(100..=102).unwrap();
        let second = a.reserve_first(100..=102).unwrap();
        assert_eq!((first.vmid, second.vmid), (100, 101));
        assert!(a.reserve(100).is_none());
        drop(first);
        let again = a.reserve(100);
        assert_eq!(again.as_ref().map(|r| r.vmid), Some(100));
        let third = a.reserve_first(100..=102).unwrap();
        assert_eq!(third.vmid, 102);
        assert!(a.reserve_first(100..=102).is_none());
    }
}
