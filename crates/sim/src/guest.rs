//! The simulated cluster's guests as the network sees them: whether something
//! answers on an address, and what a command run over SSH prints. Nothing
//! here opens a socket: in `sim` mode no VM address is ever contacted.

use std::net::Ipv4Addr;

use pvedeck_domain::scripts;
use pvedeck_proxmox::output::{Collector, Limits};
use pvedeck_proxmox::{GuestCommand, GuestTarget, LineSink, PveError, known_hosts};
use pvedeck_support::clock::now_ms;

use super::faults::Strike;
use super::state::Guest;
use super::{SimCluster, timing};

/// How a guest at an address looks from outside right now.
enum Knock {
    /// Nothing there: connections time out.
    Nobody,
    /// A host (VM booting, or firewalled): connections are refused.
    Refused,
    /// A VM whose SSH answers.
    Vm(u32),
    /// A VM answering for an address it claims though it is not its own:
    /// the VM and which of its claims.
    Claimed(u32, usize),
    /// Something that is not a VM answers.
    Foreign,
}

impl SimCluster {
    fn knock(&self, ip: Ipv4Addr) -> Knock {
        let [a, b, c, last] = ip.octets();
        let [ga, gb, gc, _] = self.gateway.octets();
        if [a, b, c] != [ga, gb, gc] {
            return Knock::Nobody;
        }
        self.store.update(|state| {
            if state.foreign_hosts.contains(&last) {
                return (Knock::Foreign, false);
            }
            if let Some((vmid, claim)) = state.claimant(ip) {
                return (Knock::Claimed(vmid, claim), false);
            }
            let Some(vmid) = state.vm_at(ip) else {
                return (Knock::Nobody, false);
            };
            let Some(node) = state.vms.get(&vmid).map(|vm| vm.node.clone()) else {
                return (Knock::Nobody, false);
            };
            let online = state.node_online(&node);
            let Some(vm) = state.vms.get_mut(&vmid) else {
                return (Knock::Nobody, false);
            };
            if !vm.running || !online {
                return (Knock::Nobody, false);
            }
            // Its own answers are filtered too: a filter without its
            // address in the ipset cuts the VM off.
            let vm_view = vm.clone();
            if !state.sends_from(&vm_view, ip) {
                return (Knock::Nobody, false);
            }
            let Some(vm) = state.vms.get_mut(&vmid) else {
                return (Knock::Nobody, false);
            };
            match vm.guest {
                Guest::Booting { ready_at } if now_ms() < ready_at => (Knock::Refused, false),
                Guest::Booting { .. } => {
                    vm.guest = Guest::Up;
                    (Knock::Vm(vm.vmid), true)
                }
                Guest::Up => (Knock::Vm(vm.vmid), false),
                Guest::Off => (Knock::Nobody, false),
            }
        })
    }

    pub(super) async fn guest_probe(&self, ip: Ipv4Addr, _port: u16) -> bool {
        let vmid = self
            .store
            .read(|s| s.vm_at(ip))
            .unwrap_or(u32::from(ip.octets()[3]));
        let strike = self.take_strike("probe", Some(vmid));
        match strike {
            Strike::None | Strike::Flood(_) => {}
            Strike::Fail(_) => return true,
            Strike::Delay(ms) => {
                self.clock.sleep(ms).await;
                return true;
            }
            Strike::Hang => std::future::pending::<()>().await,
        }
        match self.knock(ip) {
            Knock::Foreign | Knock::Vm(_) | Knock::Claimed(..) => true,
            Knock::Refused => {
                // A booting VM: its port refuses, as a TCP connect would see.
                self.clock.sleep(timing::CONNECT_REFUSED).await;
                false
            }
            Knock::Nobody => {
                self.clock.sleep(timing::CONNECT_TIMEOUT).await;
                false
            }
        }
    }

    /// What `ssh` does with the guest's host key and pvedeck's known-hosts
    /// file: the recorded key must match; none recorded, this one is.
    fn check_host_key(&self, target: &GuestTarget, key: &str, shown: &str) -> Result<(), PveError> {
        let Some(file) = &target.known_hosts else {
            return Ok(());
        };
        let token = known_hosts::host_token(target.ip, target.port);
        match known_hosts::lookup(file, &token) {
            Some(recorded) if recorded == key => Ok(()),
            Some(_) => Err(PveError::command(
                shown,
                format!(
                    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
                     @    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
                     @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
                     Host key for {token} has changed and you have requested strict checking.\n\
                     Host key verification failed."
                ),
                255,
            )),
            None if key.is_empty() => Ok(()),
            None => known_hosts::append(file, &token, key)
                .map_err(|e| PveError::command(shown, format!("{}: {e}", file.display()), 255)),
        }
    }

    /// A hostile guest answering for an address it claimed: it shows its
    /// forged identity, and keeps what it is sent — the init script with
    /// the root password's hash.
    async fn claimed_run(
        &self,
        target: &GuestTarget,
        command: &GuestCommand,
        (vmid, claim): (u32, usize),
        shown: &str,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let forged = self.store.read(|s| {
            s.vms
                .get(&vmid)
                .and_then(|vm| vm.inside.claims.get(claim).cloned())
        });
        let Some(forged) = forged else {
            return Err(PveError::command(
                shown,
                "Connection closed by remote host",
                255,
            ));
        };
        self.check_host_key(target, &forged.host_key, shown)?;
        let (said, kept) = match command {
            GuestCommand::Ready => (
                vec![forged.machine_id.clone(), "ready".into()],
                "ready".to_string(),
            ),
            GuestCommand::InitScript { body, .. } => {
                self.clock.sleep(timing::INIT_SCRIPT).await;
                let hash = scripts::root_hash(body).unwrap_or_default();
                (scripts::echo_lines(body), format!("script {hash}"))
            }
        };
        self.change(|s| {
            if let Some(c) = s
                .vms
                .get_mut(&vmid)
                .and_then(|vm| vm.inside.claims.get_mut(claim))
            {
                c.received.push(kept);
            }
        });
        for line in said {
            out(&line);
        }
        Ok(())
    }

    pub(super) async fn guest_run(
        &self,
        target: &GuestTarget,
        command: &GuestCommand,
        out: LineSink<'_>,
    ) -> Result<(), PveError> {
        let shown = format!("ssh {}@{}", target.user, target.ip);
        self.record(&shown);
        let unreachable = |why: &str| {
            PveError::command(
                &shown,
                format!(
                    "ssh: connect to host {} port {}: {why}",
                    target.ip, target.port
                ),
                255,
            )
        };
        let vmid = match self.knock(target.ip) {
            Knock::Vm(vmid) => {
                let key = self
                    .store
                    .read(|s| s.vms.get(&vmid).map(|vm| vm.inside.host_key.clone()))
                    .unwrap_or_default();
                self.check_host_key(target, &key, &shown)?;
                vmid
            }
            Knock::Claimed(vmid, claim) => {
                return self
                    .claimed_run(target, command, (vmid, claim), &shown, out)
                    .await;
            }
            Knock::Refused => {
                self.clock.sleep(timing::CONNECT_REFUSED).await;
                return Err(unreachable("Connection refused"));
            }
            Knock::Foreign => {
                return Err(PveError::command(
                    &shown,
                    format!(
                        "{}@{}: Permission denied (publickey).",
                        target.user, target.ip
                    ),
                    255,
                ));
            }
            Knock::Nobody => {
                self.clock.sleep(timing::CONNECT_TIMEOUT).await;
                return Err(unreachable("Connection timed out"));
            }
        };
        match command {
            GuestCommand::Ready => {
                // An injected `ssh-ready` fault: the guest never lets us in,
                // or prints without end first.
                let strike = self.take_strike("ssh-ready", Some(vmid));
                if let Strike::Flood(bytes) = strike {
                    self.flood(bytes, out);
                }
                if self
                    .suffer(strike, "ssh-ready", Some(vmid), &shown)
                    .await
                    .is_err()
                {
                    self.clock.sleep(timing::CONNECT_REFUSED).await;
                    return Err(unreachable("Connection refused"));
                }
                let machine_id = self
                    .store
                    .read(|s| s.vms.get(&vmid).map(|vm| vm.inside.machine_id.clone()))
                    .unwrap_or_default();
                if !machine_id.is_empty() {
                    out(&machine_id);
                }
                out("ready");
                Ok(())
            }
            GuestCommand::InitScript { body, .. } => {
                // The guest runs what it was sent, as bash would: its
                // `echo` lines are its output.
                let lines = scripts::echo_lines(body);
                let pause = timing::INIT_SCRIPT / lines.len().max(1) as u64;
                let strike = self.take_strike("ssh-init", Some(vmid));
                if let Strike::Flood(bytes) = strike {
                    self.flood(bytes, out);
                }
                let failure = self
                    .suffer(strike, "ssh-init", Some(vmid), &shown)
                    .await
                    .err();
                for (i, line) in lines.iter().enumerate() {
                    self.clock.sleep(pause).await;
                    if let (Some(err), true) = (&failure, i == 3) {
                        // Fail part-way, as a package step would.
                        out(&err.message());
                        return Err(PveError::command(&shown, err.message(), 100));
                    }
                    out(line);
                }
                let root_hash = scripts::root_hash(body).unwrap_or_default();
                self.change(|s| {
                    if let Some(vm) = s.vms.get_mut(&vmid) {
                        vm.initialized = true;
                        // The init scripts install qemu-guest-agent.
                        vm.inside.agent = true;
                        vm.inside.root_hash = root_hash;
                    }
                });
                Ok(())
            }
        }
    }

    /// A hostile guest: `bytes` bytes without a newline, then one. Printed
    /// raw by the `ssh` stand-in (pvedeck reads them from its pipe), or in
    /// process through the reader the `cli` backend uses, so that either
    /// way pvedeck's own reading is what bounds them.
    fn flood(&self, bytes: u64, out: LineSink<'_>) {
        const CHUNK: usize = 64 * 1024;
        let chunk = [b'x'; CHUNK];
        let pieces = bytes / CHUNK as u64;
        let tail = (bytes % CHUNK as u64) as usize;
        if self.raw_floods.load(std::sync::atomic::Ordering::Relaxed) {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            for _ in 0..pieces {
                if stdout.write_all(&chunk).is_err() {
                    return;
                }
            }
            let _ = stdout.write_all(&chunk[..tail]);
            let _ = stdout.write_all(b"\n");
            let _ = stdout.flush();
            return;
        }
        let mut reader = Collector::new(Limits::GUEST, Some(out));
        for _ in 0..pieces {
            reader.feed(&chunk);
        }
        reader.feed(&chunk[..tail]);
        reader.feed(b"\n");
        reader.finish();
    }
}
