//! The call log on both stores (PostgreSQL through `DATABASE_URL`; skipped with a message when unset, a failure
//! under CI): filters, search by id and by message words through the full-text index, keyset paging that
//! inserts do not shift, and the index built on upgrade for calls recorded before it existed.

#[macro_use]
mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Backend, TestDb};
use tower_chat::{CallerIdentity, ConversationId, Message, Shared, ToolMessage};
use tower_chat_persistence::{
    CallId, CallLogCursor, CallLogPage, CallLogPosition, CallLogQuery, CallOutcome, CallRecord,
    CallStatus, PostgresStore, RecordedError, RequestId, SqliteStore, Store, StoreErrorKind,
};
use tower_chat_testkit::database_url;

both_stores!(
    filters_select_calls_by_caller_model_status_and_time,
    search_finds_calls_by_id_and_by_the_words_of_their_messages,
    search_finds_calls_the_way_incidents_are_reported,
    cursor_pages_neither_repeat_nor_skip_calls_when_new_ones_arrive,
    calls_recorded_before_the_call_log_are_indexed_on_open,
);

/// The log's time origin: every call starts `n` seconds after it.
fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
}

/// A call shaped from `template`: its id, conversation, caller, model, start (seconds after [`at`]'s origin),
/// the messages it sent and the answer it got.
struct Call<'a> {
    id: &'a str,
    conversation: &'a str,
    caller: &'a str,
    model: &'a str,
    start: u64,
    sent: Vec<Message>,
    answer: &'a str,
    outcome: CallOutcome,
}

impl Call<'_> {
    fn record(self, template: &CallRecord) -> CallRecord {
        let mut record = template.clone();
        record.call_id = CallId::new(self.id);
        record.conversation_id = ConversationId::new(self.conversation);
        record.caller = Some(CallerIdentity::new(self.caller));
        record.model = Some(self.model.into());
        record.started_at = at(self.start);
        record.first_token_at = Some(at(self.start) + Duration::from_millis(120));
        record.ended_at = at(self.start) + Duration::from_millis(900);
        record.request.messages = Shared::new(self.sent);
        record.response.messages = if self.answer.is_empty() {
            Vec::new()
        } else {
            vec![Message::assistant(self.answer)]
        };
        record.outcome = self.outcome;
        record
    }
}

fn call<'a>(id: &'a str, caller: &'a str, model: &'a str, start: u64) -> Call<'a> {
    Call {
        id,
        conversation: id,
        caller,
        model,
        start,
        sent: vec![Message::user(format!("question {id}"))],
        answer: "an answer",
        outcome: CallOutcome::Completed,
    }
}

fn ids(page: &CallLogPage) -> Vec<&str> {
    page.entries
        .iter()
        .map(|e| e.summary.call_id.as_str())
        .collect()
}

async fn log(db: &TestDb, query: CallLogQuery) -> CallLogPage {
    db.store.call_log(&query).await.unwrap()
}

async fn filters_select_calls_by_caller_model_status_and_time(db: &TestDb) {
    let template = db.recorded_call("template").await;
    let failed = CallOutcome::Failed {
        error: RecordedError {
            kind: "upstream".into(),
            message: "overloaded".into(),
        },
    };
    let calls = [
        call("a1", "alice", "gpt-small", 10),
        Call {
            outcome: failed,
            answer: "",
            ..call("a2", "alice", "gpt-large", 20)
        },
        call("b1", "bob", "gpt-small", 30),
        Call {
            outcome: CallOutcome::Cancelled,
            ..call("b2", "bob", "gpt-large", 40)
        },
        call("c1", "carol", "gpt-small", 50),
    ];
    let records: Vec<CallRecord> = calls.into_iter().map(|c| c.record(&template)).collect();
    db.store.write_calls(&records).await.unwrap();
    // Only this test's calls: the template's call started now, after them all.
    let base = CallLogQuery {
        until: Some(at(1_000)),
        ..CallLogQuery::default()
    };
    let page = log(db, base.clone()).await;
    assert_eq!(ids(&page), ["c1", "b2", "b1", "a2", "a1"]);
    assert_eq!(page.older, None);
    let first = &page.entries[4];
    assert_eq!(first.first_message, "question a1");
    assert_eq!(first.summary.model.as_deref(), Some("gpt-small"));
    assert_eq!(
        first.summary.time_to_first_token(),
        Some(Duration::from_millis(120))
    );
    assert_eq!(first.summary.latency(), Duration::from_millis(900));
    let by_caller = CallLogQuery {
        caller: Some(CallerIdentity::new("bob")),
        ..base.clone()
    };
    assert_eq!(ids(&log(db, by_caller).await), ["b2", "b1"]);
    let by_model = CallLogQuery {
        model: Some("gpt-large".into()),
        ..base.clone()
    };
    assert_eq!(ids(&log(db, by_model).await), ["b2", "a2"]);
    let failures = log(
        db,
        CallLogQuery {
            status: Some(CallStatus::Failed),
            ..base.clone()
        },
    )
    .await;
    assert_eq!(ids(&failures), ["a2"]);
    assert_eq!(
        failures.entries[0].summary.outcome.error().unwrap().message,
        "overloaded"
    );
    let cancelled = CallLogQuery {
        status: Some(CallStatus::Cancelled),
        ..base.clone()
    };
    assert_eq!(ids(&log(db, cancelled).await), ["b2"]);
    let window = CallLogQuery {
        since: Some(at(20)),
        until: Some(at(40)),
        ..CallLogQuery::default()
    };
    assert_eq!(ids(&log(db, window).await), ["b1", "a2"]);
    let combined = CallLogQuery {
        caller: Some(CallerIdentity::new("alice")),
        model: Some("gpt-small".into()),
        status: Some(CallStatus::Completed),
        ..base.clone()
    };
    assert_eq!(ids(&log(db, combined).await), ["a1"]);
    let nobody = CallLogQuery {
        caller: Some(CallerIdentity::new("mallory")),
        ..base
    };
    assert!(log(db, nobody).await.entries.is_empty());
}

async fn search_finds_calls_by_id_and_by_the_words_of_their_messages(db: &TestDb) {
    let template = db.recorded_call("template").await;
    let first_round = vec![
        Message::system("You are a travel guide."),
        Message::user("Which fjord should I visit in Norway?"),
    ];
    let mut second_round = first_round.clone();
    second_round.push(Message::assistant("The Geirangerfjord is the classic."));
    second_round.push(Message::user("And where can I eat salmon there?"));
    let mut tool_round = second_round.clone();
    tool_round.push(Message::assistant("Let me look it up."));
    tool_round.push(Message::Tool(ToolMessage::success(
        "t1",
        "restaurants",
        "Brasserie Sjøhuset serves salmon",
    )));
    let records = [
        Call {
            conversation: "trip",
            sent: first_round,
            answer: "The Geirangerfjord is the classic.",
            ..call("trip-1", "alice", "m", 10)
        },
        Call {
            conversation: "trip",
            sent: second_round,
            answer: "Try the harbour.",
            ..call("trip-2", "alice", "m", 20)
        },
        Call {
            conversation: "trip",
            sent: tool_round,
            answer: "Sjøhuset, by the water.",
            ..call("trip-3", "alice", "m", 30)
        },
        Call {
            sent: vec![Message::user("Summarise the quarterly report")],
            answer: "Revenue grew; salmon exports too.",
            ..call("report-1", "bob", "m", 40)
        },
    ]
    .map(|c| c.record(&template));
    db.store.write_calls(&records).await.unwrap();
    let search = |text: &str| CallLogQuery {
        search: Some(text.into()),
        ..CallLogQuery::default()
    };
    // An exact call id, or a conversation id (every call of it).
    assert_eq!(ids(&log(db, search("trip-2")).await), ["trip-2"]);
    assert_eq!(
        ids(&log(db, search(" trip ")).await),
        ["trip-3", "trip-2", "trip-1"]
    );
    // Words of a message: indexed with the call that sent or produced it, case-insensitively.
    assert_eq!(ids(&log(db, search("FJORD")).await), ["trip-1"]);
    assert_eq!(ids(&log(db, search("Geirangerfjord")).await), ["trip-1"]);
    assert_eq!(ids(&log(db, search("harbour")).await), ["trip-2"]);
    assert_eq!(
        ids(&log(db, search("salmon")).await),
        ["report-1", "trip-3", "trip-2"]
    );
    // Every word must match, in any order; a tool's result is searchable; non-ASCII words match as written.
    assert_eq!(ids(&log(db, search("salmon brasserie")).await), ["trip-3"]);
    assert_eq!(ids(&log(db, search("Sjøhuset")).await), ["trip-3"]);
    assert_eq!(ids(&log(db, search("report revenue")).await), ["report-1"]);
    // Query syntax is read as words, never as operators or an error.
    assert_eq!(
        ids(&log(db, search("\"salmon\" AND NOT report*")).await),
        Vec::<&str>::new()
    );
    assert_eq!(ids(&log(db, search("salmon -")).await).len(), 3);
    assert!(log(db, search("--")).await.entries.is_empty());
    assert!(log(db, search("kangaroo")).await.entries.is_empty());
    // Search narrows the other filters, and the first message is the conversation's first user message.
    let bob = log(
        db,
        CallLogQuery {
            caller: Some(CallerIdentity::new("bob")),
            ..search("salmon")
        },
    )
    .await;
    assert_eq!(ids(&bob), ["report-1"]);
    let third = log(db, search("trip-3")).await;
    assert_eq!(
        third.entries[0].first_message,
        "Which fjord should I visit in Norway?"
    );
    // An in-flight record replaced by the final one leaves one entry, found by the final answer's words.
    let mut in_flight = Call {
        sent: vec![Message::user("Is the ferry running?")],
        answer: "",
        outcome: CallOutcome::InFlight,
        ..call("ferry", "carol", "m", 50)
    }
    .record(&template);
    db.store.write_calls(&[in_flight.clone()]).await.unwrap();
    assert_eq!(ids(&log(db, search("ferry running")).await), ["ferry"]);
    in_flight.outcome = CallOutcome::Completed;
    in_flight.response.messages = vec![Message::assistant("Every hour from the quay.")];
    db.store.write_calls(&[in_flight]).await.unwrap();
    assert_eq!(ids(&log(db, search("quay")).await), ["ferry"]);
    assert_eq!(ids(&log(db, search("ferry running")).await), ["ferry"]);
}

/// What an operator is told about an incident: the `x-request-id` a client received, the conversation id it
/// sent (stored qualified by its caller), the caller, the model, or the start of a word.
async fn search_finds_calls_the_way_incidents_are_reported(db: &TestDb) {
    let template = db.recorded_call("template").await;
    let mut zanzibar = Call {
        conversation: "dora/holiday",
        sent: vec![Message::user("Is Zanzibar warm in March?")],
        answer: "Yes, around thirty degrees.",
        ..call("incident-1", "dora", "model-z", 10)
    }
    .record(&template);
    zanzibar.request_id = Some(RequestId::new("0193-req-zanzibar"));
    let other = Call {
        conversation: "erin/holiday-plans",
        sent: vec![Message::user("Book a zany hotel")],
        answer: "Booked.",
        ..call("incident-2", "erin", "model-y", 20)
    }
    .record(&template);
    db.store.write_calls(&[zanzibar, other]).await.unwrap();
    let search = |text: &str| CallLogQuery {
        search: Some(text.into()),
        ..CallLogQuery::default()
    };
    assert_eq!(
        ids(&log(db, search("0193-req-zanzibar")).await),
        ["incident-1"]
    );
    assert_eq!(ids(&log(db, search("holiday")).await), ["incident-1"]);
    assert_eq!(ids(&log(db, search("dora/holiday")).await), ["incident-1"]);
    assert_eq!(ids(&log(db, search("erin")).await), ["incident-2"]);
    assert_eq!(ids(&log(db, search("model-z")).await), ["incident-1"]);
    // Word prefixes, case-insensitively; every word of the search must begin a word of the messages.
    assert_eq!(ids(&log(db, search("zanzib")).await), ["incident-1"]);
    assert_eq!(
        ids(&log(db, search("ZAN")).await),
        ["incident-2", "incident-1"]
    );
    assert_eq!(ids(&log(db, search("zan hot")).await), ["incident-2"]);
    assert_eq!(ids(&log(db, search("thirt marc")).await), ["incident-1"]);
    // A prefix begins a word: the middle of one finds nothing.
    assert!(log(db, search("anzibar")).await.entries.is_empty());
}

async fn cursor_pages_neither_repeat_nor_skip_calls_when_new_ones_arrive(db: &TestDb) {
    let template = db.recorded_call("template").await;
    // Two calls share a start: the id orders them.
    let starts = [10, 20, 30, 30, 40, 50, 60];
    let records: Vec<CallRecord> = starts
        .iter()
        .enumerate()
        .map(|(i, &start)| call(&format!("p{i}"), "alice", "m", start).record(&template))
        .collect();
    db.store.write_calls(&records).await.unwrap();
    let page = |position: CallLogPosition| CallLogQuery {
        caller: Some(CallerIdentity::new("alice")),
        until: Some(at(1_000)),
        position,
        limit: Some(3),
        ..CallLogQuery::default()
    };
    let first = log(db, page(CallLogPosition::Latest)).await;
    assert_eq!(ids(&first), ["p6", "p5", "p4"]);
    let newest_shown = CallLogCursor::of(&first.entries[0].summary);
    // Calls arriving between two pages: newer ones do not shift the older pages.
    let newer: Vec<CallRecord> = [("n0", 70), ("n1", 80)]
        .iter()
        .map(|&(id, start)| call(id, "alice", "m", start).record(&template))
        .collect();
    db.store.write_calls(&newer).await.unwrap();
    let cursor = CallLogCursor::decode(&first.older.clone().unwrap().encode()).unwrap();
    let second = log(db, page(CallLogPosition::Before(cursor))).await;
    assert_eq!(ids(&second), ["p3", "p2", "p1"]);
    let third = log(
        db,
        page(CallLogPosition::Before(second.older.clone().unwrap())),
    )
    .await;
    assert_eq!(ids(&third), ["p0"]);
    assert_eq!(third.older, None);
    // What arrived after the newest call shown, newest first.
    let arrived = log(db, page(CallLogPosition::After(newest_shown.clone()))).await;
    assert_eq!(ids(&arrived), ["n1", "n0"]);
    assert_eq!(arrived.older, None);
    // More arrivals than a page: the oldest of them come first, so the next poll continues without a gap.
    let burst: Vec<CallRecord> = (0..4)
        .map(|i| call(&format!("q{i}"), "alice", "m", 90 + i).record(&template))
        .collect();
    db.store.write_calls(&burst).await.unwrap();
    let newest = CallLogCursor::of(&arrived.entries[0].summary);
    let poll = log(db, page(CallLogPosition::After(newest))).await;
    assert_eq!(ids(&poll), ["q2", "q1", "q0"]);
    let next = CallLogCursor::of(&poll.entries[0].summary);
    assert_eq!(
        ids(&log(db, page(CallLogPosition::After(next))).await),
        ["q3"]
    );
}

/// A database whose calls were recorded before the call log: the log's migration and its index are undone,
/// then the store opens it again, as a build with the log opens a database an older build wrote.
async fn calls_recorded_before_the_call_log_are_indexed_on_open(db: &TestDb) {
    let template = db.recorded_call("template").await;
    let records = [
        Call {
            sent: vec![Message::user("How tall is Galdhøpiggen?")],
            answer: "2,469 metres.",
            ..call("old-1", "alice", "m", 10)
        },
        call("old-2", "bob", "m", 20),
    ]
    .map(|c| c.record(&template));
    db.store.write_calls(&records).await.unwrap();
    let reopened: Box<dyn Store> = match &db.backend {
        Backend::Sqlite(store) => {
            // What the index holds of the calls goes too (a search first, so that the index has taken them).
            db.store.call_log(&words("metres")).await.unwrap();
            let index_file = format!("{}-search", store.path().display());
            store
                .run("undo the call log", move |conn| {
                    conn.execute("ATTACH DATABASE ?1 AS old_index", [index_file])?;
                    conn.execute_batch(
                        "DELETE FROM old_index.chat_calls_search; DETACH DATABASE old_index; \
                         DROP INDEX chat_calls_unindexed; \
                         DROP INDEX chat_calls_by_start; ALTER TABLE chat_calls DROP COLUMN first_message; \
                         DELETE FROM tower_chat_migrations WHERE id = 'tower-chat-persistence/0010_call_log';",
                    )
                })
                .await
                .unwrap();
            Box::new(
                SqliteStore::builder(store.path())
                    .search_index(true)
                    .open()
                    .await
                    .unwrap(),
            )
        }
        Backend::Postgres(store) => {
            store
                .client()
                .await
                .unwrap()
                .batch_execute(
                    "DROP INDEX chat_calls_search; DROP INDEX chat_calls_unindexed; DROP INDEX chat_calls_by_start; \
                     ALTER TABLE chat_calls DROP COLUMN first_message, DROP COLUMN search; \
                     DELETE FROM tower_chat_migrations WHERE id = 'tower-chat-persistence/0010_call_log';",
                )
                .await
                .unwrap();
            Box::new(
                PostgresStore::builder(database_url().unwrap())
                    .schema(store.schema().unwrap())
                    .connect()
                    .await
                    .unwrap(),
            )
        }
    };
    let found = reopened
        .call_log(&CallLogQuery {
            search: Some("galdhøpiggen metres".into()),
            ..CallLogQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&found), ["old-1"]);
    assert_eq!(found.entries[0].first_message, "How tall is Galdhøpiggen?");
    let all = reopened
        .call_log(&CallLogQuery {
            until: Some(at(1_000)),
            ..CallLogQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&all), ["old-2", "old-1"]);
    assert_eq!(all.entries[0].first_message, "question old-2");
}

/// SQLite's index is a file of its own, filled off the write path: once a search through the store that wrote
/// the calls has found them, another store on the same file finds them too, from the index file alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_another_store_on_the_file_finds_the_calls_the_first_one_indexed() {
    let db = TestDb::sqlite().await;
    let template = db.recorded_call("template").await;
    let record = Call {
        sent: vec![Message::user("Which glacier feeds Jostedalen?")],
        answer: "Nigardsbreen.",
        ..call("glacier-1", "alice", "m", 10)
    }
    .record(&template);
    db.store.write_calls(&[record]).await.unwrap();
    assert_eq!(ids(&log(&db, words("Nigardsbreen")).await), ["glacier-1"]);
    let Backend::Sqlite(store) = &db.backend else {
        unreachable!("a SQLite test database")
    };
    let other = SqliteStore::builder(store.path())
        .search_index(true)
        .open()
        .await
        .unwrap();
    let page = other.call_log(&words("Jostedalen")).await.unwrap();
    assert_eq!(ids(&page), ["glacier-1"]);
    db.cleanup().await;
}

/// A store opened without the index (the default) builds none: no index file, and a search is refused with an
/// error of its own kind naming the option, while the log still lists the calls. Opened with it later, the store indexes every
/// call recorded so far, and does so again when the index file is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_store_without_the_index_refuses_searches_and_a_new_index_holds_every_recorded_call(
) {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("plain.db");
    let index_file = dir.path().join("plain.db-search");
    let plain = SqliteStore::open(&database).await.unwrap();
    let template = TestDb::sqlite().await.recorded_call("template").await;
    let records = [
        Call {
            sent: vec![Message::user("Where does the Flåm railway start?")],
            answer: "At Myrdal.",
            ..call("rail-1", "alice", "m", 10)
        },
        call("rail-2", "bob", "m", 20),
    ]
    .map(|c| c.record(&template));
    plain.write_calls(&records).await.unwrap();
    let refused = plain.call_log(&words("Myrdal")).await.unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::NoSearchIndex, "{refused}");
    assert!(
        refused.to_string().contains("search_index(true)"),
        "{refused}"
    );
    let listed = plain
        .call_log(&CallLogQuery {
            until: Some(at(1_000)),
            ..CallLogQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&listed), ["rail-2", "rail-1"]);
    assert!(
        !index_file.exists(),
        "a store without the index made {index_file:?}"
    );
    drop(plain);

    for round in ["first open with the index", "index file deleted"] {
        let indexed = SqliteStore::builder(&database)
            .search_index(true)
            .open()
            .await
            .unwrap();
        let found = indexed.call_log(&words("myrdal railway")).await.unwrap();
        assert_eq!(ids(&found), ["rail-1"], "{round}");
        assert_eq!(
            ids(&indexed.call_log(&words("question")).await.unwrap()),
            ["rail-2"],
            "{round}"
        );
        drop(indexed);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(dir.path().join(format!("plain.db-search{suffix}")));
        }
    }
}

/// A search for `text` over every call.
fn words(text: &str) -> CallLogQuery {
    CallLogQuery {
        search: Some(text.into()),
        ..CallLogQuery::default()
    }
}
