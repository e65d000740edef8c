//! Upgrading from a build that kept a record journal beside the database: the records it acknowledged and left
//! there reach the tables on the first open, once, and the journal's files are gone afterwards.
//!
//! `tests/data/journal-upgrade.bin` is the journal such a build left when it was killed with three records
//! waiting, in two entries: first call `call-a1` of conversation `upgrade-a` (caller `alice`, "What is the
//! capital of France?" answered "Paris."), then, written together, a failed call of conversation `upgrade-b`
//! ("Anyone there?", the upstream `overloaded`) and call `call-a2` continuing `upgrade-a` ("And of Italy?"
//! answered "Rome.").

use std::fs::File;
use std::path::{Path, PathBuf};

use tower_chat::{AssistantMessage, CallerIdentity, ConversationId, Message};
use tower_chat_persistence::{CallId, CallLogQuery, CallOutcome, SqliteStore, Store};

const FIXTURE: &[u8] = include_bytes!("data/journal-upgrade.bin");

/// The journal's two files beside `database`.
fn journal_files(database: &Path) -> [PathBuf; 2] {
    ["-records", "-records-alt"].map(|suffix| {
        let mut path = database.as_os_str().to_owned();
        path.push(suffix);
        PathBuf::from(path)
    })
}

/// A database path with the fixture (or part of it) left beside it as the journal's first file, and its second
/// file empty, as the earlier build left them.
fn left_behind(dir: &Path, journal: &[u8]) -> PathBuf {
    let database = dir.join("chat.db");
    let [first, second] = journal_files(&database);
    std::fs::write(first, journal).unwrap();
    std::fs::write(second, b"").unwrap();
    database
}

fn assistant(text: &str) -> Message {
    Message::Assistant(AssistantMessage {
        content: text.into(),
        reasoning: vec![tower_chat::ReasoningPart::text("thinking")],
        tool_calls: Vec::new(),
        provider_parts: Vec::new(),
    })
}

async fn chat_calls(store: &SqliteStore) -> i64 {
    store
        .run("count", |conn| {
            conn.query_row("SELECT count(*) FROM chat_calls", [], |row| row.get(0))
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn the_records_of_a_journal_left_behind_reach_the_tables_once_and_the_journal_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let database = left_behind(dir.path(), FIXTURE);
    let store = SqliteStore::builder(&database)
        .search_index(true)
        .open()
        .await
        .unwrap();
    for file in journal_files(&database) {
        assert!(!file.exists(), "{} is still there", file.display());
    }

    let (a, b) = (
        ConversationId::new("upgrade-a"),
        ConversationId::new("upgrade-b"),
    );
    let calls = store.conversation_calls(&a).await.unwrap();
    let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["call-a1", "call-a2"]);
    for (call, text) in calls.iter().zip(["Paris.", "Rome."]) {
        assert_eq!(call.outcome, CallOutcome::Completed);
        assert_eq!(call.text(), text);
        assert_eq!(call.caller, Some(CallerIdentity::new("alice")));
        assert_eq!(call.model.as_deref(), Some("scripted-model-2"));
        assert_eq!(call.response.usage.input_tokens, 10);
    }
    assert_eq!(
        store.load_conversation(&a).await.unwrap(),
        [
            Message::user("What is the capital of France?"),
            assistant("Paris."),
            Message::user("And of Italy?"),
            assistant("Rome."),
        ]
    );
    let failed = store.conversation_calls(&b).await.unwrap();
    assert_eq!(failed.len(), 1);
    let error = failed[0].outcome.error().expect("a failed call");
    assert_eq!(
        (error.kind.as_str(), error.message.as_str()),
        ("upstream", "overloaded")
    );
    assert_eq!(
        failed[0].history(),
        [Message::user("Anyone there?")],
        "the failed call's request"
    );
    assert!(store.call(&CallId::new("call-a1")).await.unwrap().is_some());
    assert_eq!(chat_calls(&store).await, 3);
    // The journal's records are in the call log's full-text index, with their first message.
    let italy = store
        .call_log(&CallLogQuery {
            search: Some("italy rome".into()),
            ..CallLogQuery::default()
        })
        .await
        .unwrap();
    let found: Vec<(&str, &str)> = italy
        .entries
        .iter()
        .map(|e| (e.summary.call_id.as_str(), e.first_message.as_str()))
        .collect();
    assert_eq!(found, [("call-a2", "What is the capital of France?")]);

    // Opening again finds no journal and changes nothing.
    drop(store);
    let again = SqliteStore::open(&database).await.unwrap();
    assert_eq!(chat_calls(&again).await, 3);
    assert_eq!(again.load_conversation(&a).await.unwrap().len(), 4);
}

/// The last entry cut short (a process killed while appending it) was never acknowledged: the entry before it
/// reaches the tables, its two records do not, and the journal is removed all the same.
#[tokio::test]
async fn an_entry_cut_short_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let database = left_behind(dir.path(), &FIXTURE[..FIXTURE.len() - 7]);
    let store = SqliteStore::open(&database).await.unwrap();
    let calls = store
        .conversation_calls(&ConversationId::new("upgrade-a"))
        .await
        .unwrap();
    let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, ["call-a1"]);
    assert_eq!(chat_calls(&store).await, 1);
    for file in journal_files(&database) {
        assert!(!file.exists(), "{} is still there", file.display());
    }
}

/// A process of the earlier build still running on the database holds the journal's lock: its records are
/// that process's to write, so the files stay and nothing is replayed under it.
#[tokio::test]
async fn a_journal_another_process_holds_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let database = left_behind(dir.path(), FIXTURE);
    let [first, second] = journal_files(&database);
    let held = File::open(&first).unwrap();
    held.lock().unwrap();
    let store = SqliteStore::open(&database).await.unwrap();
    assert_eq!(chat_calls(&store).await, 0);
    assert_eq!(std::fs::read(&first).unwrap(), FIXTURE);
    assert!(second.exists());

    // Once it is gone, the next open takes the records.
    drop(held);
    drop(store);
    let store = SqliteStore::open(&database).await.unwrap();
    assert_eq!(chat_calls(&store).await, 3);
    assert!(!first.exists() && !second.exists());
}
