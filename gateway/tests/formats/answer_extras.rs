//! What an answer carries that the gateway does not model reaches a client of the upstream's own format: the
//! citations of an Anthropic upstream's text blocks (`citations` on a whole message, `citations_delta` in a
//! stream, each cited block kept apart from the text around it) and its stream events of unknown types reach a
//! Messages client; unknown fields of a Chat Completions upstream's message and choice (`annotations`, a
//! provider's extras) reach a Chat Completions client. Another format answers with the text alone.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::Reply;

use common::Harness;

fn citation() -> Value {
    json!({"type": "char_location", "cited_text": "Tower is a library of modular components.",
           "document_index": 0, "document_title": "tower", "start_char_index": 0, "end_char_index": 41})
}

/// An event of a type the gateway does not know, as a newer API might send.
fn unknown_event() -> Value {
    json!({"type": "content_policy_notice", "notice": {"level": "info", "text": "sources checked"}})
}

/// An answer citing a document: plain text, a cited block (its citation streamed before its text), plain text.
fn cited_answer() -> Reply {
    Reply::anthropic_stream(&[
        json!({"type":"message_start","message":{"id":"msg_up","model":"claude-x","usage":{"input_tokens":3,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The page says "}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":citation()}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"tower is modular"}}),
        json!({"type":"content_block_stop","index":1}),
        unknown_event(),
        json!({"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"."}}),
        json!({"type":"content_block_stop","index":2}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}),
        json!({"type":"message_stop"}),
    ])
}

fn ask(stream: bool) -> Value {
    json!({"model": "claude-test", "max_tokens": 64, "stream": stream,
           "messages": [{"role": "user", "content": "what does the page say?"}]})
}

#[tokio::test]
async fn citations_and_unknown_events_of_an_anthropic_upstream_reach_a_messages_client() {
    let gw = Harness::start(
        |_, _| cited_answer(),
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let headers = [("anthropic-version", "2023-06-01")];

    let whole = gw.post_json("/v1/messages", &ask(false), &headers).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert_eq!(
        whole.json()["content"],
        json!([
            {"type": "text", "text": "The page says "},
            {"type": "text", "text": "tower is modular", "citations": [citation()]},
            {"type": "text", "text": "."}
        ])
    );

    let streamed = gw.post_json("/v1/messages", &ask(true), &headers).await;
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    let events = streamed.named_events();
    let starts = events
        .iter()
        .filter(|(name, _)| name == "content_block_start")
        .count();
    assert_eq!(starts, 3, "{events:?}");
    let citations: Vec<&Value> = events
        .iter()
        .filter(|(_, body)| body["delta"]["type"] == "citations_delta")
        .map(|(_, body)| body)
        .collect();
    assert_eq!(citations.len(), 1, "{events:?}");
    assert_eq!(citations[0]["index"], 1);
    assert_eq!(citations[0]["delta"]["citation"], citation());
    // The cited text is block 1's, and only its.
    let texts: Vec<(u64, &str)> = events
        .iter()
        .filter(|(_, body)| body["delta"]["type"] == "text_delta")
        .map(|(_, body)| {
            (
                body["index"].as_u64().unwrap(),
                body["delta"]["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        texts,
        [(0, "The page says "), (1, "tower is modular"), (2, ".")]
    );
    let unknown = events
        .iter()
        .position(|(name, _)| name == "content_policy_notice")
        .unwrap_or_else(|| panic!("the unknown event is missing: {events:?}"));
    assert_eq!(events[unknown].1, unknown_event());
    assert_eq!(events[unknown - 1].0, "content_block_stop", "{events:?}");
}

#[tokio::test]
async fn a_chat_client_of_an_anthropic_upstream_gets_the_cited_text_joined() {
    let gw = Harness::start(
        |_, _| cited_answer(),
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    for stream in [false, true] {
        let answer = gw
            .chat(&json!({"model": "claude-test", "stream": stream,
                          "messages": [{"role": "user", "content": "what does the page say?"}]}))
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.chat_text(stream), "The page says tower is modular.");
        assert!(!answer.body.contains("citation"), "{}", answer.body);
    }
}

fn annotation() -> Value {
    json!({"type": "url_citation", "url_citation": {"url": "https://docs.rs/tower", "title": "tower",
           "start_index": 0, "end_index": 5}})
}

/// A Chat Completions answer with fields the gateway does not model: a message's `annotations` and a
/// provider's own field, and a choice's `content_filter_results` (Azure's).
fn annotated_answer() -> Reply {
    Reply::openai_stream(&[
        json!({"id": "chatcmpl-up", "model": "gpt-x", "choices": [{"index": 0,
               "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "Tower."}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {"annotations": [annotation()], "provider_note": "cached"},
               "content_filter_results": {"hate": {"filtered": false, "severity": "safe"}},
               "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
    ])
}

#[tokio::test]
async fn unknown_fields_of_a_chat_upstreams_message_and_choice_reach_a_chat_client() {
    let gw = Harness::start(|_, _| annotated_answer(), |_| {}).await;
    let ask = |stream: bool| {
        json!({"model": "gpt-test", "stream": stream,
               "messages": [{"role": "user", "content": "what is tower?"}]})
    };
    let filter = json!({"hate": {"filtered": false, "severity": "safe"}});

    let whole = gw.chat(&ask(false)).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    let choice = &whole.json()["choices"][0];
    assert_eq!(choice["message"]["content"], "Tower.", "{choice}");
    assert_eq!(choice["message"]["annotations"], json!([annotation()]));
    assert_eq!(choice["message"]["provider_note"], "cached");
    assert_eq!(choice["content_filter_results"], filter);
    // Each key once: the raw body names them no more often than the parsed one.
    assert_eq!(whole.body.matches("\"annotations\"").count(), 1);

    let streamed = gw.chat(&ask(true)).await;
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    let chunks = streamed.chunks();
    let carried: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"].get("annotations").is_some())
        .collect();
    assert_eq!(carried.len(), 1, "{chunks:?}");
    let choice = &carried[0]["choices"][0];
    assert_eq!(choice["delta"]["annotations"], json!([annotation()]));
    assert_eq!(choice["delta"]["provider_note"], "cached");
    assert_eq!(choice["content_filter_results"], filter);
    assert_eq!(carried[0]["id"], chunks[0]["id"]);
    assert_eq!(streamed.chat_text(true), "Tower.");
}

#[tokio::test]
async fn a_messages_client_of_a_chat_upstream_gets_the_text_without_its_fields() {
    let gw = Harness::start(|_, _| annotated_answer(), |_| {}).await;
    let whole = gw
        .post_json(
            "/v1/messages",
            &json!({"model": "gpt-test", "max_tokens": 64,
                    "messages": [{"role": "user", "content": "what is tower?"}]}),
            &[("anthropic-version", "2023-06-01")],
        )
        .await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert_eq!(
        whole.json()["content"],
        json!([{"type": "text", "text": "Tower."}])
    );
}
