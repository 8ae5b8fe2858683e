//! The consoles open now: what bounds them (one per VM, user and kind unless
//! another is asked for; `CONSOLE_MAX` in all) and what closes them from
//! outside the relay (the VM destroyed, the session ended).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pvedeck_config::ConsoleLimits;
use pvedeck_proxmox::ConsoleKind;
use pvedeck_support::sync::lock;
use tokio::sync::watch;

use crate::engine::EngineError;

/// Who holds a console of which VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub cluster: String,
    pub vmid: u32,
    pub kind: ConsoleKind,
    /// The user's name as the audit log writes it.
    pub user: String,
    /// The session's hash (`sessions`), when opened from one.
    pub session: Option<String>,
}

struct Entry {
    holder: Holder,
    close: watch::Sender<Option<String>>,
}

/// The registry every cluster's engine shares.
pub struct Consoles {
    limits: ConsoleLimits,
    open: std::sync::Mutex<HashMap<u64, Entry>>,
    next: AtomicU64,
}

/// One open console's place in the registry: dropping it frees the place.
pub struct Lease {
    id: u64,
    consoles: Arc<Consoles>,
    /// Becomes `Some(why)` when something outside the relay closes it.
    pub closed: watch::Receiver<Option<String>>,
    pub holder: Holder,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.id)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        lock(&self.consoles.open).remove(&self.id);
    }
}

impl Consoles {
    pub fn new(limits: ConsoleLimits) -> Consoles {
        Consoles {
            limits,
            open: std::sync::Mutex::default(),
            next: AtomicU64::new(1),
        }
    }

    pub fn limits(&self) -> ConsoleLimits {
        self.limits
    }

    /// How many are open.
    pub fn count(&self) -> usize {
        lock(&self.open).len()
    }

    /// Whether `holder` may open one now: its place, or why not.
    pub fn admit(self: &Arc<Self>, holder: Holder, another: bool) -> Result<Lease, EngineError> {
        let mut open = lock(&self.open);
        if open.len() >= self.limits.max_open {
            return Err(EngineError::Unavailable(format!(
                "{} consoles are open, as many as CONSOLE_MAX allows: try again when one closes",
                open.len()
            )));
        }
        let same = |e: &&Entry| {
            e.holder.cluster == holder.cluster
                && e.holder.vmid == holder.vmid
                && e.holder.kind == holder.kind
                && e.holder.user == holder.user
        };
        if !another && open.values().any(|e| same(&e)) {
            return Err(EngineError::Conflict(format!(
                "your {} console of VM {} is already open (another tab or window): close it, \
                 or open another deliberately (another=1)",
                holder.kind.name(),
                holder.vmid
            )));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (close, closed) = watch::channel(None);
        open.insert(
            id,
            Entry {
                holder: holder.clone(),
                close,
            },
        );
        Ok(Lease {
            id,
            consoles: self.clone(),
            closed,
            holder,
        })
    }

    /// Closes the consoles `which` picks, saying `why`; how many.
    fn close_where(&self, which: impl Fn(&Holder) -> bool, why: &str) -> usize {
        let open = lock(&self.open);
        let mut n = 0;
        for entry in open.values().filter(|e| which(&e.holder)) {
            entry.close.send_replace(Some(why.to_string()));
            n += 1;
        }
        n
    }

    /// VM `vmid` of `cluster` is gone.
    pub fn close_vm(&self, cluster: &str, vmid: u32, why: &str) -> usize {
        self.close_where(|h| h.cluster == cluster && h.vmid == vmid, why)
    }

    /// The session with this hash ended.
    pub fn close_session(&self, hash: &str, why: &str) -> usize {
        self.close_where(|h| h.session.as_deref() == Some(hash), why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(vmid: u32, user: &str, kind: ConsoleKind) -> Holder {
        Holder {
            cluster: "default".into(),
            vmid,
            kind,
            user: user.into(),
            session: Some(format!("s-{user}")),
        }
    }

    fn registry(max_open: usize) -> Arc<Consoles> {
        Arc::new(Consoles::new(ConsoleLimits {
            max_open,
            ..ConsoleLimits::default()
        }))
    }

    #[test]
    fn one_console_per_vm_user_and_kind_unless_another_is_asked_for() {
        let consoles = registry(10);
        let first = consoles.admit(holder(101, "alice", ConsoleKind::Vnc), false);
        assert!(first.is_ok());
        let again = consoles.admit(holder(101, "alice", ConsoleKind::Vnc), false);
        assert!(
            matches!(&again, Err(EngineError::Conflict(m)) if m.contains("already open")),
            "{again:?}"
        );
        assert!(
            consoles
                .admit(holder(101, "alice", ConsoleKind::Serial), false)
                .is_ok()
        );
        assert!(
            consoles
                .admit(holder(101, "bob", ConsoleKind::Vnc), false)
                .is_ok()
        );
        let deliberate = consoles.admit(holder(101, "alice", ConsoleKind::Vnc), true);
        assert!(deliberate.is_ok());
        drop(first);
        drop(deliberate);
        assert!(
            consoles
                .admit(holder(101, "alice", ConsoleKind::Vnc), false)
                .is_ok(),
            "a closed console frees its place"
        );
    }

    #[test]
    fn consoles_are_bounded_in_all() {
        let consoles = registry(2);
        let _a = consoles.admit(holder(101, "a", ConsoleKind::Vnc), false);
        let _b = consoles.admit(holder(102, "b", ConsoleKind::Vnc), false);
        let third = consoles.admit(holder(103, "c", ConsoleKind::Vnc), false);
        assert!(
            matches!(&third, Err(EngineError::Unavailable(m)) if m.contains("CONSOLE_MAX")),
            "{third:?}"
        );
        assert_eq!(consoles.count(), 2);
    }

    #[test]
    fn a_destroyed_vm_or_an_ended_session_closes_its_consoles_only() {
        let consoles = registry(10);
        let a = consoles
            .admit(holder(101, "alice", ConsoleKind::Vnc), false)
            .unwrap();
        let b = consoles
            .admit(holder(102, "alice", ConsoleKind::Serial), false)
            .unwrap();
        let c = consoles
            .admit(holder(103, "bob", ConsoleKind::Vnc), false)
            .unwrap();
        assert_eq!(consoles.close_vm("default", 101, "destroyed"), 1);
        assert_eq!(a.closed.borrow().as_deref(), Some("destroyed"));
        assert_eq!(b.closed.borrow().as_deref(), None);
        assert_eq!(consoles.close_vm("other", 103, "destroyed"), 0);
        assert_eq!(consoles.close_session("s-alice", "signed out"), 2);
        assert_eq!(b.closed.borrow().as_deref(), Some("signed out"));
        assert_eq!(c.closed.borrow().as_deref(), None);
    }
}
