//! The people as the server knows them between two reads of the database:
//! users, token hashes and VM owners, in memory, so that a request is told
//! who sent it and what they own without a database read (the VM list is
//! served tens of thousands of times a second).
//!
//! What the admin commands change on `DATA_DIR` while the server runs
//! reaches it within a [`REREAD`]: SQLite's `data_version` tells when
//! another connection committed. What the server changes itself it reads
//! again at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use pvedeck_domain::account::{TokenInfo, UserInfo};
use pvedeck_support::sync::lock;

use crate::store::{Store, StoreError};

/// How often the database is asked whether someone else changed it.
pub const REREAD: Duration = Duration::from_secs(1);

/// One reading of the people tables.
#[derive(Debug, Default)]
pub struct People {
    pub users: HashMap<String, UserInfo>,
    /// Token hash → the token.
    pub tokens: HashMap<String, TokenInfo>,
    pub owners: HashMap<u32, String>,
    /// Changes with every reading: what is built from one (the VM list
    /// with owners) is built again for the next.
    pub generation: u64,
}

pub struct Directory {
    store: Arc<dyn Store>,
    /// Whose VMs' owners this directory holds: each cluster has its own
    /// VMIDs.
    cluster: String,
    people: RwLock<Arc<People>>,
    generation: AtomicU64,
    seen_version: AtomicI64,
    /// Token id → when it was last used, not yet written.
    used: Mutex<HashMap<String, i64>>,
}

impl Directory {
    pub fn open(store: Arc<dyn Store>, cluster: &str) -> Result<Directory, StoreError> {
        let directory = Directory {
            store,
            cluster: cluster.to_string(),
            people: RwLock::default(),
            generation: AtomicU64::new(0),
            seen_version: AtomicI64::new(0),
            used: Mutex::default(),
        };
        directory.reload()?;
        Ok(directory)
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn people(&self) -> Arc<People> {
        match self.people.read() {
            Ok(people) => people.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the tables again.
    pub fn reload(&self) -> Result<(), StoreError> {
        let version = self.store.data_version()?;
        let users = self.store.users()?;
        let tokens = self.store.tokens()?;
        let owners = self.store.owners(&self.cluster)?;
        let people = People {
            users: users.into_iter().map(|u| (u.name.clone(), u)).collect(),
            tokens: tokens.into_iter().map(|t| (t.hash, t.info)).collect(),
            owners: owners.into_iter().collect(),
            generation: self.generation.fetch_add(1, Ordering::SeqCst) + 1,
        };
        self.seen_version.store(version, Ordering::SeqCst);
        let people = Arc::new(people);
        match self.people.write() {
            Ok(mut slot) => *slot = people,
            Err(poisoned) => *poisoned.into_inner() = people,
        }
        Ok(())
    }

    /// Reads the tables again if another connection changed them, and
    /// writes when tokens were last used. Blocking: run it off the async
    /// workers.
    pub fn refresh(&self) -> Result<(), StoreError> {
        let used: Vec<(String, i64)> = lock(&self.used).drain().collect();
        if !used.is_empty() {
            self.store.touch_tokens(&used)?;
        }
        if self.store.data_version()? != self.seen_version.load(Ordering::SeqCst) {
            self.reload()?;
        }
        Ok(())
    }

    /// Notes a token's use (written by the next [`Directory::refresh`]).
    pub fn token_used(&self, id: &str, at: i64) {
        lock(&self.used).insert(id.to_string(), at);
    }

    /// Keeps the directory fresh while the server runs.
    pub fn start_refresher(self: &Arc<Self>) {
        let directory = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REREAD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(directory) = directory.upgrade() else {
                    return;
                };
                let result = tokio::task::spawn_blocking(move || directory.refresh()).await;
                match result {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!("cannot read the users again: {e}"),
                    Err(e) => tracing::warn!("cannot read the users again: {e}"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use pvedeck_domain::account::Role;

    use super::*;

    #[test]
    fn a_change_by_another_connection_is_read_at_the_next_refresh() {
        let dir = std::env::temp_dir().join(format!("pvedeck-directory-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("pvedeck.db");
        let open = || crate::store::open(crate::store::Location::Sqlite(&path)).unwrap();
        let directory = Directory::open(open(), "default").unwrap();
        let first = directory.people().generation;
        directory.refresh().unwrap();
        assert_eq!(directory.people().generation, first, "nothing changed");

        let other = open();
        other.set_owner("default", 101, "alice", 1).unwrap();
        other
            .add_user(&UserInfo {
                name: "alice".into(),
                role: Role::User,
                groups: vec![],
                quota: None,
                source: "local".into(),
                created: 1,
            })
            .unwrap();
        directory.refresh().unwrap();
        let people = directory.people();
        assert!(people.generation > first);
        assert_eq!(people.owners.get(&101).map(String::as_str), Some("alice"));
        assert!(people.users.contains_key("alice"));
    }
}
