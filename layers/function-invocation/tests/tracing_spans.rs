//! Every tool body runs in an `execute_tool` span under the span that polls the stream, without arguments or
//! results on it.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use serde_json::json;
use tower::ServiceExt;
use tower_chat_function_invocation::FunctionInvocationLayer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Instrument, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

#[derive(Clone, Debug, Default)]
struct SpanRecord {
    id: u64,
    name: String,
    parent: Option<String>,
    fields: Vec<(String, String)>,
}

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
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map(|parent| parent.name().to_owned());
        let mut record = SpanRecord {
            id: id.into_u64(),
            name: attrs.metadata().name().to_owned(),
            parent,
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

#[tokio::test]
async fn tool_bodies_run_in_execute_tool_spans_under_the_polling_span() {
    for shape in SHAPES {
        let recorder = Recorder::default();
        let subscriber = tracing_subscriber::registry().with(recorder.clone());
        let _default = tracing::subscriber::set_default(subscriber);

        let (inner, _) = scripted(
            shape,
            vec![
                calls(&[
                    ("call-1", "weather", json!({"city": "Oslo"})),
                    ("call-2", "db", json!({})),
                ]),
                answer("ok"),
            ],
        );
        let layer = FunctionInvocationLayer::new()
            .tool(weather(counter()))
            .unwrap()
            .tool(counting("db", counter(), Err("disk full")))
            .unwrap();
        let stream = stack(layer, inner).oneshot(user("x")).await.unwrap();
        let parent = tracing::info_span!("chat");
        let (events, error) = drain(stream).instrument(parent).await;
        assert!(error.is_none());
        assert_eq!(tool_results(&events).len(), 2);

        let spans = recorder.0.lock().unwrap().clone();
        let tools: Vec<&SpanRecord> = spans.iter().filter(|s| s.name == "execute_tool").collect();
        assert_eq!(tools.len(), 2, "{shape:?}: {spans:?}");
        let weather = tools[0];
        assert_eq!(weather.parent.as_deref(), Some("chat"));
        assert_eq!(field(weather, "otel.name"), Some("execute_tool weather"));
        assert_eq!(
            field(weather, "gen_ai.operation.name"),
            Some("execute_tool")
        );
        assert_eq!(field(weather, "gen_ai.tool.name"), Some("weather"));
        assert_eq!(field(weather, "gen_ai.tool.call.id"), Some("call-1"));
        assert_eq!(field(weather, "error.type"), None);
        let db = tools[1];
        assert_eq!(field(db, "otel.name"), Some("execute_tool db"));
        assert_eq!(field(db, "error.type"), Some("failed"));
        for record in &tools {
            for (name, value) in &record.fields {
                assert!(
                    !value.contains("Oslo") && !value.contains("sunny") && !value.contains("disk"),
                    "{name} = {value}: arguments and results stay out of spans"
                );
            }
        }
    }
}
