//! Recorded provider responses, one file each in `tests/data/recorded/`, read by their provider's leaf and
//! compared field by field with the reading the file expects: the answer text, the reasoning, each tool call's
//! name and arguments, the finish reason and the usage. The gateway's `tests/recorded.rs` reads every file again
//! through the gateway on each inbound format (Chat Completions, Messages, Responses) against the same
//! expectations. A new recording is one more file:
//!
//! ```json
//! {"provider": "anthropic" | "openai" | "gemini" | "responses",
//!  "stream": true,                      // `body` is the SSE text; false: `body` is the whole JSON response
//!  "body": "...",
//!  "expected": {"text": "...", "reasoning": "...", "tool_calls": [{"name": "...", "arguments": {...}}],
//!               "finish_reason": "stop", "usage": {"input_tokens": 1, "output_tokens": 2}}}
//! ```

use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{ChatRequest, ChatResponse, ChatStreamExt, Message};

/// The reading of a response, in the fixtures' terms.
fn reading(response: &ChatResponse) -> Value {
    let assistant = response.last_assistant();
    let calls: Vec<Value> = assistant
        .map(|a| a.tool_calls.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|call| {
            let arguments: Value =
                serde_json::from_str(&call.arguments.to_wire_string()).unwrap_or(Value::Null);
            json!({"name": call.name, "arguments": arguments})
        })
        .collect();
    json!({
        "text": response.text(),
        "reasoning": assistant.and_then(|a| a.reasoning_text()).unwrap_or_default(),
        "tool_calls": calls,
        "finish_reason": response.finish_reason.as_ref().map(|r| r.as_str().to_owned()),
        "usage": {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens},
    })
}

/// `fixture`'s body read by its provider's leaf, served over loopback.
async fn read_directly(fixture: &Value) -> ChatResponse {
    let stream = fixture["stream"].as_bool().unwrap_or(false);
    let reply = if stream {
        Reply::sse_chunks([fixture["body"]
            .as_str()
            .expect("a streamed body is SSE text")
            .to_owned()])
    } else {
        Reply::json(200, fixture["body"].clone())
    };
    let server = ScriptedProvider::start(move |_, _| reply.clone()).await;
    let request = ChatRequest::new(vec![Message::user("recorded")]).stream(stream);
    let base = server.base_url();
    // Each leaf is its own type, built the same way.
    macro_rules! read_with {
        ($leaf:ty) => {
            <$leaf>::builder()
                .base_url(&base)
                .api_key("recorded")
                .model("recorded")
                .build()
                .unwrap()
                .oneshot(request)
                .await
        };
    }
    let events = match fixture["provider"].as_str().unwrap() {
        "anthropic" => read_with!(tower_chat::anthropic::AnthropicChat),
        "openai" => read_with!(tower_chat::openai::OpenAiChat),
        "gemini" => read_with!(tower_chat::gemini::GeminiChat),
        "responses" => read_with!(tower_chat::responses::ResponsesChat),
        other => panic!("no leaf for provider `{other}`"),
    };
    events
        .expect("the call starts")
        .collect_response()
        .await
        .expect("the recorded response reads whole")
}

#[tokio::test]
async fn every_recorded_response_reads_as_expected() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/recorded");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no recordings in {dir}");
    for path in files {
        let fixture: Value = serde_json::from_slice(&std::fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let read = reading(&read_directly(&fixture).await);
        let expected = &fixture["expected"];
        for field in ["text", "reasoning", "tool_calls", "finish_reason", "usage"] {
            if let Some(want) = expected.get(field) {
                assert_eq!(&read[field], want, "{}: {field}", path.display());
            }
        }
    }
}
