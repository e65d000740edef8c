//! Overhead of an MCP tool call over stdio beside a local tool call, through the same tool loop.
//!
//! Criterion: `cargo bench -p tower-chat-mcp --bench mcp_overhead` runs one request per iteration through
//! `McpLayer` + `FunctionInvocationLayer` over a scripted model (a ready stream of prebuilt events): the model
//! calls `echo` once, the loop runs it, the model answers. `local` is a `tool_json` echo in-process; `mcp_stdio`
//! is the demo server's `echo` in a child process (JSON-RPC over pipes, both directions).
//!
//! Count modes, for callgrind (run each with two N and subtract, which removes start-up and exit):
//! - `MCP_COUNT_COMPILE=N` compiles the demo server's input schema `N` times with `CompiledTool::new` and exits.
//! - `MCP_COUNT_ROUND_TRIPS=local|local_same_tools|mcp_stdio MCP_COUNT_CALLS=N` runs `N` of the requests above
//!   (`local_same_tools`: the local variant offering in-process tools with the demo server's 11 names and schemas,
//!   as the MCP variant does, so the difference to `mcp_stdio` is the transport alone) on a current-thread
//!   runtime (one thread: the count does not depend on how work is spread over workers) and exits. callgrind
//!   follows only this process, not the MCP server child (no `--trace-children`): the count is the client side,
//!   what a gateway pays per call.
use std::time::Duration;

use criterion::{criterion_group, Criterion};
use futures_util::stream;
use serde_json::{json, Value};
use tower::util::BoxCloneService;
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, FinishReason, Message, ToolCall,
};
use tower_chat_function_invocation::{tool_json, CompiledTool, FunctionInvocationLayer};
use tower_chat_mcp::{McpLayer, McpServerConfig, McpTools};

type Chat = BoxCloneService<ChatRequest, ChatStream, ChatError>;

fn model() -> Chat {
    BoxCloneService::new(service_fn(|request: ChatRequest| async move {
        let events = match request.messages.last() {
            Some(Message::Tool(result)) => vec![
                ChatEvent::text(result.content.to_string()),
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

/// An in-process tool that answers like the demo server's `echo`.
fn local_echo(name: &str, description: &str, schema: Value) -> CompiledTool {
    tool_json(name, description, schema, |args: Value, _| async move {
        Ok::<_, String>(format!(
            "demo: {}",
            args["text"].as_str().unwrap_or_default()
        ))
    })
    .compile()
    .unwrap()
}

/// The loop over the model with an in-process `echo`.
fn local_chat() -> Chat {
    local_chat_with(vec![local_echo("echo", "Echo a text", echo_schema())])
}

/// The loop over the model with these in-process tools.
fn local_chat_with(tools: Vec<CompiledTool>) -> Chat {
    BoxCloneService::new(
        FunctionInvocationLayer::new()
            .tools(tools)
            .unwrap()
            .layer(model()),
    )
}

/// In-process tools with the names and schemas the demo server lists (all answer like `echo`), so a local
/// variant offers the model exactly what the MCP variant does.
async fn local_like_the_demo_server() -> Chat {
    let (_, mcp) = mcp_chat().await;
    let tools = mcp
        .tools()
        .iter()
        .map(|tool| {
            let spec = tool.spec();
            local_echo(&spec.name, &spec.description, spec.parameters.clone())
        })
        .collect();
    local_chat_with(tools)
}

/// The loop over the model with the demo server's `echo` over stdio, and the servers (stopped when dropped).
async fn mcp_chat() -> (Chat, McpTools) {
    let server = env!("CARGO_BIN_EXE_tower-chat-mcp-test-server");
    let mcp = McpTools::start([McpServerConfig::stdio("demo", server)])
        .await
        .unwrap();
    assert!(mcp.status()[0].connected, "{:?}", mcp.status());
    let remote: Chat = BoxCloneService::new(
        McpLayer::new(mcp.clone()).layer(FunctionInvocationLayer::new().layer(model())),
    );
    (remote, mcp)
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let local = local_chat();
    let (remote, mcp) = runtime.block_on(mcp_chat());
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

fn count_round_trips(variant: &str, n: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (chat, servers) = match variant {
            "local" => (local_chat(), None),
            "local_same_tools" => (local_like_the_demo_server().await, None),
            "mcp_stdio" => {
                let (chat, mcp) = mcp_chat().await;
                (chat, Some(mcp))
            }
            other => {
                panic!("MCP_COUNT_ROUND_TRIPS={other}: use local, local_same_tools or mcp_stdio")
            }
        };
        for _ in 0..n {
            assert_eq!(once(&chat).await, "demo: hi");
        }
        drop(servers);
    });
    println!("{variant}: {n} round trips");
}

criterion_group!(benches, bench);

fn main() {
    if let Ok(n) = std::env::var("MCP_COUNT_COMPILE") {
        count_compile(n.parse().expect("MCP_COUNT_COMPILE=N"));
        return;
    }
    if let Ok(variant) = std::env::var("MCP_COUNT_ROUND_TRIPS") {
        let n =
            std::env::var("MCP_COUNT_CALLS").map_or(100, |n| n.parse().expect("MCP_COUNT_CALLS=N"));
        count_round_trips(&variant, n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
