//! `POST /v1/messages` (Anthropic Messages) over raw HTTP: exact event sequences, content blocks, client tools,
//! approvals, errors in Anthropic's shape, gateway keys by `x-api-key`, and an Anthropic upstream.

use crate::common;

use common::{tool_result, wire_upstream, Answer, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};

/// The shared wire-format upstream; `write` writes this file's own file.
fn upstream() -> impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static {
    wire_upstream(r#"{"path": "a.txt", "content": "hi"}"#)
}

fn ask(text: &str, stream: bool) -> Value {
    json!({"model": "claude-test", "max_tokens": 64, "stream": stream,
           "messages": [{"role": "user", "content": text}]})
}

async fn messages(gw: &Harness, body: &Value) -> Answer {
    gw.post_json("/v1/messages", body, &[("anthropic-version", "2023-06-01")])
        .await
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

fn weather_tool() -> Value {
    json!([{"name": "get_weather", "description": "Weather by city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])
}

#[tokio::test]
async fn text_comes_back_as_a_message_and_as_the_exact_event_sequence() {
    let gw = Harness::start(upstream(), |_| {}).await;
    let mut body = ask("text", false);
    body["system"] = json!("be brief");
    let answer = messages(&gw, &body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let message = answer.json();
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["model"], "scripted-model");
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "Hello from upstream"}])
    );
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["stop_sequence"], Value::Null);
    assert_eq!(
        message["usage"],
        json!({"input_tokens": 12, "output_tokens": 5})
    );
    let sent = &gw.provider.requests()[0].body;
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert!(
        sent["max_tokens"] == 64 || sent["max_completion_tokens"] == 64,
        "{sent}"
    );

    let answer = messages(&gw, &ask("text", true)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.headers["content-type"], "text/event-stream");
    let events = answer.named_events();
    assert_eq!(
        names(&events),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let start = &events[0].1["message"];
    assert_eq!(start["role"], "assistant");
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert_eq!(
        events[2].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = events[3..6]
        .iter()
        .map(|(_, e)| {
            assert_eq!(e["index"], 0);
            assert_eq!(e["delta"]["type"], "text_delta");
            e["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, "Hello from upstream");
    assert_eq!(events[6].1["index"], 0);
    let delta = &events[7].1;
    assert_eq!(
        delta["delta"],
        json!({"stop_reason": "end_turn", "stop_sequence": null})
    );
    assert_eq!(delta["usage"]["output_tokens"], 5);
    assert!(delta.get("tower_chat").is_none());
}

#[tokio::test]
async fn a_server_tool_round_is_invisible_and_usage_is_summed_over_the_turn() {
    let gw = Harness::start(upstream(), |_| {}).await;
    let answer = messages(&gw, &ask("add", false)).await.json();
    assert_eq!(
        answer["content"],
        json!([{"type": "text", "text": "The sum is 5"}])
    );
    assert_eq!(
        answer["usage"],
        json!({"input_tokens": 32, "output_tokens": 14})
    );
    let events = messages(&gw, &ask("add", true)).await.named_events();
    assert!(
        events
            .iter()
            .all(|(_, e)| e["content_block"]["type"] != "tool_use"),
        "{events:?}"
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["usage"]["output_tokens"], 14);
    assert_eq!(delta["usage"]["input_tokens"], 32);
}

#[tokio::test]
async fn client_tools_are_handed_back_as_tool_use_blocks_and_results_continue_the_turn() {
    let gw = Harness::start(upstream(), |_| {}).await;
    let mut body = ask("weather", false);
    body["tools"] = weather_tool();
    body["tool_choice"] = json!({"type": "auto"});
    let answer = messages(&gw, &body).await.json();
    assert_eq!(answer["stop_reason"], "tool_use");
    assert_eq!(
        answer["content"],
        json!([{"type": "tool_use", "id": "call_w", "name": "get_weather", "input": {"city": "Oslo"}}])
    );
    let sent = &gw.provider.requests()[0].body;
    assert_eq!(sent["tool_choice"], "auto");
    assert!(sent["tools"].to_string().contains("get_weather"), "{sent}");

    body["stream"] = json!(true);
    let events = messages(&gw, &body).await.named_events();
    assert_eq!(
        names(&events),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(
        events[2].1["content_block"],
        json!({"type": "tool_use", "id": "call_w", "name": "get_weather", "input": {}})
    );
    let arguments: String = events[3..5]
        .iter()
        .map(|(_, e)| {
            assert_eq!(e["delta"]["type"], "input_json_delta");
            e["delta"]["partial_json"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"city": "Oslo"})
    );
    assert_eq!(events[6].1["delta"]["stop_reason"], "tool_use");

    // The client runs its tool and answers with a tool_result block.
    body["stream"] = json!(false);
    body["messages"] = json!([
        {"role": "user", "content": "weather"},
        {"role": "assistant", "content": answer["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_w", "content": "sunny"}]}
    ]);
    let answer = messages(&gw, &body).await.json();
    assert_eq!(answer["content"][0]["text"], "It is sunny");
    let sent = gw.upstream_messages(2);
    assert_eq!(
        sent[2],
        json!({"role": "tool", "tool_call_id": "call_w", "content": "sunny"})
    );
}

#[tokio::test]
async fn approvals_pause_and_resume_in_the_messages_format() {
    let gw = Harness::start(upstream(), |_| {}).await;
    for stream in [false, true] {
        let _ = std::fs::remove_file(gw.root().join("a.txt"));
        let answer = messages(&gw, &ask("write", stream)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let (text, tower_chat, stop_reason) = if stream {
            let events = answer.named_events();
            let text: String = events
                .iter()
                .filter_map(|(_, e)| e["delta"]["text"].as_str())
                .collect();
            let delta = events[events.len() - 2].1.clone();
            (
                text,
                delta["tower_chat"].clone(),
                delta["delta"]["stop_reason"].clone(),
            )
        } else {
            let body = answer.json();
            (
                body["content"][0]["text"].as_str().unwrap().to_owned(),
                body["tower_chat"].clone(),
                body["stop_reason"].clone(),
            )
        };
        assert_eq!(stop_reason, "end_turn");
        assert!(text.starts_with("[approval required]"), "{text}");
        assert_eq!(tower_chat["finish_reason"], "awaiting_approval");
        let approval = &tower_chat["approval_requests"][0];
        assert_eq!(approval["tool"], "write_file");
        assert!(!gw.root().join("a.txt").exists(), "nothing runs unapproved");
        let resume = json!({"model": "claude-test", "max_tokens": 64,
            "messages": [{"role": "user", "content": "write"},
                         {"role": "assistant", "content": [{"type": "text", "text": text}]}],
            "tower_chat": {"approvals": [{"id": approval["id"], "approved": true}]}});
        let resumed = messages(&gw, &resume).await.json();
        assert_eq!(
            resumed["content"][0]["text"], "written: wrote 2 bytes to a.txt",
            "{resumed}"
        );
        assert_eq!(
            std::fs::read_to_string(gw.root().join("a.txt")).unwrap(),
            "hi"
        );
        // Single use.
        let replay = messages(&gw, &resume).await;
        assert_eq!(replay.status, 400);
        assert_eq!(replay.json()["error"]["type"], "invalid_request_error");
    }
}

#[tokio::test]
async fn errors_come_in_anthropics_shape_and_keys_may_come_as_x_api_key() {
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "sk-gw\n").unwrap();
    let path = keys.path().to_owned();
    let gw = Harness::start(upstream(), move |c| c.api_keys_file = Some(path)).await;
    let with_key = [("x-api-key", "sk-gw"), ("anthropic-version", "2023-06-01")];

    let ok = gw
        .post_json("/v1/messages", &ask("text", false), &with_key)
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let bearer = [("authorization", "Bearer sk-gw")];
    let ok = gw
        .post_json("/v1/messages", &ask("text", false), &bearer)
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);

    let error = |answer: &Answer, status: u16, kind: &str| {
        assert_eq!(answer.status, status, "{}", answer.body);
        let body = answer.json();
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], kind, "{body}");
        body["error"]["message"].as_str().unwrap().to_owned()
    };
    let wrong = gw
        .post_json(
            "/v1/messages",
            &ask("text", false),
            &[("x-api-key", "nope")],
        )
        .await;
    error(&wrong, 401, "authentication_error");
    let missing = json!({"model": "m", "messages": [{"role": "user", "content": "text"}]});
    let answer = gw.post_json("/v1/messages", &missing, &with_key).await;
    assert!(error(&answer, 400, "invalid_request_error").contains("max_tokens"));
    let answer = gw
        .post_json("/v1/messages", &ask("ratelimit", false), &with_key)
        .await;
    error(&answer, 429, "rate_limit_error");
    assert_eq!(answer.headers["retry-after"], "3");

    // A failure after the stream started ends it with an `error` event, never a silent `message_stop`.
    let answer = gw
        .post_json("/v1/messages", &ask("abort", true), &with_key)
        .await;
    assert_eq!(answer.status, 200);
    let events = answer.named_events();
    let (last, body) = events.last().unwrap();
    assert_eq!(last, "error");
    assert_eq!(body["error"]["type"], "api_error", "{body}");
    assert!(!names(&events).contains(&"message_stop"));
    assert_eq!(events[3].1["delta"]["text"], "partial ");
}

#[tokio::test]
async fn thinking_is_forwarded_to_an_anthropic_upstream_and_streamed_back_as_thinking_blocks() {
    let gw = Harness::start(
        |_, _| {
            Reply::anthropic_stream(&[
                json!({"type":"message_start","message":{"id":"msg_up","model":"claude-x","usage":{"input_tokens":10,"output_tokens":1}}}),
                json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
                json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me see."}}),
                json!({"type":"content_block_stop","index":0}),
                json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
                json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Yes."}}),
                json!({"type":"content_block_stop","index":1}),
                json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}),
                json!({"type":"message_stop"}),
            ])
        },
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let mut body = ask("think", true);
    body["max_tokens"] = json!(4096);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    body["top_k"] = json!(5);
    let events = messages(&gw, &body).await.named_events();
    assert_eq!(
        names(&events),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[0].1["message"]["model"], "claude-x");
    assert_eq!(events[2].1["content_block"]["type"], "thinking");
    assert_eq!(
        events[3].1["delta"],
        json!({"type": "thinking_delta", "thinking": "Let me see."})
    );
    assert_eq!(
        (&events[5].1["index"], &events[5].1["content_block"]["type"]),
        (&json!(1), &json!("text"))
    );
    let sent = &gw.provider.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(
        sent.body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(sent.body["top_k"], 5);
    assert_eq!(sent.body["max_tokens"], 4096);

    body["stream"] = json!(false);
    let answer = messages(&gw, &body).await.json();
    assert_eq!(
        answer["content"],
        json!([{"type": "thinking", "thinking": "Let me see.", "signature": ""},
               {"type": "text", "text": "Yes."}])
    );
    assert_eq!(
        answer["usage"],
        json!({"input_tokens": 10, "output_tokens": 7})
    );
}

#[tokio::test]
async fn a_stop_sequence_hit_upstream_is_reported_as_stop_sequence() {
    let gw = Harness::start(
        |_, _| {
            Reply::anthropic_stream(&[
                json!({"type":"message_start","message":{"id":"msg_up","model":"claude-x","usage":{"input_tokens":4,"output_tokens":1}}}),
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"one two"}}),
                json!({"type":"content_block_stop","index":0}),
                json!({"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{"output_tokens":3}}),
                json!({"type":"message_stop"}),
            ])
        },
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let mut body = ask("count", true);
    body["stop_sequences"] = json!(["END"]);
    let events = messages(&gw, &body).await.named_events();
    let delta = &events
        .iter()
        .find(|(name, _)| name == "message_delta")
        .unwrap()
        .1;
    assert_eq!(
        delta["delta"],
        json!({"stop_reason": "stop_sequence", "stop_sequence": "END"})
    );
    assert!(delta.get("tower_chat").is_none(), "{delta}");
    assert_eq!(
        gw.provider.requests()[0].body["stop_sequences"],
        json!(["END"])
    );

    body["stream"] = json!(false);
    let answer = messages(&gw, &body).await.json();
    assert_eq!(answer["stop_reason"], "stop_sequence", "{answer}");
    assert_eq!(answer["stop_sequence"], "END", "{answer}");
}

#[tokio::test]
async fn a_mixed_round_hands_back_only_the_client_call_and_the_model_sees_its_whole_round() {
    let gw = Harness::start(
        |_, index| match index {
            0 => Reply::openai_tool_calls(&[
                ("call_add", "add", r#"{"a": 1, "b": 2}"#),
                ("call_w", "get_weather", r#"{"city":"Oslo"}"#),
            ]),
            _ => Reply::openai_text("3, and sunny"),
        },
        |_| {},
    )
    .await;
    let mut body = ask("1+2 and weather?", false);
    body["tools"] = weather_tool();
    let first = messages(&gw, &body).await.json();
    assert_eq!(first["stop_reason"], "tool_use");
    let content = first["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{first}");
    assert_eq!(content[0]["name"], "get_weather");
    body["messages"] = json!([
        {"role": "user", "content": "1+2 and weather?"},
        {"role": "assistant", "content": content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_w", "content": "sunny"}]}
    ]);
    let second = messages(&gw, &body).await.json();
    assert_eq!(second["content"][0]["text"], "3, and sunny");
    let sent = gw.upstream_messages(1);
    assert_eq!(
        sent[1]["tool_calls"].as_array().unwrap().len(),
        2,
        "{sent:?}"
    );
    assert_eq!(tool_result(&sent, "call_add").as_deref(), Some("3"));
    assert_eq!(tool_result(&sent, "call_w").as_deref(), Some("sunny"));
}

#[tokio::test]
async fn every_surface_records_into_one_conversation_view() {
    let gw = Harness::start(upstream(), |_| {}).await;
    let conversation = [("x-conversation-id", "conv-shared")];
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "text"}]});
    let answers = [
        gw.post_json("/v1/chat/completions", &chat, &conversation)
            .await,
        gw.post_json("/v1/messages", &ask("text", false), &conversation)
            .await,
        gw.post_json(
            "/v1/responses",
            &json!({"model": "m", "input": "text"}),
            &conversation,
        )
        .await,
    ];
    for answer in &answers {
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    let store = gw.records().await;
    use tower_chat_persistence::Store;
    let conversation = tower_chat::ConversationId::new("conv-shared");
    let calls = store.conversation_calls(&conversation).await.unwrap();
    assert_eq!(calls.len(), 3, "one conversation, whatever the surface");
    for call in &calls {
        assert_eq!(
            call.history(),
            vec![
                tower_chat::Message::user("text"),
                tower_chat::Message::assistant("Hello from upstream")
            ],
            "the same record shape from every surface"
        );
    }
}
