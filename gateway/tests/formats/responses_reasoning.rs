//! Reasoning through `POST /v1/responses` over an Anthropic upstream with extended thinking: the thinking comes
//! back as a `reasoning` item whose `encrypted_content` (asked for with `include`) carries the signature, and
//! when the client hands the items back with its tool output, the upstream gets the `thinking` block byte for
//! byte — on another gateway too, which has no memory of the first round. Streamed and not.

use crate::common;

use common::{Answer, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config::Provider;
use tower_chat_testkit::anthropic_text;

const THINKING: &str = "The user wants Oslo's weather: \"call\" the tool.";
/// Base64 with `+`, `/` and `=`: nothing in it may be re-encoded on the way.
const SIGNATURE: &str = "EqQBCkYIBhgCKkDx+Zr/9signature==";

/// Thinks and calls `get_weather` until the conversation holds its result, then answers.
fn thinking_upstream(request: &RecordedRequest, _: usize) -> Reply {
    let answered = request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|message| message["content"].as_array())
        .flatten()
        .any(|block| block["type"] == "tool_result");
    if answered {
        return anthropic_text("claude-test", "It is sunny in Oslo.");
    }
    let (first, rest) = THINKING.split_at(12);
    Reply::anthropic_stream(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
               "model": "claude-test", "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": first}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": rest}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1,
               "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1,
               "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Oslo\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
               "usage": {"output_tokens": 20}}),
        json!({"type": "message_stop"}),
    ])
}

async fn anthropic_gateway() -> Harness {
    Harness::start(thinking_upstream, |c| c.provider = Provider::Anthropic).await
}

fn tools() -> Value {
    json!([{"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])
}

fn question() -> Value {
    json!({"role": "user", "content": "Weather in Oslo?"})
}

/// The output items of an answer, whole or streamed (from `response.completed`), and the reasoning summary
/// a stream showed as it went.
fn output(answer: &Answer, stream: bool) -> (Vec<Value>, String) {
    assert_eq!(answer.status, 200, "{}", answer.body);
    let (response, summary) = if stream {
        let events = answer.named_events();
        let summary: String = events
            .iter()
            .filter(|(name, _)| name == "response.reasoning_summary_text.delta")
            .map(|(_, event)| event["delta"].as_str().unwrap())
            .collect();
        let (name, completed) = events.last().unwrap();
        assert_eq!(name, "response.completed");
        (completed["response"].clone(), summary)
    } else {
        (answer.json(), String::new())
    };
    (response["output"].as_array().unwrap().clone(), summary)
}

/// The first round on one gateway, the second (the items handed back with the tool's output) on a fresh one:
/// the assistant turn the second upstream call carries.
async fn round_trip(stream: bool, include: bool) -> (Vec<Value>, Value) {
    let first = anthropic_gateway().await;
    let mut body = json!({"model": "claude-test", "input": [question()], "tools": tools(),
                          "stream": stream, "store": false});
    if include {
        body["include"] = json!(["reasoning.encrypted_content"]);
    }
    let (items, summary) = output(&first.post_json("/v1/responses", &body, &[]).await, stream);
    if stream {
        assert_eq!(summary, THINKING);
    }
    let call = items
        .iter()
        .find(|item| item["type"] == "function_call")
        .unwrap();
    assert_eq!(call["call_id"], "toolu_1");

    let second = anthropic_gateway().await;
    let mut input = vec![question()];
    input.extend(items.iter().cloned());
    input.push(json!({"type": "function_call_output", "call_id": "toolu_1", "output": "sunny"}));
    body["input"] = Value::Array(input);
    let answer = second.post_json("/v1/responses", &body, &[]).await;
    let (answer_items, _) = output(&answer, stream);
    let text = answer_items
        .iter()
        .find(|item| item["type"] == "message")
        .map(|item| item["content"][0]["text"].clone());
    assert_eq!(text, Some(json!("It is sunny in Oslo.")));
    let requests = second.provider.requests();
    assert_eq!(requests.len(), 1);
    (items, requests[0].body["messages"][1].clone())
}

#[tokio::test]
async fn thinking_comes_back_to_the_upstream_with_its_signature_byte_for_byte() {
    for stream in [false, true] {
        let (items, assistant) = round_trip(stream, true).await;
        let reasoning = &items[0];
        assert_eq!(reasoning["type"], "reasoning", "{items:?}");
        assert_eq!(
            reasoning["summary"],
            json!([{"type": "summary_text", "text": THINKING}])
        );
        assert!(
            reasoning["encrypted_content"]
                .as_str()
                .is_some_and(|sealed| sealed.starts_with("tower-chat.reasoning.v1:")),
            "{reasoning}"
        );
        assert_eq!(assistant["role"], "assistant");
        assert_eq!(
            assistant["content"][0],
            json!({"type": "thinking", "thinking": THINKING, "signature": SIGNATURE}),
            "stream: {stream}"
        );
        assert_eq!(assistant["content"][1]["type"], "tool_use");
        assert_eq!(assistant["content"][1]["input"], json!({"city": "Oslo"}));
    }
}

#[tokio::test]
async fn without_include_the_reasoning_is_shown_and_not_continued() {
    for stream in [false, true] {
        let (items, assistant) = round_trip(stream, false).await;
        assert_eq!(items[0]["type"], "reasoning");
        assert!(items[0].get("encrypted_content").is_none(), "{}", items[0]);
        // The summary alone is no continuation: the upstream gets the tool call without a thinking block.
        assert_eq!(assistant["content"][0]["type"], "tool_use", "{assistant}");
    }
}

#[tokio::test]
async fn a_sealed_part_that_does_not_decode_is_a_400_naming_the_item() {
    let gw = anthropic_gateway().await;
    let answer = gw
        .post_json(
            "/v1/responses",
            &json!({"model": "claude-test", "tools": tools(), "input": [
                question(),
                {"type": "reasoning", "id": "rs_1", "summary": [],
                 "encrypted_content": "tower-chat.reasoning.v1:not base64!"},
                {"type": "function_call", "call_id": "toolu_1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "toolu_1", "output": "sunny"},
            ]}),
            &[],
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let error = &answer.json()["error"];
    assert_eq!(error["code"], "invalid_request_schema", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("input[1]: `encrypted_content`"),
        "{error}"
    );
    assert!(gw.provider.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_client_hands_reasoning_back_to_another_gateway() {
    let test = "the_openai_python_client_hands_reasoning_back_to_another_gateway";
    let Some(keys) = common::python_keys(test, "openai") else {
        return;
    };
    let gateway = || {
        let keys = keys.path().to_owned();
        Harness::start(thinking_upstream, move |c| {
            c.provider = Provider::Anthropic;
            c.api_keys_file = Some(keys);
        })
    };
    let (first, second) = (gateway().await, gateway().await);
    let args = [
        first.base_url(),
        second.base_url(),
        common::PYTHON_KEY.to_owned(),
    ];
    common::run_python(
        "responses_reasoning_client.py",
        &args,
        &[
            "ok reasoning round trip (stream=False)",
            "ok reasoning round trip (stream=True)",
        ],
    )
    .await;
    let requests = second.provider.requests();
    assert_eq!(requests.len(), 2);
    for request in requests {
        assert_eq!(
            request.body["messages"][1]["content"][0],
            json!({"type": "thinking", "thinking": THINKING, "signature": SIGNATURE})
        );
    }
}
