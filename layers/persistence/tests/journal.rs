//! The SQLite store's record journal: a record is durable once appended there, and the tables take it later.
//! Nothing is lost if the process dies in between, and no read through the store misses it meanwhile.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{answer, scripted, stream_of, Shape};
use tower::{Layer, ServiceExt};
use tower_chat::{ChatRequest, ChatStreamExt, ConversationId, Message};
use tower_chat_persistence::{
    CallQuery, ConversationQuery, Durability, Migration, PersistenceLayer, SqliteStore, Store,
};

/// A store whose records wait in the journal until something reads (or the test ends).
async fn lazy_store(path: &Path) -> SqliteStore {
    SqliteStore::builder(path)
        .index_delay(Duration::from_secs(3600))
        .open()
        .await
        .unwrap()
}

/// `n` calls of one conversation through a fail-closed layer: each finished call's record is durable.
async fn calls(store: &SqliteStore, conversation: &ConversationId, n: usize) {
    let chat = PersistenceLayer::new(store.clone()).layer(scripted(|_: &ChatRequest| {
        stream_of(answer("fine"), Shape::Streaming)
    }));
    for i in 0..n {
        let request = ChatRequest::new(vec![Message::user(format!("question {i}"))])
            .with_extension(conversation.clone());
        let response = chat
            .clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "fine");
    }
}

/// The bytes in the journal's two files.
fn journal_len(database: &Path) -> u64 {
    ["-records", "-records-alt"]
        .iter()
        .map(|suffix| {
            let mut path = database.as_os_str().to_owned();
            path.push(suffix);
            std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
        })
        .sum()
}

/// Wait (up to 10 s) until `other`, a store on another connection, sees `n` records of `conversation`.
async fn wait_until_seen(other: &SqliteStore, conversation: &ConversationId, n: usize, why: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while other.conversation_calls(conversation).await.unwrap().len() < n {
        assert!(std::time::Instant::now() < deadline, "{why}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a process killed now would leave: the database's files (the journal's two included) copied into
/// `into`, as they are.
fn killed_copy(database: &Path, into: &Path) -> std::path::PathBuf {
    std::fs::create_dir(into).unwrap();
    let name = database.file_name().unwrap();
    for suffix in ["", "-wal", "-records", "-records-alt"] {
        let from = format!("{}{suffix}", database.display());
        if Path::new(&from).exists() {
            std::fs::copy(&from, format!("{}{suffix}", into.join(name).display())).unwrap();
        }
    }
    into.join(name)
}

/// The state a killed process leaves: its files as they are, the tables never told about the journal's records.
#[tokio::test]
async fn records_a_killed_process_left_in_the_journal_reach_the_tables_on_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let store = lazy_store(&path).await;
    let conversation = ConversationId::new("left-behind");
    calls(&store, &conversation, 3).await;
    assert!(
        journal_len(&path) > 0,
        "the records should wait in the journal"
    );
    let copy = killed_copy(&path, &dir.path().join("copy"));
    // The original process "dies" here: its store never indexes anything again.
    std::mem::forget(store);

    let reopened = SqliteStore::open(&copy).await.unwrap();
    let records = reopened.conversation_calls(&conversation).await.unwrap();
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.text() == "fine"));
    assert_eq!(journal_len(&copy), 0, "replayed, then emptied");
    // Replaying again (the journal emptied or not) changes nothing.
    drop(reopened);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = SqliteStore::open(&copy).await.unwrap();
    assert_eq!(
        again.conversation_calls(&conversation).await.unwrap().len(),
        3
    );
}

/// The listing reads run on a connection of their own: they must not answer before the waiting records are in
/// the tables.
#[tokio::test]
async fn listing_reads_see_every_record_written_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.db");
    let store = lazy_store(&path).await;
    let conversation = ConversationId::new("listed");
    calls(&store, &conversation, 2).await;
    assert!(journal_len(&path) > 0);
    let summaries = store.call_summaries(&CallQuery::default()).await.unwrap();
    assert_eq!(summaries.len(), 2);
    let conversations = store
        .list_conversations(&ConversationQuery::new())
        .await
        .unwrap();
    assert_eq!(conversations.len(), 1);
    assert_eq!(conversations[0].conversation_id, conversation);
    assert_eq!(journal_len(&path), 0);
}

/// One store at a time holds a database's journal: a second store on the same file commits each batch to the
/// tables, sees the first's records once they are in the tables, and both see every record.
#[tokio::test]
async fn a_second_store_on_the_same_file_commits_to_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let first = lazy_store(&path).await;
    let second = lazy_store(&path).await;
    let (one, two) = (ConversationId::new("one"), ConversationId::new("two"));
    calls(&first, &one, 2).await;
    calls(&second, &two, 2).await;
    // The first store's records wait in its journal (another connection does not see them yet); the second's
    // are in the tables already.
    assert!(journal_len(&path) > 0);
    assert_eq!(second.conversation_calls(&one).await.unwrap().len(), 0);
    assert_eq!(second.conversation_calls(&two).await.unwrap().len(), 2);
    // `Store::flush` (what `PersistenceLayer::flush` ends with) makes them visible to every connection.
    first.flush().await.unwrap();
    assert_eq!(journal_len(&path), 0);
    assert_eq!(second.conversation_calls(&one).await.unwrap().len(), 2);
    assert_eq!(first.conversation_calls(&two).await.unwrap().len(), 2);
}

/// While nothing else reaches the store, its records go into the tables after `index_delay`: another connection
/// sees them without anyone reading or flushing through the store.
#[tokio::test]
async fn an_idle_store_indexes_its_records_after_the_delay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.db");
    let store = SqliteStore::builder(&path)
        .index_delay(Duration::from_millis(50))
        .open()
        .await
        .unwrap();
    let other = lazy_store(&path).await;
    let conversation = ConversationId::new("idle");
    calls(&store, &conversation, 2).await;
    wait_until_seen(
        &other,
        &conversation,
        2,
        "the idle store never indexed its records",
    )
    .await;
    assert_eq!(journal_len(&path), 0);
}

/// A migration that makes every record of the conversation `slow` take a while to insert: a trigger on
/// `chat_calls` writing the row count of a three-way cross join of a 450-row table (91 M row visits, about a
/// second) into a table.
fn slow_inserts() -> Migration {
    let values = (0..450)
        .map(|i| format!("({i})"))
        .collect::<Vec<_>>()
        .join(", ");
    Migration::new(
        "journal-test/0001_slow_inserts",
        format!(
            "CREATE TABLE burn (n INTEGER);
             CREATE TABLE burnt (n INTEGER);
             INSERT INTO burn (n) VALUES {values};
             CREATE TRIGGER slow_insert AFTER INSERT ON chat_calls WHEN NEW.conversation_id = 'slow'
             BEGIN INSERT INTO burnt (n) SELECT count(*) FROM burn a, burn b, burn c; END;"
        ),
    )
}

/// A call ending while the tables take the journal's records does not wait for that transaction. With the
/// default durability the writer task appends its record to the journal's other file itself; with
/// `Durability::PowerLoss` (every append synced, on the store's thread) the thread appends and acknowledges it
/// between two records of the transaction, and the record joins it.
async fn a_call_ending_during_an_index_transaction_does_not_wait_for_its_commit(
    durability: Durability,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let store = SqliteStore::builder(&path)
        .index_delay(Duration::from_secs(3600))
        .durability(durability)
        .migration(slow_inserts())
        .open()
        .await
        .unwrap();
    let other = lazy_store(&path).await;
    let (slow, quick) = (ConversationId::new("slow"), ConversationId::new("quick"));
    calls(&store, &slow, 2).await;
    let slow_entries = journal_len(&path);
    // The index transaction: two slow records, then the commit.
    let flushing = tokio::spawn({
        let store = store.clone();
        async move { store.flush().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    calls(&store, &quick, 1).await;
    let quick_took = started.elapsed();
    // Acknowledged while the transaction is still open: another connection sees none of its records yet.
    assert!(
        !flushing.is_finished(),
        "{durability:?}: the call waited for the index transaction ({quick_took:?})"
    );
    assert_eq!(
        other.conversation_calls(&slow).await.unwrap().len(),
        0,
        "{durability:?}: the call waited for the index transaction ({quick_took:?})"
    );
    if durability == Durability::Process {
        // A process killed now leaves the slow records in one journal file (taken, not committed) and the quick
        // one in the other: the next open replays both.
        let copy = killed_copy(&path, &dir.path().join("during"));
        let reopened = SqliteStore::open(&copy).await.unwrap();
        assert_eq!(reopened.conversation_calls(&slow).await.unwrap().len(), 2);
        assert_eq!(reopened.conversation_calls(&quick).await.unwrap().len(), 1);
    }
    flushing.await.unwrap().unwrap();
    assert_eq!(other.conversation_calls(&slow).await.unwrap().len(), 2);
    let joined = other.conversation_calls(&quick).await.unwrap().len();
    if durability == Durability::PowerLoss {
        assert_eq!(joined, 1, "appended by the thread: in the same transaction");
        assert_eq!(journal_len(&path), 0);
    } else {
        // Appended to the other file after the records were taken: waiting for the next transaction. The file
        // holding the slow records was emptied; the other keeps the quick one, which a process killed now
        // still has.
        assert_eq!(joined, 0);
        let quick_entry = journal_len(&path);
        assert!(
            quick_entry > 0 && quick_entry < slow_entries,
            "the journal holds {quick_entry} bytes (the slow records took {slow_entries})"
        );
        let copy = killed_copy(&path, &dir.path().join("after"));
        let reopened = SqliteStore::open(&copy).await.unwrap();
        assert_eq!(reopened.conversation_calls(&quick).await.unwrap().len(), 1);
        store.flush().await.unwrap();
        assert_eq!(other.conversation_calls(&quick).await.unwrap().len(), 1);
        assert_eq!(journal_len(&path), 0, "both files emptied");
    }
}

#[tokio::test]
async fn a_call_ending_during_an_index_transaction_appends_its_record_itself() {
    a_call_ending_during_an_index_transaction_does_not_wait_for_its_commit(Durability::Process)
        .await;
}

#[tokio::test]
async fn a_synced_call_ending_during_an_index_transaction_joins_it() {
    a_call_ending_during_an_index_transaction_does_not_wait_for_its_commit(Durability::PowerLoss)
        .await;
}

/// Once a batch of records (128) waits, the tables take them without waiting for the idle delay: another
/// connection sees them while the store is busy.
#[tokio::test]
async fn a_store_indexes_once_a_batch_of_records_waits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db");
    let store = lazy_store(&path).await;
    let other = lazy_store(&path).await;
    let conversation = ConversationId::new("batch");
    calls(&store, &conversation, 128).await;
    wait_until_seen(
        &other,
        &conversation,
        128,
        "128 waiting records were not indexed",
    )
    .await;
}

/// Writes `tests/data/journal-upgrade.bin`: the journal a process of this build leaves when it is killed with
/// three records waiting (two calls of one conversation with a caller, and a failed call of another). A later
/// build that no longer keeps a journal must index them on open; its test reads this file. Run by hand:
/// `cargo test -p tower-chat-persistence --test journal -- --ignored write_the_upgrade_fixture`.
#[tokio::test]
#[ignore = "writes a fixture into the source tree"]
async fn write_the_upgrade_fixture() {
    use tower_chat::{CallerIdentity, ChatError, ErrorKind};
    use tower_chat_persistence::{CallId, RequestedCallId};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("upgrade.db");
    let store = lazy_store(&path).await;
    let chat = PersistenceLayer::new(store.clone()).layer(scripted(|request: &ChatRequest| {
        let question = match request.messages.last() {
            Some(Message::User { content }) => content.as_str(),
            _ => "",
        };
        match question {
            "What is the capital of France?" => stream_of(answer("Paris."), Shape::Ready),
            "And of Italy?" => stream_of(answer("Rome."), Shape::Ready),
            _ => stream_of(
                vec![Err(ChatError::new(ErrorKind::Upstream, "overloaded"))],
                Shape::Ready,
            ),
        }
    }));
    let (a, b) = (
        ConversationId::new("upgrade-a"),
        ConversationId::new("upgrade-b"),
    );
    let call = |messages: Vec<Message>, conversation: &ConversationId, id: &str| {
        ChatRequest::new(messages)
            .with_extension(conversation.clone())
            .with_extension(CallerIdentity::new("alice"))
            .with_extension(RequestedCallId(CallId::new(id)))
    };
    let first = vec![Message::user("What is the capital of France?")];
    let paris = chat
        .clone()
        .oneshot(call(first.clone(), &a, "call-a1"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let failed = chat
        .clone()
        .oneshot(ChatRequest::new(vec![Message::user("Anyone there?")]).with_extension(b.clone()))
        .await
        .unwrap()
        .collect_response()
        .await;
    assert!(failed.is_err());
    let mut second = first;
    second.extend(paris.messages.iter().cloned());
    second.push(Message::user("And of Italy?"));
    // Fail-closed: its `Finish` means its record, and the failed one handed over before it, are in the journal.
    chat.oneshot(call(second, &a, "call-a2"))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let journal = std::fs::read(format!("{}-records", path.display())).unwrap();
    assert_eq!(journal_len(&path), journal.len() as u64, "all in one file");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/journal-upgrade.bin");
    std::fs::write(out, journal).unwrap();
    std::mem::forget(store);
}
