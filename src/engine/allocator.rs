//! VMIDs and addresses (docs/provisioning.md#vmid-allocation), all of it: the
//! address a VMID gets, the ids `RESERVED` keeps for other hosts, the scan for
//! a free id, and the check of an id asked for. An id handed to an install
//! stays reserved inside the server until that install ends, so concurrent
//! installs never get the same one (go-pve-qemu raced here).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pvedeck_config::Config;
use pvedeck_domain::rules::VMID_ADDRESSES;
use pvedeck_proxmox::{PveError, Timed};
use pvedeck_support::sync::lock;

use super::EngineError;
use super::report::one_line;
use crate::jobs::Jobs;

/// Why no id could be found.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("no free VMID in {}-{}", .0.start(), .0.end())]
    NoneFree(RangeInclusive<u32>),
    #[error("{}", one_line(&.0.to_string()))]
    Pve(#[from] PveError),
}

pub struct Allocator {
    /// Whose VMIDs: reservations in a shared store are per cluster.
    cluster: String,
    gateway: Ipv4Addr,
    /// `ASSIGN_IP_START..=ASSIGN_IP_END`.
    range: RangeInclusive<u32>,
    /// `RESERVED`: id → label.
    reserved: BTreeMap<u32, String>,
    /// Ids held by running installs.
    taken: Mutex<BTreeSet<u32>>,
    /// Where replicas share a store: the ids held by every replica's
    /// installs, by lease.
    shared: Option<Arc<Jobs>>,
}

/// How long an allocation waits for its address probe. A host on the VMs'
/// network answers a connect within milliseconds; "nothing answers" takes
/// the whole 2 s connect timeout. So the id is handed out after this wait,
/// and the rest of the probe runs beside `qm create` and the disk import:
/// the install reads its end (`LateProbe`) before the VM gets the address.
pub const QUICK_ANSWER: Duration = Duration::from_millis(150);

/// A free id, and the address probe when it had not ended yet.
pub struct Allocation {
    pub reservation: Reservation,
    pub late: Option<LateProbe>,
}

/// An address probe still running when its id was handed out.
pub struct LateProbe {
    pub ip: Ipv4Addr,
    answer: tokio::task::JoinHandle<bool>,
}

impl LateProbe {
    /// Whether something answered at the address after all.
    pub async fn answered(self) -> bool {
        // The probe's task only ends early when the runtime shuts down.
        self.answer.await.unwrap_or(false)
    }

    /// Why VM `vmid` must not get the address, if something answered there.
    pub async fn stranger(self, port: u16, vmid: u32) -> Option<String> {
        let ip = self.ip;
        self.answered().await.then(|| {
            format!(
                "{ip} answers on port {port}: another host uses the address VM {vmid} would get"
            )
        })
    }
}

/// An id held for an install; released when dropped.
pub struct Reservation {
    pub vmid: u32,
    allocator: Arc<Allocator>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.allocator.taken().remove(&self.vmid);
        if let Some(jobs) = &self.allocator.shared {
            jobs.release_vmid(&self.allocator.cluster, self.vmid);
        }
    }
}

impl Allocator {
    pub fn new(config: &Config) -> Allocator {
        Allocator {
            cluster: config.cluster.clone(),
            gateway: config.gateway,
            range: u32::from(config.assign_ip_start)..=u32::from(config.assign_ip_end),
            reserved: config.reserved.clone(),
            taken: Mutex::new(BTreeSet::new()),
            shared: None,
        }
    }

    /// Whose VMIDs these are.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Reserves ids in `jobs`' store too, when replicas share it: an id
    /// one replica's install holds, no other replica's install gets.
    pub fn shared(mut self, jobs: Arc<Jobs>) -> Allocator {
        if jobs.store().shared() {
            self.shared = Some(jobs);
        }
        self
    }

    /// Whether the other replicas let this one hold `vmid` (always, alone).
    fn hold_shared(&self, vmid: u32) -> bool {
        match &self.shared {
            None => true,
            Some(jobs) => jobs.reserve_vmid(&self.cluster, vmid).unwrap_or_else(|e| {
                tracing::warn!(vmid, "cannot reserve the VMID in the database: {e}");
                false
            }),
        }
    }

    fn taken(&self) -> MutexGuard<'_, BTreeSet<u32>> {
        lock(&self.taken)
    }

    /// The address a VMID gets: the gateway's first three octets + the id.
    pub fn ip(&self, vmid: u32) -> Option<Ipv4Addr> {
        let last = u8::try_from(vmid).ok()?;
        let [a, b, c, _] = self.gateway.octets();
        Some(Ipv4Addr::new(a, b, c, last))
    }

    /// The address of a VM pvedeck acts on; ids above 255 have none.
    pub fn address(&self, vmid: u32) -> Result<Ipv4Addr, EngineError> {
        self.ip(vmid).ok_or_else(|| {
            EngineError::bad(format!("VM {vmid} has no address: ids above 255 have none"))
        })
    }

    /// The label of a reserved id.
    pub fn reserved(&self, vmid: u32) -> Option<&str> {
        self.reserved.get(&vmid).map(String::as_str)
    }

    pub fn reserved_ids(&self) -> impl Iterator<Item = (u32, &str)> {
        self.reserved
            .iter()
            .map(|(id, label)| (*id, label.as_str()))
    }

    /// Reserves `vmid` if no other install holds it.
    fn reserve(self: &Arc<Self>, vmid: u32) -> Option<Reservation> {
        let mut taken = self.taken();
        if taken.contains(&vmid) || !self.hold_shared(vmid) {
            return None;
        }
        taken.insert(vmid);
        Some(Reservation {
            vmid,
            allocator: self.clone(),
        })
    }

    /// Reserves the first id of `candidates` that no install holds.
    fn reserve_first(
        self: &Arc<Self>,
        candidates: impl IntoIterator<Item = u32>,
    ) -> Option<Reservation> {
        let mut taken = self.taken();
        let vmid = candidates
            .into_iter()
            .find(|id| !taken.contains(id) && self.hold_shared(*id))?;
        taken.insert(vmid);
        Some(Reservation {
            vmid,
            allocator: self.clone(),
        })
    }

    /// An id asked for must be one with an address (100-254) and one the
    /// range assigns (`ASSIGN_IP_START`..`ASSIGN_IP_END`).
    pub fn check_asked(&self, id: i64) -> Result<u32, EngineError> {
        let id = u32::try_from(id)
            .ok()
            .filter(|id| VMID_ADDRESSES.contains(id))
            .ok_or_else(|| {
                EngineError::bad(format!(
                    "id {id} is outside {}-{}",
                    VMID_ADDRESSES.start(),
                    VMID_ADDRESSES.end()
                ))
            })?;
        if self.range.contains(&id) {
            return Ok(id);
        }
        Err(EngineError::bad(format!(
            "id {id} is outside the assignable range {}-{}",
            self.range.start(),
            self.range.end()
        )))
    }

    /// An id asked for: go-pve-qemu used it unchecked; we refuse one that is
    /// reserved, exists, or is being installed.
    pub async fn reserve_explicit(
        self: &Arc<Self>,
        id: u32,
        proxmox: &Timed,
    ) -> Result<Reservation, EngineError> {
        if let Some(label) = self.reserved(id) {
            return Err(EngineError::bad(format!("id {id} is reserved ({label})")));
        }
        let vms = proxmox.cluster_vms().await?;
        if let Some(vm) = vms.iter().find(|vm| vm.vmid == id) {
            return Err(EngineError::Conflict(format!(
                "VM {id} already exists on node '{}'",
                vm.node
            )));
        }
        self.reserve(id)
            .ok_or_else(|| EngineError::Conflict(format!("VM {id} is being installed already")))
    }

    /// The first id of the range that no VM has, that is not reserved, and
    /// where nothing answers on `ssh_port` (where pvedeck will reach the VM)
    /// within `QUICK_ANSWER`, the rest of that probe in `late`.
    pub async fn allocate(
        self: &Arc<Self>,
        proxmox: &Arc<Timed>,
        ssh_port: u16,
    ) -> Result<Allocation, AllocError> {
        let vms = proxmox.cluster_vms().await?;
        let used: BTreeSet<u32> = vms.iter().map(|vm| vm.vmid).collect();
        let mut answered = BTreeSet::new();
        loop {
            let candidates = self.range.clone().filter(|id| {
                !used.contains(id) && !self.reserved.contains_key(id) && !answered.contains(id)
            });
            let reservation = self
                .reserve_first(candidates)
                .ok_or_else(|| AllocError::NoneFree(self.range.clone()))?;
            let Some(ip) = self.ip(reservation.vmid) else {
                return Err(AllocError::NoneFree(self.range.clone()));
            };
            let probe = proxmox.clone();
            let mut answer = tokio::spawn(async move { probe.probe(ip, ssh_port).await });
            match tokio::time::timeout(QUICK_ANSWER, &mut answer).await {
                Err(_) => {
                    let late = Some(LateProbe { ip, answer });
                    return Ok(Allocation { reservation, late });
                }
                Ok(Ok(false) | Err(_)) => {
                    return Ok(Allocation {
                        reservation,
                        late: None,
                    });
                }
                Ok(Ok(true)) => {}
            }
            tracing::info!(%ip, "VMID allocation: something answers on the SSH port, skipped");
            answered.insert(reservation.vmid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator(vars: &[(&str, &str)]) -> Arc<Allocator> {
        Arc::new(Allocator::new(
            &Config::from_vars(vars.iter().copied()).unwrap(),
        ))
    }

    #[test]
    fn reserved_ids_are_skipped_until_released() {
        let a = allocator(&[]);
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

    #[test]
    fn addresses_use_the_gateway_prefix() {
        let a = allocator(&[("GATEWAY", "10.1.2.254"), ("RESERVED", "120:router")]);
        assert_eq!(a.ip(101), Some(Ipv4Addr::new(10, 1, 2, 101)));
        assert_eq!(a.ip(300), None);
        assert!(a.address(300).is_err());
        assert_eq!(a.reserved(120), Some("router"));
    }

    #[test]
    fn an_id_asked_for_must_have_an_address_in_the_assignable_range() {
        let a = allocator(&[("ASSIGN_IP_START", "100"), ("ASSIGN_IP_END", "200")]);
        assert_eq!(a.check_asked(150).ok(), Some(150));
        let refused = |id| a.check_asked(id).unwrap_err().to_string();
        assert_eq!(
            refused(220),
            "id 220 is outside the assignable range 100-200"
        );
        assert_eq!(refused(99), "id 99 is outside 100-254");
        assert_eq!(refused(-5), "id -5 is outside 100-254");
        assert_eq!(refused(300), "id 300 is outside 100-254");
    }
}
