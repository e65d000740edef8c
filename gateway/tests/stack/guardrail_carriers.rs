//! Every text a request carries goes through the request-stage checks, whichever format carries it: assistant
//! history (text and tool-call arguments, their keys too), text documents, text split over Anthropic text
//! blocks, tool descriptions and schemas, `user`, `stop`, Responses `function_call` arguments and image URLs,
//! and text hidden by zero-width characters. Over real HTTP to the gateway, in front of the scripted upstream.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::Reply;
use tower_chat_gateway::config_file::ConfigFile;

use common::Harness;

/// An AWS access key id: the `secrets` check blocks it.
const KEY: &str = "AKIAIOSFODNN7EXAMPLE";

const POLICY: &str = common::GUARDRAIL_SECRETS_AND_PERSONAL_DATA;

async fn gateway() -> Harness {
    let file = ConfigFile::parse(POLICY, "gateway.toml").unwrap();
    Harness::start(
        |_request, _index| Reply::openai_text("ok"),
        |config| config.file = file,
    )
    .await
}

fn base64(text: &str) -> String {
    tower_chat::Blob::new(text.as_bytes().to_vec(), "text/plain")
        .base64()
        .to_owned()
}

/// A request carrying the key in one place: its name, route and body.
fn carriers() -> Vec<(&'static str, &'static str, Value)> {
    let chat = |messages: Value, more: Value| {
        let mut body = json!({"model": "m", "messages": messages});
        body.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        body
    };
    let messages = |content: Value, more: Value| {
        let mut body = json!({"model": "m", "max_tokens": 50,
            "messages": [{"role": "user", "content": content}]});
        body.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        body
    };
    let responses = |input: Value, more: Value| {
        let mut body = json!({"model": "m", "input": input});
        body.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        body
    };
    let hi = json!([{"role": "user", "content": "hi"}]);
    let tool = |description: &str, parameters: Value| {
        json!({"type": "function", "function": {"name": "lookup", "description": description,
            "parameters": parameters}})
    };
    vec![
        (
            "chat assistant text",
            "/v1/chat/completions",
            chat(
                json!([{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": format!("the key is {KEY}")},
                    {"role": "user", "content": "thanks"}]),
                json!({}),
            ),
        ),
        (
            "chat assistant tool call arguments",
            "/v1/chat/completions",
            chat(
                json!([{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "lookup", "arguments": json!({"key": KEY}).to_string()}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "done"}]),
                json!({}),
            ),
        ),
        (
            "chat assistant tool call argument keys",
            "/v1/chat/completions",
            chat(
                json!([{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "lookup", "arguments": json!({KEY: 1}).to_string()}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "done"}]),
                json!({}),
            ),
        ),
        (
            "chat text/plain file",
            "/v1/chat/completions",
            chat(
                json!([{"role": "user", "content": [{"type": "text", "text": "read this"},
                    {"type": "file", "file": {"filename": "notes.txt",
                        "file_data": format!("data:text/plain;base64,{}", base64(&format!("key {KEY}")))}}]}]),
                json!({}),
            ),
        ),
        (
            "chat tool description",
            "/v1/chat/completions",
            chat(
                hi.clone(),
                json!({"tools": [tool(&format!("uses {KEY}"), json!({"type": "object"}))]}),
            ),
        ),
        (
            "chat tool schema",
            "/v1/chat/completions",
            chat(
                hi.clone(),
                json!({"tools": [tool("looks up", json!({"type": "object",
                    "properties": {"q": {"type": "string", "description": format!("default {KEY}")}}}))]}),
            ),
        ),
        (
            "chat user",
            "/v1/chat/completions",
            chat(hi.clone(), json!({"user": KEY})),
        ),
        (
            "chat stop",
            "/v1/chat/completions",
            chat(hi.clone(), json!({"stop": [KEY]})),
        ),
        (
            "chat image URL",
            "/v1/chat/completions",
            chat(
                json!([{"role": "user", "content": [{"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": format!("https://example.com/a.png?key={KEY}")}}]}]),
                json!({}),
            ),
        ),
        (
            "chat zero-width characters",
            "/v1/chat/completions",
            chat(
                json!([{"role": "user", "content": "use AKIA\u{200b}IOSFODNN7\u{200d}EXAMPLE"}]),
                json!({}),
            ),
        ),
        (
            "messages text document",
            "/v1/messages",
            messages(
                json!([{"type": "document", "source": {"type": "text", "media_type": "text/plain",
                    "data": format!("key {KEY}")}}, {"type": "text", "text": "read it"}]),
                json!({}),
            ),
        ),
        (
            "messages key split over two text blocks",
            "/v1/messages",
            messages(
                json!([{"type": "text", "text": "use AKIAIOSFO"}, {"type": "text", "text": "DNN7EXAMPLE"}]),
                json!({}),
            ),
        ),
        (
            "messages key split over two system blocks",
            "/v1/messages",
            messages(
                json!("hi"),
                json!({"system": [{"type": "text", "text": "use AKIAIOSFO"},
                    {"type": "text", "text": "DNN7EXAMPLE"}]}),
            ),
        ),
        (
            "messages tool description",
            "/v1/messages",
            messages(
                json!("hi"),
                json!({"tools": [{"name": "lookup", "description": format!("uses {KEY}"),
                    "input_schema": {"type": "object"}}]}),
            ),
        ),
        (
            "messages metadata user",
            "/v1/messages",
            messages(json!("hi"), json!({"metadata": {"user_id": KEY}})),
        ),
        (
            "messages stop sequences",
            "/v1/messages",
            messages(json!("hi"), json!({"stop_sequences": [KEY]})),
        ),
        (
            "responses input_file",
            "/v1/responses",
            responses(
                json!([{"role": "user", "content": [{"type": "input_text", "text": "read"},
                    {"type": "input_file", "filename": "notes.txt", "file_data": base64(&format!("key {KEY}"))}]}]),
                json!({}),
            ),
        ),
        (
            "responses function_call arguments",
            "/v1/responses",
            responses(
                json!([{"role": "user", "content": "hi"},
                    {"type": "function_call", "call_id": "c1", "name": "lookup",
                        "arguments": json!({"key": KEY}).to_string()},
                    {"type": "function_call_output", "call_id": "c1", "output": "done"}]),
                json!({}),
            ),
        ),
        (
            "responses image URL",
            "/v1/responses",
            responses(
                json!([{"role": "user", "content": [{"type": "input_text", "text": "see"},
                    {"type": "input_image", "image_url": format!("https://example.com/a.png?key={KEY}")}]}]),
                json!({}),
            ),
        ),
        (
            "responses user",
            "/v1/responses",
            responses(json!("hi"), json!({"user": KEY})),
        ),
        (
            "messages field the gateway does not model",
            "/v1/messages",
            messages(json!("hi"), json!({"context_management": {"note": KEY}})),
        ),
        (
            "responses field the gateway does not model",
            "/v1/responses",
            responses(json!("hi"), json!({"client_metadata": {"note": KEY}})),
        ),
        (
            "chat field the gateway does not model",
            "/v1/chat/completions",
            chat(hi.clone(), json!({"prompt_cache_key": KEY})),
        ),
    ]
}

#[tokio::test]
async fn a_key_in_any_text_the_request_carries_is_refused_before_it_leaves() {
    let gw = gateway().await;
    let mut missed = Vec::new();
    for (carrier, path, body) in carriers() {
        let answer = gw.post_json(path, &body, &[]).await;
        if answer.status != 400 || !answer.body.contains("content_filter") {
            missed.push(format!("{carrier}: {} {}", answer.status, answer.body));
        }
        assert!(!answer.body.contains(KEY), "{carrier}: {}", answer.body);
    }
    assert!(missed.is_empty(), "not refused:\n{}", missed.join("\n"));
    assert!(
        gw.provider.requests().is_empty(),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn personal_data_in_assistant_history_is_redacted_before_it_leaves() {
    let gw = gateway().await;
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "who?"},
        {"role": "assistant", "content": "write to jane@example.com", "tool_calls": [{"id": "c1",
            "type": "function", "function": {"name": "mail", "arguments": "{\"to\":\"jane@example.com\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sent"},
        {"role": "user", "content": "thanks"}]});
    let answer = gw.post_json("/v1/chat/completions", &body, &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let sent = gw.upstream_messages(0);
    let assistant = &sent[1];
    assert_eq!(assistant["content"], "write to [REDACTED:email]");
    let arguments = assistant["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert_eq!(arguments, r#"{"to":"[REDACTED:email]"}"#);
    assert!(!Value::Array(sent).to_string().contains("jane@"));
}

#[tokio::test]
async fn a_body_of_near_misses_past_max_candidates_is_a_400_naming_the_setting() {
    let file = ConfigFile::parse(
        "[[guardrail.policy]]\nmax_candidates = 200\n[[guardrail.policy.check]]\nkind = \"personal_data\"\n",
        "gateway.toml",
    )
    .unwrap();
    let gw = Harness::start(
        |_request, _index| Reply::openai_text("ok"),
        |config| config.file = file,
    )
    .await;
    let body = |words: usize| json!({"model": "m", "messages": [{"role": "user", "content": "AB12 ".repeat(words)}]});
    let answer = gw
        .post_json("/v1/chat/completions", &body(1_000), &[])
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let error = &answer.json()["error"];
    assert_eq!(error["code"], "content_filter");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_candidates"),
        "{error}"
    );
    assert!(gw.provider.requests().is_empty());

    let answer = gw.post_json("/v1/chat/completions", &body(100), &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}
