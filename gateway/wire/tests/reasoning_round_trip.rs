//! Reasoning from every upstream survives a round trip through a Messages or Responses client, with no state
//! kept between requests (as on another replica, or after a restart): the second request of a tool round hands
//! the service the reasoning part the upstream issued, its text and continuation unchanged, whether the answer
//! came whole or streamed.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tower_chat::{ChatEvent, Continuation, Message, ReasoningPart};
use tower_chat_testkit::{calls, model, within, Delivery, Items};
use tower_chat_wire::WireRouter;

/// The reasoning each upstream kind issues beside a tool call.
fn parts() -> Vec<(&'static str, ReasoningPart)> {
    vec![
        (
            "bedrock",
            ReasoningPart {
                text: "Checking the weather tool.".into(),
                continuation: Some(Continuation::Other {
                    provider: "bedrock".into(),
                    value: json!({"signature": "EqoBCkgIBxABGAIiQL+bedrock/sig=="}),
                }),
            },
        ),
        (
            "gemini",
            ReasoningPart {
                text: String::new(),
                continuation: Some(Continuation::Other {
                    provider: "gemini".into(),
                    value: json!({"thoughtSignature": "CiQB0e2Kb+gemini==", "callId": "call_1"}),
                }),
            },
        ),
        (
            "openai",
            ReasoningPart {
                text: "Need the weather.".into(),
                continuation: Some(Continuation::OpenAiReasoning {
                    id: "rs_0abc".into(),
                    encrypted_content: Some("gAAAAABo-opaque==".into()),
                    summary: vec!["Need the weather.".into()],
                }),
            },
        ),
    ]
}

/// A turn that reasons, then calls `weather`, as a leaf streams it.
fn reasoning_then_call(part: &ReasoningPart) -> Items {
    let mut items = Vec::new();
    if !part.text.is_empty() {
        items.push(ChatEvent::ReasoningDelta {
            text: part.text.clone(),
        });
    }
    items.push(ChatEvent::ReasoningEnd {
        continuation: part.continuation.clone().unwrap(),
    });
    items.extend(calls(&[("call_1", "weather", json!({"city": "Oslo"}))]));
    items.into_iter().map(Ok).collect()
}

async fn serve(routes: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, routes).await.unwrap() });
    format!("http://{addr}")
}

async fn post(url: &str, body: &Value) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    within("an answer", async {
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    })
    .await
}

/// The `data:` payloads of an SSE body.
fn data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

/// A Messages answer's content blocks, from the whole message or rebuilt from its stream as the SDKs do.
fn message_blocks(body: &str, stream: bool) -> Vec<Value> {
    if !stream {
        return serde_json::from_str::<Value>(body).unwrap()["content"]
            .as_array()
            .unwrap()
            .clone();
    }
    let mut blocks: Vec<Value> = Vec::new();
    for event in data(body) {
        match event["type"].as_str().unwrap() {
            "content_block_start" => blocks.push(event["content_block"].clone()),
            "content_block_delta" => {
                let block = &mut blocks[event["index"].as_u64().unwrap() as usize];
                let delta = &event["delta"];
                match delta["type"].as_str().unwrap() {
                    "thinking_delta" => {
                        let text = block["thinking"].as_str().unwrap().to_owned();
                        block["thinking"] = (text + delta["thinking"].as_str().unwrap()).into();
                    }
                    "signature_delta" => block["signature"] = delta["signature"].clone(),
                    "input_json_delta" => {
                        let json = block["partial"].as_str().unwrap_or("").to_owned();
                        block["partial"] = (json + delta["partial_json"].as_str().unwrap()).into();
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    for block in &mut blocks {
        if let Some(partial) = block.as_object_mut().unwrap().remove("partial") {
            block["input"] = serde_json::from_str(partial.as_str().unwrap()).unwrap();
        }
    }
    blocks
}

/// A Responses answer's output items, from the whole response or its `response.completed` event.
fn response_output(body: &str, stream: bool) -> Vec<Value> {
    let response = if stream {
        data(body)
            .into_iter()
            .find(|event| event["type"] == "response.completed")
            .expect("a completed event")["response"]
            .clone()
    } else {
        serde_json::from_str(body).unwrap()
    };
    response["output"].as_array().unwrap().clone()
}

/// The reasoning of the assistant message the service was handed on the second request.
fn reasoning_sent_back(sent: &[Message]) -> Vec<ReasoningPart> {
    sent.iter()
        .find_map(|message| match message {
            Message::Assistant(assistant) => Some(assistant.reasoning.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no assistant turn in {sent:?}"))
}

#[tokio::test]
async fn every_upstreams_reasoning_comes_back_from_a_messages_client_unchanged() {
    for (kind, part) in parts() {
        for stream in [false, true] {
            let script = part.clone();
            let (chat, sent) = model(Delivery::OneByOne, move |_| reasoning_then_call(&script));
            let base = serve(WireRouter::new(chat).messages()).await;
            let url = format!("{base}/v1/messages");
            let tools = json!([{"name": "weather", "input_schema": {"type": "object"}}]);
            let question = json!({"role": "user", "content": "Weather in Oslo?"});
            let first = post(
                &url,
                &json!({"model": "m", "max_tokens": 64, "stream": stream, "tools": tools,
                        "messages": [question]}),
            )
            .await;
            let blocks = message_blocks(&first, stream);
            let thinking = blocks
                .iter()
                .find(|block| block["type"] == "thinking")
                .unwrap_or_else(|| panic!("{kind}, stream {stream}: no thinking block in {first}"));
            assert_eq!(thinking["thinking"], part.text, "{kind}, stream {stream}");
            assert!(
                thinking["signature"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("tower-chat.reasoning.v1:")),
                "{kind}, stream {stream}: {thinking}"
            );
            post(
                &url,
                &json!({"model": "m", "max_tokens": 64, "tools": tools, "messages": [
                    question,
                    {"role": "assistant", "content": blocks},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]}]}),
            )
            .await;
            assert_eq!(
                reasoning_sent_back(&sent.sent(1)),
                std::slice::from_ref(&part),
                "{kind}, stream {stream}"
            );
        }
    }
}

#[tokio::test]
async fn every_upstreams_reasoning_comes_back_from_a_responses_client_unchanged() {
    for (kind, part) in parts() {
        for stream in [false, true] {
            let script = part.clone();
            let (chat, sent) = model(Delivery::OneByOne, move |_| reasoning_then_call(&script));
            let base = serve(WireRouter::new(chat).responses()).await;
            let url = format!("{base}/v1/responses");
            let tools =
                json!([{"type": "function", "name": "weather", "parameters": {"type": "object"}}]);
            let first = post(
                &url,
                &json!({"model": "m", "stream": stream, "store": false, "tools": tools,
                        "include": ["reasoning.encrypted_content"], "input": "Weather in Oslo?"}),
            )
            .await;
            let mut input = vec![json!({"role": "user", "content": "Weather in Oslo?"})];
            input.extend(response_output(&first, stream));
            input.push(
                json!({"type": "function_call_output", "call_id": "call_1", "output": "sunny"}),
            );
            post(
                &url,
                &json!({"model": "m", "store": false, "tools": tools, "input": input}),
            )
            .await;
            assert_eq!(
                reasoning_sent_back(&sent.sent(1)),
                std::slice::from_ref(&part),
                "{kind}, stream {stream}"
            );
        }
    }
}

#[tokio::test]
async fn a_damaged_sealed_signature_is_a_400_naming_its_block() {
    let (chat, sent) = model(Delivery::OneByOne, |_| {
        reasoning_then_call(&parts().remove(0).1)
    });
    let base = serve(WireRouter::new(chat).messages()).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = json!({"model": "m", "max_tokens": 64, "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "x", "signature": "tower-chat.reasoning.v1:@@@"},
            {"type": "tool_use", "id": "call_1", "name": "weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]}]});
    let request = http::Request::post(format!("{base}/v1/messages"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = within("an answer", client.request(request)).await.unwrap();
    assert_eq!(response.status(), 400);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let message = serde_json::from_slice::<Value>(&body).unwrap()["error"]["message"].clone();
    let message = message.as_str().unwrap();
    assert!(
        message.contains("messages[1].content[0]") && message.contains("`signature`"),
        "{message}"
    );
    assert_eq!(sent.calls(), 0);
}
