//! Quotas: what a user holds is what the cluster snapshot shows of their
//! VMs, plus what was admitted and is not in a snapshot yet (an install
//! running, a resize just made). Admissions take one lock, so that ten
//! installs at once by a user with two VMs left admit exactly two.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use pvedeck_config::Config;
use pvedeck_domain::account::{Quota, Usage, UserInfo};
use pvedeck_proxmox::VmResource;
use pvedeck_support::sync::lock;

use super::EngineError;
use super::directory::People;
use super::snapshot::Snapshot;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The quota that applies to `user`: their own over their groups' over
/// the default.
pub fn quota_of(config: &Config, user: &UserInfo) -> Quota {
    let groups = user
        .groups
        .iter()
        .filter_map(|g| config.quota_groups.get(g).copied())
        .reduce(Quota::wider)
        .unwrap_or(config.quota_default);
    user.quota.map_or(groups, |own| own.over(groups))
}

/// What a VM of the snapshot takes.
fn usage_of(vm: &VmResource) -> Usage {
    Usage {
        vms: 1,
        cores: u64::from(vm.maxcpu),
        memory_mib: vm.maxmem.div_ceil(MIB),
        disk_gib: vm.maxdisk.div_ceil(GIB),
    }
}

#[derive(Debug)]
struct Admitted {
    user: String,
    ask: Usage,
    /// The VM it is for, once known. For a whole VM (an install), the
    /// snapshot's figures of that VM are not counted beside it.
    vmid: Option<u32>,
    whole: bool,
    /// The install's job, while it runs.
    job: Option<u64>,
    /// When it was seen done: a snapshot taken after that shows what it
    /// made, and the admission goes.
    done: Option<Instant>,
}

/// A place in the ledger, for the caller to report on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

#[derive(Default)]
pub struct Ledger {
    admitted: Mutex<(u64, HashMap<u64, Admitted>)>,
}

impl Ledger {
    /// What `user` holds now as far as pvedeck can tell.
    fn used(
        admitted: &HashMap<u64, Admitted>,
        snapshot: &Snapshot,
        people: &People,
        user: &str,
    ) -> Usage {
        let theirs: Vec<&Admitted> = admitted.values().filter(|a| a.user == user).collect();
        let counted_whole = |vmid: u32| theirs.iter().any(|a| a.whole && a.vmid == Some(vmid));
        let in_snapshot = snapshot
            .vms
            .iter()
            .filter(|vm| vm.is_qemu() && !vm.template)
            .filter(|vm| people.owners.get(&vm.vmid).is_some_and(|o| o == user))
            .filter(|vm| !counted_whole(vm.vmid))
            .fold(Usage::default(), |sum, vm| sum.plus(usage_of(vm)));
        theirs
            .iter()
            .fold(in_snapshot, |sum, admitted| sum.plus(admitted.ask))
    }

    /// Drops what a snapshot taken after it was done already shows.
    fn settle(
        admitted: &mut HashMap<u64, Admitted>,
        snapshot: &Snapshot,
        running: &dyn Fn(u64) -> bool,
    ) {
        let now = Instant::now();
        for a in admitted.values_mut() {
            if a.done.is_none() && a.job.is_some_and(|job| !running(job)) {
                a.done = Some(now);
            }
        }
        admitted.retain(|_, a| a.done.is_none_or(|done| snapshot.taken <= done));
    }

    /// Admits `ask` for `user` under `quota`, or refuses naming the limit
    /// (403).
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &self,
        snapshot: &Snapshot,
        people: &People,
        user: &str,
        quota: Quota,
        ask: Usage,
        vmid: Option<u32>,
        whole: bool,
        running: &dyn Fn(u64) -> bool,
    ) -> Result<Ticket, EngineError> {
        let mut guard = lock(&self.admitted);
        let (next, admitted) = &mut *guard;
        Ledger::settle(admitted, snapshot, running);
        // A resize's VM is in `used` already: its ask is what it adds.
        let used = Ledger::used(admitted, snapshot, people, user);
        if let Some(refusal) = used.exceeds(ask, quota) {
            return Err(EngineError::Forbidden(refusal));
        }
        *next += 1;
        admitted.insert(
            *next,
            Admitted {
                user: user.to_string(),
                ask,
                vmid,
                whole,
                job: None,
                done: None,
            },
        );
        Ok(Ticket(*next))
    }

    /// The install admitted runs as job `job`.
    pub fn running_as(&self, ticket: Ticket, job: u64) {
        if let Some(a) = lock(&self.admitted).1.get_mut(&ticket.0) {
            a.job = Some(job);
        }
    }

    /// The VM an admitted install makes.
    pub fn for_vm(&self, job: u64, vmid: u32) {
        for a in lock(&self.admitted).1.values_mut() {
            if a.job == Some(job) {
                a.vmid = Some(vmid);
            }
        }
    }

    /// What was admitted is done (a snapshot from now on shows it).
    pub fn done(&self, ticket: Ticket) {
        if let Some(a) = lock(&self.admitted).1.get_mut(&ticket.0) {
            a.done = Some(Instant::now());
        }
    }

    /// What was admitted did not happen.
    pub fn cancel(&self, ticket: Ticket) {
        lock(&self.admitted).1.remove(&ticket.0);
    }

    /// What `user` holds, for the create form and the account page.
    pub fn usage(
        &self,
        snapshot: &Snapshot,
        people: &People,
        user: &str,
        running: &dyn Fn(u64) -> bool,
    ) -> Usage {
        let mut guard = lock(&self.admitted);
        Ledger::settle(&mut guard.1, snapshot, running);
        Ledger::used(&guard.1, snapshot, people, user)
    }
}

#[cfg(test)]
mod tests {
    use pvedeck_domain::account::Role;

    use super::*;

    fn vm(vmid: u32, cores: u32) -> VmResource {
        VmResource {
            vmid,
            kind: "qemu".into(),
            maxcpu: cores,
            maxmem: 2 * GIB,
            maxdisk: 10 * GIB,
            ..VmResource::default()
        }
    }

    #[test]
    fn admissions_count_what_runs_and_what_the_snapshot_shows_once() {
        let people = People {
            owners: [(101, "alice".to_string()), (102, "bob".to_string())].into(),
            ..People::default()
        };
        let quota = Quota::parse("vms=3,cores=8,memory=100,disk=100").unwrap();
        let ledger = Ledger::default();
        let one = Usage {
            vms: 1,
            cores: 2,
            memory_mib: 2048,
            disk_gib: 10,
        };
        let before = Snapshot::of(vec![vm(101, 2), vm(102, 2)]);
        let running = |_: u64| true;
        let admitted: Vec<_> = (0..10)
            .map(|_| ledger.admit(&before, &people, "alice", quota, one, None, true, &running))
            .collect();
        assert_eq!(
            admitted.iter().filter(|a| a.is_ok()).count(),
            2,
            "two VMs left"
        );
        let refused = admitted.iter().find_map(|a| a.as_ref().err()).unwrap();
        assert_eq!(refused.to_string(), "quota: vms 3 of 3 used, 1 more asked");
        let first = *admitted[0].as_ref().unwrap();
        let second = *admitted[1].as_ref().unwrap();
        ledger.running_as(first, 7);
        ledger.for_vm(7, 103);
        ledger.cancel(second);
        // Job 7 made VM 103, and ended; a snapshot taken before its end
        // does not show it, so its admission still counts.
        let mut owners = people.owners.clone();
        owners.insert(103, "alice".into());
        let people = People { owners, ..people };
        let ended = |_: u64| false;
        assert_eq!(ledger.usage(&before, &people, "alice", &ended).vms, 2);
        // A later one shows it: counted once, from the snapshot — while
        // the job still runs, too.
        let after = Snapshot::of(vec![vm(101, 2), vm(102, 2), vm(103, 2)]);
        assert_eq!(ledger.usage(&after, &people, "alice", &running).vms, 2);
        assert_eq!(
            ledger.usage(&after, &people, "alice", &ended),
            Usage {
                vms: 2,
                cores: 4,
                memory_mib: 4096,
                disk_gib: 20
            }
        );
        // A resize adds what it asks beyond what the VM has.
        let more = Usage {
            cores: 5,
            ..Usage::default()
        };
        let refused = ledger
            .admit(
                &after,
                &people,
                "alice",
                quota,
                more,
                Some(101),
                false,
                &ended,
            )
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "quota: cores 4 of 8 used, 5 more asked"
        );
        let user = UserInfo {
            name: "alice".into(),
            role: Role::User,
            groups: vec!["big".into(), "small".into()],
            quota: Some(Quota::parse("vms=1").unwrap()),
            source: "local".into(),
            created: 0,
        };
        let mut config = Config::from_vars([
            ("QUOTA_GROUP_big", "cores=64"),
            ("QUOTA_GROUP_small", "cores=2,disk=1000"),
        ])
        .unwrap();
        assert_eq!(
            quota_of(&config, &user).text(),
            "vms=1,cores=64,memory=32,disk=1000"
        );
        config.quota_groups.clear();
        assert_eq!(
            quota_of(&config, &user).text(),
            "vms=1,cores=16,memory=32,disk=500"
        );
    }
}
