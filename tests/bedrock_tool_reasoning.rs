//! Extended thinking across a Bedrock tool round: a Claude model on Converse reasons (a signed
//! `reasoningContent` block, and a redacted one) before it calls a tool, and Bedrock refuses the next round
//! unless the assistant turn carrying the call opens with those blocks exactly as they came, signature
//! included. The Bedrock leaf over loopback, streamed and whole.

use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::bedrock::{AwsCredentials, BedrockChat};
use tower_chat::test_server::{check_bedrock_signature, Reply, ScriptedProvider};
use tower_chat::{
    ChatRequest, ChatStreamExt, Continuation, FinishReason, Message, ReasoningOptions, Thinking,
    ToolSpec,
};

const MODEL: &str = "anthropic.claude-sonnet-4-20250514-v1:0";
const SIGNATURE: &str = "EqQBCkYIBxgCKkBsig-bedrock-tool-round";
const REDACTED: &str = "ZW5jcnlwdGVkLXJlYXNvbmluZw==";
const CALL_ID: &str = "tooluse_weather_1";

fn credentials() -> AwsCredentials {
    AwsCredentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        None,
    )
}

fn weather() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "The weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

/// The blocks the assistant turn must open with when it comes back.
fn reasoning_blocks() -> [Value; 2] {
    [
        json!({"reasoningContent": {"reasoningText": {"text": "Oslo's weather needs the tool.",
            "signature": SIGNATURE}}}),
        json!({"reasoningContent": {"redactedContent": REDACTED}}),
    ]
}

/// First a signed reasoning block, a redacted one and a `get_weather` call; once a tool result is in the
/// conversation, the answer.
fn reply(request: &tower_chat::test_server::RecordedRequest) -> Reply {
    check_bedrock_signature(request, &credentials()).unwrap();
    if request.body.to_string().contains("\"toolResult\"") {
        return Reply::bedrock_text("It is sunny in Oslo.");
    }
    let delta = |index: u64, delta: Value| {
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": index, "delta": delta}),
        )
    };
    Reply::bedrock_stream(&[
        ("messageStart", json!({"role": "assistant"})),
        delta(0, json!({"reasoningContent": {"text": "Oslo's weather "}})),
        delta(0, json!({"reasoningContent": {"text": "needs the tool."}})),
        delta(0, json!({"reasoningContent": {"signature": SIGNATURE}})),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        delta(
            1,
            json!({"reasoningContent": {"redactedContent": REDACTED}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 2,
                "start": {"toolUse": {"toolUseId": CALL_ID, "name": "get_weather"}}}),
        ),
        delta(2, json!({"toolUse": {"input": "{\"city\": "}})),
        delta(2, json!({"toolUse": {"input": "\"Oslo\"}"}})),
        ("contentBlockStop", json!({"contentBlockIndex": 2})),
        ("messageStop", json!({"stopReason": "tool_use"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 60, "outputTokens": 90, "totalTokens": 150},
                "metrics": {"latencyMs": 900}}),
        ),
    ])
}

#[tokio::test]
async fn reasoning_before_a_tool_call_goes_back_verbatim_with_the_tool_result() {
    for stream in [true, false] {
        let provider = ScriptedProvider::start(|request, _| reply(request)).await;
        let leaf = BedrockChat::builder()
            .region("us-west-2")
            .base_url(provider.base_url())
            .credentials(credentials())
            .model(MODEL)
            .build()
            .unwrap();
        let thinking = ReasoningOptions {
            thinking: Some(Thinking::Enabled {
                budget_tokens: 2048,
            }),
            ..ReasoningOptions::default()
        };
        let mut history = vec![Message::user("Weather in Oslo?")];
        let mut request = ChatRequest::new(history.clone())
            .tool(weather())
            .stream(stream);
        request.options.reasoning = Some(thinking.clone());
        let first = leaf
            .clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(
            first.finish_reason,
            Some(FinishReason::ToolCalls),
            "stream: {stream}"
        );
        let assistant = first.last_assistant().unwrap().clone();
        assert_eq!(assistant.tool_calls[0].id, CALL_ID);
        let continuations: Vec<_> = assistant
            .reasoning
            .iter()
            .map(|part| part.continuation.clone())
            .collect();
        assert_eq!(
            continuations,
            vec![
                Some(Continuation::Other {
                    provider: "bedrock".into(),
                    value: json!({"signature": SIGNATURE}),
                }),
                Some(Continuation::Other {
                    provider: "bedrock".into(),
                    value: json!({"redactedContent": REDACTED}),
                }),
            ],
            "stream: {stream}"
        );

        history.push(Message::Assistant(assistant));
        history.push(Message::tool_result(CALL_ID, "get_weather", "sunny, 21°C"));
        let mut request = ChatRequest::new(history).tool(weather()).stream(stream);
        request.options.reasoning = Some(thinking);
        let second = leaf
            .clone()
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(second.text(), "It is sunny in Oslo.");

        let sent = provider.requests();
        assert_eq!(
            sent[0].body["additionalModelRequestFields"],
            json!({"thinking": {"type": "enabled", "budget_tokens": 2048}}),
            "stream: {stream}"
        );
        let [signed, redacted] = reasoning_blocks();
        assert_eq!(
            sent[1].body["messages"][1],
            json!({"role": "assistant", "content": [signed, redacted,
                {"toolUse": {"toolUseId": CALL_ID, "name": "get_weather", "input": {"city": "Oslo"}}}]}),
            "stream: {stream}"
        );
        assert_eq!(
            sent[1].body["messages"][2]["content"][0]["toolResult"]["toolUseId"],
            CALL_ID
        );
    }
}
