//! [`SessionStore`]: where logged-in console sessions live — in the gateway's database (the SQLite file of `--db`
//! or the PostgreSQL database of `--database-url`, beside the call records and approvals), so a session survives
//! a restart, works on every replica sharing the database, and a logout ends it everywhere. A gateway built
//! without stores ([`crate::Gateway::with_stack`]) keeps them in memory.
//!
//! A row holds the SHA-256 of the session id (never the id itself), the operator's name, the fingerprint of the
//! operator key that logged in ([`crate::edge::auth::ApiKeys::fingerprint`]: never the key), the CSRF token and two
//! times in milliseconds since the Unix epoch. A session lives only as long as its key is in
//! `--operator-keys-file`: the gateway deletes the sessions of keys no longer there when it starts
//! ([`SessionStore::end_unbound`]), and the console refuses one whose key it does not hold. A session expires [`IDLE_TIMEOUT`] after its last request and
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

/// Sessions are bound to the key that logged in. Those from before have no key to check: they end (their
/// operators log in again).
const BOUND_MIGRATION_ID: &str = "tower-chat-gateway/0002_console_sessions_bound_to_key";
const BOUND_SQL: &str = "DELETE FROM tower_chat_console_sessions;
ALTER TABLE tower_chat_console_sessions ADD COLUMN key_fingerprint TEXT NOT NULL DEFAULT ''";

fn migrations() -> [Migration; 2] {
    [
        Migration::new(MIGRATION_ID, TABLE_SQL),
        Migration::new(BOUND_MIGRATION_ID, BOUND_SQL),
    ]
}

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
    key_fingerprint: String,
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
            key_fingerprint: self.key_fingerprint,
            csrf: self.csrf,
            waiting: None,
            manages_keys: false,
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
        db.apply_migrations(&migrations()).await?;
        Ok(SessionStore::Sqlite(db))
    }

    /// Sessions in `db`'s database, creating the table if it is missing.
    pub(crate) async fn postgres(db: PostgresStore) -> Result<Self, StoreError> {
        db.apply_migrations(&migrations()).await?;
        Ok(SessionStore::Postgres(db))
    }

    /// Log `operator` in with the key whose fingerprint is `key_fingerprint`: returns the new session's id (the
    /// cookie's value).
    pub(crate) async fn create(
        &self,
        operator: &str,
        key_fingerprint: &str,
    ) -> Result<String, StoreError> {
        let id = random_token();
        let now = now_ms();
        let row = Row {
            operator: operator.to_owned(),
            key_fingerprint: key_fingerprint.to_owned(),
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
                         (id_digest, operator, csrf, created_ms, last_seen_ms, key_fingerprint) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        params![
                            key,
                            row.operator,
                            row.csrf,
                            row.created_ms,
                            row.last_seen_ms,
                            row.key_fingerprint
                        ],
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
                     (id_digest, operator, csrf, created_ms, last_seen_ms, key_fingerprint) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                    &[
                        &key,
                        &row.operator,
                        &row.csrf,
                        &row.created_ms,
                        &row.last_seen_ms,
                        &row.key_fingerprint,
                    ],
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
                        "SELECT operator, csrf, created_ms, last_seen_ms, key_fingerprint \
                         FROM tower_chat_console_sessions WHERE id_digest = ?1",
                        params![key],
                        |row| {
                            Ok(Row {
                                operator: row.get(0)?,
                                csrf: row.get(1)?,
                                created_ms: row.get(2)?,
                                last_seen_ms: row.get(3)?,
                                key_fingerprint: row.get(4)?,
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
                    "SELECT operator, csrf, created_ms, last_seen_ms, key_fingerprint \
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
                    key_fingerprint: row.get(4),
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

    /// End every session whose key is not among `live` (the fingerprints of the operator keys now configured):
    /// an operator removed from the keys file, or a key rotated, is logged out everywhere. Returns how many
    /// ended.
    pub(crate) async fn end_unbound(&self, live: Vec<String>) -> Result<usize, StoreError> {
        match self {
            SessionStore::Memory(map) => {
                let mut map = lock(map);
                let before = map.len();
                map.retain(|_, row| live.contains(&row.key_fingerprint));
                Ok(before - map.len())
            }
            SessionStore::Sqlite(db) => {
                db.run("console sessions of removed keys", move |conn| {
                    let marks = vec!["?"; live.len()].join(", ");
                    conn.execute(
                        &format!(
                            "DELETE FROM tower_chat_console_sessions WHERE key_fingerprint NOT IN ({marks})"
                        ),
                        tower_chat_persistence::store::sqlite::rusqlite::params_from_iter(&live),
                    )
                })
                .await
            }
            SessionStore::Postgres(db) => {
                let ended = db
                    .client()
                    .await?
                    .execute(
                        "DELETE FROM tower_chat_console_sessions WHERE key_fingerprint <> ALL($1)",
                        &[&live],
                    )
                    .await
                    .map_err(pg("end of removed keys' sessions"))?;
                Ok(usize::try_from(ended).unwrap_or(usize::MAX))
            }
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
}

fn lock(map: &Mutex<HashMap<String, Row>>) -> std::sync::MutexGuard<'_, HashMap<String, Row>> {
    map.lock().unwrap_or_else(|e| e.into_inner())
}

fn pg(what: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| StoreError::with_source(format!("PostgreSQL: console session {what}"), e)
}

#[cfg(test)]
mod tests;
