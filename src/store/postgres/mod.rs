//! The shared store: PostgreSQL at `DATABASE_URL`, for several pvedeck
//! processes on one database (docs/architecture.md#one-store-two-databases).
//!
//! The driver (`tokio-postgres`) and its pool (`deadpool-postgres`) are
//! async; the [`Store`](super::Store) trait is not, because its callers
//! already run off the async workers. So the store owns a one-thread
//! runtime: each call sends its statements there and waits for the answer,
//! from whatever thread it is on — a blocking thread, the jobs' writer, or
//! (briefly, as SQLite did) an async worker — without ever starting a
//! runtime inside another.
//!
//! The schema is versioned: `migrations/NNNN_name.sql`, applied in order at
//! start-up, each once, under an advisory lock so that replicas starting
//! together do not race.

mod accounts;
mod audit;
mod jobs;
mod sessions;

use std::borrow::Cow;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use pvedeck_config::mask_password;
use tokio_postgres::types::{FromSql, ToSql};
use tokio_postgres::{NoTls, Row};

use super::{Held, Holding, Notice, Store, StoreError};

/// The schema's versions, in order: (version, name, SQL).
const MIGRATIONS: [(i32, &str, &str); 3] = [
    (1, "initial", include_str!("migrations/0001_initial.sql")),
    (2, "replicas", include_str!("migrations/0002_replicas.sql")),
    (3, "clusters", include_str!("migrations/0003_clusters.sql")),
];

/// The channels the listener hears (`migrations/0002_replicas.sql`, and
/// `pvedeck_changed`, which replicas send themselves).
const CHANNELS: &str = "LISTEN pvedeck_events; LISTEN pvedeck_jobs; LISTEN pvedeck_people; \
                        LISTEN pvedeck_changed; LISTEN pvedeck_sessions";

/// Notices held for a slow reader before it must read again (`Resync`).
const NOTICES: usize = 4096;

/// How long the listener waits before connecting again after losing the
/// server.
const RELISTEN: Duration = Duration::from_secs(1);

/// Any fixed number: the advisory lock the migrations are applied under.
const MIGRATION_LOCK: i64 = 0x7076_6564_6563_6b31;

/// Connections per process: a handful of writers and readers at once.
const POOL_SIZE: usize = 16;

/// How long a statement waits for a connection, and a connection for the
/// server, before the database counts as unavailable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A statement's parameter, owned so that it can cross to the runtime.
pub(super) type Param = Box<dyn ToSql + Sync + Send>;

pub(super) fn param<T: ToSql + Sync + Send + 'static>(value: T) -> Param {
    Box::new(value)
}

/// Ids and VMIDs are unsigned here and `BIGINT` there.
pub(super) fn int(n: impl Into<u64>) -> Param {
    param(i64::try_from(n.into()).unwrap_or(i64::MAX))
}

pub(super) fn opt_int(n: Option<impl Into<u64>>) -> Param {
    param(n.map(|n| i64::try_from(n.into()).unwrap_or(i64::MAX)))
}

type Sql = Cow<'static, str>;

pub struct PgStore {
    pool: Pool,
    notices: tokio::sync::broadcast::Sender<Notice>,
    /// `None` once dropped: the runtime is let go without waiting.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which is refused on an
        // async worker; nothing of the store's is left to wait for.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Why a statement failed: the database out of reach (503, retried), or
/// the statement itself.
fn sql_error(e: tokio_postgres::Error) -> StoreError {
    let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io {
        StoreError::Unavailable(e.to_string())
    } else {
        let why = e
            .as_db_error()
            .map_or_else(|| e.to_string(), |db| db.message().to_string());
        StoreError::Postgres(why)
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => sql_error(e),
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// A column of a row, or an error naming it.
pub(super) fn get<'a, T: FromSql<'a>>(row: &'a Row, column: &str) -> Result<T, StoreError> {
    row.try_get(column)
        .map_err(|e| StoreError::Postgres(format!("column {column}: {e}")))
}

pub(super) fn get_u32(row: &Row, column: &str) -> Result<Option<u32>, StoreError> {
    Ok(get::<Option<i64>>(row, column)?.and_then(|n| u32::try_from(n).ok()))
}

pub(super) fn get_u64(row: &Row, column: &str) -> Result<u64, StoreError> {
    Ok(u64::try_from(get::<i64>(row, column)?).unwrap_or(0))
}

impl PgStore {
    /// Connects, checks that the server answers, and brings the schema up
    /// to date.
    pub fn open(url: &str) -> Result<PgStore, StoreError> {
        let masked = mask_password(url);
        let refused = |why: String| StoreError::Connect {
            url: masked.clone(),
            why,
        };
        let mut config = tokio_postgres::Config::from_str(url)
            // The driver's message may quote the URL: say what is wrong
            // without it.
            .map_err(|_| refused("not a PostgreSQL connection URL".to_string()))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("pvedeck");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("pvedeck-pg")
            .enable_all()
            .build()
            .map_err(|e| refused(format!("cannot start its runtime: {e}")))?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = {
            // The pool's timeouts run on the runtime they are built in.
            let _entered = runtime.enter();
            Pool::builder(manager)
                .max_size(POOL_SIZE)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(CONNECT_TIMEOUT))
                .create_timeout(Some(CONNECT_TIMEOUT))
                .build()
                .map_err(|e| refused(e.to_string()))?
        };
        let (notices, _) = tokio::sync::broadcast::channel(NOTICES);
        let store = PgStore {
            pool,
            notices,
            runtime: Some(runtime),
        };
        store.migrate().map_err(|e| match e {
            StoreError::Unavailable(why) | StoreError::Postgres(why) => refused(why),
            other => other,
        })?;
        if let Some(runtime) = &store.runtime {
            // It ends with the runtime, when the store is dropped.
            runtime.spawn(listen(url.to_string(), store.notices.clone()));
        }
        Ok(store)
    }

    /// Runs `sql` without waiting for it (an announcement, a release):
    /// a failure is logged.
    pub(super) fn fire(&self, sql: &'static str, params: Vec<Param>) {
        let Some(runtime) = &self.runtime else {
            return;
        };
        let pool = self.pool.clone();
        runtime.spawn(async move {
            let done = async {
                let client = pool.get().await.map_err(pool_error)?;
                let refs: Vec<&(dyn ToSql + Sync)> = params
                    .iter()
                    .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                    .collect();
                client.execute(sql, &refs).await.map_err(sql_error)
            };
            if let Err(e) = done.await {
                tracing::warn!("database: {e}");
            }
        });
    }

    /// Runs `work` on the store's runtime and waits for it here.
    fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| StoreError::Task("the database runtime has stopped".to_string()))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .map_err(|_| StoreError::Task("the database runtime has stopped".to_string()))?
    }

    pub(super) fn query(
        &self,
        sql: impl Into<Sql>,
        params: Vec<Param>,
    ) -> Result<Vec<Row>, StoreError> {
        let (pool, sql) = (self.pool.clone(), sql.into());
        self.run(async move {
            let client = pool.get().await.map_err(pool_error)?;
            let statement = client.prepare_cached(&sql).await.map_err(sql_error)?;
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            client.query(&statement, &refs).await.map_err(sql_error)
        })
    }

    pub(super) fn query_one(
        &self,
        sql: impl Into<Sql>,
        params: Vec<Param>,
    ) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    pub(super) fn execute(
        &self,
        sql: impl Into<Sql>,
        params: Vec<Param>,
    ) -> Result<u64, StoreError> {
        Ok(self.transaction(vec![(sql.into(), params)])?[0])
    }

    /// Runs `statements` in one transaction; how many rows each touched.
    pub(super) fn transaction(
        &self,
        statements: Vec<(Sql, Vec<Param>)>,
    ) -> Result<Vec<u64>, StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            let mut client = pool.get().await.map_err(pool_error)?;
            let tx = client.transaction().await.map_err(sql_error)?;
            let mut counts = Vec::with_capacity(statements.len());
            for (sql, params) in &statements {
                let statement = tx.prepare_cached(sql).await.map_err(sql_error)?;
                let refs: Vec<&(dyn ToSql + Sync)> = params
                    .iter()
                    .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                    .collect();
                counts.push(tx.execute(&statement, &refs).await.map_err(sql_error)?);
            }
            tx.commit().await.map_err(sql_error)?;
            Ok(counts)
        })
    }

    /// Applies the migrations this database has not had, in order, in one
    /// transaction, under an advisory lock.
    fn migrate(&self) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            let mut client = pool.get().await.map_err(pool_error)?;
            let tx = client.transaction().await.map_err(sql_error)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(sql_error)?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (
                     version INTEGER PRIMARY KEY,
                     name    TEXT    NOT NULL,
                     applied BIGINT  NOT NULL
                 )",
            )
            .await
            .map_err(sql_error)?;
            let newest: Option<i32> = tx
                .query_one("SELECT MAX(version) FROM schema_migrations", &[])
                .await
                .map_err(sql_error)?
                .get(0);
            let newest = newest.unwrap_or(0);
            let known = MIGRATIONS.last().map_or(0, |m| m.0);
            if newest > known {
                return Err(StoreError::Postgres(format!(
                    "the database's schema is version {newest}, newer than this pvedeck's \
                     ({known}): run the newer pvedeck, or restore a backup"
                )));
            }
            for (version, name, sql) in MIGRATIONS {
                if version <= newest {
                    continue;
                }
                tx.batch_execute(sql).await.map_err(|e| {
                    StoreError::Postgres(format!("migration {version} ({name}): {}", sql_error(e)))
                })?;
                tx.execute(
                    "INSERT INTO schema_migrations (version, name, applied) VALUES ($1, $2, $3)",
                    &[&version, &name, &pvedeck_support::clock::now_ms()],
                )
                .await
                .map_err(sql_error)?;
                tracing::info!(version, name, "database schema migrated");
            }
            tx.commit().await.map_err(sql_error)
        })
    }
}

impl Store for PgStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn shared(&self) -> bool {
        true
    }

    fn notices(&self) -> Option<tokio::sync::broadcast::Receiver<Notice>> {
        Some(self.notices.subscribe())
    }

    /// Waits for the notice's commit: the others have it before this
    /// replica answers the request that made the change.
    fn announce_change(&self, from: &str) {
        if let Err(e) = self.execute(
            "SELECT pg_notify('pvedeck_changed', $1)",
            vec![param(from.to_string())],
        ) {
            tracing::warn!("cannot tell the other replicas of a change: {e}");
        }
    }

    /// A session-level advisory lock on a connection of its own, kept out
    /// of the pool until the hold is dropped.
    fn hold(&self, name: &str) -> Holding {
        let Some(runtime) = &self.runtime else {
            return Box::pin(async {
                Err(StoreError::Task("the database runtime has stopped".into()))
            });
        };
        let (pool, name, handle) = (
            self.pool.clone(),
            name.to_string(),
            runtime.handle().clone(),
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        let key = name.clone();
        runtime.spawn(async move {
            let locked = async {
                let client = pool.get().await.map_err(pool_error)?;
                client
                    .execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&key])
                    .await
                    .map_err(sql_error)?;
                Ok::<_, StoreError>(client)
            }
            .await;
            if let Err(Ok(client)) = tx.send(locked) {
                // No one waits for it any more: let go at once, or the
                // pooled connection would keep the lock.
                unlock(client, &key).await;
            }
        });
        Box::pin(async move {
            let client = rx
                .await
                .map_err(|_| StoreError::Task("the database runtime has stopped".into()))??;
            Ok(Some(Box::new(PgHold {
                client: Some(client),
                name,
                handle,
            }) as Held))
        })
    }
}

async fn unlock(client: deadpool_postgres::Object, name: &str) {
    if let Err(e) = client
        .execute(
            "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
            &[&name],
        )
        .await
    {
        // The connection goes with its locks if it cannot say so.
        tracing::warn!("cannot let go of {name}: {}", sql_error(e));
        drop(deadpool_postgres::Object::take(client));
    }
}

/// An advisory lock held; let go (on the store's runtime) when dropped.
struct PgHold {
    client: Option<deadpool_postgres::Object>,
    name: String,
    handle: tokio::runtime::Handle,
}

impl Drop for PgHold {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let name = std::mem::take(&mut self.name);
            self.handle
                .spawn(async move { unlock(client, &name).await });
        }
    }
}

/// A notification as a [`Notice`]; `None` for one this version does not
/// know.
fn notice(channel: &str, payload: &str) -> Option<Notice> {
    let mut words = payload.split(' ');
    let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
    Some(match channel {
        "pvedeck_events" => Notice::Event {
            job: number()?,
            seq: number()?,
        },
        "pvedeck_jobs" => Notice::Ended { job: number()? },
        "pvedeck_people" => Notice::People,
        "pvedeck_changed" => Notice::Changed {
            from: payload.to_string(),
        },
        "pvedeck_sessions" => Notice::SessionClosed {
            hash: payload.to_string(),
        },
        _ => return None,
    })
}

/// Listens on its own connection (a pooled one would be recycled) for as
/// long as the store lives, connecting again when the server goes away;
/// after each (re)connection a `Resync`, since notices sent meanwhile are
/// lost.
async fn listen(url: String, notices: tokio::sync::broadcast::Sender<Notice>) {
    loop {
        if let Err(e) = listen_once(&url, &notices).await {
            tracing::warn!("database listener: {}", sql_error(e));
        }
        tokio::time::sleep(RELISTEN).await;
    }
}

async fn listen_once(
    url: &str,
    notices: &tokio::sync::broadcast::Sender<Notice>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = tokio_postgres::connect(url, NoTls).await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = futures_util::StreamExt::next(&mut messages).await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    let heard = (n.channel().to_string(), n.payload().to_string());
                    if tx.send(Ok(heard)).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    });
    if let Err(e) = client.batch_execute(CHANNELS).await {
        driver.abort();
        return Err(e);
    }
    let _ = notices.send(Notice::Resync);
    let ended = loop {
        match rx.recv().await {
            Some(Ok((channel, payload))) => {
                if let Some(n) = notice(&channel, &payload) {
                    let _ = notices.send(n);
                }
            }
            Some(Err(e)) => break Err(e),
            None => break Ok(()),
        }
    };
    driver.abort();
    drop(client);
    ended
}
