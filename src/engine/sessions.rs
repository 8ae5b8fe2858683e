//! UI sessions (when sign-in is configured): a login with a valid token (or
//! an OpenID Connect sign-in) opens a session whose id — random, opaque, not
//! the token — goes in the browser's cookie and ends after `SESSION_TTL` or
//! at logout. A session knows whose it is, not what they may do: that is
//! read at each request, so that a removed user's sessions end with them. Failed logins
//! are limited per client (`throttle`).
//!
//! Sessions live in memory: a restart logs everyone out, which costs a
//! login and keeps no credential on disk. With replicas sharing PostgreSQL
//! they are also written there, by the SHA-256 of their id (never the id),
//! so that a login on one replica is good on every one and a logout ends
//! it on all (the others hear of it and forget it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pvedeck_support::clock::now_ms;
use pvedeck_support::sync::lock;
use sha2::{Digest, Sha256};

use crate::store::Store;

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

impl Subject {
    /// As the shared store keeps it.
    fn word(&self) -> String {
        match self {
            Subject::ApiToken(n) => format!("token:{n}"),
            Subject::User(name) => format!("user:{name}"),
        }
    }

    fn from_word(word: &str) -> Option<Subject> {
        match word.split_once(':')? {
            ("token", n) => n.parse().ok().map(Subject::ApiToken),
            ("user", name) => Some(Subject::User(name.to_string())),
            _ => None,
        }
    }
}

/// A session id as it is kept: its SHA-256, hex.
pub(crate) fn hash(id: &str) -> String {
    Sha256::digest(id.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub struct Sessions {
    ttl: Duration,
    /// Session id's hash → when it ends, and whose it is.
    open: Mutex<HashMap<String, (Instant, Subject)>>,
    /// The store replicas share, when they do.
    shared: Option<Arc<dyn Store>>,
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            open: Mutex::default(),
            shared: None,
        }
    }

    /// Sessions every replica on `store` shares (a shared store only).
    pub fn on(ttl: Duration, store: Arc<dyn Store>) -> Sessions {
        Sessions {
            shared: store.shared().then_some(store),
            ..Sessions::new(ttl)
        }
    }

    /// Another replica closed the session with this hash.
    pub fn forget(&self, hash: &str) {
        lock(&self.open).remove(hash);
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
        let key = hash(&id);
        open.insert(key.clone(), (now + self.ttl, subject.clone()));
        drop(open);
        if let Some(store) = &self.shared {
            let ends = now_ms() + i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX);
            if let Err(e) = store.put_session(&key, &subject.word(), ends) {
                // Good on this replica still; the others ask for a login.
                tracing::warn!("cannot share a session: {e}");
            }
        }
        Ok(id)
    }

    /// Whose open session `id` is, if it has not ended. Replicas sharing
    /// a store ask it each time (a session-cookie request is a person's
    /// page or action, not the API's load), so that a logout through one
    /// is a logout through all at once; this process's memory answers
    /// only while the database is out of reach.
    pub fn subject(&self, id: &str, now: Instant) -> Option<Subject> {
        let key = hash(id);
        let known = || {
            lock(&self.open)
                .get(&key)
                .filter(|(ends, _)| *ends > now)
                .map(|(_, subject)| subject.clone())
        };
        let Some(store) = &self.shared else {
            return known();
        };
        let wall = now_ms();
        match store.session(&key, wall) {
            Ok(Some((word, ends))) => {
                let subject = Subject::from_word(&word)?;
                let left = Duration::from_millis(u64::try_from(ends - wall).unwrap_or(0));
                let mut open = lock(&self.open);
                if open.len() < MAX_SESSIONS || open.contains_key(&key) {
                    open.insert(key.clone(), (now + left.min(self.ttl), subject.clone()));
                }
                Some(subject)
            }
            Ok(None) => {
                lock(&self.open).remove(&key);
                None
            }
            Err(e) if e.is_unavailable() => known(),
            Err(e) => {
                tracing::warn!("cannot read a shared session: {e}");
                None
            }
        }
    }

    /// When the open session `id` ends, as this process knows it.
    pub fn ends(&self, id: &str) -> Option<Instant> {
        lock(&self.open).get(&hash(id)).map(|(ends, _)| *ends)
    }

    pub fn close(&self, id: &str) {
        let key = hash(id);
        lock(&self.open).remove(&key);
        if let Some(store) = &self.shared
            && let Err(e) = store.close_session(&key)
        {
            tracing::warn!("cannot end a shared session: {e}");
        }
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
