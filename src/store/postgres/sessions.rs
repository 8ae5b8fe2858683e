//! UI sessions in PostgreSQL, by the hash of their id: a login on one
//! replica is good on every replica, and a logout ends it on all.

use super::{PgStore, get, param};
use crate::store::{SessionStore, StoreError};

impl SessionStore for PgStore {
    fn put_session(&self, hash: &str, subject: &str, expires: i64) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO sessions (hash, subject, expires) VALUES ($1, $2, $3)
             ON CONFLICT (hash) DO UPDATE SET subject = EXCLUDED.subject,
                 expires = EXCLUDED.expires",
            vec![
                param(hash.to_string()),
                param(subject.to_string()),
                param(expires),
            ],
        )?;
        // Ended sessions go as new ones come: no sweeper of its own.
        self.fire(
            "DELETE FROM sessions WHERE expires < $1",
            vec![param(pvedeck_support::clock::now_ms())],
        );
        Ok(())
    }

    fn session(&self, hash: &str, now: i64) -> Result<Option<(String, i64)>, StoreError> {
        self.query_one(
            "SELECT subject, expires FROM sessions WHERE hash = $1 AND expires > $2",
            vec![param(hash.to_string()), param(now)],
        )?
        .map(|row| Ok((get(&row, "subject")?, get(&row, "expires")?)))
        .transpose()
    }

    fn close_session(&self, hash: &str) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM sessions WHERE hash = $1",
            vec![param(hash.to_string())],
        )?;
        Ok(())
    }
}
