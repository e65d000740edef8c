//! Fields an agent sends, through the gateway to an upstream of every kind: each reaches the upstream in that
//! provider's own field, or is left out where the provider has none; none is refused that a real API accepts.
//! Each scripted upstream records the body it received, and the tests read those bodies.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::Reply;
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::{text_reply, KindUpstreams, KINDS};
use common::{Answer, Harness};

/// Every kind's upstream answering "ok", and a gateway routing `m-<kind>` to each.
async fn every_kind() -> (KindUpstreams, Harness) {
    let upstreams = KindUpstreams::start(|kind| Box::new(move |_, _| text_reply(kind, "ok"))).await;
    let toml = upstreams.toml();
    let file = ConfigFile::parse(&toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let gw = Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        |config| config.file = file,
    )
    .await;
    (upstreams, gw)
}

/// Sends `body` (its `model` set to reach `kind`) to `path`, expects a 200, and returns the body `kind`'s
/// upstream received.
async fn sent_to(
    upstreams: &KindUpstreams,
    gw: &Harness,
    kind: &str,
    path: &str,
    body: &Value,
) -> Value {
    let upstream = upstreams.get(kind);
    let mut body = body.clone();
    body["model"] = json!(upstream.model());
    let before = upstream.server.requests().len();
    let answer: Answer = gw
        .post_json(path, &body, &[("anthropic-version", "2023-06-01")])
        .await;
    assert_eq!(answer.status, 200, "{path} to {kind}: {}", answer.body);
    let requests = upstream.server.requests();
    assert_eq!(requests.len(), before + 1, "{kind} was called once");
    requests[before].body.clone()
}

fn messages_body(extra: Value) -> Value {
    let mut body = json!({
        "model": "m",
        "max_tokens": 32000,
        "messages": [{"role": "user", "content": "hi"}],
    });
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    body
}

#[tokio::test]
async fn the_end_user_id_reaches_each_provider_in_its_own_field_and_never_gemini_or_bedrock() {
    let (upstreams, gw) = every_kind().await;
    let inbound = [
        (
            "/v1/messages",
            messages_body(json!({"metadata": {"user_id": "user-7"}})),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "user": "user-7", "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "m", "user": "user-7", "input": "hi"}),
        ),
    ];
    for (path, body) in &inbound {
        for kind in KINDS {
            let sent = sent_to(&upstreams, &gw, kind, path, body).await;
            let at = format!("{path} to {kind}: {sent}");
            match kind {
                "openai" | "azure" | "openai-responses" => {
                    assert_eq!(sent["user"], "user-7", "{at}")
                }
                "anthropic" => {
                    assert_eq!(sent["metadata"], json!({"user_id": "user-7"}), "{at}");
                    assert!(sent.get("user").is_none(), "{at}");
                }
                _ => {
                    assert!(sent.get("user").is_none(), "{at}");
                    assert!(sent.get("metadata").is_none(), "{at}");
                }
            }
        }
    }
}

#[tokio::test]
async fn a_mid_conversation_system_message_from_a_messages_client_reaches_every_kind() {
    let (upstreams, gw) = every_kind().await;
    let body = messages_body(json!({
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": "read the file"},
            {"role": "system", "content": [{"type": "text", "text": "The file changed on disk."}]},
            {"role": "assistant", "content": "Reading."},
            {"role": "user", "content": "go on"},
        ],
    }));
    for kind in KINDS {
        let sent = sent_to(&upstreams, &gw, kind, "/v1/messages", &body).await;
        let at = format!("{kind}: {sent}");
        match kind {
            // Chat Completions takes a system message anywhere: kept in its place.
            "openai" | "azure" => {
                let roles: Vec<&str> = sent["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["role"].as_str().unwrap())
                    .collect();
                assert_eq!(
                    roles,
                    ["system", "user", "system", "assistant", "user"],
                    "{at}"
                );
                assert_eq!(
                    sent["messages"][2]["content"], "The file changed on disk.",
                    "{at}"
                );
            }
            "openai-responses" => {
                assert_eq!(sent["input"][2]["role"], "system", "{at}");
                assert_eq!(
                    sent["input"][2]["content"], "The file changed on disk.",
                    "{at}"
                );
            }
            // Sent in Anthropic's own format: carried in its place, as the models that take it expect.
            "anthropic" => {
                assert_eq!(sent["system"], "You are terse.", "{at}");
                let roles: Vec<&str> = sent["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["role"].as_str().unwrap())
                    .collect();
                assert_eq!(roles, ["user", "system", "assistant", "user"], "{at}");
                assert_eq!(
                    sent["messages"][1]["content"],
                    json!([{"type": "text", "text": "The file changed on disk."}]),
                    "{at}"
                );
            }
            "gemini" | "vertex" => {
                let system = sent["systemInstruction"].to_string();
                assert!(
                    system.contains("You are terse.") && system.contains("The file changed"),
                    "{at}"
                );
            }
            "bedrock" => {
                let system = sent["system"].to_string();
                assert!(
                    system.contains("You are terse.") && system.contains("The file changed"),
                    "{at}"
                );
            }
            other => panic!("{other}"),
        }
    }
}

#[tokio::test]
async fn claude_code_thinking_and_effort_map_onto_each_providers_reasoning_setting() {
    let (upstreams, gw) = every_kind().await;
    let body = messages_body(json!({
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
    }));
    for kind in KINDS {
        let sent = sent_to(&upstreams, &gw, kind, "/v1/messages", &body).await;
        let at = format!("{kind}: {sent}");
        match kind {
            "anthropic" => {
                assert_eq!(sent["thinking"], json!({"type": "adaptive"}), "{at}");
                assert_eq!(sent["output_config"], json!({"effort": "high"}), "{at}");
            }
            "openai" => assert_eq!(sent["reasoning_effort"], "high", "{at}"),
            // The target's api-version (2024-10-21) predates `reasoning_effort`: left out, not refused.
            "azure" => assert!(sent.get("reasoning_effort").is_none(), "{at}"),
            "openai-responses" => assert_eq!(sent["reasoning"], json!({"effort": "high"}), "{at}"),
            "gemini" | "vertex" => assert_eq!(
                sent["generationConfig"]["thinkingConfig"],
                json!({"thinkingBudget": 16384}),
                "{at}"
            ),
            "bedrock" => assert_eq!(
                sent["additionalModelRequestFields"],
                json!({"thinking": {"type": "enabled", "budget_tokens": 16384}}),
                "{at}"
            ),
            other => panic!("{other}"),
        }
    }
    let mut to_azure = body.clone();
    to_azure["model"] = json!(upstreams.get("azure").model());
    let answer = gw
        .post_json(
            "/v1/messages",
            &to_azure,
            &[("anthropic-version", "2023-06-01")],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let dropped = answer
        .headers
        .get("x-tower-chat-dropped")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(
        dropped
            .split(',')
            .any(|name| name.trim() == "reasoning_effort"),
        "the drop is named: {dropped:?}"
    );
}

#[tokio::test]
async fn a_thinking_budget_and_openai_effort_levels_map_through_the_documented_table() {
    let (upstreams, gw) = every_kind().await;
    let budget = messages_body(json!({"thinking": {"type": "enabled", "budget_tokens": 6000}}));
    let chat = json!({"model": "m", "reasoning_effort": "low", "messages": [{"role": "user", "content": "hi"}]});
    let responses =
        json!({"model": "m", "reasoning": {"effort": "medium", "summary": "auto"}, "input": "hi"});
    let cases = [
        (
            "/v1/messages",
            &budget,
            "anthropic",
            "thinking",
            json!({"type": "enabled", "budget_tokens": 6000}),
        ),
        (
            "/v1/messages",
            &budget,
            "openai",
            "reasoning_effort",
            json!("medium"),
        ),
        (
            "/v1/messages",
            &budget,
            "gemini",
            "thinkingConfig",
            json!({"thinkingBudget": 6000}),
        ),
        (
            "/v1/chat/completions",
            &chat,
            "openai",
            "reasoning_effort",
            json!("low"),
        ),
        (
            "/v1/chat/completions",
            &chat,
            "anthropic",
            "output_config",
            json!({"effort": "low"}),
        ),
        (
            "/v1/chat/completions",
            &chat,
            "openai-responses",
            "reasoning",
            json!({"effort": "low"}),
        ),
        (
            "/v1/chat/completions",
            &chat,
            "gemini",
            "thinkingConfig",
            json!({"thinkingBudget": 4096}),
        ),
        (
            "/v1/responses",
            &responses,
            "openai-responses",
            "reasoning",
            json!({"effort": "medium", "summary": "auto"}),
        ),
        (
            "/v1/responses",
            &responses,
            "openai",
            "reasoning_effort",
            json!("medium"),
        ),
        (
            "/v1/responses",
            &responses,
            "anthropic",
            "output_config",
            json!({"effort": "medium"}),
        ),
        (
            "/v1/responses",
            &responses,
            "vertex",
            "thinkingConfig",
            json!({"thinkingBudget": 8192, "includeThoughts": true}),
        ),
    ];
    for (path, body, kind, field, expected) in cases {
        let sent = sent_to(&upstreams, &gw, kind, path, body).await;
        let got = match field {
            "thinkingConfig" => &sent["generationConfig"][field],
            _ => &sent[field],
        };
        assert_eq!(*got, expected, "{path} to {kind}: {sent}");
    }
    let bad = json!({"model": "m-openai", "reasoning_effort": "extreme", "messages": [{"role": "user", "content": "hi"}]});
    let refused = gw.post_json("/v1/chat/completions", &bad, &[]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("reasoning_effort") && refused.body.contains("extreme"),
        "{}",
        refused.body
    );
}

#[tokio::test]
async fn a_chat_completions_tool_other_than_a_function_is_refused_naming_the_tool_and_the_formats_that_take_it(
) {
    // Freeform and hosted tools through the Responses and Messages formats: `codex_tools.rs`.
    let (upstreams, gw) = every_kind().await;
    let body = json!({"model": "m-gemini", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "custom", "custom": {"name": "apply_patch"}}]});
    let answer = gw.post_json("/v1/chat/completions", &body, &[]).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.body.contains("tools[0]: a tool of type `custom`")
            && answer.body.contains("POST /v1/responses"),
        "{}",
        answer.body
    );
    for kind in KINDS {
        assert!(
            upstreams.get(kind).server.requests().is_empty(),
            "{kind} was never called"
        );
    }
}
