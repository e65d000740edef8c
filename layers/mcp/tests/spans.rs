//! MCP calls run in the tool loop's `execute_tool` spans, as a local tool's do, without arguments or results on
//! them. Alone in its file (its own process): beside another test of the same binary it once saw no span
//! (tracing caches a callsite's interest per process; the other test's thread has no subscriber).

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

#[derive(Clone, Debug, Default)]
struct SpanRecord {
    id: u64,
    name: String,
    fields: Vec<(String, String)>,
}

/// Records every span with its fields.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<SpanRecord>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut record = SpanRecord {
            id: id.into_u64(),
            name: attrs.metadata().name().to_owned(),
            fields: Vec::new(),
        };
        attrs.record(&mut Fields(&mut record.fields));
        self.0.lock().unwrap().push(record);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(record) = spans.iter_mut().find(|r| r.id == id.into_u64()) {
            values.record(&mut Fields(&mut record.fields));
        }
    }
}

fn field<'a>(record: &'a SpanRecord, name: &str) -> Option<&'a str> {
    record
        .fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

// A current-thread runtime: the test's subscriber (set for this thread) sees every span.
#[tokio::test]
async fn mcp_calls_run_in_execute_tool_spans() {
    let recorder = Recorder::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorder.clone()));
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

    let spans = recorder.0.lock().unwrap().clone();
    let tools: Vec<&SpanRecord> = spans.iter().filter(|s| s.name == "execute_tool").collect();
    assert_eq!(tools.len(), 2, "{spans:?}");
    assert_eq!(field(tools[0], "gen_ai.tool.name"), Some("echo"));
    assert_eq!(field(tools[0], "gen_ai.tool.call.id"), Some("c1"));
    assert_eq!(field(tools[0], "error.type"), None);
    assert_eq!(field(tools[1], "gen_ai.tool.name"), Some("fail"));
    assert_eq!(field(tools[1], "error.type"), Some("failed"));
    for (name, value) in tools.iter().flat_map(|t| &t.fields) {
        assert!(
            !value.contains("secret") && !value.contains("disk"),
            "{name} = {value}: arguments and results stay out of spans"
        );
    }
}
