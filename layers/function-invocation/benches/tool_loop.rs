//! Overhead of the tool loop over a bare in-process scripted model (no network, trivial tool).
//!
//! - `per_event/*`: one response of `EVENTS` text deltas, bare vs through the layer (with a tool configured, so
//!   the loop is fully active). Added cost per event = (layer − bare) / EVENTS.
//! - `per_round/*`: `ROUNDS` tool rounds then an answer, through the layer, vs the same `ROUNDS + 1` model
//!   responses consumed directly. Added cost per round = (layer − bare) / ROUNDS.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::{Layer, Service, ServiceExt};
use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStream, FinishReason, Message, ToolCall};
use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer, ToolContext};

const EVENTS: usize = 1000;
const ROUNDS: usize = 10;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn scripted(
    responses: Arc<Vec<Vec<ChatEvent>>>,
) -> impl Service<
    ChatRequest,
    Response = ChatStream,
    Error = ChatError,
    Future = impl std::future::Future<Output = Result<ChatStream, ChatError>> + Send,
> + Clone
       + Send
       + 'static {
    let next = Arc::new(AtomicUsize::new(0));
    tower::service_fn(move |_request: ChatRequest| {
        let n = next.fetch_add(1, Ordering::Relaxed) % responses.len();
        let events = responses[n].clone();
        async move {
            let stream: ChatStream =
                Box::pin(futures_util::stream::iter(events.into_iter().map(Ok)));
            Ok::<_, ChatError>(stream)
        }
    })
}

fn layer() -> FunctionInvocationLayer {
    let noop = tool_json(
        "noop",
        "does nothing",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        |_args: Value, _ctx: ToolContext| async { Ok::<_, String>("ok") },
    )
    .compile()
    .unwrap();
    FunctionInvocationLayer::new()
        .tool(noop)
        .unwrap()
        .max_rounds(ROUNDS + 1)
}

async fn drain<S>(service: S) -> usize
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    let request = ChatRequest::new(vec![Message::user("hi")]);
    let mut stream = service.oneshot(request).await.unwrap();
    let mut n = 0;
    while let Some(item) = stream.next().await {
        item.unwrap();
        n += 1;
    }
    n
}

fn per_event(c: &mut Criterion) {
    let rt = runtime();
    let mut response: Vec<ChatEvent> = (0..EVENTS).map(|_| ChatEvent::text("token ")).collect();
    response.push(ChatEvent::finish(FinishReason::Stop));
    let responses = Arc::new(vec![response]);
    let mut group = c.benchmark_group("per_event");
    group.throughput(Throughput::Elements(EVENTS as u64));
    let bare = scripted(responses.clone());
    group.bench_function("bare", |b| b.iter(|| rt.block_on(drain(bare.clone()))));
    let layered = layer().layer(scripted(responses));
    group.bench_function("layer", |b| b.iter(|| rt.block_on(drain(layered.clone()))));
    group.finish();
}

fn per_round(c: &mut Criterion) {
    let rt = runtime();
    let mut responses: Vec<Vec<ChatEvent>> = (0..ROUNDS)
        .map(|round| {
            let id = format!("call-{round}");
            vec![
                ChatEvent::ToolCallStart {
                    index: 0,
                    id: id.clone(),
                    name: "noop".into(),
                },
                ChatEvent::ToolCallDelta {
                    index: 0,
                    arguments: "{\"n\":1}".into(),
                },
                ChatEvent::ToolCallEnd {
                    index: 0,
                    call: ToolCall::new(id, "noop", json!({"n": 1})),
                },
                ChatEvent::finish(FinishReason::ToolCalls),
            ]
        })
        .collect();
    responses.push(vec![
        ChatEvent::text("done"),
        ChatEvent::finish(FinishReason::Stop),
    ]);
    let responses = Arc::new(responses);
    let mut group = c.benchmark_group("per_round");
    group.throughput(Throughput::Elements(ROUNDS as u64));
    let bare = scripted(responses.clone());
    group.bench_function("bare", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut n = 0;
                for _ in 0..=ROUNDS {
                    n += drain(bare.clone()).await;
                }
                n
            })
        })
    });
    let layered = layer().layer(scripted(responses));
    group.bench_function("layer", |b| {
        b.iter(|| {
            let events = rt.block_on(drain(layered.clone()));
            // 10 rounds × (3 call events + 1 result) + text + finish.
            assert_eq!(events, ROUNDS * 4 + 2);
            events
        })
    });
    group.finish();
}

criterion_group!(benches, per_event, per_round);
criterion_main!(benches);
