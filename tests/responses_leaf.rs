//! The OpenAI Responses leaf against a scripted provider over real loopback HTTP: the documented examples,
//! reasoning carried across a tool round, usage, finish reasons and typed errors, streamed and not.

use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::responses::ResponsesChat;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::{
    AssistantMessage, ChatError, ChatEvent, ChatRequest, ChatResponse, ChatStreamExt, Continuation,
    ErrorKind, FinishReason, Message, Part, ReasoningPart, ToolCall, ToolMessage, ToolSpec, Usage,
};

const STREAM_TEXT: &str = include_str!("data/responses/stream_text.sse");
const STREAM_FUNCTION_CALL: &str = include_str!("data/responses/stream_function_call.sse");
const STREAM_REASONING: &str = include_str!("data/responses/stream_reasoning.sse");
const RESPONSE_TEXT: &str = include_str!("data/responses/response_text.json");

/// An encrypted reasoning blob with the characters JSON escapes and base64 uses, to prove it comes back exact.
const ENCRYPTED: &str = "gAAAAABo+/x9=\"quoted\"\\back\u{e9}\u{1F600}\n";

fn leaf(provider: &ScriptedProvider) -> ResponsesChat {
    ResponsesChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-responses-test")
        .model("gpt-5-mini")
        .build()
        .unwrap()
}

async fn call(
    provider: &ScriptedProvider,
    request: ChatRequest,
) -> Result<ChatResponse, ChatError> {
    leaf(provider)
        .oneshot(request)
        .await?
        .collect_response()
        .await
}

fn one_byte_chunks(body: &str) -> Reply {
    Reply::sse_chunks(body.as_bytes().iter().map(|b| vec![*b]))
}

#[tokio::test]
async fn the_documented_text_stream_arrives_cut_into_single_bytes() {
    let provider = ScriptedProvider::start(|_, _| one_byte_chunks(STREAM_TEXT)).await;
    let request = ChatRequest::new(vec![
        Message::system("You are a helpful assistant."),
        Message::user("Hello!"),
    ]);
    let response = call(&provider, request).await.unwrap();
    assert_eq!(response.text(), "Hi there! How can I assist you today?");
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        response.response_id.as_deref(),
        Some("resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654")
    );
    assert_eq!(response.model.as_deref(), Some("gpt-4.1-2025-04-14"));
    assert_eq!(response.usage.input_tokens, 37);
    assert_eq!(response.usage.output_tokens, 11);
    assert_eq!(response.usage.reasoning_tokens, Some(0));

    let sent = &provider.requests()[0];
    assert_eq!(sent.path, "/v1/responses");
    assert_eq!(sent.headers["authorization"], "Bearer sk-responses-test");
    assert_eq!(sent.headers["accept"], "text/event-stream");
    assert_eq!(sent.body["model"], "gpt-5-mini");
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["store"], false);
    assert_eq!(sent.body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        sent.body["input"],
        json!([
            {"type": "message", "role": "system", "content": "You are a helpful assistant."},
            {"type": "message", "role": "user", "content": "Hello!"},
        ])
    );
}

#[tokio::test]
async fn the_documented_whole_response_decodes_when_not_streaming() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::json(200, serde_json::from_str(RESPONSE_TEXT).unwrap())
    })
    .await;
    let request = ChatRequest::new(vec![Message::user(
        "Tell me a three sentence bedtime story about a unicorn.",
    )])
    .stream(false);
    let response = call(&provider, request).await.unwrap();
    assert!(response
        .text()
        .starts_with("In a peaceful grove beneath a silver moon"));
    assert!(response.text().ends_with("sparkled like stardust."));
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert_eq!(response.usage.total_tokens(), 123);
    assert_eq!(response.usage.cached_input_tokens, Some(0));
    let sent = &provider.requests()[0];
    assert_eq!(sent.body["stream"], false);
    assert_eq!(sent.headers["accept"], "application/json");
}

#[tokio::test]
async fn the_documented_function_call_stream_is_one_tool_call() {
    let provider = ScriptedProvider::start(|_, _| one_byte_chunks(STREAM_FUNCTION_CALL)).await;
    let request = ChatRequest::new(vec![Message::user(
        "What is the weather like in Paris today?",
    )])
    .tool(ToolSpec::new(
        "get_weather",
        "Get current temperature for a given location.",
        json!({"type": "object", "properties": {"location": {"type": "string"}},
                "required": ["location"], "additionalProperties": false}),
    ));
    let events: Vec<ChatEvent> = leaf(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments,
            } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, r#"{"location":"Paris, France"}"#);
    assert!(events.contains(&ChatEvent::ToolCallStart {
        index: 0,
        id: "call_1234xyz".into(),
        name: "get_weather".into()
    }));
    assert!(events.contains(&ChatEvent::ToolCallEnd {
        index: 0,
        call: ToolCall::new(
            "call_1234xyz",
            "get_weather",
            json!({"location": "Paris, France"})
        )
    }));
    assert_eq!(
        events.last(),
        Some(&ChatEvent::finish(FinishReason::ToolCalls))
    );
    let sent = &provider.requests()[0];
    assert_eq!(
        sent.body["tools"][0],
        json!({"type": "function", "name": "get_weather",
            "description": "Get current temperature for a given location.",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                "required": ["location"], "additionalProperties": false},
            "strict": false})
    );
}

#[tokio::test]
async fn several_calls_in_one_response_streamed_and_not() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::responses_tool_calls(&[
            ("call_a", "weather", r#"{"city":"Zürich"}"#),
            ("call_b", "time", ""),
            ("call_c", "weather", r#"{"city":"Köln"}"#),
        ])
    })
    .await;
    for stream in [true, false] {
        let response = call(
            &provider,
            ChatRequest::new(vec![Message::user("x")]).stream(stream),
        )
        .await
        .unwrap();
        assert_eq!(
            response.last_assistant().unwrap().tool_calls,
            vec![
                ToolCall::new("call_a", "weather", json!({"city": "Zürich"})),
                ToolCall::new("call_b", "time", json!({})),
                ToolCall::new("call_c", "weather", json!({"city": "Köln"})),
            ],
            "stream={stream}"
        );
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(response.usage.input_tokens, 40);
    }
}

#[tokio::test]
async fn a_reasoning_stream_gives_its_summary_and_what_continues_it() {
    let provider = ScriptedProvider::start(|_, _| Reply::sse_chunks([STREAM_REASONING])).await;
    let response = call(&provider, ChatRequest::new(vec![Message::user("2 + 2?")]))
        .await
        .unwrap();
    let assistant = response.last_assistant().unwrap();
    assert_eq!(assistant.content, "2 + 2 = 4");
    let summary = vec![
        "**Answering a simple question**\n\nThe user asks what 2 + 2 is.".to_owned(),
        "**Checking**\n\nIt is 4.".to_owned(),
    ];
    assert_eq!(
        assistant.reasoning,
        vec![ReasoningPart {
            text: summary.join("\n\n"),
            continuation: Some(Continuation::OpenAiReasoning {
                id: "rs_6820f383d7c08191846711c5df8233bc0ac5ba57aafcbac7".into(),
                encrypted_content: Some("gAAAAABoIPOH2f7pB+Zs1/K7dq2Hx0kSoWoq/qhF1Z+u9CQ==".into()),
                summary,
            }),
        }]
    );
    assert_eq!(
        response.usage,
        Usage {
            from_response_cache: false,
            input_tokens: 2048,
            output_tokens: 340,
            cached_input_tokens: Some(1920),
            cache_write_input_tokens: None,
            reasoning_tokens: Some(320),
        }
    );
}

/// The reasoning item the first round produced, as the second request must carry it: a refusal otherwise.
fn second_round_check(request: &RecordedRequest) -> Result<(), String> {
    let input = request.body["input"].as_array().ok_or("no input")?;
    let at = input
        .iter()
        .position(|item| item["type"] == "reasoning")
        .ok_or("no reasoning item")?;
    let item = &input[at];
    if item["id"] != "rs_round_one" || item["encrypted_content"].as_str() != Some(ENCRYPTED) {
        return Err(format!("reasoning item changed: {item}"));
    }
    if item["summary"] != json!([{"type": "summary_text", "text": "Need the weather."}]) {
        return Err(format!("summary changed: {item}"));
    }
    let next = &input[at + 1];
    if next["type"] != "function_call" || next["call_id"] != "call_oslo" {
        return Err(format!(
            "the reasoning item is not followed by its call: {next}"
        ));
    }
    let output = input
        .iter()
        .find(|item| item["type"] == "function_call_output")
        .ok_or("no function_call_output")?;
    if output["call_id"] != "call_oslo" || output["output"] != "12C and clear" {
        return Err(format!("wrong tool output: {output}"));
    }
    Ok(())
}

/// Round 0 reasons and calls `weather`; round 1 answers only if the reasoning came back exactly.
fn reasoning_then_answer(request: &RecordedRequest, index: usize) -> Reply {
    if index == 0 {
        return Reply::responses_reasoning_and_calls(
            &[("rs_round_one", ENCRYPTED, "Need the weather.")],
            &[("call_oslo", "weather", r#"{"city":"Oslo"}"#)],
        );
    }
    match second_round_check(request) {
        Ok(()) => Reply::responses_text("It is 12C and clear in Oslo."),
        Err(why) => Reply::json(
            400,
            json!({"error": {"message": why, "type": "invalid_request_error", "param": "input", "code": null}}),
        ),
    }
}

async fn two_rounds(stream: bool) {
    let provider = ScriptedProvider::start(reasoning_then_answer).await;
    let weather = ToolSpec::new(
        "weather",
        "Current weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    );
    let mut messages = vec![Message::user("Weather in Oslo?")];
    let first = call(
        &provider,
        ChatRequest::new(messages.clone())
            .tool(weather.clone())
            .stream(stream),
    )
    .await
    .unwrap();
    assert_eq!(first.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(first.usage.cached_input_tokens, Some(8));
    assert_eq!(first.usage.reasoning_tokens, Some(16));
    let assistant = first.last_assistant().unwrap().clone();
    assert_eq!(assistant.reasoning[0].text, "Need the weather.");
    assert_eq!(
        assistant.tool_calls,
        vec![ToolCall::new(
            "call_oslo",
            "weather",
            json!({"city": "Oslo"})
        )]
    );
    messages.push(Message::Assistant(assistant));
    messages.push(Message::Tool(ToolMessage::success(
        "call_oslo",
        "weather",
        "12C and clear",
    )));
    let second = call(
        &provider,
        ChatRequest::new(messages).tool(weather).stream(stream),
    )
    .await
    .unwrap_or_else(|e| panic!("the second round was refused: {e}"));
    assert_eq!(second.text(), "It is 12C and clear in Oslo.");
    assert_eq!(second.finish_reason, Some(FinishReason::Stop));
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.body["stream"] == stream));
}

#[tokio::test]
async fn reasoning_comes_back_exactly_before_its_call_streamed() {
    two_rounds(true).await;
}

#[tokio::test]
async fn reasoning_comes_back_exactly_before_its_call_not_streamed() {
    two_rounds(false).await;
}

#[tokio::test]
async fn a_changed_reasoning_item_is_refused_by_the_scripted_server() {
    // The check above must be able to fail: an item that lost its encrypted content is refused.
    let provider = ScriptedProvider::start(reasoning_then_answer).await;
    let assistant = AssistantMessage {
        reasoning: vec![ReasoningPart {
            text: "Need the weather.".into(),
            continuation: Some(Continuation::OpenAiReasoning {
                id: "rs_round_one".into(),
                encrypted_content: None,
                summary: vec!["Need the weather.".into()],
            }),
        }],
        tool_calls: vec![ToolCall::new(
            "call_oslo",
            "weather",
            json!({"city": "Oslo"}),
        )],
        ..AssistantMessage::default()
    };
    let messages = vec![
        Message::user("Weather in Oslo?"),
        Message::Assistant(assistant),
        Message::Tool(ToolMessage::success(
            "call_oslo",
            "weather",
            "12C and clear",
        )),
    ];
    call(&provider, ChatRequest::new(vec![Message::user("x")]))
        .await
        .unwrap();
    let err = call(&provider, ChatRequest::new(messages))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    assert!(err.message().contains("reasoning item changed"), "{err}");
}

#[tokio::test]
async fn another_provider_s_reasoning_is_left_out_of_the_request() {
    let provider = ScriptedProvider::start(|_, _| Reply::responses_text("ok")).await;
    let assistant = AssistantMessage {
        content: "Earlier answer.".into(),
        reasoning: vec![ReasoningPart {
            text: "thinking".into(),
            continuation: Some(Continuation::AnthropicThinking {
                signature: "sig".into(),
            }),
        }],
        ..AssistantMessage::default()
    };
    call(
        &provider,
        ChatRequest::new(vec![
            Message::user("hi"),
            Message::Assistant(assistant),
            Message::user("again"),
        ]),
    )
    .await
    .unwrap();
    assert_eq!(
        provider.requests()[0].body["input"],
        json!([
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "message", "role": "assistant", "content": "Earlier answer."},
            {"type": "message", "role": "user", "content": "again"},
        ])
    );
}

#[tokio::test]
async fn content_the_api_cannot_take_is_refused_before_sending() {
    let provider = ScriptedProvider::start(|_, _| Reply::responses_text("never")).await;
    let request = ChatRequest::new(vec![Message::user(vec![
        Part::text("listen"),
        Part::audio(&b"RIFF"[..], "audio/wav"),
    ])]);
    let err = call(&provider, request).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Unsupported);
    assert!(err.message().contains("audio"), "{err}");
    assert!(provider.requests().is_empty());
}

fn lifecycle(kind: &str, response: Value) -> Vec<Value> {
    vec![
        json!({"type": "response.created", "response": {"id": "resp_e", "model": "gpt-5-mini",
            "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message",
            "id": "msg_e", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": "msg_e", "output_index": 0,
            "content_index": 0, "delta": "Partial"}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message",
            "id": "msg_e", "role": "assistant", "status": "incomplete",
            "content": [{"type": "output_text", "text": "Partial", "annotations": []}]}}),
        json!({"type": kind, "response": response}),
    ]
}

async fn finish_reason_of(events: Vec<Value>, stream: bool) -> Result<ChatResponse, ChatError> {
    let provider = ScriptedProvider::start(move |_, _| Reply::responses_stream(&events)).await;
    call(
        &provider,
        ChatRequest::new(vec![Message::user("x")]).stream(stream),
    )
    .await
}

#[tokio::test]
async fn incomplete_responses_end_with_length_or_content_filter() {
    for stream in [true, false] {
        for (reason, expected) in [
            ("max_output_tokens", FinishReason::Length),
            ("content_filter", FinishReason::ContentFilter),
        ] {
            let events = lifecycle(
                "response.incomplete",
                json!({"id": "resp_e", "status": "incomplete", "incomplete_details": {"reason": reason},
                    "usage": {"input_tokens": 5, "output_tokens": 16}}),
            );
            let response = finish_reason_of(events, stream).await.unwrap();
            assert_eq!(response.finish_reason, Some(expected), "{reason} {stream}");
            assert_eq!(response.text(), "Partial");
            assert_eq!(response.usage.output_tokens, 16);
        }
    }
}

#[tokio::test]
async fn failed_responses_are_typed_by_their_code() {
    for stream in [true, false] {
        for (code, expected) in [
            (
                "rate_limit_exceeded",
                ErrorKind::RateLimited { retry_after: None },
            ),
            ("server_error", ErrorKind::Upstream),
            ("invalid_prompt", ErrorKind::InvalidRequest),
            ("invalid_image_url", ErrorKind::InvalidRequest),
            ("vector_store_timeout", ErrorKind::Upstream),
        ] {
            let events = lifecycle(
                "response.failed",
                json!({"id": "resp_e", "status": "failed",
                    "error": {"code": code, "message": format!("failed: {code}")}}),
            );
            let err = finish_reason_of(events, stream).await.unwrap_err();
            assert_eq!(err.kind(), &expected, "{code} {stream}");
            assert_eq!(err.message(), format!("failed: {code}"));
        }
    }
}

#[tokio::test]
async fn error_events_mid_stream_are_typed() {
    for (error, expected) in [
        (
            json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null}),
            ErrorKind::RateLimited { retry_after: None },
        ),
        (
            json!({"type": "error", "code": "server_error", "message": "boom", "param": null}),
            ErrorKind::Upstream,
        ),
        (
            json!({"type": "error", "code": null, "message": "bad input", "param": "input"}),
            ErrorKind::Upstream,
        ),
        (
            json!({"type": "error", "error": {"type": "invalid_request_error", "code": "context_length_exceeded",
                "message": "too long"}}),
            ErrorKind::InvalidRequest,
        ),
    ] {
        let mut events = lifecycle("response.in_progress", json!({}));
        events.push(error.clone());
        let provider = ScriptedProvider::start(move |_, _| Reply::responses_stream(&events)).await;
        let items: Vec<Result<ChatEvent, ChatError>> = leaf(&provider)
            .oneshot(ChatRequest::new(vec![Message::user("x")]))
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(items[1].as_ref().unwrap(), &ChatEvent::text("Partial"));
        let err = items.last().unwrap().as_ref().unwrap_err();
        assert_eq!(err.kind(), &expected, "{error}");
    }
}

#[tokio::test]
async fn http_errors_are_typed_with_the_provider_s_message() {
    let provider = ScriptedProvider::start(|_, i| match i {
        0 => Reply::json(429, json!({"error": {"message": "Rate limit reached", "type": "requests",
            "code": "rate_limit_exceeded"}}))
        .header("retry-after", "7"),
        1 => Reply::json(401, json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
            "code": "invalid_api_key"}})),
        _ => Reply::json(500, json!({"error": {"message": "The server had an error", "type": "server_error"}})),
    })
    .await;
    let request = || ChatRequest::new(vec![Message::user("x")]);
    let err = call(&provider, request()).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(7)));
    assert_eq!(err.message(), "Rate limit reached");
    let err = call(&provider, request()).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Authentication);
    assert_eq!(err.message(), "Incorrect API key provided");
    let err = call(&provider, request()).await.unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Upstream);
    assert_eq!(err.status().unwrap().as_u16(), 500);
}

#[tokio::test]
async fn a_stream_cut_before_completion_is_a_connection_error() {
    let cut = STREAM_TEXT.find("event: response.completed").unwrap();
    let body = STREAM_TEXT[..cut].to_owned();
    let provider = ScriptedProvider::start(move |_, _| Reply::sse_chunks([body.clone()])).await;
    let err = call(&provider, ChatRequest::new(vec![Message::user("x")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Connection);
}

/// A reasoning item whose text is its `content` (`reasoning_text` parts, as open-weight models behind
/// Responses servers send it) with an empty summary, announced only complete: the text is the reasoning.
#[tokio::test]
async fn reasoning_text_in_an_item_s_content_is_the_reasoning_streamed_and_whole() {
    for stream in [true, false] {
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [],
            "content": [{"type": "reasoning_text", "text": "3 plus 30 "}, {"type": "reasoning_text", "text": "is 33."}]});
        let events = vec![
            json!({"type": "response.created", "response": {"id": "resp_r", "model": "gpt-oss-120b",
                "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "message",
                "id": "msg_r", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_r", "output_index": 1,
                "content_index": 0, "delta": "33"}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"type": "message",
                "id": "msg_r", "role": "assistant", "content": [{"type": "output_text", "text": "33"}]}}),
            json!({"type": "response.completed", "response": {"id": "resp_r", "status": "completed"}}),
        ];
        let response = finish_reason_of(events, stream).await.unwrap();
        let assistant = response.last_assistant().unwrap();
        assert_eq!(
            assistant.reasoning_text().as_deref(),
            Some("3 plus 30 is 33."),
            "stream={stream}"
        );
        assert_eq!(response.text(), "33");
    }
}
