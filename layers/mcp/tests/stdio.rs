//! MCP servers over stdio: the demo server binary, spawned as a child process.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tower_chat::{FinishReason, ToolMessage};
use tower_chat_function_invocation::FunctionInvocationLayer;
use tower_chat_mcp::{Backoff, McpServerConfig, McpTools};

fn fast_restart(config: McpServerConfig) -> McpServerConfig {
    config.backoff(Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(100),
    })
}

/// How many calls the server saw cancelled, once it has seen at least one (it waits up to 10 s).
async fn cancellations(mcp: &McpTools) -> String {
    let results = call_tools(
        mcp,
        vec![call("c9", "cancellations", json!({"at_least": 1}))],
    )
    .await;
    results[0].content.to_string()
}

#[tokio::test]
async fn lists_and_calls_text_structured_and_error_results() {
    let mcp = McpTools::start([stdio("demo")]).await.unwrap();
    let status = mcp.status();
    assert!(status[0].connected, "{status:?}");
    let names: Vec<String> = mcp.tools().iter().map(|t| t.name().to_owned()).collect();
    for expected in ["echo", "add", "fail", "hang", "add_tool", "delete_note"] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    let echo = mcp.tools().get("echo").unwrap().clone();
    assert_eq!(echo.hints().read_only, Some(true));
    assert_eq!(echo.hints().source.as_deref(), Some("demo"));
    assert_eq!(echo.spec().parameters["required"], json!(["text"]));

    let (model, seen) = scripted_model(vec![vec![
        call("c1", "echo", json!({"text": "hi"})),
        call("c2", "add", json!({"a": 2, "b": 3.5})),
        call("c3", "fail", json!({"message": "disk full"})),
    ]]);
    let response = respond(
        stack(&mcp, FunctionInvocationLayer::new(), model),
        user("go"),
    )
    .await;
    assert_eq!(
        tool_messages(&response.messages),
        vec![
            ToolMessage::success("c1", "echo", "demo: hi"),
            ToolMessage::success("c2", "add", r#"{"sum":5.5}"#),
            ToolMessage::error("c3", "fail", "error: disk full"),
        ]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert!(seen.offered(0).contains(&"add".to_owned()));
}

#[tokio::test]
async fn arguments_are_validated_against_the_server_schema() {
    let mcp = McpTools::start([stdio("demo")]).await.unwrap();
    let results = call_tools(
        &mcp,
        vec![
            call("c1", "echo", json!({"text": 5})),
            // The server counts cancelled calls; it would fail this call if it saw the bad argument.
            call("c2", "cancellations", json!({"at_least": -1})),
        ],
    )
    .await;
    assert!(results[0].is_error, "{results:?}");
    assert!(
        results[0]
            .content
            .to_string()
            .contains("invalid arguments for tool `echo`"),
        "{results:?}"
    );
    assert!(
        results[0].content.to_string().contains("at /text"),
        "{results:?}"
    );
    assert!(results[1].is_error, "{results:?}");
    assert!(
        results[1].content.to_string().contains("at /at_least"),
        "{results:?}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_hits_the_tool_timeout_and_is_told_to_cancel() {
    let mcp = McpTools::start([stdio("demo")]).await.unwrap();
    let (model, _) = scripted_model(vec![vec![call("c1", "hang", json!({}))]]);
    let tool_loop = FunctionInvocationLayer::new().tool_timeout(Duration::from_millis(300));
    let response = respond(stack(&mcp, tool_loop, model), user("go")).await;
    let results = tool_messages(&response.messages);
    assert!(results[0].is_error);
    assert!(
        results[0]
            .content
            .to_string()
            .contains("did not finish within 300ms"),
        "{results:?}"
    );

    // The server received `notifications/cancelled` for the abandoned call (it waits for the count).
    assert_eq!(cancellations(&mcp).await, "1");
}

#[tokio::test]
async fn a_dropped_stream_cancels_the_running_call() {
    use futures_util::{FutureExt, StreamExt};
    use tower::ServiceExt;

    let mcp = McpTools::start([stdio("demo")]).await.unwrap();
    let (model, _) = scripted_model(vec![vec![call("c1", "hang", json!({}))]]);
    let chat = stack(&mcp, FunctionInvocationLayer::new(), model);
    let mut stream = chat.oneshot(user("go")).await.unwrap();
    // The call event arrives before the tool runs; the next poll sends the call, which cannot finish.
    let first = stream.next().await.unwrap().unwrap();
    assert!(
        matches!(first, tower_chat::ChatEvent::ToolCallEnd { .. }),
        "{first:?}"
    );
    assert!(stream.next().now_or_never().is_none());
    drop(stream);
    assert_eq!(cancellations(&mcp).await, "1");
}

#[tokio::test]
async fn a_crash_mid_call_is_an_error_result_and_the_server_restarts() {
    let mcp = McpTools::start([fast_restart(stdio("demo"))])
        .await
        .unwrap();
    assert_eq!(mcp.status()[0].connections, 1);
    let results = call_tools(&mcp, vec![call("c1", "crash", json!({}))]).await;
    assert!(results[0].is_error, "{results:?}");
    assert!(
        results[0].content.to_string().contains("MCP server `demo`"),
        "{results:?}"
    );

    wait_until(&mcp, |mcp| {
        mcp.status()[0].connections == 2 && mcp.status()[0].connected
    })
    .await;
    assert_eq!(
        call_tools(&mcp, vec![call("c2", "echo", json!({"text": "back"}))]).await,
        vec![ToolMessage::success("c2", "echo", "demo: back")]
    );
}

#[tokio::test]
async fn a_list_change_is_followed() {
    let mcp = McpTools::start([stdio("demo")]).await.unwrap();
    assert!(mcp.tools().get("shout").is_none());
    call_tools(&mcp, vec![call("c1", "add_tool", json!({"name": "shout"}))]).await;

    wait_until(&mcp, |mcp| mcp.tools().get("shout").is_some()).await;
    let (model, seen) = scripted_model(vec![vec![call("c2", "shout", json!({"text": "hey"}))]]);
    let response = respond(
        stack(&mcp, FunctionInvocationLayer::new(), model),
        user("go"),
    )
    .await;
    assert_eq!(
        tool_messages(&response.messages),
        vec![ToolMessage::success("c2", "shout", "shout: hey")]
    );
    assert!(seen.offered(0).contains(&"shout".to_owned()));
}

#[tokio::test]
async fn a_server_failing_to_start_is_reported_with_its_stderr_and_the_rest_work() {
    let broken =
        McpServerConfig::stdio("broken", SERVER).args(["--fail-start", "config missing: API_KEY"]);
    let missing = McpServerConfig::stdio("missing", "/nonexistent/mcp-server");
    let mcp = McpTools::start([broken, missing, stdio("demo")])
        .await
        .unwrap();
    let status = mcp.status();
    assert!(!status[0].connected);
    let error = status[0].last_error.as_deref().unwrap();
    assert!(
        error.contains("MCP server `broken` failed to start"),
        "{error}"
    );
    assert!(error.contains("config missing: API_KEY"), "{error}");
    let error = status[1].last_error.as_deref().unwrap();
    assert!(error.contains("/nonexistent/mcp-server"), "{error}");
    assert!(status[2].connected, "{status:?}");

    assert_eq!(
        call_tools(
            &mcp,
            vec![call("c1", "echo", json!({"text": "still here"}))]
        )
        .await,
        vec![ToolMessage::success("c1", "echo", "demo: still here")]
    );
}

#[tokio::test]
async fn colliding_names_are_prefixed_by_server() {
    let mcp = McpTools::start([stdio("alpha"), stdio("beta")])
        .await
        .unwrap();
    let tools = mcp.tools();
    assert!(tools.get("echo").is_none());
    assert!(tools.get("alpha__echo").is_some());
    let beta = tools.get("beta__echo").unwrap();
    assert_eq!(beta.hints().source_name.as_deref(), Some("echo"));

    let results = call_tools(
        &mcp,
        vec![
            call("c1", "alpha__echo", json!({"text": "x"})),
            call("c2", "beta__echo", json!({"text": "y"})),
        ],
    )
    .await;
    assert_eq!(
        results,
        vec![
            ToolMessage::success("c1", "alpha__echo", "alpha: x"),
            ToolMessage::success("c2", "beta__echo", "beta: y"),
        ]
    );

    // A reserved name (a local tool's) is never taken by an MCP tool.
    let single = McpTools::start([stdio("demo")]).await.unwrap();
    single.reserve_names(["echo"]);
    assert!(single.tools().get("echo").is_none());
    assert!(single.tools().get("demo__echo").is_some());
    assert!(single.tools().get("add").is_some());
}
