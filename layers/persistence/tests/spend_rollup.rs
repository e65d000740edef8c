//! The spend rollup (`chat_spend_daily`), in SQLite and PostgreSQL: after a mixed workload — callers, teams,
//! models and days, every outcome, refusals, in-flight records replaced or abandoned, cached and unpriced calls,
//! two store handles writing at once — it equals the same sums taken over the call records, group by group; the
//! migration fills it from records already stored.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Backend, TestDb};
use tower_chat::{CallerIdentity, Cost};
use tower_chat_persistence::{
    CallId, CallOutcome, CallRecord, CallerTeam, PostgresStore, RecordedError, RequestSize,
    SpendRollupQuery, SpendRow, SqliteStore, Store, UtcDay,
};

both_stores!(
    the_rollup_equals_the_records_summed_per_day_caller_and_model,
    the_migration_fills_the_rollup_from_the_records_stored_before,
    two_store_handles_writing_at_once_count_every_call_once,
    the_rollup_sums_and_filters_by_team,
);

/// A rollup group's keys: day, caller, team, model (`""` for none).
type Key = (i64, String, String, String);

/// 2026-11-30 (a Monday), 00:00 UTC, in days since 1970-01-01.
const MONDAY: i64 = 20_787;

fn at(day: i64, seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(day as u64 * 86_400 + seconds)
}

/// A varied workload shaped from one real record: `n` calls over four days, two callers (and calls with none),
/// alice's in one of two teams or none, three models (and calls naming none), every outcome.
fn workload(template: &CallRecord, prefix: &str, n: usize) -> Vec<CallRecord> {
    let callers = [
        Some(format!("{prefix}-alice")),
        Some(format!("{prefix}-bob")),
        None,
    ];
    let models = [Some("gpt-4o"), Some("claude-sonnet"), Some("mini"), None];
    (0..n)
        .map(|i| {
            let mut r = template.clone();
            r.call_id = CallId::new(format!("{prefix}-call-{i}"));
            r.caller = callers[i % 3].clone().map(CallerIdentity::new);
            r.team = match (i % 3, i % 5) {
                (0, 0 | 1) => Some(CallerTeam::new(format!("{prefix}-red"))),
                (0, 2) => Some(CallerTeam::new(format!("{prefix}-blue"))),
                _ => None,
            };
            r.model = models[i % 4].map(str::to_owned);
            // Last second of a day and first of the next: the day boundary is UTC midnight.
            let day = MONDAY + (i % 4) as i64;
            r.started_at = at(day, if i % 2 == 0 { 86_399 } else { 0 });
            r.ended_at = r.started_at;
            r.first_token_at = None;
            r.response.usage.input_tokens = 100 + i as u64;
            r.response.usage.output_tokens = 10 + (i % 7) as u64;
            r.response.usage.cached_input_tokens = (i % 5 == 0).then_some(40);
            r.cost = (i % 6 != 0).then(|| Cost::from_nanos(1_000 * i as u64));
            r.outcome = match i % 7 {
                0 | 1 => CallOutcome::Completed,
                2 => CallOutcome::Failed {
                    error: RecordedError {
                        kind: "upstream".into(),
                        message: "500".into(),
                    },
                },
                3 => CallOutcome::Interrupted { error: None },
                4 => CallOutcome::Cancelled,
                5 => CallOutcome::Blocked,
                _ => CallOutcome::Failed {
                    error: RecordedError {
                        kind: "rate_limited".into(),
                        message: "budget".into(),
                    },
                },
            };
            if i % 7 == 6 {
                // Refused before sending: recorded without its request.
                r.request.omitted = Some(RequestSize {
                    messages: 1,
                    bytes: 5,
                });
            }
            r
        })
        .collect()
}

/// The records' sums per (day, caller, team, model), computed here from what was written.
fn expected(records: &[CallRecord]) -> BTreeMap<Key, SpendRow> {
    let mut groups: BTreeMap<Key, SpendRow> = BTreeMap::new();
    for r in records {
        if r.outcome == CallOutcome::InFlight {
            continue;
        }
        let day = UtcDay::of(r.started_at);
        let caller = r.caller.as_ref().map(|c| c.as_str().to_owned());
        let team = r.team.as_ref().map(|t| t.as_str().to_owned());
        let key = (
            day.days_since_epoch(),
            caller.clone().unwrap_or_default(),
            team.clone().unwrap_or_default(),
            r.model.clone().unwrap_or_default(),
        );
        let row = groups.entry(key).or_insert_with(|| SpendRow {
            day: Some(day),
            caller: caller.map(CallerIdentity::new),
            team,
            model: r.model.clone(),
            ..SpendRow::default()
        });
        let refused =
            r.request.omitted.is_some() && matches!(r.outcome, CallOutcome::Failed { .. });
        row.calls += 1;
        row.refused_calls += u64::from(refused);
        row.error_calls += u64::from(
            !refused
                && matches!(
                    r.outcome,
                    CallOutcome::Failed { .. } | CallOutcome::Interrupted { .. }
                ),
        );
        row.input_tokens += r.response.usage.input_tokens;
        row.output_tokens += r.response.usage.output_tokens;
        row.cached_input_tokens += r.response.usage.cached_input_tokens.unwrap_or(0);
        row.cost = Cost::from_nanos(row.cost.as_nanos() + r.cost.map_or(0, |c| c.as_nanos()));
        row.unpriced_calls += u64::from(r.cost.is_none());
    }
    groups
}

/// The rollup's rows per (day, caller, team, model).
async fn rollup(db: &TestDb) -> BTreeMap<Key, SpendRow> {
    rollup_of(&*db.store).await
}

async fn rollup_of(store: &dyn Store) -> BTreeMap<Key, SpendRow> {
    let query = SpendRollupQuery::days(
        UtcDay::from_days_since_epoch(MONDAY),
        UtcDay::from_days_since_epoch(MONDAY + 7),
    )
    .by_day()
    .by_caller()
    .by_team()
    .by_model();
    store
        .spend_rollup(&query)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (key_of(&row), row))
        .collect()
}

fn key_of(row: &SpendRow) -> Key {
    (
        row.day.unwrap().days_since_epoch(),
        row.caller
            .as_ref()
            .map(|c| c.as_str().to_owned())
            .unwrap_or_default(),
        row.team.clone().unwrap_or_default(),
        row.model.clone().unwrap_or_default(),
    )
}

/// The rollup's sums in the order [`sql_aggregate`] takes them.
fn sums(rollup: BTreeMap<Key, SpendRow>) -> BTreeMap<Key, [i64; 8]> {
    rollup
        .into_iter()
        .map(|(k, r)| {
            (
                k,
                [
                    r.calls,
                    r.refused_calls,
                    r.error_calls,
                    r.input_tokens,
                    r.output_tokens,
                    r.cached_input_tokens,
                    r.cost.as_nanos(),
                    r.unpriced_calls,
                ]
                .map(|v| v as i64),
            )
        })
        .collect()
}

async fn abandon(db: &TestDb, before: SystemTime) -> u64 {
    match &db.backend {
        Backend::Sqlite(store) => store.abandon_in_flight(before).await.unwrap(),
        Backend::Postgres(store) => store.abandon_in_flight(before).await.unwrap(),
    }
}

async fn the_rollup_equals_the_records_summed_per_day_caller_and_model(db: &TestDb) {
    let template = db.recorded_call("template").await;
    let prefix = format!("r{}", common::uuid_simple());
    let records = workload(&template, &prefix, 84);
    // Written in batches of varied sizes; some calls first in flight, their final record in the same batch or a
    // later one; a final record written twice (a retried batch) counts once.
    let mut in_flight = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if i % 5 == 0 {
            let mut started = r.clone();
            started.outcome = CallOutcome::InFlight;
            started.response.usage = Default::default();
            started.cost = None;
            in_flight.push(started);
        }
    }
    db.store.write_calls(&in_flight).await.unwrap();
    for (n, batch) in records.chunks(9).enumerate() {
        db.store.write_calls(batch).await.unwrap();
        if n % 3 == 0 {
            db.store.write_calls(batch).await.unwrap();
        }
    }
    // Two calls still in flight: not counted, until abandoned.
    let mut open = records[0].clone();
    open.call_id = CallId::new(format!("{prefix}-open-1"));
    open.outcome = CallOutcome::InFlight;
    open.started_at = at(MONDAY, 10);
    let mut open2 = open.clone();
    open2.call_id = CallId::new(format!("{prefix}-open-2"));
    open2.started_at = at(MONDAY + 9, 10);
    db.store.write_calls(&[open.clone(), open2]).await.unwrap();

    let mut want = expected(&records);
    let got = rollup(db).await;
    assert_eq!(got, want, "the rollup differs from the records");

    // Abandoned in flight: `interrupted`, counted then (an error, with the tokens its in-flight record had).
    assert_eq!(abandon(db, at(MONDAY + 1, 0)).await, 1);
    let mut abandoned = open;
    abandoned.outcome = CallOutcome::Interrupted { error: None };
    let mut all = records.clone();
    all.push(abandoned);
    want = expected(&all);
    assert_eq!(rollup(db).await, want, "an abandoned call is counted once");

    // Summed over the days, per caller: one caller's totals.
    let alice = format!("{prefix}-alice");
    let query = SpendRollupQuery::days(
        UtcDay::from_days_since_epoch(MONDAY),
        UtcDay::from_days_since_epoch(MONDAY + 7),
    )
    .caller(alice.as_str());
    let total = db.store.spend_rollup(&query).await.unwrap();
    let alice_records: Vec<_> = all
        .iter()
        .filter(|r| r.caller.as_ref().map(|c| c.as_str()) == Some(alice.as_str()))
        .cloned()
        .collect();
    let sum = expected(&alice_records)
        .into_values()
        .fold(SpendRow::default(), |mut acc, row| {
            acc.calls += row.calls;
            acc.refused_calls += row.refused_calls;
            acc.error_calls += row.error_calls;
            acc.input_tokens += row.input_tokens;
            acc.output_tokens += row.output_tokens;
            acc.cached_input_tokens += row.cached_input_tokens;
            acc.cost = Cost::from_nanos(acc.cost.as_nanos() + row.cost.as_nanos());
            acc.unpriced_calls += row.unpriced_calls;
            acc
        });
    assert_eq!(total, vec![sum]);
    assert!(total[0].refused_calls > 0 && total[0].error_calls > 0 && total[0].unpriced_calls > 0);

    // A range of one day holds that day's calls only.
    let one_day = SpendRollupQuery::days(
        UtcDay::from_days_since_epoch(MONDAY + 1),
        UtcDay::from_days_since_epoch(MONDAY + 2),
    )
    .by_day();
    let rows = db.store.spend_rollup(&one_day).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].day, Some(UtcDay::from_days_since_epoch(MONDAY + 1)));
    assert_eq!(
        rows[0].calls,
        all.iter()
            .filter(|r| UtcDay::of(r.started_at).days_since_epoch() == MONDAY + 1)
            .count() as u64
    );

    // The same sums taken by the database over `chat_calls` (the records as stored, not as written here).
    assert_eq!(sums(rollup(db).await), sql_aggregate(db).await);
}

/// `chat_calls` summed per (day, caller, team, model) by the database, the cached tokens read from the
/// `response` column.
async fn sql_aggregate(db: &TestDb) -> BTreeMap<Key, [i64; 8]> {
    const SQL: &str = "SELECT started_at / 86400000000, COALESCE(caller, ''), COALESCE(team, ''), \
        COALESCE(model, ''), COUNT(*), \
        CAST(SUM(CASE WHEN status = 'failed' AND omitted_messages IS NOT NULL THEN 1 ELSE 0 END) AS BIGINT), \
        CAST(SUM(CASE WHEN status IN ('failed', 'interrupted') AND omitted_messages IS NULL THEN 1 ELSE 0 END) AS BIGINT), \
        CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT), \
        CAST(COALESCE(SUM({cached}), 0) AS BIGINT), \
        CAST(COALESCE(SUM(cost_nanos), 0) AS BIGINT), COUNT(*) - COUNT(cost_nanos) \
        FROM chat_calls WHERE status <> 'in_flight' AND started_at >= 1795996800000000 AND started_at < 1796601600000000 \
        GROUP BY 1, 2, 3, 4";
    let rows: Vec<(i64, String, String, String, [i64; 8])> = match &db.backend {
        Backend::Sqlite(store) => store
            .run("aggregate", |conn| {
                let sql = SQL.replace(
                    "{cached}",
                    "json_extract(response, '$.usage.cached_input_tokens')",
                );
                let mut statement = conn.prepare(&sql)?;
                let rows = statement.query_map([], |row| {
                    let mut sums = [0i64; 8];
                    for (i, s) in sums.iter_mut().enumerate() {
                        *s = row.get(4 + i)?;
                    }
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, sums))
                })?;
                rows.collect()
            })
            .await
            .unwrap(),
        Backend::Postgres(store) => store
            .client()
            .await
            .unwrap()
            .query(
                &SQL.replace(
                    "{cached}",
                    "(response -> 'usage' ->> 'cached_input_tokens')::BIGINT",
                ),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| {
                let mut sums = [0i64; 8];
                for (i, s) in sums.iter_mut().enumerate() {
                    *s = row.get(4 + i);
                }
                (row.get(0), row.get(1), row.get(2), row.get(3), sums)
            })
            .collect(),
    };
    rows.into_iter()
        .map(|(d, c, t, m, s)| ((d, c, t, m), s))
        .collect()
}

async fn the_migration_fills_the_rollup_from_the_records_stored_before(db: &TestDb) {
    let template = db.recorded_call("template").await;
    let prefix = format!("m{}", common::uuid_simple());
    let mut records = workload(&template, &prefix, 40);
    for r in &mut records {
        r.team = None;
    }
    db.store.write_calls(&records).await.unwrap();
    // Back to the schema before the rollup: its table, the calls' team and the two migrations' markers gone.
    // The records were written with no team (the table before the rollup had none).
    const UNDO: &str = "DROP TABLE chat_spend_daily; ALTER TABLE chat_calls DROP COLUMN team; \
        DELETE FROM tower_chat_migrations WHERE id IN ('tower-chat-persistence/0012_spend_rollup', \
        'tower-chat-persistence/0013_rollup_kept_by_the_writer');";
    let reopened: Box<dyn Store> = match &db.backend {
        Backend::Sqlite(store) => {
            store
                .run("undo", move |conn| conn.execute_batch(UNDO))
                .await
                .unwrap();
            Box::new(SqliteStore::open(store.path()).await.unwrap())
        }
        Backend::Postgres(store) => {
            store
                .client()
                .await
                .unwrap()
                .batch_execute(UNDO)
                .await
                .unwrap();
            Box::new(
                PostgresStore::builder(tower_chat_testkit::database_url().unwrap())
                    .schema(store.schema().unwrap())
                    .connect()
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(rollup_of(&*reopened).await, expected(&records));
    // And keeps it from then on, the calls' teams too.
    let mut more = records[1].clone();
    more.call_id = CallId::new(format!("{prefix}-after"));
    more.team = Some(CallerTeam::new(format!("{prefix}-red")));
    reopened.write_calls(&[more.clone()]).await.unwrap();
    let mut all = records;
    all.push(more);
    assert_eq!(rollup_of(&*reopened).await, expected(&all));
}

/// Another handle on the test's database: a second process's store, or a second replica's.
async fn second_handle(db: &TestDb) -> Box<dyn Store> {
    match &db.backend {
        Backend::Sqlite(store) => Box::new(SqliteStore::open(store.path()).await.unwrap()),
        Backend::Postgres(store) => Box::new(
            PostgresStore::builder(tower_chat_testkit::database_url().unwrap())
                .schema(store.schema().unwrap())
                .connect()
                .await
                .unwrap(),
        ),
    }
}

async fn two_store_handles_writing_at_once_count_every_call_once(db: &TestDb) {
    let template = db.recorded_call("template").await;
    let prefix = format!("c{}", common::uuid_simple());
    let records = workload(&template, &prefix, 120);
    let other = second_handle(db).await;
    // Both handles write every record, in batches of different sizes and orders, many batches at once: each
    // call's rows meet in both handles' transactions (the same rollup rows, and a final record that the other
    // handle may already have stored), and every call must be counted once.
    let mut in_flight: Vec<CallRecord> = records
        .iter()
        .step_by(4)
        .map(|r| {
            let mut started = r.clone();
            started.outcome = CallOutcome::InFlight;
            started.response.usage = Default::default();
            started.cost = None;
            started
        })
        .collect();
    db.store.write_calls(&in_flight).await.unwrap();
    in_flight.reverse();
    let reversed: Vec<CallRecord> = records.iter().rev().cloned().collect();
    let first = futures_util::future::join_all(records.chunks(7).map(|b| db.store.write_calls(b)));
    let second = futures_util::future::join_all(
        reversed
            .chunks(5)
            .chain(in_flight.chunks(3))
            .map(|b| other.write_calls(b)),
    );
    let (first, second) = tokio::join!(first, second);
    for outcome in first.into_iter().chain(second) {
        outcome.unwrap();
    }
    let want = expected(&records);
    assert_eq!(
        rollup(db).await,
        want,
        "the rollup differs from the records"
    );
    assert_eq!(rollup_of(&*other).await, want);
    assert_eq!(sums(rollup(db).await), sql_aggregate(db).await);
}

async fn the_rollup_sums_and_filters_by_team(db: &TestDb) {
    let template = db.recorded_call("template").await;
    let prefix = format!("t{}", common::uuid_simple());
    let records = workload(&template, &prefix, 60);
    db.store.write_calls(&records).await.unwrap();
    let week = SpendRollupQuery::days(
        UtcDay::from_days_since_epoch(MONDAY),
        UtcDay::from_days_since_epoch(MONDAY + 7),
    );
    let team_total = |team: &str| {
        let of_team: Vec<_> = records
            .iter()
            .filter(|r| r.team.as_ref().map(|t| t.as_str()) == Some(team))
            .collect();
        assert!(!of_team.is_empty());
        (
            of_team.len() as u64,
            of_team
                .iter()
                .map(|r| r.cost.map_or(0, |c| c.as_nanos()))
                .sum::<u64>(),
        )
    };
    let (red, blue) = (format!("{prefix}-red"), format!("{prefix}-blue"));
    // Grouped by team: one row per team, and one for the calls without one.
    let by_team = db
        .store
        .spend_rollup(&week.clone().by_team())
        .await
        .unwrap();
    let of = |team: Option<&str>| {
        by_team
            .iter()
            .find(|row| row.team.as_deref() == team)
            .map(|row| (row.calls, row.cost.as_nanos()))
    };
    assert_eq!(of(Some(&red)), Some(team_total(&red)));
    assert_eq!(of(Some(&blue)), Some(team_total(&blue)));
    let without = records.iter().filter(|r| r.team.is_none()).count() as u64;
    assert_eq!(of(None).map(|(calls, _)| calls), Some(without));
    // Filtered to one team: its calls only, however else grouped.
    let red_only = db
        .store
        .spend_rollup(&week.clone().team(red.as_str()).by_caller())
        .await
        .unwrap();
    assert_eq!(red_only.len(), 1, "{red_only:?}");
    assert_eq!(
        red_only[0].caller.as_ref().map(|c| c.as_str().to_owned()),
        Some(format!("{prefix}-alice"))
    );
    assert_eq!(
        (red_only[0].calls, red_only[0].cost.as_nanos()),
        team_total(&red)
    );
}
