//! UI sessions (when sign-in is configured): a login with a valid token (or
//! an OpenID Connect sign-in) opens a session whose id — random, opaque, not
//! the token — goes in the browser's cookie and ends after `SESSION_TTL` or
//! at logout. A session knows whose it is, not what they may do: that is
//! read at each request, so that a removed user's sessions end with them. Failed logins
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

/// Whose a session is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The n-th of `API_TOKENS` (from 1): an administrator.
    ApiToken(usize),
    /// A user of the database.
    User(String),
}

pub struct Sessions {
    ttl: Duration,
    /// Session id → when it ends, and whose it is.
    open: Mutex<HashMap<String, (Instant, Subject)>>,
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
    pub fn open(
        &self,
        ip: Option<IpAddr>,
        now: Instant,
        subject: Subject,
    ) -> Result<String, SessionError> {
        let id =
            super::accounts::random_hex(32).map_err(|e| SessionError::Random(e.to_string()))?;
        if let Some(ip) = ip {
            lock(&self.failures).remove(&ip);
        }
        let mut open = lock(&self.open);
        open.retain(|_, (ends, _)| *ends > now);
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, (e, _))| *e)
                .map(|(k, _)| k.clone())
        {
            open.remove(&oldest);
        }
        open.insert(id.clone(), (now + self.ttl, subject));
        Ok(id)
    }

    /// Whose open session `id` is, if it has not ended.
    pub fn subject(&self, id: &str, now: Instant) -> Option<Subject> {
        lock(&self.open)
            .get(id)
            .filter(|(ends, _)| *ends > now)
            .map(|(_, subject)| subject.clone())
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
        let a = sessions.open(None, t, Subject::ApiToken(1)).unwrap();
        let b = sessions
            .open(None, t, Subject::User("alice".into()))
            .unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b, "random");
        assert_eq!(
            sessions.subject(&a, t + Duration::from_secs(59)),
            Some(Subject::ApiToken(1))
        );
        assert_eq!(sessions.subject(&a, t + Duration::from_secs(60)), None);
        assert_eq!(sessions.subject(&b, t), Some(Subject::User("alice".into())));
        sessions.close(&b);
        assert_eq!(sessions.subject(&b, t), None);
        assert_eq!(sessions.subject("guess", t), None);
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
