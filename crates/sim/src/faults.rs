//! Fault injection: make a named operation of the simulated cluster fail,
//! hang or take longer, for one VM or all, a number of times or until cleared.

use serde::{Deserialize, Serialize};

/// The operations a fault can name.
pub const OPS: [&str; 27] = [
    "cluster",
    "storage",
    "nodestatus",
    "rrddata",
    "create",
    "importdisk",
    "set",
    "resize",
    "config",
    "start",
    "stop",
    "shutdown",
    "reboot",
    "destroy",
    "migrate",
    "ssh-ready",
    "ssh-init",
    // Something that is not a VM answers at the id's address: at once
    // (`fail`), after `delay_ms` (`delay`), or never ends the probe (`hang`).
    "probe",
    "clone",
    "template",
    // The guest agent does not answer (`fail`), or answers late.
    "agent",
    // cloud-init reports `status: error` with the message.
    "cloud-init",
    // Cleaning the identity (`cloud-init clean`, host keys removed) says
    // it worked and changes nothing: a template that keeps its identity.
    "clean",
    // The REST face's `download-url` task fails (or hangs, or is late).
    "download",
    // The REST face's `upload` task (`imgcopy`) fails, hangs or is late.
    "upload",
    // A call of the firewall's API (`/cluster/firewall/…`,
    // `…/qemu/<vmid>/firewall/…`) fails, hangs or is late.
    "firewall",
    // Opening a VM's console (`qm vncproxy`, `qm terminal`, the REST
    // face's `vncwebsocket`) fails, hangs or is late.
    "console",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The operation fails with `message` (or Proxmox's usual text for it).
    Fail,
    /// The operation never finishes.
    Hang,
    /// The operation takes `delay_ms` (simulated) longer.
    Delay,
    /// The guest prints `bytes` bytes without a newline first, then goes
    /// on (`ssh-init`, `ssh-ready`): a hostile guest's output.
    Flood,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub op: String,
    pub action: Action,
    #[serde(default)]
    pub vmid: Option<u32>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// How many times it strikes; none = until cleared.
    #[serde(default)]
    pub times: Option<u32>,
    /// How much a `flood` prints (default 1 GiB).
    #[serde(default)]
    pub bytes: Option<u64>,
}

/// What an operation must do, having asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strike {
    None,
    Fail(Option<String>),
    Hang,
    Delay(u64),
    Flood(u64),
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Faults {
    rules: Vec<Fault>,
}

/// Why a fault rule is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    #[error("op '{op}' is not one of: {}", OPS.join(", "))]
    UnknownOp { op: String },
    #[error("a delay needs delay_ms")]
    DelayWithoutMs,
    #[error("only a guest's commands flood (ssh-init, ssh-ready), not '{op}'")]
    FloodElsewhere { op: String },
}

impl Faults {
    pub fn add(&mut self, fault: Fault) -> Result<(), FaultError> {
        if !OPS.contains(&fault.op.as_str()) {
            return Err(FaultError::UnknownOp { op: fault.op });
        }
        if fault.action == Action::Delay && fault.delay_ms.is_none() {
            return Err(FaultError::DelayWithoutMs);
        }
        if fault.action == Action::Flood && !["ssh-init", "ssh-ready"].contains(&fault.op.as_str())
        {
            return Err(FaultError::FloodElsewhere { op: fault.op });
        }
        self.rules.push(fault);
        Ok(())
    }

    pub fn clear(&mut self) {
        self.rules.clear();
    }

    pub fn list(&self) -> Vec<Fault> {
        self.rules.clone()
    }

    /// Consumes one strike of the first rule matching `op` for `vmid`.
    pub fn check(&mut self, op: &str, vmid: Option<u32>) -> Strike {
        let Some(i) = self
            .rules
            .iter()
            .position(|f| f.op == op && (f.vmid.is_none() || f.vmid == vmid))
        else {
            return Strike::None;
        };
        let rule = self.rules[i].clone();
        if let Some(times) = rule.times {
            if times <= 1 {
                self.rules.remove(i);
            } else {
                self.rules[i].times = Some(times - 1);
            }
        }
        match rule.action {
            Action::Fail => Strike::Fail(rule.message),
            Action::Hang => Strike::Hang,
            Action::Delay => Strike::Delay(rule.delay_ms.unwrap_or(0)),
            Action::Flood => Strike::Flood(rule.bytes.unwrap_or(1 << 30)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(op: &str, vmid: Option<u32>, times: Option<u32>) -> Fault {
        Fault {
            op: op.into(),
            action: Action::Fail,
            vmid,
            message: None,
            delay_ms: None,
            times,
            bytes: None,
        }
    }

    #[test]
    fn strikes_are_counted_and_scoped_to_a_vm() {
        let mut f = Faults::default();
        f.add(fault("start", Some(101), Some(1))).unwrap();
        assert_eq!(f.check("start", Some(102)), Strike::None);
        assert_eq!(f.check("start", Some(101)), Strike::Fail(None));
        assert_eq!(f.check("start", Some(101)), Strike::None);
    }

    #[test]
    fn only_guests_flood() {
        let mut f = Faults::default();
        let flood = |op: &str| Fault {
            action: Action::Flood,
            bytes: Some(10),
            ..fault(op, None, None)
        };
        assert!(f.add(flood("start")).is_err());
        f.add(flood("ssh-init")).unwrap();
        assert_eq!(f.check("ssh-init", Some(1)), Strike::Flood(10));
    }

    #[test]
    fn unknown_ops_are_refused() {
        let mut f = Faults::default();
        assert!(f.add(fault("explode", None, None)).is_err());
    }
}
