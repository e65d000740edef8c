//! Errors and their statuses: bad requests, body limit, upstream failures before and after streaming started.

use crate::common;

use std::time::Duration;

use common::{post, request, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{Part, Reply};

fn assert_error(answer: &common::Answer, status: u16, kind: &str) -> Value {
    assert_eq!(answer.status, status, "{}", answer.body);
    assert_eq!(answer.headers["content-type"], "application/json");
    let body = answer.json();
    let error = &body["error"];
    assert_eq!(error["type"], kind, "{body}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(error["code"].is_string());
    body
}

#[tokio::test]
async fn malformed_json_and_schema_violations_are_400_with_the_reason() {
    let gw = Harness::start(|_, _| Reply::openai_text("x"), |_| {}).await;
    let url = gw.url("/v1/chat/completions");
    let body = assert_error(
        &post(&url, "{\"model\": ", &[]).await,
        400,
        "invalid_request_error",
    );
    assert_eq!(body["error"]["code"], "invalid_json");
    let answer = post(&url, json!({"model": "m"}).to_string(), &[]).await;
    let body = assert_error(&answer, 400, "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages"),
        "{body}"
    );
    let answer = post(
        &url,
        json!({"model": "m", "messages": [{"role": "user", "content": 5}]}).to_string(),
        &[],
    )
    .await;
    let body = assert_error(&answer, 400, "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages[0]"),
        "{body}"
    );
    let answer = post(
        &url,
        json!({"model": "m", "messages": [], "stream": "yes"}).to_string(),
        &[],
    )
    .await;
    assert_error(&answer, 400, "invalid_request_error");
    assert!(
        gw.provider.requests().is_empty(),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let gw = Harness::start(|_, _| Reply::openai_text("x"), |c| c.body_limit = 1024).await;
    let mut body = request(false, &"x".repeat(2000));
    let answer = post(&gw.url("/v1/chat/completions"), body.to_string(), &[]).await;
    let error = assert_error(&answer, 413, "invalid_request_error");
    assert_eq!(error["error"]["code"], "request_too_large");
    body["messages"][0]["content"] = "short".into();
    assert_eq!(gw.chat(&body).await.status, 200);
}

#[tokio::test]
async fn upstream_429_is_429_with_its_retry_after_in_both_shapes() {
    for stream in [false, true] {
        let gw = Harness::start(
            |_, _| {
                Reply::json(
                    429,
                    json!({"error": {"message": "slow down", "type": "rate_limit"}}),
                )
                .header("retry-after", "7")
            },
            |_| {},
        )
        .await;
        let answer = gw.chat(&request(stream, "hi")).await;
        assert_error(&answer, 429, "rate_limit_error");
        assert_eq!(answer.headers["retry-after"], "7");
    }
}

#[tokio::test]
async fn upstream_failure_is_502() {
    let gw = Harness::start(
        |_, _| Reply::json(500, json!({"error": {"message": "boom"}})),
        |_| {},
    )
    .await;
    for stream in [false, true] {
        let answer = gw.chat(&request(stream, "hi")).await;
        assert_error(&answer, 502, "upstream_error");
    }
}

#[tokio::test]
async fn an_unreachable_upstream_is_502() {
    // A port that was just free: nothing listens there.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let gw = Harness::start(
        |_, _| Reply::openai_text("x"),
        |c| c.upstream = format!("http://127.0.0.1:{port}/v1"),
    )
    .await;
    let answer = gw.chat(&request(false, "hi")).await;
    let body = assert_error(&answer, 502, "upstream_error");
    assert_eq!(body["error"]["code"], "upstream_unreachable");
}

#[tokio::test]
async fn an_upstream_timeout_is_504() {
    let gw = Harness::start(
        |_, _| Reply::openai_text("late").delayed(Duration::from_secs(3)),
        |c| c.upstream_timeout = Duration::from_millis(300),
    )
    .await;
    for stream in [false, true] {
        let answer = gw.chat(&request(stream, "hi")).await;
        assert_error(&answer, 504, "timeout_error");
    }
}

#[tokio::test]
async fn a_failure_after_streaming_started_ends_with_an_error_chunk() {
    let gw = Harness::start(
        |_, _| {
            Reply::sse_chunks([
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            ])
            .then(Part::Pause(Duration::from_millis(50)))
            .then(Part::Abort)
        },
        |_| {},
    )
    .await;
    let answer = gw.chat(&request(true, "hi")).await;
    assert_eq!(answer.status, 200);
    let events = answer.events();
    assert_ne!(
        events.last().unwrap(),
        "[DONE]",
        "no success marker after a failure"
    );
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "upstream_error", "{last}");
    assert_eq!(answer.streamed_text(), "Hel");
    // Non-streaming: the same failure is a 502.
    let answer = gw.chat(&request(false, "hi")).await;
    assert_error(&answer, 502, "upstream_error");
}

#[tokio::test]
async fn unknown_routes_are_404_json_and_healthz_answers() {
    let gw = Harness::start(|_, _| Reply::openai_text("x"), |_| {}).await;
    let answer = common::get(&gw.url("/v1/models/nope")).await;
    assert_error(&answer, 404, "invalid_request_error");
    let answer = common::get(&gw.url("/v1/chat/completions")).await;
    let body = assert_error(&answer, 405, "invalid_request_error");
    assert_eq!(body["error"]["code"], "method_not_allowed");
    let health = common::get(&gw.url("/healthz")).await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
}

/// A provider that echoes the key back in its 401, masked (`sk-canar****3456`, `sk-can...3456`) and base64-encoded
/// (the key alone, and an encoded `Bearer <key>`): neither the client's error nor the call's record holds any
/// of those forms.
#[tokio::test]
async fn an_upstream_error_echoing_the_key_in_any_form_reaches_neither_client_nor_record() {
    const KEY: &str = "sk-canary-7f3e9a1c0b2d4e6f3456";
    // Base64 of the key, and of `Bearer <key>`: the test writes them out, so the gateway's encoder is not
    // checked against itself.
    const KEY_BASE64: &str = "c2stY2FuYXJ5LTdmM2U5YTFjMGIyZDRlNmYzNDU2";
    const BEARER_BASE64_URL_SAFE: &str = "QmVhcmVyIHNrLWNhbmFyeS03ZjNlOWExYzBiMmQ0ZTZmMzQ1Ng";
    std::env::set_var("TOWER_CHAT_GATEWAY_TEST_CANARY_KEY", KEY);
    let forms = [
        "sk-canar****3456",
        "sk-can...3456",
        KEY_BASE64,
        BEARER_BASE64_URL_SAFE,
    ];
    let mut gw = Harness::start(
        move |_, _| {
            Reply::json(
                401,
                json!({"error": {"message": format!(
                    "Incorrect API key provided: {}. You sent {} (as {} and {}).",
                    forms[0], forms[1], forms[2], forms[3]
                ), "type": "invalid_request_error", "code": "invalid_api_key"}}),
            )
        },
        |config| {
            config.no_upstream_key = false;
            config.upstream_key_env = Some("TOWER_CHAT_GATEWAY_TEST_CANARY_KEY".into());
        },
    )
    .await;
    let leaks = |text: &str| -> Vec<&str> {
        forms
            .iter()
            .copied()
            .chain([KEY])
            .filter(|form| text.contains(form))
            .collect()
    };
    for stream in [false, true] {
        let answer = post(
            &gw.url("/v1/chat/completions"),
            request(stream, "hi").to_string(),
            &[("x-conversation-id", &format!("conv-canary-{stream}"))],
        )
        .await;
        assert!(
            answer.status.is_client_error() || answer.status.is_server_error(),
            "{}",
            answer.body
        );
        assert!(answer.body.contains("[redacted]"), "{}", answer.body);
        assert_eq!(leaks(&answer.body), Vec::<&str>::new(), "{}", answer.body);
    }
    assert_eq!(
        gw.provider.requests()[0].headers["authorization"],
        format!("Bearer {KEY}")
    );
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    let store = gw.records().await;
    for stream in [false, true] {
        let calls = tower_chat_persistence::Store::conversation_calls(
            &store,
            &tower_chat::ConversationId::new(format!("conv-canary-{stream}")),
        )
        .await
        .unwrap();
        assert_eq!(calls.len(), 1);
        let error = calls[0].outcome.error().expect("a failed call");
        assert!(error.message.contains("[redacted]"), "{error:?}");
        assert_eq!(leaks(&error.message), Vec::<&str>::new(), "{error:?}");
        let stored = serde_json::to_string(&calls[0]).unwrap();
        assert_eq!(leaks(&stored), Vec::<&str>::new(), "{stored}");
    }
}

/// A Bedrock target signing with temporary credentials from the standard variables, in front of an upstream
/// that echoes every request header in its 403: the session token, the access key id and the signature reach
/// neither the client's answer nor the call's record.
#[tokio::test]
async fn a_bedrock_error_echoing_the_signed_headers_reaches_neither_client_nor_record() {
    const KEY_ID: &str = "ASIAERRORSECHOTEST01";
    const TOKEN: &str = "IQoJb3JpZ2luX2VjEH8aCXVzLWVhc3QtMSJHMEUCIQD+echoed/session+token==";
    std::env::set_var("AWS_ACCESS_KEY_ID", KEY_ID);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "errors/echo/secret/key");
    std::env::set_var("AWS_SESSION_TOKEN", TOKEN);
    let upstream = tower_chat::test_server::ScriptedProvider::start(|req, _| {
        let mut echoed: Vec<String> = req
            .headers
            .iter()
            .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap_or("?")))
            .collect();
        echoed.sort();
        Reply::json(
            403,
            json!({"__type": "UnrecognizedClientException",
                "message": format!("The security token included in the request is invalid. You sent {}",
                    echoed.join("; "))}),
        )
        .header("x-amzn-errortype", "UnrecognizedClientException:http://internal.amazon.com/coral/")
    })
    .await;
    let toml = format!(
        "[upstreams.retry]\nmax_attempts = 1\n\n[[upstreams.models]]\nname = \"claude\"\n\n\
         [[upstreams.models.targets]]\nprovider = \"bedrock\"\nmodel = \"anthropic.claude-3-haiku-20240307-v1:0\"\n\
         base_url = \"{}\"\nregion = \"eu-central-1\"\naws_env = true\n",
        upstream.base_url()
    );
    let file = tower_chat_gateway::config_file::ConfigFile::parse(&toml, "gateway.toml").unwrap();
    let mut gw = Harness::start(|_, _| Reply::openai_text("unused"), |c| c.file = file).await;
    let mut answers = Vec::new();
    for stream in [false, true] {
        let mut body = request(stream, "hi");
        body["model"] = json!("claude");
        let answer = post(
            &gw.url("/v1/chat/completions"),
            body.to_string(),
            &[("x-conversation-id", &format!("conv-bedrock-echo-{stream}"))],
        )
        .await;
        assert!(
            answer.status.is_client_error() || answer.status.is_server_error(),
            "{}",
            answer.body
        );
        assert!(answer.body.contains("[redacted]"), "{}", answer.body);
        answers.push(answer.body);
    }
    let sent = &upstream.requests()[0].headers;
    assert_eq!(sent["x-amz-security-token"], TOKEN, "the token was sent");
    let authorization = sent["authorization"].to_str().unwrap().to_owned();
    let signature = authorization
        .rsplit("Signature=")
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(signature.len(), 64, "{authorization}");
    let leaks = |text: &str| -> Vec<String> {
        [TOKEN, KEY_ID, signature.as_str(), authorization.as_str()]
            .iter()
            .filter(|secret| text.contains(*secret))
            .map(|secret| secret.to_string())
            .collect()
    };
    for answer in &answers {
        assert_eq!(leaks(answer), Vec::<String>::new(), "{answer}");
    }
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    let store = gw.records().await;
    for stream in [false, true] {
        let calls = tower_chat_persistence::Store::conversation_calls(
            &store,
            &tower_chat::ConversationId::new(format!("conv-bedrock-echo-{stream}")),
        )
        .await
        .unwrap();
        assert_eq!(calls.len(), 1);
        let stored = serde_json::to_string(&calls[0]).unwrap();
        assert!(stored.contains("[redacted]"), "{stored}");
        assert_eq!(leaks(&stored), Vec::<String>::new(), "{stored}");
    }
}
