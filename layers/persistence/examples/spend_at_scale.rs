//! The spend rollup at scale, in PostgreSQL: `SPEND_SCALE_ROWS` call records (default 10,000,000) over 90 days,
//! 1,000 callers and 5 models, generated with `generate_series` in a database of their own (`spend_bench`,
//! created and dropped here), then the spend page's query and a per-key summary timed through
//! [`Store::spend_rollup`], beside the same sums taken over the records ([`Store::usage`]) and the rollup
//! query's `EXPLAIN ANALYZE`.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo run --release -p tower-chat-persistence --example spend_at_scale
//! ```
//!
//! The records are inserted with the rollup's triggers disabled and the rollup filled by one aggregate over
//! them afterwards (the migration's backfill): a trigger per generated row would only make the setup slower.
//! Batches of a million rows, each its own transaction.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_postgres::NoTls;
use tower_chat_persistence::{PostgresStore, SpendRollupQuery, Store, UsageQuery, UtcDay};

const DATABASE: &str = "spend_bench";
const DAYS: i64 = 90;
const BATCH: i64 = 1_000_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?;
    let rows: i64 = std::env::var("SPEND_SCALE_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000_000);
    let (admin, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE}"))
        .await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
        .await?;
    let result = run(&database_url(&url), rows).await;
    // Dropped whatever happened (the pool is gone by now: `run` owns it).
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))
        .await?;
    result
}

/// `url` with its database replaced by [`DATABASE`].
fn database_url(url: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = base.rsplit_once('/').map_or(base, |(b, _)| b);
    match query {
        Some(q) => format!("{base}/{DATABASE}?{q}"),
        None => format!("{base}/{DATABASE}"),
    }
}

async fn run(url: &str, rows: i64) -> Result<(), Box<dyn std::error::Error>> {
    let store = PostgresStore::connect(url).await?;
    let today = UtcDay::of(SystemTime::now());
    let first = today.plus(-(DAYS - 1));
    let start_micros = micros(first.start());
    let step = DAYS * 86_400_000_000 / rows;
    let client = store.client().await?;
    client
        .batch_execute("ALTER TABLE chat_calls DISABLE TRIGGER chat_spend_on_insert")
        .await?;
    let generated = Instant::now();
    for from in (0..rows).step_by(BATCH as usize) {
        let to = (from + BATCH).min(rows) - 1;
        client
            .execute(
                "INSERT INTO chat_calls (call_id, conversation_id, caller, round_index, started_at, \
                 first_token_at, ended_at, provider, model, status, input_tokens, output_tokens, response_text, \
                 request_messages, request_options, response, cost_nanos, request_len, first_message, \
                 omitted_messages) \
                 SELECT 'call-' || g, 'conv-' || (g / 4), 'key-' || (g % 1000), 0, $1 + g * $2, \
                   $1 + g * $2 + 300000, $1 + g * $2 + 900000, 'openai', \
                   (ARRAY['gpt-4o', 'gpt-4o-mini', 'claude-sonnet', 'claude-haiku', 'gemini-pro'])[1 + g % 5], \
                   CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'completed' END, 200 + g % 800, 20 + g % 300, '', \
                   '[]', '{}', \
                   jsonb_build_object('usage', jsonb_build_object('input_tokens', 200 + g % 800, \
                     'output_tokens', 20 + g % 300, 'cached_input_tokens', CASE WHEN g % 3 = 0 THEN 100 END), \
                     'finish_reason', 'stop'), \
                   CASE WHEN g % 97 = 0 THEN NULL ELSE 1000 * (g % 5000) END, 2, 'hello', \
                   CASE WHEN g % 200 = 0 THEN 1 END \
                 FROM generate_series($3::BIGINT, $4::BIGINT) AS g",
                &[&start_micros, &step, &from, &to],
            )
            .await?;
        eprintln!("{} rows", to + 1);
    }
    client
        .batch_execute(
            "INSERT INTO chat_spend_daily (day, caller, team, model, calls, refused_calls, error_calls, \
             input_tokens, output_tokens, cached_input_tokens, cost_nanos, unpriced_calls) \
             SELECT started_at / 86400000000, COALESCE(caller, ''), '', COALESCE(model, ''), COUNT(*), \
             SUM(CASE WHEN status = 'failed' AND omitted_messages IS NOT NULL THEN 1 ELSE 0 END), \
             SUM(CASE WHEN status IN ('failed', 'interrupted') AND omitted_messages IS NULL THEN 1 ELSE 0 END), \
             SUM(input_tokens), SUM(output_tokens), \
             SUM(COALESCE((response -> 'usage' ->> 'cached_input_tokens')::BIGINT, 0)), \
             SUM(COALESCE(cost_nanos, 0)), COUNT(*) - COUNT(cost_nanos) \
             FROM chat_calls WHERE status <> 'in_flight' GROUP BY 1, 2, 3, 4;
             ALTER TABLE chat_calls ENABLE TRIGGER chat_spend_on_insert;",
        )
        .await?;
    // One statement each: VACUUM refuses to run inside the implicit transaction of a multi-statement batch.
    for table in ["chat_calls", "chat_spend_daily"] {
        client
            .batch_execute(&format!("VACUUM ANALYZE {table}"))
            .await?;
    }
    let sizes = client
        .query_one(
            "SELECT (SELECT COUNT(*) FROM chat_calls), (SELECT COUNT(*) FROM chat_spend_daily), \
             pg_total_relation_size('chat_calls'), pg_total_relation_size('chat_spend_daily')",
            &[],
        )
        .await?;
    println!(
        "generated in {:.0} s: {} call records ({} MB), {} rollup rows ({} MB)",
        generated.elapsed().as_secs_f64(),
        sizes.get::<_, i64>(0),
        sizes.get::<_, i64>(2) / 1_000_000,
        sizes.get::<_, i64>(1),
        sizes.get::<_, i64>(3) / 1_000_000,
    );

    let month = SpendRollupQuery::days(today.plus(-29), today.plus(1));
    let page = month.clone().by_caller().by_model();
    let key = month.clone().caller("key-7");
    let quarter_key = SpendRollupQuery::days(first, today.plus(1))
        .caller("key-7")
        .by_model();
    report("spend page, 30 days by caller × model (rollup)", || async {
        store.spend_rollup(&page).await.map(|r| r.len())
    })
    .await?;
    report("one key's summary, 30 days (rollup)", || async {
        store.spend_rollup(&key).await.map(|r| r.len())
    })
    .await?;
    report("one key's summary, 90 days by model (rollup)", || async {
        store.spend_rollup(&quarter_key).await.map(|r| r.len())
    })
    .await?;
    let since = today.plus(-29).start();
    let until = today.plus(1).start();
    let records_query = UsageQuery::between(since, until).by_caller().by_model();
    report(
        "the same page summed over the records (Store::usage)",
        || async { store.usage(&records_query).await.map(|r| r.len()) },
    )
    .await?;
    let key_records = UsageQuery::between(since, until).caller("key-7");
    report(
        "one key's 30 days summed over the records (Store::usage)",
        || async { store.usage(&key_records).await.map(|r| r.len()) },
    )
    .await?;

    for (what, sql) in [
        (
            "spend page",
            "SELECT caller, model, SUM(calls), SUM(input_tokens), SUM(output_tokens), SUM(cost_nanos) \
             FROM chat_spend_daily WHERE day >= $1 AND day < $2 GROUP BY 1, 2 ORDER BY 1, 2",
        ),
        (
            "one key",
            "SELECT SUM(calls), SUM(input_tokens), SUM(output_tokens), SUM(cost_nanos) \
             FROM chat_spend_daily WHERE day >= $1 AND day < $2 AND caller = 'key-7'",
        ),
    ] {
        let plan = client
            .query(
                &format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"),
                &[&today.plus(-29).days_since_epoch(), &today.plus(1).days_since_epoch()],
            )
            .await?;
        println!("EXPLAIN ANALYZE, {what}:");
        for line in plan {
            println!("    {}", line.get::<_, String>(0));
        }
    }
    Ok(())
}

/// Run `query` once to warm the cache, then 7 times; print the median and the slowest.
async fn report<F, Fut>(what: &str, query: F) -> Result<(), Box<dyn std::error::Error>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<usize, tower_chat_persistence::StoreError>>,
{
    let groups = query().await?;
    let mut times = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        query().await?;
        times.push(started.elapsed());
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: median {:.1} ms, slowest {:.1} ms ({groups} groups)",
        ms(times[3]),
        ms(times[6])
    );
    Ok(())
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros() as i64
}
