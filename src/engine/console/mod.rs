//! VM consoles (docs/security.md#consoles): who may open one and when, the
//! bounds every console is held to, and the relay between the browser's
//! WebSocket and the backend's stream. The edge only turns WebSocket
//! frames into the relay's messages and back.

mod registry;
mod relay;
mod rfb;

use std::sync::Arc;

pub use pvedeck_proxmox::ConsoleKind;
use pvedeck_proxmox::ConsoleStream;
pub use registry::{Consoles, Holder, Lease};
pub use relay::{End, Outcome, relay};

use super::lifecycle::refusal;
use super::scope::Scope;
use super::{Actor, Engine, EngineError};

/// A console the checks let open, before its stream is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Target {
    pub vmid: u32,
    pub node: String,
    pub kind: &'static str,
}

/// An open console: its place among the open ones and its stream.
pub struct Opened {
    pub lease: Lease,
    pub stream: ConsoleStream,
    pub target: Target,
}

impl Engine {
    pub fn consoles(&self) -> &Arc<Consoles> {
        &self.consoles
    }

    /// Everything that decides whether `actor` may open VM `vmid`'s
    /// console, without opening it: the VM theirs (or they an admin; 404
    /// otherwise, as for every VM route), `ALLOW_IPS`, the VM in
    /// `MANAGE`'s scope and still the one last read, running, and for the
    /// serial console a serial port.
    pub async fn check_console(
        &self,
        actor: &Actor,
        vmid: u32,
        kind: ConsoleKind,
    ) -> Result<Target, EngineError> {
        // Each check reads the VM's configuration and status from Proxmox:
        // bounded per client like every other per-VM read.
        self.read_rate
            .take(actor.client, std::time::Instant::now())?;
        self.visible_vm(actor, vmid)?;
        self.authorize_change(actor)?;
        let vm = self.locate(vmid).await?;
        self.config.manage.check(&vm.resource)?;
        let config = self.still_the_vm_as(&vm).await?;
        if kind == ConsoleKind::Serial && !config.contains_key("serial0") {
            return Err(EngineError::Conflict(format!(
                "VM {vmid} has no serial port (serial0): use its graphical console, or add one \
                 (qm set {vmid} --serial0 socket) and restart it"
            )));
        }
        if self.qm_status(&vm).await? != "running" {
            return Err(EngineError::Conflict(format!(
                "VM {vmid} is not running: start it to use its console"
            )));
        }
        Ok(Target {
            vmid,
            node: vm.node,
            kind: kind.name(),
        })
    }

    /// Opens VM `vmid`'s console for `actor`, from the session with hash
    /// `session` when there is one; `another` opens one beside theirs of
    /// the same VM and kind. Audited.
    pub async fn open_console(
        &self,
        actor: &Actor,
        session: Option<String>,
        vmid: u32,
        kind: ConsoleKind,
        another: bool,
    ) -> Result<Opened, EngineError> {
        let target = self.check_console(actor, vmid, kind).await?;
        let holder = Holder {
            cluster: self.config.cluster.clone(),
            vmid,
            kind,
            user: actor.name().to_string(),
            session,
        };
        let lease = self.consoles.admit(holder, another)?;
        let opened = self
            .proxmox
            .console(&target.node, vmid, kind)
            .await
            .map_err(|e| refusal(vmid, e));
        let outcome = match &opened {
            Ok(_) => "ok".to_string(),
            Err(e) => e.to_string(),
        };
        self.audit(
            actor,
            "console open",
            Some(format!("vm {vmid}")),
            format!("{} console on {}", kind.name(), target.node),
            outcome,
        )
        .await;
        Ok(Opened {
            lease,
            stream: opened?,
            target,
        })
    }

    /// Why a console's stream ended from the VM's side, as the browser is
    /// told: the VM gone or stopped, or just the console.
    pub async fn console_ended(&self, vmid: u32) -> String {
        self.statuses.forget(vmid);
        match self.vm_status(vmid).await {
            Err(EngineError::NotFound(_)) => format!("VM {vmid} no longer exists"),
            Ok(status) if status != "running" => format!("VM {vmid} is {status}"),
            _ => format!("the console of VM {vmid} closed"),
        }
    }

    /// Writes a console's end in the audit log.
    pub async fn console_closed(&self, actor: &Actor, holder: &Holder, outcome: &Outcome) {
        self.audit(
            actor,
            "console close",
            Some(format!("vm {}", holder.vmid)),
            format!(
                "{} console: {}; {} bytes to the VM, {} from it, {} s",
                holder.kind.name(),
                outcome.end,
                outcome.bytes_in,
                outcome.bytes_out,
                outcome.open_for.as_secs()
            ),
            "ok".to_string(),
        )
        .await;
    }
}
