//! The happy path (no retry needed) of retry + fallback + breaker, against the same in-process leaf alone: what
//! the resilience layers cost per call when nothing goes wrong.
//!
//! `cargo bench -p tower-chat-resilience --bench happy_path` (criterion, wall time), or count instructions:
//! `RESILIENCE_COUNT_VARIANT=bare|stack RESILIENCE_COUNT_CALLS=N valgrind --tool=callgrind <bench binary>`
//! (the difference of the per-call slopes of the two variants is the layers' cost).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, Criterion};
use futures_util::StreamExt;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceExt};
use tower_chat::test_server::{scripted_stream, Delivery};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ConversationId, FinishReason, Message,
    ModelInfo, ModelMetadata, Usage,
};
use tower_chat_resilience::{CircuitBreakerLayer, Fallback, RetryLayer, Target};

/// An in-process model answering at once with a typical short stream: metadata, two text deltas, usage, finish.
#[derive(Clone)]
struct Leaf(&'static str);

impl ModelInfo for Leaf {
    fn model_metadata(&self) -> ModelMetadata {
        ModelMetadata {
            provider: "openai".into(),
            model_id: Some(self.0.to_owned()),
            endpoint: None,
            supports_tools: true,
            supports_parallel_tool_calls: true,
            supports_streaming_usage: true,
            context_window: None,
        }
    }
}

impl Service<ChatRequest> for Leaf {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = std::future::Ready<Result<ChatStream, ChatError>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ChatError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: ChatRequest) -> Self::Future {
        let events = vec![
            Ok(ChatEvent::ResponseMetadata {
                id: Some("r1".into()),
                model: Some(self.0.into()),
            }),
            Ok(ChatEvent::text("Hello")),
            Ok(ChatEvent::text(" world")),
            Ok(ChatEvent::Usage {
                usage: Usage {
                    input_tokens: 3,
                    output_tokens: 2,
                    ..Usage::default()
                },
            }),
            Ok(ChatEvent::finish(FinishReason::Stop)),
        ];
        std::future::ready(Ok(scripted_stream(Delivery::AllAtOnce, events)))
    }
}

type Chat = BoxCloneSyncService<ChatRequest, ChatStream, ChatError>;

fn bare() -> Chat {
    BoxCloneSyncService::new(Leaf("gpt-4o"))
}

/// Two targets, each with its own breaker driven by the fallback ([`Target::breaker`]): the gateway's shape.
fn fallback() -> Fallback {
    let breaker = CircuitBreakerLayer::new();
    Fallback::new(vec![
        Target::new("primary", Leaf("gpt-4o")).breaker(&breaker),
        Target::new("backup", Leaf("claude")).breaker(&breaker),
    ])
}

/// The same with each breaker as a layer around its target's service (a stream wrapper per call).
fn fallback_breaker_layers() -> Fallback {
    let breaker = CircuitBreakerLayer::new();
    Fallback::new(vec![
        Target::new("primary", breaker.clone().layer(Leaf("gpt-4o"))),
        Target::new("backup", breaker.layer(Leaf("claude"))),
    ])
}

/// Retry around a fallback over two targets, each behind its own breaker: the gateway's shape.
fn stack() -> Chat {
    BoxCloneSyncService::new(RetryLayer::new().layer(fallback()))
}

/// Each variant, by name.
fn variant(name: &str) -> Chat {
    match name {
        "bare" => bare(),
        "breaker" => BoxCloneSyncService::new(CircuitBreakerLayer::new().layer(Leaf("gpt-4o"))),
        "retry" => BoxCloneSyncService::new(RetryLayer::new().layer(Leaf("gpt-4o"))),
        "fallback" => BoxCloneSyncService::new(fallback()),
        "stack" => stack(),
        "stack_breaker_layers" => {
            BoxCloneSyncService::new(RetryLayer::new().layer(fallback_breaker_layers()))
        }
        // The leaf plus what retry and fallback must do on every call whatever their code: keep a copy of the
        // request (to send it again, or to the next target). Subtracted from `stack`, it leaves the layers' own
        // cost.
        "two_copies" => BoxCloneSyncService::new(tower::service_fn(|request: ChatRequest| {
            let copies = (request.clone(), request.clone());
            let answer = Leaf("gpt-4o").call(request);
            drop(black_box(copies));
            answer
        })),
        "stack_deadline" => BoxCloneSyncService::new(
            RetryLayer::new()
                .deadline(Duration::from_secs(60))
                .layer(fallback()),
        ),
        other => {
            panic!("unknown variant {other}: bare, two_copies, breaker, retry, fallback, stack, stack_breaker_layers, stack_deadline")
        }
    }
}

/// A short conversation with the context the gateway always sets.
fn request() -> ChatRequest {
    ChatRequest::new(vec![
        Message::system("You are terse."),
        Message::user("Say hello"),
    ])
    .with_extension(ConversationId::new("conv_0123456789abcdef"))
}

async fn one_call(chat: &Chat) -> usize {
    let stream = chat.clone().oneshot(request()).await.expect("answered");
    stream
        .fold(0, |n, item| async move { n + usize::from(item.is_ok()) })
        .await
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("happy_path");
    for (name, chat) in [("bare_leaf", bare()), ("retry_fallback_breaker", stack())] {
        group.bench_function(name, |b| b.iter(|| black_box(rt.block_on(one_call(&chat)))));
    }
    group.finish();
}

criterion_group!(group, benches);

fn main() {
    if let Ok(variant_name) = std::env::var("RESILIENCE_COUNT_VARIANT") {
        let calls: usize = std::env::var("RESILIENCE_COUNT_CALLS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1000);
        let chat = variant(&variant_name);
        let rt = runtime();
        let events = rt.block_on(async {
            let mut events = 0;
            for _ in 0..calls {
                events += one_call(&chat).await;
            }
            events
        });
        assert_eq!(events, calls * 5);
        eprintln!("{variant_name}: {calls} calls");
        return;
    }
    group();
    Criterion::default().configure_from_args().final_summary();
}
