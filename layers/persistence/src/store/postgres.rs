//! [`PostgresStore`]: one database shared by several gateway replicas, through a connection pool.
//!
//! The schema is the one [`super::sqlite::SqliteStore`] uses, with JSON columns as JSONB. Migrations run on
//! connect under a transaction-scoped advisory lock, so replicas starting together apply each migration once.
//! Connections are plain TCP (`NoTls`): run the database on a private network or behind a TLS-terminating proxy.

use std::fmt;
use std::time::{Duration, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, Runtime};
use futures_util::future::{try_join_all, BoxFuture};
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;
use tower_chat::ConversationId;

use super::chain::{history_sql, Encoder, NodeKey};
use super::rollup::{add_sql, Tally};
use super::schema::{
    abandon_sql, call_summaries_sql, conversation_from_row, insert_key_sql, postgres_migrations,
    select_sql, spend_from_row, spend_sql, Row, StoredColumns, StoredRecord, SummaryColumns,
    CONVERSATION_COLUMNS, EMPTY_MESSAGES, EMPTY_OPTIONS, EMPTY_TEXT, MIGRATIONS_TABLE, SELECT_KEY,
};
use super::{Migration, Store, StoreError};
use crate::call_log::{CallLogPage, CallLogQuery};

mod call_log;
mod retention;
mod spend;
use crate::record::{
    to_micros, CallId, CallQuery, CallRecord, CallSummary, ConversationQuery, ConversationSummary,
    Spend, SpendQuery,
};
use crate::usage::{usage_sql, UsageAggregate, UsageQuery, UsageRow};

pub use deadpool_postgres;
pub use tokio_postgres;

/// The advisory lock key migrations hold (an arbitrary constant: "tcpersist" in ASCII, truncated).
const MIGRATION_LOCK: i64 = 0x7463_7065_7273_6973;

/// The PostgreSQL store. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    schema: Option<String>,
    encoder: std::sync::Arc<Encoder>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .field("pool", &self.pool.status())
            .finish()
    }
}

/// Options for connecting a [`PostgresStore`].
#[derive(Clone)]
pub struct PostgresStoreBuilder {
    url: String,
    schema: Option<String>,
    pool_size: usize,
    connect_timeout: Duration,
    migrations: Vec<Migration>,
}

impl fmt::Debug for PostgresStoreBuilder {
    // The URL may carry a password: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStoreBuilder")
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("migrations", &self.migrations)
            .finish_non_exhaustive()
    }
}

impl PostgresStoreBuilder {
    /// Keep the tables in this schema (created if missing) instead of the connection's default `search_path`.
    /// A plain identifier: ASCII letters, digits and `_`, not starting with a digit.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The most connections the pool opens (default 16).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How long opening a connection, or waiting for a free one, may take before the operation fails (default
    /// 5 s). This bounds how long a write waits while the database is down.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Apply this migration after the crate's own (see [`Migration`]).
    pub fn migration(mut self, migration: Migration) -> Self {
        self.migrations.push(migration);
        self
    }

    /// Build the pool, connect once and apply pending migrations.
    pub async fn connect(self) -> Result<PostgresStore, StoreError> {
        let mut config: tokio_postgres::Config = self
            .url
            .parse()
            .map_err(|e| StoreError::with_source("invalid PostgreSQL URL", e))?;
        if self.pool_size == 0 {
            return Err(StoreError::new(
                "the PostgreSQL pool size must be at least 1",
            ));
        }
        if let Some(schema) = &self.schema {
            if !is_identifier(schema) {
                return Err(StoreError::new(format!(
                    "invalid PostgreSQL schema name {schema:?}: use ASCII letters, digits and '_'"
                )));
            }
            let options = match config.get_options() {
                Some(existing) => format!("{existing} -c search_path={schema}"),
                None => format!("-c search_path={schema}"),
            };
            config.options(&options);
        }
        config.connect_timeout(self.connect_timeout);
        let manager = Manager::from_config(config, NoTls, ManagerConfig::default());
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(self.connect_timeout))
            .wait_timeout(Some(self.connect_timeout))
            .build()
            .map_err(|e| StoreError::with_source("cannot build the PostgreSQL pool", e))?;
        let mut store = PostgresStore {
            pool,
            schema: self.schema,
            encoder: Default::default(),
        };
        store.migrate(&self.migrations).await?;
        store.index_earlier_calls().await?;
        let key = store.node_key().await?;
        store.encoder = std::sync::Arc::new(Encoder::new(key));
        Ok(store)
    }
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63
}

fn pg_error(what: &str) -> impl FnOnce(tokio_postgres::Error) -> StoreError + '_ {
    move |e| {
        // tokio-postgres displays a server error as just "db error": name the server's reason.
        let message = match e.as_db_error() {
            Some(db) => format!(
                "PostgreSQL: {what} ({}: {})",
                db.code().code(),
                db.message()
            ),
            None => format!("PostgreSQL: {what}"),
        };
        StoreError::with_source(message, e)
    }
}

impl PostgresStore {
    /// Connect to `url` (`postgres://user@host:5432/db`) with default options.
    pub async fn connect(url: impl Into<String>) -> Result<PostgresStore, StoreError> {
        PostgresStore::builder(url).connect().await
    }

    /// Options for connecting to `url`.
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            url: url.into(),
            schema: None,
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            migrations: Vec::new(),
        }
    }

    /// The connection pool, for other crates' queries on the tables they added with
    /// [`PostgresStoreBuilder::migration`] (connections already use the configured schema).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The schema the tables live in, when one was configured.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// A connection from the pool.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::with_source("PostgreSQL: no connection", e))
    }

    /// Mark calls still [`crate::CallOutcome::InFlight`] that started before `started_before` as
    /// [`crate::CallOutcome::Interrupted`] (without an error). With several replicas sharing the database, pick
    /// a cutoff older than any call can run (e.g. now minus the longest call timeout): a replica cannot tell its
    /// peers' live calls from a dead process's. Returns how many.
    pub async fn abandon_in_flight(&self, started_before: SystemTime) -> Result<u64, StoreError> {
        let closed: i64 = self
            .client()
            .await?
            .query_one(
                &super::rollup::postgres_abandon_sql(&abandon_sql("$1")),
                &[&to_micros(started_before)],
            )
            .await
            .map_err(pg_error("cannot close abandoned in-flight records"))?
            .get(0);
        Ok(closed as u64)
    }

    /// Apply other crates' migrations to an open store (each once per database, in order, in its own
    /// transaction under the same advisory lock as the crate's own), e.g. the approval crate's tables. The same
    /// as [`PostgresStoreBuilder::migration`], for a store that is already connected.
    pub async fn apply_migrations(&self, migrations: &[Migration]) -> Result<(), StoreError> {
        self.migrate_each(migrations.iter()).await
    }

    /// The database's node key, created by the first store to connect.
    async fn node_key(&self) -> Result<NodeKey, StoreError> {
        let client = self.client().await?;
        let fresh = NodeKey::random();
        client
            .execute(
                &insert_key_sql("$1", "$2"),
                &[&(fresh.0 as i64), &(fresh.1 as i64)],
            )
            .await
            .map_err(pg_error("cannot create the node key"))?;
        let row = client
            .query_one(SELECT_KEY, &[])
            .await
            .map_err(pg_error("cannot read the node key"))?;
        let half = |i| row.try_get::<_, i64>(i).map(|v| v as u64);
        Ok(NodeKey(
            half(0).map_err(pg_error("cannot read the node key"))?,
            half(1).map_err(pg_error("cannot read the node key"))?,
        ))
    }

    async fn migrate(&self, extra: &[Migration]) -> Result<(), StoreError> {
        self.migrate_each(postgres_migrations().iter().chain(extra))
            .await
    }

    async fn migrate_each(
        &self,
        migrations: impl Iterator<Item = &Migration>,
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        for migration in migrations {
            let what = format!("migration {} failed", migration.id());
            let failed = |e| pg_error(&what)(e);
            let tx = client.transaction().await.map_err(failed)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(failed)?;
            if let Some(schema) = &self.schema {
                tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                    .await
                    .map_err(failed)?;
            }
            tx.batch_execute(MIGRATIONS_TABLE).await.map_err(failed)?;
            let applied = tx
                .query_opt(
                    "SELECT 1 FROM tower_chat_migrations WHERE id = $1",
                    &[&migration.id()],
                )
                .await
                .map_err(failed)?
                .is_some();
            if !applied {
                tx.batch_execute(migration.sql()).await.map_err(failed)?;
                tx.execute(
                    "INSERT INTO tower_chat_migrations (id, applied_at) VALUES ($1, $2)",
                    &[&migration.id(), &to_micros(SystemTime::now())],
                )
                .await
                .map_err(failed)?;
            }
            tx.commit().await.map_err(failed)?;
        }
        Ok(())
    }

    async fn query_records(
        &self,
        filter: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<CallRecord>, StoreError> {
        self.query_stored(filter, params, None)
            .await?
            .into_iter()
            .map(StoredRecord::into_record)
            .collect()
    }

    /// The rows matching `filter` with their histories and the blobs of every message, or of the message at
    /// `only` (request then response messages).
    async fn query_stored(
        &self,
        filter: &str,
        params: &[&(dyn ToSql + Sync)],
        only: Option<usize>,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let client = self.client().await?;
        let sql = select_sql("{}::text", filter);
        let statement = client
            .prepare_cached(&sql)
            .await
            .map_err(pg_error("cannot read call records"))?;
        let rows = client
            .query(&statement, params)
            .await
            .map_err(pg_error("cannot read call records"))?;
        let mut records = rows
            .iter()
            .map(|row| {
                Ok(StoredRecord {
                    columns: StoredColumns {
                        call_id: row.try_get(0)?,
                        conversation_id: row.try_get(1)?,
                        caller: row.try_get(2)?,
                        round_index: row.try_get(3)?,
                        started_at: row.try_get(4)?,
                        first_token_at: row.try_get(5)?,
                        ended_at: row.try_get(6)?,
                        provider: row.try_get(7)?,
                        model: row.try_get(8)?,
                        status: row.try_get(9)?,
                        error_kind: row.try_get(10)?,
                        error_message: row.try_get(11)?,
                        cost_nanos: row.try_get(12)?,
                        history_head: row.try_get(13)?,
                        request_len: row.try_get(14)?,
                        usage_estimated: row.try_get(15)?,
                        omitted_messages: row.try_get(16)?,
                        omitted_bytes: row.try_get(17)?,
                        team: row.try_get(18)?,
                    },
                    request_messages: row.try_get(19)?,
                    request_options: row.try_get(20)?,
                    response: row.try_get(21)?,
                    history: Vec::new(),
                    blobs: Default::default(),
                })
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(pg_error("a call record does not decode"))?;
        let history = client
            .prepare_cached(&history_sql("$1", "message::text"))
            .await
            .map_err(pg_error("cannot read a history"))?;
        let mut fetched: std::collections::HashMap<String, bytes::Bytes> =
            std::collections::HashMap::new();
        for record in &mut records {
            if let Some(head) = record.head() {
                let rows = client
                    .query(&history, &[&head])
                    .await
                    .map_err(pg_error("cannot read a history"))?;
                record.history = rows
                    .iter()
                    .map(|row| row.try_get(0))
                    .collect::<Result<_, _>>()
                    .map_err(pg_error("a history does not decode"))?;
                // Only the blobs this record's history refers to: a blob is never read by its hash alone. Each
                // is read once per query, however many of its records refer to it.
                let wanted = match only {
                    Some(index) => record.history.get(index..=index).unwrap_or_default(),
                    None => &record.history[..],
                };
                for hash in super::blobs::references(wanted)? {
                    if let Some(bytes) = fetched.get(&hash) {
                        record.blobs.insert(hash, bytes.clone());
                        continue;
                    }
                    let select = client
                        .prepare_cached(SELECT_BLOB)
                        .await
                        .map_err(pg_error("cannot read a stored blob"))?;
                    let row = client
                        .query_opt(&select, &[&hash])
                        .await
                        .map_err(pg_error("cannot read a stored blob"))?
                        .ok_or_else(|| {
                            StoreError::new(format!(
                                "a stored message refers to blob {hash}, which is missing"
                            ))
                        })?;
                    let bytes: Vec<u8> = row
                        .try_get(0)
                        .map_err(pg_error("a stored blob does not decode"))?;
                    let bytes = bytes::Bytes::from(bytes);
                    fetched.insert(hash.clone(), bytes.clone());
                    record.blobs.insert(hash, bytes);
                }
            }
        }
        Ok(records)
    }
}

const UPSERT: &str = "INSERT INTO chat_calls (call_id, conversation_id, caller, round_index, started_at, \
    first_token_at, ended_at, provider, model, status, error_kind, error_message, finish_reason, input_tokens, \
    output_tokens, response_text, request_messages, request_options, response, cost_nanos, history_head, \
    request_len, options_id, usage_estimated, omitted_messages, omitted_bytes, first_message, search, team) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
    $17::text::jsonb, $18::text::jsonb, $19::text::jsonb, $20, $21, $22, $23, $24, $25, $26, $27, \
    CASE WHEN $27::text IS NULL THEN NULL ELSE to_tsvector('simple', $28::text) END, $29) \
    ON CONFLICT (call_id) DO UPDATE SET conversation_id = excluded.conversation_id, caller = excluded.caller, \
    round_index = excluded.round_index, started_at = excluded.started_at, first_token_at = excluded.first_token_at, \
    ended_at = excluded.ended_at, provider = excluded.provider, model = excluded.model, status = excluded.status, \
    error_kind = excluded.error_kind, error_message = excluded.error_message, \
    finish_reason = excluded.finish_reason, input_tokens = excluded.input_tokens, \
    output_tokens = excluded.output_tokens, response_text = excluded.response_text, \
    request_messages = excluded.request_messages, request_options = excluded.request_options, \
    response = excluded.response, cost_nanos = excluded.cost_nanos, history_head = excluded.history_head, \
    request_len = excluded.request_len, options_id = excluded.options_id, \
    usage_estimated = excluded.usage_estimated, omitted_messages = excluded.omitted_messages, \
    omitted_bytes = excluded.omitted_bytes, first_message = excluded.first_message, search = excluded.search, \
    team = excluded.team WHERE chat_calls.status = 'in_flight'";

const INSERT_NODE: &str = "INSERT INTO chat_messages (id, parent_id, position, message) \
    VALUES ($1, $2, $3, $4::text::jsonb) ON CONFLICT (id) DO NOTHING";

const INSERT_OPTIONS: &str = "INSERT INTO chat_options (id, options) VALUES ($1, $2::text::jsonb) \
    ON CONFLICT (id) DO NOTHING";

const INSERT_BLOB: &str = "INSERT INTO chat_blobs (hash, media_type, bytes) VALUES ($1, $2, $3) \
    ON CONFLICT (hash) DO NOTHING";

const SELECT_BLOB: &str = "SELECT bytes FROM chat_blobs WHERE hash = $1";

impl Store for PostgresStore {
    fn write_calls<'a>(
        &'a self,
        records: &'a [CallRecord],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let (encoded, pending) = self.encoder.encode(records)?;
            let mut rows = records
                .iter()
                .zip(&encoded)
                .map(|(record, encoded)| Row::from_record(record, encoded, true))
                .collect::<Result<Vec<_>, _>>()?;
            // Each row locks its call until the commit: written in call id order, two replicas' batches holding
            // some of the same calls take those locks in the same order and cannot deadlock (the rollup's rows
            // come after, in their own order: see `Tally`). The sort is stable, so a call's in-flight record
            // stays before its final one; any order would be correct, as a final record is never replaced.
            rows.sort_by(|a, b| a.call_id.cmp(&b.call_id));
            let mut client = self.client().await?;
            let failed = pg_error("cannot write call records");
            let tx = client.transaction().await.map_err(failed)?;
            let insert = tx
                .prepare_cached(UPSERT)
                .await
                .map_err(pg_error("cannot write call records"))?;
            let node = tx
                .prepare_cached(INSERT_NODE)
                .await
                .map_err(pg_error("cannot write call records"))?;
            let options = tx
                .prepare_cached(INSERT_OPTIONS)
                .await
                .map_err(pg_error("cannot write call records"))?;
            // Blobs, nodes and options first (pipelined), then the calls that refer to them.
            if encoded.iter().any(|e| !e.blobs.is_empty()) {
                let blob = tx
                    .prepare_cached(INSERT_BLOB)
                    .await
                    .map_err(pg_error("cannot write binary parts"))?;
                try_join_all(encoded.iter().flat_map(|e| &e.blobs).map(|b| {
                    let (tx, blob) = (&tx, &blob);
                    async move {
                        tx.execute(blob, &[&b.hash, &b.media_type, &&b.bytes[..]])
                            .await
                    }
                }))
                .await
                .map_err(pg_error("cannot write binary parts"))?;
            }
            let node_rows = encoded.iter().flat_map(|e| &e.nodes);
            try_join_all(node_rows.map(|n| {
                let (tx, node) = (&tx, &node);
                async move {
                    tx.execute(
                        node,
                        &[&&*n.id, &n.parent.as_deref(), &n.position, &n.message],
                    )
                    .await
                }
            }))
            .await
            .map_err(pg_error("cannot write messages"))?;
            try_join_all(encoded.iter().filter_map(|e| e.options.as_ref()).map(|o| {
                let (tx, options) = (&tx, &options);
                async move { tx.execute(options, &[&&*o.id, &o.json]).await }
            }))
            .await
            .map_err(pg_error("cannot write request options"))?;
            // Issued together, the inserts are pipelined on the one connection: one round trip per batch, not
            // per record.
            let written = try_join_all(rows.iter().map(|r| {
                let params: [&(dyn ToSql + Sync); 29] = [
                    &r.call_id,
                    &r.conversation_id,
                    &r.caller,
                    &r.round_index,
                    &r.started_at,
                    &r.first_token_at,
                    &r.ended_at,
                    &r.provider,
                    &r.model,
                    &r.status,
                    &r.error_kind,
                    &r.error_message,
                    &r.finish_reason,
                    &r.input_tokens,
                    &r.output_tokens,
                    &EMPTY_TEXT,
                    &EMPTY_MESSAGES,
                    &EMPTY_OPTIONS,
                    &r.response,
                    &r.cost_nanos,
                    &r.history_head,
                    &r.request_len,
                    &r.options_id,
                    &r.usage_estimated,
                    &r.omitted_messages,
                    &r.omitted_bytes,
                    &r.first_message,
                    &r.search_text,
                    &r.team,
                ];
                let tx = &tx;
                let insert = &insert;
                async move { tx.execute(insert, &params).await }
            }))
            .await
            .map_err(pg_error("cannot write call records"))?;
            // Counted when it became final here: inserted final, or replacing its in-flight row (a final row is
            // never replaced, so a record written twice, or by two replicas, counts once).
            let mut tally = Tally::default();
            for (row, written) in rows.iter().zip(written) {
                if written > 0 && row.status != "in_flight" {
                    tally.add(row.counted());
                }
            }
            if !tally.is_empty() {
                let add = tx
                    .prepare_cached(&add_sql([
                        "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12",
                    ]))
                    .await
                    .map_err(pg_error("cannot add to the spend rollup"))?;
                // Pipelined too, in the tally's key order (see `Tally`).
                try_join_all(tally.rows().map(|((day, caller, team, model), sums)| {
                    let (tx, add) = (&tx, &add);
                    let [calls, refused, errors, input, output, cached, cost, unpriced] = sums;
                    async move {
                        let params: [&(dyn ToSql + Sync); 12] = [
                            day, caller, team, model, calls, refused, errors, input, output,
                            cached, cost, unpriced,
                        ];
                        tx.execute(add, &params).await
                    }
                }))
                .await
                .map_err(pg_error("cannot add to the spend rollup"))?;
            }
            tx.commit()
                .await
                .map_err(pg_error("cannot commit call records"))?;
            self.encoder.committed(pending);
            Ok(())
        })
    }

    fn release_caches(&self) {
        self.encoder.forget();
    }

    fn delete_expired<'a>(
        &'a self,
        retention: &'a crate::store::Retention,
        now: SystemTime,
    ) -> BoxFuture<'a, Result<crate::store::Purged, StoreError>> {
        Box::pin(self.delete_expired_in_batches(retention, now))
    }

    fn call<'a>(
        &'a self,
        call_id: &'a CallId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        Box::pin(async move {
            let mut records = self
                .query_records("WHERE call_id = $1", &[&call_id.as_str()])
                .await?;
            Ok(records.pop())
        })
    }

    fn call_message<'a>(
        &'a self,
        call_id: &'a CallId,
        index: usize,
    ) -> BoxFuture<'a, Result<Option<tower_chat::Message>, StoreError>> {
        Box::pin(async move {
            let stored = self
                .query_stored("WHERE call_id = $1", &[&call_id.as_str()], Some(index))
                .await?;
            match stored.into_iter().next() {
                Some(stored) => stored.into_message(index),
                None => Ok(None),
            }
        })
    }

    fn conversation_calls<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>> {
        Box::pin(async move {
            self.query_records(
                "WHERE conversation_id = $1 ORDER BY started_at, call_id",
                &[&conversation_id.as_str()],
            )
            .await
        })
    }

    fn latest_completed_call<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        Box::pin(async move {
            let mut records = self
                .query_records(
                    "WHERE conversation_id = $1 AND status = 'completed' \
                     ORDER BY started_at DESC, call_id DESC LIMIT 1",
                    &[&conversation_id.as_str()],
                )
                .await?;
            Ok(records.pop())
        })
    }

    fn spend<'a>(&'a self, query: &'a SpendQuery) -> BoxFuture<'a, Result<Spend, StoreError>> {
        Box::pin(async move {
            let caller = query.caller.as_ref().map(|c| c.as_str());
            let conversation = query.conversation_id.as_ref().map(|c| c.as_str());
            let since = query.since.map(to_micros);
            let until = query.until.map(to_micros);
            let client = self.client().await?;
            let failed = pg_error("cannot sum spend");
            let statement = client
                .prepare_cached(&spend_sql(["$1", "$2", "$3", "$4"]))
                .await
                .map_err(failed)?;
            let row = client
                .query_one(&statement, &[&caller, &conversation, &since, &until])
                .await
                .map_err(pg_error("cannot sum spend"))?;
            let mut values = [0i64; 6];
            for (i, value) in values.iter_mut().enumerate() {
                *value = row.try_get(i).map_err(pg_error("cannot sum spend"))?;
            }
            Ok(spend_from_row(values))
        })
    }

    fn list_conversations<'a>(
        &'a self,
        query: &'a ConversationQuery,
    ) -> BoxFuture<'a, Result<Vec<ConversationSummary>, StoreError>> {
        Box::pin(async move {
            let limit = i64::from(query.effective_limit());
            let offset = i64::from(query.offset);
            let caller = query.caller.as_ref().map(|c| c.as_str());
            let head = format!("SELECT {CONVERSATION_COLUMNS} FROM chat_calls");
            let tail = "GROUP BY conversation_id ORDER BY MAX(started_at) DESC, conversation_id \
                        LIMIT $1 OFFSET $2";
            let client = self.client().await?;
            let failed = pg_error("cannot list conversations");
            let rows = match caller {
                Some(caller) => {
                    let sql = format!(
                        "{head} WHERE conversation_id IN \
                         (SELECT conversation_id FROM chat_calls WHERE caller = $3) {tail}"
                    );
                    client.query(&sql, &[&limit, &offset, &caller]).await
                }
                None => {
                    client
                        .query(&format!("{head} {tail}"), &[&limit, &offset])
                        .await
                }
            }
            .map_err(failed)?;
            rows.iter()
                .map(|row| {
                    let mut values = [0i64; 7];
                    for (i, at) in [1, 2, 3, 5, 6, 7, 8].into_iter().enumerate() {
                        values[i] = row.try_get(at)?;
                    }
                    Ok::<ConversationSummary, tokio_postgres::Error>(conversation_from_row(
                        row.try_get(0)?,
                        row.try_get(4)?,
                        values,
                    ))
                })
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(pg_error("a conversation summary does not decode"))
        })
    }

    fn call_summaries<'a>(
        &'a self,
        query: &'a CallQuery,
    ) -> BoxFuture<'a, Result<Vec<CallSummary>, StoreError>> {
        Box::pin(async move {
            let caller = query.caller.as_ref().map(|c| c.as_str());
            let since = query.since.map(to_micros);
            let until = query.until.map(to_micros);
            let limit = i64::from(query.effective_limit());
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&call_summaries_sql(
                    ["$1", "$2", "$3", "$4"],
                    "COALESCE((response -> 'usage' ->> 'from_response_cache')::boolean, false)",
                ))
                .await
                .map_err(pg_error("cannot list calls"))?;
            let rows = client
                .query(&statement, &[&caller, &since, &until, &limit])
                .await
                .map_err(pg_error("cannot list calls"))?;
            let columns = rows
                .iter()
                .rev()
                .map(summary_columns)
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(pg_error("a call summary does not decode"))?;
            columns
                .into_iter()
                .map(SummaryColumns::into_summary)
                .collect()
        })
    }

    fn usage<'a>(
        &'a self,
        query: &'a UsageQuery,
    ) -> BoxFuture<'a, Result<Vec<UsageAggregate>, StoreError>> {
        Box::pin(async move {
            let bucket = query.bucket_micros()?;
            let caller = query.caller.as_ref().map(|c| c.as_str());
            let (since, until) = (to_micros(query.since), to_micros(query.until));
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&usage_sql(
                    ["$1", "$2", "$3", "$4", "$5", "$6"],
                    "COALESCE((response -> 'usage' ->> 'from_response_cache')::boolean, false)",
                ))
                .await
                .map_err(pg_error("cannot aggregate usage"))?;
            let rows = client
                .query(
                    &statement,
                    &[
                        &since,
                        &until,
                        &bucket,
                        &caller,
                        &query.by_model,
                        &query.by_caller,
                    ],
                )
                .await
                .map_err(pg_error("cannot aggregate usage"))?;
            rows.iter()
                .map(|row| {
                    let mut sums = [0i64; crate::usage::USAGE_SUMS];
                    for (i, sum) in sums.iter_mut().enumerate() {
                        *sum = row.try_get(3 + i)?;
                    }
                    let mut percentiles = [None; 4];
                    for (i, p) in percentiles.iter_mut().enumerate() {
                        *p = row.try_get(3 + crate::usage::USAGE_SUMS + i)?;
                    }
                    Ok(UsageRow {
                        bucket: row.try_get(0)?,
                        model: row.try_get(1)?,
                        caller: row.try_get(2)?,
                        sums,
                        percentiles,
                    }
                    .into_aggregate())
                })
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(pg_error("a usage aggregate does not decode"))
        })
    }
    fn call_log<'a>(
        &'a self,
        query: &'a CallLogQuery,
    ) -> BoxFuture<'a, Result<CallLogPage, StoreError>> {
        self.call_log_page(query)
    }

    fn spend_rollup<'a>(
        &'a self,
        query: &'a crate::SpendRollupQuery,
    ) -> BoxFuture<'a, Result<Vec<crate::SpendRow>, StoreError>> {
        self.spend_rollup_rows(query)
    }
}

fn summary_columns(row: &tokio_postgres::Row) -> Result<SummaryColumns, tokio_postgres::Error> {
    Ok(SummaryColumns {
        call_id: row.try_get(0)?,
        conversation_id: row.try_get(1)?,
        caller: row.try_get(2)?,
        started_at: row.try_get(3)?,
        first_token_at: row.try_get(4)?,
        ended_at: row.try_get(5)?,
        model: row.try_get(6)?,
        status: row.try_get(7)?,
        error_kind: row.try_get(8)?,
        error_message: row.try_get(9)?,
        input_tokens: row.try_get(10)?,
        output_tokens: row.try_get(11)?,
        cost_nanos: row.try_get(12)?,
        from_response_cache: row.try_get(13)?,
        refused_before_sending: row.try_get(14)?,
        asked_for_tools: row.try_get(15)?,
    })
}

#[cfg(test)]
mod tests {
    use super::is_identifier;

    #[test]
    fn schema_names_must_be_plain_identifiers() {
        assert!(is_identifier("tenant_1"));
        assert!(is_identifier("_x"));
        assert!(!is_identifier("1abc"));
        assert!(!is_identifier("a; DROP TABLE chat_calls"));
        assert!(!is_identifier("a\"b"));
        assert!(!is_identifier(""));
    }
}
