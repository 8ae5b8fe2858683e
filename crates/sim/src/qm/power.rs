//! `qm status` and the power verbs: start, stop, shutdown, reboot.

use pvedeck_proxmox::{PowerAction, PveError};
use pvedeck_support::clock::now_ms;

use super::{fail, vm_mut, vm_on};
use crate::state::Guest;
use crate::{SimCluster, timing};

impl SimCluster {
    pub async fn qm_status(&self, node: &str, vmid: u32) -> Result<String, PveError> {
        let command = format!("qm status {vmid}");
        self.record(&command);
        self.clock.sleep(timing::READ).await;
        let running = self.read(|s| vm_on(s, node, vmid, &command, true).map(|vm| vm.running))?;
        // A real guest that powered itself off has stopped.
        if running && self.real.as_ref().is_some_and(|real| !real.running(vmid)) {
            self.change(|s| {
                if let Some(vm) = vm_mut(s, vmid) {
                    vm.running = false;
                    vm.started = None;
                    vm.guest = Guest::Off;
                }
            });
            return Ok("stopped".to_string());
        }
        Ok(if running { "running" } else { "stopped" }.to_string())
    }

    pub async fn qm_power(
        &self,
        node: &str,
        vmid: u32,
        action: PowerAction,
    ) -> Result<(), PveError> {
        let command = format!("qm {} {vmid}", action.verb());
        self.strike(action.verb(), Some(vmid), &command).await?;
        let skiplock = matches!(action, PowerAction::Stop { skiplock: true });
        let running = self.read(|s| {
            let vm = vm_on(s, node, vmid, &command, skiplock)?;
            if action == PowerAction::Start && vm.is_template() {
                return Err(fail(&command, "you can't start a vm if it's a template"));
            }
            Ok(vm.running)
        })?;
        match action {
            PowerAction::Start => {
                if running {
                    return Err(fail(&command, format!("VM {vmid} already running")));
                }
                self.clock.sleep(timing::START).await;
                if let Some(real) = &self.real {
                    // The `cloud-init` fault, on a real guest, is planted
                    // in its seed: the guest's cloud-init fails for real.
                    let planted = self
                        .fault("cloud-init", Some(vmid), &command)
                        .await
                        .err()
                        .map(|e| e.message());
                    let vm = self.read(|s| s.vms.get(&vmid).cloned());
                    if let Some(vm) = vm {
                        real.start(&vm, planted.as_deref(), &command).await?;
                    }
                }
                let boot = self.read(|s| {
                    s.vms.get(&vmid).map_or(timing::BOOT, |vm| {
                        if vm.initialized {
                            timing::BOOT
                        } else {
                            timing::FIRST_BOOT
                        }
                    })
                });
                let ready_at = self.clock.after(boot);
                self.change(|s| {
                    if let Some(vm) = vm_mut(s, vmid) {
                        vm.running = true;
                        vm.started = Some(now_ms());
                        vm.guest = Guest::Booting { ready_at };
                        vm.inside.boot(vmid);
                    }
                });
            }
            PowerAction::Stop { .. } | PowerAction::Shutdown => {
                if !running {
                    // Proxmox warns and succeeds.
                    return Ok(());
                }
                let ms = if action == PowerAction::Shutdown {
                    timing::SHUTDOWN
                } else {
                    timing::STOP
                };
                self.clock.sleep(ms).await;
                if let Some(real) = &self.real {
                    if action == PowerAction::Shutdown {
                        real.shutdown(vmid, &command).await?;
                    } else {
                        real.stop(vmid, &command).await?;
                    }
                }
                self.change(|s| {
                    if let Some(vm) = vm_mut(s, vmid) {
                        vm.running = false;
                        vm.started = None;
                        vm.guest = Guest::Off;
                    }
                });
            }
            PowerAction::Reboot => {
                if !running {
                    return Err(fail(&command, format!("VM {vmid} not running")));
                }
                self.clock.sleep(timing::REBOOT).await;
                if let Some(real) = &self.real {
                    let vm = self.read(|s| s.vms.get(&vmid).cloned());
                    if let Some(vm) = vm {
                        real.reboot(&vm, &command).await?;
                    }
                }
                let ready_at = self.clock.after(timing::BOOT);
                self.change(|s| {
                    if let Some(vm) = vm_mut(s, vmid) {
                        vm.started = Some(now_ms());
                        vm.guest = Guest::Booting { ready_at };
                        vm.inside.boot(vmid);
                    }
                });
            }
        }
        Ok(())
    }
}
