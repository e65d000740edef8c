//! Content beyond text through the leaves, over real loopback HTTP: images, audio and documents as each
//! provider documents them, cache hints, reasoning that comes back unchanged, and parts a provider cannot take
//! refused before anything is sent.

use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::anthropic::AnthropicChat;
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    CacheHint, ChatRequest, ChatStreamExt, Content, Continuation, ErrorKind, FilePart, ImageDetail,
    ImagePart, MediaSource, Message, Part, TextPart, ToolMessage, ToolSpec,
};

/// The smallest PNG there is (a 1×1 transparent pixel).
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];
const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGMAAQAABQABDQottAAAAABJRU5ErkJggg==";
const PDF: &[u8] = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n";

fn openai(provider: &ScriptedProvider) -> OpenAiChat {
    OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-test")
        .model("gpt-4o")
        .build()
        .unwrap()
}

fn anthropic(provider: &ScriptedProvider) -> AnthropicChat {
    AnthropicChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-ant-test")
        .model("claude-sonnet-4-5")
        .build()
        .unwrap()
}

fn anthropic_text(text: &str) -> Reply {
    Reply::anthropic_stream(&[
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}),
        json!({"type":"message_stop"}),
    ])
}

fn image_question() -> Content {
    Content::from_parts(vec![
        Part::text("What is in these images?"),
        Part::from(ImagePart {
            source: MediaSource::Url {
                url: "https://upload.wikimedia.org/cat.jpg".into(),
            },
            detail: Some(ImageDetail::Original), // Chat Completions has no `original`: sent as `high`
            cache: None,
        }),
        Part::image(PNG.to_vec(), "image/png"),
    ])
}

#[tokio::test]
async fn openai_gets_image_audio_and_file_parts_as_chat_completions_documents_them() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("A cat.")).await;
    let mut question = image_question();
    question.push(Part::audio(b"RIFF....WAVE".to_vec(), "audio/wav"));
    question.push(Part::file(
        PDF.to_vec(),
        "application/pdf",
        Some("report.pdf".into()),
    ));
    question.push(Part::from(FilePart {
        source: MediaSource::FileId {
            id: "file-abc123".into(),
        },
        media_type: None,
        name: None,
        cache: None,
    }));
    let request = ChatRequest::new(vec![Message::user(question)]);
    let answer = openai(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(answer.text(), "A cat.");
    let body = &provider.requests()[0].body;
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is in these images?"},
            {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/cat.jpg", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_BASE64}")}},
            {"type": "input_audio", "input_audio": {"data": "UklGRi4uLi5XQVZF", "format": "wav"}},
            {"type": "file", "file": {
                "file_data": format!("data:application/pdf;base64,{}", base64_of(PDF)),
                "filename": "report.pdf"}},
            {"type": "file", "file": {"file_id": "file-abc123"}},
        ])
    );
}

#[tokio::test]
async fn openai_tool_images_follow_the_tool_messages_as_one_user_message() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Two charts.")).await;
    let chart = |call: &str| {
        Message::Tool(ToolMessage::success(
            call,
            "chart",
            Content::from_parts(vec![
                Part::text(format!("chart {call}")),
                Part::image(PNG.to_vec(), "image/png"),
            ]),
        ))
    };
    let request = ChatRequest::new(vec![
        Message::user("draw both"),
        Message::Assistant(tower_chat::AssistantMessage {
            tool_calls: vec![
                tower_chat::ToolCall::new("c1", "chart", json!({})),
                tower_chat::ToolCall::new("c2", "chart", json!({})),
            ],
            ..Default::default()
        }),
        chart("c1"),
        chart("c2"),
    ]);
    openai(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let messages = provider.requests()[0].body["messages"].clone();
    assert_eq!(messages.as_array().unwrap().len(), 5, "{messages:#}");
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "chart c1"}]})
    );
    assert_eq!(messages[3]["tool_call_id"], "c2");
    let image = json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_BASE64}")}});
    assert_eq!(
        messages[4],
        json!({"role": "user", "content": [image, image]})
    );
}

#[tokio::test]
async fn anthropic_gets_image_and_document_blocks_and_cache_control() {
    let provider = ScriptedProvider::start(|_, _| anthropic_text("A cat and a report.")).await;
    let mut question = image_question();
    question.push(Part::file(
        PDF.to_vec(),
        "application/pdf",
        Some("report.pdf".into()),
    ));
    question.push(Part::file(b"plain notes".to_vec(), "text/plain", None));
    question.push(Part::Text(TextPart {
        text: "Summarise.".into(),
        cache: Some(CacheHint::default()),
    }));
    let system = Content::from_parts(vec![Part::Text(TextPart {
        text: "A long, stable system prompt.".into(),
        cache: Some(CacheHint {
            ttl: Some("1h".into()),
        }),
    })]);
    let mut request = ChatRequest::new(vec![Message::system(system), Message::user(question)]);
    let mut tool = ToolSpec::new("lookup", "looks up", json!({"type": "object"}));
    tool.cache = Some(CacheHint::default());
    request.options.tools = vec![tool].into();
    anthropic(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let body = &provider.requests()[0].body;
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "A long, stable system prompt.",
                "cache_control": {"type": "ephemeral", "ttl": "1h"}}])
    );
    assert_eq!(
        body["tools"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is in these images?"},
            {"type": "image", "source": {"type": "url", "url": "https://upload.wikimedia.org/cat.jpg"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": base64_of(PDF)},
             "title": "report.pdf"},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain notes"}},
            {"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}},
        ])
    );
}

#[tokio::test]
async fn an_openai_data_url_image_reaches_anthropic_as_a_base64_block() {
    let provider = ScriptedProvider::start(|_, _| anthropic_text("A pixel.")).await;
    let url = format!("data:image/png;base64,{PNG_BASE64}");
    let request = ChatRequest::new(vec![Message::user(vec![Part::image_url(url)])]);
    anthropic(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(
        provider.requests()[0].body["messages"][0]["content"][0],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}})
    );
}

#[tokio::test]
async fn parts_a_provider_cannot_take_are_refused_before_sending() {
    let provider = ScriptedProvider::start(|_, _| anthropic_text("unreachable")).await;
    let audio = ChatRequest::new(vec![Message::user(vec![
        Part::text("transcribe"),
        Part::audio(b"RIFF".to_vec(), "audio/wav"),
    ])]);
    let error = anthropic(&provider)
        .oneshot(audio)
        .await
        .err()
        .expect("refused");
    assert_eq!(error.kind(), &ErrorKind::Unsupported);
    assert!(error.to_string().contains("audio"), "{error}");
    assert!(error.to_string().contains("Anthropic"), "{error}");
    assert!(error.is_refused_before_sending());

    let word = ChatRequest::new(vec![Message::user(vec![Part::file(
        b"PK..".to_vec(),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        Some("a.docx".into()),
    )])]);
    let error = anthropic(&provider)
        .oneshot(word)
        .await
        .err()
        .expect("refused");
    assert_eq!(error.kind(), &ErrorKind::Unsupported);
    assert!(error.to_string().contains("wordprocessingml"), "{error}");

    let openai_provider = ScriptedProvider::start(|_, _| Reply::openai_text("unreachable")).await;
    let file_url = ChatRequest::new(vec![Message::user(vec![Part::from(FilePart {
        source: MediaSource::Url {
            url: "https://example.com/a.pdf".into(),
        },
        media_type: Some("application/pdf".into()),
        name: None,
        cache: None,
    })])]);
    let error = openai(&openai_provider)
        .oneshot(file_url)
        .await
        .err()
        .expect("refused");
    assert_eq!(error.kind(), &ErrorKind::Unsupported);
    assert!(error.to_string().contains("file by URL"), "{error}");

    assert!(provider.requests().is_empty());
    assert!(openai_provider.requests().is_empty());
}

/// The first round: thinking (with its signature), redacted thinking, then a tool call.
fn thinking_then_tool_use() -> Reply {
    Reply::anthropic_stream(&[
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":40,"output_tokens":1,"cache_creation_input_tokens":1000,"cache_read_input_tokens":0}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants Oslo's weather;"}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" I should call the tool."}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":THINKING_SIGNATURE}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":REDACTED_DATA}}),
        json!({"type":"content_block_stop","index":1}),
        json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}}),
        json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Oslo\"}"}}),
        json!({"type":"content_block_stop","index":2}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":60}}),
        json!({"type":"message_stop"}),
    ])
}

const THINKING_SIGNATURE: &str =
    "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDdKGTIRXLAyDDHmwiMPf/+Dl9Aq+yk2pO0tj7RA==";
const REDACTED_DATA: &str = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj2pLmN0b6KDDbXW";

/// What the Messages API checks when extended thinking continues a tool round: the previous turn's thinking
/// blocks come back first, unchanged.
fn thinking_blocks_came_back(body: &Value) -> Result<(), String> {
    let assistant = &body["messages"][1];
    let expected = json!([
        {"type": "thinking", "thinking": "The user wants Oslo's weather; I should call the tool.", "signature": THINKING_SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED_DATA},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
    ]);
    if assistant["role"] == "assistant" && assistant["content"] == expected {
        Ok(())
    } else {
        Err(format!(
            "Expected `thinking` or `redacted_thinking`, but found {}. When `thinking` is enabled, a final \
             `assistant` message must start with a thinking block.",
            assistant["content"]
        ))
    }
}

#[tokio::test]
async fn a_tool_round_with_extended_thinking_sends_the_thinking_blocks_back_unchanged() {
    let provider = ScriptedProvider::start(|request, n| match n {
        0 => thinking_then_tool_use(),
        _ => match thinking_blocks_came_back(&request.body) {
            Ok(()) => anthropic_text("It is 12C in Oslo."),
            Err(message) => Reply::json(
                400,
                json!({"type":"error","error":{"type":"invalid_request_error","message":message}}),
            ),
        },
    })
    .await;
    let leaf = anthropic(&provider);
    let mut history = vec![Message::user("Weather in Oslo?")];
    let mut request = ChatRequest::new(history.clone());
    request.options.extra.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": 2048}),
    );
    let extra = request.options.extra.clone();
    let first = leaf
        .clone()
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let assistant = first.last_assistant().unwrap();
    assert_eq!(assistant.reasoning.len(), 2);
    assert_eq!(
        assistant.reasoning[0].continuation,
        Some(Continuation::AnthropicThinking {
            signature: THINKING_SIGNATURE.into()
        })
    );
    assert_eq!(
        assistant.reasoning_text().as_deref(),
        Some("The user wants Oslo's weather; I should call the tool.")
    );
    assert_eq!(first.usage.cache_write_input_tokens, Some(1000));
    assert_eq!(first.usage.input_tokens, 1040);

    // The history survives a round trip through serde, as a store keeps it.
    let stored = serde_json::to_string(&first.messages).unwrap();
    history.extend(serde_json::from_str::<Vec<Message>>(&stored).unwrap());
    history.push(Message::tool_result("toolu_1", "weather", "12C"));
    let mut second = ChatRequest::new(history);
    second.options.extra = extra;
    let answer = leaf
        .oneshot(second)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(answer.text(), "It is 12C in Oslo.");
}

#[tokio::test]
async fn the_scripted_check_refuses_a_second_round_without_the_thinking_blocks() {
    let provider = ScriptedProvider::start(|request, _| {
        match thinking_blocks_came_back(&request.body) {
            Ok(()) => anthropic_text("unexpected"),
            Err(message) => Reply::json(
                400,
                json!({"type":"error","error":{"type":"invalid_request_error","message":message}}),
            ),
        }
    })
    .await;
    let history = vec![
        Message::user("Weather in Oslo?"),
        Message::Assistant(tower_chat::AssistantMessage {
            reasoning: vec![tower_chat::ReasoningPart::text(
                "The user wants Oslo's weather; I should call the tool.",
            )],
            tool_calls: vec![tower_chat::ToolCall::new(
                "toolu_1",
                "weather",
                json!({"city": "Oslo"}),
            )],
            ..Default::default()
        }),
        Message::tool_result("toolu_1", "weather", "12C"),
    ];
    let error = anthropic(&provider)
        .oneshot(ChatRequest::new(history))
        .await
        .err()
        .expect("refused");
    assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
    assert!(error.to_string().contains("thinking"), "{error}");
}

#[tokio::test]
async fn openai_leaves_other_providers_reasoning_out() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("ok")).await;
    let history = vec![
        Message::user("hi"),
        Message::Assistant(tower_chat::AssistantMessage {
            content: "hello".into(),
            reasoning: vec![tower_chat::ReasoningPart {
                text: "greet back".into(),
                continuation: Some(Continuation::AnthropicThinking {
                    signature: "sig".into(),
                }),
            }],
            tool_calls: Vec::new(),
            provider_parts: Vec::new(),
        }),
        Message::user("again"),
    ];
    openai(&provider)
        .oneshot(ChatRequest::new(history))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(
        provider.requests()[0].body["messages"][1],
        json!({"role": "assistant", "content": "hello"})
    );
}

fn base64_of(bytes: &[u8]) -> String {
    tower_chat::Blob::new(bytes.to_vec(), "application/octet-stream")
        .base64()
        .to_owned()
}
