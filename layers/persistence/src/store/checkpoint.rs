//! Write-ahead log checkpoints off the write path.
//!
//! By default SQLite checkpoints inside the commit that makes the log reach 1000 pages: that commit then copies
//! the log into the database file and syncs both, several milliseconds on a real disk, and with fail-closed
//! persistence the call waiting for that commit (and every call queued behind it) waits too. Measured under
//! `wrk` at one connection: p99 7.9 ms on disk against 1.6 ms with the database on tmpfs (BENCHMARKS.md, issue
//! 11). So the writer connection's automatic checkpoints are replaced by a log hook that only counts, and a
//! thread with its own connection runs the checkpoint (`PASSIVE`: it never blocks the writer or readers) when
//! the log has reached the same 1000 pages. Durability is unchanged: a commit is in the log before it returns,
//! as before; only who copies the log into the database file, and when it is synced, moved.

use std::cell::Cell;
use std::os::raw::c_int;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;

/// Pages of log after which a checkpoint is asked for: SQLite's own automatic checkpoint threshold.
pub(super) const CHECKPOINT_PAGES: c_int = 1000;

/// Pages of log after which the writer checkpoints itself (see [`Checkpointer::after_commit`]).
pub(super) const WRITER_CHECKPOINT_PAGES: c_int = 8 * CHECKPOINT_PAGES;

thread_local! {
    /// Pages in the log after the last commit of the connection on this thread (set by [`count_pages`]).
    static LOG_PAGES: Cell<c_int> = const { Cell::new(0) };
}

/// The writer connection's log hook: SQLite calls it on the committing thread after each commit with the
/// number of pages in the log. It replaces (turns off) the automatic checkpoint.
fn count_pages(_wal: &rusqlite::hooks::Wal, pages: c_int) -> rusqlite::Result<()> {
    LOG_PAGES.with(|p| p.set(pages));
    Ok(())
}

/// Hands checkpoints of one database to a thread of their own. Owned by the writer thread; the checkpoint
/// thread ends when it is dropped.
pub(super) struct Checkpointer {
    wake: mpsc::SyncSender<()>,
}

impl Checkpointer {
    /// Turn off `writer`'s automatic checkpoints and start the thread that does them instead, on its own
    /// connection to `path`.
    pub(super) fn start(
        writer: &Connection,
        path: PathBuf,
        busy_timeout: Duration,
    ) -> std::io::Result<Checkpointer> {
        // One pending request is enough: a checkpoint copies whatever the log holds when it runs.
        let (wake, requests) = mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("tower-chat-sqlite-checkpoint".into())
            .spawn(move || run(path, busy_timeout, requests))?;
        writer.wal_hook(Some(count_pages));
        Ok(Checkpointer { wake })
    }

    /// After the writer thread committed on `writer`: ask for a checkpoint once the log has reached
    /// [`CHECKPOINT_PAGES`] (at most one request waits; the writer does not wait for it). A checkpoint that runs
    /// beside the writer can only start the log over once it has copied every page while the writer is between
    /// transactions; should a writer that never pauses let the log reach [`WRITER_CHECKPOINT_PAGES`], the writer
    /// checkpoints itself, as SQLite would have, so the log stays bounded.
    pub(super) fn after_commit(&self, writer: &Connection) {
        let pages = LOG_PAGES.with(|p| p.replace(0));
        if pages >= WRITER_CHECKPOINT_PAGES {
            if let Err(error) = checkpoint(writer) {
                tracing::warn!(%error, pages, "SQLite checkpoint on the writer failed");
            }
        } else if pages >= CHECKPOINT_PAGES {
            let _ = self.wake.try_send(());
        }
    }
}

fn run(path: PathBuf, busy_timeout: Duration, requests: mpsc::Receiver<()>) {
    let conn = match Connection::open(&path).and_then(|c| {
        c.busy_timeout(busy_timeout)?;
        Ok(c)
    }) {
        Ok(conn) => conn,
        Err(error) => {
            tracing::error!(%error, path = %path.display(), "cannot open the SQLite checkpoint connection; the write-ahead log will only be checkpointed when the store closes");
            return;
        }
    };
    while requests.recv().is_ok() {
        match checkpoint(&conn) {
            Ok((log, copied)) => tracing::trace!(log, copied, "SQLite checkpoint"),
            Err(error) => tracing::warn!(%error, "SQLite checkpoint failed; the next one retries"),
        }
    }
}

/// A `PASSIVE` checkpoint: copies what it can without waiting for anyone; (pages in the log, pages copied).
fn checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get(1)?, row.get(2)?))
    })
}
