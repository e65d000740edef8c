//! Overhead of the persistence layer with SQLite versus no persistence: per call (a short answer) and per event
//! (a long stream), fail-closed (the default) and fail-open, sequential and 64 calls at once.
//!
//! Criterion: `cargo bench -p tower-chat-persistence --bench overhead`.
//!
//! Counting mode, for callgrind (instructions per recorded call are the slope between two conversation counts,
//! divided by the two model calls of each conversation):
//! `PERSIST_COUNT_VARIANT=bare|null|sqlite|sqlite_no_rollup PERSIST_COUNT_CONVERSATIONS=N target/release/deps/overhead-<hash>`.
//! Each conversation is a two-round tool conversation (user → tool call → tool result →
//! answer) with a system prompt and one tool offered, as a tool loop sends it: two model calls with the same
//! conversation id, the second resending the first's history. `bare` is the scripted model alone, `null` the
//! layer over a store that forgets (the layer's own cost), `sqlite` the default layer (fail-closed) over a
//! SQLite file: every record committed before the call's `Finish` is delivered; `sqlite_no_rollup` the same
//! with the writer not keeping the spend rollup (`chat_spend_daily`), for the rollup's share of a record.
//! `PERSIST_COUNT_CONCURRENCY=K` (default 1) runs K conversations at once: their records reach the writer
//! together and share transactions (group commit).
//! `PERSIST_COUNT_LONG=1` counts turns of one long conversation instead (`PERSIST_COUNT_CONVERSATIONS` is then
//! the number of turns): every turn one call resending the whole history, a user question and an answer
//! more each time; with `PERSIST_COUNT_STATELESS=1` the requests carry no conversation id (a stateless Chat
//! Completions client). The slope between two turn counts is the average cost of a call over those turns.
//! `sqlite_floor` is the lower bound a SQLite record cannot go under: the scripted model (as `bare`) plus, per
//! model call, one transaction on the caller's thread that appends one 512-byte row to a table with no index,
//! with the store's settings (WAL, `synchronous = NORMAL`) and its three statements from rusqlite's cache.

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use futures_util::future::BoxFuture;
use futures_util::{future::join_all, stream, StreamExt};
use tower::{service_fn, util::BoxCloneService, ServiceExt};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ConversationId, FinishReason,
    Message, Usage,
};
use tower_chat_persistence::{
    CallId, CallRecord, ConversationQuery, ConversationSummary, Persistence, PersistenceLayer,
    SqliteStore, Store, StoreError,
};

/// A store that accepts and forgets: isolates the layer's own cost (folding, hand-off, ack) from SQLite's.
#[derive(Debug)]
struct NullStore;

impl Store for NullStore {
    fn write_calls<'a>(&'a self, _: &'a [CallRecord]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }
    fn call<'a>(&'a self, _: &'a CallId) -> BoxFuture<'a, Result<Option<CallRecord>, StoreError>> {
        Box::pin(async { Ok(None) })
    }
    fn conversation_calls<'a>(
        &'a self,
        _: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<CallRecord>, StoreError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn list_conversations<'a>(
        &'a self,
        _: &'a ConversationQuery,
    ) -> BoxFuture<'a, Result<Vec<ConversationSummary>, StoreError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

type Chat = BoxCloneService<ChatRequest, ChatStream, ChatError>;

/// A model answering with `deltas` text events, usage and finish, all ready at once.
fn model(deltas: usize) -> Chat {
    BoxCloneService::new(service_fn(move |_req: ChatRequest| async move {
        let mut events: Vec<Result<ChatEvent, ChatError>> = Vec::with_capacity(deltas + 2);
        events.extend((0..deltas).map(|_| Ok(ChatEvent::text("token "))));
        events.push(Ok(ChatEvent::Usage {
            usage: Usage {
                input_tokens: 12,
                output_tokens: deltas as u64,
                ..Usage::default()
            },
        }));
        events.push(Ok(ChatEvent::finish(FinishReason::Stop)));
        Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events)))
    }))
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![
        Message::system("You are a helpful assistant."),
        Message::user("Tell me something about tower middleware."),
    ])
    .with_extension(ConversationId::new("bench"))
}

async fn drain(chat: Chat) -> usize {
    let stream = chat.oneshot(request()).await.unwrap();
    stream
        .fold(0, |n, item| async move {
            item.unwrap();
            n + 1
        })
        .await
}

struct Stacks {
    layers: [PersistenceLayer; 2],
    bare: Chat,
    null_store: Chat,
    null_store_open: Chat,
    fail_closed: Chat,
    fail_open: Chat,
}

fn stacks(runtime: &tokio::runtime::Runtime, dir: &std::path::Path, deltas: usize) -> Stacks {
    runtime.block_on(async {
        let store = SqliteStore::open(dir.join(format!("bench-{deltas}.db")))
            .await
            .unwrap();
        let closed = PersistenceLayer::new(store.clone());
        let open = PersistenceLayer::new(store).fail_open();
        Stacks {
            bare: model(deltas),
            null_store: BoxCloneService::new(Persistence::new(
                model(deltas),
                PersistenceLayer::new(NullStore),
            )),
            null_store_open: BoxCloneService::new(Persistence::new(
                model(deltas),
                PersistenceLayer::new(NullStore).fail_open(),
            )),
            fail_closed: BoxCloneService::new(Persistence::new(model(deltas), closed.clone())),
            fail_open: BoxCloneService::new(Persistence::new(model(deltas), open.clone())),
            layers: [closed, open],
        }
    })
}

fn overhead(c: &mut Criterion) {
    // The bench drives calls from the main thread; one worker runs the background writer (as in a server).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();

    for (group_name, deltas) in [("per_call", 1usize), ("per_event", 1000)] {
        let stacks = stacks(&runtime, dir.path(), deltas);
        let mut group = c.benchmark_group(group_name);
        if deltas > 1 {
            group.throughput(Throughput::Elements(deltas as u64));
        }
        for (name, chat) in [
            ("no_persistence", &stacks.bare),
            ("null_store_fail_open", &stacks.null_store_open),
            ("null_store_fail_closed", &stacks.null_store),
            ("sqlite_fail_closed", &stacks.fail_closed),
            ("sqlite_fail_open", &stacks.fail_open),
        ] {
            group.bench_function(BenchmarkId::new(name, deltas), |b| {
                b.iter(|| runtime.block_on(drain(chat.clone())))
            });
        }
        group.finish();
        report(&runtime, &stacks);
    }

    // 64 calls at once: the writer batches their records into few transactions.
    let stacks = stacks(&runtime, dir.path(), 1);
    let mut group = c.benchmark_group("concurrent_64_calls");
    group.throughput(Throughput::Elements(64));
    for (name, chat) in [
        ("no_persistence", &stacks.bare),
        ("null_store_fail_closed", &stacks.null_store),
        ("sqlite_fail_closed", &stacks.fail_closed),
        ("sqlite_fail_open", &stacks.fail_open),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(join_all((0..64).map(|_| drain(chat.clone())))))
        });
    }
    group.finish();
    report(&runtime, &stacks);
}

/// What the writer did: fail-open drops records only when the buffer overflows.
fn report(runtime: &tokio::runtime::Runtime, stacks: &Stacks) {
    for (name, layer) in ["fail_closed", "fail_open"].iter().zip(&stacks.layers) {
        runtime.block_on(layer.flush()).unwrap();
        eprintln!("  writer stats ({name}): {:?}", layer.stats());
    }
}

criterion_group!(benches, overhead);

/// The scripted model of the counting mode: a tool call when the last message is the user's, else an answer.
fn tool_model() -> Chat {
    BoxCloneService::new(service_fn(|req: ChatRequest| async move {
        let usage = ChatEvent::Usage {
            usage: Usage {
                input_tokens: 40,
                output_tokens: 12,
                ..Usage::default()
            },
        };
        let events: Vec<Result<ChatEvent, ChatError>> = match req.messages.last() {
            Some(Message::User { .. }) => vec![
                Ok(ChatEvent::ToolCallStart {
                    index: 0,
                    id: "call_1".into(),
                    name: "add".into(),
                }),
                Ok(ChatEvent::ToolCallDelta {
                    index: 0,
                    arguments: r#"{"a": 2, "b": 3}"#.into(),
                }),
                Ok(ChatEvent::ToolCallEnd {
                    index: 0,
                    call: tower_chat::ToolCall::new(
                        "call_1",
                        "add",
                        serde_json::json!({"a": 2, "b": 3}),
                    ),
                }),
                Ok(usage),
                Ok(ChatEvent::finish(FinishReason::ToolCalls)),
            ],
            _ => vec![
                Ok(ChatEvent::text("The sum is 5.")),
                Ok(usage),
                Ok(ChatEvent::finish(FinishReason::Stop)),
            ],
        };
        Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events)))
    }))
}

/// One two-round tool conversation, as a tool loop drives it (round 1 resends round 0's history).
async fn conversation(
    chat: &Chat,
    i: usize,
    options: &tower_chat::Shared<tower_chat::ChatOptions>,
) {
    let conversation = ConversationId::new(format!("conv-{i}"));
    let mut request = ChatRequest::new(vec![
        Message::system("You are a calculator. Use the add tool."),
        Message::user(format!("What is 2 + 3? (question {i})")),
    ])
    .with_extension(conversation);
    request.options = options.clone();
    let first = chat
        .clone()
        .oneshot(request.clone())
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    request.messages.extend(first.messages);
    request
        .messages
        .push(Message::tool_result("call_1", "add", "5"));
    let second = chat
        .clone()
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    std::hint::black_box(second);
}

/// One conversation of `turns` turns, each resending the whole history (the model answers with text: the
/// history's last message is an assistant message, so the scripted model answers "The sum is 5.").
async fn long_conversation(chat: &Chat, turns: usize, stateless: bool) {
    let conversation = ConversationId::new("long");
    let mut history = vec![Message::system("You are a helpful assistant.")];
    for turn in 0..turns {
        history.push(Message::user(format!(
            "Question {turn}: tell me one more thing about tower middleware, briefly."
        )));
        // An assistant message last makes the scripted model answer with text instead of a tool call.
        let mut request = ChatRequest::new(history.clone());
        request.messages.push(Message::assistant("(thinking)"));
        if !stateless {
            request = request.with_extension(conversation.clone());
        }
        let response = chat
            .clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        history.push(Message::assistant("(thinking)"));
        history.extend(response.messages);
    }
}

/// The scripted model with, after each call, the least SQLite work a record could be (see the module docs).
fn floor_model(path: std::path::PathBuf) -> Chat {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
         CREATE TABLE records (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
    )
    .unwrap();
    let conn = std::sync::Arc::new(std::sync::Mutex::new(conn));
    let body = "x".repeat(512);
    let model = tool_model();
    BoxCloneService::new(service_fn(move |req: ChatRequest| {
        let (conn, body, model) = (conn.clone(), body.clone(), model.clone());
        async move {
            let events = model.oneshot(req).await?.collect::<Vec<_>>().await;
            let conn = conn.lock().unwrap();
            conn.prepare_cached("BEGIN IMMEDIATE")
                .unwrap()
                .execute([])
                .unwrap();
            conn.prepare_cached("INSERT INTO records (body) VALUES (?1)")
                .unwrap()
                .execute([&body])
                .unwrap();
            conn.prepare_cached("COMMIT").unwrap().execute([]).unwrap();
            Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events)))
        }
    }))
}

/// Run `PERSIST_COUNT_CONVERSATIONS` conversations of one variant and exit (for callgrind).
fn count(variant: &str) {
    let conversations: usize = std::env::var("PERSIST_COUNT_CONVERSATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let mut options = tower_chat::ChatOptions {
            model: Some("gpt-4o-mini".into()),
            ..Default::default()
        };
        options.tools = vec![tower_chat::ToolSpec::new(
            "add",
            "Add two numbers.",
            serde_json::json!({
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]
            }),
        )]
        .into();
        let options = tower_chat::Shared::new(options);
        let chat = match variant {
            "bare" => tool_model(),
            "sqlite_floor" => floor_model(dir.path().join("floor.db")),
            "null" => BoxCloneService::new(Persistence::new(
                tool_model(),
                PersistenceLayer::new(NullStore),
            )),
            "sqlite" | "sqlite_no_rollup" => {
                // `sqlite_no_rollup`: the spend rollup's share, the same store with the writer not keeping it.
                let store = SqliteStore::builder(dir.path().join("count.db"))
                    .spend_rollup(variant == "sqlite")
                    .open()
                    .await
                    .unwrap();
                BoxCloneService::new(Persistence::new(tool_model(), PersistenceLayer::new(store)))
            }
            other => panic!("unknown PERSIST_COUNT_VARIANT {other}"),
        };
        if std::env::var("PERSIST_COUNT_LONG").is_ok_and(|v| v == "1") {
            let stateless = std::env::var("PERSIST_COUNT_STATELESS").is_ok_and(|v| v == "1");
            long_conversation(&chat, conversations, stateless).await;
        } else {
            let concurrency: usize = std::env::var("PERSIST_COUNT_CONCURRENCY")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            for start in (0..conversations).step_by(concurrency.max(1)) {
                let end = (start + concurrency.max(1)).min(conversations);
                join_all((start..end).map(|i| conversation(&chat, i, &options))).await;
            }
        }
    });
}

fn main() {
    if let Ok(variant) = std::env::var("PERSIST_COUNT_VARIANT") {
        count(&variant);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
