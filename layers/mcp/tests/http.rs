//! MCP servers over streamable HTTP: the demo server in-process on 127.0.0.1, so the tests see what it saw.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tower_chat::{ChatRequest, Message, ToolMessage};
use tower_chat_function_invocation::FunctionInvocationLayer;
use tower_chat_mcp::test_server::{serve_http, serve_http_at, DemoServer};
use tower_chat_mcp::{Backoff, McpAllowList, McpServerConfig, McpTools};

#[tokio::test]
async fn lists_and_calls_with_a_bearer_token_from_the_environment() {
    let server = serve_http(DemoServer::new("web", false), Some("s3cret".into()))
        .await
        .unwrap();
    std::env::set_var("TOWER_CHAT_MCP_TEST_TOKEN_OK", "s3cret");
    let config =
        McpServerConfig::http("web", server.url()).bearer_token_env("TOWER_CHAT_MCP_TEST_TOKEN_OK");
    let mcp = McpTools::start([config]).await.unwrap();
    assert!(mcp.status()[0].connected, "{:?}", mcp.status());

    let results = call_tools(
        &mcp,
        vec![
            call("c1", "echo", json!({"text": "hi"})),
            call("c2", "add", json!({"a": 1, "b": 2})),
            call("c3", "fail", json!({"message": "nope"})),
        ],
    )
    .await;
    assert_eq!(
        results,
        vec![
            ToolMessage::success("c1", "echo", "web: hi"),
            ToolMessage::success("c2", "add", r#"{"sum":3.0}"#),
            ToolMessage::error("c3", "fail", "error: nope"),
        ]
    );
    assert_eq!(server.state().calls(), 3);
}

#[tokio::test]
async fn a_missing_or_wrong_token_fails_the_start_and_is_reported() {
    let server = serve_http(DemoServer::new("web", false), Some("s3cret".into()))
        .await
        .unwrap();
    std::env::set_var("TOWER_CHAT_MCP_TEST_TOKEN_BAD", "guess");
    let unset = McpServerConfig::http("unset", server.url())
        .bearer_token_env("TOWER_CHAT_MCP_TEST_TOKEN_UNSET");
    let wrong = McpServerConfig::http("wrong", server.url())
        .bearer_token_env("TOWER_CHAT_MCP_TEST_TOKEN_BAD");
    let mcp = McpTools::start([unset, wrong]).await.unwrap();
    let status = mcp.status();
    let unset = status[0].last_error.as_deref().unwrap();
    assert!(
        unset.contains("TOWER_CHAT_MCP_TEST_TOKEN_UNSET is not set"),
        "{unset}"
    );
    assert!(!status[1].connected);
    let wrong = status[1].last_error.as_deref().unwrap();
    assert!(wrong.contains("MCP server `wrong`"), "{wrong}");
    assert!(
        !wrong.contains("guess"),
        "the token never appears in errors: {wrong}"
    );
    assert!(mcp.tools().is_empty());
}

#[tokio::test]
async fn invalid_arguments_never_reach_the_server() {
    let (server, mcp) = http_demo("web", |c| c).await;
    let results = call_tools(&mcp, vec![call("c1", "add", json!({"a": "one", "b": 2}))]).await;
    assert!(results[0].is_error);
    assert!(
        results[0].content.to_string().contains("at /a"),
        "{results:?}"
    );
    assert_eq!(server.state().calls(), 0);
}

#[tokio::test]
async fn a_timeout_sends_the_cancellation_notification() {
    let (server, mcp) = http_demo("web", |c| c.timeout(Duration::from_millis(300))).await;
    // The server's own limit applies, though the loop has none.
    let results = call_tools(&mcp, vec![call("c1", "hang", json!({}))]).await;
    assert!(
        results[0]
            .content
            .to_string()
            .contains("did not finish within 300ms"),
        "{results:?}"
    );
    tokio::time::timeout(BOUND, server.state().wait_cancelled(1))
        .await
        .expect("the server saw notifications/cancelled");
}

#[tokio::test]
async fn a_cancelled_request_cancels_the_call() {
    use futures_util::StreamExt;
    use tower::ServiceExt;

    let (server, mcp) = http_demo("web", |c| c).await;
    let (model, _) = scripted_model(vec![vec![call("c1", "hang", json!({}))]]);
    let token = tower_chat::CancellationToken::new();
    let request = user("go").with_extension(token.clone());
    let stream = stack(&mcp, FunctionInvocationLayer::new(), model)
        .oneshot(request)
        .await
        .unwrap();
    let state = server.state().clone();
    let consumer = tokio::spawn(stream.collect::<Vec<_>>());
    // Cancel once the server is running the call.
    tokio::time::timeout(BOUND, async {
        while state.calls() < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    token.cancel();
    let events = tokio::time::timeout(BOUND, consumer)
        .await
        .unwrap()
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        last.as_ref().unwrap_err().kind(),
        &tower_chat::ErrorKind::Cancelled
    );
    tokio::time::timeout(BOUND, state.wait_cancelled(1))
        .await
        .expect("the server saw notifications/cancelled");
}

#[tokio::test]
async fn a_list_change_is_followed() {
    let (_server, mcp) = http_demo("web", |c| c).await;
    call_tools(
        &mcp,
        vec![call("c1", "add_tool", json!({"name": "whisper"}))],
    )
    .await;
    wait_until(&mcp, |mcp| mcp.tools().get("whisper").is_some()).await;
    assert_eq!(
        call_tools(&mcp, vec![call("c2", "whisper", json!({"text": "psst"}))]).await,
        vec![ToolMessage::success("c2", "whisper", "whisper: psst")]
    );
}

#[tokio::test]
async fn an_allow_list_limits_what_is_offered_and_refuses_the_rest() {
    let (server, mcp) = http_demo("web", |c| c).await;
    let (model, seen) = scripted_model(vec![vec![
        call("c1", "echo", json!({"text": "ok"})),
        call("c2", "delete_note", json!({"key": "a"})),
    ]]);
    let request = ChatRequest::new(vec![Message::user("go")])
        .with_extension(McpAllowList::parse(["web/echo", "other"]).unwrap());
    let response = respond(stack(&mcp, FunctionInvocationLayer::new(), model), request).await;
    assert_eq!(seen.offered(0), vec!["echo".to_owned()]);
    let results = tool_messages(&response.messages);
    assert_eq!(results[0], ToolMessage::success("c1", "echo", "web: ok"));
    assert!(results[1].is_error);
    assert!(
        results[1].content.to_string().contains("delete_note"),
        "{results:?}"
    );
    assert_eq!(
        server.state().calls(),
        1,
        "the refused call never reached the server"
    );
}

#[tokio::test]
async fn a_server_that_goes_away_mid_call_is_an_error_result_and_works_again_once_back() {
    let first = serve_http(DemoServer::new("web", false), None)
        .await
        .unwrap();
    let (url, addr, state) = (first.url().to_owned(), first.addr(), first.state().clone());
    let fast = Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(100),
    };
    let mcp = McpTools::start([McpServerConfig::http("web", url).backoff(fast)])
        .await
        .unwrap();
    let calling = tokio::spawn({
        let mcp = mcp.clone();
        async move { call_tools(&mcp, vec![call("c1", "hang", json!({}))]).await }
    });
    tokio::time::timeout(BOUND, async {
        while state.calls() < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    drop(first);
    let results = tokio::time::timeout(BOUND, calling).await.unwrap().unwrap();
    assert!(results[0].is_error, "{results:?}");

    // Back on the same address: the next call works (rmcp opens a new session on the same connection).
    let _second = serve_http_at(DemoServer::new("web", false), None, addr)
        .await
        .unwrap();
    assert_eq!(
        call_tools(&mcp, vec![call("c2", "echo", json!({"text": "back"}))]).await,
        vec![ToolMessage::success("c2", "echo", "web: back")]
    );
}
