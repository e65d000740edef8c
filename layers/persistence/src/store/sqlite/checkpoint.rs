//! Checkpoints of the write-ahead log on a thread and connection of their own, never inside a record's commit.
//!
//! SQLite's default checkpoints at the commit that takes the log past `wal_autocheckpoint` pages: that commit
//! copies the log into the database file and syncs both, so one record batch in every few hundred waits for two
//! `fsync`s (4–9 ms each here) and a fail-closed call waits with it. The store's connection runs with
//! `wal_autocheckpoint = 0` instead, and this thread checkpoints on a schedule: a `PASSIVE` checkpoint copies what
//! the log holds without taking the write lock, so commits go on while it runs and syncs.
//!
//! The log starts over from its beginning only at a commit that finds all of it copied and no reader in it.
//! Under writes that never pause, a passive checkpoint never gets there: commits add frames while it syncs. A
//! checkpoint that waits for the writer (`RESTART`, `TRUNCATE`) would end that, but the writer then waits in
//! SQLite's busy handler, which sleeps 1, 2, 5, 10 ms… between tries: the calls behind it waited +18 ms and more.
//! So the writer finishes the checkpoint itself, between its own transactions, with a `RESTART` that waits for
//! no one (busy timeout zero): once the log is past [`WAL_RESTART_PAGES`] and not all copied, at its idle
//! moments (no batch waiting); once past [`WAL_BOUND_PAGES`], after its transactions even when batches wait.
//! If the checkpoint thread is copying or a reader is in the log, it gives up at once and tries again at the
//! next chance; past twice the bound it waits. While the log is past a quarter of [`WAL_RESTART_PAGES`] the
//! thread checkpoints every [`BUSY_INTERVAL`], so the writer's remainder is what ~50 ms committed.
//!
//! The thresholds are large because each start over costs the writer that remainder's copy and two `fsync`s
//! (calls wait meanwhile), and at one record a commit the log grows by ~80 MB/s on the load bench: at 16 MiB
//! the stops came several times a second. The `PASSIVE` catch-up that came before left the start over
//! to chance, and under a steady stream the log grew to 651 MB in 8 s; the commit that finally started it over
//! then cut the file back to 16 MiB, and that truncation held the writer ~150 ms (page-cache pages dropped,
//! synchronous discards on an ext4 mounted with `discard`; BENCHMARKS.md, "Gateway"). So the file is truncated
//! only past the bound ([`WAL_KEPT_BYTES`]): a log that starts over in time rewrites its file in place.
//!
//! SQLite has no checkpoint thread of its own to stand on: `sqlite3_wal_autocheckpoint` only moves the work to
//! the committing connection, which is the cost removed here.

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::store::StoreError;

/// Past this many pages in the log (64 MiB at SQLite's default 4 KiB page), if passive checkpoints could not
/// copy it all, the writer finishes the checkpoint at its idle moments.
pub(crate) const WAL_RESTART_PAGES: i64 = 16 * 1024;

/// Past this many pages in the log (256 MiB), if passive checkpoints could not copy it all, the writer finishes
/// the checkpoint after its transactions, idle or not (and past twice this, waits for readers to do so).
pub(crate) const WAL_BOUND_PAGES: i64 = 64 * 1024;

/// The checkpoint interval while the log is long.
const BUSY_INTERVAL: Duration = Duration::from_millis(50);

/// The size the log file is truncated to when the log starts over (`journal_size_limit`): the bound's, so a log
/// that starts over in time is rewritten in place and no commit waits for a truncation.
pub(super) const WAL_KEPT_BYTES: i64 = WAL_BOUND_PAGES * 4096;

/// What one checkpoint found and did, in frames (one frame is one page written by a commit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Frames in the write-ahead log when the checkpoint ran.
    pub log_frames: i64,
    /// Frames of the log now copied into the database file (all of them unless a reader held an older snapshot).
    pub checkpointed_frames: i64,
}

/// When the writer should finish a checkpoint the checkpoint thread could not: the checkpoint thread raises it,
/// the writer acts on it and lowers it.
#[derive(Debug, Default)]
pub(super) struct CatchUp(AtomicU8);

/// [`CatchUp`]'s values, in increasing urgency.
const NOT_NEEDED: u8 = 0;
const WHEN_IDLE: u8 = 1;
const NOW: u8 = 2;
const NOW_WAITING: u8 = 3;

impl CatchUp {
    /// What the checkpoint thread asks after a passive checkpoint that found `log_frames` and copied
    /// `checkpointed_frames`.
    fn ask(&self, checkpoint: Checkpoint) {
        let urgency = if checkpoint.checkpointed_frames >= checkpoint.log_frames {
            NOT_NEEDED
        } else if checkpoint.log_frames > 2 * WAL_BOUND_PAGES {
            NOW_WAITING
        } else if checkpoint.log_frames > WAL_BOUND_PAGES {
            NOW
        } else if checkpoint.log_frames > WAL_RESTART_PAGES {
            WHEN_IDLE
        } else {
            NOT_NEEDED
        };
        self.0.store(urgency, Ordering::Relaxed);
    }

    /// The writer, with no batch waiting: finish the checkpoint if one was asked for.
    pub(super) fn when_idle(&self, conn: &Connection) {
        if self.0.load(Ordering::Relaxed) >= WHEN_IDLE {
            self.finish(conn);
        }
    }

    /// The writer, after a transaction with batches waiting: finish the checkpoint only if the log is past its
    /// bound.
    pub(super) fn between_batches(&self, conn: &Connection) {
        if self.0.load(Ordering::Relaxed) >= NOW {
            self.finish(conn);
        }
    }

    /// Copy what the log holds on the writer's connection, outside any transaction, with a `RESTART` checkpoint:
    /// one that completes leaves the log copied and no reader in it, so the writer's next commit starts it over.
    /// It waits for no one: while the checkpoint thread copies, or a reader is in the log, it gives up at once
    /// and the writer tries again at its next idle moment rather than hold the calls queued behind it. Only past
    /// twice the bound does it wait (the connection's busy timeout), so the log stays bounded whatever reads it.
    fn finish(&self, conn: &Connection) {
        let asked = self.0.swap(NOT_NEEDED, Ordering::Relaxed);
        let completed = match asked {
            NOW_WAITING => restart(conn),
            _ => restart_without_waiting(conn),
        };
        match completed {
            Ok(true) => {}
            Ok(false) => {
                let _ = self.0.compare_exchange(
                    NOT_NEEDED,
                    asked,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Err(error) => tracing::warn!("the writer could not finish a checkpoint: {error}"),
        }
    }
}

/// A `RESTART` checkpoint: whether it completed (the busy handler may have given up on a reader).
fn restart(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| {
        row.get::<_, i64>(0)
    })
    .map(|blocked| blocked == 0)
}

/// [`restart`] with the connection's busy timeout at zero for its length.
fn restart_without_waiting(conn: &Connection) -> rusqlite::Result<bool> {
    let timeout: i64 = conn.query_row("PRAGMA busy_timeout", [], |row| row.get(0))?;
    conn.execute_batch("PRAGMA busy_timeout = 0")?;
    let completed = restart(conn);
    conn.execute_batch(&format!("PRAGMA busy_timeout = {timeout}"))?;
    completed
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
    /// `interval`, asking the writer through `catch_up` to finish what it cannot.
    pub(super) fn start(
        path: &Path,
        busy_timeout: Duration,
        interval: Duration,
        catch_up: Arc<CatchUp>,
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
            .spawn(move || run(&conn, &receiver, interval, &catch_up))
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

fn run(
    conn: &Connection,
    requests: &mpsc::Receiver<Request>,
    interval: Duration,
    catch_up: &CatchUp,
) {
    let checkpoint = || {
        let done = run_checkpoint(conn, "PASSIVE");
        if let Ok(done) = done {
            catch_up.ask(done);
        }
        done
    };
    let mut wait = interval;
    loop {
        match requests.recv_timeout(wait) {
            Ok(reply) => {
                let _ = reply.send(checkpoint());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => match checkpoint() {
                Ok(done) => wait = next_wait(done, interval),
                Err(error) => {
                    wait = interval;
                    tracing::warn!(
                        "SQLite checkpoint failed, retried at the next interval: {error}"
                    );
                }
            },
            // The store is gone; the writer's connection checkpoints what is left when it closes.
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// How long until the next scheduled checkpoint after `done`: sooner while the log is long.
fn next_wait(done: Checkpoint, interval: Duration) -> Duration {
    if done.log_frames > WAL_RESTART_PAGES / 4 {
        interval.min(BUSY_INTERVAL)
    } else {
        interval
    }
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

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::{run_checkpoint, CatchUp, Checkpoint, WAL_BOUND_PAGES, WAL_RESTART_PAGES};

    /// A writer's connection as the store opens it, and another (the checkpoint thread's, a reader's).
    fn connections(dir: &std::path::Path) -> (Connection, Connection) {
        let path = dir.join("c.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0; \
                 CREATE TABLE t (x BLOB);",
            )
            .unwrap();
        (writer, Connection::open(&path).unwrap())
    }

    /// A passive checkpoint that could not copy a log past the restart size asks the idle writer to finish it;
    /// the writer's next commit then starts the log over, with no checkpoint ever waiting for the writer.
    #[test]
    fn the_idle_writer_finishes_a_checkpoint_so_the_log_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, other) = connections(dir.path());
        // A reader's snapshot from before the big write keeps a passive checkpoint from copying it.
        other
            .execute_batch("BEGIN; SELECT COUNT(*) FROM t;")
            .unwrap();
        let bytes = (WAL_RESTART_PAGES + 64) * 4096;
        writer
            .execute("INSERT INTO t VALUES (zeroblob(?1))", [bytes])
            .unwrap();
        let checkpointer = Connection::open(dir.path().join("c.db")).unwrap();
        let passive = run_checkpoint(&checkpointer, "PASSIVE").unwrap();
        assert!(passive.log_frames > WAL_RESTART_PAGES, "{passive:?}");
        assert!(
            passive.checkpointed_frames < passive.log_frames,
            "{passive:?}"
        );
        let catch_up = CatchUp::default();
        catch_up.ask(passive);
        other.execute_batch("COMMIT").unwrap();

        // The log's header counts its starts over (checkpoint sequence, bytes 12..16): read without
        // checkpointing, which would do the writer's part.
        let starts = || {
            let mut header = [0u8; 16];
            let wal = dir.path().join("c.db-wal");
            std::io::Read::read_exact(&mut std::fs::File::open(wal).unwrap(), &mut header).unwrap();
            u32::from_be_bytes(header[12..16].try_into().unwrap())
        };
        let before = starts();
        // Batches waiting: not past the bound, so the writer goes on, and the log goes on growing.
        catch_up.between_batches(&writer);
        writer
            .execute("INSERT INTO t VALUES (zeroblob(10))", [])
            .unwrap();
        assert_eq!(starts(), before);
        // Idle: it finishes the checkpoint, and its next commit starts the log over.
        catch_up.when_idle(&writer);
        writer
            .execute("INSERT INTO t VALUES (zeroblob(10))", [])
            .unwrap();
        assert_eq!(starts(), before + 1, "the log did not start over");
    }

    /// The writer's catch-up waits for no reader: with one in the log it gives up at once (a busy timeout of a
    /// minute would otherwise hold it), stays asked, and completes at its next chance once the reader is gone.
    #[test]
    fn the_writers_catch_up_waits_for_no_reader() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, other) = connections(dir.path());
        writer
            .busy_timeout(std::time::Duration::from_secs(60))
            .unwrap();
        writer
            .execute("INSERT INTO t VALUES (zeroblob(65536))", [])
            .unwrap();
        // A reader in the log: its snapshot includes the write above.
        other
            .execute_batch("BEGIN; SELECT COUNT(*) FROM t;")
            .unwrap();
        let catch_up = std::sync::Arc::new(CatchUp::default());
        catch_up.ask(Checkpoint {
            log_frames: WAL_RESTART_PAGES + 1,
            checkpointed_frames: 0,
        });
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let (shared, path) = (catch_up.clone(), dir.path().join("c.db"));
        let attempt = std::thread::spawn(move || {
            let writer = Connection::open(path).unwrap();
            writer
                .busy_timeout(std::time::Duration::from_secs(60))
                .unwrap();
            shared.when_idle(&writer);
            let timeout: i64 = writer
                .query_row("PRAGMA busy_timeout", [], |row| row.get(0))
                .unwrap();
            done_tx.send(timeout).unwrap();
        });
        let timeout = done_rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the catch-up waited for the reader");
        attempt.join().unwrap();
        assert_eq!(timeout, 60_000, "the busy timeout was not restored");
        assert_eq!(
            catch_up.0.load(std::sync::atomic::Ordering::Relaxed),
            super::WHEN_IDLE,
            "a catch-up that could not complete is no longer asked"
        );
        other.execute_batch("COMMIT").unwrap();
        catch_up.when_idle(&writer);
        assert_eq!(
            catch_up.0.load(std::sync::atomic::Ordering::Relaxed),
            super::NOT_NEEDED
        );
    }

    /// Past the bound the writer finishes the checkpoint between batches too; below the restart size, or with
    /// everything copied, it is not asked to.
    #[test]
    fn the_writer_is_asked_between_batches_only_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _other) = connections(dir.path());
        let catch_up = CatchUp::default();
        let asked = |log_frames, checkpointed_frames| {
            catch_up.ask(Checkpoint {
                log_frames,
                checkpointed_frames,
            });
            catch_up.0.load(std::sync::atomic::Ordering::Relaxed)
        };
        assert_eq!(asked(WAL_RESTART_PAGES, 0), super::NOT_NEEDED);
        assert_eq!(
            asked(WAL_BOUND_PAGES * 2, WAL_BOUND_PAGES * 2),
            super::NOT_NEEDED
        );
        assert_eq!(asked(WAL_RESTART_PAGES + 1, 0), super::WHEN_IDLE);
        assert_eq!(asked(WAL_BOUND_PAGES + 1, WAL_BOUND_PAGES), super::NOW);
        assert_eq!(
            asked(2 * WAL_BOUND_PAGES + 1, WAL_BOUND_PAGES),
            super::NOW_WAITING
        );
        catch_up.between_batches(&writer);
        assert_eq!(
            catch_up.0.load(std::sync::atomic::Ordering::Relaxed),
            super::NOT_NEEDED,
            "the writer did not act on a log past its bound"
        );
    }
}
