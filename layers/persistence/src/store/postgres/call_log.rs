//! The PostgreSQL side of the call log: its query (the `tsvector` column for message words) and, on connect,
//! the indexing of calls recorded before the log existed.

use futures_util::future::BoxFuture;
use tokio_postgres::types::ToSql;

use super::{pg_error, summary_columns, PostgresStore};
use crate::call_log::{CallLogPage, CallLogQuery};
use crate::store::call_log::{call_log_page, call_log_sql, Dialect, Param};
use crate::store::call_lookups::POSTGRES_REQUEST_ID;
use crate::store::StoreError;

impl PostgresStore {
    /// Give the rows written before the call log their first message and index their text, a batch at a
    /// time. A row whose record does not decode gets an empty first message (and no text), so it is not
    /// retried at every connect; the decoding error is logged. Replicas connecting together may index the same
    /// rows: each writes the same values.
    pub(super) async fn index_earlier_calls(&self) -> Result<(), StoreError> {
        let failed = || pg_error("cannot index the calls recorded before the call log");
        let mut indexed = 0usize;
        loop {
            let ids: Vec<String> = self
                .client()
                .await?
                .query(
                    "SELECT call_id FROM chat_calls WHERE first_message IS NULL ORDER BY call_id LIMIT 100",
                    &[],
                )
                .await
                .map_err(failed())?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<Result<_, _>>()
                .map_err(failed())?;
            if ids.is_empty() {
                break;
            }
            for call_id in ids {
                let record = self
                    .query_records("WHERE call_id = $1", &[&call_id])
                    .await
                    .and_then(|records| {
                        records
                            .into_iter()
                            .next()
                            .ok_or_else(|| StoreError::new("the row is gone"))
                    });
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
                self.client()
                    .await?
                    .execute(
                        "UPDATE chat_calls SET first_message = $2, search = to_tsvector('simple', $3::text) \
                         WHERE call_id = $1",
                        &[&call_id, &first, &text],
                    )
                    .await
                    .map_err(failed())?;
                indexed += 1;
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

    /// [`crate::Store::call_log`].
    pub(super) fn call_log_page<'a>(
        &'a self,
        query: &'a CallLogQuery,
    ) -> BoxFuture<'a, Result<CallLogPage, StoreError>> {
        Box::pin(async move {
            let sql = call_log_sql(query, &POSTGRES_DIALECT);
            let params = bound(&sql.params);
            let params: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
            let client = self.client().await?;
            let statement = client
                .prepare_cached(&sql.sql)
                .await
                .map_err(pg_error("cannot list the call log"))?;
            let rows = client
                .query(&statement, &params)
                .await
                .map_err(pg_error("cannot list the call log"))?
                .iter()
                .map(|row| Ok((summary_columns(row)?, row.try_get(16)?)))
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(pg_error("a call log row does not decode"))?;
            call_log_page(&sql, rows)
        })
    }
}

/// The query's parameters as the driver takes them.
fn bound(params: &[Param]) -> Vec<Box<dyn ToSql + Sync + Send>> {
    params
        .iter()
        .map(|p| -> Box<dyn ToSql + Sync + Send> {
            match p {
                Param::Text(text) => Box::new(text.clone()),
                Param::Int(int) => Box::new(*int),
            }
        })
        .collect()
}

/// The call log's query in PostgreSQL: `$n` placeholders (typed, as PostgreSQL cannot always infer them),
/// the `tsvector` column for the words, each a prefix.
const POSTGRES_DIALECT: Dialect = Dialect {
    placeholder: |n| format!("${n}"),
    text_match: |words| format!("search @@ to_tsquery('simple', {words}::text)"),
    words: CallLogQuery::tsquery_words,
    from_response_cache:
        "COALESCE((response -> 'usage' ->> 'from_response_cache')::boolean, false)",
    request_id: POSTGRES_REQUEST_ID,
};

#[cfg(test)]
mod tests {
    use tokio_postgres::types::ToSql;

    use super::{bound, POSTGRES_DIALECT};
    use crate::store::call_log::{assert_found_by_lookups, pasted_id_searches};
    use crate::store::postgres::PostgresStore;

    /// A search by a request id or a bare conversation id reads `chat_calls` through indexes only: on a table
    /// of a few thousand analysed calls, the plan finds every alternative of the search with an index and
    /// scans neither the table nor an index from end to end (walking the log's order index backwards until a
    /// page is full reads every call when few match).
    #[tokio::test]
    async fn a_pasted_id_is_found_through_indexes_without_a_scan() {
        let Some(url) = tower_chat_testkit::database_url() else {
            return;
        };
        let schema = format!("tcplan_{}", uuid::Uuid::new_v4().simple());
        let store = PostgresStore::builder(url)
            .schema(schema.clone())
            .connect()
            .await
            .unwrap();
        let client = store.client().await.unwrap();
        client
            .batch_execute(
                "INSERT INTO chat_calls (call_id, conversation_id, caller, round_index, started_at, ended_at, \
                 model, status, input_tokens, output_tokens, response_text, request_messages, \
                 request_options, response, first_message, search) \
                 SELECT 'call-' || n, 'caller-' || (n % 50) || '/conv-' || n, 'caller-' || (n % 50), 0, n, n, \
                 'model-' || (n % 5), 'completed', 0, 0, '', '[]', '{}', \
                 jsonb_build_object('request_id', 'req-' || n), '', to_tsvector('simple', 'words ' || n) \
                 FROM generate_series(1, 5000) AS n; ANALYZE chat_calls",
            )
            .await
            .unwrap();
        for (pasted, sql) in pasted_id_searches(&POSTGRES_DIALECT) {
            let params = bound(&sql.params);
            let params: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
            let plan: Vec<String> = client
                .query(&format!("EXPLAIN {}", sql.sql), &params)
                .await
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect();
            // Walking the log's order index from its end is a scan of every call when few match.
            assert_found_by_lookups(pasted, &plan, |step| {
                step.contains("Seq Scan") || step.contains("chat_calls_by_start")
            });
        }
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    }
}
