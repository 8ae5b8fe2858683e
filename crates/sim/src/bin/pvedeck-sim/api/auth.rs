//! The API token and its privileges. One token, `pvedeck@pve!deck`, made
//! at the first start and kept in `DATA_DIR/sim/api/token` (0600); a
//! request must carry `Authorization: PVEAPIToken=pvedeck@pve!deck=<secret>`.
//! Its privileges are `SIM_API_PRIVS` (default: the role pvedeck needs,
//! docs/backends.md#the-api-token), the same on every path, as an ACL on `/` with propagate.

use std::collections::BTreeSet;
use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;

pub const TOKEN_ID: &str = "pvedeck@pve!deck";

/// The `PVEDeck` role of the research notes (PVE 9), with `VM.Console`
/// for the consoles.
pub const DEFAULT_PRIVS: &[&str] = &[
    "VM.Audit",
    "VM.Allocate",
    "VM.Clone",
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.HWType",
    "VM.Config.Options",
    "VM.Config.Network",
    "VM.Config.Cloudinit",
    "VM.Config.CDROM",
    "VM.Config.Disk",
    "VM.PowerMgmt",
    "VM.Migrate",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.Unrestricted",
    // The consoles (`vncproxy`, `termproxy`, `vncwebsocket`; issue 30).
    "VM.Console",
    "Datastore.AllocateSpace",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
    "Sys.Audit",
    "Sys.AccessNetwork",
    "SDN.Use",
];

/// The token's secret: read, or made (a UUID-shaped random value, as
/// `pveum user token add` prints) and kept.
pub fn load_or_make_secret(dir: &Path) -> std::io::Result<String> {
    let file = dir.join("token");
    match std::fs::read_to_string(&file) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let secret = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!("token.tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    writeln!(f, "{secret}")?;
    std::fs::rename(&tmp, &file)?;
    Ok(secret)
}

/// Checks the `Authorization` header as pveproxy does: `PVEAPIToken=` (or
/// a space) then `<tokenid>=<secret>`, split at the last `=`.
pub fn check(header: Option<&str>, secret: &str) -> Result<(), ApiError> {
    let Some(value) = header else {
        return Err(ApiError::unauthorized("No ticket"));
    };
    let token = value
        .split(';')
        .next()
        .and_then(|v| {
            v.trim()
                .strip_prefix("PVEAPIToken")
                .and_then(|r| r.strip_prefix('=').or_else(|| r.strip_prefix(' ')))
        })
        .ok_or_else(|| ApiError::unauthorized("No ticket"))?;
    let (id, given) = token
        .rsplit_once('=')
        .ok_or_else(|| ApiError::unauthorized("authentication failure"))?;
    // Compared as digests: same length, no early exit on a difference.
    let expected = Sha256::digest(format!("{TOKEN_ID}={secret}"));
    let got = Sha256::digest(format!("{id}={given}"));
    if bool::from(expected.as_slice().ct_eq(got.as_slice())) {
        Ok(())
    } else {
        Err(ApiError::unauthorized("authentication failure"))
    }
}

/// The token's effective privileges.
#[derive(Debug, Clone)]
pub struct Privs(BTreeSet<String>);

impl Privs {
    /// `SIM_API_PRIVS`: privileges separated by commas or spaces; unset
    /// means the default role, empty means none.
    pub fn from_setting(setting: Option<&str>) -> Privs {
        let set = match setting {
            None => DEFAULT_PRIVS.iter().map(|p| p.to_string()).collect(),
            Some(text) => text
                .split([',', ' ', ';'])
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
        };
        Privs(set)
    }

    pub fn has(&self, privilege: &str) -> bool {
        self.0.contains(privilege)
    }

    /// `privilege` on `path`, else Proxmox's 403.
    pub fn require(&self, path: &str, privilege: &str) -> Result<(), ApiError> {
        if self.has(privilege) {
            Ok(())
        } else {
            Err(ApiError::permission(path, privilege))
        }
    }

    /// One of `privileges` on `path` (Proxmox's `any` checks); the 403 names
    /// the first.
    pub fn require_any(&self, path: &str, privileges: &[&str]) -> Result<(), ApiError> {
        if privileges.iter().any(|p| self.has(p)) {
            Ok(())
        } else {
            Err(ApiError::permission(
                path,
                privileges.first().copied().unwrap_or(""),
            ))
        }
    }

    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_with_its_secret_passes() {
        let secret = "s3cret";
        assert!(check(Some("PVEAPIToken=pvedeck@pve!deck=s3cret"), secret).is_ok());
        assert!(check(Some("PVEAPIToken pvedeck@pve!deck=s3cret"), secret).is_ok());
        let status = |h| check(h, secret).unwrap_err().status;
        assert_eq!(status(None), 401);
        assert_eq!(status(Some("PVEAPIToken=pvedeck@pve!deck=wrong")), 401);
        assert_eq!(status(Some("PVEAPIToken=root@pam!deck=s3cret")), 401);
        assert_eq!(status(Some("Bearer s3cret")), 401);
    }

    #[test]
    fn privileges_come_from_the_setting() {
        let all = Privs::from_setting(None);
        assert!(all.has("VM.Clone"));
        let some = Privs::from_setting(Some("VM.Audit, VM.Allocate"));
        assert!(some.has("VM.Allocate") && !some.has("VM.Clone"));
        let e = some.require("/vms/101", "VM.Clone").unwrap_err();
        assert_eq!(
            (e.status, e.message.as_str()),
            (403, "Permission check failed (/vms/101, VM.Clone)")
        );
        assert!(
            Privs::from_setting(Some(""))
                .require_any("/", &["Sys.Audit"])
                .is_err()
        );
    }
}
