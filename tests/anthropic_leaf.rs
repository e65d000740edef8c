//! The Anthropic Messages leaf against a scripted provider over real loopback HTTP.

use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::anthropic::AnthropicChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    AssistantMessage, ChatRequest, ChatStreamExt, ErrorKind, FinishReason, Message, ToolCall,
    ToolMessage, ToolSpec,
};

fn leaf(provider: &ScriptedProvider) -> AnthropicChat {
    AnthropicChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-ant-test-key")
        .model("claude-sonnet-4-5")
        .build()
        .unwrap()
}

fn sse(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

fn tool_use_stream() -> Vec<String> {
    sse(&[
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":30,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me check."}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"ping"}),
        json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"weather","input":{}}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"Oslo\"}"}}),
        json!({"type":"content_block_stop","index":1}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":22}}),
        json!({"type":"message_stop"}),
    ])
}

#[tokio::test]
async fn streams_a_tool_use_round_and_sends_messages_api_requests() {
    let provider = ScriptedProvider::start(|_, _| {
        // One byte per chunk: the harshest split there is.
        let bytes: Vec<Vec<u8>> = tool_use_stream()
            .concat()
            .into_bytes()
            .into_iter()
            .map(|b| vec![b])
            .collect();
        Reply::sse_chunks(bytes)
    })
    .await;
    let request = ChatRequest::new(vec![
        Message::system("You are terse."),
        Message::user("Weather in Oslo?"),
        Message::Assistant(AssistantMessage {
            tool_calls: vec![ToolCall::new("toolu_0", "weather", json!({"city": "Rome"}))],
            ..AssistantMessage::default()
        }),
        Message::Tool(ToolMessage::success("toolu_0", "weather", "20C")),
    ])
    .tool(ToolSpec::new(
        "weather",
        "Current weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    ));
    let response = leaf(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let assistant = response.last_assistant().unwrap();
    assert_eq!(assistant.content, "Let me check.");
    assert_eq!(
        assistant.tool_calls,
        vec![ToolCall::new("toolu_1", "weather", json!({"city": "Oslo"}))]
    );
    assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(response.usage.input_tokens, 30);
    assert_eq!(response.usage.output_tokens, 22);

    let sent = &provider.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test-key");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert!(sent.headers.get("authorization").is_none());
    assert_eq!(sent.body["system"], "You are terse.");
    // No `max_output_tokens`: the model's own maximum (Sonnet 4.5's), not an arbitrary cap.
    assert_eq!(sent.body["max_tokens"], 64_000);
    assert_eq!(sent.body["stream"], true);
    assert_eq!(
        sent.body["messages"][2]["content"][0]["type"],
        "tool_result"
    );
    assert_eq!(sent.body["tools"][0]["input_schema"]["type"], "object");
}

#[tokio::test]
async fn non_streaming_messages_decode_to_the_same_response() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::json(200, json!({"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5",
            "content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Oslo"}}],
            "stop_reason":"tool_use","usage":{"input_tokens":30,"output_tokens":22}}))
    })
    .await;
    let request = ChatRequest::new(vec![Message::user("Weather in Oslo?")]).stream(false);
    let response = leaf(&provider)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(
        response.last_assistant().unwrap().tool_calls,
        vec![ToolCall::new("toolu_1", "weather", json!({"city": "Oslo"}))]
    );
    assert_eq!(response.usage.total_tokens(), 52);
    assert_eq!(provider.requests()[0].body["stream"], false);
}

#[tokio::test]
async fn overloaded_and_error_events_are_typed() {
    let provider = ScriptedProvider::start(|_, i| match i {
        0 => Reply::json(529, json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})),
        1 => Reply::json(429, json!({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}})).header("retry-after", "10"),
        _ => Reply::sse_chunks(sse(&[
            json!({"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1,"output_tokens":0}}}),
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
        ])),
    })
    .await;
    let leaf = leaf(&provider);
    let err = leaf
        .clone()
        .oneshot(ChatRequest::new(vec![Message::user("x")]))
        .await
        .err()
        .unwrap();
    assert_eq!(err.kind(), &ErrorKind::Upstream);
    assert_eq!(err.status().unwrap().as_u16(), 529);
    assert_eq!(err.message(), "Overloaded");
    let err = leaf
        .clone()
        .oneshot(ChatRequest::new(vec![Message::user("x")]))
        .await
        .err()
        .unwrap();
    assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(10)));
    let err = leaf
        .oneshot(ChatRequest::new(vec![Message::user("x")]))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::Upstream);
}

#[tokio::test]
async fn without_max_tokens_each_model_gets_its_own_output_maximum() {
    let provider = ScriptedProvider::start(|_, _| {
        Reply::json(
            200,
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1}}),
        )
    })
    .await;
    let ask = |model: &str| {
        ChatRequest::new(vec![Message::user("hi")])
            .model(model)
            .stream(false)
    };
    let leaf = leaf(&provider);
    for model in [
        "claude-opus-4-1-20250805",
        "claude-3-5-haiku-latest",
        "a-proxy-model",
    ] {
        let reply = leaf.clone().oneshot(ask(model)).await.unwrap();
        reply.collect_response().await.unwrap();
    }
    let mut explicit = ask("claude-opus-4-1");
    explicit.options.max_output_tokens = Some(300);
    let reply = leaf.clone().oneshot(explicit).await.unwrap();
    reply.collect_response().await.unwrap();
    let configured = AnthropicChat::builder()
        .base_url(provider.base_url())
        .model("claude-opus-4-1")
        .default_max_tokens(2_000)
        .build()
        .unwrap();
    let reply = configured
        .oneshot(ChatRequest::new(vec![Message::user("hi")]).stream(false))
        .await
        .unwrap();
    reply.collect_response().await.unwrap();
    let sent: Vec<Value> = provider
        .requests()
        .iter()
        .map(|r| r.body["max_tokens"].clone())
        .collect();
    assert_eq!(
        sent,
        [
            json!(32_000),
            json!(8_192),
            json!(8_192),
            json!(300),
            json!(2_000)
        ]
    );
}
