//! Gateway keys, allowed hosts and browsers' cross-site requests, health checks and graceful shutdown.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{get, post, read, request, send, tool_result, Answer, Harness};
use serde_json::json;
use tokio::sync::Notify;
use tower_chat::test_server::{Part, Reply};

#[tokio::test]
async fn gateway_keys_are_required_when_a_keys_file_is_given() {
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "# clients\nsk-good\n").unwrap();
    let path = keys.path().to_owned();
    let gw = Harness::start(
        |_, _| Reply::openai_text("hi"),
        move |c| c.api_keys_file = Some(path),
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let body = request(false, "hi").to_string();
    for headers in [
        vec![],
        vec![("authorization", "Bearer sk-bad")],
        vec![("authorization", "sk-good")],
        vec![("authorization", "Basic c2stZ29vZA==")],
    ] {
        let answer = post(&url, body.clone(), &headers).await;
        assert_eq!(answer.status, 401, "{headers:?}");
        assert_eq!(answer.json()["error"]["type"], "authentication_error");
    }
    assert!(gw.provider.requests().is_empty());
    let answer = post(&url, body, &[("authorization", "Bearer sk-good")]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Load balancers probe without a key.
    assert_eq!(get(&gw.url("/healthz")).await.status, 200);
    // The upstream never sees the client's key.
    assert!(gw.provider.requests()[0]
        .headers
        .get("authorization")
        .is_none());
}

#[tokio::test]
async fn an_unreadable_or_empty_keys_file_fails_at_startup() {
    let mut config = tower_chat_gateway::Config::new("http://127.0.0.1:9/v1");
    config.api_keys_file = Some("/nonexistent/keys.txt".into());
    let err = tower_chat_gateway::Gateway::new(&config).await.unwrap_err();
    assert!(err.to_string().contains("--api-keys-file"), "{err}");
    let empty = tempfile::NamedTempFile::new().unwrap();
    config.api_keys_file = Some(empty.path().to_owned());
    assert!(tower_chat_gateway::Gateway::new(&config).await.is_err());
}

#[tokio::test]
async fn shutdown_lets_in_flight_streams_finish_and_stops_accepting() {
    // Signalled when the request reaches the upstream: from then on it is in flight.
    let received = Arc::new(Notify::new());
    let upstream_has_it = received.clone();
    let mut gw = Harness::start(
        move |_, _| {
            upstream_has_it.notify_one();
            let mut reply = Reply::openai_text("slow but complete answer");
            // Pause between every chunk, so the stream is in flight when shutdown begins.
            let parts = std::mem::take(&mut reply.parts);
            for part in parts {
                reply = reply
                    .then(part)
                    .then(Part::Pause(Duration::from_millis(60)));
            }
            reply
        },
        |_| {},
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let body = request(true, "hi").to_string();
    let in_flight = tokio::spawn(async move { post(&url, body, &[]).await });
    tokio::time::timeout(Duration::from_secs(10), received.notified())
        .await
        .expect("the request reaches the upstream");
    gw.shutdown();
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.streamed_text(), "slow but complete answer");
    assert_eq!(answer.events().last().unwrap(), "[DONE]");
    let server = gw.server.take().unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stops once drained")
        .unwrap()
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(gw.addr).await.is_err(),
        "no longer accepting"
    );
}

#[tokio::test]
async fn the_drain_is_bounded_by_the_shutdown_timeout() {
    let received = Arc::new(Notify::new());
    let upstream_has_it = received.clone();
    let mut gw = Harness::start(
        move |_, _| {
            upstream_has_it.notify_one();
            Reply::sse_chunks([
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n",
            ])
            .then(Part::Hang)
        },
        |c| c.shutdown_timeout = Duration::from_millis(300),
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    let body = request(true, "hi").to_string();
    let in_flight = tokio::spawn(async move { post(&url, body, &[]).await });
    tokio::time::timeout(Duration::from_secs(10), received.notified())
        .await
        .expect("the request reaches the upstream");
    // While the stream hangs the clock is paused: it moves only when every task waits, straight to the next
    // timer, so the drain is timed exactly (the outer timeout is on the same clock: a drain that never ends
    // fails the test).
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    gw.shutdown();
    let answer = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .expect("the hanging stream is ended by the drain")
        .unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(answer.body.contains("shutting_down"), "{}", answer.body);
    // The rest of the stop waits on other threads (the store's writer): on a paused clock that wait would count
    // as idle time.
    tokio::time::resume();
    let server = gw.server.take().unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("bounded drain")
        .unwrap()
        .unwrap();
}

/// The model reads `secret.txt` with the gateway's `read_file`, then answers with what it read.
fn reads_the_secret(req: &tower_chat::test_server::RecordedRequest, _index: usize) -> Reply {
    let messages = req.body["messages"].as_array().unwrap();
    match tool_result(messages, "call_read") {
        None => {
            Reply::openai_tool_calls(&[("call_read", "read_file", r#"{"path": "secret.txt"}"#)])
        }
        Some(content) => Reply::openai_text(&format!("The file says: {content}")),
    }
}

/// A keyless gateway whose files root holds `secret.txt`; `tweak` adjusts the config.
async fn keyless(tweak: impl FnOnce(&mut tower_chat_gateway::Config)) -> Harness {
    let gw = Harness::start(reads_the_secret, tweak).await;
    std::fs::write(gw.root().join("secret.txt"), "hunter2").unwrap();
    gw
}

/// `POST path` with these headers (the body is a chat request, whatever the content type says).
async fn post_as(gw: &Harness, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut body = request(false, "what does the secret say?");
    if path == "/v1/messages" {
        body = json!({"model": "m", "max_tokens": 100, "messages": body["messages"]});
    }
    send("POST", &gw.url(path), headers, &body.to_string()).await
}

/// The finding: a page at `evil.example` rebound to the gateway's address posts a `text/plain` body (a "simple"
/// request, sent without a preflight) and reads the answer, `read_file`'s contents included.
#[tokio::test]
async fn a_keyless_gateway_refuses_a_rebound_host_a_foreign_origin_and_a_body_not_declared_json() {
    let gw = keyless(|_| {}).await;
    let port = gw.addr.port();
    let (evil_host, evil_origin) = (
        format!("evil.example:{port}"),
        format!("http://evil.example:{port}"),
    );
    let rebound = post_as(
        &gw,
        "/v1/chat/completions",
        &[
            ("host", &evil_host),
            ("origin", &evil_origin),
            ("content-type", "text/plain"),
        ],
    )
    .await;
    assert_eq!(rebound.status, 403, "{}", rebound.body);
    assert_eq!(rebound.json()["error"]["code"], "host_not_allowed");
    assert!(!rebound.body.contains("hunter2"));

    // Each defence on its own, in each route's error shape.
    let own_host = format!("127.0.0.1:{port}");
    let json = ("content-type", "application/json");
    for (path, headers, status, code) in [
        (
            "/v1/chat/completions",
            vec![("host", evil_host.as_str()), json],
            403,
            "host_not_allowed",
        ),
        (
            "/v1/responses",
            vec![("host", own_host.as_str()), ("content-type", "text/plain")],
            415,
            "unsupported_media_type",
        ),
        (
            "/v1/chat/completions",
            vec![("host", own_host.as_str())],
            415,
            "unsupported_media_type",
        ),
        (
            "/v1/chat/completions",
            vec![
                ("host", own_host.as_str()),
                json,
                ("origin", evil_origin.as_str()),
            ],
            403,
            "cross_site_request",
        ),
        (
            "/v1/responses",
            vec![("host", own_host.as_str()), json, ("origin", "null")],
            403,
            "cross_site_request",
        ),
        (
            "/v1/chat/completions",
            vec![
                ("host", own_host.as_str()),
                json,
                ("sec-fetch-site", "cross-site"),
            ],
            403,
            "cross_site_request",
        ),
    ] {
        let answer = post_as(&gw, path, &headers).await;
        assert_eq!(answer.status, status, "{path} {headers:?}: {}", answer.body);
        assert_eq!(answer.json()["error"]["code"], code, "{path} {headers:?}");
    }
    let anthropic = post_as(
        &gw,
        "/v1/messages",
        &[("host", &own_host), ("content-type", "text/plain")],
    )
    .await;
    assert_eq!(anthropic.status, 415, "{}", anthropic.body);
    let body = anthropic.json();
    assert_eq!(
        (&body["type"], &body["error"]["type"]),
        (&json!("error"), &json!("invalid_request_error"))
    );
    assert_eq!(body["error"]["code"], "unsupported_media_type");
    let anthropic = post_as(&gw, "/v1/messages", &[("host", &evil_host), json]).await;
    assert_eq!(anthropic.status, 403, "{}", anthropic.body);
    assert_eq!(anthropic.json()["error"]["type"], "permission_error");
    let cors = post_as(
        &gw,
        "/v1/chat/completions",
        &[("host", &own_host), json, ("origin", &evil_origin)],
    )
    .await;
    assert!(
        cors.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no CORS support"),
        "{}",
        cors.body
    );
    // Reads are guarded too: a rebound page learns nothing of the gateway.
    let usage = send("GET", &gw.url("/v1/usage"), &[("host", &evil_host)], "").await;
    assert_eq!(usage.status, 403, "{}", usage.body);
    assert!(
        gw.provider.requests().is_empty(),
        "nothing reached the model"
    );

    // A client on the machine — at any loopback name of the gateway's port, its own page included — is served.
    for host in [own_host.clone(), format!("localhost:{port}")] {
        let origin = format!("http://{host}");
        let answer = post_as(
            &gw,
            "/v1/chat/completions",
            &[("host", &host), json, ("origin", &origin)],
        )
        .await;
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
        assert!(answer.body.contains("hunter2"), "{}", answer.body);
    }
    assert_eq!(get(&gw.url("/healthz")).await.status, 200);
}

#[tokio::test]
async fn allowed_hosts_name_the_hosts_a_gateway_answers_and_keys_allow_any() {
    let named = keyless(|c| {
        c.allowed_hosts =
            Some(tower_chat_gateway::api_guard::AllowedHosts::parse("gw.example.com").unwrap());
    })
    .await;
    let json = ("content-type", "application/json");
    let ok = post_as(
        &named,
        "/v1/chat/completions",
        &[("host", "gw.example.com"), json],
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let own = format!("127.0.0.1:{}", named.addr.port());
    let refused = post_as(&named, "/v1/chat/completions", &[("host", &own), json]).await;
    assert_eq!(
        refused.status, 403,
        "the list replaces the default: {}",
        refused.body
    );
    assert!(refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--allowed-hosts"));

    // With client keys any host is allowed (a rebound page has no key); cross-site requests and bodies not
    // declared JSON are still refused, before the key is looked at.
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "sk-good\n").unwrap();
    let path = keys.path().to_owned();
    let keyed = keyless(move |c| c.api_keys_file = Some(path)).await;
    let auth = ("authorization", "Bearer sk-good");
    let answer = post_as(
        &keyed,
        "/v1/chat/completions",
        &[("host", "gw.example.com"), json, auth],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    for (headers, status) in [
        (vec![json, auth, ("sec-fetch-site", "cross-site")], 403),
        (vec![("content-type", "text/plain"), auth], 415),
        (vec![("content-type", "text/plain")], 415),
    ] {
        let answer = post_as(&keyed, "/v1/chat/completions", &headers).await;
        assert_eq!(answer.status, status, "{headers:?}: {}", answer.body);
    }
}

/// Streams still running when the drain time is over end with their format's error event, code
/// `shutting_down`, before their connections close: the client learns the answer is cut, in the shape it parses.
#[tokio::test]
async fn streams_cut_at_the_drain_deadline_end_with_an_error_event_in_each_format() {
    let mut gw = Harness::start(
        |_, _| {
            Reply::sse_chunks([
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n",
            ])
            .then(Part::Hang)
        },
        |c| c.shutdown_timeout = Duration::from_millis(300),
    )
    .await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let formats = [
        ("/v1/chat/completions", request(true, "hi")),
        (
            "/v1/messages",
            json!({"model": "claude-test", "max_tokens": 64, "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-test", "input": "hi", "stream": true}),
        ),
    ];
    let mut streams = Vec::new();
    for (path, body) in &formats {
        let request = http::Request::post(gw.url(path))
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                body.to_string(),
            )))
            .unwrap();
        // The head comes with the first event: from then on the stream is in flight.
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        streams.push(response);
    }
    gw.shutdown();
    let mut answers = Vec::new();
    for response in streams {
        answers.push(
            tokio::time::timeout(Duration::from_secs(10), read(response))
                .await
                .expect("the stream ends at the drain deadline"),
        );
    }
    let last = answers[0].chunks().pop().unwrap();
    assert_eq!(
        last["error"]["code"], "shutting_down",
        "{}",
        answers[0].body
    );
    assert_ne!(answers[0].events().last().unwrap(), "[DONE]");
    let (name, last) = answers[1].named_events().pop().unwrap();
    assert_eq!(name, "error", "{}", answers[1].body);
    assert_eq!(last["error"]["type"], "overloaded_error");
    assert_eq!(last["error"]["code"], "shutting_down");
    let (name, last) = answers[2].named_events().pop().unwrap();
    assert_eq!(name, "error", "{}", answers[2].body);
    assert_eq!(last["code"], "shutting_down");
    tokio::time::timeout(Duration::from_secs(10), gw.server.take().unwrap())
        .await
        .expect("the server stops once the last words are written")
        .unwrap()
        .unwrap();
}
