//! What an upstream says reaches the client as the upstream said it: a rate limit's real wait, whatever form the
//! upstream gives it in; each tool round's text, apart.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::Reply;
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::KindUpstreams;
use common::{request, Harness};

/// A gateway serving every kind's model, with no retries (a rate limit is answered at once).
async fn gateway(upstreams: &KindUpstreams) -> Harness {
    let toml = upstreams.toml();
    let file = ConfigFile::parse(&toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        |config| config.file = file,
    )
    .await
}

fn chat(model: &str, stream: bool) -> Value {
    let mut body = request(stream, "hello");
    body["model"] = json!(model);
    body
}

/// Gemini says how long to wait in the 429 body's `RetryInfo` detail (google.rpc), not in a header.
#[tokio::test]
async fn gemini_s_retry_info_delay_is_the_retry_after() {
    let upstreams = KindUpstreams::start(|_| {
        Box::new(|_, _| {
            Reply::json(
                429,
                json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                    "message": "You exceeded your current quota, please check your plan and billing details.",
                    "details": [
                        {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                         "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                                         "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                        {"@type": "type.googleapis.com/google.rpc.Help", "links": [{"description": "Learn more",
                         "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}
                    ]}}),
            )
        })
    })
    .await;
    let gw = gateway(&upstreams).await;
    for stream in [false, true] {
        let answer = gw.chat(&chat("m-gemini", stream)).await;
        assert_eq!(answer.status, 429, "{}", answer.body);
        assert_eq!(
            answer
                .headers
                .get("retry-after")
                .map(|v| v.to_str().unwrap()),
            Some("37"),
            "stream={stream}"
        );
    }
}

/// The text blocks of a Messages answer (by block, streamed or whole) and the message items of a Responses
/// answer, each as its text.
fn pieces(answer: &common::Answer, path: &str, stream: bool) -> Vec<String> {
    let mut pieces: Vec<(Value, String)> = Vec::new();
    let mut add = |key: Value, text: &str| match pieces.iter_mut().find(|(k, _)| *k == key) {
        Some((_, piece)) => piece.push_str(text),
        None => pieces.push((key, text.to_owned())),
    };
    match (path, stream) {
        ("/v1/messages", true) => {
            for (name, event) in answer.named_events() {
                if let (true, Some(text)) = (
                    name == "content_block_delta",
                    event["delta"]["text"].as_str(),
                ) {
                    add(event["index"].clone(), text);
                }
            }
        }
        ("/v1/messages", false) => {
            for (i, block) in answer.json()["content"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                if block["type"] == "text" {
                    add(json!(i), block["text"].as_str().unwrap());
                }
            }
        }
        ("/v1/responses", true) => {
            for (name, event) in answer.named_events() {
                if name == "response.output_text.delta" {
                    add(event["item_id"].clone(), event["delta"].as_str().unwrap());
                }
            }
        }
        _ => {
            for item in answer.json()["output"].as_array().unwrap() {
                if item["type"] == "message" {
                    add(
                        item["id"].clone(),
                        item["content"][0]["text"].as_str().unwrap(),
                    );
                }
            }
        }
    }
    pieces.into_iter().map(|(_, piece)| piece).collect()
}

/// A turn of two rounds (the model says something, the gateway runs its tool, the model answers): each round's
/// text stays apart — its own content block or output item, or a blank line between them in Chat's one text.
#[tokio::test]
async fn each_tool_round_s_text_stays_apart() {
    let gw = Harness::start(
        |_, index| match index % 2 {
            0 => common::text_then_tool_call(
                "Adding both.",
                "call_read",
                "read_file",
                r#"{"path":"numbers.txt"}"#,
            ),
            _ => Reply::openai_text("3 and 30 make 33."),
        },
        |_| {},
    )
    .await;
    std::fs::write(gw.root().join("numbers.txt"), "3 30").unwrap();
    for stream in [false, true] {
        let answer = gw.chat(&request(stream, "add")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(
            answer.chat_text(stream),
            "Adding both.\n\n3 and 30 make 33."
        );
        for path in ["/v1/messages", "/v1/responses"] {
            let body = if path == "/v1/messages" {
                json!({"model": "test-model", "max_tokens": 100, "stream": stream,
                       "messages": [{"role": "user", "content": "add"}]})
            } else {
                json!({"model": "test-model", "stream": stream, "input": "add"})
            };
            let answer = gw.post_json(path, &body, &[]).await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            assert_eq!(
                pieces(&answer, path, stream),
                ["Adding both.", "3 and 30 make 33."],
                "{path} stream={stream}"
            );
        }
    }
}

/// A Responses upstream that keeps cutting its streams with a rate-limit `error` event: every answer is the rate
/// limit it is (429), also once the rate limits have opened the target's circuit, never a 502.
#[tokio::test]
async fn a_responses_stream_cut_by_rate_limits_stays_a_rate_limit_once_the_circuit_opens() {
    let upstreams = KindUpstreams::start(|_| {
        Box::new(|_, _| {
            Reply::sse_chunks([concat!(
                "event: response.created\n",
                "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
                "event: error\n",
                "data: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",",
                "\"message\":\"Rate limit reached for gpt-5-mini on tokens per min.\",\"param\":null}\n\n",
            )])
        })
    })
    .await;
    let gw = gateway(&upstreams).await;
    let model = upstreams.get("openai-responses").model();
    for attempt in 0..8 {
        let answer = gw.chat(&chat(&model, true)).await;
        assert_eq!(answer.status, 429, "attempt {attempt}: {}", answer.body);
        assert!(
            answer.headers.contains_key("retry-after"),
            "attempt {attempt}"
        );
    }
}
