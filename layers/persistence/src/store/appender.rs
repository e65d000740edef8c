//! The record journal as the store's writer task and its connection thread share it.
//!
//! A batch handed to [`super::Store::write_calls`] is appended to the journal right there, on the writer task
//! (one `write` of a few hundred bytes into the operating system's cache, like a log line), and acknowledged:
//! no trip to the connection thread and back. Without that trip the gateway's p50 at one connection fell by
//! ~0.06 ms and its throughput rose by half (`gateway/benches/load.rs`, `wrk`). The connection thread
//! takes the waiting records later and writes them into the tables (`sqlite.rs`, `index`).
//!
//! The journal has two files. The appends go to the active one; when the thread takes the waiting records it
//! swaps the two (if the other one is empty), so the file it empties after the commit holds only records that
//! commit wrote, while the calls ending meanwhile append to the other file.
//!
//! Batches go to the connection thread instead (which appends them itself, as before) when this store holds no
//! journal, when [`MAX_TRANSACTION`] records wait already (the thread indexes before it appends: backpressure),
//! when every append must wait for the disk ([`super::sqlite::Durability::PowerLoss`]: an `fsync` has no place
//! on a runtime worker), while the tables refuse records (the thread retries them first and refuses batches
//! past a limit), and when an append fails (the thread tries again and commits the batch to the tables if it
//! fails too).

use std::sync::{Mutex, MutexGuard};

use super::chain::Encoded;
use super::journal::{Journal, INDEX_BATCH, MAX_TRANSACTION};
use super::schema::Row;

/// Records in the order they were written, with what they add besides their `chat_calls` row.
pub(super) type Rows = Vec<(Row, Encoded)>;

/// The shared side of the journal.
#[derive(Default)]
pub(super) struct Appender {
    state: Mutex<Appending>,
}

/// What the writer task and the connection thread share, behind the [`Appender`]'s lock.
#[derive(Default)]
pub(super) struct Appending {
    /// The file appends go to; `None` when this store holds no journal or stopped using it.
    pub(super) active: Option<Journal>,
    /// Records appended and acknowledged that the connection thread has not taken yet.
    pub(super) waiting: Rows,
    /// The tables refused the last records the thread wrote: batches go to the thread.
    pub(super) failing: bool,
}

/// What [`Appender::append`] did with a batch.
pub(super) enum Appended {
    /// Durable and acknowledged; `wake`: the connection thread must hear of it (the first waiting records, so it
    /// starts its idle delay, or [`INDEX_BATCH`] of them, so it writes them into the tables).
    Durable { wake: bool },
    /// For the connection thread (see the module docs).
    ToThread(Rows),
}

impl Appender {
    pub(super) fn lock(&self) -> MutexGuard<'_, Appending> {
        // Nothing under the lock leaves the state half changed on a panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Append `rows` to the active file for the connection thread, which keeps track of them itself (they do
    /// not join `waiting`).
    pub(super) fn append_to_active(&self, rows: &Rows) -> std::io::Result<()> {
        match self.lock().active.as_mut() {
            Some(journal) => journal.append(rows),
            None => Err(std::io::Error::other(
                "the record journal is no longer in use",
            )),
        }
    }

    /// Append `rows` to the active file on the caller's thread, or hand them back for the connection thread.
    pub(super) fn append(&self, rows: Rows) -> Appended {
        let mut state = self.lock();
        if state.failing || state.waiting.len() >= MAX_TRANSACTION {
            return Appended::ToThread(rows);
        }
        let Some(journal) = state.active.as_mut() else {
            return Appended::ToThread(rows);
        };
        if journal.syncs() || journal.append(&rows).is_err() {
            return Appended::ToThread(rows);
        }
        let before = state.waiting.len();
        state.waiting.extend(rows);
        let after = state.waiting.len();
        Appended::Durable {
            wake: before == 0 || (before < INDEX_BATCH && after >= INDEX_BATCH),
        }
    }
}
