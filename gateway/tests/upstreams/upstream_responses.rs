//! An `[upstreams]` target speaking the OpenAI Responses API (`provider = "openai-responses"`): a Chat
//! Completions request to the gateway reaches a scripted Responses server over loopback, and its answer comes
//! back, streamed and not.

use crate::common;

use serde_json::json;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat_gateway::config_file::ConfigFile;

use common::*;

#[tokio::test]
async fn a_model_routed_to_the_responses_api_answers_through_the_gateway() {
    let responses =
        ScriptedProvider::start(|_, _| Reply::responses_text("Answered over Responses")).await;
    let text = format!(
        r#"
[[upstreams.models]]
name = "reasoner"

[[upstreams.models.targets]]
provider = "openai-responses"
model = "gpt-5-mini"
base_url = "{base}"
no_key = true
"#,
        base = responses.base_url(),
    );
    let file = ConfigFile::parse(&text, "gateway.toml").expect("valid config");
    let harness = Harness::start(
        |_, _| Reply::openai_text("the --upstream is unused"),
        |config| {
            config.file = file;
        },
    )
    .await;
    let models = get(&harness.url("/v1/models")).await.json();
    assert_eq!(
        models["data"][0]["targets"],
        json!(["openai-responses/gpt-5-mini"])
    );
    for stream in [false, true] {
        let mut body = request(stream, "hello");
        body["model"] = json!("reasoner");
        let answer = harness.chat(&body).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let text = answer.chat_text(stream);
        assert_eq!(text, "Answered over Responses", "stream={stream}");
    }
    let sent = responses.requests();
    assert_eq!(sent.len(), 2);
    for request in &sent {
        assert_eq!(request.path, "/v1/responses");
        assert_eq!(request.body["model"], "gpt-5-mini");
        assert_eq!(request.body["store"], false);
        assert_eq!(
            request.body["input"].as_array().unwrap().last().unwrap()["role"],
            "user"
        );
    }
}
