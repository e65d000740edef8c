//! End-to-end over loopback: text, server-side tool rounds, client tools handed back, in both shapes.

use crate::common;

use common::{request, tool_result, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::Reply;

#[tokio::test]
async fn non_streaming_text_is_a_chat_completion_with_summed_usage() {
    let gw = Harness::start(|_, _| Reply::openai_text("Hello there world"), |_| {}).await;
    let answer = gw.chat(&request(false, "hi")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.headers["content-type"], "application/json");
    let body = answer.json();
    assert_eq!(body["object"], "chat.completion");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello there world"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17})
    );
    assert!(body.get("tower_chat").is_none());
    // The model is passed upstream unchanged; the gateway's tools are offered with the request.
    let sent = &gw.provider.requests()[0].body;
    assert_eq!(sent["model"], "test-model");
    let offered: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for tool in ["add", "read_file", "write_file"] {
        assert!(offered.contains(&tool), "{offered:?}");
    }
    assert!(gw.provider.requests()[0]
        .headers
        .get("authorization")
        .is_none());
}

#[tokio::test]
async fn streaming_text_is_sse_chunks_with_usage_and_done() {
    let gw = Harness::start(|_, _| Reply::openai_text("Hello there world"), |_| {}).await;
    let answer = gw.chat(&request(true, "hi")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.headers["content-type"], "text/event-stream");
    let events = answer.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks = answer.chunks();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    let ids: std::collections::HashSet<&str> =
        chunks.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "one id per response");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(answer.streamed_text(), "Hello there world");
    // More than one content chunk: the text really streams.
    let content_chunks = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert!(content_chunks >= 3, "{content_chunks}");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["total_tokens"], 17);
}

#[tokio::test]
async fn streaming_without_include_usage_sends_no_usage_chunk() {
    let gw = Harness::start(|_, _| Reply::openai_text("Hi"), |_| {}).await;
    let mut body = request(true, "hi");
    body.as_object_mut().unwrap().remove("stream_options");
    let answer = gw.chat(&body).await;
    let chunks = answer.chunks();
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "{}",
        answer.body
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

/// Round 0 calls `add`, round 1 answers with what it was sent.
fn add_then_answer(req: &tower_chat::test_server::RecordedRequest, index: usize) -> Reply {
    match index {
        0 => Reply::openai_tool_calls(&[("call_add", "add", r#"{"a": 2, "b": 3}"#)]),
        _ => {
            let messages = req.body["messages"].as_array().unwrap();
            let sum = tool_result(messages, "call_add").unwrap_or_default();
            Reply::openai_text(&format!("The sum is {sum}"))
        }
    }
}

#[tokio::test]
async fn a_server_side_tool_round_runs_inside_the_gateway() {
    for stream in [false, true] {
        let gw = Harness::start(add_then_answer, |_| {}).await;
        let answer = gw.chat(&request(stream, "2+3?")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let (text, body_has_tool_calls) = if stream {
            let calls = answer
                .chunks()
                .iter()
                .any(|c| c["choices"][0]["delta"].get("tool_calls").is_some());
            let finish =
                answer.chunks()[answer.chunks().len() - 2]["choices"][0]["finish_reason"].clone();
            assert_eq!(finish, "stop");
            (answer.streamed_text(), calls)
        } else {
            let body = answer.json();
            assert_eq!(body["choices"][0]["finish_reason"], "stop");
            // Usage summed over both model calls.
            assert_eq!(body["usage"]["total_tokens"], 29 + 17);
            let message = &body["choices"][0]["message"];
            (
                message["content"].as_str().unwrap().to_owned(),
                message.get("tool_calls").is_some(),
            )
        };
        assert_eq!(text, "The sum is 5", "stream={stream}");
        assert!(!body_has_tool_calls, "server-side calls are not shown");
        // Every model call of the turn goes upstream in the client's mode: one JSON answer each for a
        // non-streaming client (no chunk to decode), a stream for a streaming one.
        for sent in gw.provider.requests() {
            let streamed = sent.body.get("stream").and_then(Value::as_bool) == Some(true);
            assert_eq!(streamed, stream, "{}", sent.body);
        }
        // The model got the sum as a JSON number, after its own call.
        let second = gw.upstream_messages(1);
        assert_eq!(tool_result(&second, "call_add").as_deref(), Some("5"));
        assert_eq!(second[1]["tool_calls"][0]["function"]["name"], "add");
    }
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

#[tokio::test]
async fn client_tool_calls_are_handed_back_with_finish_reason_tool_calls() {
    for stream in [false, true] {
        let gw = Harness::start(
            |_, _| Reply::openai_tool_calls(&[("call_w", "get_weather", r#"{"city":"Oslo"}"#)]),
            |_| {},
        )
        .await;
        let mut body = request(stream, "weather in Oslo?");
        body["tools"] = weather_tool();
        let answer = gw.chat(&body).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        if stream {
            let chunks = answer.chunks();
            let calls: Vec<&Value> = chunks
                .iter()
                .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
                .collect();
            assert_eq!(calls[0]["id"], "call_w");
            assert_eq!(calls[0]["index"], 0);
            assert_eq!(calls[0]["function"]["name"], "get_weather");
            let arguments: String = calls
                .iter()
                .filter_map(|c| c["function"]["arguments"].as_str())
                .collect();
            assert_eq!(
                serde_json::from_str::<Value>(&arguments).unwrap(),
                json!({"city": "Oslo"})
            );
            assert_eq!(
                chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
                "tool_calls"
            );
        } else {
            let body = answer.json();
            let message = &body["choices"][0]["message"];
            assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
            assert_eq!(message["content"], Value::Null);
            assert_eq!(message["tool_calls"][0]["id"], "call_w");
            assert_eq!(message["tool_calls"][0]["type"], "function");
            assert_eq!(
                serde_json::from_str::<Value>(
                    message["tool_calls"][0]["function"]["arguments"]
                        .as_str()
                        .unwrap()
                )
                .unwrap(),
                json!({"city": "Oslo"})
            );
        }
        assert_eq!(
            gw.provider.requests().len(),
            1,
            "the gateway does not call the model again"
        );
    }
}

#[tokio::test]
async fn a_mixed_round_shows_only_client_calls_and_keeps_the_server_results_for_the_next_request() {
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
    let mut body = request(false, "1+2 and weather?");
    body["tools"] = weather_tool();
    let first = gw.chat(&body).await.json();
    let message = first["choices"][0]["message"].clone();
    assert_eq!(message["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(message["tool_calls"][0]["function"]["name"], "get_weather");
    // The client answers its call the standard way.
    body["messages"] = json!([
        {"role": "user", "content": "1+2 and weather?"},
        message,
        {"role": "tool", "tool_call_id": "call_w", "content": "sunny"}
    ]);
    let second = gw.chat(&body).await;
    assert_eq!(
        second.json()["choices"][0]["message"]["content"],
        "3, and sunny"
    );
    // The model sees its whole round: both calls and both results.
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
async fn a_client_tool_named_like_a_server_tool_is_refused() {
    let gw = Harness::start(|_, _| Reply::openai_text("x"), |_| {}).await;
    let mut body = request(false, "hi");
    body["tools"] =
        json!([{"type": "function", "function": {"name": "read_file", "parameters": {}}}]);
    let answer = gw.chat(&body).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["error"]["code"], "tool_name_reserved");
}

#[tokio::test]
async fn the_upstream_key_comes_from_the_named_environment_variable() {
    std::env::set_var("TOWER_CHAT_GATEWAY_TEST_KEY", "sk-upstream");
    let gw = Harness::start(
        |_, _| Reply::openai_text("ok"),
        |config| {
            config.no_upstream_key = false;
            config.upstream_key_env = Some("TOWER_CHAT_GATEWAY_TEST_KEY".into());
        },
    )
    .await;
    assert_eq!(gw.chat(&request(false, "hi")).await.status, 200);
    assert_eq!(
        gw.provider.requests()[0].headers["authorization"],
        "Bearer sk-upstream"
    );
}

#[tokio::test]
async fn an_anthropic_upstream_is_served_as_openai_chat_completions() {
    std::env::set_var("TOWER_CHAT_GATEWAY_TEST_ANTHROPIC_KEY", "sk-ant-test");
    let gw = Harness::start(
        |_, index| match index {
            0 => Reply::anthropic_stream(&[
                json!({"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":{"input_tokens":10,"output_tokens":1}}}),
                json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"add","input":{}}}),
                json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 40, \"b\": 2}"}}),
                json!({"type":"content_block_stop","index":0}),
                json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}),
                json!({"type":"message_stop"}),
            ]),
            _ => Reply::anthropic_stream(&[
                json!({"type":"message_start","message":{"id":"msg_2","model":"claude-x","usage":{"input_tokens":20,"output_tokens":1}}}),
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"It is 42."}}),
                json!({"type":"content_block_stop","index":0}),
                json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4}}),
                json!({"type":"message_stop"}),
            ]),
        },
        |config| {
            config.provider = tower_chat_gateway::Provider::Anthropic;
            config.no_upstream_key = false;
            config.upstream_key_env = Some("TOWER_CHAT_GATEWAY_TEST_ANTHROPIC_KEY".into());
        },
    )
    .await;
    for stream in [false, true] {
        let answer = gw.chat(&request(stream, "40+2?")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let text = if stream {
            answer.streamed_text()
        } else {
            let body = answer.json();
            assert_eq!(body["model"], "claude-x");
            body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(text, "It is 42.");
    }
    let requests = gw.provider.requests();
    // The non-streaming turn's two calls (tool round, answer) unstreamed; the streaming turn's answer streamed.
    let streamed: Vec<bool> = requests
        .iter()
        .map(|r| r.body.get("stream").and_then(Value::as_bool) == Some(true))
        .collect();
    assert_eq!(streamed, [false, false, true]);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].headers["x-api-key"], "sk-ant-test");
    assert_eq!(requests[0].body["model"], "test-model");
    let second = requests[1].body["messages"].to_string();
    assert!(
        second.contains("tool_result") && second.contains("42"),
        "{second}"
    );
}

/// The body frames of a streamed answer to `body`, each as text.
async fn frames(gw: &Harness, body: &Value) -> Vec<String> {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let request = hyper::Request::post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let mut response = client.request(request).await.unwrap().into_body();
    let mut frames = Vec::new();
    while let Some(frame) = response.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push(String::from_utf8(data.to_vec()).unwrap());
        }
    }
    frames
}

/// Events that are already there when the gateway writes one go out in the same body frame (one write for a
/// burst, not one per event), and an event still on its way is not waited for: an upstream that pauses before
/// every chunk gets each one to the client in a frame of its own.
#[tokio::test]
async fn ready_events_share_a_frame_and_late_ones_are_not_waited_for() {
    let text = "one two three four five six seven eight nine ten";
    let gw = Harness::start(
        move |_, index| {
            let reply = Reply::openai_text(text);
            if index == 0 {
                // The whole answer in one upstream write.
                return reply.rechunked(1 << 20);
            }
            let mut paced = Reply::sse_chunks(Vec::<bytes::Bytes>::new());
            for part in reply.parts {
                paced = paced
                    .then(tower_chat::test_server::Part::Pause(
                        std::time::Duration::from_millis(25),
                    ))
                    .then(part);
            }
            paced
        },
        |_| {},
    )
    .await;
    let burst = frames(&gw, &request(true, "hi")).await;
    let paced = frames(&gw, &request(true, "hi")).await;
    for frames in [&burst, &paced] {
        let joined = frames.concat();
        assert!(joined.ends_with("data: [DONE]\n\n"), "{joined}");
        assert!(joined.contains("\"ten\""), "{joined}");
    }
    // 14 events (opening, ten words, finish, usage, [DONE]) arrived together: a few frames at most.
    assert!(burst.len() <= 4, "{} frames: {burst:?}", burst.len());
    // One upstream chunk every 25 ms: the client sees the words as they come.
    assert!(paced.len() >= 10, "{} frames: {paced:?}", paced.len());
}
