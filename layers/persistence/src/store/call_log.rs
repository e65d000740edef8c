//! The call log's schema and query, shared by both stores: what differs between SQLite and PostgreSQL is the
//! placeholders, the full-text match (an FTS5 table beside `chat_calls` / a `tsvector` column of it) and how a
//! field of the `response` JSON is read.
//!
//! A search looks for its text as each identifier an operator may paste (a call id, a conversation id whole or
//! as the client sent it, a caller, a model, the `x-request-id` the client received) and as words. Every one
//! of those alternatives is answered by an index (migration `0014`, `call_lookups.rs`), so both planners combine index lookups (SQLite's multi-index OR, PostgreSQL's
//! bitmap OR) instead of reading every row: the expressions the query compares are the ones the indexes hold,
//! written once here.

use super::call_lookups::BARE_CONVERSATION_ID;
use crate::call_log::{CallLogPosition, CallLogQuery};
use crate::record::to_micros;

/// The rows written before the call log (no first message yet), a batch at a time: the stores index them when
/// they open, decoding each record as a read would.
#[cfg(feature = "sqlite")]
pub(crate) const UNINDEXED_SQL: &str = "WHERE first_message IS NULL ORDER BY call_id LIMIT 100";

/// A bound value of the log's query.
#[derive(Debug)]
pub(crate) enum Param {
    Text(String),
    Int(i64),
}

/// The log's query for one dialect: the SQL and its parameters in order.
#[derive(Debug)]
pub(crate) struct CallLogSql {
    pub(crate) sql: String,
    pub(crate) params: Vec<Param>,
    /// Whether the rows come oldest first (an [`CallLogPosition::After`] query), to be reversed.
    pub(crate) ascending: bool,
    /// How many rows the page shows (the query asks for one more, to know whether an older page exists).
    pub(crate) limit: usize,
}

/// How a dialect writes the query.
pub(crate) struct Dialect {
    /// The `n`th placeholder.
    pub(crate) placeholder: fn(usize) -> String,
    /// The full-text match of the calls against a placeholder holding the words.
    pub(crate) text_match: fn(&str) -> String,
    /// The words of the search, as the dialect's full-text query takes them.
    pub(crate) words: fn(&CallLogQuery) -> Option<String>,
    /// Whether the response cache answered the call (a flag inside the `response` JSON).
    pub(crate) from_response_cache: &'static str,
    /// The id of the HTTP request the call was made for (a field of the `response` JSON), as its index holds it.
    pub(crate) request_id: &'static str,
}

/// The columns of a log row: those of a call summary, then the first message.
pub(crate) fn call_log_sql(query: &CallLogQuery, dialect: &Dialect) -> CallLogSql {
    let mut params = Vec::new();
    let mut bind = |value: Param| {
        params.push(value);
        (dialect.placeholder)(params.len())
    };
    let mut conditions = Vec::new();
    if let Some(caller) = &query.caller {
        conditions.push(format!(
            "caller = {}",
            bind(Param::Text(caller.as_str().into()))
        ));
    }
    if let Some(model) = &query.model {
        conditions.push(format!("model = {}", bind(Param::Text(model.clone()))));
    }
    if let Some(status) = query.status {
        conditions.push(format!(
            "status = {}",
            bind(Param::Text(status.as_str().into()))
        ));
    }
    if let Some(since) = query.since {
        conditions.push(format!(
            "started_at >= {}",
            bind(Param::Int(to_micros(since)))
        ));
    }
    if let Some(until) = query.until {
        conditions.push(format!(
            "started_at < {}",
            bind(Param::Int(to_micros(until)))
        ));
    }
    if let Some(search) = query
        .search
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let id = bind(Param::Text(search.to_owned()));
        // A client knows its conversation by the id it sent, which the gateway stored as `<caller>/<id>`: the
        // index finds the bare id; the index's expression only skips as many characters as the caller has, so
        // the second comparison checks that they are the caller and its slash.
        let mut any = vec![
            format!("call_id = {id}"),
            format!("conversation_id = {id}"),
            format!("({BARE_CONVERSATION_ID} = {id} AND conversation_id = caller || '/' || {id})"),
            format!("caller = {id}"),
            format!("model = {id}"),
            format!("{} = {id}", dialect.request_id),
        ];
        if let Some(words) = (dialect.words)(query) {
            any.push((dialect.text_match)(&bind(Param::Text(words))));
        }
        conditions.push(format!("({})", any.join(" OR ")));
    }
    let ascending = match &query.position {
        CallLogPosition::Latest => false,
        CallLogPosition::Before(cursor) | CallLogPosition::After(cursor) => {
            let at = bind(Param::Int(cursor.started_at));
            let id = bind(Param::Text(cursor.call_id.clone()));
            let after = matches!(query.position, CallLogPosition::After(_));
            let op = if after { ">" } else { "<" };
            conditions.push(format!("(started_at, call_id) {op} ({at}, {id})"));
            after
        }
    };
    let limit = query.effective_limit() as usize;
    // One more than shown: its presence says an older page exists.
    let fetch = bind(Param::Int(limit as i64 + 1));
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let order = if ascending { "ASC" } else { "DESC" };
    let sql = format!(
        "SELECT call_id, conversation_id, caller, started_at, first_token_at, ended_at, model, status, \
         error_kind, error_message, input_tokens, output_tokens, cost_nanos, {}, \
         omitted_messages IS NOT NULL, COALESCE(finish_reason = 'tool_calls', FALSE), \
         COALESCE(first_message, '') FROM chat_calls {filter} \
         ORDER BY started_at {order}, call_id {order} LIMIT {fetch}",
        dialect.from_response_cache
    );
    CallLogSql {
        sql,
        params,
        ascending,
        limit,
    }
}

/// A page from the rows of [`call_log_sql`] in query order.
pub(crate) fn call_log_page(
    query: &CallLogSql,
    mut rows: Vec<(super::schema::SummaryColumns, String)>,
) -> Result<crate::call_log::CallLogPage, super::StoreError> {
    let more = rows.len() > query.limit;
    rows.truncate(query.limit);
    if query.ascending {
        rows.reverse();
    }
    let entries = rows
        .into_iter()
        .map(|(columns, first_message)| {
            Ok(crate::call_log::CallLogEntry {
                summary: columns.into_summary()?,
                first_message,
            })
        })
        .collect::<Result<Vec<_>, super::StoreError>>()?;
    let older = (more && !query.ascending)
        .then(|| entries.last())
        .flatten()
        .map(|last| crate::call_log::CallLogCursor::of(&last.summary));
    Ok(crate::call_log::CallLogPage { entries, older })
}

/// What an operator pastes into the log's search from an incident report, for the tests of each store's plan:
/// an `x-request-id` its client received and a conversation id as the client sent it, each with its query.
#[cfg(test)]
pub(crate) fn pasted_id_searches(dialect: &Dialect) -> Vec<(&'static str, CallLogSql)> {
    ["req-7f3a9c", "support-ticket-1182"]
        .into_iter()
        .map(|pasted| {
            let query = CallLogQuery {
                search: Some(pasted.into()),
                ..CallLogQuery::default()
            };
            (pasted, call_log_sql(&query, dialect))
        })
        .collect()
}

/// Check a store's plan (one line a step) of a [`pasted_id_searches`] query: no step is a scan (`scans` says
/// which lines are), and the request id and bare conversation id are looked up in their indexes.
#[cfg(test)]
pub(crate) fn assert_found_by_lookups(pasted: &str, plan: &[String], scans: fn(&str) -> bool) {
    assert!(!plan.iter().any(|step| scans(step)), "{pasted}: {plan:#?}");
    for index in [
        "chat_calls_by_request_id",
        "chat_calls_by_bare_conversation",
    ] {
        assert!(
            plan.iter().any(|step| step.contains(index)),
            "{pasted}: {index} unused: {plan:#?}"
        );
    }
}
