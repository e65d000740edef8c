//! The demo MCP server over stdio and HTTP, a stateless stand-in model, and the stack of MCP tools over the
//! tool loop; the rest comes from the kit.
#![allow(dead_code)]

use tower::Layer;
use tower_chat::{
    ApprovalDecision, ApprovalDecisions, ChatEvent, ChatRequest, ChatResponse, FinishReason,
    Message, ToolCall, ToolMessage,
};
use tower_chat_function_invocation::FunctionInvocationLayer;
use tower_chat_mcp::test_server::{serve_http, DemoServer, HttpServer};
use tower_chat_mcp::{McpLayer, McpServerConfig, McpTools};
pub use tower_chat_testkit::*;

/// The stdio demo server binary.
pub const SERVER: &str = env!("CARGO_BIN_EXE_tower-chat-mcp-test-server");

pub fn stdio(name: &str) -> McpServerConfig {
    McpServerConfig::stdio(name, SERVER).args(["--name", name])
}

/// The demo server called `name` in-process over HTTP (so a test sees what it saw), and the MCP tools connected
/// to it with the configuration `configure` makes of the default one.
pub async fn http_demo(
    name: &str,
    configure: impl FnOnce(McpServerConfig) -> McpServerConfig,
) -> (HttpServer, McpTools) {
    let server = serve_http(DemoServer::new(name, false), None)
        .await
        .unwrap();
    let mcp = McpTools::start([configure(McpServerConfig::http(name, server.url()))])
        .await
        .unwrap();
    (server, mcp)
}

/// A model that makes the tool calls of `rounds[n]` when its history holds `n` assistant messages, and after the
/// last round answers with the contents of the tool messages since its last assistant message, one per line.
pub fn scripted_model(rounds: Vec<Vec<ToolCall>>) -> (Chat, Model) {
    model(Delivery::AllAtOnce, move |request: &ChatRequest| {
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
                let results: Vec<String> = latest_tool_messages(&request.messages)
                    .into_iter()
                    .map(|t| t.content.to_string())
                    .collect();
                vec![
                    ChatEvent::text(results.join("\n")),
                    ChatEvent::finish(FinishReason::Stop),
                ]
            }
        };
        events.into_iter().map(Ok).collect()
    })
}

/// The full stack: MCP tools offered to the tool loop over the model.
pub fn stack(mcp: &McpTools, tool_loop: FunctionInvocationLayer, model: Chat) -> Chat {
    Chat::new(McpLayer::new(mcp.clone()).layer(tool_loop.layer(model)))
}

/// Run one round of `calls` through the default tool loop; the tool messages the model got back.
pub async fn call_tools(mcp: &McpTools, calls: Vec<ToolCall>) -> Vec<ToolMessage> {
    let (model, _) = scripted_model(vec![calls]);
    let chat = stack(mcp, FunctionInvocationLayer::new(), model);
    tool_messages(&respond(chat, user("go")).await.messages)
}

/// The request that resumes `paused` (asked as `asked`) with `decision`.
pub fn resume(asked: &str, paused: ChatResponse, decision: ApprovalDecision) -> ChatRequest {
    let mut history = vec![Message::user(asked)];
    history.extend(paused.messages);
    ChatRequest::new(history).with_extension(ApprovalDecisions(vec![decision]))
}

/// Wait until `condition` holds for the MCP tools (checked after every change), bounded by [`BOUND`].
pub async fn wait_until(mcp: &McpTools, condition: impl Fn(&McpTools) -> bool) {
    let mut changes = mcp.subscribe();
    tokio::time::timeout(BOUND, async {
        loop {
            if condition(mcp) {
                return;
            }
            changes.changed().await.expect("the MCP tools are alive");
        }
    })
    .await
    .unwrap_or_else(|_| panic!("condition not reached; status: {:?}", mcp.status()));
}
