//! Contents, tool arguments and results are recorded only when enabled; credentials never.

mod support;

use support::*;
use tower::{Layer, ServiceExt};
use tower_chat::{
    AssistantMessage, ChatError, ChatEvent, ChatRequest, ChatStreamExt, ErrorKind, FinishReason,
    Message, ModelMetadata, ToolCall, ToolMessage,
};
use tower_chat_tracing::TracingLayer;

const KEY: &str = "sk-live-KEY123";

#[derive(Clone, Debug)]
struct ApiKey(#[allow(dead_code)] String);

fn metadata() -> ModelMetadata {
    ModelMetadata {
        endpoint: Some(format!(
            "https://user:{KEY}@api.example.com/v1?api_key={KEY}"
        )),
        ..openai_metadata()
    }
}

fn request() -> ChatRequest {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::AUTHORIZATION,
        format!("Bearer {KEY}").parse().unwrap(),
    );
    ChatRequest::new(vec![
        Message::system("SECRET-SYSTEM"),
        Message::user("SECRET-USER"),
        Message::Assistant(AssistantMessage {
            tool_calls: vec![ToolCall::new(
                "c0",
                "lookup",
                serde_json::json!({"q": "SECRET-OLD-ARGS"}),
            )],
            ..AssistantMessage::default()
        }),
        Message::Tool(ToolMessage::success("c0", "lookup", "SECRET-OLD-RESULT")),
    ])
    .with_extension(ApiKey(KEY.into()))
    .with_extension(headers)
}

/// Events carrying every kind of content, then the given ending.
fn events(ending: Option<ChatError>) -> Vec<Result<ChatEvent, ChatError>> {
    let mut events = vec![
        Ok(ChatEvent::ReasoningDelta {
            text: "SECRET-REASONING".into(),
        }),
        Ok(ChatEvent::ToolCallStart {
            index: 0,
            id: "c1".into(),
            name: "lookup".into(),
        }),
        Ok(ChatEvent::ToolCallDelta {
            index: 0,
            arguments: r#"{"q":"SECRET-ARGS"}"#.into(),
        }),
        Ok(ChatEvent::ToolCallEnd {
            index: 0,
            call: ToolCall::new("c1", "lookup", serde_json::json!({"q": "SECRET-ARGS"})),
        }),
        Ok(ChatEvent::ToolResult {
            result: ToolMessage::success("c1", "lookup", "SECRET-TOOL-RESULT"),
        }),
        Ok(ChatEvent::text("SECRET-OUTPUT")),
    ];
    match ending {
        Some(error) => events.push(Err(error)),
        None => events.push(Ok(ChatEvent::finish(FinishReason::Stop))),
    }
    events
}

fn secret_error() -> ChatError {
    ChatError::new(ErrorKind::Upstream, "SECRET-ERROR echoing the prompt")
}

/// Run the three endings (completed, error item, service error) through a layer and return what was captured.
async fn run(
    layer: TracingLayer<tower_chat_tracing::NoMetrics, tower_chat_tracing::FromModelInfo>,
    shape: Delivery,
) -> Capture {
    let (capture, _guard) = Capture::install();
    for ending in 0..3 {
        let leaf = Scripted {
            reply: move |_req: ChatRequest| async move {
                match ending {
                    0 => Ok(scripted_stream(shape, events(None))),
                    1 => Ok(scripted_stream(shape, events(Some(secret_error())))),
                    _ => Err(secret_error()),
                }
            },
            metadata: metadata(),
        };
        let service = layer.clone().layer(leaf);
        if let Ok(stream) = service.oneshot(request()).await {
            let _ = stream.collect_response().await;
        }
    }
    assert_eq!(capture.named("chat").len(), 3);
    capture
}

const CONTENT: [&str; 9] = [
    "SECRET-SYSTEM",
    "SECRET-USER",
    "SECRET-OLD-ARGS",
    "SECRET-OLD-RESULT",
    "SECRET-REASONING",
    "SECRET-ARGS",
    "SECRET-TOOL-RESULT",
    "SECRET-OUTPUT",
    "SECRET-ERROR",
];

#[tokio::test]
async fn by_default_no_content_is_recorded() {
    for shape in SHAPES {
        let capture = run(TracingLayer::new(), shape).await;
        let text = capture.all_text();
        assert!(
            !text.contains("SECRET"),
            "{shape:?}: content leaked:\n{text}"
        );
        assert!(!text.contains(KEY), "{shape:?}: key leaked:\n{text}");
        // The non-sensitive figures are all there.
        assert!(text.contains("server.address=api.example.com"), "{text}");
        assert!(text.contains("error.type=upstream"), "{text}");
    }
}

#[tokio::test]
async fn record_content_records_contents_arguments_results_and_error_text_but_never_keys() {
    for shape in SHAPES {
        let capture = run(TracingLayer::new().record_content(true), shape).await;
        let text = capture.all_text();
        for secret in CONTENT {
            assert!(
                text.contains(secret),
                "{shape:?}: {secret} missing:\n{text}"
            );
        }
        assert!(!text.contains(KEY), "{shape:?}: key leaked:\n{text}");

        let chats = capture.named("chat");
        let completed = &chats[0].1;
        let input: serde_json::Value =
            serde_json::from_str(completed.field("gen_ai.input.messages").unwrap()).unwrap();
        assert_eq!(
            input[1],
            serde_json::json!({"role": "user", "parts": [{"type": "text", "content": "SECRET-USER"}]})
        );
        let output: serde_json::Value =
            serde_json::from_str(completed.field("gen_ai.output.messages").unwrap()).unwrap();
        assert_eq!(
            output[0]["parts"][1]["arguments"],
            serde_json::json!({"q": "SECRET-ARGS"})
        );
        assert_eq!(output[1]["parts"][0]["response"], "SECRET-TOOL-RESULT");
        assert_eq!(output[2]["parts"][0]["content"], "SECRET-OUTPUT");
        assert_eq!(output[2]["finish_reason"], "stop");
        assert_eq!(completed.field("error.message"), None);

        let failed_stream = &chats[1].1;
        assert_eq!(
            failed_stream.field("error.message"),
            Some("SECRET-ERROR echoing the prompt")
        );
        assert!(failed_stream
            .field("gen_ai.output.messages")
            .unwrap()
            .contains("SECRET-OUTPUT"));
        let failed_call = &chats[2].1;
        assert_eq!(
            failed_call.field("error.message"),
            Some("SECRET-ERROR echoing the prompt")
        );
    }
}
