//! `qm migrate <id> <node> --with-local-disks`, with its log.

use pvedeck_proxmox::drive::{GIB, MIB};
use pvedeck_proxmox::{LineSink, PveError};
use pvedeck_support::clock::now_ms;

use super::{fail, timestamp, vm_mut, vm_on};
use crate::{SimCluster, timing};

impl SimCluster {
    pub async fn qm_migrate(
        &self,
        node: &str,
        vmid: u32,
        target: &str,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let command = format!("qm migrate {vmid} {target}");
        self.strike("migrate", Some(vmid), &command).await?;
        let (volumes, target_ip) = self.change(|s| {
            let vm = vm_on(s, node, vmid, &command, false)?;
            if target == node {
                return Err(fail(
                    &command,
                    "400 Parameter verification failed.\ntarget: target is local node.",
                ));
            }
            let target_node = s
                .nodes
                .get(target)
                .ok_or_else(|| fail(&command, format!("no such cluster node '{target}'")))?;
            if !target_node.online {
                return Err(fail(
                    &command,
                    format!("migration aborted: target node '{target}' is not online"),
                ));
            }
            if vm.running {
                return Err(fail(&command, "can't migrate running VM without --online"));
            }
            let volumes: Vec<(String, u64)> =
                vm.volumes.iter().map(|(v, b)| (v.clone(), *b)).collect();
            // A linked clone on a local storage cannot move: its base stays
            // behind (qemu-server `PVE/QemuMigrate.pm`, `scan_local_volumes`).
            for (volid, _) in &volumes {
                let storage = volid.split(':').next().unwrap_or_default();
                let local = s.storage(storage).is_none_or(|st| !st.is_shared());
                if let (true, Some(base)) = (local, super::clone::clone_base(volid)) {
                    return Err(fail(
                        &command,
                        format!("can't migrate '{volid}' as it's a clone of '{base}'"),
                    ));
                }
            }
            let ip = target_node
                .ip
                .map_or_else(|| target.to_string(), |ip| ip.to_string());
            if let Some(vm) = vm_mut(s, vmid) {
                vm.config.insert("lock".into(), "migrate".into());
            }
            Ok((volumes, ip))
        })?;

        let started = now_ms();
        let log = |msg: &str| out(&format!("{} {msg}", timestamp()));
        log(&format!(
            "starting migration of VM {vmid} to node '{target}' ({target_ip})"
        ));
        for (volid, _) in &volumes {
            log(&format!("found local disk '{volid}' (attached)"));
        }
        log("copying local disk images");
        for (volid, bytes) in &volumes {
            // Thin volumes send what is written, about a third.
            let data = (bytes / 3).max(MIB);
            let name = volid.split(':').nth(1).unwrap_or(volid);
            log(&format!(
                "full send of rpool/data/{name}@__migration__ estimated size is {:.2}G",
                data as f64 / GIB as f64
            ));
            let chunks = 4;
            for i in 1..=chunks {
                self.clock
                    .sleep(data / timing::MIGRATE_BYTES_PER_MS / chunks)
                    .await;
                log(&format!(
                    "{:.2}G rpool/data/{name}@__migration__",
                    (data * i / chunks) as f64 / GIB as f64
                ));
            }
            log(&format!("successfully imported '{volid}'"));
            log(&format!("volume '{volid}' is '{volid}' on the target"));
        }
        self.change(|s| {
            if let Some(vm) = vm_mut(s, vmid) {
                vm.node = target.to_string();
                vm.config.remove("lock");
            }
        });
        let secs = self.clock.since(started) / 1000;
        log(&format!(
            "migration finished successfully (duration {:02}:{:02}:{:02})",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        ));
        Ok(())
    }
}
