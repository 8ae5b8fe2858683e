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
pub fn canonical(ip: IpAddr) -> IpAddr {
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

/// Whom a per-client limit counts: an IPv4 address, or the /64 of an
/// IPv6 one (one host holds a whole /64, and would otherwise have 2^64
/// addresses to spread over).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    V4(std::net::Ipv4Addr),
    V6Prefix(u64),
}

impl ClientKey {
    pub fn of(ip: IpAddr) -> ClientKey {
        match canonical(ip) {
            IpAddr::V4(v4) => ClientKey::V4(v4),
            IpAddr::V6(v6) => ClientKey::V6Prefix((u128::from(v6) >> 64) as u64),
        }
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientKey::V4(v4) => write!(f, "{v4}"),
            ClientKey::V6Prefix(prefix) => {
                let net = std::net::Ipv6Addr::from(u128::from(*prefix) << 64);
                write!(f, "{net}/64")
            }
        }
    }
}

/// `TRUSTED_PROXIES`: the reverse proxies in front of pvedeck, whose
/// `X-Forwarded-For` is believed. Empty: none, and the TCP peer is the
/// client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proxies(Vec<IpNet>);

impl Proxies {
    /// Parses a comma list; on failure returns the entry that is neither an
    /// address nor a CIDR block.
    pub fn parse(raw: &str) -> Result<Proxies, String> {
        raw.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|entry| block(entry).ok_or_else(|| entry.to_string()))
            .collect::<Result<_, _>>()
            .map(Proxies)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|b| b.contains(&ip))
    }

    /// The client of a request from `peer`, given its `X-Forwarded-For`
    /// values in order: the peer itself unless it is a trusted proxy;
    /// else the rightmost forwarded address that is not one (what a client
    /// writes further left is its own say, not to be believed). A list
    /// that is all proxies, or unreadable before a client is found, leaves
    /// the last address that was.
    pub fn client(&self, peer: IpAddr, forwarded_for: &[&str]) -> IpAddr {
        let mut client = canonical(peer);
        if !self.trusts(client) {
            return client;
        }
        let hops = forwarded_for.iter().flat_map(|v| v.split(',')).rev();
        for hop in hops {
            let Ok(ip) = hop.trim().parse::<IpAddr>() else {
                break;
            };
            client = canonical(ip);
            if !self.trusts(client) {
                break;
            }
        }
        client
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

    #[test]
    fn a_forwarded_client_is_believed_only_from_a_trusted_proxy() {
        let proxies = Proxies::parse("10.0.0.5, fd00::/8").unwrap();
        let xff = ["198.51.100.7, 10.0.0.5"];
        // Not from the proxy: its header is anyone's say.
        assert_eq!(proxies.client(ip("203.0.113.9"), &xff), ip("203.0.113.9"));
        // From the proxy: the rightmost address that is not a proxy.
        assert_eq!(proxies.client(ip("10.0.0.5"), &xff), ip("198.51.100.7"));
        assert_eq!(
            proxies.client(ip("::ffff:10.0.0.5"), &["1.2.3.4, 198.51.100.7"]),
            ip("198.51.100.7"),
            "a client cannot choose its address by writing one further left"
        );
        assert_eq!(
            proxies.client(ip("10.0.0.5"), &["1.2.3.4", "198.51.100.7, fd00::1"]),
            ip("198.51.100.7"),
            "several headers are one list"
        );
        assert_eq!(proxies.client(ip("10.0.0.5"), &[]), ip("10.0.0.5"));
        assert_eq!(
            proxies.client(ip("10.0.0.5"), &["garbage, 198.51.100.8"]),
            ip("198.51.100.8")
        );
        assert_eq!(Proxies::parse("10.0.0.1,nope"), Err("nope".to_string()));
        assert!(Proxies::default().is_empty());
    }
}
