//! MCP calls run in the tool loop's `execute_tool` spans, as a local tool's do, without arguments or results on
//! them. Alone in its file (its own process): beside another test of the same binary it once saw no span
//! (tracing caches a callsite's interest per process; the other test's thread has no subscriber).

mod common;

use common::*;
use serde_json::json;

// A current-thread runtime: the test's subscriber (set for this thread) sees every span.
#[tokio::test]
async fn mcp_calls_run_in_execute_tool_spans() {
    let (capture, _default) = Capture::install();
    let mcp = tower_chat_mcp::McpTools::start([stdio("demo")])
        .await
        .unwrap();
    let results = call_tools(
        &mcp,
        vec![
            call("c1", "echo", json!({"text": "secret"})),
            call("c2", "fail", json!({"message": "disk full"})),
        ],
    )
    .await;
    assert!(results[1].is_error, "{results:?}");

    let spans = capture.spans();
    let tools: Vec<&SpanRecord> = spans.iter().filter(|s| s.name == "execute_tool").collect();
    assert_eq!(tools.len(), 2, "{spans:?}");
    assert_eq!(tools[0].field("gen_ai.tool.name"), Some("echo"));
    assert_eq!(tools[0].field("gen_ai.tool.call.id"), Some("c1"));
    assert_eq!(tools[0].field("error.type"), None);
    assert_eq!(tools[1].field("gen_ai.tool.name"), Some("fail"));
    assert_eq!(tools[1].field("error.type"), Some("failed"));
    for (name, value) in tools.iter().flat_map(|t| &t.fields) {
        assert!(
            !value.contains("secret") && !value.contains("disk"),
            "{name} = {value}: arguments and results stay out of spans"
        );
    }
}
