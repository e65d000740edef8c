//! `chat_spend_daily`, the spend rollup: one row per UTC day × caller × team × model with the calls, refusals,
//! errors, tokens and cost of the final calls recorded for it. The records stay the source of truth: migration
//! 0012 made the table and filled it from the records already stored, and a test checks the two agree.
//!
//! Migration 0012 kept it with triggers on `chat_calls`; migration 0013 drops them (the rows stay) and adds the
//! calls' `team` column. Since then the record writers keep it, in the transaction of the records they commit:
//! a [`Tally`] sums the calls of the transaction that turned final (inserted final, or an in-flight row
//! replaced) per rollup row, from the values the writer already holds, and each of its rows is one upsert —
//! a group of records of one caller, team, model and day costs one, where a trigger ran one per record and read
//! the cached tokens back out of the `response` JSON. `abandon_in_flight` adds the calls it closes in its own
//! statement before closing them.
//!
//! Absent keys are stored as `''` (a primary key column cannot be NULL in PostgreSQL, and SQLite's unique
//! index would let NULLs repeat) and read back as `None`.

use std::collections::BTreeMap;

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
/// call's columns (`NEW.` in a trigger), `status` is the status it counts with (`{row}status`, or the one
/// `abandon_in_flight` gives it), `cached` is the dialect's read of the cached input tokens from the
/// `response` JSON.
fn increments(row: &str, status: &str, cached: &str) -> [String; 8] {
    [
        "1".to_owned(),
        format!(
            "CASE WHEN {status} = 'failed' AND {row}omitted_messages IS NOT NULL THEN 1 ELSE 0 END"
        ),
        format!(
            "CASE WHEN {status} IN ('failed', 'interrupted') AND {row}omitted_messages IS NULL \
             THEN 1 ELSE 0 END"
        ),
        format!("{row}input_tokens"),
        format!("{row}output_tokens"),
        format!("COALESCE({cached}, 0)"),
        format!("COALESCE({row}cost_nanos, 0)"),
        format!("CASE WHEN {row}cost_nanos IS NULL THEN 1 ELSE 0 END"),
    ]
}

/// The four keys of a call row; `team` is the dialect's team (`''` before migration 0013 added the column).
fn keys(row: &str, team: &str) -> String {
    format!(
        "{row}started_at / {DAY_MICROS}, COALESCE({row}caller, ''), {team}, COALESCE({row}model, '')"
    )
}

/// Adds the inserted row's sums to those of the row already there.
const ADD_ON_CONFLICT: &str =
    "ON CONFLICT (day, caller, team, model) DO UPDATE SET calls = chat_spend_daily.calls + excluded.calls, \
         refused_calls = chat_spend_daily.refused_calls + excluded.refused_calls, \
         error_calls = chat_spend_daily.error_calls + excluded.error_calls, \
         input_tokens = chat_spend_daily.input_tokens + excluded.input_tokens, \
         output_tokens = chat_spend_daily.output_tokens + excluded.output_tokens, \
         cached_input_tokens = chat_spend_daily.cached_input_tokens + excluded.cached_input_tokens, \
         cost_nanos = chat_spend_daily.cost_nanos + excluded.cost_nanos, \
         unpriced_calls = chat_spend_daily.unpriced_calls + excluded.unpriced_calls";

/// The upsert adding one call (`NEW`) to its rollup row.
fn add_call_sql(cached: &str) -> String {
    let values = increments("NEW.", "NEW.status", cached).join(", ");
    format!(
        "INSERT INTO chat_spend_daily ({COLUMNS}) VALUES ({}, {values}) {ADD_ON_CONFLICT}",
        keys("NEW.", "''")
    )
}

/// The rollup of the calls already stored (final ones: in-flight rows are counted when they end).
fn backfill_sql(cached: &str) -> String {
    let sums = increments("", "status", cached)
        .map(|e| format!("CAST(SUM({e}) AS BIGINT)"))
        .join(", ");
    format!(
        "INSERT INTO chat_spend_daily ({COLUMNS}) SELECT {}, {sums} FROM chat_calls \
         WHERE status <> 'in_flight' GROUP BY 1, 2, 3, 4;",
        keys("", "''")
    )
}

/// The sums of the calls `abandon_in_flight` closes, from `source` (rows of `chat_calls`) each as the
/// `interrupted` call it becomes; `cached` reads the cached input tokens from the `response` JSON (no writer
/// holds these rows' values any more).
fn abandoned_sql(source: &str, cached: &str) -> String {
    let sums = increments("", "'interrupted'", cached)
        .map(|e| format!("CAST(SUM({e}) AS BIGINT)"))
        .join(", ");
    format!(
        "INSERT INTO chat_spend_daily ({COLUMNS}) SELECT {}, {sums} FROM {source} \
         GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4 {ADD_ON_CONFLICT}",
        keys("", "COALESCE(team, '')")
    )
}

/// SQLite: what `abandon_in_flight` adds to the rollup, run before it closes the in-flight calls that started
/// before `?1`, in the same transaction.
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_abandon_sql() -> String {
    abandoned_sql(
        "chat_calls WHERE status = 'in_flight' AND started_at < ?1",
        "json_extract(response, '$.usage.cached_input_tokens')",
    )
}

/// PostgreSQL: `abandon_in_flight` in one statement, `close` (the update closing the calls) with what it adds —
/// the calls it closes are the ones it adds, so two replicas closing the same calls at once count each once (the
/// second one's update finds them closed). Returns how many it closed.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_abandon_sql(close: &str) -> String {
    format!(
        "WITH closed AS ({close} RETURNING *), added AS ({}) SELECT COUNT(*) FROM closed",
        abandoned_sql(
            "closed",
            "(response -> 'usage' ->> 'cached_input_tokens')::BIGINT"
        )
    )
}

/// The upsert a writer runs per row of its [`Tally`]: the dialect's twelve placeholders, in [`COLUMNS`] order.
pub(crate) fn add_sql(p: [&str; 12]) -> String {
    format!(
        "INSERT INTO chat_spend_daily ({COLUMNS}) VALUES ({}) {ADD_ON_CONFLICT}",
        p.join(", ")
    )
}

/// Migration 0013 in SQLite: the triggers go (the writer keeps the rollup), the calls get their team.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_WRITER_KEEPS_SQL: &str = "DROP TRIGGER IF EXISTS chat_spend_on_insert;
DROP TRIGGER IF EXISTS chat_spend_on_final;
ALTER TABLE chat_calls ADD COLUMN team TEXT;";

/// Migration 0013 in PostgreSQL: the triggers and their function go, the calls get their team.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_WRITER_KEEPS_SQL: &str =
    "DROP TRIGGER IF EXISTS chat_spend_on_insert ON chat_calls;
DROP TRIGGER IF EXISTS chat_spend_on_final ON chat_calls;
DROP FUNCTION IF EXISTS chat_spend_daily_add();
ALTER TABLE chat_calls ADD COLUMN IF NOT EXISTS team TEXT;";

/// A rollup row's keys: day, caller, team, model (`''` for an absent one), borrowed from the rows written.
pub(crate) type Keys<'r> = (i64, &'r str, &'r str, &'r str);

/// The sums a transaction adds to the rollup, per rollup row, in key order: writers upsert them in that order,
/// so two transactions adding to the same rows (two replicas on one PostgreSQL) lock them in the same order and
/// cannot deadlock.
#[derive(Debug, Default)]
pub(crate) struct Tally<'r> {
    rows: BTreeMap<Keys<'r>, [i64; 8]>,
}

/// What the rollup needs of a call the transaction made final, borrowed from the row the writer holds.
#[derive(Debug)]
pub(crate) struct Counted<'r> {
    pub(crate) started_at: i64,
    pub(crate) caller: Option<&'r str>,
    pub(crate) team: Option<&'r str>,
    pub(crate) model: Option<&'r str>,
    pub(crate) status: &'r str,
    pub(crate) omitted: bool,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    pub(crate) cached_input_tokens: i64,
    pub(crate) cost_nanos: Option<i64>,
}

impl<'r> Tally<'r> {
    /// Count `row`, a call the transaction made final (the caller checks it replaced nothing final).
    pub(crate) fn add(&mut self, row: Counted<'r>) {
        let failed = row.status == "failed";
        let refused = failed && row.omitted;
        let error = (failed || row.status == "interrupted") && !row.omitted;
        let keys = (
            row.started_at / 86_400_000_000,
            row.caller.unwrap_or_default(),
            row.team.unwrap_or_default(),
            row.model.unwrap_or_default(),
        );
        let add = [
            1,
            i64::from(refused),
            i64::from(error),
            row.input_tokens,
            row.output_tokens,
            row.cached_input_tokens,
            row.cost_nanos.unwrap_or(0),
            i64::from(row.cost_nanos.is_none()),
        ];
        let sums = self.rows.entry(keys).or_default();
        for (sum, add) in sums.iter_mut().zip(add) {
            *sum = sum.saturating_add(add);
        }
    }

    /// The rows to upsert, in key order.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (&Keys<'r>, &[i64; 8])> {
        self.rows.iter()
    }

    /// Whether the transaction made no call final.
    #[cfg(feature = "postgres")]
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
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

/// [`crate::Store::spend_rollup`]'s query, with the dialect's placeholders for from, until, caller, the
/// four grouping flags (booleans) and team.
pub(crate) fn query_sql(p: [&str; 8]) -> String {
    let [from, until, caller, by_day, by_caller, by_team, by_model, team] = p;
    format!(
        "SELECT CASE WHEN {by_day} THEN day END, CASE WHEN {by_caller} THEN caller END, \
         CASE WHEN {by_team} THEN team END, CASE WHEN {by_model} THEN model END, \
         CAST(SUM(calls) AS BIGINT), CAST(SUM(refused_calls) AS BIGINT), CAST(SUM(error_calls) AS BIGINT), \
         CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT), \
         CAST(SUM(cached_input_tokens) AS BIGINT), CAST(SUM(cost_nanos) AS BIGINT), \
         CAST(SUM(unpriced_calls) AS BIGINT) \
         FROM chat_spend_daily WHERE day >= {from} AND day < {until} \
         AND (CAST({caller} AS TEXT) IS NULL OR caller = {caller}) \
         AND (CAST({team} AS TEXT) IS NULL OR team = {team}) \
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
