//! [`SqliteStore`]: the embedded default — one file, WAL mode, migrations applied on open.
//!
//! SQLite allows one writer at a time and its API blocks, so the store owns a single connection on a dedicated
//! thread and every operation (the layer's batched writes, reads, other crates' queries through
//! [`SqliteStore::with_connection`]) runs there in submission order. The async side never blocks a Tokio worker;
//! operations are serialized, which also makes a closure passed to `with_connection` atomic with respect to every
//! other user of the store in this process. Other processes may open the same file: WAL mode lets readers run
//! alongside the writer, and a busy timeout makes concurrent writers wait instead of failing at once.
//!
//! Record writes use group commit: the thread commits every batch waiting for it in one transaction, and the
//! batches that arrive while that transaction runs wait for the next one. A batch is acknowledged once its
//! transaction committed, so a record is visible to every connection by the time its call's `Finish` is
//! delivered. No commit checkpoints: a thread of its own copies the write-ahead log into the database file on a
//! schedule (`checkpoint.rs`), so a record batch never waits for a checkpoint's syncs. Under writes that never
//! pause, the connection thread finishes that copy itself between two transactions, preferably when no batch
//! waits, so the log can start over without the writer ever waiting for a lock.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use tokio::sync::oneshot;
use tower_chat::{ConversationId, Message};

use super::chain::{history_sql, Encoded, Encoder, NodeKey};
use super::legacy_journal::LegacyJournal;
use super::rollup::{self, add_sql, Tally};
use super::schema::{
    abandon_sql, call_summaries_sql, conversation_from_row, insert_key_sql, select_sql,
    spend_from_row, spend_sql, sqlite_migrations, Row, StoredColumns, StoredRecord, SummaryColumns,
    CONVERSATION_COLUMNS, MIGRATIONS_TABLE, SELECT_KEY,
};
use super::{Migration, Store, StoreError};
use crate::call_log::{CallLogPage, CallLogQuery};

mod call_log;
mod checkpoint;
mod retention;
mod search_index;
mod spend;
use crate::record::{
    to_micros, CallId, CallQuery, CallRecord, CallSummary, ConversationQuery, ConversationSummary,
    Spend, SpendQuery,
};
use crate::usage::{usage_sql, UsageAggregate, UsageQuery, UsageRow};
pub use checkpoint::Checkpoint;
use checkpoint::{CatchUp, Checkpointer, WAL_KEPT_BYTES};
use search_index::SearchIndex;

pub use rusqlite;

/// Records in the order they were written, with what they add besides their `chat_calls` row.
type Rows = Vec<(Row, Encoded)>;

/// What the connection thread runs: a record batch, a read, or any other operation on the connection.
enum Job {
    /// The layer's record writes, through statements the thread keeps prepared between consecutive batches.
    Write(WriteJob),
    /// A read of the store's own. Needs only `&Connection`, so it runs beside the prepared record statements.
    Read(Box<dyn FnOnce(&Connection) + Send>),
    /// Anything else (migrations, other crates' closures).
    Connection(Box<dyn FnOnce(&mut Connection) + Send>),
}

/// One batch of records, and where its outcome goes: `Ok` once its transaction committed.
struct WriteJob {
    rows: Rows,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// The embedded SQLite store. Cheap to clone (clones share the connection thread); the thread ends when the last
/// clone is dropped.
#[derive(Clone)]
pub struct SqliteStore {
    jobs: mpsc::Sender<Job>,
    path: Arc<PathBuf>,
    encoder: Arc<Encoder>,
    /// A read-only connection for the listing reads ([`Store::list_conversations`], [`Store::call_summaries`]),
    /// opened on first use: in WAL mode it reads a snapshot without holding up the connection thread, so a
    /// dashboard scanning many calls does not delay the layer's record writes (and the calls waiting on them).
    reader: Arc<std::sync::Mutex<Option<Connection>>>,
    checkpointer: Checkpointer,
    /// The call log's full-text index, when the store was opened with one ([`SqliteStoreBuilder::search_index`]).
    search: Option<SearchIndex>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What a committed record survives: SQLite's `synchronous` setting in WAL mode. Either way a record is
/// acknowledged (and a fail-closed call's `Finish` delivered) only once its transaction committed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// The default, `synchronous = NORMAL`: a commit is in the write-ahead log when it returns, which is synced at
    /// each checkpoint, not at each commit. A committed record survives the process being killed (the log is in
    /// the operating system's cache, and the next open reads it); a power loss or OS crash can lose the commits
    /// since the last checkpoint, never corrupts the file, and never keeps half a transaction.
    #[default]
    Process,
    /// `synchronous = FULL`: every commit waits until the log is on disk (one `fsync` per transaction; group
    /// commit spreads it over every record waiting). A committed record also survives a power loss, on hardware
    /// that honours `fsync`.
    PowerLoss,
}

/// Options for opening a [`SqliteStore`].
#[derive(Clone, Debug)]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    migrations: Vec<Migration>,
    busy_timeout: Duration,
    durability: Durability,
    checkpoint_interval: Duration,
    search_index: bool,
    spend_rollup: bool,
}

impl SqliteStoreBuilder {
    /// Apply this migration after the crate's own (see [`Migration`]).
    pub fn migration(mut self, migration: Migration) -> Self {
        self.migrations.push(migration);
        self
    }

    /// What a committed record survives (default [`Durability::Process`]: a killed process, not a power loss).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How often the checkpoint thread copies the write-ahead log into the database file (default 500 ms). The log
    /// holds what was written in between, so a longer interval means a larger log; commits never wait for it.
    pub fn checkpoint_interval(mut self, interval: Duration) -> Self {
        self.checkpoint_interval = interval;
        self
    }

    /// Keep the call log's full-text index, so that [`Store::call_log`] finds calls by the words of their messages
    /// (default off: a store that is never searched pays nothing for it). The index is a file of its own beside
    /// the database (`<database>-search`), written by a thread of its own in batches after each commit, never on
    /// a call's path; a search sees every call recorded before it. A new index file (the first open with the
    /// index on, or after deleting the file) is filled with the calls already recorded.
    pub fn search_index(mut self, enabled: bool) -> Self {
        self.search_index = enabled;
        self
    }

    /// Keep the spend rollup that [`Store::spend_rollup`] reads (default on): each record transaction adds its
    /// calls to it. Off, this store's writes leave it as it is, so its sums miss the calls this store records:
    /// for a store whose spend is never read from the rollup (an archive; a benchmark's baseline, measuring the
    /// rollup's share of a record's write).
    pub fn spend_rollup(mut self, enabled: bool) -> Self {
        self.spend_rollup = enabled;
        self
    }

    /// How long a write waits for another process's write lock before failing (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Open (creating the file if needed), switch to WAL mode, apply pending migrations, and commit what a
    /// record journal of an earlier build left beside the file (see `legacy_journal.rs`).
    pub async fn open(self) -> Result<SqliteStore, StoreError> {
        let (jobs, receiver) = mpsc::channel::<Job>();
        let (opened_tx, opened_rx) = oneshot::channel();
        let path = self.path.clone();
        let (busy_timeout, checkpoint_interval) = (self.busy_timeout, self.checkpoint_interval);
        let (search, pending) = match self.search_index {
            true => {
                let (search, pending) = SearchIndex::channel();
                (Some(search), Some(pending))
            }
            false => (None, None),
        };
        let writer_search = search.clone();
        let catch_up = Arc::new(CatchUp::default());
        let writer_catch_up = catch_up.clone();
        std::thread::Builder::new()
            .name("tower-chat-sqlite".into())
            .spawn(move || {
                let search = writer_search;
                let spend_rollup = self.spend_rollup;
                let mut conn = match open_connection(&self, search.as_ref()) {
                    Ok((conn, key)) => {
                        let _ = opened_tx.send(Ok(key));
                        conn
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                // Ends when every SqliteStore clone (every sender) is gone.
                let mut next = None;
                while let Some(job) = next.take().or_else(|| receiver.recv().ok()) {
                    match job {
                        Job::Connection(job) => {
                            // A panicking closure (from `with_connection`) must not take the store down for
                            // everyone: its caller sees the operation fail, and an open rusqlite transaction
                            // rolls back on unwind.
                            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                job(&mut conn)
                            }))
                            .is_err()
                            {
                                tracing::error!(
                                    "a SQLite store operation panicked; the store continues"
                                );
                            }
                        }
                        writes_or_reads => {
                            next = serve_writes(
                                &conn,
                                &receiver,
                                writes_or_reads,
                                WriteOptions {
                                    search: search.as_ref(),
                                    spend_rollup,
                                },
                                &writer_catch_up,
                            )
                        }
                    }
                }
            })
            .map_err(|e| StoreError::with_source("cannot start the SQLite thread", e))?;
        let key = opened_rx
            .await
            .map_err(|_| StoreError::new("the SQLite thread stopped while opening"))??;
        let checkpointer = Checkpointer::start(&path, busy_timeout, checkpoint_interval, catch_up)?;
        if let Some(pending) = pending {
            SearchIndex::start(
                &path,
                busy_timeout,
                pending,
                SqliteStore::index_recorded_calls,
            )?;
        }
        Ok(SqliteStore {
            jobs,
            path: Arc::new(path),
            encoder: Arc::new(Encoder::new(key)),
            reader: Arc::default(),
            checkpointer,
            search,
        })
    }
}

fn open_connection(
    options: &SqliteStoreBuilder,
    search: Option<&SearchIndex>,
) -> Result<(Connection, NodeKey), StoreError> {
    let context = |what: &str| {
        let path = options.path.display().to_string();
        let what = what.to_owned();
        move |e: rusqlite::Error| StoreError::with_source(format!("SQLite {path}: {what}"), e)
    };
    let mut conn = Connection::open(&options.path).map_err(context("cannot open"))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(context("cannot set the busy timeout"))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(context("cannot switch to WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::new(format!(
            "SQLite {}: journal mode is {mode:?}, not WAL (an in-memory database?)",
            options.path.display()
        )));
    }
    // In WAL mode NORMAL keeps every committed transaction across a process crash; only an OS crash or power
    // loss can lose the last commits, and it never corrupts the file. FULL syncs the log on every commit.
    let synchronous = match options.durability {
        Durability::Process => "NORMAL",
        Durability::PowerLoss => "FULL",
    };
    // Commits never checkpoint: the checkpoint thread does (`checkpoint.rs`).
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON; PRAGMA wal_autocheckpoint = 0; \
         PRAGMA journal_size_limit = {WAL_KEPT_BYTES};"
    ))
    .map_err(context("cannot set pragmas"))?;
    conn.execute(MIGRATIONS_TABLE, [])
        .map_err(context("cannot create the migrations table"))?;
    for migration in sqlite_migrations().iter().chain(&options.migrations) {
        apply_migration(&mut conn, migration).map_err(|e| {
            StoreError::with_source(
                format!(
                    "SQLite {}: migration {} failed",
                    options.path.display(),
                    migration.id()
                ),
                e,
            )
        })?;
    }
    let fresh = NodeKey::random();
    conn.execute(
        &insert_key_sql("?1", "?2"),
        params![fresh.0 as i64, fresh.1 as i64],
    )
    .map_err(context("cannot create the node key"))?;
    let key = conn
        .query_row(SELECT_KEY, [], |row| {
            Ok(NodeKey(
                row.get::<_, i64>(0)? as u64,
                row.get::<_, i64>(1)? as u64,
            ))
        })
        .map_err(context("cannot read the node key"))?;
    // The call log's index lives in a file of its own now (`search_index.rs`): the one migration 0010 made in the
    // database is no longer read or written.
    conn.execute_batch("DROP TABLE IF EXISTS main.chat_calls_search")
        .map_err(context("cannot drop the call log's former index"))?;
    commit_legacy_journal(
        &conn,
        &options.path,
        WriteOptions {
            search,
            spend_rollup: options.spend_rollup,
        },
    )?;
    SqliteStore::index_earlier_calls(&conn, search).map_err(context(
        "cannot index the calls recorded before the call log",
    ))?;
    Ok((conn, key))
}

/// Commit the records a record journal of an earlier build left beside the database, then remove its files.
fn commit_legacy_journal(
    conn: &Connection,
    database: &Path,
    options: WriteOptions<'_>,
) -> Result<(), StoreError> {
    let Some(journal) = LegacyJournal::open(database)? else {
        return Ok(());
    };
    if !journal.records.is_empty() {
        WriteStatements::prepare(conn, options)
            .and_then(|mut statements| statements.write([&journal.records]))
            .map_err(|e| {
                StoreError::with_source(
                    format!(
                        "SQLite {}: cannot write the {} records of the record journal into the tables",
                        database.display(),
                        journal.records.len()
                    ),
                    e,
                )
            })?;
        tracing::info!(
            records = journal.records.len(),
            "records left in the record journal of an earlier build are now in the tables"
        );
    }
    journal.remove()
}

fn apply_migration(conn: &mut Connection, migration: &Migration) -> rusqlite::Result<()> {
    // IMMEDIATE takes the write lock up front, so two processes opening a fresh file cannot both apply it.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let applied = tx
        .query_row(
            "SELECT 1 FROM tower_chat_migrations WHERE id = ?1",
            [migration.id()],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !applied {
        tx.execute_batch(migration.sql())?;
        tx.execute(
            "INSERT INTO tower_chat_migrations (id, applied_at) VALUES (?1, ?2)",
            params![migration.id(), to_micros(std::time::SystemTime::now())],
        )?;
    }
    tx.commit()
}

impl SqliteStore {
    /// Open the database file at `path` with default options.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::builder(path).open().await
    }

    /// Options for opening the database file at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder {
        SqliteStoreBuilder {
            path: path.as_ref().to_owned(),
            migrations: Vec::new(),
            busy_timeout: Duration::from_secs(5),
            durability: Durability::default(),
            checkpoint_interval: Duration::from_millis(500),
            search_index: false,
            spend_rollup: true,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copy the write-ahead log into the database file now, on the checkpoint thread (which otherwise does it
    /// every [`SqliteStoreBuilder::checkpoint_interval`]): before copying the file elsewhere, say. Record writes
    /// go on meanwhile.
    pub async fn checkpoint(&self) -> Result<Checkpoint, StoreError> {
        self.checkpointer.checkpoint().await
    }

    /// Mark calls still [`crate::CallOutcome::InFlight`] that started before `started_before` as
    /// [`crate::CallOutcome::Interrupted`] (without an error): run it at startup, with the start time of the
    /// process, to close the records of calls a previous process was serving when it died. Returns how many.
    pub async fn abandon_in_flight(&self, started_before: SystemTime) -> Result<u64, StoreError> {
        let cutoff = to_micros(started_before);
        let updated = self
            .run("cannot close abandoned in-flight records", move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute(&rollup::sqlite_abandon_sql(), [cutoff])?;
                let closed = tx.execute(&abandon_sql("?1"), [cutoff])?;
                tx.commit()?;
                Ok(closed)
            })
            .await?;
        Ok(updated as u64)
    }

    /// Apply other crates' migrations to an open store (each once per database, in order, in its own
    /// transaction), e.g. the approval crate's tables. The same as [`SqliteStoreBuilder::migration`], for a
    /// store that is already open.
    pub async fn apply_migrations(&self, migrations: &[Migration]) -> Result<(), StoreError> {
        let migrations = migrations.to_vec();
        let path = self.path.display().to_string();
        self.with_connection(move |conn| {
            for migration in &migrations {
                apply_migration(conn, migration).map_err(|e| {
                    StoreError::with_source(
                        format!("SQLite {path}: migration {} failed", migration.id()),
                        e,
                    )
                })?;
            }
            Ok(())
        })
        .await?
    }

    /// Run `f` on the store's connection thread, after every operation submitted before it and before every
    /// one submitted after it. This is how other crates (the approval layer) keep their own tables, added with
    /// [`SqliteStoreBuilder::migration`] or [`SqliteStore::apply_migrations`], in the same database: open a transaction inside `f` for multi-statement
    /// changes. `f` must not block for long: it holds up the layer's record writes.
    pub async fn with_connection<F, T>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut Connection) -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Connection(Box::new(move |conn| {
                let _ = tx.send(f(conn));
            })))
            .map_err(|_| StoreError::new("the SQLite connection thread has stopped"))?;
        rx.await
            .map_err(|_| StoreError::new("the SQLite connection thread stopped mid-operation"))
    }

    /// Run a read on the store's read-only connection, on a blocking thread of the runtime (never on the
    /// connection thread): it sees the last committed state and does not wait for, or delay, writes.
    async fn read<F, T>(&self, what: &'static str, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reader, path) = (self.reader.clone(), self.path.clone());
        let search = self.search.is_some();
        tokio::task::spawn_blocking(move || {
            let mut slot = reader.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_none() {
                let conn = Connection::open_with_flags(
                    path.as_path(),
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                conn.busy_timeout(Duration::from_secs(5))?;
                if search {
                    search_index::attach(&conn, &path)?;
                }
                *slot = Some(conn);
            }
            f(slot.as_ref().expect("opened above"))
        })
        .await
        .map_err(|e| StoreError::with_source("the SQLite read task failed", e))?
        .map_err(|e| StoreError::with_source(format!("SQLite: {what}"), e))
    }

    /// Run a read on the connection thread, after every operation submitted before it (so it sees every record
    /// acknowledged before it was asked for).
    pub(super) async fn read_on_thread<F, T>(
        &self,
        what: &'static str,
        f: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Read(Box::new(move |conn| {
                let _ = tx.send(f(conn));
            })))
            .map_err(|_| StoreError::new("the SQLite connection thread has stopped"))?;
        rx.await
            .map_err(|_| StoreError::new("the SQLite connection thread stopped mid-operation"))?
            .map_err(|e| StoreError::with_source(format!("SQLite: {what}"), e))
    }

    /// [`SqliteStore::with_connection`] for a closure returning a `rusqlite` result.
    pub async fn run<F, T>(&self, what: &'static str, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.with_connection(f)
            .await?
            .map_err(|e| StoreError::with_source(format!("SQLite: {what}"), e))
    }
}

/// `response_text`, `request_messages` and `request_options` are written as the literals of
/// [`super::schema::EMPTY_TEXT`], [`super::schema::EMPTY_MESSAGES`] and [`super::schema::EMPTY_OPTIONS`] (the
/// answer, the history and the options live in their own tables): three fewer parameters to bind.
const UPSERT: &str = "INSERT INTO chat_calls (call_id, conversation_id, caller, round_index, started_at, \
    first_token_at, ended_at, provider, model, status, error_kind, error_message, finish_reason, input_tokens, \
    output_tokens, response_text, request_messages, request_options, response, cost_nanos, history_head, \
    request_len, options_id, usage_estimated, omitted_messages, omitted_bytes, first_message, team) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, '', '[]', '{}', ?16, ?17, ?18, \
    ?19, ?20, ?21, ?22, ?23, ?24, ?25) \
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
    omitted_bytes = excluded.omitted_bytes, first_message = excluded.first_message, team = excluded.team \
    WHERE chat_calls.status = 'in_flight'";

const INSERT_NODE: &str = "INSERT INTO chat_messages (id, parent_id, position, message) \
    VALUES (?1, ?2, ?3, ?4) ON CONFLICT (id) DO NOTHING";

const INSERT_OPTIONS: &str =
    "INSERT INTO chat_options (id, options) VALUES (?1, ?2) ON CONFLICT (id) DO NOTHING";

fn read_raw(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRecord> {
    Ok(StoredRecord {
        columns: StoredColumns {
            call_id: row.get(0)?,
            conversation_id: row.get(1)?,
            caller: row.get(2)?,
            round_index: row.get(3)?,
            started_at: row.get(4)?,
            first_token_at: row.get(5)?,
            ended_at: row.get(6)?,
            provider: row.get(7)?,
            model: row.get(8)?,
            status: row.get(9)?,
            error_kind: row.get(10)?,
            error_message: row.get(11)?,
            cost_nanos: row.get(12)?,
            history_head: row.get(13)?,
            request_len: row.get(14)?,
            usage_estimated: row.get(15)?,
            omitted_messages: row.get(16)?,
            omitted_bytes: row.get(17)?,
            team: row.get(18)?,
        },
        request_messages: row.get(19)?,
        request_options: row.get(20)?,
        response: row.get(21)?,
        history: Vec::new(),
        blobs: Default::default(),
    })
}

/// Read each record's history from `chat_messages`, on the connection thread, with the blobs it refers to.
fn with_histories(
    conn: &Connection,
    records: Vec<StoredRecord>,
) -> rusqlite::Result<Vec<StoredRecord>> {
    with_histories_and_blobs_of(conn, records, None)
}

/// [`with_histories`], reading the blobs of every message, or of the message at `only` (request then
/// response messages).
fn with_histories_and_blobs_of(
    conn: &Connection,
    mut records: Vec<StoredRecord>,
    only: Option<usize>,
) -> rusqlite::Result<Vec<StoredRecord>> {
    let mut fetched = std::collections::HashMap::new();
    for record in &mut records {
        if let Some(head) = record.head() {
            let head = head.to_owned();
            record.history = conn
                .prepare_cached(&history_sql("?1", "message"))?
                .query_map([head], |row| row.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
            // Only the blobs this record's history refers to: a blob is never read by its hash alone. Each is
            // read once per query, however many of its records refer to it.
            let wanted = match only {
                Some(index) => record.history.get(index..=index).unwrap_or_default(),
                None => &record.history[..],
            };
            for hash in references(wanted)? {
                let bytes = match fetched.get(&hash) {
                    Some(bytes) => Bytes::clone(bytes),
                    None => {
                        let bytes: Vec<u8> = conn
                            .prepare_cached(SELECT_BLOB)?
                            .query_row([&hash], |row| row.get(0))
                            .optional()?
                            .ok_or_else(|| missing_blob(&hash))?;
                        let bytes = Bytes::from(bytes);
                        fetched.insert(hash.clone(), bytes.clone());
                        bytes
                    }
                };
                record.blobs.insert(hash, bytes);
            }
        }
    }
    Ok(records)
}

const SELECT_BLOB: &str = "SELECT bytes FROM chat_blobs WHERE hash = ?1";

const INSERT_BLOB: &str = "INSERT INTO chat_blobs (hash, media_type, bytes) VALUES (?1, ?2, ?3) \
    ON CONFLICT (hash) DO NOTHING";

/// A decoding failure as a `rusqlite` error, for the closures that read on the connection.
fn decode_failure(error: StoreError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(error))
}

fn missing_blob(hash: &str) -> rusqlite::Error {
    decode_failure(StoreError::new(format!(
        "a stored message refers to blob {hash}, which is missing"
    )))
}

fn references(history: &[String]) -> rusqlite::Result<std::collections::HashSet<String>> {
    super::blobs::references(history).map_err(decode_failure)
}

/// The record writes' statements, prepared once and kept while batches follow one another on the connection
/// thread. `prepare_cached` would cost more than the inserts' own work per record: it trims, hashes and copies the
/// SQL text (the upsert's is 1.5 KiB) on every lookup and again when the statement goes back into its cache.
struct WriteStatements<'c> {
    conn: &'c Connection,
    begin: rusqlite::Statement<'c>,
    commit: rusqlite::Statement<'c>,
    node: rusqlite::Statement<'c>,
    options: rusqlite::Statement<'c>,
    blob: rusqlite::Statement<'c>,
    upsert: rusqlite::Statement<'c>,
    /// Adds a [`Tally`] row to the spend rollup (`None`: the store does not keep it).
    rollup: Option<rusqlite::Statement<'c>>,
    /// Where the text of committed calls goes, if the store keeps a search index.
    search: Option<&'c SearchIndex>,
    /// The text of the calls of the transaction being written: (call id, text), in write order.
    unindexed: search_index::Texts,
}

impl<'c> WriteStatements<'c> {
    fn prepare(conn: &'c Connection, options: WriteOptions<'c>) -> rusqlite::Result<Self> {
        Ok(WriteStatements {
            conn,
            // IMMEDIATE: take the write lock up front, so the busy timeout applies here and not mid-batch.
            begin: conn.prepare("BEGIN IMMEDIATE")?,
            commit: conn.prepare("COMMIT")?,
            node: conn.prepare(INSERT_NODE)?,
            options: conn.prepare(INSERT_OPTIONS)?,
            blob: conn.prepare(INSERT_BLOB)?,
            upsert: conn.prepare(UPSERT)?,
            rollup: match options.spend_rollup {
                true => Some(conn.prepare(&add_sql([
                    "?1", "?2", "?3", "?4", "?5", "?6", "?7", "?8", "?9", "?10", "?11", "?12",
                ]))?),
                false => None,
            },
            search: options.search,
            unindexed: Vec::new(),
        })
    }

    /// Write `batches` in one transaction: committed when this returns `Ok`, rolled back otherwise (an error,
    /// or a panic unwinding through the connection thread).
    /// Once committed, the calls' text goes to the search index (before the batches are acknowledged, so a
    /// search asked for after a call's `Finish` finds it).
    fn write<'r>(&mut self, batches: impl IntoIterator<Item = &'r Rows>) -> rusqlite::Result<()> {
        self.unindexed.clear();
        let result = self.write_all(batches);
        if let (Ok(()), Some(search)) = (&result, self.search) {
            search.index(std::mem::take(&mut self.unindexed));
        }
        result
    }

    fn write_all<'r>(
        &mut self,
        batches: impl IntoIterator<Item = &'r Rows>,
    ) -> rusqlite::Result<()> {
        self.begin.execute([])?;
        let rollback = RollbackUnlessCommitted(self.conn);
        let mut tally = Tally::default();
        for row in batches.into_iter().flatten() {
            // Counted when it became final here: inserted final, or replacing its in-flight row (a final row is
            // never replaced, so a record written twice counts once).
            if self.write_record(row)? && row.0.status != "in_flight" {
                tally.add(row.0.counted());
            }
        }
        if let Some(rollup) = &mut self.rollup {
            for ((day, caller, team, model), sums) in tally.rows() {
                let [calls, refused, errors, input, output, cached, cost, unpriced] = *sums;
                rollup.execute(params![
                    day, caller, team, model, calls, refused, errors, input, output, cached, cost,
                    unpriced
                ])?;
            }
        }
        self.commit.execute([])?;
        drop(rollback);
        Ok(())
    }

    /// Whether the call's row was written (not when a final one was there already).
    fn write_record(&mut self, (r, encoded): &(Row, Encoded)) -> rusqlite::Result<bool> {
        for b in &encoded.blobs {
            self.blob
                .execute(params![b.hash, b.media_type, &b.bytes[..]])?;
        }
        for n in &encoded.nodes {
            self.node
                .execute(params![&*n.id, n.parent.as_deref(), n.position, n.message])?;
        }
        if let Some(o) = &encoded.options {
            self.options.execute(params![&*o.id, o.json])?;
        }
        let written = self.upsert.execute(params![
            r.call_id,
            r.conversation_id,
            r.caller,
            r.round_index,
            r.started_at,
            r.first_token_at,
            r.ended_at,
            r.provider,
            r.model,
            r.status,
            r.error_kind,
            r.error_message,
            r.finish_reason,
            r.input_tokens,
            r.output_tokens,
            r.response,
            r.cost_nanos,
            r.history_head,
            r.request_len,
            r.options_id,
            r.usage_estimated,
            r.omitted_messages,
            r.omitted_bytes,
            r.first_message,
            r.team,
        ])?;
        // Unchanged when a final record was already stored: its index entry stays.
        if written > 0 && r.first_message.is_some() && self.search.is_some() {
            self.unindexed
                .push((r.call_id.clone(), r.search_text.clone()));
        }
        Ok(written > 0)
    }
}

/// How the connection thread writes records: to the search index too, if the store keeps one; to the spend
/// rollup too, unless the store was opened without it.
#[derive(Clone, Copy)]
struct WriteOptions<'c> {
    search: Option<&'c SearchIndex>,
    spend_rollup: bool,
}

/// Rolls back the connection's open transaction when dropped, if there still is one (a failed `COMMIT` or an
/// error or panic before it).
struct RollbackUnlessCommitted<'c>(&'c Connection);

impl Drop for RollbackUnlessCommitted<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

/// Serve `first` and every record write and read queued behind it with the same prepared statements; return
/// the first other job (which needs `&mut Connection`, so the statements are finalized first), or `None` when
/// every sender is gone. Between transactions, finish the checkpoint the checkpoint thread asks for through
/// `catch_up` (`checkpoint.rs`): when nothing waits, or after a transaction once the log is past its bound.
fn serve_writes<'c>(
    conn: &'c Connection,
    receiver: &mpsc::Receiver<Job>,
    first: Job,
    options: WriteOptions<'c>,
    catch_up: &CatchUp,
) -> Option<Job> {
    let mut statements: Option<WriteStatements<'_>> = None;
    let mut next = Some(first);
    let mut group = Vec::new();
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match receiver.try_recv() {
                Ok(job) => job,
                Err(mpsc::TryRecvError::Empty) => {
                    catch_up.when_idle(conn);
                    receiver.recv().ok()?
                }
                Err(mpsc::TryRecvError::Disconnected) => return None,
            },
        };
        match job {
            Job::Write(write) => {
                // Group commit: every batch already waiting joins this transaction; those arriving while it
                // runs wait in the channel for the next one.
                group.push(write);
                while let Ok(job) = receiver.try_recv() {
                    match job {
                        Job::Write(write) => group.push(write),
                        other => {
                            next = Some(other);
                            break;
                        }
                    }
                }
                commit_group(conn, &mut statements, &mut group, options);
                catch_up.between_batches(conn);
            }
            Job::Read(job) => {
                // As for `with_connection` closures: a panicking read fails its caller, not the store.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(conn))).is_err() {
                    tracing::error!("a SQLite store read panicked; the store continues");
                }
            }
            other => return Some(other),
        }
    }
}

/// Commit the batches of `group` in one transaction and acknowledge each; if that fails, commit each batch in
/// a transaction of its own, so one batch the tables refuse does not fail the others.
fn commit_group<'c>(
    conn: &'c Connection,
    statements: &mut Option<WriteStatements<'c>>,
    group: &mut Vec<WriteJob>,
    options: WriteOptions<'c>,
) {
    match commit(
        conn,
        statements,
        group.iter().map(|write| &write.rows),
        options,
    ) {
        Ok(()) => {
            for write in group.drain(..) {
                let _ = write.done.send(Ok(()));
            }
        }
        Err(error) if group.len() == 1 => {
            let _ = group.pop().expect("one batch").done.send(Err(error));
        }
        Err(_) => {
            for write in group.drain(..) {
                let alone = commit(conn, statements, std::iter::once(&write.rows), options);
                let _ = write.done.send(alone);
            }
        }
    }
}

/// Write `batches` into the tables in one transaction, with the statements kept prepared.
fn commit<'c, 'r>(
    conn: &'c Connection,
    statements: &mut Option<WriteStatements<'c>>,
    batches: impl IntoIterator<Item = &'r Rows>,
    options: WriteOptions<'c>,
) -> Result<(), StoreError> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if statements.is_none() {
            *statements = Some(WriteStatements::prepare(conn, options)?);
        }
        statements.as_mut().expect("prepared above").write(batches)
    }));
    match outcome {
        Ok(result) => {
            result.map_err(|e| StoreError::with_source("SQLite: cannot write call records", e))
        }
        Err(_) => {
            // Start over with fresh statements.
            *statements = None;
            tracing::error!("a SQLite record write panicked; the store continues");
            Err(StoreError::new("SQLite: the record write panicked"))
        }
    }
}

fn select(filter: &str) -> String {
    select_sql("{}", filter)
}

impl Store for SqliteStore {
    fn write_calls<'a>(
        &'a self,
        records: &'a [CallRecord],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Encoded here, on the writer task: only messages the store has not seen are serialised.
            let (encoded, pending) = self.encoder.encode(records)?;
            // The searchable text only when a search index takes it.
            let search = self.search.is_some();
            let rows = records
                .iter()
                .zip(encoded)
                .map(|(record, encoded)| Ok((Row::from_record(record, &encoded, search)?, encoded)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            let (done, written) = oneshot::channel();
            self.jobs
                .send(Job::Write(WriteJob { rows, done }))
                .map_err(|_| StoreError::new("the SQLite connection thread has stopped"))?;
            written.await.map_err(|_| {
                StoreError::new("the SQLite connection thread stopped mid-operation")
            })??;
            self.encoder.committed(pending);
            Ok(())
        })
    }

    fn delete_expired<'a>(
        &'a self,
        retention: &'a crate::store::Retention,
        now: SystemTime,
    ) -> BoxFuture<'a, Result<crate::store::Purged, StoreError>> {
        Box::pin(self.delete_expired_in_batches(retention, now))
    }

    /// Besides the encoder's chains: SQLite's page caches (up to 2 MiB a connection, filled by a burst of writes)
    /// on the connection thread, and the read-only connection, reopened on the next read. A read running now
    /// keeps its connection.
    fn release_caches(&self) {
        self.encoder.forget();
        let _ = self.jobs.send(Job::Read(Box::new(|conn| {
            if let Err(error) = conn.execute_batch("PRAGMA shrink_memory") {
                tracing::debug!("SQLite could not shrink its memory: {error}");
            }
        })));
        if let Ok(mut reader) = self.reader.try_lock() {
            reader.take();
        }
    }

    fn call<'a>(
        &'a self,
        call_id: &'a CallId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        let id = call_id.as_str().to_owned();
        Box::pin(async move {
            let raw = self
                .read_on_thread("cannot read a call record", move |conn| {
                    let raw = conn
                        .prepare_cached(&select("WHERE call_id = ?1"))?
                        .query_row([id], read_raw)
                        .optional()?;
                    with_histories(conn, raw.into_iter().collect())
                })
                .await?;
            raw.into_iter()
                .next()
                .map(StoredRecord::into_record)
                .transpose()
        })
    }

    fn call_message<'a>(
        &'a self,
        call_id: &'a CallId,
        index: usize,
    ) -> BoxFuture<'a, Result<Option<Message>, StoreError>> {
        let id = call_id.as_str().to_owned();
        Box::pin(async move {
            let raw = self
                .read_on_thread("cannot read a call record", move |conn| {
                    let raw = conn
                        .prepare_cached(&select("WHERE call_id = ?1"))?
                        .query_row([id], read_raw)
                        .optional()?;
                    with_histories_and_blobs_of(conn, raw.into_iter().collect(), Some(index))
                })
                .await?;
            match raw.into_iter().next() {
                Some(raw) => raw.into_message(index),
                None => Ok(None),
            }
        })
    }

    fn conversation_calls<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>> {
        let id = conversation_id.as_str().to_owned();
        Box::pin(async move {
            let raws = self
                .read_on_thread("cannot read a conversation", move |conn| {
                    let raws = conn
                        .prepare_cached(&select(
                            "WHERE conversation_id = ?1 ORDER BY started_at, call_id",
                        ))?
                        .query_map([id], read_raw)?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    with_histories(conn, raws)
                })
                .await?;
            raws.into_iter().map(StoredRecord::into_record).collect()
        })
    }

    fn latest_completed_call<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        let id = conversation_id.as_str().to_owned();
        Box::pin(async move {
            let raw = self
                .read_on_thread("cannot read a conversation", move |conn| {
                    let raw = conn
                        .prepare_cached(&select(
                            "WHERE conversation_id = ?1 AND status = 'completed' \
                             ORDER BY started_at DESC, call_id DESC LIMIT 1",
                        ))?
                        .query_row([id], read_raw)
                        .optional()?;
                    with_histories(conn, raw.into_iter().collect())
                })
                .await?;
            raw.into_iter()
                .next()
                .map(StoredRecord::into_record)
                .transpose()
        })
    }

    fn spend<'a>(&'a self, query: &'a SpendQuery) -> BoxFuture<'a, Result<Spend, StoreError>> {
        let caller = query.caller.as_ref().map(|c| c.as_str().to_owned());
        let conversation = query
            .conversation_id
            .as_ref()
            .map(|c| c.as_str().to_owned());
        let since = query.since.map(to_micros);
        let until = query.until.map(to_micros);
        Box::pin(async move {
            let row = self
                .read_on_thread("cannot sum spend", move |conn| {
                    conn.prepare_cached(&spend_sql(["?1", "?2", "?3", "?4"]))?
                        .query_row(params![caller, conversation, since, until], |row| {
                            Ok([
                                row.get(0)?,
                                row.get(1)?,
                                row.get(2)?,
                                row.get(3)?,
                                row.get(4)?,
                                row.get(5)?,
                            ])
                        })
                })
                .await?;
            Ok(spend_from_row(row))
        })
    }

    fn list_conversations<'a>(
        &'a self,
        query: &'a ConversationQuery,
    ) -> BoxFuture<'a, Result<Vec<ConversationSummary>, StoreError>> {
        let caller = query.caller.as_ref().map(|c| c.as_str().to_owned());
        let limit = i64::from(query.effective_limit());
        let offset = i64::from(query.offset);
        Box::pin(async move {
            let rows = self
                .read("cannot list conversations", move |conn| {
                    let filter = if caller.is_some() {
                        "WHERE conversation_id IN (SELECT conversation_id FROM chat_calls WHERE caller = ?3)"
                    } else {
                        "WHERE ?3 IS NULL"
                    };
                    let sql = format!(
                        "SELECT {CONVERSATION_COLUMNS} FROM chat_calls \
                         {filter} GROUP BY conversation_id \
                         ORDER BY MAX(started_at) DESC, conversation_id LIMIT ?1 OFFSET ?2"
                    );
                    conn.prepare_cached(&sql)?
                        .query_map(params![limit, offset, caller], |row| {
                            let mut values = [0i64; 7];
                            for (i, at) in [1, 2, 3, 5, 6, 7, 8].into_iter().enumerate() {
                                values[i] = row.get(at)?;
                            }
                            Ok(conversation_from_row(row.get(0)?, row.get(4)?, values))
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            Ok(rows)
        })
    }

    fn call_summaries<'a>(
        &'a self,
        query: &'a CallQuery,
    ) -> BoxFuture<'a, Result<Vec<CallSummary>, StoreError>> {
        let caller = query.caller.as_ref().map(|c| c.as_str().to_owned());
        let since = query.since.map(to_micros);
        let until = query.until.map(to_micros);
        let limit = i64::from(query.effective_limit());
        Box::pin(async move {
            let rows = self
                .read("cannot list calls", move |conn| {
                    conn.prepare_cached(&call_summaries_sql(
                        ["?1", "?2", "?3", "?4"],
                        "COALESCE(json_extract(response, '$.usage.from_response_cache'), 0) = 1",
                    ))?
                    .query_map(params![caller, since, until, limit], summary_columns)?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            rows.into_iter()
                .rev()
                .map(SummaryColumns::into_summary)
                .collect()
        })
    }

    fn usage<'a>(
        &'a self,
        query: &'a UsageQuery,
    ) -> BoxFuture<'a, Result<Vec<UsageAggregate>, StoreError>> {
        let bucket = query.bucket_micros();
        let caller = query.caller.as_ref().map(|c| c.as_str().to_owned());
        let (since, until) = (to_micros(query.since), to_micros(query.until));
        let (by_model, by_caller) = (query.by_model, query.by_caller);
        Box::pin(async move {
            let bucket = bucket?;
            let rows = self
                .read("cannot aggregate usage", move |conn| {
                    conn.prepare_cached(&usage_sql(
                        ["?1", "?2", "?3", "?4", "?5", "?6"],
                        "COALESCE(json_extract(response, '$.usage.from_response_cache'), 0) = 1",
                    ))?
                    .query_map(
                        params![since, until, bucket, caller, by_model, by_caller],
                        |row| {
                            let mut sums = [0i64; crate::usage::USAGE_SUMS];
                            for (i, sum) in sums.iter_mut().enumerate() {
                                *sum = row.get(3 + i)?;
                            }
                            let mut percentiles = [None; 4];
                            for (i, p) in percentiles.iter_mut().enumerate() {
                                *p = row.get(3 + crate::usage::USAGE_SUMS + i)?;
                            }
                            Ok(UsageRow {
                                bucket: row.get(0)?,
                                model: row.get(1)?,
                                caller: row.get(2)?,
                                sums,
                                percentiles,
                            })
                        },
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            Ok(rows.into_iter().map(UsageRow::into_aggregate).collect())
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

fn summary_columns(row: &rusqlite::Row<'_>) -> rusqlite::Result<SummaryColumns> {
    Ok(SummaryColumns {
        call_id: row.get(0)?,
        conversation_id: row.get(1)?,
        caller: row.get(2)?,
        started_at: row.get(3)?,
        first_token_at: row.get(4)?,
        ended_at: row.get(5)?,
        model: row.get(6)?,
        status: row.get(7)?,
        error_kind: row.get(8)?,
        error_message: row.get(9)?,
        input_tokens: row.get(10)?,
        output_tokens: row.get(11)?,
        cost_nanos: row.get(12)?,
        from_response_cache: row.get(13)?,
        refused_before_sending: row.get(14)?,
        asked_for_tools: row.get(15)?,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::chain::{Encoded, NewOptions};
    use super::super::schema::{Row, EMPTY_MESSAGES, EMPTY_OPTIONS, EMPTY_TEXT};
    use super::{commit_group, open_connection, SqliteStore, WriteJob, WriteOptions, UPSERT};

    /// A batch of one completed record of `conversation`, without messages.
    fn batch(
        conversation: &str,
    ) -> (
        WriteJob,
        tokio::sync::oneshot::Receiver<Result<(), super::StoreError>>,
    ) {
        let row = Row {
            call_id: format!("call-{conversation}"),
            conversation_id: conversation.into(),
            caller: None,
            team: None,
            round_index: 0,
            started_at: 1,
            first_token_at: None,
            ended_at: 2,
            provider: None,
            model: None,
            status: "completed",
            error_kind: None,
            error_message: None,
            finish_reason: None,
            input_tokens: 0,
            output_tokens: 0,
            cached_input_tokens: 0,
            response: "{}".into(),
            cost_nanos: None,
            history_head: None,
            request_len: 0,
            options_id: "o".into(),
            usage_estimated: false,
            omitted_messages: None,
            omitted_bytes: None,
            first_message: Some(String::new()),
            search_text: String::new(),
        };
        let encoded = Encoded {
            head: None,
            request_len: 0,
            nodes: Vec::new(),
            options_id: Arc::from("o"),
            options: Some(NewOptions {
                id: Arc::from("o"),
                json: "{}".into(),
            }),
            blobs: Vec::new(),
        };
        let (done, outcome) = tokio::sync::oneshot::channel();
        let rows = vec![(row, encoded)];
        (WriteJob { rows, done }, outcome)
    }

    /// Batches that waited together share a transaction; when the tables refuse one of them, the others are
    /// still committed, each alone, and only the refused one's caller sees the error.
    #[test]
    fn a_refused_batch_does_not_fail_the_batches_it_was_grouped_with() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, _key) =
            open_connection(&SqliteStore::builder(dir.path().join("g.db")), None).unwrap();
        conn.execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON chat_calls WHEN NEW.conversation_id = 'bad' \
             BEGIN SELECT RAISE(ABORT, 'refused'); END;",
        )
        .unwrap();
        let (first, mut first_outcome) = batch("first");
        let (bad, mut bad_outcome) = batch("bad");
        let (last, mut last_outcome) = batch("last");
        let mut group = vec![first, bad, last];
        let options = WriteOptions {
            search: None,
            spend_rollup: true,
        };
        commit_group(&conn, &mut None, &mut group, options);
        assert!(group.is_empty());
        first_outcome.try_recv().unwrap().unwrap();
        last_outcome.try_recv().unwrap().unwrap();
        let error = bad_outcome.try_recv().unwrap().unwrap_err();
        assert!(format!("{error}").contains("refused"), "{error}");
        let stored: Vec<String> = conn
            .prepare("SELECT conversation_id FROM chat_calls ORDER BY conversation_id")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(stored, ["first", "last"]);
    }

    #[test]
    fn upsert_writes_the_empty_text_history_and_options_markers() {
        assert!(UPSERT.contains(&format!(
            "?15, '{EMPTY_TEXT}', '{EMPTY_MESSAGES}', '{EMPTY_OPTIONS}', ?16"
        )));
    }
}
