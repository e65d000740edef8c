//! Overhead of the persistence layer with SQLite versus no persistence: per call (a short answer) and per event
//! (a long stream), fail-closed (the default) and fail-open, sequential and 64 calls at once.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures_util::future::BoxFuture;
use futures_util::{future::join_all, stream, StreamExt};
use tower::{service_fn, util::BoxCloneService, Layer, ServiceExt};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ConversationId, FinishReason, Message, Usage,
};
use tower_chat_persistence::{
    CallId, CallRecord, ConversationQuery, ConversationSummary, PersistenceLayer, SqliteStore,
    Store, StoreError,
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
        let closed = PersistenceLayer::builder(store.clone()).build();
        let open = PersistenceLayer::builder(store).fail_open().build();
        Stacks {
            bare: model(deltas),
            null_store: BoxCloneService::new(PersistenceLayer::new(NullStore).layer(model(deltas))),
            null_store_open: BoxCloneService::new(
                PersistenceLayer::builder(NullStore)
                    .fail_open()
                    .build()
                    .layer(model(deltas)),
            ),
            fail_closed: BoxCloneService::new(closed.layer(model(deltas))),
            fail_open: BoxCloneService::new(open.layer(model(deltas))),
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
criterion_main!(benches);
