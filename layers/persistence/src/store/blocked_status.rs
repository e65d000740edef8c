//! Migration 0011: the status `blocked` — an answer a content policy cut short ([`crate::CallOutcome::Blocked`])
//! — admitted by `chat_calls`' status check.

/// SQLite cannot alter a CHECK: `chat_calls` is rebuilt with the new one. The rowids are copied with the rows,
/// since the call log's full-text index (`chat_calls_search`, contentless) is keyed by them; the indexes are
/// made again as migrations 0007 and 0010 left them. One transaction with the marker, like every migration.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_BLOCKED_STATUS_SQL: &str = "CREATE TABLE chat_calls_0011 (
    call_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    caller TEXT,
    round_index BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    first_token_at BIGINT,
    ended_at BIGINT NOT NULL,
    provider TEXT,
    model TEXT,
    status TEXT NOT NULL CHECK (status = 'completed' OR status = 'failed' OR status = 'cancelled' \
        OR status = 'interrupted' OR status = 'in_flight' OR status = 'blocked'),
    error_kind TEXT,
    error_message TEXT,
    finish_reason TEXT,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    response_text TEXT NOT NULL,
    request_messages TEXT NOT NULL,
    request_options TEXT NOT NULL,
    response TEXT NOT NULL,
    cost_nanos BIGINT,
    history_head TEXT,
    request_len BIGINT,
    options_id TEXT,
    usage_estimated BOOLEAN NOT NULL DEFAULT FALSE,
    omitted_messages BIGINT,
    omitted_bytes BIGINT,
    first_message TEXT
);
INSERT INTO chat_calls_0011 (rowid, call_id, conversation_id, caller, round_index, started_at, first_token_at, \
    ended_at, provider, model, status, error_kind, error_message, finish_reason, input_tokens, output_tokens, \
    response_text, request_messages, request_options, response, cost_nanos, history_head, request_len, \
    options_id, usage_estimated, omitted_messages, omitted_bytes, first_message) \
    SELECT rowid, call_id, conversation_id, caller, round_index, started_at, first_token_at, ended_at, provider, \
    model, status, error_kind, error_message, finish_reason, input_tokens, output_tokens, response_text, \
    request_messages, request_options, response, cost_nanos, history_head, request_len, options_id, \
    usage_estimated, omitted_messages, omitted_bytes, first_message \
    FROM chat_calls;
DROP TABLE chat_calls;
ALTER TABLE chat_calls_0011 RENAME TO chat_calls;
CREATE INDEX chat_calls_by_conversation ON chat_calls (conversation_id, started_at, call_id);
CREATE INDEX chat_calls_by_caller ON chat_calls (caller, started_at) WHERE caller IS NOT NULL;
CREATE INDEX chat_calls_by_start ON chat_calls (started_at, call_id);
CREATE INDEX chat_calls_unindexed ON chat_calls (call_id) WHERE first_message IS NULL;";

/// PostgreSQL names the column's check `chat_calls_status_check`; it is replaced (`NOT VALID`: the rows there
/// hold the older names, which the new check admits, so they need not be scanned under the lock).
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_BLOCKED_STATUS_SQL: &str =
    "ALTER TABLE chat_calls DROP CONSTRAINT IF EXISTS chat_calls_status_check;
ALTER TABLE chat_calls ADD CONSTRAINT chat_calls_status_check CHECK (status IN ('completed', 'failed', \
    'cancelled', 'interrupted', 'in_flight', 'blocked')) NOT VALID;";
