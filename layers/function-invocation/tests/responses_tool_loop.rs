//! The tool loop over the OpenAI Responses leaf, over loopback HTTP: a reasoning model's `reasoning` item must
//! come back exactly as received, right before its `function_call`, or the (scripted) provider refuses the
//! second round, as OpenAI does with `store: false`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use tower::{Layer, ServiceExt};
use tower_chat::responses::ResponsesChat;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::{ChatRequest, ChatStreamExt, Continuation, FinishReason, Message};
use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer};

/// Characters JSON escapes and base64 uses: the blob must come back byte for byte.
const ENCRYPTED: &str = "gAAAAABo/+Zs1=\"q\"\\\u{e9}\u{1F600}\n";

/// What the second request must hold; the reason it is refused otherwise.
fn check_continuation(request: &RecordedRequest) -> Result<String, String> {
    let input = request.body["input"].as_array().ok_or("no input")?;
    let at = input
        .iter()
        .position(|item| item["type"] == "reasoning")
        .ok_or("no reasoning item")?;
    let reasoning = &input[at];
    if reasoning["id"] != "rs_1" || reasoning["encrypted_content"].as_str() != Some(ENCRYPTED) {
        return Err(format!("reasoning item not as received: {reasoning}"));
    }
    let call = &input[at + 1];
    if call["type"] != "function_call" || call["call_id"] != "call_1" {
        return Err(format!(
            "reasoning not followed by its function_call: {call}"
        ));
    }
    let output = input
        .iter()
        .find(|item| item["type"] == "function_call_output" && item["call_id"] == "call_1")
        .ok_or("no function_call_output for call_1")?;
    Ok(output["output"].as_str().unwrap_or_default().to_owned())
}

fn reasoning_then_answer(request: &RecordedRequest, index: usize) -> Reply {
    if index == 0 {
        return Reply::responses_reasoning_and_calls(
            &[("rs_1", ENCRYPTED, "The user wants Zürich looked up.")],
            &[("call_1", "lookup", r#"{"q":"Zürich"}"#)],
        );
    }
    match check_continuation(request) {
        Ok(result) => Reply::responses_text(&format!("Found: {result}")),
        Err(why) => Reply::json(
            400,
            json!({"error": {"message": why, "type": "invalid_request_error", "param": "input", "code": null}}),
        ),
    }
}

async fn run(streaming: bool) {
    let provider = ScriptedProvider::start(reasoning_then_answer).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let lookup = tool_json(
        "lookup",
        "Looks something up",
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
        move |args: Value, _ctx| {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(format!("result for {}", args["q"].as_str().unwrap_or("?")))
            }
        },
    )
    .compile()
    .unwrap();
    let leaf = ResponsesChat::builder()
        .base_url(provider.base_url())
        .model("gpt-5-mini")
        .build()
        .unwrap();
    let chat = FunctionInvocationLayer::new()
        .tool(lookup)
        .unwrap()
        .layer(leaf);
    let request = ChatRequest::new(vec![Message::user("Look up Zürich")]).stream(streaming);
    let response = chat
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap_or_else(|e| panic!("streaming={streaming}: {e}"));

    assert_eq!(
        response.text(),
        "Found: result for Zürich",
        "streaming={streaming}"
    );
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Usage over both rounds: 40 + 12 prompt tokens, 8 of them cached; 16 reasoning tokens.
    assert_eq!(response.usage.input_tokens, 52);
    assert_eq!(response.usage.cached_input_tokens, Some(8));
    assert_eq!(response.usage.reasoning_tokens, Some(16));
    let Message::Assistant(first) = &response.messages[0] else {
        panic!(
            "the first round's assistant message: {:?}",
            response.messages[0]
        );
    };
    assert!(matches!(
        &first.reasoning[0].continuation,
        Some(Continuation::OpenAiReasoning { id, .. }) if id == "rs_1"
    ));
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.body["stream"] == streaming));
    assert_eq!(requests[1].path, "/v1/responses");
}

#[tokio::test]
async fn reasoning_is_carried_across_a_tool_round_streamed() {
    run(true).await;
}

#[tokio::test]
async fn reasoning_is_carried_across_a_tool_round_not_streamed() {
    run(false).await;
}
