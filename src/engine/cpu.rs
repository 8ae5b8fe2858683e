//! The cluster's CPU baseline for `qm create --cpu`
//! (docs/provisioning.md#cpu-baseline): the highest x86-64 level every node
//! supports, so a VM can run, and migrate, anywhere.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Instant;

use pvedeck_proxmox::{NodeResource, PveError, Timed};
use pvedeck_support::sync::lock;

const V2: [&str; 6] = ["cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"];
const AES: [&str; 2] = ["aes", "pclmulqdq"];
const V3: [&str; 9] = [
    "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "lzcnt", "xsaveopt",
];
const V4: [&str; 5] = ["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"];

/// What one node's CPU can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLevel {
    /// 1 to 4.
    pub level: u8,
    pub aes: bool,
}

/// Reads a node's `/proc/cpuinfo` flags.
pub fn node_level(flags: &str) -> NodeLevel {
    let flags: HashSet<&str> = flags.split_whitespace().collect();
    // The kernel names LZCNT `abm` (advanced bit manipulation): no CPU lists
    // `lzcnt` itself, so asking for it literally would keep every cluster
    // below v3.
    let has = |f: &&str| flags.contains(f) || (*f == "lzcnt" && flags.contains("abm"));
    let level = if !V2.iter().all(has) {
        1
    } else if !V3.iter().all(has) {
        2
    } else if !V4.iter().all(has) {
        3
    } else {
        4
    };
    NodeLevel {
        level,
        aes: AES.iter().all(has),
    }
}

/// The `--cpu` type for a cluster. Proxmox has no `x86-64-v1`: a level-1
/// cluster (or no node at all) gets `kvm64`.
pub fn cluster_type(nodes: &[NodeLevel]) -> &'static str {
    let Some(lowest) = nodes.iter().map(|n| n.level).min() else {
        return "kvm64";
    };
    match lowest {
        4 => "x86-64-v4",
        3 => "x86-64-v3",
        2 if nodes.iter().all(|n| n.aes) => "x86-64-v2-AES",
        2 => "x86-64-v2",
        _ => "kvm64",
    }
}

/// The detected baseline, kept for the node list it was detected for.
#[derive(Default)]
pub struct Baseline {
    cached: Mutex<Option<(Vec<String>, &'static str)>>,
    /// One detection at a time: concurrent installs (and an install's
    /// early read beside its VMID probe) share one round of `pvesh`.
    flight: tokio::sync::Mutex<()>,
    /// When the last detection failed, and why: who waited for that round
    /// gets its answer rather than a second timeout of its own.
    failed: Mutex<Option<(Instant, PveError)>>,
}

impl Baseline {
    /// The `--cpu` type for the nodes of the cluster snapshot, detected once
    /// per node list (flags do not change while a node runs). A node that
    /// cannot tell its flags (offline) makes it `kvm64`; Proxmox not
    /// answering in time is an error: an install waits for no hung `pvesh`.
    pub async fn detect(
        &self,
        proxmox: &Timed,
        nodes: &[NodeResource],
    ) -> Result<&'static str, PveError> {
        let mut names: Vec<String> = nodes.iter().map(|n| n.node.clone()).collect();
        names.sort();
        let cached = || match &*lock(&self.cached) {
            Some((cached_for, cpu)) if *cached_for == names => Some(*cpu),
            _ => None,
        };
        if let Some(cpu) = cached() {
            return Ok(cpu);
        }
        let asked = Instant::now();
        let _one = self.flight.lock().await;
        if let Some(cpu) = cached() {
            return Ok(cpu);
        }
        if let Some((at, e)) = &*lock(&self.failed)
            && *at >= asked
        {
            return Err(e.clone());
        }
        let mut levels = Vec::new();
        // All nodes at once: each `pvesh` is a Perl start-up on a real node.
        let statuses =
            futures_util::future::join_all(names.iter().map(|n| proxmox.node_status(n))).await;
        for (name, status) in names.iter().zip(statuses) {
            match status {
                Ok(status) => levels.push(node_level(&status.cpuinfo.flags)),
                Err(e @ PveError::Timeout { .. }) => {
                    *lock(&self.failed) = Some((Instant::now(), e.clone()));
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(node = name, "CPU baseline: {e}; using kvm64");
                    return Ok("kvm64");
                }
            }
        }
        let cpu = cluster_type(&levels);
        tracing::info!(cpu, nodes = ?names, "CPU baseline detected");
        *lock(&self.cached) = Some((names, cpu));
        Ok(cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "fpu cx16 lahf_lm popcnt sse4_1 sse4_2 ssse3";
    const V3_FLAGS: &str = "avx avx2 bmi1 bmi2 f16c fma movbe abm xsaveopt";
    const V4_FLAGS: &str = "avx512f avx512bw avx512cd avx512dq avx512vl";

    fn lvl(flags: &str) -> NodeLevel {
        node_level(flags)
    }

    #[test]
    fn levels_from_flags() {
        assert_eq!(lvl("fpu sse2").level, 1);
        assert_eq!(
            lvl(BASE),
            NodeLevel {
                level: 2,
                aes: false
            }
        );
        assert_eq!(
            lvl(&format!("{BASE} aes pclmulqdq")),
            NodeLevel {
                level: 2,
                aes: true
            }
        );
        assert_eq!(lvl(&format!("{BASE} {V3_FLAGS}")).level, 3);
        assert_eq!(lvl(&format!("{BASE} {V3_FLAGS} {V4_FLAGS}")).level, 4);
        // v3 without LZCNT (no `abm`, no `lzcnt`) is v2.
        assert_eq!(
            lvl(&format!("{BASE} {}", V3_FLAGS.replace("abm", ""))).level,
            2
        );
    }

    #[test]
    fn the_lowest_node_decides() {
        let v4 = lvl(&format!("{BASE} aes pclmulqdq {V3_FLAGS} {V4_FLAGS}"));
        let v3 = lvl(&format!("{BASE} aes pclmulqdq {V3_FLAGS}"));
        let v2aes = lvl(&format!("{BASE} aes pclmulqdq"));
        let v2 = lvl(BASE);
        assert_eq!(cluster_type(&[v4, v4]), "x86-64-v4");
        assert_eq!(cluster_type(&[v4, v3]), "x86-64-v3");
        // go-pve-qemu sent x86-64-v1 here.
        assert_eq!(cluster_type(&[v4, v3, v2aes]), "x86-64-v2-AES");
        assert_eq!(cluster_type(&[v3, v2]), "x86-64-v2");
        assert_eq!(cluster_type(&[v3, lvl("fpu")]), "kvm64");
        assert_eq!(cluster_type(&[]), "kvm64");
    }
}
