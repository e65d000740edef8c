//! Checkpoints of the write-ahead log on a thread and connection of their own, never on a record's commit.
//!
//! SQLite's default checkpoints at the commit that takes the log past `wal_autocheckpoint` pages: that commit
//! copies the log into the database file and syncs both, so one record batch in every few hundred waits for two
//! `fsync`s (4–9 ms each here) and a fail-closed call waits with it. The store's connection runs with
//! `wal_autocheckpoint = 0` instead, and this thread checkpoints on a schedule: a `PASSIVE` checkpoint copies what
//! the log holds without taking the write lock, so commits go on while it runs and syncs. Once a checkpoint has
//! copied the whole log, the next commit starts writing the log from its beginning again and `journal_size_limit`
//! truncates the file, so the log's size is what is written between two checkpoints. Only when a passive
//! checkpoint cannot keep up (a reader holds an old snapshot for long) and the log passes [`WAL_BOUND_PAGES`] does
//! the thread run a `TRUNCATE` checkpoint, which waits for the writer, as the bound on the file's size.
//!
//! SQLite has no checkpoint thread of its own to stand on: `sqlite3_wal_autocheckpoint` only moves the work to
//! the committing connection, which is the cost removed here.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::store::StoreError;

/// Past this many pages in the log (64 MiB at SQLite's default 4 KiB page), a checkpoint waits for the writer
/// and truncates the log, if passive ones could not copy it all.
pub(crate) const WAL_BOUND_PAGES: i64 = 16 * 1024;

/// The size the log file is truncated to when a checkpoint has copied all of it (`journal_size_limit`).
pub(super) const WAL_KEPT_BYTES: i64 = 4 * 1024 * 1024;

/// What one checkpoint found and did, in frames (one frame is one page written by a commit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Frames in the write-ahead log when the checkpoint ran.
    pub log_frames: i64,
    /// Frames of the log now copied into the database file (all of them unless a reader held an older snapshot).
    pub checkpointed_frames: i64,
}

/// A request for a checkpoint now, and where its outcome goes.
type Request = oneshot::Sender<Result<Checkpoint, StoreError>>;

/// The handle the store keeps: dropping the last clone ends the thread after a final checkpoint.
#[derive(Clone, Debug)]
pub(super) struct Checkpointer {
    requests: mpsc::Sender<Request>,
}

impl Checkpointer {
    /// Open a connection of its own to `path` (already in WAL mode and migrated) and start checkpointing every
    /// `interval`.
    pub(super) fn start(
        path: &Path,
        busy_timeout: Duration,
        interval: Duration,
    ) -> Result<Checkpointer, StoreError> {
        let context = |what: &'static str| {
            let path = path.display().to_string();
            move |e: rusqlite::Error| StoreError::with_source(format!("SQLite {path}: {what}"), e)
        };
        let conn =
            Connection::open(path).map_err(context("cannot open the checkpoint connection"))?;
        conn.busy_timeout(busy_timeout)
            .map_err(context("cannot set the busy timeout"))?;
        conn.execute_batch(&format!(
            "PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = {WAL_KEPT_BYTES};"
        ))
        .map_err(context("cannot set the checkpoint connection's pragmas"))?;
        let (requests, receiver) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("tower-chat-sqlite-checkpoint".into())
            .spawn(move || run(&conn, &receiver, interval))
            .map_err(|e| StoreError::with_source("cannot start the SQLite checkpoint thread", e))?;
        Ok(Checkpointer { requests })
    }

    /// Checkpoint now, on the checkpoint thread.
    pub(super) async fn checkpoint(&self) -> Result<Checkpoint, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(tx)
            .map_err(|_| StoreError::new("the SQLite checkpoint thread has stopped"))?;
        rx.await
            .map_err(|_| StoreError::new("the SQLite checkpoint thread stopped mid-checkpoint"))?
    }
}

fn run(conn: &Connection, requests: &mpsc::Receiver<Request>, interval: Duration) {
    loop {
        match requests.recv_timeout(interval) {
            Ok(reply) => {
                let _ = reply.send(checkpoint(conn));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(error) = checkpoint(conn) {
                    tracing::warn!(
                        "SQLite checkpoint failed, retried at the next interval: {error}"
                    );
                }
            }
            // The store is gone; the writer's connection checkpoints what is left when it closes.
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// A passive checkpoint, then a truncating one if the log is past its bound and not all copied.
fn checkpoint(conn: &Connection) -> Result<Checkpoint, StoreError> {
    let passive = run_checkpoint(conn, "PASSIVE")?;
    if passive.log_frames > WAL_BOUND_PAGES && passive.checkpointed_frames < passive.log_frames {
        tracing::warn!(
            log_frames = passive.log_frames,
            "the SQLite write-ahead log is past its bound; this checkpoint waits for the writer"
        );
        return run_checkpoint(conn, "TRUNCATE");
    }
    Ok(passive)
}

fn run_checkpoint(conn: &Connection, mode: &str) -> Result<Checkpoint, StoreError> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        Ok(Checkpoint {
            log_frames: row.get(1)?,
            checkpointed_frames: row.get(2)?,
        })
    })
    .map_err(|e| StoreError::with_source(format!("SQLite: a {mode} checkpoint failed"), e))
}
