//! What an upstream says reaches the client as the upstream said it: a rate limit's real wait, whatever form the
//! upstream gives it in.

mod common;

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
