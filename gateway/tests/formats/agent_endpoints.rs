//! The endpoints coding agents call besides their turns: Anthropic's `POST /v1/messages/count_tokens` and
//! OpenAI's `POST /v1/responses/input_tokens` answer an estimate, marked as one, without reaching an upstream
//! that cannot count; a single Anthropic upstream is asked for its own count (the estimate when it fails);
//! `GET /v1/models` answers in the shape of the caller's API, with a single `--upstream` its own list.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::Reply;
use tower_chat_gateway::config_file::ConfigFile;

use common::{send, Harness};

async fn gateway() -> Harness {
    Harness::start(
        |_, _| {
            Reply::json(
                500,
                json!({"error": "counting must not reach the upstream"}),
            )
        },
        |_| {},
    )
    .await
}

/// A count request as Claude Code sends one: a system prompt, a tool, no `max_tokens`.
fn messages_count_body(text: &str) -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "tools": [{"name": "Read", "description": "Reads a file.",
                   "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}},
                                    "required": ["file_path"]}}],
        "messages": [{"role": "user", "content": text}],
    })
}

#[tokio::test]
async fn messages_count_tokens_answers_an_estimate_that_grows_with_the_prompt() {
    let gw = gateway().await;
    let count = |text: String| {
        let gw = &gw;
        async move {
            let answer = gw
                .post_json(
                    "/v1/messages/count_tokens",
                    &messages_count_body(&text),
                    &[("anthropic-version", "2023-06-01")],
                )
                .await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            let body = answer.json();
            assert_eq!(body["estimated"], true, "{body}");
            body["input_tokens"].as_u64().unwrap()
        }
    };
    let short = count("Read src/main.rs".into()).await;
    let long = count("word ".repeat(4_000)).await;
    assert!(short > 0 && short < 200, "{short}");
    // 20,000 more characters at four a token.
    assert!(
        (4_900..5_100).contains(&(long - short)),
        "{short} then {long}"
    );
    assert!(gw.provider.requests().is_empty());
}

#[tokio::test]
async fn a_count_request_the_turn_would_refuse_is_refused_in_the_formats_shape() {
    let gw = gateway().await;
    let answer = gw
        .post_json(
            "/v1/messages/count_tokens",
            &json!({"model": "m", "messages": [{"role": "robot", "content": "hi"}]}),
            &[],
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.json()["type"], "error", "{}", answer.body);
    let answer = gw
        .post_json("/v1/responses/input_tokens", &json!({"model": 7}), &[])
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.json()["error"]["message"].is_string(),
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn responses_input_tokens_answers_the_responses_shape() {
    let gw = gateway().await;
    let answer = gw
        .post_json(
            "/v1/responses/input_tokens",
            &json!({"model": "gpt-5", "instructions": "Be brief.",
                    "input": [{"role": "user", "content": "Count me, please."}]}),
            &[],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let body = answer.json();
    assert_eq!(body["object"], "response.input_tokens", "{body}");
    assert_eq!(body["estimated"], true, "{body}");
    assert!(body["input_tokens"].as_u64().unwrap() > 0, "{body}");
    assert!(gw.provider.requests().is_empty());
}

#[tokio::test]
async fn the_model_list_takes_the_shape_of_the_callers_api() {
    let toml = r#"
[[upstreams.models]]
name = "claude-sonnet-4-5"
[[upstreams.models.targets]]
provider = "anthropic"
model = "claude-sonnet-4-5"
base_url = "http://127.0.0.1:9"
no_key = true

[[upstreams.models]]
name = "gpt-5"
[[upstreams.models.targets]]
provider = "openai"
model = "gpt-5"
base_url = "http://127.0.0.1:9/v1"
no_key = true
"#;
    let file = ConfigFile::parse(toml, "gateway.toml").unwrap();
    let gw = Harness::start(
        |_, _| Reply::json(500, json!({})),
        |config| config.file = file,
    )
    .await;
    let anthropic = send(
        "GET",
        &gw.url("/v1/models"),
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await
    .json();
    let ids: Vec<&str> = anthropic["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["type"], "model", "{m}");
            assert!(
                m["display_name"].is_string() && m["created_at"].is_string(),
                "{m}"
            );
            m["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(ids, ["claude-sonnet-4-5", "gpt-5"]);
    assert_eq!(anthropic["has_more"], false);
    assert_eq!(anthropic["first_id"], "claude-sonnet-4-5");
    assert_eq!(anthropic["last_id"], "gpt-5");
    let openai = send("GET", &gw.url("/v1/models"), &[], "").await.json();
    assert_eq!(openai["object"], "list");
    assert_eq!(openai["data"][1]["object"], "model");
}

#[tokio::test]
async fn a_single_anthropic_upstream_counts_itself_and_a_failed_count_is_an_estimate() {
    let gw = Harness::start(
        |request, index| match (request.path.as_str(), index) {
            ("/v1/messages/count_tokens", 0) => Reply::json(200, json!({"input_tokens": 1234})),
            _ => Reply::json(
                529,
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
        },
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let body = messages_count_body("Read src/main.rs");
    let headers = [("anthropic-version", "2023-06-01")];
    let counted = gw
        .post_json("/v1/messages/count_tokens", &body, &headers)
        .await;
    assert_eq!(counted.status, 200, "{}", counted.body);
    assert_eq!(
        counted.json(),
        json!({"input_tokens": 1234, "estimated": false})
    );
    let sent = &gw.provider.requests()[0];
    assert_eq!(sent.path, "/v1/messages/count_tokens");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    // The body as the client sent it: no `max_tokens` a count does not take.
    assert_eq!(sent.body, body);

    let estimated = gw
        .post_json("/v1/messages/count_tokens", &body, &headers)
        .await;
    assert_eq!(estimated.status, 200, "{}", estimated.body);
    let estimated = estimated.json();
    assert_eq!(estimated["estimated"], true, "{estimated}");
    assert!(estimated["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(gw.provider.requests().len(), 2);
}

#[tokio::test]
async fn a_single_upstream_lists_its_own_models_in_the_callers_shape() {
    let openai = Harness::start(
        |request, _| match request.path.as_str() {
            "/v1/models" => Reply::json(
                200,
                json!({"object": "list", "data": [
                    {"id": "gpt-5", "object": "model", "created": 1, "owned_by": "openai"},
                    {"id": "gpt-4o-mini", "object": "model", "created": 1, "owned_by": "openai"}]}),
            ),
            _ => Reply::json(404, json!({})),
        },
        |_| {},
    )
    .await;
    let listed = send("GET", &openai.url("/v1/models"), &[], "").await.json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["gpt-5", "gpt-4o-mini"], "{listed}");
    assert_eq!(listed["data"][0]["owned_by"], "openai");

    let anthropic = Harness::start(
        |request, _| match (request.path.as_str(), request.query.as_deref()) {
            ("/v1/models", Some("limit=1000")) => Reply::json(
                200,
                json!({"data": [{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5",
                                 "created_at": "2025-09-29T00:00:00Z"}],
                       "has_more": false, "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"}),
            ),
            _ => Reply::json(404, json!({})),
        },
        |config| config.provider = tower_chat_gateway::Provider::Anthropic,
    )
    .await;
    let listed = send(
        "GET",
        &anthropic.url("/v1/models"),
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await
    .json();
    assert_eq!(listed["data"][0]["id"], "claude-sonnet-4-5", "{listed}");
    assert_eq!(listed["data"][0]["type"], "model", "{listed}");
    assert_eq!(listed["first_id"], "claude-sonnet-4-5", "{listed}");
}

#[tokio::test]
async fn a_routed_model_whose_first_target_is_anthropic_counts_with_that_target() {
    let gw = Harness::start(
        |_, _| Reply::json(200, json!({"input_tokens": 77})),
        |config| {
            let toml = format!(
                "[[upstreams.models]]\nname = \"claude-*\"\n\n[[upstreams.models.targets]]\n\
                 provider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\nbase_url = \"{}\"\nno_key = true\n",
                config.upstream
            );
            config.file = ConfigFile::parse(&toml, "gateway.toml").unwrap();
        },
    )
    .await;
    let mut body = messages_count_body("Read src/main.rs");
    body["model"] = json!("claude-opus-4-1-20250805");
    let answer = gw.post_json("/v1/messages/count_tokens", &body, &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json(),
        json!({"input_tokens": 77, "estimated": false})
    );
    let sent = &gw.provider.requests()[0];
    assert_eq!(sent.path, "/v1/messages/count_tokens");
    // The target's own model; the rest as the client sent it.
    body["model"] = json!("claude-sonnet-4-5");
    assert_eq!(sent.body, body);
}
