//! Migration 0012: `chat_spend_daily`, the spend rollup — one row per UTC day × caller × team × model with the
//! calls, refusals, errors, tokens and cost of the final calls recorded for it — kept by triggers on
//! `chat_calls`, so it changes in the transaction of the record it counts, whatever statement wrote it (the
//! writer's upsert, a final record replacing its in-flight one, `abandon_in_flight`). The records stay the
//! source of truth: the migration fills the rollup from those already stored, and a test checks the two agree.
//!
//! Absent keys are stored as `''` (a primary key column cannot be NULL in PostgreSQL, and SQLite's unique
//! index would let NULLs repeat) and read back as `None`. `team` is `''` until a key store names callers' teams.

use crate::spend::{SpendRow, UtcDay};

/// Microseconds in a day: `started_at / DAY_MICROS` is the day (integer division in both dialects).
const DAY_MICROS: &str = "86400000000";

/// The table and its per-caller index (the same in both dialects but for `WITHOUT ROWID`).
fn table_sql(without_rowid: &str) -> String {
    format!(
        "CREATE TABLE chat_spend_daily (
    day BIGINT NOT NULL,
    caller TEXT NOT NULL,
    team TEXT NOT NULL,
    model TEXT NOT NULL,
    calls BIGINT NOT NULL,
    refused_calls BIGINT NOT NULL,
    error_calls BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    cost_nanos BIGINT NOT NULL,
    unpriced_calls BIGINT NOT NULL,
    PRIMARY KEY (day, caller, team, model)
){without_rowid};
CREATE INDEX chat_spend_daily_by_caller ON chat_spend_daily (caller, day);"
    )
}

const COLUMNS: &str = "day, caller, team, model, calls, refused_calls, error_calls, input_tokens, \
    output_tokens, cached_input_tokens, cost_nanos, unpriced_calls";

/// What one call row adds to its rollup row, in [`COLUMNS`] order after the four keys: `row` prefixes the
/// call's columns (`NEW.` in a trigger), `cached` is the dialect's read of the cached input tokens from the
/// `response` JSON.
fn increments(row: &str, cached: &str) -> [String; 8] {
    [
        "1".to_owned(),
        format!("CASE WHEN {row}status = 'failed' AND {row}omitted_messages IS NOT NULL THEN 1 ELSE 0 END"),
        format!(
            "CASE WHEN {row}status IN ('failed', 'interrupted') AND {row}omitted_messages IS NULL \
             THEN 1 ELSE 0 END"
        ),
        format!("{row}input_tokens"),
        format!("{row}output_tokens"),
        format!("COALESCE({cached}, 0)"),
        format!("COALESCE({row}cost_nanos, 0)"),
        format!("CASE WHEN {row}cost_nanos IS NULL THEN 1 ELSE 0 END"),
    ]
}

fn keys(row: &str) -> String {
    format!(
        "{row}started_at / {DAY_MICROS}, COALESCE({row}caller, ''), '', COALESCE({row}model, '')"
    )
}

/// The upsert adding one call (`NEW`) to its rollup row.
fn add_call_sql(cached: &str) -> String {
    let values = increments("NEW.", cached).join(", ");
    format!(
        "INSERT INTO chat_spend_daily ({COLUMNS}) VALUES ({}, {values}) \
         ON CONFLICT (day, caller, team, model) DO UPDATE SET calls = chat_spend_daily.calls + excluded.calls, \
         refused_calls = chat_spend_daily.refused_calls + excluded.refused_calls, \
         error_calls = chat_spend_daily.error_calls + excluded.error_calls, \
         input_tokens = chat_spend_daily.input_tokens + excluded.input_tokens, \
         output_tokens = chat_spend_daily.output_tokens + excluded.output_tokens, \
         cached_input_tokens = chat_spend_daily.cached_input_tokens + excluded.cached_input_tokens, \
         cost_nanos = chat_spend_daily.cost_nanos + excluded.cost_nanos, \
         unpriced_calls = chat_spend_daily.unpriced_calls + excluded.unpriced_calls",
        keys("NEW.")
    )
}

/// The rollup of the calls already stored (final ones: in-flight rows are counted when they end).
fn backfill_sql(cached: &str) -> String {
    let sums = increments("", cached)
        .map(|e| format!("CAST(SUM({e}) AS BIGINT)"))
        .join(", ");
    format!(
        "INSERT INTO chat_spend_daily ({COLUMNS}) SELECT {}, {sums} FROM chat_calls \
         WHERE status <> 'in_flight' GROUP BY 1, 2, 3, 4;",
        keys("")
    )
}

/// When a call counts: inserted final, or its in-flight row turned final (by its final record, or abandoned).
const ON_INSERT: &str = "AFTER INSERT ON chat_calls";
const ON_FINAL: &str = "AFTER UPDATE OF status ON chat_calls";
const INSERT_WHEN: &str = "NEW.status <> 'in_flight'";
const FINAL_WHEN: &str = "OLD.status = 'in_flight' AND NEW.status <> 'in_flight'";

#[cfg(feature = "sqlite")]
const SQLITE_CACHED: &str = "json_extract(NEW.response, '$.usage.cached_input_tokens')";

/// SQLite: the table, two triggers running the upsert, and the backfill.
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_sql() -> String {
    let add = add_call_sql(SQLITE_CACHED);
    format!(
        "{table}
CREATE TRIGGER chat_spend_on_insert {ON_INSERT} WHEN {INSERT_WHEN} BEGIN {add}; END;
CREATE TRIGGER chat_spend_on_final {ON_FINAL} WHEN {FINAL_WHEN} BEGIN {add}; END;
{backfill}",
        table = table_sql(" WITHOUT ROWID"),
        backfill = backfill_sql("json_extract(response, '$.usage.cached_input_tokens')"),
    )
}

/// PostgreSQL: the table, a trigger function running the upsert, its two triggers, and the backfill.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_sql() -> String {
    let add = add_call_sql("(NEW.response -> 'usage' ->> 'cached_input_tokens')::BIGINT");
    format!(
        "{table}
CREATE OR REPLACE FUNCTION chat_spend_daily_add() RETURNS trigger LANGUAGE plpgsql AS $rollup$
BEGIN
    {add};
    RETURN NULL;
END
$rollup$;
CREATE TRIGGER chat_spend_on_insert {ON_INSERT} FOR EACH ROW WHEN ({INSERT_WHEN}) \
    EXECUTE FUNCTION chat_spend_daily_add();
CREATE TRIGGER chat_spend_on_final {ON_FINAL} FOR EACH ROW WHEN ({FINAL_WHEN}) \
    EXECUTE FUNCTION chat_spend_daily_add();
{backfill}",
        table = table_sql(""),
        backfill = backfill_sql("(response -> 'usage' ->> 'cached_input_tokens')::BIGINT"),
    )
}

/// [`crate::Store::spend_rollup`]'s query, with the dialect's placeholders for from, until, caller, and the
/// four grouping flags (booleans).
pub(crate) fn query_sql(p: [&str; 7]) -> String {
    let [from, until, caller, by_day, by_caller, by_team, by_model] = p;
    format!(
        "SELECT CASE WHEN {by_day} THEN day END, CASE WHEN {by_caller} THEN caller END, \
         CASE WHEN {by_team} THEN team END, CASE WHEN {by_model} THEN model END, \
         CAST(SUM(calls) AS BIGINT), CAST(SUM(refused_calls) AS BIGINT), CAST(SUM(error_calls) AS BIGINT), \
         CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT), \
         CAST(SUM(cached_input_tokens) AS BIGINT), CAST(SUM(cost_nanos) AS BIGINT), \
         CAST(SUM(unpriced_calls) AS BIGINT) \
         FROM chat_spend_daily WHERE day >= {from} AND day < {until} \
         AND (CAST({caller} AS TEXT) IS NULL OR caller = {caller}) \
         GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
    )
}

/// One row of [`query_sql`]: the four keys, then the eight sums.
pub(crate) fn row_from(day: Option<i64>, keys: [Option<String>; 3], sums: [i64; 8]) -> SpendRow {
    let present = |k: Option<String>| k.filter(|k| !k.is_empty());
    let [caller, team, model] = keys;
    let [calls, refused, errors, input, output, cached, cost, unpriced] =
        sums.map(|v| u64::try_from(v).unwrap_or(0));
    SpendRow {
        day: day.map(UtcDay::from_days_since_epoch),
        caller: present(caller).map(tower_chat::CallerIdentity::new),
        team: present(team),
        model: present(model),
        calls,
        refused_calls: refused,
        error_calls: errors,
        input_tokens: input,
        output_tokens: output,
        cached_input_tokens: cached,
        cost: tower_chat::Cost::from_nanos(cost),
        unpriced_calls: unpriced,
    }
}
