//! [`SessionStore`]: where logged-in console sessions live — in the gateway's database (the SQLite file of `--db`
//! or the PostgreSQL database of `--database-url`, beside the call records and approvals), so a session survives
//! a restart, works on every replica sharing the database, and a logout ends it everywhere. A gateway built
//! without stores ([`crate::Gateway::with_stack`]) keeps them in memory.
//!
//! A row holds the SHA-256 of the session id (never the id itself), the operator's name, the CSRF token and two
//! times in milliseconds since the Unix epoch. A session expires [`IDLE_TIMEOUT`] after its last request and
//! [`MAX_AGE`] after login; its last-seen time is written at most once a minute, so browsing the console does
//! not write on every page. Expired rows are deleted at each login, and past [`MAX_SESSIONS`] the least recently
//! seen go.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use tower_chat_persistence::store::sqlite::rusqlite::{params, OptionalExtension};
use tower_chat_persistence::{Migration, PostgresStore, SqliteStore, StoreError};

use super::session::{cookie, digest, random_token, Session, IDLE_TIMEOUT, MAX_AGE};

/// The most sessions kept; past it the least recently seen are dropped.
pub(crate) const MAX_SESSIONS: usize = 4096;
/// A session's last-seen time is written when it is older than this.
const TOUCH_AFTER: Duration = Duration::from_secs(60);

const MIGRATION_ID: &str = "tower-chat-gateway/0001_console_sessions";
const TABLE_SQL: &str = "CREATE TABLE IF NOT EXISTS tower_chat_console_sessions (
    id_digest TEXT PRIMARY KEY,
    operator TEXT NOT NULL,
    csrf TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS tower_chat_console_sessions_seen ON tower_chat_console_sessions (last_seen_ms)";

/// Where sessions live. Cloning is cheap; clones share the sessions.
#[derive(Clone)]
pub(crate) enum SessionStore {
    /// In this process only (a gateway without a database).
    Memory(Arc<Mutex<HashMap<String, Row>>>),
    /// In the SQLite file of the call records.
    Sqlite(SqliteStore),
    /// In the PostgreSQL database of the call records.
    Postgres(PostgresStore),
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SessionStore::Memory(_) => "SessionStore::Memory",
            SessionStore::Sqlite(_) => "SessionStore::Sqlite",
            SessionStore::Postgres(_) => "SessionStore::Postgres",
        })
    }
}

impl Default for SessionStore {
    fn default() -> Self {
        SessionStore::Memory(Arc::default())
    }
}

/// A stored session.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    operator: String,
    csrf: String,
    created_ms: i64,
    last_seen_ms: i64,
}

impl Row {
    fn expired(&self, now: i64) -> bool {
        now - self.last_seen_ms > millis(IDLE_TIMEOUT) || now - self.created_ms > millis(MAX_AGE)
    }

    fn into_session(self) -> Session {
        Session {
            operator: self.operator,
            csrf: self.csrf,
            waiting: None,
        }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

impl SessionStore {
    /// Sessions in `db`'s file, creating the table if it is missing.
    pub(crate) async fn sqlite(db: SqliteStore) -> Result<Self, StoreError> {
        db.apply_migrations(&[Migration::new(MIGRATION_ID, TABLE_SQL)])
            .await?;
        Ok(SessionStore::Sqlite(db))
    }

    /// Sessions in `db`'s database, creating the table if it is missing.
    pub(crate) async fn postgres(db: PostgresStore) -> Result<Self, StoreError> {
        db.apply_migrations(&[Migration::new(MIGRATION_ID, TABLE_SQL)])
            .await?;
        Ok(SessionStore::Postgres(db))
    }

    /// Log `operator` in: returns the new session's id (the cookie's value).
    pub(crate) async fn create(&self, operator: &str) -> Result<String, StoreError> {
        let id = random_token();
        let now = now_ms();
        let row = Row {
            operator: operator.to_owned(),
            csrf: random_token(),
            created_ms: now,
            last_seen_ms: now,
        };
        let key = digest(&id);
        let (idle_before, born_before) = (now - millis(IDLE_TIMEOUT), now - millis(MAX_AGE));
        match self {
            SessionStore::Memory(map) => {
                let mut map = lock(map);
                map.retain(|_, s| !s.expired(now));
                while map.len() >= MAX_SESSIONS {
                    let Some(oldest) = map
                        .iter()
                        .min_by_key(|(_, s)| s.last_seen_ms)
                        .map(|(k, _)| k.clone())
                    else {
                        break;
                    };
                    map.remove(&oldest);
                }
                map.insert(key, row);
            }
            SessionStore::Sqlite(db) => {
                db.run("console session login", move |conn| {
                    let tx = conn.transaction()?;
                    tx.execute(
                        "DELETE FROM tower_chat_console_sessions \
                         WHERE last_seen_ms < ?1 OR created_ms < ?2",
                        params![idle_before, born_before],
                    )?;
                    tx.execute(
                        "INSERT INTO tower_chat_console_sessions \
                         (id_digest, operator, csrf, created_ms, last_seen_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                        params![key, row.operator, row.csrf, row.created_ms, row.last_seen_ms],
                    )?;
                    tx.execute(
                        "DELETE FROM tower_chat_console_sessions WHERE id_digest IN \
                         (SELECT id_digest FROM tower_chat_console_sessions \
                          ORDER BY last_seen_ms DESC LIMIT -1 OFFSET ?1)",
                        params![MAX_SESSIONS as i64],
                    )?;
                    tx.commit()
                })
                .await?;
            }
            SessionStore::Postgres(db) => {
                let mut client = db.client().await?;
                let tx = client.transaction().await.map_err(pg("login"))?;
                tx.execute(
                    "DELETE FROM tower_chat_console_sessions WHERE last_seen_ms < $1 OR created_ms < $2",
                    &[&idle_before, &born_before],
                )
                .await
                .map_err(pg("login"))?;
                tx.execute(
                    "INSERT INTO tower_chat_console_sessions \
                     (id_digest, operator, csrf, created_ms, last_seen_ms) VALUES ($1, $2, $3, $4, $5)",
                    &[&key, &row.operator, &row.csrf, &row.created_ms, &row.last_seen_ms],
                )
                .await
                .map_err(pg("login"))?;
                tx.execute(
                    "DELETE FROM tower_chat_console_sessions WHERE id_digest IN \
                     (SELECT id_digest FROM tower_chat_console_sessions ORDER BY last_seen_ms DESC OFFSET $1)",
                    &[&(MAX_SESSIONS as i64)],
                )
                .await
                .map_err(pg("login"))?;
                tx.commit().await.map_err(pg("login"))?;
            }
        }
        Ok(id)
    }

    /// The live session the request's cookie names (its last-seen time refreshed); `None` when there is none or
    /// it expired (an expired one is deleted).
    pub(crate) async fn find(&self, headers: &HeaderMap) -> Result<Option<Session>, StoreError> {
        let Some(id) = cookie(headers) else {
            return Ok(None);
        };
        let key = digest(id);
        let now = now_ms();
        let row = match self {
            SessionStore::Memory(map) => lock(map).get(&key).cloned(),
            SessionStore::Sqlite(db) => {
                let key = key.clone();
                db.run("console session lookup", move |conn| {
                    conn.query_row(
                        "SELECT operator, csrf, created_ms, last_seen_ms \
                         FROM tower_chat_console_sessions WHERE id_digest = ?1",
                        params![key],
                        |row| {
                            Ok(Row {
                                operator: row.get(0)?,
                                csrf: row.get(1)?,
                                created_ms: row.get(2)?,
                                last_seen_ms: row.get(3)?,
                            })
                        },
                    )
                    .optional()
                })
                .await?
            }
            SessionStore::Postgres(db) => db
                .client()
                .await?
                .query_opt(
                    "SELECT operator, csrf, created_ms, last_seen_ms \
                     FROM tower_chat_console_sessions WHERE id_digest = $1",
                    &[&key],
                )
                .await
                .map_err(pg("lookup"))?
                .map(|row| Row {
                    operator: row.get(0),
                    csrf: row.get(1),
                    created_ms: row.get(2),
                    last_seen_ms: row.get(3),
                }),
        };
        let Some(row) = row else {
            return Ok(None);
        };
        if row.expired(now) {
            self.delete(key).await?;
            return Ok(None);
        }
        if now - row.last_seen_ms > millis(TOUCH_AFTER) {
            self.touch(key, now).await?;
        }
        Ok(Some(row.into_session()))
    }

    /// Log out the session the request's cookie names, on every replica.
    pub(crate) async fn remove(&self, headers: &HeaderMap) -> Result<(), StoreError> {
        match cookie(headers) {
            Some(id) => self.delete(digest(id)).await,
            None => Ok(()),
        }
    }

    async fn delete(&self, key: String) -> Result<(), StoreError> {
        match self {
            SessionStore::Memory(map) => {
                lock(map).remove(&key);
            }
            SessionStore::Sqlite(db) => {
                db.run("console session logout", move |conn| {
                    conn.execute(
                        "DELETE FROM tower_chat_console_sessions WHERE id_digest = ?1",
                        params![key],
                    )
                })
                .await?;
            }
            SessionStore::Postgres(db) => {
                db.client()
                    .await?
                    .execute(
                        "DELETE FROM tower_chat_console_sessions WHERE id_digest = $1",
                        &[&key],
                    )
                    .await
                    .map_err(pg("logout"))?;
            }
        }
        Ok(())
    }

    async fn touch(&self, key: String, now: i64) -> Result<(), StoreError> {
        match self {
            SessionStore::Memory(map) => {
                if let Some(row) = lock(map).get_mut(&key) {
                    row.last_seen_ms = now;
                }
            }
            SessionStore::Sqlite(db) => {
                db.run("console session refresh", move |conn| {
                    conn.execute(
                        "UPDATE tower_chat_console_sessions SET last_seen_ms = ?1 WHERE id_digest = ?2",
                        params![now, key],
                    )
                })
                .await?;
            }
            SessionStore::Postgres(db) => {
                db.client()
                    .await?
                    .execute(
                        "UPDATE tower_chat_console_sessions SET last_seen_ms = $1 WHERE id_digest = $2",
                        &[&now, &key],
                    )
                    .await
                    .map_err(pg("refresh"))?;
            }
        }
        Ok(())
    }

    /// How many sessions are stored (expired ones included until the next login clears them).
    #[cfg(test)]
    async fn len(&self) -> usize {
        match self {
            SessionStore::Memory(map) => lock(map).len(),
            SessionStore::Sqlite(db) => db
                .run("count", |conn| {
                    conn.query_row(
                        "SELECT COUNT(*) FROM tower_chat_console_sessions",
                        [],
                        |r| r.get::<_, i64>(0),
                    )
                })
                .await
                .unwrap() as usize,
            SessionStore::Postgres(_) => {
                unreachable!("only counted in the SQLite and memory tests")
            }
        }
    }

    /// Store `n` sessions last seen at `seen_ms`, in one go (tests of the bound without `n` logins).
    #[cfg(test)]
    async fn fill(&self, n: usize, seen_ms: i64) {
        let rows: Vec<(String, Row)> = (0..n)
            .map(|_| {
                let row = Row {
                    operator: "filler".into(),
                    csrf: random_token(),
                    created_ms: seen_ms,
                    last_seen_ms: seen_ms,
                };
                (digest(&random_token()), row)
            })
            .collect();
        match self {
            SessionStore::Memory(map) => lock(map).extend(rows),
            SessionStore::Sqlite(db) => db
                .run("fill", move |conn| {
                    let tx = conn.transaction()?;
                    for (key, row) in rows {
                        tx.execute(
                            "INSERT INTO tower_chat_console_sessions VALUES (?1, ?2, ?3, ?4, ?5)",
                            params![
                                key,
                                row.operator,
                                row.csrf,
                                row.created_ms,
                                row.last_seen_ms
                            ],
                        )?;
                    }
                    tx.commit()
                })
                .await
                .unwrap(),
            SessionStore::Postgres(_) => unreachable!("only filled in the SQLite and memory tests"),
        }
    }

    /// Age the session `id` by `by` (tests of expiry without waiting).
    #[cfg(test)]
    async fn age(&self, id: &str, by: Duration) {
        let (key, by) = (digest(id), millis(by));
        match self {
            SessionStore::Memory(map) => {
                let mut map = lock(map);
                let row = map.get_mut(&key).unwrap();
                row.created_ms -= by;
                row.last_seen_ms -= by;
            }
            SessionStore::Sqlite(db) => {
                db.run("age", move |conn| {
                    conn.execute(
                        "UPDATE tower_chat_console_sessions \
                         SET created_ms = created_ms - ?1, last_seen_ms = last_seen_ms - ?1 WHERE id_digest = ?2",
                        params![by, key],
                    )
                })
                .await
                .unwrap();
            }
            SessionStore::Postgres(_) => unreachable!("not aged in tests"),
        }
    }
}

fn lock(map: &Mutex<HashMap<String, Row>>) -> std::sync::MutexGuard<'_, HashMap<String, Row>> {
    map.lock().unwrap_or_else(|e| e.into_inner())
}

fn pg(what: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| StoreError::with_source(format!("PostgreSQL: console session {what}"), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(id: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::COOKIE,
            format!("other=1; tc_console={id}").parse().unwrap(),
        );
        headers
    }

    async fn sqlite(dir: &tempfile::TempDir) -> SessionStore {
        let db = SqliteStore::open(dir.path().join("gateway.db"))
            .await
            .unwrap();
        SessionStore::sqlite(db).await.unwrap()
    }

    async fn found_removed_and_expired(store: SessionStore) {
        let id = store.create("carol").await.unwrap();
        assert_eq!(id.len(), 64);
        let session = store.find(&with_cookie(&id)).await.unwrap().unwrap();
        assert_eq!(session.operator, "carol");
        assert_eq!(session.csrf.len(), 64);
        assert_ne!(session.csrf, id);
        assert_eq!(store.find(&with_cookie("00")).await.unwrap(), None);
        assert_eq!(store.find(&HeaderMap::new()).await.unwrap(), None);
        let forged = "0".repeat(64);
        assert_eq!(store.find(&with_cookie(&forged)).await.unwrap(), None);
        store.remove(&with_cookie(&id)).await.unwrap();
        assert_eq!(
            store.find(&with_cookie(&id)).await.unwrap(),
            None,
            "logged out"
        );

        let idle = store.create("carol").await.unwrap();
        store
            .age(&idle, IDLE_TIMEOUT + Duration::from_secs(1))
            .await;
        let fresh = store.create("dave").await.unwrap();
        assert_eq!(store.len().await, 1, "a login deletes expired sessions");
        assert_eq!(
            store.find(&with_cookie(&idle)).await.unwrap(),
            None,
            "idle too long"
        );
        // Kept alive by use, a session still ends MAX_AGE after login.
        store.age(&fresh, MAX_AGE - Duration::from_secs(30)).await;
        store.touch(digest(&fresh), now_ms()).await.unwrap();
        assert!(store.find(&with_cookie(&fresh)).await.unwrap().is_some());
        store.age(&fresh, Duration::from_secs(60)).await;
        store.touch(digest(&fresh), now_ms()).await.unwrap();
        assert_eq!(
            store.find(&with_cookie(&fresh)).await.unwrap(),
            None,
            "past the maximum age"
        );
    }

    #[tokio::test]
    async fn in_memory_sessions_are_found_removed_and_expire() {
        found_removed_and_expired(SessionStore::default()).await;
    }

    #[tokio::test]
    async fn sqlite_sessions_are_found_removed_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        found_removed_and_expired(sqlite(&dir).await).await;
    }

    #[tokio::test]
    async fn a_session_outlives_the_process_and_is_shared_by_a_second_store_on_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let first = sqlite(&dir).await;
        let id = first.create("carol").await.unwrap();
        drop(first);
        let reopened = sqlite(&dir).await;
        let session = reopened.find(&with_cookie(&id)).await.unwrap().unwrap();
        assert_eq!(session.operator, "carol");
        let stored: String = match &reopened {
            SessionStore::Sqlite(db) => db
                .run("read", |conn| {
                    conn.query_row(
                        "SELECT id_digest FROM tower_chat_console_sessions",
                        [],
                        |row| row.get(0),
                    )
                })
                .await
                .unwrap(),
            _ => unreachable!(),
        };
        assert_ne!(stored, id, "the database holds the digest, not the cookie");
        reopened.remove(&with_cookie(&id)).await.unwrap();
        assert_eq!(
            sqlite(&dir).await.find(&with_cookie(&id)).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn the_least_recently_seen_go_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        for store in [SessionStore::default(), sqlite(&dir).await] {
            least_recently_seen_go(store).await;
        }
    }

    async fn least_recently_seen_go(store: SessionStore) {
        let first = store.create("carol").await.unwrap();
        store.age(&first, Duration::from_secs(10)).await;
        store
            .fill(MAX_SESSIONS - 1, now_ms() - millis(Duration::from_secs(5)))
            .await;
        assert_eq!(store.len().await, MAX_SESSIONS);
        let newest = store.create("carol").await.unwrap();
        assert_eq!(store.len().await, MAX_SESSIONS);
        assert_eq!(
            store.find(&with_cookie(&first)).await.unwrap(),
            None,
            "the least recently seen"
        );
        assert!(store.find(&with_cookie(&newest)).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn postgresql_sessions_are_shared_and_logout_ends_them_everywhere() {
        let Some(url) = tower_chat_testkit::database_url() else {
            return;
        };
        let a = SessionStore::postgres(PostgresStore::connect(url.clone()).await.unwrap())
            .await
            .unwrap();
        let b = SessionStore::postgres(PostgresStore::connect(url).await.unwrap())
            .await
            .unwrap();
        let id = a.create("carol").await.unwrap();
        assert_eq!(
            b.find(&with_cookie(&id)).await.unwrap().unwrap().operator,
            "carol"
        );
        b.remove(&with_cookie(&id)).await.unwrap();
        assert_eq!(a.find(&with_cookie(&id)).await.unwrap(), None);
    }
}
