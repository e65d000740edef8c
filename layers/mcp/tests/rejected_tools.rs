//! A listed tool whose schema does not compile is reported (a typed error from `McpTools`, a warning naming the
//! server, the tool and the reason), not silently left out; the server's other tools are offered. Alone in its
//! file: it installs the process's global subscriber to see the warning.

use std::sync::{Arc, Mutex};

use serde_json::json;
use tower_chat::ErrorKind;
use tower_chat_mcp::rmcp::model::Tool;
use tower_chat_mcp::test_server::{serve_http, DemoServer};
use tower_chat_mcp::{McpServerConfig, McpTools};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// An event's fields, by name.
type Fields = Vec<(String, String)>;

/// The fields of every warning.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<Fields>>>);

struct Recorder<'a>(&'a mut Fields);

impl Visit for Recorder<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl<S: Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if *event.metadata().level() == Level::WARN {
            let mut fields = Vec::new();
            event.record(&mut Recorder(&mut fields));
            self.0.lock().unwrap().push(fields);
        }
    }
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_tool_whose_schema_does_not_compile_is_reported() {
    let warnings = Warnings::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(warnings.clone()))
        .unwrap();
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
    let warnings = warnings.0.lock().unwrap().clone();
    let warning = warnings
        .iter()
        .find(|w| field(w, "mcp.tool") == Some("strict_read"))
        .unwrap_or_else(|| panic!("no warning about the tool: {warnings:?}"));
    assert_eq!(field(warning, "mcp.server"), Some("demo"));
    assert!(
        field(warning, "error").is_some_and(|e| e.contains("unevaluatedProperties")),
        "{warning:?}"
    );
}
