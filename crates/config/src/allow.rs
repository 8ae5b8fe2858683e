//! Client address rules: `ALLOW_IPS` entries are exact addresses or CIDR blocks.

use std::net::IpAddr;

use ipnet::IpNet;

/// One `ALLOW_IPS` entry: `10.0.0.0/8`, or an address alone (a block of one).
fn block(entry: &str) -> Option<IpNet> {
    entry
        .parse::<IpNet>()
        .ok()
        .or_else(|| entry.parse::<IpAddr>().ok().map(IpNet::from))
}

/// A dual-stack listener reports IPv4 clients as `::ffff:a.b.c.d`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Who may change anything. `0.0.0.0` anywhere in the list means everyone, as
/// in go-pve-qemu.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowList {
    Everyone,
    Only(Vec<IpNet>),
}

impl AllowList {
    pub fn everyone() -> AllowList {
        AllowList::Everyone
    }

    /// Parses a comma list; on failure returns the entry that is neither an
    /// address nor a CIDR block.
    pub fn parse(raw: &str) -> Result<AllowList, String> {
        let mut blocks = Vec::new();
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if entry == "0.0.0.0" {
                return Ok(AllowList::Everyone);
            }
            blocks.push(block(entry).ok_or_else(|| entry.to_string())?);
        }
        if blocks.is_empty() {
            return Ok(AllowList::Everyone);
        }
        Ok(AllowList::Only(blocks))
    }

    pub fn allows(&self, ip: IpAddr) -> bool {
        match self {
            AllowList::Everyone => true,
            AllowList::Only(blocks) => {
                let ip = canonical(ip);
                blocks.iter().any(|b| b.contains(&ip))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn exact_addresses_and_blocks() {
        let list = AllowList::parse("192.168.0.10, 10.0.0.0/8, fd00::/8").unwrap();
        assert!(list.allows(ip("192.168.0.10")));
        assert!(!list.allows(ip("192.168.0.11")));
        assert!(list.allows(ip("10.255.0.1")));
        assert!(list.allows(ip("fd12::1")));
        assert!(!list.allows(ip("fe80::1")));
    }

    #[test]
    fn mapped_ipv4_clients_match_ipv4_entries() {
        let list = AllowList::parse("127.0.0.1").unwrap();
        assert!(list.allows(ip("::ffff:127.0.0.1")));
    }

    #[test]
    fn zero_address_means_everyone_and_prefix_zero_matches_all() {
        assert_eq!(
            AllowList::parse("10.0.0.1,0.0.0.0"),
            Ok(AllowList::Everyone)
        );
        assert!(AllowList::parse("0.0.0.0/0").unwrap().allows(ip("8.8.8.8")));
    }

    #[test]
    fn nonsense_names_its_entry() {
        assert_eq!(AllowList::parse("10.0.0.1,nope"), Err("nope".to_string()));
        assert_eq!(
            AllowList::parse("10.0.0.1/40"),
            Err("10.0.0.1/40".to_string())
        );
    }
}
