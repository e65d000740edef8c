//! [`SqliteStore`]: the embedded default — one file, WAL mode, migrations applied on open.
//!
//! SQLite allows one writer at a time and its API blocks, so the store owns a single connection on a dedicated
//! thread and every operation (the layer's batched writes, reads, other crates' queries through
//! [`SqliteStore::with_connection`]) runs there in submission order. The async side never blocks a Tokio worker;
//! operations are serialized, which also makes a closure passed to `with_connection` atomic with respect to every
//! other user of the store in this process. Other processes may open the same file: WAL mode lets readers run
//! alongside the writer, and a busy timeout makes concurrent writers wait instead of failing at once.
//!
//! A batch of records is durable once appended to the store's journal (see `journal.rs`), which the writer task
//! does itself (`appender.rs`): the thread writes the journal's records into the tables later, in transactions
//! of about [`INDEX_BATCH`] records, and always before running any other operation, so nothing read through the
//! store misses a record written before it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use tokio::sync::oneshot;
use tower_chat::ConversationId;

use super::appender::{Appended, Appender, Rows};
use super::chain::{history_sql, Encoded, Encoder, NodeKey};
use super::checkpoint::Checkpointer;
use super::journal::{Journal, INDEX_BATCH, INDEX_DELAY, MAX_TRANSACTION};
use super::schema::{
    abandon_sql, call_summaries_sql, conversation_from_row, insert_key_sql, select_sql,
    spend_from_row, spend_sql, sqlite_migrations, Row, StoredColumns, StoredRecord, SummaryColumns,
    CONVERSATION_COLUMNS, MIGRATIONS_TABLE, SELECT_KEY,
};
use super::{Migration, Store, StoreError};
use crate::record::{
    to_micros, CallId, CallQuery, CallRecord, CallSummary, ConversationQuery, ConversationSummary,
    Spend, SpendQuery,
};

pub use rusqlite;

/// What the connection thread runs: a record batch, or any other operation on the connection.
enum Job {
    /// The layer's record writes, through statements the thread keeps prepared between consecutive batches.
    Write(WriteJob),
    /// A read of the store's own: runs once the records waiting in the journal are in the tables, with the
    /// outcome of writing them (a read must not answer without them). Needs only `&Connection`, so it runs beside
    /// the prepared record statements.
    Indexed(IndexedJob),
    /// Anything else (migrations, other crates' closures); the waiting records are indexed first.
    Connection(Box<dyn FnOnce(&mut Connection) + Send>),
    /// The writer task appended the first waiting records (the idle delay starts), or [`INDEX_BATCH`] of them.
    Wake,
}

/// See [`Job::Indexed`].
type IndexedJob = Box<dyn FnOnce(&Connection, Result<(), StoreError>) + Send>;

/// One batch of records, and where its outcome goes: `Ok` once it is durable (appended to the journal, or
/// committed to the tables when this store does not hold the journal).
struct WriteJob {
    rows: Vec<(Row, Encoded)>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// The connection thread's side of the journal: records acknowledged to the layer and not yet in the tables.
struct Unindexed {
    /// The active journal file and the records waiting in it, shared with the writer task.
    appender: Arc<Appender>,
    /// The journal's other file: empty, or (`spare_taken`) holding only records taken into `rows`.
    spare: Option<Journal>,
    spare_taken: bool,
    /// Records taken for the tables and not in them yet (the last attempt failed, or it is under way).
    rows: Rows,
    /// How long records wait while nothing else reaches the store.
    delay: Duration,
}

impl Unindexed {
    /// Whether this store holds a journal (else every batch is committed to the tables directly).
    fn journaled(&self) -> bool {
        self.appender.lock().active.is_some()
    }

    /// Records acknowledged and not in the tables: taken or still waiting.
    fn unindexed(&self) -> usize {
        self.state().0
    }

    /// [`Unindexed::unindexed`], and whether the tables refused the last records.
    fn state(&self) -> (usize, bool) {
        let shared = self.appender.lock();
        (self.rows.len() + shared.waiting.len(), shared.failing)
    }

    /// Take the waiting records into `rows`; swap the journal's files if the other one is empty, so the one
    /// holding the records taken can be emptied once they are committed.
    fn take(&mut self) {
        let mut shared = self.appender.lock();
        self.rows.append(&mut shared.waiting);
        let active_holds_records = shared.active.as_ref().is_some_and(|j| !j.is_empty());
        if !self.spare_taken && active_holds_records {
            if let (Some(active), Some(spare)) = (shared.active.as_mut(), self.spare.as_mut()) {
                std::mem::swap(active, spare);
                self.spare_taken = true;
            }
        }
    }

    /// After a commit of every record taken: empty the files that hold only committed records (the spare one;
    /// the active one too when nothing was appended since the take).
    fn committed(&mut self) {
        self.rows.clear();
        let mut shared = self.appender.lock();
        let spare_cleared =
            !self.spare_taken || self.spare.as_mut().is_none_or(|s| s.clear().is_ok());
        self.spare_taken = !spare_cleared;
        let nothing_since = shared.waiting.is_empty();
        let active_cleared =
            !nothing_since || shared.active.as_mut().is_none_or(|a| a.clear().is_ok());
        if !(spare_cleared && active_cleared) {
            // What they hold is in the tables (replaying it changes nothing), but an entry appended after a torn
            // one would be lost to replay: stop using the journal.
            tracing::error!("cannot empty the record journal; this store now commits each batch");
            shared.active = None;
            self.spare = None;
            self.spare_taken = false;
        }
    }

    /// Mark the tables refusing records (batches then go to the connection thread) or taking them again; whether
    /// they were refusing before.
    fn set_failing(&self, failing: bool) -> bool {
        std::mem::replace(&mut self.appender.lock().failing, failing)
    }
}

/// The embedded SQLite store. Cheap to clone (clones share the connection thread); the thread ends when the last
/// clone is dropped.
#[derive(Clone)]
pub struct SqliteStore {
    jobs: mpsc::Sender<Job>,
    path: Arc<PathBuf>,
    encoder: Arc<Encoder>,
    /// The journal's active file: batches are appended there on the writer task.
    appender: Arc<Appender>,
    /// A read-only connection for the listing reads ([`Store::list_conversations`], [`Store::call_summaries`]),
    /// opened on first use: in WAL mode it reads a snapshot without holding up the connection thread, so a
    /// dashboard scanning many calls does not delay the layer's record writes (and the calls waiting on them).
    reader: Arc<std::sync::Mutex<Option<Connection>>>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// When a record is durable: how the store's record journal is written, and SQLite's `synchronous` setting (WAL
/// mode). A batch of records is acknowledged once appended to the journal beside the database file
/// (`<file>-records`, `<file>-records-alt`); the tables take the journal's records in batches afterwards (see
/// the persistence README, "Durability").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// The default: the journal is appended to without waiting for the disk, and the tables commit with
    /// `synchronous = NORMAL` (the write-ahead log is synced at each checkpoint, which a thread of the store runs
    /// beside the writer once the log holds 1000 pages and every 25 pages after, never inside a commit). An
    /// acknowledged record survives the process being killed (the journal and the log are in the operating
    /// system's cache, and the next open replays both); a power loss or OS crash can lose the last records (up to
    /// about 1000 pages of log, at most 2000, plus what the journal held unsynced), never corrupts the file, and
    /// never keeps half a transaction.
    #[default]
    Process,
    /// Every append to the journal waits for the disk (one `fsync` per batch; the writer's batching spreads it
    /// over every record waiting), and the tables commit with `synchronous = FULL`. An acknowledged record also
    /// survives a power loss, on hardware that honours `fsync`.
    PowerLoss,
}

/// Options for opening a [`SqliteStore`].
#[derive(Clone, Debug)]
pub struct SqliteStoreBuilder {
    path: PathBuf,
    migrations: Vec<Migration>,
    busy_timeout: Duration,
    durability: Durability,
    index_delay: Duration,
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

    /// How long records wait in the store's journal for the tables while no other record and no other operation
    /// reaches the store (default 1 s). Reads through this store never wait for it (they index what waits
    /// first); another connection to the file (another process) sees a record at most this much later, or once
    /// 128 records wait, or after [`crate::Store::flush`]. Shorter means fewer records per transaction when
    /// calls are further apart than the delay (each transaction costs about a record's worth of instructions).
    pub fn index_delay(mut self, delay: Duration) -> Self {
        self.index_delay = delay;
        self
    }

    /// How long a write waits for another process's write lock before failing (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Open (creating the file if needed), switch to WAL mode and apply pending migrations.
    pub async fn open(self) -> Result<SqliteStore, StoreError> {
        let (jobs, receiver) = mpsc::channel::<Job>();
        let (opened_tx, opened_rx) = oneshot::channel();
        let path = self.path.clone();
        let appender = Arc::new(Appender::default());
        let thread_appender = appender.clone();
        std::thread::Builder::new()
            .name("tower-chat-sqlite".into())
            .spawn(move || {
                let (mut conn, mut unindexed) = match open_connection(&self, thread_appender) {
                    Ok((conn, key, unindexed)) => {
                        let _ = opened_tx.send(Ok(key));
                        (conn, unindexed)
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                let checkpointer =
                    match Checkpointer::start(&conn, self.path.clone(), self.busy_timeout) {
                        Ok(checkpointer) => Some(checkpointer),
                        Err(error) => {
                            tracing::warn!(%error, "no SQLite checkpoint thread: commits checkpoint as they go");
                            None
                        }
                    };
                let after_commit = |conn: &Connection| {
                    if let Some(checkpointer) = &checkpointer {
                        checkpointer.after_commit(conn);
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
                            after_commit(&conn);
                        }
                        writes_or_reads => {
                            next = serve_writes(
                                &conn,
                                &receiver,
                                writes_or_reads,
                                &mut unindexed,
                                &after_commit,
                            )
                        }
                    }
                }
            })
            .map_err(|e| StoreError::with_source("cannot start the SQLite thread", e))?;
        let key = opened_rx
            .await
            .map_err(|_| StoreError::new("the SQLite thread stopped while opening"))??;
        Ok(SqliteStore {
            jobs,
            path: Arc::new(path),
            encoder: Arc::new(Encoder::new(key)),
            appender,
            reader: Arc::default(),
        })
    }
}

fn open_connection(
    options: &SqliteStoreBuilder,
    appender: Arc<Appender>,
) -> Result<(Connection, NodeKey, Unindexed), StoreError> {
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
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON;"
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
    let unindexed = open_journal(&conn, options, appender)?;
    Ok((conn, key, unindexed))
}

/// Lock the database's record journal and write what a previous process left in it into the tables.
fn open_journal(
    conn: &Connection,
    options: &SqliteStoreBuilder,
    appender: Arc<Appender>,
) -> Result<Unindexed, StoreError> {
    let path = Journal::path(&options.path);
    let sync = options.durability == Durability::PowerLoss;
    let mut unindexed = Unindexed {
        appender,
        spare: None,
        spare_taken: false,
        rows: Vec::new(),
        delay: options.index_delay,
    };
    let Some((mut journal, mut spare, mut replay)) =
        Journal::open(&options.path, sync).map_err(|e| {
            StoreError::with_source(
                format!("cannot open the record journal {}", path.display()),
                e,
            )
        })?
    else {
        tracing::debug!(
            journal = %path.display(),
            "another store holds the record journal: this one commits each batch to the tables"
        );
        return Ok(unindexed);
    };
    if !replay.is_empty() {
        WriteStatements::prepare(conn)
            .and_then(|mut statements| statements.write(&mut replay, &mut |_| {}))
            .map_err(|e| {
                StoreError::with_source(
                    format!(
                        "SQLite {}: cannot write the {} records of the journal into the tables",
                        options.path.display(),
                        replay.len()
                    ),
                    e,
                )
            })?;
        tracing::info!(
            records = replay.len(),
            "records left in the journal by an earlier process are now in the tables"
        );
    }
    journal.clear().and_then(|()| spare.clear()).map_err(|e| {
        StoreError::with_source(
            format!("cannot empty the record journal {}", path.display()),
            e,
        )
    })?;
    unindexed.appender.lock().active = Some(journal);
    unindexed.spare = Some(spare);
    Ok(unindexed)
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
            index_delay: INDEX_DELAY,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Mark calls still [`crate::CallOutcome::InFlight`] that started before `started_before` as
    /// [`crate::CallOutcome::Interrupted`] (without an error): run it at startup, with the start time of the
    /// process, to close the records of calls a previous process was serving when it died. Returns how many.
    pub async fn abandon_in_flight(&self, started_before: SystemTime) -> Result<u64, StoreError> {
        let cutoff = to_micros(started_before);
        let updated = self
            .run("cannot close abandoned in-flight records", move |conn| {
                conn.execute(&abandon_sql("?1"), [cutoff])
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
        self.run_indexed("cannot write the journal's records into the tables", |_| {
            Ok(())
        })
        .await?;
        let (reader, path) = (self.reader.clone(), self.path.clone());
        tokio::task::spawn_blocking(move || {
            let mut slot = reader.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_none() {
                let conn = Connection::open_with_flags(
                    path.as_path(),
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                conn.busy_timeout(Duration::from_secs(5))?;
                *slot = Some(conn);
            }
            f(slot.as_ref().expect("opened above"))
        })
        .await
        .map_err(|e| StoreError::with_source("the SQLite read task failed", e))?
        .map_err(|e| StoreError::with_source(format!("SQLite: {what}"), e))
    }

    /// Run `f` on the connection thread once the records waiting in the journal are in the tables; if they
    /// cannot be written, that error instead.
    async fn run_indexed<F, T>(&self, what: &'static str, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Indexed(Box::new(move |conn, indexed| {
                let _ = tx.send(indexed.map(|()| f(conn)));
            })))
            .map_err(|_| StoreError::new("the SQLite connection thread has stopped"))?;
        rx.await
            .map_err(|_| StoreError::new("the SQLite connection thread stopped mid-operation"))??
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
    request_len, options_id, usage_estimated, omitted_messages, omitted_bytes) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, '', '[]', '{}', ?16, ?17, ?18, \
    ?19, ?20, ?21, ?22, ?23) \
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
    omitted_bytes = excluded.omitted_bytes \
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
        },
        request_messages: row.get(18)?,
        request_options: row.get(19)?,
        response: row.get(20)?,
        history: Vec::new(),
    })
}

/// Read each record's history from `chat_messages`, on the connection thread.
fn with_histories(
    conn: &Connection,
    mut records: Vec<StoredRecord>,
) -> rusqlite::Result<Vec<StoredRecord>> {
    for record in &mut records {
        if let Some(head) = record.head() {
            let head = head.to_owned();
            record.history = conn
                .prepare_cached(&history_sql("?1", "message"))?
                .query_map([head], |row| row.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
        }
    }
    Ok(records)
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
    upsert: rusqlite::Statement<'c>,
}

impl<'c> WriteStatements<'c> {
    fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        Ok(WriteStatements {
            conn,
            // IMMEDIATE: take the write lock up front, so the busy timeout applies here and not mid-batch.
            begin: conn.prepare("BEGIN IMMEDIATE")?,
            commit: conn.prepare("COMMIT")?,
            node: conn.prepare(INSERT_NODE)?,
            options: conn.prepare(INSERT_OPTIONS)?,
            upsert: conn.prepare(UPSERT)?,
        })
    }

    /// Write `rows` in one transaction: committed when this returns `Ok`, rolled back otherwise (an error, or a
    /// panic unwinding through the connection thread). `between` runs after each record and may add records to
    /// `rows`, which join the same transaction.
    fn write(&mut self, rows: &mut Rows, between: &mut Between<'_>) -> rusqlite::Result<()> {
        self.begin.execute([])?;
        let rollback = RollbackUnlessCommitted(self.conn);
        let mut next = 0;
        while next < rows.len() {
            self.write_record(&rows[next])?;
            next += 1;
            between(rows);
        }
        self.commit.execute([])?;
        drop(rollback);
        Ok(())
    }

    fn write_record(&mut self, (r, encoded): &(Row, Encoded)) -> rusqlite::Result<()> {
        for n in &encoded.nodes {
            self.node
                .execute(params![&*n.id, n.parent.as_deref(), n.position, n.message])?;
        }
        if let Some(o) = &encoded.options {
            self.options.execute(params![&*o.id, o.json])?;
        }
        self.upsert.execute(params![
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
        ])?;
        Ok(())
    }
}

/// What runs between two records of a transaction and may add records to it (see [`WriteStatements::write`]).
type Between<'a> = dyn FnMut(&mut Rows) + 'a;

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

/// Where the connection thread's jobs come from while the tables take the journal's records: record batches
/// sent to the thread meanwhile (see `appender.rs` for when they are) are appended to the journal and
/// acknowledged between two records of the transaction, and join it, so a call ending during an index
/// transaction waits for one record's inserts, not the whole batch's. The first job that is anything else (or a
/// batch the journal cannot take) stops the taking, and waits for the commit in `deferred`: jobs run in the
/// order they came.
struct Arrivals<'r> {
    receiver: &'r mpsc::Receiver<Job>,
    deferred: Option<Job>,
}

impl<'r> Arrivals<'r> {
    fn new(receiver: &'r mpsc::Receiver<Job>) -> Self {
        Arrivals {
            receiver,
            deferred: None,
        }
    }

    /// Takes the batches waiting in the channel into `rows` (appended and acknowledged first), up to
    /// [`MAX_TRANSACTION`] records.
    fn take(&mut self, appender: &Appender, rows: &mut Rows) {
        while self.deferred.is_none() && rows.len() < MAX_TRANSACTION {
            let Ok(job) = self.receiver.try_recv() else {
                return;
            };
            match job {
                Job::Write(WriteJob { rows: batch, done }) => {
                    if appender.append_to_active(&batch).is_ok() {
                        let _ = done.send(Ok(()));
                        rows.extend(batch);
                    } else {
                        // `serve_write` tries again after the commit, and commits it to the tables if it fails again.
                        self.deferred = Some(Job::Write(WriteJob { rows: batch, done }));
                    }
                }
                // `serve_writes` looks at what waits once the transaction is over.
                Job::Wake => {}
                other => self.deferred = Some(other),
            }
        }
    }
}

/// Serve `first` and every record write and store read queued behind it with the same prepared statements,
/// indexing the journal's records when [`INDEX_BATCH`] of them wait, nothing arrives for their delay, or a read
/// comes; return the first other job (which may need `&mut Connection`, so the statements are finalized first)
/// once the waiting records are indexed, or `None` when every sender is gone.
fn serve_writes(
    conn: &Connection,
    receiver: &mpsc::Receiver<Job>,
    first: Job,
    unindexed: &mut Unindexed,
    after_commit: &dyn Fn(&Connection),
) -> Option<Job> {
    let mut statements: Option<WriteStatements<'_>> = None;
    let mut next = Some(first);
    loop {
        let (waiting, failing) = if next.is_some() {
            (0, false)
        } else {
            unindexed.state()
        };
        let job = match next.take() {
            Some(job) => job,
            // While the tables refuse records they are retried after each delay, not in a loop.
            None if waiting >= INDEX_BATCH && !failing => {
                next =
                    index_taking_arrivals(conn, receiver, &mut statements, unindexed, after_commit)
                        .1;
                continue;
            }
            None if waiting == 0 => receiver.recv().ok()?,
            None => match receiver.recv_timeout(unindexed.delay) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    next = index_taking_arrivals(
                        conn,
                        receiver,
                        &mut statements,
                        unindexed,
                        after_commit,
                    )
                    .1;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = index_taking_arrivals(
                        conn,
                        receiver,
                        &mut statements,
                        unindexed,
                        after_commit,
                    );
                    return None;
                }
            },
        };
        match job {
            Job::Write(write) => {
                let mut arrivals = Arrivals::new(receiver);
                serve_write(
                    conn,
                    &mut statements,
                    write,
                    unindexed,
                    after_commit,
                    &mut arrivals,
                );
                next = arrivals.deferred;
            }
            // The loop's next turn indexes once enough records wait, or starts their delay.
            Job::Wake => {}
            Job::Indexed(job) => {
                let (indexed, deferred) =
                    index_taking_arrivals(conn, receiver, &mut statements, unindexed, after_commit);
                // As for `with_connection` closures: a panicking read fails its caller, not the store.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(conn, indexed)))
                    .is_err()
                {
                    tracing::error!("a SQLite store read panicked; the store continues");
                }
                next = deferred;
            }
            other => {
                // Nothing is taken from the channel meanwhile: `other` runs next, before whatever follows it.
                let _ = index(conn, &mut statements, unindexed, after_commit, None);
                return Some(other);
            }
        }
    }
}

/// [`index`], taking the record batches that arrive meanwhile ([`Arrivals`]); also the first other job that
/// arrived, which runs next.
fn index_taking_arrivals<'c>(
    conn: &'c Connection,
    receiver: &mpsc::Receiver<Job>,
    statements: &mut Option<WriteStatements<'c>>,
    unindexed: &mut Unindexed,
    after_commit: &dyn Fn(&Connection),
) -> (Result<(), StoreError>, Option<Job>) {
    let mut arrivals = Arrivals::new(receiver);
    let indexed = index(
        conn,
        statements,
        unindexed,
        after_commit,
        Some(&mut arrivals),
    );
    (indexed, arrivals.deferred)
}

/// Make a batch the writer task could not append durable: append it to the journal (indexed later), or commit
/// it when there is no journal.
fn serve_write<'c>(
    conn: &'c Connection,
    statements: &mut Option<WriteStatements<'c>>,
    write: WriteJob,
    unindexed: &mut Unindexed,
    after_commit: &dyn Fn(&Connection),
    arrivals: &mut Arrivals<'_>,
) {
    let WriteJob { mut rows, done } = write;
    if !unindexed.journaled() {
        let _ = done.send(commit(
            conn,
            statements,
            &mut rows,
            after_commit,
            &mut |_| {},
        ));
        return;
    }
    // While the tables refuse records, at most a batch of them waits in the journal: past that the layer sees
    // the tables' error (fail-closed), instead of the journal growing without bound.
    if unindexed.unindexed() >= INDEX_BATCH {
        if let Err(e) = index(
            conn,
            statements,
            unindexed,
            after_commit,
            Some(&mut *arrivals),
        ) {
            let _ = done.send(Err(e));
            return;
        }
    }
    match unindexed.appender.append_to_active(&rows) {
        Ok(()) => {
            let _ = done.send(Ok(()));
            unindexed.rows.extend(rows);
            if unindexed.unindexed() >= INDEX_BATCH {
                let _ = index(
                    conn,
                    statements,
                    unindexed,
                    after_commit,
                    Some(&mut *arrivals),
                );
            }
        }
        Err(error) => {
            // The batch is not acknowledged yet: commit it to the tables with the records waiting before it (which
            // also empties the journal, torn entry included).
            tracing::error!(%error, "cannot append to the record journal; committing the batch to the tables");
            unindexed.take();
            let waiting = unindexed.rows.len();
            unindexed.rows.extend(rows);
            let outcome = index(conn, statements, unindexed, after_commit, None);
            if outcome.is_err() {
                unindexed.rows.truncate(waiting);
            }
            let _ = done.send(outcome);
        }
    }
}

/// Write the journal's waiting records into the tables in one transaction, with the batches `arrivals` takes
/// meanwhile (none: the transaction's end must come before any job still in the channel), then empty the
/// journal's files that hold only records now in the tables.
fn index<'c>(
    conn: &'c Connection,
    statements: &mut Option<WriteStatements<'c>>,
    unindexed: &mut Unindexed,
    after_commit: &dyn Fn(&Connection),
    mut arrivals: Option<&mut Arrivals<'_>>,
) -> Result<(), StoreError> {
    unindexed.take();
    if unindexed.rows.is_empty() {
        return Ok(());
    }
    let appender = unindexed.appender.clone();
    let written = commit(
        conn,
        statements,
        &mut unindexed.rows,
        after_commit,
        &mut |rows| {
            if let Some(arrivals) = arrivals.as_mut() {
                arrivals.take(&appender, rows);
            }
        },
    );
    if let Err(error) = written {
        // Retried at every trigger (after each delay while nothing else comes): logged when it starts failing.
        if !unindexed.set_failing(true) {
            tracing::error!(
                %error,
                records = unindexed.rows.len(),
                "the tables refuse the journal's records; they stay in the journal and are retried"
            );
        }
        return Err(error);
    }
    if unindexed.set_failing(false) {
        tracing::info!(
            records = unindexed.rows.len(),
            "the journal's records are in the tables again"
        );
    }
    unindexed.committed();
    Ok(())
}

/// Write `rows` into the tables in one transaction, with the statements kept prepared; `between` as for
/// [`WriteStatements::write`].
fn commit<'c>(
    conn: &'c Connection,
    statements: &mut Option<WriteStatements<'c>>,
    rows: &mut Rows,
    after_commit: &dyn Fn(&Connection),
    between: &mut Between<'_>,
) -> Result<(), StoreError> {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if statements.is_none() {
            *statements = Some(WriteStatements::prepare(conn)?);
        }
        statements
            .as_mut()
            .expect("prepared above")
            .write(rows, between)
    }));
    match outcome {
        Ok(result) => {
            after_commit(conn);
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
            let rows = records
                .iter()
                .zip(encoded)
                .map(|(record, encoded)| Ok((Row::from_record(record, &encoded)?, encoded)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            let rows = match self.appender.append(rows) {
                Appended::Durable { wake } => {
                    if wake {
                        // Only fails once the thread has stopped, which reads and flushes report.
                        let _ = self.jobs.send(Job::Wake);
                    }
                    self.encoder.committed(pending);
                    return Ok(());
                }
                Appended::ToThread(rows) => rows,
            };
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

    fn flush(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(
            self.run_indexed("cannot write the journal's records into the tables", |_| {
                Ok(())
            }),
        )
    }

    fn call<'a>(
        &'a self,
        call_id: &'a CallId,
    ) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        let id = call_id.as_str().to_owned();
        Box::pin(async move {
            let raw = self
                .run_indexed("cannot read a call record", move |conn| {
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

    fn conversation_calls<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>> {
        let id = conversation_id.as_str().to_owned();
        Box::pin(async move {
            let raws = self
                .run_indexed("cannot read a conversation", move |conn| {
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
                .run_indexed("cannot read a conversation", move |conn| {
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
                .run_indexed("cannot sum spend", move |conn| {
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
                    conn.prepare_cached(&call_summaries_sql(["?1", "?2", "?3", "?4"]))?
                        .query_map(params![caller, since, until, limit], |row| {
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
                            })
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            rows.into_iter()
                .rev()
                .map(SummaryColumns::into_summary)
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema::{EMPTY_MESSAGES, EMPTY_OPTIONS, EMPTY_TEXT};
    use super::UPSERT;

    #[test]
    fn upsert_writes_the_empty_text_history_and_options_markers() {
        assert!(UPSERT.contains(&format!(
            "?15, '{EMPTY_TEXT}', '{EMPTY_MESSAGES}', '{EMPTY_OPTIONS}', ?16"
        )));
    }
}
