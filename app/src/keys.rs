//! Keys for the lists the islands keep current: a hash of everything a row
//! shows, so that a row that did not change keeps its DOM (and the keyboard
//! focus) across refreshes, and one that did is drawn again. Hashes, not
//! `format!("{:?}")`: the `Debug` code and float formatting would weigh on
//! the browser bundle. A field added to a row's type belongs here too.

use std::hash::{DefaultHasher, Hash, Hasher};

use pvedeck_domain::timeline::StageView;
use pvedeck_domain::types::{Job, NodeSpark, NodeSummary, VmSummary};

/// A row whose every field is `Hash` (the templates table's) is keyed by
/// this alone.
pub fn hash(value: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

pub fn vm(vm: &VmSummary) -> u64 {
    hash((
        (
            &vm.cluster,
            vm.vmid,
            &vm.name,
            &vm.os,
            vm.running,
            &vm.node,
            vm.cpu,
        ),
        (
            vm.disk.to_bits(),
            vm.memory.to_bits(),
            vm.memory_used.to_bits(),
        ),
        (
            &vm.status,
            &vm.ip,
            vm.reserved,
            vm.managed,
            &vm.lock,
            &vm.owner,
        ),
    ))
}

/// A node card: its figures and its sparklines.
pub fn node_card((n, spark): &(NodeSummary, Option<NodeSpark>)) -> u64 {
    hash((node(n), spark))
}

pub fn node(n: &NodeSummary) -> u64 {
    hash((
        (
            &n.cluster, &n.node, n.running, n.max_cpu, &n.status, n.vcpus, n.vms,
        ),
        (n.max_memory.to_bits(), n.cpu.to_bits(), n.memory.to_bits()),
        (
            n.memory_used.to_bits(),
            n.disk.to_bits(),
            n.cpu_used.to_bits(),
        ),
        (n.max_disk.to_bits(), n.disk_used.to_bits()),
    ))
}

pub fn job(job: &Job) -> u64 {
    hash(job)
}

pub fn stage(stage: &StageView) -> u64 {
    let steps: Vec<_> = stage
        .steps
        .iter()
        .map(|s| {
            (
                (&s.name, s.status, &s.messages, &s.output, &s.elapsed),
                s.progress.map(f64::to_bits),
            )
        })
        .collect();
    hash((&stage.name, steps))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> VmSummary {
        VmSummary {
            cluster: "default".into(),
            vmid: 101,
            name: "web".into(),
            os: "debian".into(),
            running: true,
            node: "pve1".into(),
            cpu: 2,
            disk: 32.0,
            memory: 2.0,
            memory_used: 0.5,
            status: "running".into(),
            ip: "10.0.0.101".into(),
            reserved: false,
            managed: true,
            lock: None,
            owner: None,
        }
    }

    #[test]
    fn a_row_keeps_its_key_until_what_it_shows_changes() {
        let a = sample();
        assert_eq!(vm(&a), vm(&a.clone()));
        let mut b = sample();
        b.memory_used = 0.75;
        assert_ne!(vm(&a), vm(&b));
        let mut c = sample();
        c.lock = Some("migrate".into());
        assert_ne!(vm(&a), vm(&c));
    }
}
