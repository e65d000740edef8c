//! The indexes that let the call log's search find a pasted identifier without reading every call (migration
//! `0014`), and the expressions they index, which the search's query (`call_log.rs`) compares so that both
//! planners can use them.

/// The conversation id as the client sent it: the gateway stores `<caller>/<id>`, and this is what follows the
/// caller and its slash (NULL without a caller). Both dialects count characters in `length` and `substr`.
pub(crate) const BARE_CONVERSATION_ID: &str = "substr(conversation_id, length(caller) + 2)";

/// SQLite's expression for the request id, the same in the query and in its index.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_REQUEST_ID: &str = "json_extract(response, '$.request_id')";

/// PostgreSQL's expression for the request id, the same in the query and in its index.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_REQUEST_ID: &str = "(response ->> 'request_id')";

/// The indexes that answer a search's identifiers without a scan, for a dialect's request id expression. The
/// call id, conversation id and caller have theirs already (the caller's leaves out calls without one, as
/// these do: a comparison with `=` implies the value is not NULL, and both planners use a partial index for
/// it). Each is one more B-tree a record's write touches.
fn lookups_sql(request_id: &str, if_not_exists: &str) -> String {
    format!(
        "CREATE INDEX{if_not_exists} chat_calls_by_model ON chat_calls (model, started_at) \
         WHERE model IS NOT NULL;
CREATE INDEX{if_not_exists} chat_calls_by_request_id ON chat_calls ({request_id}) \
         WHERE {request_id} IS NOT NULL;
CREATE INDEX{if_not_exists} chat_calls_by_bare_conversation ON chat_calls ({BARE_CONVERSATION_ID}) \
         WHERE caller IS NOT NULL;"
    )
}

/// Migration `0014` in SQLite (see [`lookups_sql`]).
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_lookups_sql() -> String {
    lookups_sql(SQLITE_REQUEST_ID, "")
}

/// Migration `0014` in PostgreSQL (see [`lookups_sql`]); `IF NOT EXISTS` as its other migrations, which replicas
/// may run together.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_lookups_sql() -> String {
    lookups_sql(POSTGRES_REQUEST_ID, " IF NOT EXISTS")
}
