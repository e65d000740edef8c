//! A two-round tool conversation through the tool loop over the Gemini leaf, against a scripted Gemini server
//! that refuses the second request unless the first round's `thoughtSignature` comes back on its `functionCall`
//! part (as Gemini does for a function-calling continuation), streamed and whole.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat_stack::prelude::*;

const SIGNATURE: &str = "CvcBAdHtim-signed-thinking-of-round-one";

/// Gemini's answer to each request: calls in the first round, text once the results are back — and a 400
/// when a function call in the history lacks its signature.
fn gemini(request: &RecordedRequest, _index: usize) -> Reply {
    let contents = request.body["contents"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let calls: Vec<&Value> = contents
        .iter()
        .filter(|turn| turn["role"] == "model")
        .flat_map(|turn| turn["parts"].as_array().into_iter().flatten())
        .filter(|part| part.get("functionCall").is_some())
        .collect();
    if calls.is_empty() {
        return Reply::gemini_function_calls(
            &[
                ("get_weather", json!({"city": "Paris"})),
                ("get_weather", json!({"city": "Oslo"})),
            ],
            Some(SIGNATURE),
        );
    }
    if calls[0]["thoughtSignature"] != SIGNATURE {
        return Reply::json(
            400,
            json!({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                "Function call is missing a thought_signature in functionCall parts."}}),
        );
    }
    let answered = contents
        .iter()
        .flat_map(|turn| turn["parts"].as_array().into_iter().flatten())
        .filter_map(|part| part.pointer("/functionResponse/response/result"))
        .map(|result| result.as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join(", ");
    Reply::gemini_text(&format!("Weather: {answered}"))
}

#[tokio::test]
async fn the_signature_of_round_one_comes_back_on_its_function_call() {
    let provider = ScriptedProvider::start(gemini).await;
    for stream in [true, false] {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let weather = tool_json(
            "get_weather",
            "Weather for a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            move |args: Value, _ctx| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, String>(format!("sunny in {}", args["city"].as_str().unwrap_or("?"))) }
            },
        )
        .compile()
        .unwrap();
        let chat = ServiceBuilder::new().tool_loop([weather]).unwrap().service(
            GeminiChat::builder()
                .base_url(provider.base_url())
                .api_key("gemini-key")
                .model("gemini-2.5-flash")
                .build()
                .unwrap(),
        );
        let first = provider.requests().len();
        let reply = chat
            .oneshot(
                ChatRequest::new(vec![Message::user("Weather in Paris and Oslo?")]).stream(stream),
            )
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(
            reply.text(),
            "Weather: sunny in Paris, sunny in Oslo",
            "stream: {stream}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        let requests = provider.requests();
        assert_eq!(requests.len() - first, 2);
        let second = &requests[first + 1].body["contents"];
        assert_eq!(second[1]["role"], "model");
        assert_eq!(second[1]["parts"][0]["thoughtSignature"], SIGNATURE);
        assert!(second[1]["parts"][1].get("thoughtSignature").is_none());
        assert_eq!(
            second[2]["parts"][0]["functionResponse"]["name"],
            "get_weather"
        );
    }
}

#[tokio::test]
async fn a_continuation_without_the_signature_is_refused_by_the_scripted_server() {
    // The server's check is live: the same history with the signature dropped is refused.
    let provider = ScriptedProvider::start(gemini).await;
    let leaf = GeminiChat::builder()
        .base_url(provider.base_url())
        .model("gemini-2.5-flash")
        .build()
        .unwrap();
    let first = leaf
        .clone()
        .oneshot(ChatRequest::new(vec![Message::user("Weather?")]))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let Message::Assistant(mut assistant) = first.messages[0].clone() else {
        panic!("{first:?}")
    };
    assistant.reasoning.clear();
    let history = vec![
        Message::user("Weather?"),
        Message::Assistant(assistant.clone()),
        Message::tool_result(assistant.tool_calls[0].id.clone(), "get_weather", "sunny"),
        Message::tool_result(assistant.tool_calls[1].id.clone(), "get_weather", "rainy"),
    ];
    let err = leaf
        .oneshot(ChatRequest::new(history))
        .await
        .err()
        .expect("refused");
    assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    assert!(err.message().contains("thought_signature"), "{err}");
}
