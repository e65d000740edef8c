//! A listed tool whose schema does not compile is reported (a typed error from `McpTools`, a warning naming the
//! server, the tool and the reason), not silently left out; the server's other tools are offered. Alone in its
//! file (its own process): tracing caches a callsite's interest per process.

use std::sync::Arc;

use serde_json::json;
use tower_chat::ErrorKind;
use tower_chat_mcp::rmcp::model::Tool;
use tower_chat_mcp::test_server::{serve_http, DemoServer};
use tower_chat_mcp::{McpServerConfig, McpTools};
use tower_chat_testkit::Capture;

// A current-thread runtime: the test's subscriber (set for this thread) sees the hub's warning.
#[tokio::test]
async fn a_tool_whose_schema_does_not_compile_is_reported() {
    let (capture, _default) = Capture::install();
    // `unevaluatedProperties` beside `allOf`: which properties `allOf` evaluates is only known while validating,
    // which the validator does not track; ignoring the keyword would accept more than the schema says.
    let schema = json!({
        "type": "object",
        "allOf": [{"properties": {"path": {"type": "string"}}}],
        "unevaluatedProperties": false,
    });
    let strict = Tool::new(
        "strict_read",
        "Reads a file, refusing unknown arguments",
        Arc::new(schema.as_object().unwrap().clone()),
    );
    let server = serve_http(DemoServer::new("demo", false).listing(strict), None)
        .await
        .unwrap();
    let mcp = McpTools::start([McpServerConfig::http("demo", server.url())])
        .await
        .unwrap();
    assert!(mcp.status()[0].connected, "{:?}", mcp.status());

    // The other tools are offered; this one is not.
    let tools = mcp.tools();
    assert!(tools.get("echo").is_some());
    assert!(tools.get("strict_read").is_none());

    // A typed error: server, tool, the loop's error kind, and the schema keyword with where it is.
    let rejected = mcp.rejected_tools();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let rejected = &rejected[0];
    assert_eq!(
        (rejected.server(), rejected.tool()),
        ("demo", "strict_read")
    );
    assert_eq!(rejected.error().kind(), &ErrorKind::InvalidRequest);
    let schema_error = rejected.schema_error().expect("a schema error");
    assert_eq!(schema_error.keyword(), "unevaluatedProperties");
    assert_eq!(schema_error.pointer(), "#");
    assert!(
        rejected
            .to_string()
            .contains("`unevaluatedProperties` at #"),
        "{rejected}"
    );

    // A warning naming the server, the tool and the reason.
    let events = capture.events();
    let warning = events
        .iter()
        .find(|e| e.fields.get("mcp.tool").map(String::as_str) == Some("strict_read"))
        .unwrap_or_else(|| panic!("no warning about the tool: {events:?}"));
    assert_eq!(
        warning.fields.get("mcp.server").map(String::as_str),
        Some("demo")
    );
    assert!(
        warning
            .fields
            .get("error")
            .is_some_and(|e| e.contains("unevaluatedProperties")),
        "{warning:?}"
    );
}
