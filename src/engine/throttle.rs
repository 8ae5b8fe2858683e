//! Failed credentials — a bearer token that is no one's, a login with a
//! wrong token — limited per client, so that no secret can be guessed at
//! the speed of the network and no client can lock out another.
//!
//! A client is an IPv4 address, or an IPv6 /64: one host holds a whole /64
//! and would otherwise have 2^64 addresses to try from. Every try is
//! counted when it begins, under one lock, and given back when it
//! succeeds: a hundred tries sent at once count as a hundred, not as none
//! until the first has failed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pvedeck_config::allow::ClientKey;
use pvedeck_support::sync::lock;

/// Tries a client may have fail (or in flight) within [`WINDOW`].
pub const MAX_FAILURES: u32 = 5;
pub const WINDOW: Duration = Duration::from_secs(60);
/// Clients tracked at most: past it the oldest window goes first, so a
/// flood of addresses costs bounded memory and locks out no one else.
const MAX_CLIENTS: usize = 100_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("too many failed {what} from {client}: try again in {wait_secs} s")]
pub struct TooMany {
    pub what: &'static str,
    pub client: String,
    pub wait_secs: u64,
}

/// One kind of credential's failures, per client.
pub struct Throttle {
    /// `logins`, `tokens`: for the refusal's words.
    what: &'static str,
    tries: Mutex<HashMap<ClientKey, (u32, Instant)>>,
}

impl Throttle {
    pub fn new(what: &'static str) -> Throttle {
        Throttle {
            what,
            tries: Mutex::default(),
        }
    }

    /// Counts a try of `ip`'s, before its credential is looked at;
    /// refused while the client's failures (and tries in flight) in the
    /// window reach [`MAX_FAILURES`]. No address (a socket without a peer)
    /// is not limited.
    pub fn begin(&self, ip: Option<IpAddr>, now: Instant) -> Result<(), TooMany> {
        let Some(ip) = ip else { return Ok(()) };
        let key = ClientKey::of(ip);
        let mut tries = lock(&self.tries);
        if tries.len() >= MAX_CLIENTS {
            tries.retain(|_, (_, since)| now.duration_since(*since) < WINDOW);
            if tries.len() >= MAX_CLIENTS
                && let Some(oldest) = tries.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k)
            {
                tries.remove(&oldest);
            }
        }
        let entry = tries.entry(key).or_insert((0, now));
        if now.duration_since(entry.1) >= WINDOW {
            *entry = (0, now);
        }
        if entry.0 >= MAX_FAILURES {
            return Err(TooMany {
                what: self.what,
                client: key.to_string(),
                wait_secs: (WINDOW - now.duration_since(entry.1)).as_secs().max(1),
            });
        }
        entry.0 += 1;
        Ok(())
    }

    /// A person signed in: their client's failures are forgiven (a bearer
    /// token is only [`Throttle::succeeded`], or a client holding one valid
    /// token could try others without end).
    pub fn forgive(&self, ip: Option<IpAddr>) {
        if let Some(ip) = ip {
            lock(&self.tries).remove(&ClientKey::of(ip));
        }
    }

    /// The try begun for `ip` was a valid credential: it does not count.
    pub fn succeeded(&self, ip: Option<IpAddr>) {
        let Some(ip) = ip else { return };
        let key = ClientKey::of(ip);
        let mut tries = lock(&self.tries);
        if let Some(entry) = tries.get_mut(&key) {
            entry.0 = entry.0.saturating_sub(1);
            if entry.0 == 0 {
                tries.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn failures_lock_out_their_client_for_the_window_only() {
        let t = Throttle::new("logins");
        let now = Instant::now();
        for _ in 0..MAX_FAILURES {
            t.begin(ip("10.0.0.9"), now).unwrap();
        }
        assert_eq!(
            t.begin(ip("10.0.0.9"), now + Duration::from_secs(20)),
            Err(TooMany {
                what: "logins",
                client: "10.0.0.9".into(),
                wait_secs: 40
            })
        );
        assert_eq!(t.begin(ip("10.0.0.10"), now), Ok(()), "another client");
        assert_eq!(t.begin(ip("10.0.0.9"), now + WINDOW), Ok(()));
    }

    #[test]
    fn successes_give_their_try_back() {
        let t = Throttle::new("tokens");
        let now = Instant::now();
        for _ in 0..100 {
            t.begin(ip("10.0.0.9"), now).unwrap();
            t.succeeded(ip("10.0.0.9"));
        }
        assert!(lock(&t.tries).is_empty());
    }

    #[test]
    fn tries_in_flight_count_before_they_fail() {
        // Five begun at once, none finished: the sixth is refused.
        let t = Throttle::new("tokens");
        let now = Instant::now();
        let admitted = (0..50).filter(|_| t.begin(ip("10.0.0.9"), now).is_ok());
        assert_eq!(admitted.count(), MAX_FAILURES as usize);
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let t = Throttle::new("tokens");
        let now = Instant::now();
        for n in 0..MAX_FAILURES {
            t.begin(ip(&format!("2001:db8:1:2::{n}")), now).unwrap();
        }
        let err = t.begin(ip("2001:db8:1:2:ffff::1"), now).unwrap_err();
        assert_eq!(err.client, "2001:db8:1:2::/64");
        assert_eq!(t.begin(ip("2001:db8:1:3::1"), now), Ok(()));
        assert_eq!(
            ClientKey::of("::ffff:10.0.0.1".parse().unwrap()),
            ClientKey::V4(std::net::Ipv4Addr::new(10, 0, 0, 1))
        );
    }
}
