//! Write-ahead log checkpoints off the write path.
//!
//! By default SQLite checkpoints inside the commit that makes the log reach 1000 pages: that commit then copies
//! the log into the database file and syncs both, several milliseconds on a real disk, and with fail-closed
//! persistence the call waiting for that commit (and every call queued behind it) waits too. Measured under
//! `wrk` at one connection (`gateway/benches/load.rs`): p99 7.9 ms on disk against 1.6 ms with the database on
//! tmpfs. So the writer connection's automatic checkpoints are replaced by a log hook that only counts, and a
//! thread with its own connection runs the checkpoint (`PASSIVE`: it never blocks the writer or readers) when
//! the log has reached the same 1000 pages, and again every further 25 pages; at 2000 the writer checkpoints
//! itself, which lets its next transaction start the log over (see [`Checkpointer::after_commit`] for why both
//! are needed and why not more often). Durability is unchanged: a commit is in the log before it returns,
//! as before; only who copies the log into the database file, and when it is synced, moved.

use std::cell::Cell;
use std::os::raw::c_int;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;

/// Pages of log after which a checkpoint is asked for: SQLite's own automatic checkpoint threshold.
pub(super) const CHECKPOINT_PAGES: c_int = 1000;

/// Further pages of log after which another checkpoint is asked for while the log has not started over (about
/// five records). Not after every commit: each checkpoint sorts the index of the log's whole current segment
/// (`walMerge`, up to 4096 frames, whatever is left to copy), ~180 k instructions with ~3700 pages in the log,
/// more than the commit that asked for it. Not many more pages either: each checkpoint syncs what it copied,
/// and on a real disk steps of 125 pages and more showed in the tail latency of the calls committing meanwhile
/// (`gateway/benches/load.rs`, `wrk`).
pub(super) const CHECKPOINT_STEP_PAGES: c_int = 25;

/// Pages of log after which the writer checkpoints itself, between two of its transactions, so that the next
/// one starts the log over (see [`Checkpointer::after_commit`]).
pub(super) const WRITER_CHECKPOINT_PAGES: c_int = 2 * CHECKPOINT_PAGES;

/// What the writer does after a commit, given the pages in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterCommit {
    Nothing,
    /// Ask the checkpoint thread for a checkpoint.
    Ask,
    /// Checkpoint on the writer's own connection.
    CheckpointHere,
}

/// When to checkpoint, from the log's size after each commit (see [`Checkpointer::after_commit`]).
#[derive(Debug, Default)]
struct Policy {
    /// Pages in the log when a checkpoint was last asked for (0: none since the log started over).
    asked_at: c_int,
}

impl Policy {
    fn after_commit(&mut self, pages: c_int) -> AfterCommit {
        if pages >= WRITER_CHECKPOINT_PAGES {
            self.asked_at = 0;
            return AfterCommit::CheckpointHere;
        }
        if pages < self.asked_at {
            self.asked_at = 0; // the log started over
        }
        if pages >= CHECKPOINT_PAGES
            && (self.asked_at == 0 || pages - self.asked_at >= CHECKPOINT_STEP_PAGES)
        {
            // Also when a request is already waiting: the checkpoint it starts copies what the log holds then.
            self.asked_at = pages;
            return AfterCommit::Ask;
        }
        AfterCommit::Nothing
    }
}

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
    policy: Cell<Policy>,
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
        Ok(Checkpointer {
            wake,
            policy: Cell::default(),
        })
    }

    /// After the writer thread committed on `writer`: ask for a checkpoint once the log has reached
    /// [`CHECKPOINT_PAGES`], and again after each further [`CHECKPOINT_STEP_PAGES`] (at most one request waits;
    /// the writer does not wait for it). A checkpoint that runs beside a busy writer seldom lets the log start
    /// over (it must have copied every page while the writer is between transactions), so once the log reaches
    /// [`WRITER_CHECKPOINT_PAGES`] the writer checkpoints itself: the checkpoint thread has copied all but the
    /// last step's pages by then, and the writer's next transaction starts the log over. If the checkpoint
    /// thread is busy at that moment the writer's checkpoint does nothing and the next commit tries again.
    pub(super) fn after_commit(&self, writer: &Connection) {
        let pages = LOG_PAGES.with(|p| p.replace(0));
        if pages == 0 {
            return; // nothing committed since the last call
        }
        let mut policy = self.policy.take();
        let action = policy.after_commit(pages);
        self.policy.set(policy);
        match action {
            AfterCommit::Nothing => {}
            AfterCommit::Ask => {
                let _ = self.wake.try_send(());
            }
            AfterCommit::CheckpointHere => {
                if let Err(error) = checkpoint(writer) {
                    tracing::warn!(%error, pages, "SQLite checkpoint on the writer failed");
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that never pauses, five pages a commit, the log starting over after the writer's checkpoint:
    /// the checkpoint thread is asked once per step from the threshold on, the writer checkpoints at its mark.
    #[test]
    fn checkpoints_are_asked_for_once_a_step_and_the_writer_restarts_the_log() {
        let mut policy = Policy::default();
        let (mut asked, mut here) = (Vec::new(), Vec::new());
        let mut pages = 0;
        for _ in 0..1200 {
            pages += 5;
            match policy.after_commit(pages) {
                AfterCommit::Nothing => {}
                AfterCommit::Ask => asked.push(pages),
                AfterCommit::CheckpointHere => {
                    here.push(pages);
                    pages = 0;
                }
            }
        }
        let cycle: Vec<c_int> = (1000..2000).step_by(25).collect();
        assert_eq!(here, [2000, 2000, 2000]);
        assert_eq!(asked, [&cycle[..], &cycle, &cycle].concat());
    }
}
