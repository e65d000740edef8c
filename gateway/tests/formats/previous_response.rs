//! `previous_response_id` toward every kind of upstream: the gateway issued the id, so it replays the recorded
//! conversation (the earlier input and the answer) before the new input, in the upstream's own terms; a
//! Responses upstream gets the replay too, never the id, which it did not issue. An id the gateway did not
//! record (unknown, `store: false`) is a `previous_response_not_found` error in the Responses format, and no
//! upstream is called.

use serde_json::{json, Value};
use tower_chat::test_server::RecordedRequest;

use super::codex_tools::{before_agents, through};
use crate::common::kinds::{carries, text_reply, KindUpstreams};

const KINDS: [&str; 4] = ["openai-responses", "anthropic", "openai", "gemini"];
const FIRST: &str = "What are the limits?";
const ANSWER: &str = "Sixty requests a minute.";
const NEXT: &str = "And per day?";

fn ask(model: &str, stream: bool, input: &str) -> Value {
    json!({"model": model, "input": input, "stream": stream})
}

#[tokio::test]
async fn a_recorded_response_is_replayed_before_the_new_input_at_every_kind() {
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |request: &RecordedRequest, _| {
            text_reply(
                kind,
                if carries(request, NEXT) {
                    "Ten thousand."
                } else {
                    ANSWER
                },
            )
        })
    })
    .await;
    let (upstreams, gw) = before_agents(upstreams).await;
    for kind in KINDS {
        for stream in [false, true] {
            let at = format!("{kind}, stream: {stream}");
            let model = upstreams.get(kind).model();
            let (first, _) = through(&upstreams, &gw, kind, &ask(&model, false, FIRST)).await;
            let id = first.json()["id"].as_str().unwrap().to_owned();
            let mut follow = ask(&model, stream, NEXT);
            follow["previous_response_id"] = json!(id);
            let (answer, sent) = through(&upstreams, &gw, kind, &follow).await;
            assert!(
                answer.body.contains("Ten thousand."),
                "{at}: {}",
                answer.body
            );
            // Earlier input, earlier answer, new input: in that order, in the upstream's terms.
            let text = sent.to_string();
            let places: Vec<usize> = [FIRST, ANSWER, NEXT]
                .iter()
                .map(|needle| {
                    text.find(needle)
                        .unwrap_or_else(|| panic!("{at}: {needle} in {text}"))
                })
                .collect();
            assert!(places.windows(2).all(|w| w[0] < w[1]), "{at}: {text}");
            assert!(sent.get("previous_response_id").is_none(), "{at}: {sent}");
            if kind == "openai-responses" {
                let roles: Vec<&str> = sent["input"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|item| item["role"].as_str())
                    .collect();
                assert_eq!(roles, ["user", "assistant", "user"], "{at}: {sent}");
            }
        }
    }
}

#[tokio::test]
async fn a_response_the_gateway_did_not_record_is_a_typed_not_found_and_calls_no_upstream() {
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |_: &RecordedRequest, _| text_reply(kind, ANSWER))
    })
    .await;
    let (upstreams, gw) = before_agents(upstreams).await;
    for kind in KINDS {
        let model = upstreams.get(kind).model();
        let mut unstored = ask(&model, false, FIRST);
        unstored["store"] = json!(false);
        let (unstored, _) = through(&upstreams, &gw, kind, &unstored).await;
        let unstored = unstored.json()["id"].as_str().unwrap().to_owned();
        for id in [unstored.as_str(), "resp_never_issued"] {
            for stream in [false, true] {
                let at = format!("{kind}, {id}, stream: {stream}");
                let before = upstreams.get(kind).server.requests().len();
                let mut follow = ask(&model, stream, NEXT);
                follow["previous_response_id"] = json!(id);
                let answer = gw.post_json("/v1/responses", &follow, &[]).await;
                assert_eq!(answer.status, 404, "{at}: {}", answer.body);
                let error = &answer.json()["error"];
                assert_eq!(error["code"], "previous_response_not_found", "{at}");
                assert!(
                    error["message"].as_str().unwrap().contains(id),
                    "{at}: {error}"
                );
                assert_eq!(upstreams.get(kind).server.requests().len(), before, "{at}");
            }
        }
    }
}
