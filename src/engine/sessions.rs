//! UI sessions (when sign-in is configured): a login with a valid token (or
//! an OpenID Connect sign-in) opens a session whose id — random, opaque, not
//! the token — goes in the browser's cookie and ends after `SESSION_TTL` or
//! at logout. A session knows whose it is, not what they may do: that is
//! read at each request, so that a removed user's sessions end with them. Failed logins
//! are limited per client (`throttle`).
//!
//! Sessions live in memory: a restart logs everyone out, which costs a
//! login and keeps no credential on disk.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pvedeck_support::sync::lock;

/// Open sessions at most: a flood of logins cannot grow memory without end
/// (the oldest goes first).
const MAX_SESSIONS: usize = 10_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
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
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            open: Mutex::default(),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new session, after a valid token: its id.
    pub fn open(&self, now: Instant, subject: Subject) -> Result<String, SessionError> {
        let id =
            super::accounts::random_hex(32).map_err(|e| SessionError::Random(e.to_string()))?;
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
        let a = sessions.open(t, Subject::ApiToken(1)).unwrap();
        let b = sessions.open(t, Subject::User("alice".into())).unwrap();
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
}
