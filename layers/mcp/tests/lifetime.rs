//! The servers live as long as something can still call them: the `McpTools` handles, and every request holding
//! one of their tools. `oneshot` drops the service (and with it the layer's handle) as soon as it returns the
//! stream, before the tool loop in that stream calls the tools; these calls used to fail with rmcp's "Transport
//! closed". Run on a multi-thread runtime, as `#[tokio::main]` (the crate's doc example) does.

mod common;

use common::*;
use serde_json::json;
use tower_chat::ToolMessage;
use tower_chat_function_invocation::FunctionInvocationLayer;
use tower_chat_mcp::McpTools;

/// Call `add` through a stack that holds the only handle of `mcp`.
async fn add_after_the_last_handle_is_dropped(mcp: McpTools) -> Vec<ToolMessage> {
    let (model, _) = scripted_model(vec![vec![call("c1", "add", json!({"a": 2, "b": 3}))]]);
    let chat = stack(&mcp, FunctionInvocationLayer::new(), model);
    drop(mcp);
    tool_messages(&respond(chat, user("2 + 3?")).await.messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_keeps_an_http_server_up_after_the_last_handle_is_dropped() {
    let (server, mcp) = http_demo("web", |c| c).await;
    assert_eq!(
        add_after_the_last_handle_is_dropped(mcp).await,
        vec![ToolMessage::success("c1", "add", r#"{"sum":5.0}"#)]
    );
    // Once the request is done nothing holds the servers: the client stops and deletes its session.
    let server = &server;
    until(
        "the client deleting its session once the last request was done",
        || async move { server.sessions().await == 0 },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_keeps_a_stdio_server_up_after_the_last_handle_is_dropped() {
    let mcp = McpTools::start([stdio("local")]).await.unwrap();
    assert_eq!(
        add_after_the_last_handle_is_dropped(mcp).await,
        vec![ToolMessage::success("c1", "add", r#"{"sum":5.0}"#)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_the_servers_even_for_running_requests() {
    let (server, mcp) = http_demo("web", |c| c).await;
    assert_eq!(server.sessions().await, 1);
    let (model, _) = scripted_model(vec![vec![call("c1", "add", json!({"a": 2, "b": 3}))]]);
    let chat = stack(&mcp, FunctionInvocationLayer::new(), model);
    mcp.shutdown();
    let results = tool_messages(&respond(chat, user("2 + 3?")).await.messages);
    assert_eq!(
        results,
        vec![ToolMessage::error(
            "c1",
            "add",
            "error: MCP server `web` was shut down"
        )]
    );
    assert_eq!(server.state().calls(), 0);
}
