//! A process killed with SIGKILL while calls stream and records are being written leaves a database that opens
//! and holds only whole records (SQLite: `PRAGMA integrity_check` passes too), and — with in-flight recording on —
//! names the calls the process was serving when it died.
//!
//! Each test re-runs its own binary as the child (selected by environment variables), waits until the child has
//! stored a first set of records and is busy streaming and writing more, then kills it, three times on the same
//! database.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use tower::{Layer, ServiceExt};
use tower_chat::{ChatError, ChatRequest, ChatStream, ChatStreamExt, ConversationId, Message};
use tower_chat_persistence::{
    CallOutcome, ConversationQuery, PersistenceLayer, PostgresStore, SqliteStore, Store,
};
use tower_chat_testkit::{database_url, hanging, scripted_stream, Delivery};

const CHILD_SQLITE: &str = "TOWER_CHAT_PERSISTENCE_CRASH_CHILD_SQLITE";
const CHILD_PG_SCHEMA: &str = "TOWER_CHAT_PERSISTENCE_CRASH_CHILD_PG_SCHEMA";

#[test]
fn a_process_killed_mid_stream_leaves_sqlite_consistent() {
    if let Ok(path) = std::env::var(CHILD_SQLITE) {
        return child(Target::Sqlite(path));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    kill_three_times(
        "a_process_killed_mid_stream_leaves_sqlite_consistent",
        (CHILD_SQLITE, path.to_str().unwrap()),
        || Target::Sqlite(path.to_str().unwrap().to_owned()),
    );
    // The next process closes what the dead ones left in flight.
    runtime().block_on(async {
        let store = SqliteStore::open(&path).await.unwrap();
        let closed = store
            .abandon_in_flight(std::time::SystemTime::now())
            .await
            .unwrap();
        assert!(closed >= 30, "{closed}");
        for summary in store
            .list_conversations(&ConversationQuery::new())
            .await
            .unwrap()
        {
            for call in store
                .conversation_calls(&summary.conversation_id)
                .await
                .unwrap()
            {
                assert!(
                    matches!(
                        call.outcome,
                        CallOutcome::Completed | CallOutcome::Interrupted { error: None }
                    ),
                    "{call:?}"
                );
            }
        }
    });
}

#[test]
fn a_process_killed_mid_stream_leaves_postgres_consistent() {
    if let Ok(schema) = std::env::var(CHILD_PG_SCHEMA) {
        return child(Target::Postgres(schema));
    }
    if database_url().is_none() {
        return;
    }
    let schema = format!("tcpersist_{}", common::uuid_simple());
    kill_three_times(
        "a_process_killed_mid_stream_leaves_postgres_consistent",
        (CHILD_PG_SCHEMA, &schema),
        || Target::Postgres(schema.clone()),
    );
    runtime().block_on(async {
        let store = open(&Target::Postgres(schema.clone())).await.1.unwrap();
        store
            .client()
            .await
            .unwrap()
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await
            .unwrap();
    });
}

enum Target {
    Sqlite(String),
    Postgres(String),
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn open(target: &Target) -> (Arc<dyn Store>, Option<PostgresStore>) {
    match target {
        Target::Sqlite(path) => (Arc::new(SqliteStore::open(path).await.unwrap()), None),
        Target::Postgres(schema) => {
            let store = PostgresStore::builder(database_url().unwrap())
                .schema(schema.clone())
                .connect()
                .await
                .unwrap();
            (Arc::new(store.clone()), Some(store))
        }
    }
}

fn kill_three_times(test_name: &str, env: (&str, &str), target: impl Fn() -> Target) {
    for round in 0..3 {
        let mut child = tower_chat_testkit::ProcessGroup::spawn(
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
                .env(env.0, env.1)
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
        )
        .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        // libtest prints "test <name> ... " without a newline before the child's own output.
        let mut wait_for = |signal: &str| {
            assert!(
                stdout.any(|line| line.unwrap().trim_end().ends_with(signal)),
                "the child stopped before printing {signal}"
            );
        };
        wait_for("READY");
        // Let it store more batches each round (it is writing the next one when it dies), then kill it without
        // warning (SIGKILL).
        for _ in 0..=round {
            wait_for("BATCH");
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());

        let stored = runtime().block_on(check(&target(), round));
        eprintln!("round {round}: {stored} completed records after the kill");
        // Each child stored 50 records before READY (and usually many more before the kill).
        assert!(
            stored >= 50 * (round + 1),
            "round {round}: {stored} records"
        );
    }
}

/// Reopen after the kill: integrity, decodability, and whole records only. Returns the number of records.
async fn check(target: &Target, round: u64) -> u64 {
    if let Target::Sqlite(path) = target {
        let store = SqliteStore::open(path).await.unwrap();
        let integrity: String = store
            .run("integrity", |conn| {
                conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
            })
            .await
            .unwrap();
        assert_eq!(integrity, "ok", "round {round}");
    }
    let (store, _) = open(target).await;
    let conversations = store
        .list_conversations(&ConversationQuery::new().limit(100_000))
        .await
        .unwrap();
    let (mut completed, mut hanging) = (0, 0);
    for summary in conversations {
        for call in store
            .conversation_calls(&summary.conversation_id)
            .await
            .unwrap()
        {
            let Some(Message::User { content }) = call.request.messages.last() else {
                panic!("{call:?}")
            };
            // Every stored record is whole: completed with its full answer, or the in-flight record of a call
            // the process was serving when it died; never half-written.
            match call.outcome {
                CallOutcome::Completed => {
                    completed += 1;
                    assert_eq!(call.text(), format!("answer to {content}"));
                    assert!(call.ended_at >= call.started_at);
                }
                CallOutcome::InFlight => {
                    assert!(call.response.messages.is_empty(), "{call:?}");
                    hanging += u64::from(content.to_string().starts_with("hang"));
                }
                _ => panic!("{call:?}"),
            }
        }
    }
    // The ten never-ending calls of each killed child are on record as in flight.
    assert_eq!(hanging, 10 * (round + 1), "round {round}");
    completed
}

fn child(target: Target) {
    runtime().block_on(async move {
        let (store, _) = open(&target).await;
        let layer = PersistenceLayer::shared(store)
            .max_batch(16)
            .record_in_flight(true);
        let chat = layer.layer(common::scripted(|req: &ChatRequest| {
            let Some(Message::User { content }) = req.messages.last() else {
                unreachable!()
            };
            let answer = format!("answer to {content}");
            if content.to_string().starts_with("hang") {
                let mut items = common::answer(&answer);
                items.truncate(3);
                hanging(items)
            } else {
                scripted_stream(Delivery::OneByOne, common::answer(&answer))
            }
        }));
        let pid = std::process::id();
        let ask = |text: String| {
            let request = ChatRequest::new(vec![Message::user(text)])
                .with_extension(ConversationId::new(format!("crash-{pid}")));
            Box::pin(chat.clone().oneshot(request))
                as futures_util::future::BoxFuture<'static, Result<ChatStream, ChatError>>
        };
        for i in 0..50 {
            ask(format!("q{i}"))
                .await
                .unwrap()
                .collect_response()
                .await
                .unwrap();
        }
        // Calls that stream forever: they are in flight when the process dies.
        let mut hanging = Vec::new();
        for i in 0..10 {
            let stream = ask(format!("hang{i}")).await.unwrap();
            hanging.push(stream);
        }
        layer.flush().await.unwrap();
        println!("READY");
        // Keep records flowing into the database until the parent kills us.
        let mut i = 50u64;
        loop {
            let calls: Vec<_> = (0..32)
                .map(|k| {
                    let call = ask(format!("q{}", i + k));
                    tokio::spawn(async move { call.await.unwrap().collect_response().await })
                })
                .collect();
            for call in calls {
                call.await.unwrap().unwrap();
            }
            println!("BATCH");
            i += 32;
        }
    });
}
