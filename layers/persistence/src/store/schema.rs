//! Schema migrations: the crate's own tables, and a way for other crates to add theirs.

use std::borrow::Cow;

/// One schema change, applied once per database and remembered in the `tower_chat_migrations` table.
///
/// Stores apply their own migrations first, then the ones added with their builders'
/// `migration(..)` method in the order given, each in its own transaction together with the row that marks it
/// applied, so a process killed during a migration leaves it either applied and marked or not applied at all.
/// Ids are global per database: prefix them with your crate's name (`"tower-chat-approval/0001_pending"`).
/// The SQL is dialect-specific, so a crate that supports both stores passes a SQLite and a PostgreSQL version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migration {
    id: Cow<'static, str>,
    sql: Cow<'static, str>,
}

impl Migration {
    /// A migration: a unique id and the SQL (one or more statements) to run once.
    pub fn new(id: impl Into<Cow<'static, str>>, sql: impl Into<Cow<'static, str>>) -> Self {
        Migration {
            id: id.into(),
            sql: sql.into(),
        }
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The SQL.
    pub fn sql(&self) -> &str {
        &self.sql
    }
}

/// The table that remembers applied migrations (the same in both dialects).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS tower_chat_migrations (
    id TEXT PRIMARY KEY,
    applied_at BIGINT NOT NULL
)";

/// The crate's tables in SQLite: JSON columns are TEXT (SQLite's JSON functions read them). The id
/// `tower-chat-persistence/0002_approvals` is retired: the approval crate owns those tables now (databases that
/// applied it keep them, and the approval crate's own migration finds them there).
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_migrations() -> Vec<Migration> {
    vec![
        Migration::new(
            "tower-chat-persistence/0001_chat_calls",
            chat_calls_sql("TEXT"),
        ),
        Migration::new("tower-chat-persistence/0003_call_cost", COST_SQL),
        Migration::new(
            "tower-chat-persistence/0004_message_nodes",
            message_nodes_sql("TEXT", " WITHOUT ROWID", ""),
        ),
        Migration::new("tower-chat-persistence/0005_node_key", NODE_KEY_SQL),
        Migration::new(
            "tower-chat-persistence/0006_cheap_status_check",
            SQLITE_STATUS_CHECK_SQL,
        ),
        Migration::new(
            "tower-chat-persistence/0007_partial_caller_index",
            PARTIAL_CALLER_INDEX_SQL,
        ),
        Migration::new(
            "tower-chat-persistence/0008_estimates_and_omitted_requests",
            estimates_and_omitted_sql(""),
        ),
        Migration::new("tower-chat-persistence/0009_blobs", blobs_sql("BLOB")),
        Migration::new("tower-chat-persistence/0010_call_log", SQLITE_CALL_LOG_SQL),
        Migration::new(
            "tower-chat-persistence/0011_blocked_status",
            super::blocked_status::SQLITE_BLOCKED_STATUS_SQL,
        ),
        Migration::new(
            "tower-chat-persistence/0012_spend_rollup",
            super::rollup::sqlite_sql(),
        ),
        Migration::new(
            "tower-chat-persistence/0013_rollup_kept_by_the_writer",
            super::rollup::SQLITE_WRITER_KEEPS_SQL,
        ),
        Migration::new(
            "tower-chat-persistence/0014_call_log_lookups_by_index",
            super::call_lookups::sqlite_lookups_sql(),
        ),
        Migration::new(
            "tower-chat-persistence/0015_retention_indexes",
            super::retention::INDEXES_SQL,
        ),
    ]
}

/// SQLite only: `chat_calls` rebuilt (SQLite cannot alter a CHECK) with the status check written as ORs. The
/// original `status IN (…five names…)` makes SQLite build an ephemeral table for every insert, about 14 k
/// instructions of a record's write. The rows are copied as they are, in one transaction with the marker.
#[cfg(feature = "sqlite")]
const SQLITE_STATUS_CHECK_SQL: &str = "CREATE TABLE chat_calls_0006 (
    call_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    caller TEXT,
    round_index BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    first_token_at BIGINT,
    ended_at BIGINT NOT NULL,
    provider TEXT,
    model TEXT,
    status TEXT NOT NULL CHECK (status = 'completed' OR status = 'failed' OR status = 'cancelled' \
        OR status = 'interrupted' OR status = 'in_flight'),
    error_kind TEXT,
    error_message TEXT,
    finish_reason TEXT,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    response_text TEXT NOT NULL,
    request_messages TEXT NOT NULL,
    request_options TEXT NOT NULL,
    response TEXT NOT NULL,
    cost_nanos BIGINT,
    history_head TEXT,
    request_len BIGINT,
    options_id TEXT
);
INSERT INTO chat_calls_0006 (call_id, conversation_id, caller, round_index, started_at, first_token_at, ended_at, \
    provider, model, status, error_kind, error_message, finish_reason, input_tokens, output_tokens, response_text, \
    request_messages, request_options, response, cost_nanos, history_head, request_len, options_id) \
    SELECT call_id, conversation_id, caller, round_index, started_at, first_token_at, ended_at, provider, model, \
    status, error_kind, error_message, finish_reason, input_tokens, output_tokens, response_text, \
    request_messages, request_options, response, cost_nanos, history_head, request_len, options_id \
    FROM chat_calls;
DROP TABLE chat_calls;
ALTER TABLE chat_calls_0006 RENAME TO chat_calls;
CREATE INDEX chat_calls_by_conversation ON chat_calls (conversation_id, started_at, call_id);
CREATE INDEX chat_calls_by_caller ON chat_calls (caller, started_at);";

/// The crate's tables in PostgreSQL: the same columns, JSON as JSONB.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_migrations() -> Vec<Migration> {
    vec![
        Migration::new(
            "tower-chat-persistence/0001_chat_calls",
            chat_calls_sql("JSONB"),
        ),
        Migration::new("tower-chat-persistence/0003_call_cost", COST_SQL),
        Migration::new(
            "tower-chat-persistence/0004_message_nodes",
            message_nodes_sql("JSONB", "", " IF NOT EXISTS"),
        ),
        Migration::new("tower-chat-persistence/0005_node_key", NODE_KEY_SQL),
        Migration::new(
            "tower-chat-persistence/0007_partial_caller_index",
            PARTIAL_CALLER_INDEX_SQL,
        ),
        Migration::new(
            "tower-chat-persistence/0008_estimates_and_omitted_requests",
            estimates_and_omitted_sql(" IF NOT EXISTS"),
        ),
        Migration::new("tower-chat-persistence/0009_blobs", blobs_sql("BYTEA")),
        Migration::new(
            "tower-chat-persistence/0010_call_log",
            POSTGRES_CALL_LOG_SQL,
        ),
        Migration::new(
            "tower-chat-persistence/0011_blocked_status",
            super::blocked_status::POSTGRES_BLOCKED_STATUS_SQL,
        ),
        Migration::new(
            "tower-chat-persistence/0012_spend_rollup",
            super::rollup::postgres_sql(),
        ),
        Migration::new(
            "tower-chat-persistence/0013_rollup_kept_by_the_writer",
            super::rollup::POSTGRES_WRITER_KEEPS_SQL,
        ),
        Migration::new(
            "tower-chat-persistence/0014_call_log_lookups_by_index",
            super::call_lookups::postgres_lookups_sql(),
        ),
        Migration::new(
            "tower-chat-persistence/0015_retention_indexes",
            super::retention::INDEXES_SQL,
        ),
    ]
}

/// SQLite: each call's first user message (NULL on rows written before: the open fills them in, see
/// `UNINDEXED_SQL` in `call_log.rs`), an FTS5 index of the calls' message text keyed by `chat_calls`' rowid (contentless, so the
/// text is not stored twice; `contentless_delete` lets a final record replace its in-flight entry), an index
/// for the log's order, and one finding the rows still to index. Diacritics are kept so that a search matches
/// what PostgreSQL's `simple` configuration matches.
#[cfg(feature = "sqlite")]
const SQLITE_CALL_LOG_SQL: &str = "ALTER TABLE chat_calls ADD COLUMN first_message TEXT;
CREATE VIRTUAL TABLE chat_calls_search USING fts5(body, content='', contentless_delete=1, \
    tokenize='unicode61 remove_diacritics 0');
CREATE INDEX chat_calls_by_start ON chat_calls (started_at, call_id);
CREATE INDEX chat_calls_unindexed ON chat_calls (call_id) WHERE first_message IS NULL;";

/// PostgreSQL: the same first message column, the message text as a `tsvector` (`simple` configuration: no
/// stemming or stop words, like FTS5's `unicode61`) with a GIN index, and the same two B-tree indexes.
#[cfg(feature = "postgres")]
const POSTGRES_CALL_LOG_SQL: &str =
    "ALTER TABLE chat_calls ADD COLUMN IF NOT EXISTS first_message TEXT;
ALTER TABLE chat_calls ADD COLUMN IF NOT EXISTS search tsvector;
CREATE INDEX IF NOT EXISTS chat_calls_search ON chat_calls USING GIN (search);
CREATE INDEX IF NOT EXISTS chat_calls_by_start ON chat_calls (started_at, call_id);
CREATE INDEX IF NOT EXISTS chat_calls_unindexed ON chat_calls (call_id) WHERE first_message IS NULL;";

/// The bytes of binary parts (images, audio, files), each stored once: keyed by the SHA-256 of the bytes (hex),
/// raw bytes (`BLOB` / `BYTEA`, not base64) and the media type the first message carrying them gave (see
/// `blobs.rs`). A rowid table in SQLite: `WITHOUT ROWID` suits small rows, and a blob is megabytes of overflow
/// pages.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn blobs_sql(bytes: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS chat_blobs (
    hash TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    bytes {bytes} NOT NULL
)"
    )
}

/// Whether a call's usage is an estimate a layer charged (`usage_estimated`, false for rows written before), and
/// the size of a request that was not stored because the call was refused before it was sent (`omitted_messages`,
/// `omitted_bytes`; NULL when the request is stored). The same in both dialects but for PostgreSQL's
/// `IF NOT EXISTS` (SQLite runs the migration in one transaction with its marker).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn estimates_and_omitted_sql(if_not_exists: &str) -> String {
    format!(
        "ALTER TABLE chat_calls ADD COLUMN{if_not_exists} usage_estimated BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE chat_calls ADD COLUMN{if_not_exists} omitted_messages BIGINT;
ALTER TABLE chat_calls ADD COLUMN{if_not_exists} omitted_bytes BIGINT;"
    )
}

/// `chat_calls_by_caller` holds only calls that have a caller: the queries that use it filter on `caller = …`,
/// which implies `caller IS NOT NULL` (both planners use a partial index for it), and a record without a caller
/// then touches one B-tree fewer (one page fewer to write to the log at commit). The same in both dialects.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const PARTIAL_CALLER_INDEX_SQL: &str = "DROP INDEX IF EXISTS chat_calls_by_caller;
CREATE INDEX chat_calls_by_caller ON chat_calls (caller, started_at) WHERE caller IS NOT NULL;";

/// One row per chat call. Timestamps are microseconds since the Unix epoch (BIGINT in both dialects, so both
/// stores read back exactly what was written); the JSON columns hold the full request and response, and the
/// scalar columns repeat what queries filter and aggregate on.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn chat_calls_sql(json: &str) -> String {
    format!(
        "CREATE TABLE chat_calls (
    call_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    caller TEXT,
    round_index BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    first_token_at BIGINT,
    ended_at BIGINT NOT NULL,
    provider TEXT,
    model TEXT,
    status TEXT NOT NULL CHECK (status IN ('completed', 'failed', 'cancelled', 'interrupted', 'in_flight')),
    error_kind TEXT,
    error_message TEXT,
    finish_reason TEXT,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    response_text TEXT NOT NULL,
    request_messages {json} NOT NULL,
    request_options {json} NOT NULL,
    response {json} NOT NULL
);
CREATE INDEX chat_calls_by_conversation ON chat_calls (conversation_id, started_at, call_id);
CREATE INDEX chat_calls_by_caller ON chat_calls (caller, started_at);"
    )
}

/// Message-level storage (see `chain.rs`): each message once, as a node of its conversation's chain
/// (`chat_messages`, content-addressed ids keyed with the database's random key, table `chat_store_key` of
/// migration 0005), each distinct set of request options once (`chat_options`), and on
/// `chat_calls` the last node of the call's history (`history_head`), how many of its messages the call sent
/// (`request_len`; NULL marks a row written before this migration, whose history is inline in
/// `request_messages`) and its options' id. Rows written before stay as they are and read as before. Written
/// so that it can run on a database that already has the tables (`IF NOT EXISTS`, PostgreSQL also for the
/// columns; SQLite has no `ADD COLUMN IF NOT EXISTS`, and its migration runs in one transaction with its
/// marker row, so it is never half applied). `WITHOUT ROWID` (SQLite) keeps a node in its primary-key B-tree
/// only, instead of a table row plus an index entry holding the id again.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn message_nodes_sql(json: &str, without_rowid: &str, if_not_exists: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS chat_messages (
    id TEXT PRIMARY KEY,
    parent_id TEXT,
    position BIGINT NOT NULL,
    message {json} NOT NULL
){without_rowid};
CREATE TABLE IF NOT EXISTS chat_options (
    id TEXT PRIMARY KEY,
    options {json} NOT NULL
){without_rowid};
CREATE TABLE IF NOT EXISTS chat_store_key (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    k0 BIGINT NOT NULL,
    k1 BIGINT NOT NULL
);
ALTER TABLE chat_calls ADD COLUMN{if_not_exists} history_head TEXT;
ALTER TABLE chat_calls ADD COLUMN{if_not_exists} request_len BIGINT;
ALTER TABLE chat_calls ADD COLUMN{if_not_exists} options_id TEXT;"
    )
}

/// The database's key for message ids (see `chain.rs`): one row, written by the first store that opens the
/// database; the same in both dialects.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const NODE_KEY_SQL: &str = "CREATE TABLE IF NOT EXISTS chat_store_key (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    k0 BIGINT NOT NULL,
    k1 BIGINT NOT NULL
)";

/// Creates the database's node key unless it has one (the first store to open it picks it); placeholders for
/// the two halves.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn insert_key_sql(k0: &str, k1: &str) -> String {
    format!("INSERT INTO chat_store_key (id, k0, k1) VALUES (1, {k0}, {k1}) ON CONFLICT (id) DO NOTHING")
}

/// Reads the database's node key.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const SELECT_KEY: &str = "SELECT k0, k1 FROM chat_store_key WHERE id = 1";

/// Each call's cost in nano-dollars (`tower_chat::Cost`), NULL when unpriced; the same in both dialects.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const COST_SQL: &str = "ALTER TABLE chat_calls ADD COLUMN cost_nanos BIGINT";

/// Turns in-flight records older than a cutoff into `interrupted` ones (no error: nothing said why), ending them
/// at their start. `cutoff` is the dialect's placeholder for the cutoff time.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn abandon_sql(cutoff: &str) -> String {
    format!(
        "UPDATE chat_calls SET status = 'interrupted', ended_at = started_at \
         WHERE status = 'in_flight' AND started_at < {cutoff}"
    )
}

/// A record flattened into column values, serialized once on the writer task (not on the database thread).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub(crate) call_id: String,
    pub(crate) conversation_id: String,
    pub(crate) caller: Option<String>,
    pub(crate) team: Option<String>,
    pub(crate) round_index: i64,
    pub(crate) started_at: i64,
    pub(crate) first_token_at: Option<i64>,
    pub(crate) ended_at: i64,
    pub(crate) provider: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) status: &'static str,
    pub(crate) error_kind: Option<String>,
    pub(crate) error_message: Option<String>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    /// Not a column of its own (it is inside `response`): what the call adds to the spend rollup.
    pub(crate) cached_input_tokens: i64,
    pub(crate) response: String,
    pub(crate) cost_nanos: Option<i64>,
    pub(crate) history_head: Option<String>,
    pub(crate) request_len: i64,
    pub(crate) options_id: String,
    pub(crate) usage_estimated: bool,
    pub(crate) omitted_messages: Option<i64>,
    pub(crate) omitted_bytes: Option<i64>,
    /// The call's first user message, as the call log shows it; `None` for a row rebuilt without its record
    /// (from a legacy journal): the store indexes such rows when it opens.
    pub(crate) first_message: Option<String>,
    /// The text the call adds to the full-text index (not stored as such: SQLite indexes it in
    /// `chat_calls_search`, PostgreSQL keeps its `tsvector`).
    pub(crate) search_text: String,
}

/// What `request_messages` and `request_options` hold in rows written since message-level storage (the
/// history is in `chat_messages`, the options in `chat_options`), and `response_text` in rows whose answer's
/// text is stored only as its message node. SQLite writes them as literals in its upsert
/// (a unit test ties the two).
#[cfg(any(feature = "postgres", all(test, feature = "sqlite")))]
pub(crate) const EMPTY_MESSAGES: &str = "[]";
#[cfg(any(feature = "postgres", all(test, feature = "sqlite")))]
pub(crate) const EMPTY_OPTIONS: &str = "{}";
#[cfg(any(feature = "postgres", all(test, feature = "sqlite")))]
pub(crate) const EMPTY_TEXT: &str = "";

/// The columns read back to rebuild a record (the scalar summaries are derived, so not read); then the
/// history's head and length, the estimate flag and an omitted request's size, then (dialect-specific, see
/// [`select_sql`]) the messages, options and response.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const SELECT_COLUMNS: &str =
    "call_id, conversation_id, caller, round_index, started_at, \
    first_token_at, ended_at, provider, model, status, error_kind, error_message, cost_nanos, \
    history_head, request_len, usage_estimated, omitted_messages, omitted_bytes, team";

/// The query reading records: `chat_calls` joined with its options; `text` wraps a JSON column to read it as
/// text (`{}::text` in PostgreSQL).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn select_sql(text: &str, filter: &str) -> String {
    let json = |column: &str| text.replace("{}", column);
    format!(
        "SELECT {SELECT_COLUMNS}, {}, {}, {} FROM chat_calls \
         LEFT JOIN chat_options ON chat_options.id = chat_calls.options_id {filter}",
        json("request_messages"),
        json("COALESCE(chat_options.options, chat_calls.request_options)"),
        json("response"),
    )
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod row {
    use super::Row;
    use crate::record::{to_micros, CallRecord};
    use crate::store::rollup::Counted;
    use crate::store::StoreError;

    impl Row {
        /// What the call adds to the spend rollup, once its row made it final.
        pub(crate) fn counted(&self) -> Counted<'_> {
            Counted {
                started_at: self.started_at,
                caller: self.caller.as_deref(),
                team: self.team.as_deref(),
                model: self.model.as_deref(),
                status: self.status,
                omitted: self.omitted_messages.is_some(),
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
                cached_input_tokens: self.cached_input_tokens,
                cost_nanos: self.cost_nanos,
            }
        }

        /// `search`: whether the store indexes the call's text (building it costs ~7.5 k instructions a call).
        pub(crate) fn from_record(
            record: &CallRecord,
            encoded: &crate::store::chain::Encoded,
            search: bool,
        ) -> Result<Row, StoreError> {
            let json = |what: &str, value: Result<String, serde_json::Error>| {
                value.map_err(|e| StoreError::with_source(format!("cannot encode {what}"), e))
            };
            let error = record.outcome.error();
            let usage = record.usage();
            Ok(Row {
                call_id: record.call_id.as_str().to_owned(),
                conversation_id: record.conversation_id.as_str().to_owned(),
                caller: record.caller.as_ref().map(|c| c.as_str().to_owned()),
                team: record.team.as_ref().map(|t| t.as_str().to_owned()),
                round_index: i64::from(record.round_index),
                started_at: to_micros(record.started_at),
                first_token_at: record.first_token_at.map(to_micros),
                ended_at: to_micros(record.ended_at),
                provider: record.provider.clone(),
                model: record.model.clone(),
                status: record.outcome.as_str(),
                error_kind: error.map(|e| e.kind.clone()),
                error_message: error.map(|e| e.message.clone()),
                finish_reason: record.finish_reason().map(|r| r.as_str().to_owned()),
                input_tokens: i64::try_from(usage.input_tokens).unwrap_or(i64::MAX),
                output_tokens: i64::try_from(usage.output_tokens).unwrap_or(i64::MAX),
                cached_input_tokens: usage
                    .cached_input_tokens
                    .map_or(0, |t| i64::try_from(t).unwrap_or(i64::MAX)),
                response: json(
                    "response",
                    serde_json::to_string(&super::ResponseColumn::of(
                        &record.response,
                        &record.guardrail,
                        record.request_id.as_ref(),
                    )),
                )?,
                cost_nanos: record
                    .cost
                    .map(|c| i64::try_from(c.as_nanos()).unwrap_or(i64::MAX)),
                history_head: encoded.head.as_deref().map(str::to_owned),
                request_len: encoded.request_len,
                options_id: encoded.options_id.to_string(),
                usage_estimated: record.usage_estimated,
                omitted_messages: record
                    .request
                    .omitted
                    .map(|o| i64::try_from(o.messages).unwrap_or(i64::MAX)),
                omitted_bytes: record
                    .request
                    .omitted
                    .map(|o| i64::try_from(o.bytes).unwrap_or(i64::MAX)),
                first_message: Some(crate::call_log::first_message(record)),
                search_text: match search {
                    true => crate::call_log::searchable_text(record),
                    false => String::new(),
                },
            })
        }
    }
}

/// The stored columns of one record, as read back, before decoding.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug)]
pub(crate) struct StoredColumns {
    pub(crate) call_id: String,
    pub(crate) conversation_id: String,
    pub(crate) caller: Option<String>,
    pub(crate) round_index: i64,
    pub(crate) started_at: i64,
    pub(crate) first_token_at: Option<i64>,
    pub(crate) ended_at: i64,
    pub(crate) provider: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) status: String,
    pub(crate) error_kind: Option<String>,
    pub(crate) error_message: Option<String>,
    pub(crate) cost_nanos: Option<i64>,
    pub(crate) history_head: Option<String>,
    pub(crate) request_len: Option<i64>,
    pub(crate) usage_estimated: bool,
    pub(crate) omitted_messages: Option<i64>,
    pub(crate) omitted_bytes: Option<i64>,
    pub(crate) team: Option<String>,
}

/// A record's stored text columns, and its history when it is kept as message nodes.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug)]
pub(crate) struct StoredRecord {
    pub(crate) columns: StoredColumns,
    pub(crate) request_messages: String,
    pub(crate) request_options: String,
    pub(crate) response: String,
    /// The messages from the first to `history_head` (empty when the row has no head).
    pub(crate) history: Vec<String>,
    /// The bytes of the blobs the history refers to, by hash.
    pub(crate) blobs: std::collections::HashMap<String, bytes::Bytes>,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl StoredRecord {
    /// Whether the row's history is read from `chat_messages` (from its head), rather than inline.
    pub(crate) fn head(&self) -> Option<&str> {
        self.columns
            .request_len
            .and(self.columns.history_head.as_deref())
    }

    /// The history's message at `index` (request then response messages), with the bytes of its parts: `blobs`
    /// needs only that message's.
    pub(crate) fn into_message(
        self,
        index: usize,
    ) -> Result<Option<tower_chat::Message>, super::StoreError> {
        if self.head().is_some() {
            return self
                .history
                .get(index)
                .map(|m| super::blobs::decode_message(m, &self.blobs))
                .transpose();
        }
        // Written before message-level storage: the history is inline, base64 included.
        Ok(self.into_record()?.history().into_iter().nth(index))
    }

    pub(crate) fn into_record(self) -> Result<crate::record::CallRecord, super::StoreError> {
        let StoredRecord {
            columns,
            request_messages,
            request_options,
            response,
            history,
            blobs,
        } = self;
        columns.into_record(
            &request_messages,
            &request_options,
            &response,
            history,
            &blobs,
        )
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl StoredColumns {
    fn into_record(
        self,
        request_messages: &str,
        request_options: &str,
        response: &str,
        history: Vec<String>,
        blobs: &std::collections::HashMap<String, bytes::Bytes>,
    ) -> Result<crate::record::CallRecord, super::StoreError> {
        use super::{decode_json, StoreError};
        use crate::record::{from_micros, CallId, CallOutcome, CallRecord, RecordedRequest};
        let mut column = decode_json::<ResponseColumnOwned>("response", response)?;
        let guardrail = std::mem::take(&mut column.guardrail);
        let request_id = column.request_id.take().map(crate::record::RequestId::new);
        let mut response: tower_chat::ChatResponse = column.into();
        let messages = match self.request_len {
            // Written before message-level storage: the history is inline.
            None => decode_json("request messages", request_messages)?,
            Some(request_len) => {
                let history = history
                    .iter()
                    .map(|m| super::blobs::decode_message(m, blobs))
                    .collect::<Result<Vec<tower_chat::Message>, _>>()?;
                let (request, produced) =
                    super::chain::split_history(history, request_len, &self.call_id)?;
                response.messages = produced;
                request
            }
        };
        let outcome = CallOutcome::from_columns(&self.status, self.error_kind, self.error_message)
            .map_err(|e| StoreError::new(format!("call {}: {e}", self.call_id)))?;
        Ok(CallRecord {
            round_index: u32::try_from(self.round_index)
                .map_err(|_| StoreError::new(format!("call {}: bad round index", self.call_id)))?,
            call_id: CallId::new(self.call_id),
            conversation_id: self.conversation_id.into(),
            caller: self.caller.map(Into::into),
            request_id,
            team: self.team.map(crate::record::CallerTeam::new),
            started_at: from_micros(self.started_at),
            first_token_at: self.first_token_at.map(from_micros),
            ended_at: from_micros(self.ended_at),
            provider: self.provider,
            model: self.model,
            request: RecordedRequest {
                messages: tower_chat::Shared::new(messages),
                options: decode_json("request options", request_options)?,
                omitted: match (self.omitted_messages, self.omitted_bytes) {
                    (Some(messages), Some(bytes)) => Some(crate::record::RequestSize {
                        messages: u64::try_from(messages).unwrap_or(0),
                        bytes: u64::try_from(bytes).unwrap_or(0),
                    }),
                    _ => None,
                },
            },
            response,
            outcome,
            cost: self
                .cost_nanos
                .map(|n| tower_chat::Cost::from_nanos(u64::try_from(n).unwrap_or(0))),
            usage_estimated: self.usage_estimated,
            guardrail,
        })
    }
}

/// The aggregate of [`crate::Store::spend`] over `chat_calls`, with the dialect's placeholders for the
/// caller, conversation, since and until parameters (a NULL parameter matches every row). Sums are cast to
/// BIGINT (PostgreSQL sums BIGINTs as NUMERIC).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn spend_sql(p: [&str; 4]) -> String {
    let [caller, conversation, since, until] = p;
    format!(
        "SELECT COUNT(*), CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT), CAST(COALESCE(SUM(cost_nanos), 0) AS BIGINT), \
         COUNT(*) - COUNT(cost_nanos), \
         CAST(COALESCE(SUM(CASE WHEN usage_estimated THEN 1 ELSE 0 END), 0) AS BIGINT) \
         FROM chat_calls WHERE status <> 'in_flight' \
         AND (CAST({caller} AS TEXT) IS NULL OR caller = {caller}) \
         AND (CAST({conversation} AS TEXT) IS NULL OR conversation_id = {conversation}) \
         AND (CAST({since} AS BIGINT) IS NULL OR started_at >= {since}) \
         AND (CAST({until} AS BIGINT) IS NULL OR started_at < {until})"
    )
}

/// The columns a conversation listing aggregates per conversation (both dialects): id, calls, first and last
/// start, caller, input and output tokens, cost, unpriced calls.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const CONVERSATION_COLUMNS: &str = "conversation_id, COUNT(*), MIN(started_at), MAX(started_at), \
     MAX(caller), CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT), CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT), \
     CAST(COALESCE(SUM(cost_nanos), 0) AS BIGINT), COUNT(*) - COUNT(cost_nanos)";

/// A row of [`CONVERSATION_COLUMNS`] as a summary.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn conversation_from_row(
    id: String,
    caller: Option<String>,
    values: [i64; 7],
) -> crate::record::ConversationSummary {
    let [calls, first, last, input, output, cost, unpriced] = values;
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    crate::record::ConversationSummary {
        conversation_id: id.into(),
        calls: count(calls),
        first_started_at: crate::record::from_micros(first),
        last_started_at: crate::record::from_micros(last),
        caller: caller.map(tower_chat::CallerIdentity::new),
        input_tokens: count(input),
        output_tokens: count(output),
        cost: tower_chat::Cost::from_nanos(count(cost)),
        unpriced_calls: count(unpriced),
    }
}

/// The latest calls in a time range, scalar columns only, newest first (callers reverse them); placeholders
/// for caller, since, until and the limit, and the dialect's expression for whether the response cache
/// answered the call (a flag inside the `response` JSON, read without decoding the rest).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn call_summaries_sql(p: [&str; 4], from_response_cache: &str) -> String {
    let [caller, since, until, limit] = p;
    format!(
        "SELECT call_id, conversation_id, caller, started_at, first_token_at, ended_at, model, status, \
         error_kind, error_message, input_tokens, output_tokens, cost_nanos, {from_response_cache}, \
         omitted_messages IS NOT NULL, COALESCE(finish_reason = 'tool_calls', FALSE) \
         FROM chat_calls \
         WHERE (CAST({caller} AS TEXT) IS NULL OR caller = {caller}) \
         AND (CAST({since} AS BIGINT) IS NULL OR started_at >= {since}) \
         AND (CAST({until} AS BIGINT) IS NULL OR started_at < {until}) \
         ORDER BY started_at DESC, call_id DESC LIMIT {limit}"
    )
}

/// The scalar columns of one [`call_summaries_sql`] row.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug)]
pub(crate) struct SummaryColumns {
    pub(crate) call_id: String,
    pub(crate) conversation_id: String,
    pub(crate) caller: Option<String>,
    pub(crate) started_at: i64,
    pub(crate) first_token_at: Option<i64>,
    pub(crate) ended_at: i64,
    pub(crate) model: Option<String>,
    pub(crate) status: String,
    pub(crate) error_kind: Option<String>,
    pub(crate) error_message: Option<String>,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    pub(crate) cost_nanos: Option<i64>,
    pub(crate) from_response_cache: bool,
    pub(crate) refused_before_sending: bool,
    pub(crate) asked_for_tools: bool,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl SummaryColumns {
    pub(crate) fn into_summary(
        self,
    ) -> Result<crate::record::CallSummary, crate::store::StoreError> {
        use crate::record::from_micros;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(crate::record::CallSummary {
            outcome: crate::record::CallOutcome::from_columns(
                &self.status,
                self.error_kind,
                self.error_message,
            )
            .map_err(crate::store::StoreError::new)?,
            call_id: crate::record::CallId::new(self.call_id),
            conversation_id: self.conversation_id.into(),
            caller: self.caller.map(tower_chat::CallerIdentity::new),
            started_at: from_micros(self.started_at),
            first_token_at: self.first_token_at.map(from_micros),
            ended_at: from_micros(self.ended_at),
            model: self.model,
            input_tokens: count(self.input_tokens),
            output_tokens: count(self.output_tokens),
            cost: self
                .cost_nanos
                .map(|c| tower_chat::Cost::from_nanos(count(c))),
            from_response_cache: self.from_response_cache,
            refused_before_sending: self.refused_before_sending,
            asked_for_tools: self.asked_for_tools,
        })
    }
}

/// A row of [`spend_sql`] as a [`crate::Spend`].
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn spend_from_row(values: [i64; 6]) -> crate::record::Spend {
    let [calls, input, output, cost, unpriced, estimated] =
        values.map(|v| u64::try_from(v).unwrap_or(0));
    crate::record::Spend {
        calls,
        input_tokens: input,
        output_tokens: output,
        cost: tower_chat::Cost::from_nanos(cost),
        unpriced_calls: unpriced,
        estimated_calls: estimated,
    }
}

/// The `response` column: a [`tower_chat::ChatResponse`] without its messages, which are nodes of the history
/// (serialised like `ChatResponse`, so rows written before, which hold the messages too, read the same way), and
/// the call's guardrail verdicts (`guardrail`, left out when there are none) and the id of the HTTP request it
/// was made for (`request_id`, left out when there is none).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(serde::Serialize)]
pub(crate) struct ResponseColumn<'a> {
    usage: &'a tower_chat::Usage,
    finish_reason: &'a Option<tower_chat::FinishReason>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    approval_requests: &'a [tower_chat::ApprovalRequest],
    #[serde(skip_serializing_if = "Option::is_none")]
    response_id: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: &'a Option<String>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    guardrail: &'a [tower_chat::GuardrailVerdict],
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a crate::record::RequestId>,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<'a> ResponseColumn<'a> {
    pub(crate) fn of(
        response: &'a tower_chat::ChatResponse,
        guardrail: &'a [tower_chat::GuardrailVerdict],
        request_id: Option<&'a crate::record::RequestId>,
    ) -> Self {
        ResponseColumn {
            usage: &response.usage,
            finish_reason: &response.finish_reason,
            approval_requests: &response.approval_requests,
            response_id: &response.response_id,
            model: &response.model,
            guardrail,
            request_id,
        }
    }
}

/// The `response` column read back (`messages` present only in rows written before message-level storage).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(serde::Deserialize)]
pub(crate) struct ResponseColumnOwned {
    #[serde(default)]
    messages: Vec<tower_chat::Message>,
    usage: tower_chat::Usage,
    finish_reason: Option<tower_chat::FinishReason>,
    #[serde(default)]
    approval_requests: Vec<tower_chat::ApprovalRequest>,
    #[serde(default)]
    response_id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    guardrail: Vec<tower_chat::GuardrailVerdict>,
    #[serde(default)]
    request_id: Option<String>,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl From<ResponseColumnOwned> for tower_chat::ChatResponse {
    fn from(r: ResponseColumnOwned) -> Self {
        tower_chat::ChatResponse {
            messages: r.messages,
            usage: r.usage,
            finish_reason: r.finish_reason,
            approval_requests: r.approval_requests,
            response_id: r.response_id,
            model: r.model,
        }
    }
}
