//! The approval layer's cost per call when no approval is involved: the same tool-loop stack with and without
//! `ApprovalLayer` in front, over a model that answers at once.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use futures_util::{stream, StreamExt};
use serde_json::{json, Value};
use tower::{service_fn, util::BoxCloneService, Layer, ServiceExt};
use tower_chat::{
    ApprovalDecision, ApprovalDecisions, CallerIdentity, ChatError, ChatEvent, ChatRequest,
    ChatStream, ChatStreamExt, ConversationId, FinishReason, Message, ToolCall,
};
use tower_chat_approval::ApprovalLayer;
use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer};

type Chat = BoxCloneService<ChatRequest, ChatStream, ChatError>;

/// A model that answers in text, or (when `with_tool`) first calls an ungated tool.
fn model(with_tool: bool) -> Chat {
    BoxCloneService::new(service_fn(move |request: ChatRequest| async move {
        let answered = matches!(request.messages.last(), Some(Message::Tool(_)));
        let events = if with_tool && !answered {
            let call = ToolCall::new("c1", "echo", json!({"x": 1}));
            vec![
                ChatEvent::ToolCallEnd { index: 0, call },
                ChatEvent::finish(FinishReason::ToolCalls),
            ]
        } else {
            vec![
                ChatEvent::text("Hello"),
                ChatEvent::text(" world"),
                ChatEvent::finish(FinishReason::Stop),
            ]
        };
        Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
    }))
}

fn tool_loop(with_tool: bool) -> Chat {
    let echo = tool_json(
        "echo",
        "echo",
        json!({"type": "object"}),
        |v: Value, _c| async move { Ok::<_, String>(v.to_string()) },
    )
    .compile()
    .unwrap();
    BoxCloneService::new(
        FunctionInvocationLayer::new()
            .tool(echo)
            .unwrap()
            .layer(model(with_tool)),
    )
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
        .with_extension(ConversationId::new("bench"))
        .with_extension(CallerIdentity::new("alice"))
}

async fn drive(service: Chat) -> usize {
    drive_request(service, request()).await
}

async fn drive_request(service: Chat, request: ChatRequest) -> usize {
    let stream = service.oneshot(request).await.unwrap();
    stream.count().await
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (name, with_tool) in [("text answer", false), ("one ungated tool round", true)] {
        let mut group = c.benchmark_group(name);
        let bare = tool_loop(with_tool);
        let gated: Chat = BoxCloneService::new(
            ApprovalLayer::new()
                .require_approval("delete")
                .layer(tool_loop(with_tool)),
        );
        group.bench_function("tool loop", |b| {
            b.iter(|| black_box(runtime.block_on(drive(bare.clone()))))
        });
        group.bench_function("approval + tool loop", |b| {
            b.iter(|| black_box(runtime.block_on(drive(gated.clone()))))
        });
        group.finish();
    }

    // For scale: one whole approval cycle in process (pause: record; resume: verify, take, audit, run).
    let gated: Chat = BoxCloneService::new(
        ApprovalLayer::new()
            .require_approval("echo")
            .layer(tool_loop(true)),
    );
    c.bench_function("approval cycle (memory store)/pause + resume", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let paused = gated.clone().oneshot(request()).await.unwrap();
                let response = paused.collect_response().await.unwrap();
                let id = response.approval_requests[0].id.clone();
                let mut history = request().messages.to_vec();
                history.extend(response.messages);
                let resume = ChatRequest::new(history)
                    .with_extension(ConversationId::new("bench"))
                    .with_extension(CallerIdentity::new("alice"))
                    .with_extension(ApprovalDecisions(vec![ApprovalDecision::approve(id)]));
                black_box(drive_request(gated.clone(), resume).await)
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
