//! Typed answers through the real leaves over loopback: each provider gets the schema in its own shape, and the
//! answer comes back validated (and repaired) whatever that shape was.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use tower::{Layer, ServiceExt};
use tower_chat::anthropic::AnthropicChat;
use tower_chat::gemini::GeminiChat;
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{ChatEvent, ChatRequest, Message};
use tower_chat_structured_output::{
    AnswerSchema, Partial, StructuredError, StructuredExt, StructuredOutputLayer,
};

mod common;

/// A place with optional details, an enum, a nested struct and a recursive list of itself (through `$defs`).
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Place {
    name: String,
    kind: Kind,
    location: Location,
    population: Option<u64>,
    parts: Vec<Place>,
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
enum Kind {
    City,
    District,
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Location {
    lat: f64,
    lon: f64,
}

const OSLO: &str = r#"{"name": "Oslo", "kind": "City", "location": {"lat": 59.9, "lon": 10.7}, "population": null,
    "parts": [{"name": "Frogner", "kind": "District", "location": {"lat": 59.92, "lon": 10.7}, "population": 59269,
    "parts": []}]}"#;

fn oslo() -> Place {
    Place {
        name: "Oslo".into(),
        kind: Kind::City,
        location: Location {
            lat: 59.9,
            lon: 10.7,
        },
        population: None,
        parts: vec![Place {
            name: "Frogner".into(),
            kind: Kind::District,
            location: Location {
                lat: 59.92,
                lon: 10.7,
            },
            population: Some(59269),
            parts: vec![],
        }],
    }
}

fn question() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Describe Oslo.")])
}

fn property_names(schema: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort();
    names
}

fn sorted(names: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn partial_answers_stream_over_http_and_restart_after_a_repair() {
    use futures_util::StreamExt;
    // Each of the two runs below: a broken answer, then the repaired one.
    let provider = ScriptedProvider::start(|_, index| match index {
        0 | 2 => Reply::openai_text(r#"{"name": "Oslo", "kind": "Town"}"#),
        _ => Reply::openai_text(OSLO),
    })
    .await;
    let chat = OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("k")
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let mut request = question().stream(true);
    request.options.response_format = Some(AnswerSchema::of::<Place>().unwrap().response_format());
    let events: Vec<ChatEvent> = StructuredOutputLayer::new()
        .partial_answers(true)
        .layer(chat.clone())
        .oneshot(request)
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    let answer: Value = serde_json::from_str(OSLO).unwrap();
    common::assert_grows_to(&events, &answer);
    let attempts = common::attempts(&events);
    assert_eq!(attempts.len(), 2, "{events:?}");
    assert_eq!(
        attempts[0].last(),
        Some(&json!({"name": "Oslo", "kind": "Town"}))
    );
    // A word per delta: the nested part appears before its fields are all there.
    assert!(attempts[1].len() > 10, "{attempts:?}");
    assert!(attempts[1]
        .iter()
        .any(|v| v["parts"][0] == json!({"name": "Frogner"})));

    // The helper reads the same events into `Place`s.
    let steps: Vec<Partial<Place>> = chat
        .structured_stream::<Place>(question().stream(true))
        .map(Result::unwrap)
        .collect()
        .await;
    assert!(steps.iter().any(|s| matches!(s, Partial::Restarted { .. })));
    assert_eq!(steps.last(), Some(&Partial::Complete(oslo())));
    assert_eq!(provider.requests().len(), 4);
}

#[tokio::test]
async fn openai_gets_a_strict_schema_and_a_broken_answer_is_repaired() {
    let provider = ScriptedProvider::start(|_, index| match index {
        0 => Reply::openai_text(r#"{"name": "Oslo", "kind": "Town"}"#),
        _ => Reply::openai_text(OSLO),
    })
    .await;
    let chat = OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("k")
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let place: Place = chat.structured(question()).await.unwrap();
    assert_eq!(place, oslo());

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let format = &requests[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "Place");
    assert_eq!(format["json_schema"]["strict"], true);
    let schema = &format["json_schema"]["schema"];
    // Strict mode: every property required, the optional one a null union, objects closed, `$defs` kept.
    assert_eq!(sorted(&schema["required"]), property_names(schema));
    assert_eq!(
        schema["properties"]["population"]["type"],
        json!(["integer", "null"])
    );
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["$defs"]["Location"]["additionalProperties"], false);
    // The recursion (schemars refers to the root as `#`) stays a reference.
    assert_eq!(schema["properties"]["parts"]["items"], json!({"$ref": "#"}));
    // schemars' `uint64` format is not one strict mode knows: it moved into the description.
    assert!(schema["properties"]["population"].get("format").is_none());
    assert!(schema["properties"]["population"]["description"]
        .as_str()
        .unwrap()
        .contains("uint64"));

    // The repair: the broken answer and its violations, as the last two messages.
    let messages = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(messages[messages.len() - 2]["role"], "assistant");
    let note = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(note.contains("/kind"), "{note}");
    assert!(note.contains("\"location\""), "{note}");
}

#[tokio::test]
async fn anthropic_gets_output_config_or_a_forced_tool_and_answers_as_text_either_way() {
    let provider = ScriptedProvider::start(|request, _| {
        if request.body.get("output_config").is_some() {
            return Reply::anthropic_stream(&anthropic_text(OSLO));
        }
        Reply::anthropic_stream(&anthropic_tool(OSLO))
    })
    .await;
    for (model, stream) in [
        ("claude-sonnet-4-5", true),
        ("claude-3-5-haiku-latest", true),
        ("claude-3-5-haiku-latest", false),
    ] {
        let chat = AnthropicChat::builder()
            .base_url(provider.base_url())
            .api_key("k")
            .model(model)
            .build()
            .unwrap();
        let place: Place = chat.structured(question().stream(stream)).await.unwrap();
        assert_eq!(place, oslo(), "{model}");
    }
    let requests = provider.requests();
    let schema = &requests[0].body["output_config"]["format"]["schema"];
    assert_eq!(
        requests[0].body["output_config"]["format"]["type"],
        "json_schema"
    );
    assert_eq!(schema["additionalProperties"], false);
    // Anthropic takes optional properties as they are.
    assert!(!sorted(&schema["required"]).contains(&"population"));
    let forced = &requests[1].body;
    assert!(forced.get("output_config").is_none());
    assert_eq!(
        forced["tool_choice"],
        json!({"type": "tool", "name": "structured_answer"})
    );
    assert_eq!(
        forced["tools"][0]["input_schema"]["$defs"]["Location"]["additionalProperties"],
        false
    );
}

#[tokio::test]
async fn gemini_takes_a_recursive_schema_as_response_json_schema() {
    let provider = ScriptedProvider::start(|_, _| Reply::gemini_text(OSLO)).await;
    let chat = GeminiChat::builder()
        .base_url(provider.base_url())
        .api_key("gemini-key-0123456789")
        .model("gemini-2.5-flash")
        .build()
        .unwrap();
    let place: Place = chat.structured(question()).await.unwrap();
    assert_eq!(place, oslo());
    let config = &provider.requests()[0].body["generationConfig"];
    assert_eq!(config["responseMimeType"], "application/json");
    // The OpenAPI subset of `responseSchema` cannot refer to itself: the JSON Schema field takes it.
    assert!(config.get("responseSchema").is_none());
    assert_eq!(
        config["responseJsonSchema"]["properties"]["parts"]["items"],
        json!({"$ref": "#"})
    );
    assert!(config["responseJsonSchema"].get("$schema").is_none());
}

#[tokio::test]
async fn an_anthropic_refusal_is_typed() {
    let provider = ScriptedProvider::start(|_, _| {
        let mut events = anthropic_text("I can't help with that.");
        events[4]["delta"]["stop_reason"] = json!("refusal");
        Reply::anthropic_stream(&events)
    })
    .await;
    let chat = AnthropicChat::builder()
        .base_url(provider.base_url())
        .api_key("k")
        .model("claude-sonnet-4-5")
        .build()
        .unwrap();
    let error = chat.structured::<Place>(question()).await.unwrap_err();
    assert!(
        matches!(error, StructuredError::Refused { .. }),
        "{error:?}"
    );
    assert_eq!(provider.requests().len(), 1);
}

fn anthropic_text(text: &str) -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 9, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 30}}),
        json!({"type": "message_stop"}),
    ]
}

fn anthropic_tool(input: &str) -> Vec<Value> {
    let (head, tail) = input.split_at(input.len() / 2);
    vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 9, "output_tokens": 0}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "structured_answer", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": head}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": tail}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        json!({"type": "message_stop"}),
    ]
}
