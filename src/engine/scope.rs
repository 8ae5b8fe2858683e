//! Which VMs pvedeck acts on (`MANAGE`): those it made, tagged [`TAG`] at
//! creation — not every QEMU VM of the cluster, whose infrastructure (a
//! router, a NAS, a domain controller) is one request away otherwise. The
//! list still shows the others, marked.

use pvedeck_config::Manage;
use pvedeck_domain::os::Os;
use pvedeck_proxmox::VmResource;

use super::EngineError;

/// The tag every VM pvedeck makes carries, beside its OS tag.
pub const TAG: &str = "pvedeck";
/// The tag that marks a golden template pvedeck built (beside the OS tag).
pub const TEMPLATE_TAG: &str = "pvedeck-template";
/// Beside [`TEMPLATE_TAG`]: a rebuild replaced the template, but linked
/// clones still use its disk, so Proxmox keeps it. No clone comes from it.
pub const RETIRED_TAG: &str = "pvedeck-retired";

/// How a [`Manage`] setting judges a VM: the setting is read by the
/// configuration, its meaning lives here with the engine.
pub trait Scope: Copy {
    /// Whether pvedeck acts on `vm`.
    fn covers(self, vm: &VmResource) -> bool;

    /// 403 for an action on a VM outside the scope, naming the rule.
    fn check(self, vm: &VmResource) -> Result<(), EngineError>;
}

impl Scope for Manage {
    fn covers(self, vm: &VmResource) -> bool {
        match self {
            Manage::All => true,
            _ if vm.has_tag(TAG) => true,
            Manage::PvedeckAndSeed => vm.os_tag().and_then(Os::parse).is_some(),
            Manage::Pvedeck => false,
        }
    }

    fn check(self, vm: &VmResource) -> Result<(), EngineError> {
        if self.covers(vm) {
            return Ok(());
        }
        let rule = match self {
            Manage::PvedeckAndSeed => {
                "only VMs tagged 'pvedeck' or made by go-pve-qemu (an OS as first tag)"
            }
            _ => "only VMs tagged 'pvedeck'",
        };
        Err(EngineError::Forbidden(format!(
            "VM {} is not managed by pvedeck (MANAGE={}: {rule}); set MANAGE=all to act on \
             every VM",
            vm.vmid,
            self.name()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(tags: Option<&str>) -> VmResource {
        VmResource {
            vmid: 101,
            tags: tags.map(str::to_string),
            ..VmResource::default()
        }
    }

    #[test]
    fn each_rule_covers_what_it_names() {
        let ours = vm(Some("debian;pvedeck"));
        let seed = vm(Some("ubuntu"));
        let other = vm(Some("router;infra"));
        let bare = vm(None);
        let covered = |m: Manage| {
            [&ours, &seed, &other, &bare]
                .iter()
                .map(|v| m.covers(v))
                .collect::<Vec<_>>()
        };
        assert_eq!(covered(Manage::Pvedeck), [true, false, false, false]);
        assert_eq!(covered(Manage::PvedeckAndSeed), [true, true, false, false]);
        assert_eq!(covered(Manage::All), [true, true, true, true]);
        // A tag that only contains the word is not the tag.
        assert!(!Manage::Pvedeck.covers(&vm(Some("debian;not-pvedeck"))));
        assert_eq!(
            Manage::Pvedeck.check(&other).map_err(|e| e.to_string()),
            Err(
                "VM 101 is not managed by pvedeck (MANAGE=pvedeck: only VMs tagged 'pvedeck'); \
                 set MANAGE=all to act on every VM"
                    .to_string()
            )
        );
    }

    #[test]
    fn names_round_trip() {
        for m in [Manage::Pvedeck, Manage::PvedeckAndSeed, Manage::All] {
            assert_eq!(Manage::parse(m.name()), Some(m));
        }
        assert_eq!(Manage::parse("some"), None);
    }
}
