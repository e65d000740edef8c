//! Overhead of an MCP tool call over stdio beside a local tool call, through the same tool loop.
//!
//! Criterion: `cargo bench -p tower-chat-mcp --bench mcp_overhead` runs one request per iteration through
//! `McpLayer` + `FunctionInvocationLayer` over a scripted model (a ready stream of prebuilt events): the model
//! calls `echo` once, the loop runs it, the model answers. `local` is a `tool_json` echo in-process; `mcp_stdio`
//! is the demo server's `echo` in a child process (JSON-RPC over pipes, both directions).
//!
//! Count mode, for callgrind: `MCP_COUNT_COMPILE=N` compiles the demo server's input schema `N` times with
//! `CompiledTool::new` and exits (run with N and 2N and subtract: the difference is N compilations).
use std::time::Duration;

use criterion::{criterion_group, Criterion};
use futures_util::stream;
use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, FinishReason, Message, ToolCall,
};
use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer};
use tower_chat_mcp::{McpLayer, McpServerConfig, McpTools};

type Chat = BoxCloneService<ChatRequest, ChatStream, ChatError>;

fn model() -> Chat {
    BoxCloneService::new(service_fn(|request: ChatRequest| async move {
        let events = match request.messages.last() {
            Some(Message::Tool(result)) => vec![
                ChatEvent::text(result.content.clone()),
                ChatEvent::finish(FinishReason::Stop),
            ],
            _ => vec![
                ChatEvent::ToolCallEnd {
                    index: 0,
                    call: ToolCall::new("c1", "echo", json!({"text": "hi"})),
                },
                ChatEvent::finish(FinishReason::ToolCalls),
            ],
        };
        Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
    }))
}

async fn once(chat: &Chat) -> String {
    let response = chat
        .clone()
        .oneshot(ChatRequest::new(vec![Message::user("echo")]))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    response.text().to_owned()
}

fn echo_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let local_tool = tool_json(
        "echo",
        "Echo a text",
        echo_schema(),
        |args: Value, _| async move {
            Ok::<_, String>(format!(
                "demo: {}",
                args["text"].as_str().unwrap_or_default()
            ))
        },
    )
    .compile()
    .unwrap();
    let local: Chat = BoxCloneService::new(
        FunctionInvocationLayer::new()
            .tool(local_tool)
            .layer(model()),
    );

    let server = env!("CARGO_BIN_EXE_tower-chat-mcp-test-server");
    let mcp = runtime
        .block_on(McpTools::start([McpServerConfig::stdio("demo", server)]))
        .unwrap();
    assert!(mcp.status()[0].connected, "{:?}", mcp.status());
    let remote: Chat = BoxCloneService::new(
        McpLayer::new(mcp.clone()).layer(FunctionInvocationLayer::new().layer(model())),
    );
    assert_eq!(runtime.block_on(once(&local)), "demo: hi");
    assert_eq!(runtime.block_on(once(&remote)), "demo: hi");

    let mut group = c.benchmark_group("tool_round_trip");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("local", |b| b.to_async(&runtime).iter(|| once(&local)));
    group.bench_function("mcp_stdio", |b| b.to_async(&runtime).iter(|| once(&remote)));
    group.finish();
    drop(remote);
    drop(mcp);
}

fn count_compile(n: usize) {
    let schema = echo_schema();
    let mut names = 0;
    for i in 0..n {
        let tool = tool_json(
            format!("t{i}"),
            "",
            schema.clone(),
            |v: Value, _| async move { Ok::<_, String>(v) },
        )
        .compile()
        .unwrap();
        names += tool.name().len();
    }
    println!("compiled {n} schemas ({names})");
}

criterion_group!(benches, bench);

fn main() {
    if let Ok(n) = std::env::var("MCP_COUNT_COMPILE") {
        count_compile(n.parse().expect("MCP_COUNT_COMPILE=N"));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
