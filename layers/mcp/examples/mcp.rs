//! MCP tools in the tool loop: a small MCP server from this repository, started as a child process over stdio.
//!
//! `cargo run -p tower-chat-mcp --example mcp`
//!
//! The example runs itself twice: with `--serve` it is the MCP server (`tower_chat_mcp::test_server::DemoServer`,
//! written with rmcp, on stdin/stdout); without, it starts that server through `McpTools`, prints the tools it
//! lists, and runs two requests through `McpLayer` + `FunctionInvocationLayer` over a stand-in model: one calling
//! `add` and `echo`, one calling the destructive `delete_note`, which the server's policy pauses for approval.

use std::time::Duration;

use futures_util::stream;
use serde_json::json;
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::{
    ApprovalDecision, ApprovalDecisions, ChatError, ChatEvent, ChatRequest, ChatStream,
    ChatStreamExt, FinishReason, Message, ToolCall,
};
use tower_chat_function_invocation::FunctionInvocationLayer;
use tower_chat_mcp::test_server::{serve_stdio, DemoServer};
use tower_chat_mcp::{Approval, McpLayer, McpServerConfig, McpTools, ServerPolicy};

/// A stand-in model: makes the calls of round `n` when it has answered `n` times, then repeats the results.
fn model(
    rounds: Vec<Vec<ToolCall>>,
) -> impl tower::Service<ChatRequest, Response = ChatStream, Error = ChatError, Future = impl Send> + Clone
{
    service_fn(move |request: ChatRequest| {
        let rounds = rounds.clone();
        async move {
            let done = request
                .messages
                .iter()
                .filter(|m| matches!(m, Message::Assistant(_)))
                .count();
            let events = match rounds.get(done) {
                Some(calls) => {
                    let mut events: Vec<ChatEvent> = calls
                        .iter()
                        .enumerate()
                        .map(|(index, call)| ChatEvent::ToolCallEnd {
                            index,
                            call: call.clone(),
                        })
                        .collect();
                    events.push(ChatEvent::finish(FinishReason::ToolCalls));
                    events
                }
                None => {
                    let results: Vec<String> = request
                        .messages
                        .iter()
                        .filter_map(|m| match m {
                            Message::Tool(t) => Some(t.content.to_string()),
                            _ => None,
                        })
                        .collect();
                    vec![
                        ChatEvent::text(format!("The tools said: {}", results.join(" / "))),
                        ChatEvent::finish(FinishReason::Stop),
                    ]
                }
            };
            Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("--serve") {
        return Ok(serve_stdio(DemoServer::new("demo", true)).await?);
    }

    let me = std::env::current_exe()?;
    let demo = McpServerConfig::stdio("demo", me.to_string_lossy())
        .args(["--serve"])
        .policy(ServerPolicy::new(Approval::IfDestructive));
    // A server that cannot start: reported with its reason; the demo server works regardless.
    let broken = McpServerConfig::stdio("broken", "/nonexistent/mcp-server");
    let mcp = McpTools::start([demo, broken]).await?;
    for status in mcp.status() {
        println!(
            "server {}: connected={} tools={} error={:?}",
            status.name, status.connected, status.tools, status.last_error
        );
    }
    for tool in mcp.tools().iter() {
        let hints = tool.hints();
        println!(
            "  {:<14} read_only={:<5} destructive={:<5} needs approval={}",
            tool.name(),
            format!("{:?}", hints.read_only.unwrap_or(false)),
            format!(
                "{:?}",
                hints
                    .destructive
                    .unwrap_or(!hints.read_only.unwrap_or(false))
            ),
            tool.requires_approval()
        );
    }

    let tool_loop = FunctionInvocationLayer::new().tool_timeout(Duration::from_secs(10));

    // 1. Plain calls: text and structured results.
    let chat = McpLayer::new(mcp.clone()).layer(tool_loop.clone().layer(model(vec![vec![
        ToolCall::new("c1", "add", json!({"a": 2, "b": 40})),
        ToolCall::new("c2", "echo", json!({"text": "hello over stdio"})),
    ]])));
    let response = chat
        .oneshot(ChatRequest::new(vec![Message::user("add and echo")]))
        .await?
        .collect_response()
        .await?;
    println!("\n1. {}", response.text());

    // 2. A destructive call pauses for approval, then runs once approved.
    let rounds = vec![
        vec![ToolCall::new(
            "w1",
            "write_note",
            json!({"key": "todo", "text": "buy milk"}),
        )],
        vec![ToolCall::new("d1", "delete_note", json!({"key": "todo"}))],
    ];
    let chat = McpLayer::new(mcp.clone()).layer(tool_loop.layer(model(rounds)));
    let mut history = vec![Message::user("write a note, then delete it")];
    let paused = chat
        .clone()
        .oneshot(ChatRequest::new(history.clone()))
        .await?
        .collect_response()
        .await?;
    println!(
        "2. finish={:?}, approval requested for {:?}",
        paused.finish_reason,
        paused
            .approval_requests
            .iter()
            .map(|a| a.call.name.as_str())
            .collect::<Vec<_>>()
    );
    history.extend(paused.messages);
    let resume = ChatRequest::new(history)
        .with_extension(ApprovalDecisions(vec![ApprovalDecision::approve("d1")]));
    let done = chat.oneshot(resume).await?.collect_response().await?;
    println!("   after approval: {}", done.text());
    Ok(())
}
