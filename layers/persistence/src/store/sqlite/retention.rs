//! [`SqliteStore::delete_expired`](crate::Store::delete_expired): retention in SQLite (see `store/retention.rs`
//! for what goes and why it is safe).
//!
//! Each batch is one job of the connection thread, in one `BEGIN IMMEDIATE` transaction: record writes queued
//! meanwhile run between two batches, so none waits longer than a batch. The search index lives in a file of its
//! own (`<database>-search`), keyed by `chat_calls`' rowid: the batch attaches it and deletes the deleted calls'
//! entries in the same transaction (a rowid SQLite hands out again must not find an old call's words). SQLite
//! commits the two files one after the other, so a crash between them can at worst leave an index entry removed
//! for a call that stays (it is then listed but not found by its words), never one of a deleted call.

use std::path::PathBuf;
use std::time::SystemTime;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{search_index, SqliteStore};
use crate::store::retention::{expired_sql, prune_blob_sql, prune_node_sql, Frontier};
use crate::store::{Purged, Retention, StoreError};

impl SqliteStore {
    /// Retention's batches, one connection-thread job each, until a batch finds fewer calls than it may delete.
    pub(super) async fn delete_expired_in_batches(
        &self,
        retention: &Retention,
        now: SystemTime,
    ) -> Result<Purged, StoreError> {
        let (cutoff, limit) = (retention.cutoff_micros(now), retention.limit());
        let search = self.search.is_some().then(|| self.path.to_path_buf());
        let mut purged = Purged::default();
        loop {
            let search = search.clone();
            let batch = self
                .with_connection(move |conn| delete_batch(conn, search, cutoff, limit))
                .await??;
            if batch.calls == 0 {
                return Ok(purged);
            }
            purged.add(batch);
            if i64::try_from(batch.calls).unwrap_or(i64::MAX) < limit {
                return Ok(purged);
            }
        }
    }
}

fn sqlite_error(e: rusqlite::Error) -> StoreError {
    StoreError::with_source("SQLite: cannot delete expired calls", e)
}

/// One batch, with the search index file attached for its duration when the store keeps one (`database`).
fn delete_batch(
    conn: &mut Connection,
    database: Option<PathBuf>,
    cutoff: i64,
    limit: i64,
) -> Result<Purged, StoreError> {
    if let Some(database) = &database {
        search_index::attach(conn, database).map_err(sqlite_error)?;
    }
    let result = delete_batch_in(conn, database.is_some(), cutoff, limit);
    if database.is_some() {
        // Detached even when the batch failed: the connection thread's other jobs know nothing of `search`.
        conn.execute_batch("DETACH DATABASE search")
            .map_err(sqlite_error)?;
    }
    result
}

fn delete_batch_in(
    conn: &mut Connection,
    search: bool,
    cutoff: i64,
    limit: i64,
) -> Result<Purged, StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite_error)?;
    let expired = tx
        .prepare(&expired_sql(", rowid", "?1", "?2"))
        .and_then(|mut select| {
            select
                .query_map(params![cutoff, limit], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, i64>(2)?,
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(sqlite_error)?;
    let mut purged = Purged::default();
    {
        let mut unindex = search
            .then(|| tx.prepare("DELETE FROM search.chat_calls_search WHERE rowid = ?1"))
            .transpose()
            .map_err(sqlite_error)?;
        let mut delete = tx
            .prepare("DELETE FROM chat_calls WHERE call_id = ?1")
            .map_err(sqlite_error)?;
        for (call_id, _, rowid) in &expired {
            if let Some(unindex) = &mut unindex {
                unindex.execute([rowid]).map_err(sqlite_error)?;
            }
            purged.calls += delete.execute([call_id]).map_err(sqlite_error)? as u64;
        }
        let mut walk = Frontier::new(expired.into_iter().filter_map(|(_, head, _)| head));
        let mut prune = tx
            .prepare(&prune_node_sql("?1", "message"))
            .map_err(sqlite_error)?;
        while let Some(id) = walk.next() {
            let deleted = prune
                .query_row([&id], |row| Ok((row.get(0)?, row.get::<_, String>(1)?)))
                .optional()
                .map_err(sqlite_error)?;
            if let Some((parent, message)) = deleted {
                walk.deleted(parent, message)?;
            }
        }
        let (messages, blobs) = walk.finish();
        purged.messages = messages;
        let mut prune_blob = tx
            .prepare(&prune_blob_sql("?1", "instr(message, ?1) > 0"))
            .map_err(sqlite_error)?;
        for hash in blobs {
            purged.blobs += prune_blob.execute([hash]).map_err(sqlite_error)? as u64;
        }
    }
    tx.commit().map_err(sqlite_error)?;
    Ok(purged)
}
