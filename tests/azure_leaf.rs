//! The Azure OpenAI leaf over loopback: both URL forms, `api-key` and bearer authentication, `reasoning_effort`
//! only at api-versions that take it, and Azure's content filter (a refused prompt, a cut completion, streamed or
//! whole) as typed errors carrying the categories.
//! Fixtures in `tests/data/azure_*` follow Azure's documented responses.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::azure::{AzureOpenAiChat, ContentFiltered, FilterStage};
use tower_chat::leaf::{AccessToken, TokenFuture, TokenProvider};
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStreamExt, DroppedFields, ErrorKind, Message,
    ReasoningEffort, ReasoningOptions, Usage,
};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn request(stream: bool) -> ChatRequest {
    let mut request = ChatRequest::new(vec![Message::user("Tell me a story")]);
    request.options.stream = stream;
    request
}

async fn events(leaf: &AzureOpenAiChat, stream: bool) -> Vec<Result<ChatEvent, ChatError>> {
    leaf.clone()
        .oneshot(request(stream))
        .await
        .unwrap()
        .collect()
        .await
}

fn deployment_leaf(provider: &ScriptedProvider) -> AzureOpenAiChat {
    AzureOpenAiChat::builder()
        .endpoint(format!("http://{}", provider.addr()))
        .deployment("gpt-4o-prod")
        .api_key("azure-key-0123456789")
        .build()
        .unwrap()
}

#[tokio::test]
async fn deployment_urls_carry_the_api_version_and_the_api_key_header() {
    let body = fixture("azure_stream_ok.sse");
    for size in [usize::MAX, 7, 1] {
        let body = body.clone();
        let provider = ScriptedProvider::start(move |_, _| {
            let reply = Reply::sse_chunks([body.clone()]);
            if size == usize::MAX {
                reply
            } else {
                reply.rechunked(size)
            }
        })
        .await;
        let leaf = deployment_leaf(&provider);
        let all: Vec<ChatEvent> = events(&leaf, true)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        // Azure's per-chunk content filter results are carried for a client of the Chat Completions format,
        // however the stream is cut; the events the leaf models are the same as for OpenAI.
        let (carried, got): (Vec<ChatEvent>, Vec<ChatEvent>) = all
            .into_iter()
            .partition(|event| matches!(event, ChatEvent::ProviderExtra { .. }));
        let carried = format!("{carried:?}");
        assert!(
            carried.contains("content_filter_results")
                && carried.contains("\"severity\": String(\"safe\")"),
            "chunks of {size}: {carried}"
        );
        assert_eq!(
            got,
            vec![
                // The prompt annotation's empty id and model are not the response's.
                ChatEvent::ResponseMetadata {
                    id: Some("chatcmpl-AZ2".into()),
                    model: Some("gpt-4o-2024-08-06".into()),
                },
                ChatEvent::text("Hello"),
                ChatEvent::text(" there"),
                ChatEvent::Usage {
                    usage: Usage {
                        input_tokens: 9,
                        output_tokens: 2,
                        ..Usage::default()
                    }
                },
                ChatEvent::finish(tower_chat::FinishReason::Stop),
            ],
            "chunks of {size}"
        );
        let sent = &provider.requests()[0];
        assert_eq!(
            sent.path,
            "/openai/deployments/gpt-4o-prod/chat/completions"
        );
        assert_eq!(sent.query.as_deref(), Some("api-version=2024-10-21"));
        assert_eq!(sent.headers["api-key"], "azure-key-0123456789");
        assert!(sent.headers.get("authorization").is_none());
        assert_eq!(sent.body["model"], "gpt-4o-prod");
        assert_eq!(sent.body["messages"][0]["content"], "Tell me a story");
    }
}

#[derive(Debug)]
struct EntraId;

impl TokenProvider for EntraId {
    fn fetch_token(&self) -> TokenFuture<'_> {
        Box::pin(async {
            Ok(AccessToken::new(
                "entra-access-token",
                Some(Duration::from_secs(3600)),
            ))
        })
    }
}

#[tokio::test]
async fn the_v1_form_takes_a_bearer_token_and_no_api_version() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hi")).await;
    let leaf = AzureOpenAiChat::builder()
        .endpoint(format!("http://{}/", provider.addr()))
        .model("gpt-4o-mini")
        .token_provider(EntraId)
        .build()
        .unwrap();
    let reply = leaf
        .oneshot(request(false))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(reply.text(), "Hi");
    let sent = &provider.requests()[0];
    assert_eq!(sent.path, "/openai/v1/chat/completions");
    assert_eq!(sent.query, None);
    assert_eq!(sent.headers["authorization"], "Bearer entra-access-token");
    assert!(sent.headers.get("api-key").is_none());
    assert_eq!(sent.body["model"], "gpt-4o-mini");
}

#[tokio::test]
async fn a_refused_prompt_is_an_invalid_request_naming_the_categories() {
    let body: serde_json::Value =
        serde_json::from_str(&fixture("azure_prompt_filtered.json")).unwrap();
    let provider = ScriptedProvider::start(move |_, _| Reply::json(400, body.clone())).await;
    let leaf = deployment_leaf(&provider);
    for stream in [true, false] {
        let err = leaf
            .clone()
            .oneshot(request(stream))
            .await
            .err()
            .expect("an error");
        assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
        assert_eq!(err.status().map(|s| s.as_u16()), Some(400));
        assert!(err.message().contains("content management policy"), "{err}");
        let filtered = ContentFiltered::of(&err).expect("the filter's categories");
        assert_eq!(filtered.stage, FilterStage::Prompt);
        let names: Vec<(&str, Option<&str>)> = filtered
            .filtered()
            .map(|c| (c.name.as_str(), c.severity.as_deref()))
            .collect();
        assert_eq!(
            names,
            [("hate", Some("high")), ("violence", Some("medium"))]
        );
        let jailbreak = filtered
            .categories
            .iter()
            .find(|c| c.name == "jailbreak")
            .unwrap();
        assert_eq!(
            (jailbreak.filtered, jailbreak.detected),
            (false, Some(false))
        );
    }
}

#[tokio::test]
async fn an_ordinary_400_carries_no_filter_detail() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::json(
            400,
            serde_json::json!({"error": {"code": "invalid_value", "message": "bad temperature"}}),
        )
    })
    .await;
    let err = deployment_leaf(&provider)
        .oneshot(request(true))
        .await
        .err()
        .expect("an error");
    assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    assert!(ContentFiltered::of(&err).is_none());
}

#[tokio::test]
async fn a_cut_stream_keeps_its_text_and_ends_with_the_filters_error() {
    let body = fixture("azure_stream_filtered.sse");
    for size in [usize::MAX, 5] {
        let body = body.clone();
        let provider = ScriptedProvider::start(move |_, _| {
            let reply = Reply::sse_chunks([body.clone()]);
            if size == usize::MAX {
                reply
            } else {
                reply.rechunked(size)
            }
        })
        .await;
        let mut got = events(&deployment_leaf(&provider), true).await;
        let last = got.pop().unwrap().unwrap_err();
        let texts: Vec<_> = got
            .into_iter()
            .filter_map(|e| match e.unwrap() {
                ChatEvent::TextDelta { text } => Some(text),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["The battle"]);
        assert_eq!(last.kind(), &ErrorKind::InvalidRequest);
        let filtered = ContentFiltered::of(&last).expect("the filter's categories");
        assert_eq!(filtered.stage, FilterStage::Completion);
        let names: Vec<_> = filtered.filtered().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["violence"]);
        assert!(last.message().contains("violence"), "{last}");
    }
}

#[tokio::test]
async fn a_cut_whole_completion_is_the_filters_error() {
    let body: serde_json::Value =
        serde_json::from_str(&fixture("azure_completion_filtered.json")).unwrap();
    let provider = ScriptedProvider::start(move |_, _| Reply::json(200, body.clone())).await;
    let mut got = events(&deployment_leaf(&provider), false).await;
    assert_eq!(got.len(), 1);
    let err = got.pop().unwrap().unwrap_err();
    let filtered = ContentFiltered::of(&err).expect("the filter's categories");
    let names: Vec<_> = filtered
        .filtered()
        .map(|c| (c.name.as_str(), c.severity.as_deref()))
        .collect();
    assert_eq!(names, [("self_harm", Some("medium"))]);
}

#[test]
fn a_leaf_without_an_endpoint_is_refused_at_build_time() {
    let err = AzureOpenAiChat::builder().api_key("k").build().unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
}

/// `reasoning_effort` reaches a deployment only at an api-version that takes it: an older one refuses the whole
/// call over the unknown field, so the leaf leaves it out there and names the drop.
#[tokio::test]
async fn reasoning_effort_is_sent_only_to_api_versions_that_take_it() {
    for (version, sent) in [
        (None, false),
        (Some("2024-10-21"), false),
        (Some("2024-12-01-preview"), true),
        (Some("2025-04-01-preview"), true),
    ] {
        let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Done.")).await;
        let mut builder = AzureOpenAiChat::builder()
            .endpoint(format!("http://{}", provider.addr()))
            .deployment("o4-mini-prod")
            .api_key("azure-key-0123456789");
        if let Some(version) = version {
            builder = builder.api_version(version);
        }
        let leaf = builder.build().unwrap();
        let mut request = request(false);
        request.options.reasoning = Some(ReasoningOptions {
            effort: Some(ReasoningEffort::High),
            ..ReasoningOptions::default()
        });
        let dropped = DroppedFields::new();
        request.extensions.insert(dropped.clone());
        let reply = leaf
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(reply.text(), "Done.");
        let body = &provider.requests()[0].body;
        let expected = if sent { json!("high") } else { Value::Null };
        assert_eq!(body["reasoning_effort"], expected, "{version:?}");
        let names = if sent {
            vec![]
        } else {
            vec!["reasoning_effort".to_owned()]
        };
        assert_eq!(dropped.names(), names, "{version:?}");
    }
}

/// The version-less `/openai/v1` form always takes `reasoning_effort`.
#[tokio::test]
async fn the_v1_form_sends_reasoning_effort() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Done.")).await;
    let leaf = AzureOpenAiChat::builder()
        .endpoint(format!("http://{}", provider.addr()))
        .model("o4-mini")
        .api_key("azure-key-0123456789")
        .build()
        .unwrap();
    let mut request = request(false);
    request.options.reasoning = Some(ReasoningOptions {
        effort: Some(ReasoningEffort::Low),
        ..ReasoningOptions::default()
    });
    leaf.oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let sent = &provider.requests()[0];
    assert_eq!(sent.path, "/openai/v1/chat/completions");
    assert_eq!(sent.body["reasoning_effort"], "low");
}
