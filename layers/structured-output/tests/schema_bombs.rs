//! The library's rewrites of an answer schema for a provider (`tower_chat::output_schema`) refuse the schemas
//! built to cost more than their size, the same ones the gateway refuses at its edge
//! (`gateway/tests/schema_bombs.rs`): a caller of the library that never checked its schema gets the same typed
//! error naming the limit, and nothing reaches the provider. Each bomb here is small enough for the rewrites to
//! survive without the check (a `$ref` chain of 200, not the 1,500 that exhausts a thread's stack elsewhere), so
//! what is asserted is the refusal, not a crash avoided.

use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::anthropic::AnthropicChat;
use tower_chat::openai::OpenAiChat;
use tower_chat::output_schema::{normalise, rewrite, SchemaDialect};
use tower_chat::responses::ResponsesChat;
use tower_chat::schema_limits::SchemaLimit;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    BoxChatService, ChatError, ChatRequest, ChatStreamExt, ErrorKind, Message, ResponseFormat,
};
use tower_chat_testkit::{ref_chain, ref_dag, ref_laughs};

const DIALECTS: [SchemaDialect; 3] = [
    SchemaDialect::OpenAiStrict,
    SchemaDialect::Anthropic,
    SchemaDialect::GeminiJson,
];

/// Each bomb and the limit it breaks.
fn bombs() -> Vec<(&'static str, Value, SchemaLimit)> {
    let object = json!({"type": "object"});
    let mut nested = json!({"type": "string"});
    for _ in 0..100 {
        nested = json!({"type": "array", "items": nested});
    }
    vec![
        (
            "$ref chain of 200",
            ref_chain(200, object.clone()),
            SchemaLimit::Depth,
        ),
        ("100 levels of items", nested, SchemaLimit::Depth),
        (
            "allOf doubling 27 levels",
            ref_dag("allOf", 27, 2, object.clone()),
            SchemaLimit::ExpandedNodes,
        ),
        (
            "anyOf doubling 22 levels",
            ref_dag("anyOf", 22, 2, object),
            SchemaLimit::ExpandedNodes,
        ),
        (
            "billion laughs, depth 10",
            ref_laughs(10, 4),
            SchemaLimit::ExpandedNodes,
        ),
    ]
}

#[test]
fn every_rewrite_refuses_each_bomb_with_the_limit_it_breaks() {
    for (what, schema, limit) in bombs() {
        for dialect in DIALECTS {
            let cached = normalise(&schema, dialect).expect_err(what);
            assert_eq!(cached.limit(), limit, "{what}, {dialect:?}: {cached}");
            assert!(cached.to_string().contains(limit.field()), "{cached}");
            // Refusals are not cached: asked again, the schema is refused again.
            assert_eq!(normalise(&schema, dialect).unwrap_err(), cached);
            assert_eq!(rewrite(&schema, dialect).unwrap_err(), cached);
        }
    }
    // The same shapes, small, are ordinary schemas.
    for schema in [
        ref_chain(10, json!({"type": "object"})),
        ref_dag("allOf", 4, 2, json!({"type": "object"})),
        ref_laughs(2, 4),
    ] {
        for dialect in DIALECTS {
            assert!(normalise(&schema, dialect).is_ok(), "{schema}");
        }
    }
}

/// The error of one call through `chat`, whether the call or its stream gives it.
async fn call(chat: BoxChatService, request: ChatRequest) -> Result<(), ChatError> {
    chat.oneshot(request).await?.collect_response().await?;
    Ok(())
}

#[tokio::test]
async fn each_leaf_refuses_a_bomb_as_an_invalid_request_before_sending_it() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("{}")).await;
    let openai = OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("k")
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let responses = ResponsesChat::builder()
        .base_url(provider.base_url())
        .api_key("k")
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    // Structured outputs, and the forced tool of a model before them: both rewrite the schema.
    let anthropic = |model: &str| {
        AnthropicChat::builder()
            .base_url(provider.base_url())
            .api_key("k")
            .model(model)
            .build()
            .unwrap()
    };
    let leaves = [
        ("openai", BoxChatService::new(openai)),
        ("responses", BoxChatService::new(responses)),
        (
            "anthropic",
            BoxChatService::new(anthropic("claude-sonnet-4-5")),
        ),
        (
            "anthropic forced tool",
            BoxChatService::new(anthropic("claude-3-5-haiku-latest")),
        ),
    ];
    for (what, schema, limit) in bombs() {
        for (leaf, chat) in &leaves {
            let mut request = ChatRequest::new(vec![Message::user("Answer in JSON.")]);
            request.options.response_format = Some(ResponseFormat::JsonSchema {
                name: "answer".into(),
                schema: schema.clone(),
                strict: Some(true),
            });
            let error = call(chat.clone(), request)
                .await
                .expect_err(&format!("{leaf} sent {what}"));
            assert_eq!(error.kind(), &ErrorKind::InvalidRequest, "{leaf}: {error}");
            assert!(error.is_refused_before_sending(), "{leaf}: {error}");
            assert!(
                error.message().contains(limit.field()),
                "{leaf}, {what}: {error}"
            );
        }
    }
    assert!(
        provider.requests().is_empty(),
        "a bomb reached the provider"
    );
}
