//! UI sessions (when `API_TOKENS` is set): a login with a valid token opens
//! a session whose id — random, opaque, not the token — goes in the
//! browser's cookie and ends after `SESSION_TTL` or at logout. Failed logins
//! are limited per client address, so that a token cannot be guessed at
//! the speed of the network.
//!
//! Sessions live in memory: a restart logs everyone out, which costs a
//! login and keeps no credential on disk.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pvedeck_support::sync::lock;

/// Failed logins an address may make within [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 5;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Open sessions at most: a flood of logins cannot grow memory without end
/// (the oldest goes first).
const MAX_SESSIONS: usize = 10_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    #[error("too many failed logins from {ip}: try again in {wait_secs} s")]
    TooMany { ip: String, wait_secs: u64 },
    #[error("no randomness for a session id: {0}")]
    Random(String),
}

pub struct Sessions {
    ttl: Duration,
    /// Session id → when it ends.
    open: Mutex<HashMap<String, Instant>>,
    /// Address → failed logins in the window that began at the instant.
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            open: Mutex::default(),
            failures: Mutex::default(),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Refuses a client that failed too often lately (before its token is
    /// even looked at).
    pub fn may_try(&self, ip: Option<IpAddr>, now: Instant) -> Result<(), SessionError> {
        let Some(ip) = ip else { return Ok(()) };
        let mut failures = lock(&self.failures);
        match failures.get(&ip).copied() {
            Some((_, since)) if now.duration_since(since) >= FAILURE_WINDOW => {
                failures.remove(&ip);
                Ok(())
            }
            Some((n, since)) if n >= MAX_FAILURES => Err(SessionError::TooMany {
                ip: ip.to_string(),
                wait_secs: (FAILURE_WINDOW - now.duration_since(since))
                    .as_secs()
                    .max(1),
            }),
            _ => Ok(()),
        }
    }

    pub fn failed(&self, ip: Option<IpAddr>, now: Instant) {
        let Some(ip) = ip else { return };
        let mut failures = lock(&self.failures);
        failures.retain(|_, (_, since)| now.duration_since(*since) < FAILURE_WINDOW);
        failures.entry(ip).or_insert((0, now)).0 += 1;
    }

    /// A new session, after a valid token: its id.
    pub fn open(&self, ip: Option<IpAddr>, now: Instant) -> Result<String, SessionError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| SessionError::Random(e.to_string()))?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        if let Some(ip) = ip {
            lock(&self.failures).remove(&ip);
        }
        let mut open = lock(&self.open);
        open.retain(|_, ends| *ends > now);
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open.iter().min_by_key(|(_, e)| **e).map(|(k, _)| k.clone())
        {
            open.remove(&oldest);
        }
        open.insert(id.clone(), now + self.ttl);
        Ok(id)
    }

    /// Whether `id` is an open session that has not ended.
    pub fn valid(&self, id: &str, now: Instant) -> bool {
        lock(&self.open).get(id).is_some_and(|ends| *ends > now)
    }

    pub fn close(&self, id: &str) {
        lock(&self.open).remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_ends_at_its_ttl_or_logout() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let t = Instant::now();
        let a = sessions.open(None, t).unwrap();
        let b = sessions.open(None, t).unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b, "random");
        assert!(sessions.valid(&a, t + Duration::from_secs(59)));
        assert!(!sessions.valid(&a, t + Duration::from_secs(60)));
        sessions.close(&b);
        assert!(!sessions.valid(&b, t));
        assert!(!sessions.valid("guess", t));
    }

    #[test]
    fn failed_logins_are_limited_per_address_for_a_minute() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let t = Instant::now();
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        let other: IpAddr = "10.0.0.10".parse().unwrap();
        for _ in 0..MAX_FAILURES {
            assert_eq!(sessions.may_try(Some(ip), t), Ok(()));
            sessions.failed(Some(ip), t);
        }
        assert_eq!(
            sessions.may_try(Some(ip), t + Duration::from_secs(20)),
            Err(SessionError::TooMany {
                ip: "10.0.0.9".into(),
                wait_secs: 40
            })
        );
        assert_eq!(sessions.may_try(Some(other), t), Ok(()));
        assert_eq!(sessions.may_try(Some(ip), t + FAILURE_WINDOW), Ok(()));
    }
}
