//! Message-level storage: a conversation's storage grows linearly with its length, also for a stateless client
//! that resends its whole history with every request and sends no conversation id.
//!
//! Sizes are SQLite page counts (`PRAGMA page_count` × `page_size`: the database's logical size, WAL
//! included), deterministic for a given script: no time is measured.

mod common;

use common::{answer, scripted};
use tower::{Layer, ServiceExt};
use tower_chat::{CallerIdentity, ChatRequest, ChatStreamExt, ConversationId, Message};
use tower_chat_persistence::{PersistenceLayer, SqliteStore, Store};
use tower_chat_testkit::{scripted_stream, Delivery};

/// Bytes the database holds: pages in use times the page size (free pages left out).
async fn size(store: &SqliteStore) -> u64 {
    store
        .run("size", |conn| {
            conn.query_row(
                "SELECT (page_count - freelist_count) * page_size \
                 FROM pragma_page_count, pragma_freelist_count, pragma_page_size",
                [],
                |row| row.get::<_, i64>(0),
            )
        })
        .await
        .unwrap() as u64
}

async fn count(store: &SqliteStore, table: &'static str) -> i64 {
    store
        .run("count", move |conn| {
            conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
                row.get(0)
            })
        })
        .await
        .unwrap()
}

/// A chat client that keeps the history itself and resends all of it every turn (Chat Completions style),
/// with a fixed conversation id or none. Returns the history and the database size after each turn.
async fn converse(
    store: &SqliteStore,
    turns: usize,
    conversation: Option<&ConversationId>,
    history: &mut Vec<Message>,
) -> Vec<u64> {
    let layer = PersistenceLayer::new(store.clone());
    let chat = layer.layer(scripted(|request: &ChatRequest| {
        let n = request.messages.len();
        scripted_stream(Delivery::AllAtOnce, answer(&format!(
                "Answer number {n}: a short reply of about the length a chat model gives to a short question."
            )))
    }));
    let mut sizes = Vec::with_capacity(turns);
    for _ in 0..turns {
        let turn = history.len() / 2;
        history.push(Message::user(format!(
            "Question {turn}: tell me one more thing about tower middleware, briefly please."
        )));
        let mut request =
            ChatRequest::new(history.clone()).with_extension(CallerIdentity::new("alice"));
        if let Some(id) = conversation {
            request = request.with_extension(id.clone());
        }
        // Fail-closed: the record is stored once the call has finished.
        let response = chat
            .clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        history.extend(response.messages);
        sizes.push(size(store).await);
    }
    sizes
}

#[tokio::test]
async fn storage_grows_linearly_with_and_without_a_conversation_id() {
    for conversation in [Some(ConversationId::new("linear")), None] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chat.db");
        let store = SqliteStore::open(&path).await.unwrap();
        let empty = size(&store).await;
        let mut history = Vec::new();
        let mut sizes = converse(&store, 100, conversation.as_ref(), &mut history).await;
        // Half-way the process restarts: a fresh store has no cache and must recognise the stored history
        // from the database (content addresses), not store it again.
        drop(store);
        let store = SqliteStore::open(&path).await.unwrap();
        sizes.extend(converse(&store, 100, conversation.as_ref(), &mut history).await);

        let (at_20, at_200) = (sizes[19], sizes[199]);
        eprintln!(
            "conversation id {:?}: empty {empty} B, after 20 turns {at_20} B, after 110 turns {} B, after 200 \
             turns {at_200} B ({:.2}x; growth {:.2}x)",
            conversation.as_ref().map(|c| c.as_str()),
            sizes[109],
            at_200 as f64 / at_20 as f64,
            (at_200 - empty) as f64 / (at_20 - empty) as f64,
        );
        assert!(
            at_200 <= 12 * at_20,
            "{at_200} B after 200 turns vs {at_20} B after 20"
        );
        // Linear: the second 90 turns add about what the first 90 did (a record holding its whole history
        // would add ~2.4 times as much). Compared over 90 turns, not from turn 20, whose few pages over the empty
        // database make a ratio from there a matter of page granularity.
        let at_110 = sizes[109];
        assert!(
            2 * (at_200 - at_110) <= 3 * (at_110 - at_20),
            "turns 110 to 200 added {} B, turns 20 to 110 {} B",
            at_200 - at_110,
            at_110 - at_20
        );
        // Each message once: 200 questions and 200 answers, across the restart too.
        assert_eq!(count(&store, "chat_messages").await, 400);
        assert_eq!(count(&store, "chat_calls").await, 200);
        assert_eq!(count(&store, "chat_options").await, 1);

        // The read API returns the whole history, as before.
        match &conversation {
            Some(id) => {
                assert_eq!(store.load_conversation(id).await.unwrap(), history);
                let calls = store.conversation_calls(id).await.unwrap();
                assert_eq!(calls.len(), 200);
                for (turn, call) in calls.iter().enumerate() {
                    assert_eq!(call.request.messages.len(), 2 * turn + 1);
                    assert_eq!(call.history(), history[..2 * turn + 2]);
                }
            }
            None => {
                // Every stateless call is a conversation of its own (as before); the latest holds it all.
                let listed = store
                    .list_conversations(&tower_chat_persistence::ConversationQuery::new().limit(1))
                    .await
                    .unwrap();
                let latest = store
                    .load_conversation(&listed[0].conversation_id)
                    .await
                    .unwrap();
                assert_eq!(latest, history);
            }
        }
    }
}

#[tokio::test]
async fn a_store_that_released_its_caches_continues_without_storing_messages_twice() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("chat.db")).await.unwrap();
    let conversation = ConversationId::new("released");
    let mut history = Vec::new();
    converse(&store, 10, Some(&conversation), &mut history).await;
    // Listing opens the read-only connection, which the release closes.
    let list = tower_chat_persistence::ConversationQuery::new();
    assert_eq!(store.list_conversations(&list).await.unwrap().len(), 1);
    store.release_caches();
    converse(&store, 10, Some(&conversation), &mut history).await;
    store.release_caches();
    assert_eq!(count(&store, "chat_messages").await, 40);
    assert_eq!(count(&store, "chat_calls").await, 20);
    assert_eq!(
        store.load_conversation(&conversation).await.unwrap(),
        history
    );
    assert_eq!(store.list_conversations(&list).await.unwrap()[0].calls, 20);
}

#[tokio::test]
async fn a_database_from_before_message_level_storage_reads_as_before_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    // A database as the crate left it before migration 0004: one call with its history inline.
    {
        let conn = rusqlite_connection(&path);
        conn.execute_batch(OLD_SCHEMA).unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let id = ConversationId::new("old");
    let old = store.load_conversation(&id).await.unwrap();
    assert_eq!(old, vec![Message::user("hi"), Message::assistant("hello")]);
    let layer = PersistenceLayer::new(store.clone());
    let chat = layer.layer(scripted(|_: &ChatRequest| {
        scripted_stream(Delivery::AllAtOnce, answer("again"))
    }));
    let mut history = old.clone();
    history.push(Message::user("more"));
    let response = chat
        .oneshot(ChatRequest::new(history.clone()).with_extension(id.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    history.extend(response.messages);
    assert_eq!(store.load_conversation(&id).await.unwrap(), history);
    let calls = store.conversation_calls(&id).await.unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].history(), old);
    assert_eq!(calls[0].request.options.model.as_deref(), Some("m"));
}

fn rusqlite_connection(
    path: &std::path::Path,
) -> tower_chat_persistence::store::sqlite::rusqlite::Connection {
    tower_chat_persistence::store::sqlite::rusqlite::Connection::open(path).unwrap()
}

/// Migrations 0001 and 0003 as released, and one record written by that version.
const OLD_SCHEMA: &str = "
CREATE TABLE tower_chat_migrations (id TEXT PRIMARY KEY, applied_at BIGINT NOT NULL);
CREATE TABLE chat_calls (
    call_id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    caller TEXT,
    round_index BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    first_token_at BIGINT,
    ended_at BIGINT NOT NULL,
    provider TEXT,
    model TEXT,
    status TEXT NOT NULL CHECK (status IN ('completed', 'failed', 'cancelled', 'interrupted', 'in_flight')),
    error_kind TEXT,
    error_message TEXT,
    finish_reason TEXT,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    response_text TEXT NOT NULL,
    request_messages TEXT NOT NULL,
    request_options TEXT NOT NULL,
    response TEXT NOT NULL
);
CREATE INDEX chat_calls_by_conversation ON chat_calls (conversation_id, started_at, call_id);
CREATE INDEX chat_calls_by_caller ON chat_calls (caller, started_at);
ALTER TABLE chat_calls ADD COLUMN cost_nanos BIGINT;
INSERT INTO tower_chat_migrations VALUES ('tower-chat-persistence/0001_chat_calls', 1), \
    ('tower-chat-persistence/0003_call_cost', 1);
INSERT INTO chat_calls VALUES ('c1', 'old', NULL, 0, 1000, 1500, 2000, 'p', 'm', 'completed', NULL, NULL, 'stop', \
    3, 1, 'hello', '[{\"role\":\"user\",\"content\":\"hi\"}]', '{\"model\":\"m\"}', \
    '{\"messages\":[{\"role\":\"assistant\",\"content\":\"hello\"}],\"usage\":{\"input_tokens\":3,\"output_tokens\":1},\"finish_reason\":\"stop\"}', NULL);
";

#[tokio::test]
async fn durability_picks_the_synchronous_setting() {
    use tower_chat_persistence::Durability;
    let dir = tempfile::tempdir().unwrap();
    for (durability, expected) in [(Durability::Process, 1), (Durability::PowerLoss, 2)] {
        let store = SqliteStore::builder(dir.path().join("d.db"))
            .durability(durability)
            .open()
            .await
            .unwrap();
        let (mode, synchronous): (String, i64) = store
            .run("pragmas", |conn| {
                let mode = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
                let synchronous = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
                Ok((mode, synchronous))
            })
            .await
            .unwrap();
        assert_eq!(
            (mode.as_str(), synchronous),
            ("wal", expected),
            "{durability:?}"
        );
    }
}

#[tokio::test]
async fn other_users_of_the_connection_keep_their_check_constraints() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).await.unwrap();
    let mut history = Vec::new();
    converse(&store, 1, None, &mut history).await;
    // The record writes skip chat_calls' CHECK (their statuses are the layer's own); nobody else does.
    let refused = store
        .run("bad status", |conn| {
            conn.execute(
                "INSERT INTO chat_calls (call_id, conversation_id, round_index, started_at, ended_at, status, \
                 input_tokens, output_tokens, response_text, request_messages, request_options, response) \
                 VALUES ('x', 'c', 0, 0, 0, 'exploded', 0, 0, '', '[]', '{}', '{}')",
                [],
            )
        })
        .await;
    assert!(refused.is_err(), "{refused:?}");
}

/// Records without a caller are kept out of `chat_calls_by_caller` (one B-tree fewer to write per record), and
/// the listing by caller still finds its calls through that index.
#[tokio::test]
async fn calls_without_a_caller_stay_out_of_the_caller_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("i.db")).await.unwrap();
    let (index_sql, plan) = store
        .with_connection(|conn| {
            let sql: String = conn
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE name = 'chat_calls_by_caller'",
                    [],
                    |row| row.get(0),
                )
                .unwrap();
            let plan = conn
                .prepare(
                    "EXPLAIN QUERY PLAN SELECT conversation_id FROM chat_calls WHERE conversation_id IN \
                     (SELECT conversation_id FROM chat_calls WHERE caller = ?1)",
                )
                .unwrap()
                .query_map(["alice"], |row| row.get::<_, String>(3))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            (sql, plan)
        })
        .await
        .unwrap();
    assert!(
        index_sql.ends_with("WHERE caller IS NOT NULL"),
        "{index_sql}"
    );
    assert!(
        plan.iter()
            .any(|step| step.contains("chat_calls_by_caller")),
        "{plan:?}"
    );
}

/// A record is committed before its call's `Finish` is delivered: another connection to the file sees it as soon
/// as the call returns, for a call alone and for 16 at once (whose records share transactions).
#[tokio::test]
async fn a_record_is_visible_to_another_connection_when_finish_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let other = SqliteStore::open(&path).await.unwrap();
    let chat = PersistenceLayer::new(store).layer(scripted(|_: &ChatRequest| {
        scripted_stream(Delivery::OneByOne, answer("fine"))
    }));
    let seen = |i: usize| {
        let (chat, other) = (chat.clone(), other.clone());
        async move {
            let conversation = ConversationId::new(format!("seen-{i}"));
            let request =
                ChatRequest::new(vec![Message::user("q")]).with_extension(conversation.clone());
            let response = chat
                .oneshot(request)
                .await
                .unwrap()
                .collect_response()
                .await
                .unwrap();
            assert_eq!(response.text(), "fine");
            other.conversation_calls(&conversation).await.unwrap().len()
        }
    };
    assert_eq!(seen(0).await, 1);
    let together = futures_util::future::join_all((1..=16).map(seen)).await;
    assert_eq!(together, [1; 16]);
}

/// Pages in the write-ahead log file beside `path` (a frame is a page plus its 24-byte header).
fn log_pages(path: &std::path::Path) -> u64 {
    std::fs::metadata(path.with_extension("db-wal")).map_or(0, |m| m.len()) / (4096 + 24)
}

/// Pages in the database file itself (what checkpoints have copied there).
fn file_pages(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).unwrap().len() / 4096
}

/// No commit checkpoints: with the checkpoint thread held off, ~1,200 records of ~5 pages each stay in the
/// write-ahead log and nothing reaches the database file. SQLite's default would have copied the log at the
/// commit that took it past 1,000 pages, making that batch (and a fail-closed call) wait for two syncs.
#[tokio::test]
async fn a_commit_never_checkpoints_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let store = SqliteStore::builder(&path)
        .checkpoint_interval(std::time::Duration::from_secs(3600))
        .open()
        .await
        .unwrap();
    let automatic: i64 = store
        .run("autocheckpoint", |conn| {
            conn.query_row("PRAGMA wal_autocheckpoint", [], |row| row.get(0))
        })
        .await
        .unwrap();
    assert_eq!(automatic, 0);
    let before = file_pages(&path);
    for _ in 0..40 {
        converse(&store, 30, None, &mut Vec::new()).await;
    }
    assert_eq!(count(&store, "chat_calls").await, 1200);
    assert_eq!(file_pages(&path), before, "a commit copied the log");
    assert!(
        log_pages(&path) > 1100,
        "the log holds {} pages",
        log_pages(&path)
    );
    let checkpoint = store.checkpoint().await.unwrap();
    assert_eq!(checkpoint.checkpointed_frames, checkpoint.log_frames);
    assert!(file_pages(&path) > before, "the checkpoint copied nothing");
}

/// Under writes that never pause, the checkpoint thread keeps the log bounded: each checkpoint copies the whole
/// log, the next commit starts it over, and the file is cut back to `journal_size_limit`.
#[tokio::test]
async fn the_checkpoint_thread_keeps_the_log_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let store = SqliteStore::builder(&path)
        .checkpoint_interval(std::time::Duration::from_secs(3600))
        .open()
        .await
        .unwrap();
    for _ in 0..40 {
        converse(&store, 30, None, &mut Vec::new()).await;
        store.checkpoint().await.unwrap();
    }
    assert_eq!(count(&store, "chat_calls").await, 1200);
    let pages = log_pages(&path);
    assert!(pages <= 1100, "the log grew to {pages} pages");

    // On its schedule too, with no one asking.
    let scheduled = SqliteStore::builder(dir.path().join("s.db"))
        .checkpoint_interval(std::time::Duration::from_millis(10))
        .open()
        .await
        .unwrap();
    let path = dir.path().join("s.db");
    let before = file_pages(&path);
    converse(&scheduled, 30, None, &mut Vec::new()).await;
    let mut waited = 0;
    while file_pages(&path) == before {
        assert!(waited < 1000, "no scheduled checkpoint in 10 s");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        waited += 1;
    }
}

/// A call record stores only what the call produced, once: the answer's text is its message node's, not also a
/// column of the call's row (which would double every answer's bytes).
#[tokio::test]
async fn an_answer_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("once.db")).await.unwrap();
    let text: String = (0..8_000)
        .map(|i| format!("{:08x}", (i as u32).wrapping_mul(2_654_435_761)))
        .collect();
    let before = size(&store).await;
    let layer = PersistenceLayer::new(store.clone());
    let reply = text.clone();
    let chat = layer.layer(scripted(move |_: &ChatRequest| {
        scripted_stream(Delivery::AllAtOnce, answer(&reply))
    }));
    let id = ConversationId::new("once");
    let response = chat
        .oneshot(
            ChatRequest::new(vec![Message::user("a long answer, please")])
                .with_extension(id.clone()),
        )
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), text);
    let grown = size(&store).await - before;
    assert!(
        grown < text.len() as u64 * 3 / 2,
        "{grown} B stored for an answer of {} B",
        text.len()
    );
    // And it reads back whole.
    let calls = store.conversation_calls(&id).await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].response.text(), text);
    assert_eq!(
        store.load_conversation(&id).await.unwrap()[1],
        response.messages[0]
    );
}
