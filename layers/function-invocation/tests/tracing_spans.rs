//! Every tool body runs in an `execute_tool` span under the span that polls the stream, without arguments or
//! results on it.

mod common;

use common::*;
use serde_json::json;
use tower::ServiceExt;
use tower_chat_function_invocation::FunctionInvocationLayer;
use tracing::Instrument;

#[tokio::test]
async fn tool_bodies_run_in_execute_tool_spans_under_the_polling_span() {
    for shape in SHAPES {
        let (capture, _default) = Capture::install();

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

        let spans = capture.spans();
        let tools: Vec<&SpanRecord> = spans.iter().filter(|s| s.name == "execute_tool").collect();
        assert_eq!(tools.len(), 2, "{shape:?}: {spans:?}");
        let weather = tools[0];
        assert_eq!(weather.parent.map(|p| spans[p].name), Some("chat"));
        assert_eq!(weather.field("otel.name"), Some("execute_tool weather"));
        assert_eq!(weather.field("gen_ai.operation.name"), Some("execute_tool"));
        assert_eq!(weather.field("gen_ai.tool.name"), Some("weather"));
        assert_eq!(weather.field("gen_ai.tool.call.id"), Some("call-1"));
        assert_eq!(weather.field("error.type"), None);
        let db = tools[1];
        assert_eq!(db.field("otel.name"), Some("execute_tool db"));
        assert_eq!(db.field("error.type"), Some("failed"));
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
