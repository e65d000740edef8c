//! `POST /v1/responses` (OpenAI Responses) over raw HTTP: exact event sequences, function calls handed back,
//! `previous_response_id` from the persistence store (scoped to the caller, `store: false` respected),
//! approvals, errors.

use crate::common;

use common::{wire_upstream, Answer, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat::ConversationId;
use tower_chat_persistence::Store;

/// The shared wire-format upstream; `write` writes this file's own file.
fn upstream() -> impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static {
    wire_upstream(r#"{"path": "r.txt", "content": "hi"}"#)
}

fn ask(text: &str, stream: bool) -> Value {
    json!({"model": "gpt-test", "input": text, "stream": stream})
}

async fn responses(gw: &Harness, body: &Value) -> Answer {
    gw.post_json("/v1/responses", body, &[]).await
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

fn weather_tool() -> Value {
    json!([{"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])
}

#[tokio::test]
async fn text_comes_back_as_a_response_and_as_the_documented_events() {
    let gw = Harness::start(upstream(), |_| {}).await;
    let mut body = ask("text", false);
    body["instructions"] = json!("be brief");
    let answer = responses(&gw, &body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let response = answer.json();
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert!(response["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(response["instructions"], "be brief");
    let output = response["output"].as_array().unwrap();
    assert_eq!(output.len(), 1);
    assert_eq!(output[0]["type"], "message");
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(
        output[0]["content"],
        json!([{"type": "output_text", "text": "Hello from upstream", "annotations": []}])
    );
    assert_eq!(response["usage"]["input_tokens"], 12);
    assert_eq!(response["usage"]["output_tokens"], 5);
    assert_eq!(response["usage"]["total_tokens"], 17);
    assert_eq!(
        gw.upstream_messages(0)[0],
        json!({"role": "system", "content": "be brief"})
    );

    let answer = responses(&gw, &ask("text", true)).await;
    assert_eq!(answer.headers["content-type"], "text/event-stream");
    let events = answer.named_events();
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (n, (_, event)) in events.iter().enumerate() {
        assert_eq!(event["sequence_number"], n, "{event}");
    }
    assert_eq!(events[0].1["response"]["status"], "in_progress");
    let item_id = events[2].1["item"]["id"].clone();
    assert_eq!(events[4].1["item_id"], item_id);
    assert_eq!(events[7].1["text"], "Hello from upstream");
    let completed = &events[10].1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["id"], events[0].1["response"]["id"]);
    assert_eq!(completed["output"][0]["id"], item_id);
    assert_eq!(
        completed["output"][0]["content"][0]["text"],
        "Hello from upstream"
    );
    assert_eq!(completed["usage"]["total_tokens"], 17);
}

#[tokio::test]
async fn function_calls_are_handed_back_and_previous_response_id_continues_the_turn() {
    let gw = Harness::start(upstream(), |_| {}).await;
    for stream in [false, true] {
        let mut body = ask("weather", stream);
        body["tools"] = weather_tool();
        let answer = responses(&gw, &body).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let response = if stream {
            let events = answer.named_events();
            assert_eq!(
                names(&events),
                [
                    "response.created",
                    "response.in_progress",
                    "response.output_item.added",
                    "response.function_call_arguments.delta",
                    "response.function_call_arguments.delta",
                    "response.function_call_arguments.done",
                    "response.output_item.done",
                    "response.completed"
                ]
            );
            assert_eq!(events[2].1["item"]["type"], "function_call");
            assert_eq!(events[2].1["item"]["call_id"], "call_w");
            assert_eq!(events[2].1["item"]["arguments"], "");
            let streamed: String = events[3..5]
                .iter()
                .map(|(_, e)| e["delta"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(
                serde_json::from_str::<Value>(&streamed).unwrap(),
                json!({"city": "Oslo"})
            );
            events[7].1["response"].clone()
        } else {
            answer.json()
        };
        let call = &response["output"][0];
        assert_eq!(call["type"], "function_call");
        assert_eq!(call["name"], "get_weather");
        assert_eq!(call["call_id"], "call_w");
        assert_eq!(
            serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
            json!({"city": "Oslo"})
        );
        // Only the tool's output goes back; the gateway has the rest.
        let follow = json!({"model": "gpt-test", "previous_response_id": response["id"], "tools": weather_tool(),
            "input": [{"type": "function_call_output", "call_id": "call_w", "output": "sunny"}]});
        let answer = responses(&gw, &follow).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let answer = answer.json();
        assert_eq!(answer["output"][0]["content"][0]["text"], "It is sunny");
        assert_eq!(answer["previous_response_id"], response["id"]);
        let requests = gw.provider.requests();
        let sent = requests.last().unwrap().body["messages"].clone();
        assert_eq!(sent[0], json!({"role": "user", "content": "weather"}));
        assert_eq!(sent[1]["tool_calls"][0]["id"], "call_w");
        assert_eq!(
            sent[2],
            json!({"role": "tool", "tool_call_id": "call_w", "content": "sunny"})
        );
    }
}

#[tokio::test]
async fn previous_response_id_is_scoped_to_the_caller_and_store_false_keeps_nothing() {
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "sk-alice\nsk-bob\n").unwrap();
    let path = keys.path().to_owned();
    let gw = Harness::start(upstream(), move |c| c.api_keys_file = Some(path)).await;
    let alice = [("authorization", "Bearer sk-alice")];
    let bob = [("authorization", "Bearer sk-bob")];
    let mut first = ask("text", false);
    first["instructions"] = json!("first instructions");
    let first = gw.post_json("/v1/responses", &first, &alice).await.json();
    let id = first["id"].as_str().unwrap();
    let follow = json!({"model": "gpt-test", "previous_response_id": id,
                        "instructions": "second instructions", "input": "and more?"});
    let answer = gw.post_json("/v1/responses", &follow, &alice).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let second_id = answer.json()["id"].as_str().unwrap().to_owned();
    // The stored conversation, with the new instructions instead of the old ones.
    assert_eq!(
        gw.upstream_messages(1),
        vec![
            json!({"role": "system", "content": "second instructions"}),
            json!({"role": "user", "content": "text"}),
            json!({"role": "assistant", "content": "Hello from upstream"}),
            json!({"role": "user", "content": "and more?"}),
        ]
    );
    // Another key cannot continue it; an id nobody issued is the same answer.
    for (headers, id) in [(&bob, id), (&alice, "resp_unknown")] {
        let mut other = follow.clone();
        other["previous_response_id"] = json!(id);
        let answer = gw.post_json("/v1/responses", &other, headers).await;
        assert_eq!(answer.status, 404, "{}", answer.body);
        assert_eq!(
            answer.json()["error"]["code"],
            "previous_response_not_found"
        );
    }
    // `store: false`: an id comes back, but nothing can continue from it.
    let mut unstored = ask("text", false);
    unstored["store"] = json!(false);
    let unstored = gw
        .post_json("/v1/responses", &unstored, &alice)
        .await
        .json();
    assert_eq!(unstored["store"], false);
    let mut other = follow.clone();
    other["previous_response_id"] = unstored["id"].clone();
    let answer = gw.post_json("/v1/responses", &other, &alice).await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    // One conversation in the store: both turns of the chain, recorded under the ids the client holds.
    let store = gw.records().await;
    let second_call = tower_chat_persistence::CallId::new(second_id);
    let record = store
        .call(&second_call)
        .await
        .unwrap()
        .expect("the second response is stored under its id");
    let calls = store
        .conversation_calls(&record.conversation_id)
        .await
        .unwrap();
    let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
    assert_eq!(ids, [id, record.call_id.as_str()]);
    assert_ne!(record.conversation_id, ConversationId::new(""));
}

#[tokio::test]
async fn approvals_pause_and_resume_through_previous_response_id() {
    let gw = Harness::start(upstream(), |_| {}).await;
    for stream in [false, true] {
        let _ = std::fs::remove_file(gw.root().join("r.txt"));
        let answer = responses(&gw, &ask("write", stream)).await;
        let response = if stream {
            let events = answer.named_events();
            assert_eq!(events.last().unwrap().0, "response.completed");
            events.last().unwrap().1["response"].clone()
        } else {
            answer.json()
        };
        assert_eq!(response["status"], "completed");
        assert_eq!(response["tower_chat"]["finish_reason"], "awaiting_approval");
        let text = response["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap();
        assert!(text.starts_with("[approval required]"), "{text}");
        let approval = &response["tower_chat"]["approval_requests"][0];
        assert!(!gw.root().join("r.txt").exists());
        let resume = json!({"model": "gpt-test", "previous_response_id": response["id"],
            "tower_chat": {"approvals": [{"id": approval["id"], "approved": true}]}});
        let resumed = responses(&gw, &resume).await;
        assert_eq!(resumed.status, 200, "{}", resumed.body);
        assert_eq!(
            resumed.json()["output"][0]["content"][0]["text"],
            "written: wrote 2 bytes to r.txt"
        );
        assert_eq!(
            std::fs::read_to_string(gw.root().join("r.txt")).unwrap(),
            "hi"
        );
    }
}

#[tokio::test]
async fn errors_are_openai_shaped_and_a_failed_stream_ends_with_an_error_event() {
    let gw = Harness::start(upstream(), |_| {}).await;
    let answer = responses(&gw, &json!({"model": "gpt-test"})).await;
    assert_eq!(answer.status, 400);
    let body = answer.json();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("input"));

    let events = responses(&gw, &ask("abort", true)).await.named_events();
    let (last, error) = events.last().unwrap();
    assert_eq!(last, "error");
    assert!(
        error["code"].as_str().unwrap().starts_with("upstream_"),
        "{error}"
    );
    assert!(!names(&events).contains(&"response.completed"));
    assert_eq!(events[4].1["delta"], "partial ");
}
