//! The SQLite side of the call log: its query (FTS5 for message words, in the index file `search_index.rs`
//! keeps) and, on open, the first messages of calls recorded before the log existed.

use rusqlite::{params, Connection};

use super::search_index::{self, SearchIndex};
use super::{read_raw, select, summary_columns, with_histories, SqliteStore};
use crate::call_log::{CallLogPage, CallLogQuery};
use crate::store::call_log::{call_log_page, call_log_sql, Dialect, Param, UNINDEXED_SQL};
use crate::store::call_lookups::SQLITE_REQUEST_ID;
use crate::store::{StoreError, StoreErrorKind};

impl SqliteStore {
    /// Give the rows written before the call log their first message, a batch per transaction, and hand their
    /// text to the search index if the store keeps one. A row whose record does not decode gets an empty first
    /// message (and no text), so it is not retried at every open; the decoding error is logged.
    pub(super) fn index_earlier_calls(
        conn: &Connection,
        search: Option<&SearchIndex>,
    ) -> rusqlite::Result<()> {
        let mut indexed = 0usize;
        loop {
            let raws = conn
                .prepare(&select(UNINDEXED_SQL))?
                .query_map([], read_raw)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            if raws.is_empty() {
                break;
            }
            let tx = conn.unchecked_transaction()?;
            let mut texts = Vec::new();
            for raw in raws {
                let call_id = raw.columns.call_id.clone();
                let record = with_histories(&tx, vec![raw])
                    .map_err(|e| StoreError::with_source("cannot read its history", e))
                    .and_then(|mut raws| raws.pop().expect("one record").into_record());
                let (first, text) = match record {
                    Ok(record) => (
                        crate::call_log::first_message(&record),
                        crate::call_log::searchable_text(&record),
                    ),
                    Err(error) => {
                        tracing::warn!(%call_id, %error, "a stored call does not decode; the call log cannot search it");
                        (String::new(), String::new())
                    }
                };
                tx.execute(
                    "UPDATE chat_calls SET first_message = ?2 WHERE call_id = ?1",
                    params![call_id, first],
                )?;
                texts.push((call_id, text));
                indexed += 1;
            }
            tx.commit()?;
            if let Some(search) = search {
                search.index(texts);
            }
        }
        if indexed > 0 {
            tracing::info!(
                calls = indexed,
                "indexed the calls recorded before the call log"
            );
        }
        Ok(())
    }
}

impl SqliteStore {
    /// Index every call of the database, [`search_index::BATCH`] at a time in `call_id` order, on `conn` (the
    /// index thread's): how a new index file is filled. A call whose record does not decode is left out (logged).
    pub(super) fn index_recorded_calls(conn: &Connection) -> rusqlite::Result<()> {
        let mut after = String::new();
        let mut indexed = 0usize;
        loop {
            let raws = conn
                .prepare(&select(&format!(
                    "WHERE call_id > ?1 ORDER BY call_id LIMIT {}",
                    search_index::BATCH
                )))?
                .query_map([&after], read_raw)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let Some(last) = raws.last() else { break };
            after = last.columns.call_id.clone();
            let mut texts = Vec::with_capacity(raws.len());
            for raw in raws {
                let call_id = raw.columns.call_id.clone();
                let record = with_histories(conn, vec![raw])
                    .map_err(|e| StoreError::with_source("cannot read its history", e))
                    .and_then(|mut raws| raws.pop().expect("one record").into_record());
                match record {
                    Ok(record) => texts.push((call_id, crate::call_log::searchable_text(&record))),
                    Err(error) => {
                        tracing::warn!(%call_id, %error, "a stored call does not decode; the call log cannot search it");
                    }
                }
            }
            indexed += texts.len();
            search_index::index_now(conn, &texts)?;
        }
        if indexed > 0 {
            tracing::info!(calls = indexed, "indexed the calls already recorded");
        }
        Ok(())
    }
}

/// The query's parameters as the driver takes them.
fn bound(params: &[Param]) -> impl Iterator<Item = rusqlite::types::Value> + '_ {
    params.iter().map(|p| match p {
        Param::Text(text) => rusqlite::types::Value::Text(text.clone()),
        Param::Int(int) => rusqlite::types::Value::Integer(*int),
    })
}

/// The call log's query in SQLite: numbered placeholders, FTS5 for the words.
const SQLITE_DIALECT: Dialect = Dialect {
    placeholder: |n| format!("?{n}"),
    text_match: |words| {
        format!(
            "chat_calls.rowid IN (SELECT rowid FROM search.chat_calls_search WHERE chat_calls_search MATCH {words})"
        )
    },
    words: CallLogQuery::fts5_words,
    from_response_cache: "COALESCE(json_extract(response, '$.usage.from_response_cache'), 0) = 1",
    request_id: SQLITE_REQUEST_ID,
};

impl SqliteStore {
    pub(super) fn call_log_page<'a>(
        &'a self,
        query: &'a CallLogQuery,
    ) -> futures_util::future::BoxFuture<'a, Result<CallLogPage, StoreError>> {
        let sql = call_log_sql(query, &SQLITE_DIALECT);
        Box::pin(async move {
            if query.search.is_some() {
                // The index thread takes committed calls in batches: a flush puts every call recorded before
                // this search into the index it reads.
                match &self.search {
                    Some(search) => search.flush().await?,
                    None => {
                        return Err(StoreError::of_kind(
                            StoreErrorKind::NoSearchIndex,
                            "this SQLite store keeps no search index: open it with \
                             `SqliteStoreBuilder::search_index(true)` to search the call log",
                        ))
                    }
                }
            }
            let (sql, rows) = self
                .read("cannot list the call log", move |conn| {
                    let params = bound(&sql.params);
                    let rows = conn
                        .prepare_cached(&sql.sql)?
                        .query_map(rusqlite::params_from_iter(params), |row| {
                            Ok((summary_columns(row)?, row.get(16)?))
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    Ok((sql, rows))
                })
                .await?;
            call_log_page(&sql, rows)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{bound, SQLITE_DIALECT};
    use crate::store::call_log::{assert_found_by_lookups, pasted_id_searches};
    use crate::store::sqlite::SqliteStore;

    /// A search by a request id or a bare conversation id reads `chat_calls` through indexes only: no step of
    /// its plan scans the table (the search index's own full-text lookup reads as a scan of its virtual table).
    #[tokio::test]
    async fn a_pasted_id_is_found_through_indexes_without_a_scan() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::builder(dir.path().join("plan.db"))
            .search_index(true)
            .open()
            .await
            .unwrap();
        for (pasted, sql) in pasted_id_searches(&SQLITE_DIALECT) {
            let plan = store
                .read("plan", move |conn| {
                    let params = bound(&sql.params);
                    conn.prepare(&format!("EXPLAIN QUERY PLAN {}", sql.sql))?
                        .query_map(rusqlite::params_from_iter(params), |row| {
                            row.get::<_, String>(3)
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .await
                .unwrap();
            assert_found_by_lookups(pasted, &plan, |step| {
                step.starts_with("SCAN ") && !step.contains("VIRTUAL TABLE")
            });
        }
    }
}
