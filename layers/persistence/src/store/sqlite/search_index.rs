//! The call log's full-text index (FTS5), kept off the calls' path: a file of its own beside the database,
//! written by a thread and connection of their own, in batches, and only by a store opened with
//! [`super::SqliteStoreBuilder::search_index`].
//!
//! Tokenising a call's text and inserting it into FTS5 costs more than the rest of the call's record (~32 k
//! instructions a call, BENCHMARKS.md "Persistence"). On the record writer it delayed every commit queued behind
//! it, and a fail-closed call waits for its commit. So the writer only hands the text of the calls it committed
//! to this thread (after the commit, before acknowledging it), which indexes them in batches: FTS5 writes a new
//! segment at every statement that touched it (~120 k instructions), so a statement per call would cost more than
//! the indexing itself. A batch goes in once [`BATCH`] calls wait or the oldest has waited [`DELAY`].
//! The index lives in `<database>-search`, not in the database: SQLite has one write lock per file, and in the
//! database the indexer's transactions would hold up the writer's. A search asks this thread to flush first, so it
//! sees every call acknowledged before it.
//!
//! The index is derived data: when the file is new (first open with the index on, a deleted file), the thread
//! first indexes every call already in the database. A crash loses the entries of the calls still waiting here
//! (the calls stay listed and findable by id); deleting the file rebuilds them.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

use crate::store::StoreError;

/// Committed calls' text: (call id, text), in commit order.
pub(super) type Texts = Vec<(String, String)>;

/// What the index thread is asked to do.
enum Job {
    /// Index these committed calls.
    Index(Texts),
    /// Answer once every call handed over before this is in the index.
    Flush(oneshot::Sender<()>),
}

/// The handle the store and its writer keep: dropping the last clone ends the thread once it has indexed what
/// it was given.
#[derive(Clone, Debug)]
pub(super) struct SearchIndex {
    jobs: mpsc::Sender<Job>,
}

/// The index's jobs queued before its thread starts (the writer hands over what it commits while the store
/// opens), and the thread's end of them.
pub(super) struct Pending {
    receiver: mpsc::Receiver<Job>,
}

/// The index file of the database at `database`.
pub(super) fn index_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push("-search");
    PathBuf::from(name)
}

/// The index table. Contentless (the text is not stored twice; `contentless_delete` lets a final record replace
/// its in-flight entry), keyed by `chat_calls`' rowid. Diacritics are kept so that a search matches what
/// PostgreSQL's `simple` configuration matches.
const CREATE: &str = "CREATE VIRTUAL TABLE search.chat_calls_search USING fts5(body, content='', \
    contentless_delete=1, tokenize='unicode61 remove_diacritics 0')";

/// Indexes the text of many calls, given as a JSON array of `[call id, text]`, in one statement: FTS5 writes
/// its pending entries out (a new segment, merging older ones) at every statement that touched it, ~120 k
/// instructions, so one statement a call would pay that per call.
const INDEX_TEXTS: &str = "INSERT OR REPLACE INTO search.chat_calls_search (rowid, body) \
    SELECT main.chat_calls.rowid, pending.value ->> 1 FROM json_each(?1) AS pending \
    JOIN main.chat_calls ON main.chat_calls.call_id = pending.value ->> 0";

/// How many committed calls wait for the index at most (and how many a rebuild indexes per statement).
pub(super) const BATCH: usize = 256;

/// How long a committed call waits for the index at most (unless a search asks for it sooner).
const DELAY: Duration = Duration::from_millis(250);

impl SearchIndex {
    /// A handle to give the writer now, and the queue its thread serves once [`SearchIndex::start`]ed.
    pub(super) fn channel() -> (SearchIndex, Pending) {
        let (jobs, receiver) = mpsc::channel();
        (SearchIndex { jobs }, Pending { receiver })
    }

    /// Hand the text of calls just committed to the index. Never fails the write: without the thread the calls
    /// stay listed and findable by id, only not by their words.
    pub(super) fn index(&self, texts: Texts) {
        if !texts.is_empty() && self.jobs.send(Job::Index(texts)).is_err() {
            tracing::warn!(
                "the SQLite search index thread has stopped; recorded calls are not indexed"
            );
        }
    }

    /// Wait until every call handed over before now is in the index.
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Flush(tx))
            .map_err(|_| StoreError::new("the SQLite search index thread has stopped"))?;
        rx.await
            .map_err(|_| StoreError::new("the SQLite search index thread stopped mid-flush"))
    }

    /// Open the index file beside `database` (already migrated), creating it if needed, and start its thread,
    /// which first indexes every call of the database with `rebuild` when the file is new.
    pub(super) fn start(
        database: &Path,
        busy_timeout: Duration,
        pending: Pending,
        rebuild: fn(&Connection) -> rusqlite::Result<()>,
    ) -> Result<(), StoreError> {
        let context = |what: &'static str| {
            let path = database.display().to_string();
            move |e: rusqlite::Error| {
                StoreError::with_source(format!("SQLite {path} search index: {what}"), e)
            }
        };
        let conn = Connection::open(database).map_err(context("cannot open"))?;
        conn.busy_timeout(busy_timeout)
            .map_err(context("cannot set the busy timeout"))?;
        attach(&conn, database).map_err(context("cannot attach the index file"))?;
        // WAL for the index file too, so searches read it while the thread writes; its checkpoints run on this
        // thread (autocheckpoint), which no call waits for.
        // The log's size: the default autocheckpoint (1,000 pages) would leave up to 4 MiB beside a small index.
        conn.execute_batch(
            "PRAGMA search.journal_mode = WAL; PRAGMA search.synchronous = NORMAL; \
             PRAGMA wal_autocheckpoint = 64; PRAGMA search.journal_size_limit = 262144;",
        )
        .map_err(context("cannot set pragmas"))?;
        let exists = conn
            .query_row(
                "SELECT 1 FROM search.sqlite_master WHERE name = 'chat_calls_search'",
                [],
                |_| Ok(()),
            )
            .optional()
            .map_err(context("cannot read the index file's schema"))?
            .is_some();
        if !exists {
            conn.execute(CREATE, [])
                .map_err(context("cannot create the index"))?;
        }
        std::thread::Builder::new()
            .name("tower-chat-sqlite-search".into())
            .spawn(move || {
                if !exists {
                    if let Err(error) = rebuild(&conn) {
                        tracing::warn!(%error, "cannot index the calls already recorded");
                    }
                }
                serve(&conn, &pending.receiver);
            })
            .map_err(|e| {
                StoreError::with_source("cannot start the SQLite search index thread", e)
            })?;
        Ok(())
    }
}

/// Attach the index file of `database` to `conn` as `search`.
pub(super) fn attach(conn: &Connection, database: &Path) -> rusqlite::Result<()> {
    let path = index_path(database);
    conn.execute(
        "ATTACH DATABASE ?1 AS search",
        params![path.to_string_lossy()],
    )
    .map(|_| ())
}

/// Gather committed calls until [`BATCH`] wait, the oldest has waited [`DELAY`] or a search asks for them, then
/// index them in one statement and answer the searches; go on until every handle is gone.
fn serve(conn: &Connection, receiver: &mpsc::Receiver<Job>) {
    let Ok(mut statement) = conn.prepare(INDEX_TEXTS) else {
        tracing::error!("cannot prepare the SQLite search index's statement");
        return;
    };
    let mut texts = Texts::new();
    let mut flushes = Vec::new();
    // When the oldest call waiting arrived.
    let mut since: Option<Instant> = None;
    loop {
        let job = match since {
            None => receiver.recv().ok(),
            Some(since) => match receiver.recv_timeout(DELAY.saturating_sub(since.elapsed())) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    index(&mut statement, &mut texts);
                    return;
                }
            },
        };
        match job {
            Some(Job::Index(more)) => {
                since.get_or_insert_with(Instant::now);
                texts.extend(more);
                if texts.len() < BATCH {
                    continue;
                }
            }
            Some(Job::Flush(done)) => flushes.push(done),
            // Every handle gone, nothing waiting.
            None if since.is_none() => return,
            // The oldest call has waited long enough.
            None => {}
        }
        index(&mut statement, &mut texts);
        since = None;
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Index `texts` in one statement and empty it.
fn index(statement: &mut rusqlite::Statement<'_>, texts: &mut Texts) {
    if texts.is_empty() {
        return;
    }
    let pending = serde_json::to_string(&texts).expect("strings serialise");
    if let Err(error) = statement.execute(params![pending]) {
        // The calls stay listed and findable by id; only their words are not searchable.
        tracing::warn!(calls = texts.len(), %error, "cannot index the text of recorded calls");
    }
    texts.clear();
}

/// Index `texts` now, in one statement on `conn` (a connection with the index file attached).
pub(super) fn index_now(conn: &Connection, texts: &Texts) -> rusqlite::Result<()> {
    let pending = serde_json::to_string(texts).expect("strings serialise");
    conn.prepare_cached(INDEX_TEXTS)?
        .execute(params![pending])?;
    Ok(())
}
