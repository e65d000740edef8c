//! The Bedrock leaf over loopback against the scripted Bedrock server: SigV4 signatures checked with fixed
//! credentials, a two-round tool conversation streamed and whole (AWS's documented `top_song` walkthrough),
//! reasoning signatures sent back, images and documents, HTTP errors and mid-stream exceptions as typed errors,
//! and event-stream frames cut anywhere.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::bedrock::{
    AwsCredentials, BedrockChat, BedrockError, CredentialsFuture, CredentialsProvider,
    StreamDecoder,
};
use tower_chat::test_server::{
    bedrock_event, check_bedrock_signature, parse_sigv4_authorization, Part as ReplyPart, Reply,
    ScriptedProvider,
};
use tower_chat::{
    AssistantMessage, ChatError, ChatEvent, ChatRequest, ChatResponse, ChatStreamExt, Continuation,
    ErrorKind, FinishReason, Message, Part, ReasoningPart, ToolChoice, ToolSpec,
};

const MODEL: &str = "anthropic.claude-3-haiku-20240307-v1:0";

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/data/bedrock/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn credentials() -> AwsCredentials {
    AwsCredentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        Some("FwoGZXIvYXdzEXAMPLETOKEN".into()),
    )
}

fn leaf(provider: &ScriptedProvider) -> BedrockChat {
    BedrockChat::builder()
        .region("us-east-1")
        .base_url(provider.base_url())
        .credentials(credentials())
        .model(MODEL)
        .build()
        .unwrap()
}

fn top_song() -> ToolSpec {
    ToolSpec::new(
        "top_song",
        "Get the most popular song played on a radio station.",
        json!({"type": "object", "properties": {"sign": {"type": "string",
            "description": "The call sign for the radio station."}}, "required": ["sign"]}),
    )
}

async fn call(leaf: &BedrockChat, request: ChatRequest) -> Result<ChatResponse, ChatError> {
    leaf.clone()
        .oneshot(request)
        .await?
        .collect_response()
        .await
}

/// A scripted server answering the walkthrough: a `top_song` call, then the answer.
async fn walkthrough_server() -> ScriptedProvider {
    ScriptedProvider::start(|request, _| {
        check_bedrock_signature(request, &credentials()).unwrap();
        let has_result = request.body["messages"]
            .as_array()
            .is_some_and(|m| m.len() > 1);
        if has_result {
            Reply::bedrock_stream(&[
                ("messageStart", json!({"role": "assistant"})),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 0, "delta": {"text": "The most popular song on WZPZ is "}}),
                ),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 0, "delta": {"text": "Elemental Hotel by 8 Storey Hike."}}),
                ),
                ("contentBlockStop", json!({"contentBlockIndex": 0})),
                ("messageStop", json!({"stopReason": "end_turn"})),
                (
                    "metadata",
                    json!({"usage": {"inputTokens": 140, "outputTokens": 24, "totalTokens": 484,
                        "cacheReadInputTokens": 320, "cacheWriteInputTokens": 0}, "metrics": {"latencyMs": 838}}),
                ),
            ])
        } else {
            Reply::bedrock_tool_use(&[(
                "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                "top_song",
                json!({"sign": "WZPZ"}),
            )])
        }
    })
    .await
}

#[tokio::test]
async fn a_two_round_tool_conversation_is_signed_and_mapped_streamed_and_whole() {
    for stream in [true, false] {
        let provider = walkthrough_server().await;
        let leaf = leaf(&provider);
        let mut history = vec![Message::user("What is the most popular song on WZPZ?")];
        let mut request = ChatRequest::new(history.clone())
            .tool(top_song())
            .stream(stream);
        request.options.tool_choice = Some(ToolChoice::Tool("top_song".into()));
        let first = call(&leaf, request).await.unwrap();
        assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
        let assistant = first.last_assistant().unwrap().clone();
        assert_eq!(assistant.tool_calls.len(), 1);
        assert_eq!(assistant.tool_calls[0].id, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q");
        assert_eq!(
            assistant.tool_calls[0].arguments.json(),
            Some(&json!({"sign": "WZPZ"}))
        );
        assert_eq!(first.usage.input_tokens, 30);
        history.push(Message::Assistant(assistant));
        history.push(Message::tool_result(
            "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
            "top_song",
            r#"{"song": "Elemental Hotel", "artist": "8 Storey Hike"}"#,
        ));
        let second = call(
            &leaf,
            ChatRequest::new(history).tool(top_song()).stream(stream),
        )
        .await
        .unwrap();
        assert_eq!(
            second.text(),
            "The most popular song on WZPZ is Elemental Hotel by 8 Storey Hike."
        );
        assert_eq!(second.finish_reason, Some(FinishReason::Stop));
        // Bedrock's inputTokens leave out the cached prefix; ours count it.
        assert_eq!(second.usage.input_tokens, 460);
        assert_eq!(second.usage.cached_input_tokens, Some(320));
        assert_eq!(second.usage.cache_write_input_tokens, Some(0));

        let sent = provider.requests();
        let method = if stream {
            "converse-stream"
        } else {
            "converse"
        };
        assert_eq!(
            sent[0].path,
            format!("/v1/model/anthropic.claude-3-haiku-20240307-v1%3A0/{method}")
        );
        let accept = if stream {
            "application/vnd.amazon.eventstream"
        } else {
            "application/json"
        };
        assert_eq!(sent[0].headers["accept"], accept);
        assert_eq!(
            sent[0].body["toolConfig"]["toolChoice"],
            json!({"tool": {"name": "top_song"}})
        );
        assert_eq!(
            sent[0].body["toolConfig"]["tools"][0]["toolSpec"]["name"],
            "top_song"
        );
        // The second round carries the call and the documented toolResult message.
        let messages = sent[1].body["messages"].as_array().unwrap();
        assert_eq!(
            messages[1],
            json!({"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                "name": "top_song", "input": {"sign": "WZPZ"}}}]})
        );
        assert_eq!(messages[2], fixture("converse_tool_result_message.json"));
        let auth = parse_sigv4_authorization(&sent[1]).unwrap();
        assert_eq!(
            (auth.region.as_str(), auth.service.as_str()),
            ("us-east-1", "bedrock")
        );
        assert!(auth
            .signed_headers
            .contains(&"x-amz-security-token".to_owned()));
        assert_eq!(
            sent[1].headers["x-amz-security-token"],
            "FwoGZXIvYXdzEXAMPLETOKEN"
        );
    }
}

#[tokio::test]
async fn a_signature_by_other_credentials_or_over_another_body_is_caught() {
    let provider = ScriptedProvider::start(|_, _| Reply::bedrock_text("ok")).await;
    call(
        &leaf(&provider),
        ChatRequest::new(vec![Message::user("hi")]),
    )
    .await
    .unwrap();
    let mut sent = provider.requests().remove(0);
    check_bedrock_signature(&sent, &credentials()).unwrap();
    let other = AwsCredentials::new("AKIDEXAMPLE", "another-secret", None);
    assert!(check_bedrock_signature(&sent, &other)
        .unwrap_err()
        .contains("mismatch"));
    sent.raw_body = Bytes::from_static(b"{\"messages\":[]}");
    assert!(check_bedrock_signature(&sent, &credentials()).is_err());
}

#[tokio::test]
async fn the_documented_converse_responses_decode() {
    let answers = [
        fixture("converse_tool_use.json"),
        fixture("converse_final_answer.json"),
    ];
    let provider =
        ScriptedProvider::start(move |_, index| Reply::json(200, answers[index].clone())).await;
    let leaf = leaf(&provider);
    let tool_use = call(
        &leaf,
        ChatRequest::new(vec![Message::user("WZPZ?")]).stream(false),
    )
    .await
    .unwrap();
    let calls = &tool_use.last_assistant().unwrap().tool_calls;
    assert_eq!(calls[0].name, "top_song");
    assert_eq!(calls[0].arguments.json(), Some(&json!({"sign": "WZPZ"})));
    assert_eq!(tool_use.usage.total_tokens(), 431);
    let answer = call(
        &leaf,
        ChatRequest::new(vec![Message::user("WZPZ?")]).stream(false),
    )
    .await
    .unwrap();
    assert!(answer.text().starts_with("The most popular song on WZPZ"));
    assert_eq!(answer.usage.cached_input_tokens, Some(320));
}

/// A reasoning block with a signature, a redacted one, then the answer.
fn reasoning_reply() -> Reply {
    Reply::bedrock_stream(&[
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "The user wants "}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "the capital."}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig-abc"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"reasoningContent": {"redactedContent": "ZW5jcnlwdGVk"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 2, "delta": {"text": "Paris."}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 2})),
        ("messageStop", json!({"stopReason": "end_turn"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 45, "outputTokens": 62, "totalTokens": 107}, "metrics": {"latencyMs": 2104}}),
        ),
    ])
}

#[tokio::test]
async fn reasoning_signatures_and_redacted_reasoning_go_back_on_the_next_round() {
    for stream in [true, false] {
        let provider = ScriptedProvider::start(|_, _| reasoning_reply()).await;
        let leaf = leaf(&provider);
        let first = call(
            &leaf,
            ChatRequest::new(vec![Message::user("Capital of France?")]).stream(stream),
        )
        .await
        .unwrap();
        assert_eq!(first.text(), "Paris.");
        let assistant = first.last_assistant().unwrap().clone();
        assert_eq!(
            assistant.reasoning,
            vec![
                ReasoningPart {
                    text: "The user wants the capital.".into(),
                    continuation: Some(Continuation::Other {
                        provider: "bedrock".into(),
                        value: json!({"signature": "sig-abc"}),
                    }),
                },
                ReasoningPart {
                    text: String::new(),
                    continuation: Some(Continuation::Other {
                        provider: "bedrock".into(),
                        value: json!({"redactedContent": "ZW5jcnlwdGVk"}),
                    }),
                },
            ],
            "stream: {stream}"
        );
        let history = vec![
            Message::user("Capital of France?"),
            Message::Assistant(assistant),
            Message::user("And of Italy?"),
        ];
        call(&leaf, ChatRequest::new(history).stream(stream))
            .await
            .unwrap();
        let sent = &provider.requests()[1];
        assert_eq!(
            sent.body["messages"][1]["content"],
            json!([
                {"reasoningContent": {"reasoningText": {"text": "The user wants the capital.", "signature": "sig-abc"}}},
                {"reasoningContent": {"redactedContent": "ZW5jcnlwdGVk"}},
                {"text": "Paris."}
            ])
        );
    }
}

#[tokio::test]
async fn the_documented_reasoning_response_keeps_its_signature() {
    let provider =
        ScriptedProvider::start(|_, _| Reply::json(200, fixture("converse_reasoning.json"))).await;
    let reply = call(
        &leaf(&provider),
        ChatRequest::new(vec![Message::user("Capital?")]).stream(false),
    )
    .await
    .unwrap();
    let reasoning = &reply.last_assistant().unwrap().reasoning[0];
    assert_eq!(
        reasoning.text,
        "The user wants the capital of France. That is Paris."
    );
    assert_eq!(reasoning.provider(), Some("bedrock"));
    assert_eq!(reply.text(), "The capital of France is Paris.");
}

#[tokio::test]
async fn images_and_documents_travel_as_converse_blocks() {
    let provider = ScriptedProvider::start(|_, _| Reply::bedrock_text("Seen.")).await;
    let png = Bytes::from_static(b"\x89PNG\r\n\x1a\nfake");
    let request = ChatRequest::new(vec![Message::user(vec![
        Part::text("Compare these."),
        Part::image(png, "image/png"),
        Part::image_url("data:image/jpeg;base64,/9j/4AAQ"),
        Part::file(
            b"%PDF-1.7".to_vec(),
            "application/pdf",
            Some("Q3 report.pdf".into()),
        ),
        Part::file(b"a,b\n1,2\n".to_vec(), "text/csv", None),
    ])]);
    call(&leaf(&provider), request).await.unwrap();
    let content = &provider.requests()[0].body["messages"][0]["content"];
    assert_eq!(
        content,
        &json!([
            {"text": "Compare these."},
            {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgpmYWtl"}}},
            {"image": {"format": "jpeg", "source": {"bytes": "/9j/4AAQ"}}},
            {"document": {"format": "pdf", "name": "Q3 report-pdf", "source": {"bytes": "JVBERi0xLjc="}}},
            {"document": {"format": "csv", "name": "document-5", "source": {"bytes": "YSxiCjEsMgo="}}}
        ])
    );
    // Audio has no Converse block: refused before anything is sent.
    let audio = ChatRequest::new(vec![Message::user(vec![Part::audio(
        b"RIFF".to_vec(),
        "audio/wav",
    )])]);
    let error = call(&leaf(&provider), audio).await.unwrap_err();
    assert_eq!(error.kind(), &ErrorKind::Unsupported);
    assert_eq!(provider.requests().len(), 1);
}

/// Whether an error kind is the expected one.
type KindCheck = fn(&ErrorKind) -> bool;

fn detail(error: &ChatError) -> &BedrockError {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<BedrockError>())
        .unwrap_or_else(|| panic!("no Bedrock detail on {error:?}"))
}

#[tokio::test]
async fn http_errors_are_typed_with_the_exception_name() {
    let cases: [(u16, &str, Value, KindCheck, bool); 4] = [
        (
            429,
            "ThrottlingException",
            json!({"message": "Too many requests, please wait before trying again."}),
            |k| matches!(k, ErrorKind::RateLimited { .. }),
            true,
        ),
        (
            400,
            "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            fixture("validation_exception.json"),
            |k| k == &ErrorKind::InvalidRequest,
            false,
        ),
        (
            403,
            "AccessDeniedException",
            json!({"Message": "You don't have access to the model with the specified model ID."}),
            |k| k == &ErrorKind::Authentication,
            false,
        ),
        (
            424,
            "ModelErrorException",
            json!({"message": "The model failed to process the request."}),
            |k| k == &ErrorKind::Upstream,
            true,
        ),
    ];
    for (status, error_type, body, kind, retryable) in cases {
        let reply = Reply::json(status, body.clone()).header("x-amzn-errortype", error_type);
        let provider = ScriptedProvider::start(move |_, _| reply.clone()).await;
        let error = call(
            &leaf(&provider),
            ChatRequest::new(vec![Message::user("hi")]),
        )
        .await
        .unwrap_err();
        assert!(kind(error.kind()), "{status}: {error:?}");
        assert_eq!(error.is_retryable(), retryable, "{status}");
        assert_eq!(
            detail(&error).error_type(),
            error_type.split(':').next().unwrap()
        );
        let message = body.get("message").or_else(|| body.get("Message")).unwrap();
        assert_eq!(error.message(), message.as_str().unwrap());
        assert!(!error.message().contains("wJalrXUtnFEMI"));
    }
}

#[tokio::test]
async fn mid_stream_exceptions_are_typed_and_retryable_where_aws_says_so() {
    let cases: [(&str, KindCheck, bool); 5] = [
        (
            "throttlingException",
            |k| matches!(k, ErrorKind::RateLimited { .. }),
            true,
        ),
        (
            "modelStreamErrorException",
            |k| k == &ErrorKind::Upstream,
            true,
        ),
        (
            "internalServerException",
            |k| k == &ErrorKind::Upstream,
            true,
        ),
        (
            "serviceUnavailableException",
            |k| k == &ErrorKind::Upstream,
            true,
        ),
        (
            "validationException",
            |k| k == &ErrorKind::InvalidRequest,
            false,
        ),
    ];
    for (exception, kind, retryable) in cases {
        let provider = ScriptedProvider::start(move |_, _| {
            Reply::bedrock_text("partial answer here").bedrock_failing(2, exception, "it broke")
        })
        .await;
        let mut stream = leaf(&provider)
            .oneshot(ChatRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap();
        let mut events = Vec::new();
        let error = loop {
            match futures_util::StreamExt::next(&mut stream).await {
                Some(Ok(event)) => events.push(event),
                Some(Err(error)) => break error,
                None => panic!("{exception}: the stream ended without its error"),
            }
        };
        assert_eq!(events, vec![ChatEvent::text("partial ")], "{exception}");
        assert!(kind(error.kind()), "{exception}: {error:?}");
        assert_eq!(error.is_retryable(), retryable, "{exception}");
        assert_eq!(detail(&error).error_type(), exception);
        assert_eq!(detail(&error).message(), "it broke");
        assert!(futures_util::StreamExt::next(&mut stream).await.is_none());
    }
}

#[tokio::test]
async fn a_corrupt_or_truncated_frame_is_a_protocol_error() {
    let mut corrupt = bedrock_event(
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
    );
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let truncated = bedrock_event("messageStop", r#"{"stopReason":"end_turn"}"#);
    for body in [corrupt, truncated[..truncated.len() - 3].to_vec()] {
        let reply = Reply::bedrock_stream(&[("messageStart", json!({"role": "assistant"}))])
            .then(ReplyPart::Bytes(Bytes::from(body)));
        let provider = ScriptedProvider::start(move |_, _| reply.clone()).await;
        let error = call(
            &leaf(&provider),
            ChatRequest::new(vec![Message::user("hi")]),
        )
        .await
        .unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::Protocol, "{error:?}");
    }
}

#[tokio::test]
async fn frames_cut_anywhere_give_the_same_answer() {
    let provider = ScriptedProvider::start(|_, index| {
        let reply = reasoning_reply();
        match index {
            0 => reply,
            n => reply.rechunked(n),
        }
    })
    .await;
    let leaf = leaf(&provider);
    let whole = call(&leaf, ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    for _size in 1..=13 {
        let cut = call(&leaf, ChatRequest::new(vec![Message::user("hi")]))
            .await
            .unwrap();
        assert_eq!(cut, whole);
    }
}

/// The events of a body fed in pieces cut at `cuts`.
fn decode_cut(body: &[u8], cuts: &[usize]) -> Vec<Result<ChatEvent, ErrorKind>> {
    let mut decoder = StreamDecoder::new();
    let mut events = Vec::new();
    let mut start = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    points.sort_unstable();
    points.push(body.len());
    for end in points {
        decoder.feed(&body[start..end.max(start)]);
        start = end.max(start);
        while let Some(item) = decoder.next_event() {
            events.push(item.map_err(|e| e.kind().clone()));
        }
    }
    decoder.finish();
    while let Some(item) = decoder.next_event() {
        events.push(item.map_err(|e| e.kind().clone()));
    }
    events
}

fn reasoning_body() -> Vec<u8> {
    reasoning_reply()
        .parts
        .iter()
        .flat_map(|part| match part {
            ReplyPart::Bytes(bytes) => bytes.to_vec(),
            _ => Vec::new(),
        })
        .collect()
}

proptest! {
    #[test]
    fn the_decoder_yields_the_same_events_however_the_bytes_are_cut(
        cuts in proptest::collection::vec(0usize..2048, 0..12)
    ) {
        let body = reasoning_body();
        prop_assert_eq!(decode_cut(&body, &cuts), decode_cut(&body, &[]));
    }
}

#[test]
fn the_uncut_body_decodes_to_the_full_answer() {
    let continuation = |value: Value| ChatEvent::ReasoningEnd {
        continuation: Continuation::Other {
            provider: "bedrock".into(),
            value,
        },
    };
    let usage = tower_chat::Usage {
        input_tokens: 45,
        output_tokens: 62,
        ..tower_chat::Usage::default()
    };
    assert_eq!(
        decode_cut(&reasoning_body(), &[]),
        vec![
            Ok(ChatEvent::ReasoningDelta {
                text: "The user wants ".into()
            }),
            Ok(ChatEvent::ReasoningDelta {
                text: "the capital.".into()
            }),
            Ok(continuation(json!({"signature": "sig-abc"}))),
            Ok(continuation(json!({"redactedContent": "ZW5jcnlwdGVk"}))),
            Ok(ChatEvent::text("Paris.")),
            Ok(ChatEvent::Usage { usage }),
            Ok(ChatEvent::finish(FinishReason::Stop)),
        ]
    );
}

#[derive(Debug)]
struct Rotating {
    calls: Arc<AtomicUsize>,
}

impl CredentialsProvider for Rotating {
    fn credentials(&self) -> CredentialsFuture<'_> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if n == 0 {
                Err(ChatError::new(
                    ErrorKind::Authentication,
                    "the vault said no",
                ))
            } else {
                Ok(credentials())
            }
        })
    }
}

#[tokio::test]
async fn a_failing_credentials_provider_fails_the_call_before_sending() {
    let provider = ScriptedProvider::start(|_, _| Reply::bedrock_text("ok")).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let leaf = BedrockChat::builder()
        .region("us-east-1")
        .base_url(provider.base_url())
        .credentials_provider(Rotating {
            calls: calls.clone(),
        })
        .model(MODEL)
        .build()
        .unwrap();
    let error = call(&leaf, ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &ErrorKind::Authentication);
    assert!(provider.requests().is_empty());
    call(&leaf, ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    check_bedrock_signature(&provider.requests()[0], &credentials()).unwrap();
}

#[tokio::test]
async fn a_bedrock_api_key_is_sent_as_a_bearer_token_unsigned() {
    let provider = ScriptedProvider::start(|_, _| Reply::bedrock_text("ok")).await;
    let leaf = BedrockChat::builder()
        .region("us-east-1")
        .base_url(provider.base_url())
        .api_key("bedrock-api-key-123")
        .model(MODEL)
        .build()
        .unwrap();
    call(&leaf, ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let sent = &provider.requests()[0];
    assert_eq!(sent.headers["authorization"], "Bearer bedrock-api-key-123");
    assert!(sent.headers.get("x-amz-date").is_none());
}

#[tokio::test]
async fn a_history_from_another_provider_drops_its_reasoning() {
    let provider = ScriptedProvider::start(|_, _| Reply::bedrock_text("ok")).await;
    let history = vec![
        Message::user("hi"),
        Message::Assistant(AssistantMessage {
            content: "hello".into(),
            reasoning: vec![ReasoningPart {
                text: "thinking".into(),
                continuation: Some(Continuation::AnthropicThinking {
                    signature: "anthropic-sig".into(),
                }),
            }],
            tool_calls: Vec::new(),
            provider_parts: Vec::new(),
        }),
        Message::user("again"),
    ];
    call(&leaf(&provider), ChatRequest::new(history))
        .await
        .unwrap();
    assert_eq!(
        provider.requests()[0].body["messages"][1]["content"],
        json!([{"text": "hello"}])
    );
}

#[tokio::test]
async fn a_json_answer_comes_back_as_text_from_the_forced_tool_streamed_and_whole() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::bedrock_tool_use(&[("tooluse_a", "structured_answer", json!({"city": "Oslo"}))])
    })
    .await;
    let leaf = leaf(&provider);
    for stream in [true, false] {
        let mut request =
            ChatRequest::new(vec![Message::user("capital of Norway?")]).stream(stream);
        request.options.response_format = Some(tower_chat::ResponseFormat::JsonSchema {
            name: "place".into(),
            schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            strict: None,
        });
        let response = call(&leaf, request).await.unwrap();
        assert_eq!(
            response.finish_reason,
            Some(FinishReason::Stop),
            "stream={stream}"
        );
        let answer = response.last_assistant().unwrap();
        assert!(answer.tool_calls.is_empty(), "stream={stream}");
        let text: Value = serde_json::from_str(&answer.content.to_string()).unwrap();
        assert_eq!(text, json!({"city": "Oslo"}), "stream={stream}");
    }
    let sent = provider.requests();
    assert_eq!(
        sent[0].body["toolConfig"]["toolChoice"],
        json!({"tool": {"name": "structured_answer"}})
    );
}

/// ConverseStream's events in another order the service documents: `metadata` (usage) before `messageStop`.
#[test]
fn metadata_before_message_stop_gives_the_same_answer() {
    let events = |metadata_first: bool| {
        let usage = (
            "metadata",
            json!({"usage": {"inputTokens": 45, "outputTokens": 62, "totalTokens": 107}}),
        );
        let stop = ("messageStop", json!({"stopReason": "tool_use"}));
        let mut events = vec![
            ("messageStart", json!({"role": "assistant"})),
            (
                "contentBlockStart",
                json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t1", "name": "top_song"}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{\"sign\":\"WZPZ\"}"}}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
        ];
        if metadata_first {
            events.extend([usage, stop]);
        } else {
            events.extend([stop, usage]);
        }
        let body: Vec<u8> = events
            .iter()
            .flat_map(|(kind, payload)| bedrock_event(kind, &payload.to_string()))
            .collect();
        decode_cut(&body, &[])
    };
    let usual = events(false);
    assert_eq!(
        usual.last(),
        Some(&Ok(ChatEvent::finish(FinishReason::ToolCalls)))
    );
    assert_eq!(events(true), usual);
}

#[tokio::test]
async fn a_claude_model_without_max_tokens_gets_its_own_output_maximum() {
    let provider = ScriptedProvider::start(|_, _| Reply::bedrock_text("ok")).await;
    let leaf = leaf(&provider);
    call(&leaf, ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    let sonnet = ChatRequest::new(vec![Message::user("hi")])
        .model("us.anthropic.claude-sonnet-4-5-20250929-v1:0");
    call(&leaf, sonnet).await.unwrap();
    // Another family's model keeps its own default: nothing is sent.
    let nova = ChatRequest::new(vec![Message::user("hi")]).model("amazon.nova-pro-v1:0");
    call(&leaf, nova).await.unwrap();
    let sent: Vec<Value> = provider
        .requests()
        .iter()
        .map(|r| r.body["inferenceConfig"]["maxTokens"].clone())
        .collect();
    assert_eq!(sent, [json!(4_096), json!(64_000), Value::Null]);
}
