//! A Proxmox task id, the UPID: what a long API call answers at once and
//! what its status and log are read by afterwards.
//!
//! `UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:`, written by
//! pve-common's `upid_encode` as `sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:")`
//! and read back by `upid_decode`'s pattern: a node name of letters, digits
//! and inner `-`; pid and starttime of 8 hex digits, pstart of 8 or 9 (it
//! passes 32 bits after 497 days of uptime); type and user not empty, id
//! possibly empty, none with `:` or white space. Proxmox finds a task's
//! files by the UPID's text, so only the text it writes is taken: one that
//! would not print back the same (lower-case hex, say) is refused rather
//! than asked for under another name.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Upid {
    pub node: String,
    pub pid: u32,
    /// The process's start in clock ticks since boot.
    pub pstart: u64,
    /// Unix seconds.
    pub starttime: u32,
    /// `qmcreate`, `qmclone`, `imgcopy`…
    pub kind: String,
    /// The object, often a VMID; may be empty.
    pub id: String,
    /// Who started it: `root@pam`, `pvedeck@pve!deck`.
    pub user: String,
}

/// Why a text is not a UPID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a UPID: {0}")]
pub struct NotUpid(pub String);

impl fmt::Display for Upid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "UPID:{}:{:08X}:{:08X}:{:08X}:{}:{}:{}:",
            self.node, self.pid, self.pstart, self.starttime, self.kind, self.id, self.user
        )
    }
}

/// `[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?`
fn node_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && !s.ends_with('-')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `[^:\s]*` (the `:` cannot occur: the text was split on it).
fn no_space(s: &str) -> bool {
    !s.chars().any(char::is_whitespace)
}

/// `[0-9A-Fa-f]{min,max}`
fn hex(s: &str, min: usize, max: usize) -> Option<u64> {
    (s.len() >= min && s.len() <= max && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

impl FromStr for Upid {
    type Err = NotUpid;

    fn from_str(text: &str) -> Result<Upid, NotUpid> {
        let not = || NotUpid(text.to_string());
        let rest = text
            .strip_prefix("UPID:")
            .and_then(|r| r.strip_suffix(':'))
            .ok_or_else(not)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let [node, pid, pstart, starttime, kind, id, user] = parts.as_slice() else {
            return Err(not());
        };
        let fields_ok = node_name(node)
            && !kind.is_empty()
            && !user.is_empty()
            && [kind, id, user].iter().all(|s| no_space(s));
        if !fields_ok {
            return Err(not());
        }
        let upid = Upid {
            node: node.to_string(),
            pid: hex(pid, 8, 8)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(not)?,
            pstart: hex(pstart, 8, 9).ok_or_else(not)?,
            starttime: hex(starttime, 8, 8)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(not)?,
            kind: kind.to_string(),
            id: id.to_string(),
            user: user.to_string(),
        };
        // Upper-case hex, no padding beyond 8 digits: Proxmox's own text.
        if upid.to_string() != text {
            return Err(not());
        }
        Ok(upid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// UPIDs in the shape Proxmox VE writes them.
    const REAL: [&str; 4] = [
        // `qm create` through the API, as pvedeck's token.
        "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:pvedeck@pve!deck:",
        // Verbatim from a PVE 8 node's process list (`systemctl status
        // pvedaemon`): a console, whose id is empty.
        "UPID:pve:00001285:00011C08:6956CDF0:vncshell::root@pam:",
        // A node name with a dash.
        "UPID:pve-02:003A4F1E:05D2B7A9:65F1C2D0:qmstart:100:root@pam:",
        // Uptime past 497 days: a 9-digit pstart.
        "UPID:node3:0001F3C2:1A2B3C4D5:6601A2B3:vzdump::root@pam:",
    ];

    #[test]
    fn real_upids_parse_and_print_back_the_same() {
        for text in REAL {
            let upid: Upid = text.parse().expect(text);
            assert_eq!(upid.to_string(), text);
        }
        let upid: Upid = REAL[0].parse().unwrap();
        assert_eq!(
            upid,
            Upid {
                node: "pve1".into(),
                pid: 0x000A_1B2C,
                pstart: 0x0012_C3D4,
                starttime: 0x66A1_B2C3,
                kind: "qmcreate".into(),
                id: "101".into(),
                user: "pvedeck@pve!deck".into(),
            }
        );
        let long: Upid = REAL[3].parse().unwrap();
        assert_eq!(long.pstart, 0x1_A2B3_C4D5);
        assert_eq!(long.id, "");
    }

    #[test]
    fn only_proxmoxs_pattern_parses() {
        for bad in [
            "",
            "upid",
            "UPID:",
            // No user, or no closing colon.
            "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:",
            "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam",
            "pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            // The node.
            "UPID::000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            "UPID:../x:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            "UPID:-pve:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            // The numbers: hex, 8 digits (pstart 8 or 9), upper case.
            "UPID:pve1:XYZ:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            "UPID:pve1:zz0A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            "UPID:pve1:A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            "UPID:pve1:000A1B2C:0012C3D4A0:66A1B2C3:qmcreate:101:root@pam:",
            "UPID:pve1:000a1b2c:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            "UPID:pve1:000A1B2C:00012C3D4:66A1B2C3:qmcreate:101:root@pam:",
            // Type and user not empty, no white space anywhere.
            "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3::101:root@pam:",
            "UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qm create:101:root@pam:",
            " UPID:pve1:000A1B2C:0012C3D4:66A1B2C3:qmcreate:101:root@pam:",
        ] {
            assert_eq!(bad.parse::<Upid>(), Err(NotUpid(bad.to_string())), "{bad}");
        }
    }
}
