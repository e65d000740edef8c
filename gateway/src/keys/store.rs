//! [`KeyStore`]: the managed keys, teams and their audit log in the gateway's database (the SQLite file of `--db`
//! or the PostgreSQL database of `--database-url`, beside the call records), in tables of the gateway's own.
//!
//! A row keeps what the database must index (id, unique name, the secret's SHA-256) in columns and the rest as
//! one JSON document, so both databases run the same statements. Every change runs in one transaction that reads
//! the row (locked, on PostgreSQL), writes it, appends the audit entry and bumps the version counter; on
//! PostgreSQL it also sends `NOTIFY tower_chat_keys`, delivered to every listening replica when the transaction
//! commits. Readers compare the counter before reloading anything ([`KeyStore::version`]). A team's deletion is
//! the one change that removes a row ([`super::removal`]); a key change naming a team holds that team's row
//! `FOR SHARE` on PostgreSQL until it commits, so the two cannot cross.

use serde_json::Value;
use tower_chat_persistence::store::sqlite::rusqlite::{self, params, OptionalExtension};
use tower_chat_persistence::{Migration, PostgresStore, SqliteStore, StoreError};

use super::record::{Kind, Row};
use crate::error::ApiError;

/// The channel changes are announced on.
pub(crate) const CHANNEL: &str = "tower_chat_keys";

const MIGRATION_ID: &str = "tower-chat-gateway/0003_managed_keys";
const TABLES_SQL: &str = "CREATE TABLE IF NOT EXISTS tower_chat_teams (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tower_chat_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    digest TEXT NOT NULL UNIQUE,
    previous_digest TEXT,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tower_chat_key_audit (
    id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_id TEXT NOT NULL,
    before_doc TEXT,
    after_doc TEXT
);
CREATE INDEX IF NOT EXISTS tower_chat_key_audit_at ON tower_chat_key_audit (at_ms);
CREATE TABLE IF NOT EXISTS tower_chat_keys_version (
    id INTEGER PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO tower_chat_keys_version (id, version) VALUES (1, 0)";

/// Everything the in-memory table is built from, with the counter it was read at.
#[derive(Clone, Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) version: i64,
    pub(crate) keys: Vec<Row>,
    pub(crate) teams: Vec<Row>,
}

/// One change, as the audit log keeps it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AuditEntry {
    pub(crate) id: String,
    pub(crate) at_ms: i64,
    /// The operator key's name.
    pub(crate) actor: String,
    /// `create`, `update`, `rotate`, `revoke`, `delete`.
    pub(crate) action: String,
    pub(crate) kind: String,
    pub(crate) target: String,
    /// The row before and after, as [`Row::public`] shows it (never a secret or its digest); no `after` for a
    /// deletion.
    pub(crate) before: Option<Value>,
    pub(crate) after: Option<Value>,
}

/// Who changes which row how.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) kind: Kind,
    pub(crate) id: String,
    pub(crate) actor: String,
    pub(crate) action: &'static str,
}

/// The new row, from the stored one (`None`: there is none yet), or a refusal.
pub(crate) type Edit = Box<dyn FnOnce(Option<Row>) -> Result<Row, ApiError> + Send>;

/// Where the managed keys live. Cheap to clone.
#[derive(Clone)]
pub(crate) enum KeyStore {
    /// The SQLite file of `--db`.
    Sqlite(SqliteStore),
    /// The PostgreSQL database of `--database-url`, and its URL (for the connection that listens).
    Postgres(PostgresStore, String),
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyStore::Sqlite(_) => "KeyStore::Sqlite",
            KeyStore::Postgres(..) => "KeyStore::Postgres",
        })
    }
}

/// `$n` placeholders as SQLite's `?n`: one text of every statement for both databases.
pub(super) fn lite(sql: &str) -> String {
    sql.replace('$', "?")
}

pub(super) fn columns(kind: Kind) -> &'static str {
    match kind {
        Kind::Key => "id, name, digest, previous_digest, doc",
        Kind::Team => "id, name, '' AS digest, NULL AS previous_digest, doc",
    }
}

fn table(kind: Kind) -> &'static str {
    match kind {
        Kind::Key => "tower_chat_keys",
        Kind::Team => "tower_chat_teams",
    }
}

fn upsert_sql(kind: Kind) -> &'static str {
    match kind {
        Kind::Key => {
            "INSERT INTO tower_chat_keys (id, name, digest, previous_digest, doc) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, digest = excluded.digest, \
             previous_digest = excluded.previous_digest, doc = excluded.doc"
        }
        Kind::Team => {
            "INSERT INTO tower_chat_teams (id, name, doc) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, doc = excluded.doc"
        }
    }
}

const AUDIT_INSERT: &str = "INSERT INTO tower_chat_key_audit \
    (id, at_ms, actor, action, target_kind, target_id, before_doc, after_doc) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
const AUDIT_SELECT: &str = "SELECT id, at_ms, actor, action, target_kind, target_id, before_doc, after_doc \
    FROM tower_chat_key_audit WHERE ($1 = '' OR target_id = $1) ORDER BY at_ms DESC, id DESC LIMIT $2 OFFSET $3";
pub(super) const BUMP: &str =
    "UPDATE tower_chat_keys_version SET version = version + 1 WHERE id = 1";
const VERSION: &str = "SELECT version FROM tower_chat_keys_version WHERE id = 1";

pub(super) fn lite_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: row.get(0)?,
        name: row.get(1)?,
        digest: row.get(2)?,
        previous_digest: row.get(3)?,
        doc: row.get(4)?,
    })
}

pub(super) fn pg_row(row: &tokio_postgres::Row) -> Row {
    Row {
        id: row.get(0),
        name: row.get(1),
        digest: row.get(2),
        previous_digest: row.get(3),
        doc: row.get(4),
    }
}

fn parse_doc(text: Option<String>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

/// What a transaction decided before it commits: a refusal, or the rows and audit entry to write.
struct Planned {
    row: Row,
    audit: AuditEntry,
}

/// The checks every edit passes, against the database inside its transaction: the name is free, the owner
/// team exists.
fn plan(
    change: &Change,
    before: Option<Row>,
    edit: Edit,
    name_taken: impl FnOnce(&str) -> Result<bool, ApiError>,
    team_exists: impl FnOnce(&str) -> Result<bool, ApiError>,
) -> Result<Planned, ApiError> {
    let now = super::record::now_ms();
    let before_public = before.as_ref().map(|r| r.public(change.kind, now));
    let row = edit(before)?;
    if name_taken(&row.name)? {
        return Err(super::record::conflict(
            "name_taken",
            format!(
                "a {} named `{}` exists already",
                change.kind.noun(),
                row.name
            ),
        ));
    }
    if change.kind == Kind::Key {
        if let Some(team) = row.key_doc().map_err(super::record::internal)?.team {
            if !team_exists(&team)? {
                return Err(team_missing(&team));
            }
        }
    }
    let audit = AuditEntry {
        id: uuid::Uuid::now_v7().to_string(),
        at_ms: now,
        actor: change.actor.clone(),
        action: change.action.to_owned(),
        kind: change.kind.noun().to_owned(),
        target: change.id.clone(),
        before: before_public,
        after: Some(row.public(change.kind, now)),
    };
    Ok(Planned { row, audit })
}

fn team_missing(team: &str) -> ApiError {
    ApiError::not_found_error("team_not_found", format!("no team `{team}`"))
}

pub(super) fn insert_audit_lite(
    tx: &rusqlite::Transaction<'_>,
    audit: &AuditEntry,
) -> rusqlite::Result<usize> {
    tx.execute(
        &lite(AUDIT_INSERT),
        params![
            audit.id,
            audit.at_ms,
            audit.actor,
            audit.action,
            audit.kind,
            audit.target,
            audit.before.as_ref().map(Value::to_string),
            audit.after.as_ref().map(Value::to_string),
        ],
    )
}

pub(super) async fn insert_audit_pg(
    tx: &tokio_postgres::Transaction<'_>,
    audit: &AuditEntry,
) -> Result<u64, tokio_postgres::Error> {
    tx.execute(
        AUDIT_INSERT,
        &[
            &audit.id,
            &audit.at_ms,
            &audit.actor,
            &audit.action,
            &audit.kind,
            &audit.target,
            &audit.before.as_ref().map(Value::to_string),
            &audit.after.as_ref().map(Value::to_string),
        ],
    )
    .await
}

/// Move the version counter and announce the change, from inside the transaction that made it.
pub(super) async fn bump_and_notify_pg(
    tx: &tokio_postgres::Transaction<'_>,
) -> Result<(), tokio_postgres::Error> {
    tx.execute(BUMP, &[]).await?;
    // Delivered to every listener when the transaction commits, never before.
    tx.execute("SELECT pg_notify($1, '')", &[&CHANNEL]).await?;
    Ok(())
}

pub(super) fn store_failed(e: StoreError) -> ApiError {
    super::record::internal(e.to_string())
}

impl KeyStore {
    /// The keys in `db`'s file, creating the tables if they are missing.
    pub(crate) async fn sqlite(db: SqliteStore) -> Result<Self, StoreError> {
        db.apply_migrations(&[Migration::new(MIGRATION_ID, TABLES_SQL)])
            .await?;
        Ok(KeyStore::Sqlite(db))
    }

    /// The keys in `db`'s database (`url` is where it was opened), creating the tables if they are missing.
    pub(crate) async fn postgres(db: PostgresStore, url: String) -> Result<Self, StoreError> {
        db.apply_migrations(&[Migration::new(MIGRATION_ID, TABLES_SQL)])
            .await?;
        Ok(KeyStore::Postgres(db, url))
    }

    /// The version counter: it moves with every change.
    pub(crate) async fn version(&self) -> Result<i64, StoreError> {
        match self {
            KeyStore::Sqlite(db) => {
                db.run("managed keys version", |conn| {
                    conn.query_row(VERSION, [], |row| row.get(0))
                })
                .await
            }
            KeyStore::Postgres(db, _) => Ok(db
                .client()
                .await?
                .query_one(VERSION, &[])
                .await
                .map_err(pg("version"))?
                .get(0)),
        }
    }

    /// Every key and team. The counter is read first: a change landing while the rows are read makes the
    /// snapshot look older than it is, so the next check reloads, never the reverse.
    pub(crate) async fn load(&self) -> Result<Snapshot, StoreError> {
        let keys = format!("SELECT {} FROM tower_chat_keys", columns(Kind::Key));
        let teams = format!("SELECT {} FROM tower_chat_teams", columns(Kind::Team));
        match self {
            KeyStore::Sqlite(db) => {
                db.run("managed keys load", move |conn| {
                    let tx = conn.transaction()?;
                    let version = tx.query_row(VERSION, [], |row| row.get(0))?;
                    let keys = tx
                        .prepare(&keys)?
                        .query_map([], lite_row)?
                        .collect::<Result<_, _>>()?;
                    let teams = tx
                        .prepare(&teams)?
                        .query_map([], lite_row)?
                        .collect::<Result<_, _>>()?;
                    Ok(Snapshot {
                        version,
                        keys,
                        teams,
                    })
                })
                .await
            }
            KeyStore::Postgres(db, _) => {
                let client = db.client().await?;
                let version = client
                    .query_one(VERSION, &[])
                    .await
                    .map_err(pg("version"))?
                    .get(0);
                let keys = client.query(&keys, &[]).await.map_err(pg("load"))?;
                let teams = client.query(&teams, &[]).await.map_err(pg("load"))?;
                Ok(Snapshot {
                    version,
                    keys: keys.iter().map(pg_row).collect(),
                    teams: teams.iter().map(pg_row).collect(),
                })
            }
        }
    }

    /// Apply `edit` to row `change.id` in one transaction with its audit entry; the new row, or the refusal
    /// (`edit`'s own, a taken name, an unknown team, a store failure).
    pub(crate) async fn change(&self, change: Change, edit: Edit) -> Result<Row, ApiError> {
        let kind = change.kind;
        let select = format!(
            "SELECT {} FROM {} WHERE id = $1",
            columns(kind),
            table(kind)
        );
        let taken = format!("SELECT 1 FROM {} WHERE name = $1 AND id <> $2", table(kind));
        let team = "SELECT 1 FROM tower_chat_teams WHERE id = $1";
        match self {
            KeyStore::Sqlite(db) => db
                .run("managed keys change", move |conn| {
                    let tx =
                        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    let before = tx
                        .query_row(&lite(&select), params![change.id], lite_row)
                        .optional()?;
                    let id = change.id.clone();
                    let planned = plan(
                        &change,
                        before,
                        edit,
                        |name| {
                            tx.query_row(&lite(&taken), params![name, id], |_| Ok(()))
                                .optional()
                                .map(|found| found.is_some())
                                .map_err(|e| super::record::internal(format!("SQLite: {e}")))
                        },
                        |team_id| {
                            tx.query_row(&lite(team), params![team_id], |_| Ok(()))
                                .optional()
                                .map(|found| found.is_some())
                                .map_err(|e| super::record::internal(format!("SQLite: {e}")))
                        },
                    );
                    let Planned { row, audit } = match planned {
                        Ok(planned) => planned,
                        Err(refused) => return Ok(Err(refused)),
                    };
                    match kind {
                        Kind::Key => tx.execute(
                            &lite(upsert_sql(kind)),
                            params![row.id, row.name, row.digest, row.previous_digest, row.doc],
                        )?,
                        Kind::Team => {
                            tx.execute(&lite(upsert_sql(kind)), params![row.id, row.name, row.doc])?
                        }
                    };
                    insert_audit_lite(&tx, &audit)?;
                    tx.execute(BUMP, [])?;
                    tx.commit()?;
                    Ok(Ok(row))
                })
                .await
                .map_err(store_failed)?,
            KeyStore::Postgres(db, _) => {
                let failed = |e: tokio_postgres::Error| store_failed(pg("change")(e));
                let mut client = db.client().await.map_err(store_failed)?;
                let tx = client.transaction().await.map_err(failed)?;
                let before = tx
                    .query_opt(&format!("{select} FOR UPDATE"), &[&change.id])
                    .await
                    .map_err(failed)?
                    .as_ref()
                    .map(pg_row);
                // The checks' answers are read before the edit runs: the closure cannot await.
                let taken_names: Vec<String> = tx
                    .query(
                        &format!("SELECT name FROM {} WHERE id <> $1", table(kind)),
                        &[&change.id],
                    )
                    .await
                    .map_err(failed)?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                let teams: Vec<String> = tx
                    .query("SELECT id FROM tower_chat_teams", &[])
                    .await
                    .map_err(failed)?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                let Planned { row, audit } = plan(
                    &change,
                    before,
                    edit,
                    |name| Ok(taken_names.iter().any(|n| n == name)),
                    |team| Ok(teams.iter().any(|t| t == team)),
                )?;
                if kind == Kind::Key {
                    if let Some(team) = row.key_doc().map_err(super::record::internal)?.team {
                        // Held until this commits: a deletion of the team waits for it, then sees this member
                        // (or, deleted first, leaves nothing to lock, and the key is refused).
                        let locked = tx
                            .query_opt(
                                "SELECT 1 FROM tower_chat_teams WHERE id = $1 FOR SHARE",
                                &[&team],
                            )
                            .await
                            .map_err(failed)?;
                        if locked.is_none() {
                            return Err(team_missing(&team));
                        }
                    }
                }
                match kind {
                    Kind::Key => tx
                        .execute(
                            upsert_sql(kind),
                            &[
                                &row.id,
                                &row.name,
                                &row.digest,
                                &row.previous_digest,
                                &row.doc,
                            ],
                        )
                        .await
                        .map_err(failed)?,
                    Kind::Team => tx
                        .execute(upsert_sql(kind), &[&row.id, &row.name, &row.doc])
                        .await
                        .map_err(failed)?,
                };
                insert_audit_pg(&tx, &audit).await.map_err(failed)?;
                bump_and_notify_pg(&tx).await.map_err(failed)?;
                tx.commit().await.map_err(failed)?;
                Ok(row)
            }
        }
    }

    /// The latest `limit` audit entries after the newest `skip`, newest first; of one key or team when `target`
    /// is not empty.
    pub(crate) async fn audit(
        &self,
        target: String,
        limit: i64,
        skip: i64,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        match self {
            KeyStore::Sqlite(db) => {
                db.run("managed keys audit", move |conn| {
                    conn.prepare(&lite(AUDIT_SELECT))?
                        .query_map(params![target, limit, skip], |row| {
                            Ok(AuditEntry {
                                id: row.get(0)?,
                                at_ms: row.get(1)?,
                                actor: row.get(2)?,
                                action: row.get(3)?,
                                kind: row.get(4)?,
                                target: row.get(5)?,
                                before: parse_doc(row.get(6)?),
                                after: parse_doc(row.get(7)?),
                            })
                        })?
                        .collect()
                })
                .await
            }
            KeyStore::Postgres(db, _) => Ok(db
                .client()
                .await?
                .query(AUDIT_SELECT, &[&target, &limit, &skip])
                .await
                .map_err(pg("audit"))?
                .iter()
                .map(|row| AuditEntry {
                    id: row.get(0),
                    at_ms: row.get(1),
                    actor: row.get(2),
                    action: row.get(3),
                    kind: row.get(4),
                    target: row.get(5),
                    before: parse_doc(row.get(6)),
                    after: parse_doc(row.get(7)),
                })
                .collect()),
        }
    }
}

pub(super) fn pg(what: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| {
        // tokio-postgres displays a server error as just "db error": name the server's reason.
        let message = match e.as_db_error() {
            Some(db) => format!("PostgreSQL: managed keys {what} ({})", db.message()),
            None => format!("PostgreSQL: managed keys {what}"),
        };
        StoreError::with_source(message, e)
    }
}
