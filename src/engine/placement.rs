//! Placement (docs/provisioning.md#placement): an install with
//! `"node":"auto"` goes to the online node with the most free memory that
//! has the target storage and stays within `MAX_OVERCOMMIT`.
//!
//! The rule is [`place`], a pure function over candidate nodes, so that
//! candidates from another cluster can be fed to it as they are. What the
//! engine adds is how candidates are read — the cluster snapshot, each
//! node's storages, and the installs this server has placed whose VMs the
//! snapshot does not count yet ([`Ledger`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pvedeck_domain::request::InstallRequest;
use pvedeck_proxmox::{NodeResource, StorageStatus, VmResource};
use pvedeck_support::sync::lock;

use super::report::one_line;
use super::snapshot::Snapshot;
use super::{Engine, EngineError};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A node as placement judges it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub node: String,
    pub online: bool,
    /// Why the target storage cannot take the VM's disk there, if it cannot.
    pub storage: Option<String>,
    /// Bytes of memory and logical CPUs the node has.
    pub memory: u64,
    pub cores: u64,
    /// Bytes free once its own use, its running VMs (at the memory they
    /// are given) and the installs in flight to it are taken off; below
    /// zero where those already pass its memory.
    pub free: i64,
    /// What every VM on it (running or not) and the installs in flight to
    /// it are given: bytes of memory and vCPUs.
    pub assigned_memory: u64,
    pub assigned_cores: u64,
}

/// What the new VM asks for: bytes of memory, vCPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub memory: u64,
    pub cores: u64,
}

/// Why a node cannot take the VM, in the order they are checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Limit {
    Offline,
    Storage(String),
    /// Memory the node's VMs would be given with the new one, against
    /// what `MAX_OVERCOMMIT` allows there.
    Memory {
        after: u64,
        allowed: u64,
    },
    Cores {
        after: u64,
        allowed: u64,
    },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Offline => f.write_str("offline"),
            Limit::Storage(why) => f.write_str(why),
            Limit::Memory { after, allowed } => write!(
                f,
                "memory: its VMs would be given {} GiB, above the {} GiB MAX_OVERCOMMIT allows",
                gib(*after),
                gib(*allowed)
            ),
            Limit::Cores { after, allowed } => write!(
                f,
                "cores: its VMs would have {after} vCPUs, above the {allowed} MAX_OVERCOMMIT allows"
            ),
        }
    }
}

/// The node chosen, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub node: String,
    /// Its free memory before the new VM, and its memory (bytes).
    pub free: i64,
    pub memory: u64,
    /// How many nodes could take the VM, of how many.
    pub fitting: usize,
    pub of: usize,
    /// The nodes that could not, and why.
    pub ruled_out: Vec<(String, Limit)>,
}

impl Choice {
    /// The timeline's words: `placed on pve2: 41 GiB free of 64, most of
    /// 3 nodes`.
    pub fn summary(&self) -> String {
        let among = match (self.fitting, self.of) {
            (_, 1) => "the only node".to_string(),
            (1, of) => format!("the only one of {of} nodes that fits"),
            (fitting, of) if fitting == of => format!("most of {of} nodes"),
            (fitting, of) => format!("most of the {fitting} of {of} nodes that fit"),
        };
        format!(
            "placed on {}: {} GiB free of {}, {among}",
            self.node,
            signed_gib(self.free),
            gib(self.memory)
        )
    }
}

/// No node can take the VM: the tightest limit is the one that ruled out
/// the online node with the most free memory.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct NoFit {
    pub ask: Ask,
    /// Every node and its limit, the one with the most free memory first.
    pub ruled_out: Vec<(String, Limit)>,
}

impl fmt::Display for NoFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no node can take the VM ({} vCPU, {} MB): ",
            self.ask.cores,
            self.ask.memory / MIB
        )?;
        if self.ruled_out.is_empty() {
            return f.write_str("the cluster lists no node");
        }
        let all: Vec<String> = self
            .ruled_out
            .iter()
            .map(|(node, limit)| format!("{node}: {limit}"))
            .collect();
        f.write_str(&all.join("; "))
    }
}

/// GiB with one decimal where it has one (`41`, `59.3`).
fn gib(bytes: u64) -> String {
    let tenths = (bytes * 10 + GIB / 2) / GIB;
    match tenths % 10 {
        0 => (tenths / 10).to_string(),
        d => format!("{}.{d}", tenths / 10),
    }
}

fn signed_gib(bytes: i64) -> String {
    match u64::try_from(bytes) {
        Ok(b) => gib(b),
        Err(_) => format!("-{}", gib(bytes.unsigned_abs())),
    }
}

/// Whether `after` stays within `ratio` × `total`.
fn within(after: u64, total: u64, ratio: f64) -> Result<(), u64> {
    let allowed = (ratio * total as f64).floor() as u64;
    if after <= allowed {
        Ok(())
    } else {
        Err(allowed)
    }
}

/// The first limit that rules `c` out for `ask`, if any.
fn limit(c: &Candidate, ask: Ask, ratio: f64) -> Option<Limit> {
    if !c.online {
        return Some(Limit::Offline);
    }
    if let Some(why) = &c.storage {
        return Some(Limit::Storage(why.clone()));
    }
    let memory = c.assigned_memory.saturating_add(ask.memory);
    if let Err(allowed) = within(memory, c.memory, ratio) {
        return Some(Limit::Memory {
            after: memory,
            allowed,
        });
    }
    let cores = c.assigned_cores.saturating_add(ask.cores);
    if let Err(allowed) = within(cores, c.cores, ratio) {
        return Some(Limit::Cores {
            after: cores,
            allowed,
        });
    }
    None
}

/// The rule: of the candidates that are online, have the storage and stay
/// within `ratio` for memory and cores with the new VM, the one with the
/// most free memory; a tie goes to the fewer vCPUs given, then the name
/// (so the same cluster always places the same way).
pub fn place(candidates: &[Candidate], ask: Ask, ratio: f64) -> Result<Choice, NoFit> {
    let mut ranked: Vec<&Candidate> = candidates.iter().collect();
    // Most free memory first; offline nodes last (their figures mean nothing).
    ranked.sort_by(|a, b| {
        b.online
            .cmp(&a.online)
            .then(b.free.cmp(&a.free))
            .then(a.assigned_cores.cmp(&b.assigned_cores))
            .then(a.node.cmp(&b.node))
    });
    let judged: Vec<(&Candidate, Option<Limit>)> =
        ranked.iter().map(|c| (*c, limit(c, ask, ratio))).collect();
    let ruled_out: Vec<(String, Limit)> = judged
        .iter()
        .filter_map(|(c, l)| l.clone().map(|l| (c.node.clone(), l)))
        .collect();
    let fitting = judged.iter().filter(|(_, l)| l.is_none()).count();
    match judged.iter().find(|(_, l)| l.is_none()) {
        Some((best, _)) => Ok(Choice {
            node: best.node.clone(),
            free: best.free,
            memory: best.memory,
            fitting,
            of: candidates.len(),
            ruled_out,
        }),
        None => Err(NoFit { ask, ruled_out }),
    }
}

/// An install placed by this server, until its job ends.
#[derive(Debug)]
struct Held {
    node: String,
    ask: Ask,
    /// Its VM, once the install has an id: from then on the snapshot's
    /// figures of that VM are counted instead.
    vmid: Option<u32>,
}

/// The installs in flight: placed, and not (or not wholly) in the
/// snapshot yet. Placing takes its lock, so that installs placed at once
/// each see the others.
#[derive(Debug, Default)]
pub struct Ledger {
    held: Mutex<(u64, HashMap<u64, Held>)>,
}

/// A place held for an install; dropping it (the job's end) gives it back.
#[derive(Debug)]
pub struct Hold {
    id: u64,
    ledger: Arc<Ledger>,
}

impl Hold {
    /// The VM the install makes.
    pub fn for_vm(&self, vmid: u32) {
        if let Some(held) = lock(&self.ledger.held).1.get_mut(&self.id) {
            held.vmid = Some(vmid);
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        lock(&self.ledger.held).1.remove(&self.id);
    }
}

fn counted(vm: &VmResource) -> bool {
    !vm.template
}

/// The candidates the snapshot shows, with the installs in flight taken
/// off. `storage` is what each node's `pvesm status` says of the target
/// storage (`None` where it can take the disk).
fn candidates(
    snapshot: &Snapshot,
    held: &HashMap<u64, Held>,
    storage: &dyn Fn(&str) -> Option<String>,
) -> Vec<Candidate> {
    snapshot
        .nodes
        .iter()
        .map(|n| candidate(n, &snapshot.vms, held, storage))
        .collect()
}

fn candidate(
    n: &NodeResource,
    vms: &[VmResource],
    held: &HashMap<u64, Held>,
    storage: &dyn Fn(&str) -> Option<String>,
) -> Candidate {
    let online = n.status == "online";
    let on: Vec<&VmResource> = vms
        .iter()
        .filter(|vm| vm.node == n.node && counted(vm))
        .collect();
    let running: Vec<&&VmResource> = on.iter().filter(|vm| vm.status == "running").collect();
    let memory = n.maxmem.unwrap_or(0);
    // What the node uses besides its guests (the host, its page cache):
    // its use less what its running guests use now.
    let guests_use: u64 = running.iter().map(|vm| vm.mem).sum();
    let host = n.mem.unwrap_or(0).saturating_sub(guests_use);
    // A running VM may grow to what it is given: it counts at that.
    let given_running: u64 = running.iter().map(|vm| vm.maxmem).sum();
    let mut assigned_memory: u64 = on.iter().map(|vm| vm.maxmem).sum();
    let mut assigned_cores: u64 = on.iter().map(|vm| u64::from(vm.maxcpu)).sum();
    let mut in_flight_running = 0u64;
    for h in held.values().filter(|h| h.node == n.node) {
        let shown = h
            .vmid
            .and_then(|id| on.iter().find(|vm| vm.vmid == id).copied());
        match shown {
            // The snapshot has it running: counted above, at its size.
            Some(vm) if vm.status == "running" => {}
            // Made, not started: its size counts, its memory is still to come.
            Some(_) => in_flight_running += h.ask.memory,
            None => {
                in_flight_running += h.ask.memory;
                assigned_memory += h.ask.memory;
                assigned_cores += h.ask.cores;
            }
        }
    }
    let taken = host
        .saturating_add(given_running)
        .saturating_add(in_flight_running);
    let free = i64::try_from(memory)
        .unwrap_or(i64::MAX)
        .saturating_sub(i64::try_from(taken).unwrap_or(i64::MAX));
    Candidate {
        node: n.node.clone(),
        online,
        storage: if online { storage(&n.node) } else { None },
        memory,
        cores: u64::from(n.maxcpu.unwrap_or(0)),
        free,
        assigned_memory,
        assigned_cores,
    }
}

/// A placement made and held.
#[derive(Debug)]
pub struct Placed {
    pub choice: Choice,
    /// The storages of the chosen node, for the install's storage check.
    pub storages: Vec<StorageStatus>,
    pub hold: Hold,
}

/// Places `ask` on the nodes of `snapshot`, holding the place until the
/// returned [`Hold`] is dropped. `storages` are each online node's
/// `pvesm status --content images` (or why it could not be read).
pub fn place_held(
    ledger: &Arc<Ledger>,
    snapshot: &Snapshot,
    storages: &HashMap<String, Result<Vec<StorageStatus>, String>>,
    target: &str,
    ask: Ask,
    ratio: f64,
) -> Result<Placed, NoFit> {
    let storage_limit = |node: &str| match storages.get(node) {
        None => Some(format!("storage pool {target} was not read")),
        Some(Err(why)) => Some(format!("storage pool {target} {why}")),
        Some(Ok(rows)) => super::storage::check(rows, target)
            .err()
            .map(|e| e.to_string()),
    };
    let mut guard = lock(&ledger.held);
    let (next, held) = &mut *guard;
    let choice = place(&candidates(snapshot, held, &storage_limit), ask, ratio)?;
    *next += 1;
    held.insert(
        *next,
        Held {
            node: choice.node.clone(),
            ask,
            vmid: None,
        },
    );
    let rows = match storages.get(&choice.node) {
        Some(Ok(rows)) => rows.clone(),
        _ => Vec::new(),
    };
    Ok(Placed {
        choice,
        storages: rows,
        hold: Hold {
            id: *next,
            ledger: ledger.clone(),
        },
    })
}

/// Each online node's storages, as read for one snapshot: the installs
/// placed against that snapshot share one round of `pvesm status`.
type Storages = HashMap<String, Result<Vec<StorageStatus>, String>>;

#[derive(Default)]
pub struct StorageReads {
    last: tokio::sync::Mutex<Option<(Instant, Arc<Storages>)>>,
}

impl Engine {
    /// Places an install that asked for `"node":"auto"`, before its job
    /// exists: when no node fits, 409 naming why, and nothing is made.
    /// The sizes are the ones its validation step will settle on.
    pub(super) async fn place(&self, req: &InstallRequest) -> Result<Placed, EngineError> {
        let limits = &self.config.limits;
        let ask = Ask {
            memory: limits.clamp_ram(req.ram).value().saturating_mul(MIB),
            cores: u64::from(limits.clamp_cpu(req.cpu).value()),
        };
        // With the changes this server made: its own installs' VMs are in it.
        let view = self.cluster.read().await?;
        let storages = self.node_storages(&view.snapshot).await;
        place_held(
            &self.placements,
            &view.snapshot,
            &storages,
            &self.config.assign_storage,
            ask,
            self.config.max_overcommit,
        )
        .map_err(|e| EngineError::Conflict(e.to_string()))
    }

    /// How much memory the node an auto install would be placed on has
    /// free: which of several clusters has the most room. Nothing is held.
    pub(super) async fn room_for(&self, req: &InstallRequest) -> Result<i64, EngineError> {
        let placed = self.place(req).await?;
        Ok(placed.choice.free)
    }

    /// `pvesm status --content images` of every online node: the main
    /// node's from the snapshot, the others' read once per snapshot.
    async fn node_storages(&self, snapshot: &Snapshot) -> Arc<Storages> {
        let mut last = self.storage_reads.last.lock().await;
        if let Some((taken, storages)) = last.as_ref()
            && *taken == snapshot.taken
        {
            return storages.clone();
        }
        let online = snapshot.nodes.iter().filter(|n| n.status == "online");
        let reads = online.map(|n| async move {
            let rows = if n.node == self.config.main_node {
                Ok(snapshot.storages.clone())
            } else {
                self.proxmox
                    .storage_status(&n.node)
                    .await
                    .map_err(|e| format!("cannot be read: {}", one_line(&e.to_string())))
            };
            (n.node.clone(), rows)
        });
        let read: Storages = futures_util::future::join_all(reads)
            .await
            .into_iter()
            .collect();
        let read = Arc::new(read);
        *last = Some((snapshot.taken, read.clone()));
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, memory_gib: u64, free_gib: i64, given_gib: u64) -> Candidate {
        Candidate {
            node: name.into(),
            online: true,
            storage: None,
            memory: memory_gib * GIB,
            cores: 16,
            free: free_gib * GIB as i64,
            assigned_memory: given_gib * GIB,
            assigned_cores: 4,
        }
    }

    const SMALL: Ask = Ask {
        memory: 2 * GIB,
        cores: 2,
    };

    #[test]
    fn the_node_with_the_most_free_memory_wins() {
        let nodes = [
            node("pve1", 128, 30, 90),
            node("pve2", 64, 41, 20),
            node("pve3", 32, 20, 10),
        ];
        let choice = place(&nodes, SMALL, 1.0).unwrap();
        assert_eq!(choice.node, "pve2");
        assert_eq!(
            choice.summary(),
            "placed on pve2: 41 GiB free of 64, most of 3 nodes"
        );
        assert!(choice.ruled_out.is_empty());
    }

    #[test]
    fn each_limit_rules_a_node_out_and_the_next_best_is_taken() {
        let mut offline = node("pve1", 128, 100, 10);
        offline.online = false;
        let mut no_storage = node("pve2", 64, 60, 0);
        no_storage.storage = Some("storage pool local-zfs is inactive".into());
        // 62 GiB given of 64: 2 more pass, 4 do not.
        let full = node("pve3", 64, 50, 62);
        let mut busy = node("pve4", 64, 40, 0);
        busy.assigned_cores = 15;
        let fits = node("pve5", 32, 10, 0);
        let nodes = [offline, no_storage, full, busy, fits];
        let ask = Ask {
            memory: 4 * GIB,
            cores: 2,
        };
        let choice = place(&nodes, ask, 1.0).unwrap();
        assert_eq!(choice.node, "pve5");
        assert_eq!(
            choice.summary(),
            "placed on pve5: 10 GiB free of 32, the only one of 5 nodes that fits"
        );
        let why: Vec<String> = choice
            .ruled_out
            .iter()
            .map(|(n, l)| format!("{n}: {l}"))
            .collect();
        assert_eq!(
            why,
            [
                "pve2: storage pool local-zfs is inactive",
                "pve3: memory: its VMs would be given 66 GiB, above the 64 GiB MAX_OVERCOMMIT allows",
                "pve4: cores: its VMs would have 17 vCPUs, above the 16 MAX_OVERCOMMIT allows",
                "pve1: offline",
            ]
        );
        // A ratio above 1 lets the fuller nodes take it.
        assert_eq!(place(&nodes, ask, 1.5).unwrap().node, "pve3");
    }

    #[test]
    fn no_fit_names_the_limit_of_the_best_node_first() {
        let nodes = [node("pve2", 64, 41, 20), node("pve1", 128, 60, 120)];
        let huge = Ask {
            memory: 100 * GIB,
            cores: 2,
        };
        let refused = place(&nodes, huge, 1.0).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "no node can take the VM (2 vCPU, 102400 MB): \
             pve1: memory: its VMs would be given 220 GiB, above the 128 GiB MAX_OVERCOMMIT allows; \
             pve2: memory: its VMs would be given 120 GiB, above the 64 GiB MAX_OVERCOMMIT allows"
        );
        assert_eq!(
            place(&[], SMALL, 1.0).unwrap_err().to_string(),
            "no node can take the VM (2 vCPU, 2048 MB): the cluster lists no node"
        );
    }

    #[test]
    fn ties_go_to_fewer_vcpus_then_the_name() {
        let mut a = node("pve2", 64, 40, 0);
        let b = node("pve1", 64, 40, 0);
        assert_eq!(
            place(&[a.clone(), b.clone()], SMALL, 1.0).unwrap().node,
            "pve1"
        );
        a.assigned_cores = 0;
        assert_eq!(place(&[b, a], SMALL, 1.0).unwrap().node, "pve2");
    }

    #[test]
    fn exactly_the_ratio_is_within_it() {
        // 14 GiB given + 2 = 16 of 16 GiB: allowed at 1.0, not at 0.9.
        let n = node("pve1", 16, 2, 14);
        assert!(place(std::slice::from_ref(&n), SMALL, 1.0).is_ok());
        assert!(place(&[n], SMALL, 0.9).is_err());
    }

    fn resource(
        vmid: u32,
        node: &str,
        running: bool,
        given_gib: u64,
        using_gib: u64,
    ) -> VmResource {
        VmResource {
            vmid,
            node: node.into(),
            kind: "qemu".into(),
            status: if running { "running" } else { "stopped" }.into(),
            maxcpu: 2,
            maxmem: given_gib * GIB,
            mem: using_gib * GIB,
            ..VmResource::default()
        }
    }

    #[test]
    fn installs_in_flight_count_until_the_snapshot_shows_their_vm_running() {
        let pve1 = NodeResource {
            node: "pve1".into(),
            status: "online".into(),
            maxcpu: Some(8),
            maxmem: Some(64 * GIB),
            // 4 GiB of host, 1 of the running VM's own use.
            mem: Some(5 * GIB),
            ..NodeResource::default()
        };
        let mut snapshot = Snapshot::of(vec![
            resource(101, "pve1", true, 8, 1),
            resource(102, "pve1", false, 16, 0),
        ]);
        snapshot.nodes = vec![pve1];
        let none = |_: &str| None;
        let mut held = HashMap::new();
        let c = &candidates(&snapshot, &held, &none)[0];
        // 64 − 4 (host) − 8 (the running VM, at its size) = 52.
        assert_eq!(c.free, 52 * GIB as i64);
        assert_eq!((c.assigned_memory, c.assigned_cores), (24 * GIB, 4));

        let ask = Ask {
            memory: 4 * GIB,
            cores: 2,
        };
        held.insert(
            1,
            Held {
                node: "pve1".into(),
                ask,
                vmid: None,
            },
        );
        let c = &candidates(&snapshot, &held, &none)[0];
        assert_eq!(c.free, 48 * GIB as i64);
        assert_eq!((c.assigned_memory, c.assigned_cores), (28 * GIB, 6));

        // Made, not running: counted once in what is given; its memory
        // still to come.
        held.get_mut(&1).unwrap().vmid = Some(103);
        snapshot.vms.push(resource(103, "pve1", false, 4, 0));
        let c = &candidates(&snapshot, &held, &none)[0];
        assert_eq!(c.free, 48 * GIB as i64);
        assert_eq!((c.assigned_memory, c.assigned_cores), (28 * GIB, 6));

        // Running: the snapshot counts it, the ledger no more.
        snapshot.vms.pop();
        snapshot.vms.push(resource(103, "pve1", true, 4, 1));
        snapshot.nodes[0].mem = Some(6 * GIB);
        let c = &candidates(&snapshot, &held, &none)[0];
        assert_eq!(c.free, 48 * GIB as i64);
        assert_eq!((c.assigned_memory, c.assigned_cores), (28 * GIB, 6));
    }

    #[test]
    fn holds_go_with_their_install() {
        let ledger = Arc::new(Ledger::default());
        let mut snapshot = Snapshot::of(Vec::new());
        let node = |name: &str, gib: u64| NodeResource {
            node: name.into(),
            status: "online".into(),
            maxcpu: Some(8),
            maxmem: Some(gib * GIB),
            mem: Some(0),
            ..NodeResource::default()
        };
        snapshot.nodes = vec![node("pve1", 10), node("pve2", 7)];
        let rows = vec![StorageStatus {
            name: "local-zfs".into(),
            kind: "zfspool".into(),
            status: "active".into(),
            total_kib: 1,
            used_kib: 0,
            avail_kib: 1,
        }];
        let storages: HashMap<String, Result<Vec<StorageStatus>, String>> = [
            ("pve1".to_string(), Ok(rows)),
            ("pve2".to_string(), Ok(Vec::new())),
        ]
        .into();
        let ask = Ask {
            memory: 4 * GIB,
            cores: 1,
        };
        let place = || place_held(&ledger, &snapshot, &storages, "local-zfs", ask, 1.0);
        let first = place().unwrap();
        assert_eq!(first.choice.node, "pve1");
        assert_eq!(first.choice.ruled_out.len(), 1, "pve2 lacks the storage");
        let second = place().unwrap();
        assert_eq!(second.choice.free, 6 * GIB as i64, "the first is counted");
        let refused = place().unwrap_err().to_string();
        assert!(
            refused.contains("pve1: memory: its VMs would be given 12 GiB, above the 10"),
            "{refused}"
        );
        assert!(
            refused.contains("pve2: storage pool local-zfs does not exist"),
            "{refused}"
        );
        drop(first);
        assert!(place().is_ok(), "a finished install gives its place back");
    }
}
