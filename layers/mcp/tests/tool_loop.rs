//! MCP calls take the tool loop's own path: its concurrency limit applies to them as to a local tool's.
//! (Spans: `spans.rs`; validation, timeouts, cancellation and error results: `stdio.rs`, `http.rs`.)

mod common;

use common::*;
use serde_json::json;
use tower_chat_function_invocation::FunctionInvocationLayer;

#[tokio::test]
async fn the_loop_concurrency_limit_applies_to_mcp_calls() {
    let (server, mcp) = http_demo("web", |c| c).await;
    // Each `meet` waits for three calls running at once (or 500 ms), then answers the most it saw at once.
    let meet = || {
        (0..3)
            .map(|i| call(&format!("m{i}"), "meet", json!({"count": 3})))
            .collect()
    };
    for (limit, most) in [(1, "1"), (3, "3")] {
        let (model, _) = scripted_model(vec![meet()]);
        let tool_loop = FunctionInvocationLayer::new().max_concurrency(limit);
        let results = tool_messages(&run(stack(&mcp, tool_loop, model), user("go")).await);
        assert_eq!(results.len(), 3);
        assert!(
            results.iter().all(|r| r.content == most),
            "limit {limit}: {results:?}"
        );
    }
    assert_eq!(server.state().most_running(), 3);
}
