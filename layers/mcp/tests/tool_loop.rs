//! MCP calls take the tool loop's own path: its concurrency limit applies to them as to a local tool's.
//! (Spans: `spans.rs`; validation, timeouts, cancellation and error results: `stdio.rs`, `http.rs`.)

mod common;

use common::*;
use serde_json::json;
use tower_chat_function_invocation::FunctionInvocationLayer;

#[tokio::test]
async fn the_loop_concurrency_limit_applies_to_mcp_calls() {
    let (server, mcp) = http_demo("web", |c| c).await;
    // Each `meet` waits until three calls run at once (or `wait_ms`), then answers the most it saw at once. Under
    // a limit of 3 they meet at once (the bound only caps a failure); under a limit of 1 each waits it out.
    let meet = |wait_ms: u64| {
        (0..3)
            .map(|i| {
                call(
                    &format!("m{i}"),
                    "meet",
                    json!({"count": 3, "wait_ms": wait_ms}),
                )
            })
            .collect()
    };
    for (limit, wait_ms, most) in [(1, 200, "1"), (3, 10_000, "3")] {
        let (model, _) = scripted_model(vec![meet(wait_ms)]);
        let tool_loop = FunctionInvocationLayer::new().max_concurrency(limit);
        let results = tool_messages(
            &respond(stack(&mcp, tool_loop, model), user("go"))
                .await
                .messages,
        );
        assert_eq!(results.len(), 3);
        assert!(
            results.iter().all(|r| r.content == most),
            "limit {limit}: {results:?}"
        );
    }
    assert_eq!(server.state().most_running(), 3);
}
