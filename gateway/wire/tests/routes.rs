//! The routes of every format over a scripted chat service, served by axum over loopback HTTP beside an app's
//! own route: each format answers whole and streamed, refuses a malformed body in its own 400 shape, maps the
//! service's errors to the gateway's statuses, hands the client its own tool calls only, and passes the app's
//! caller and the conversation header to the service; a router that keeps turns hands the service the turn's
//! context and names a pause's approvals, and a cut ends what still waits.

use std::time::Duration;

use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tower_chat::{
    ApprovalRequest, CallerIdentity, ChatError, ChatEvent, ConversationId, ErrorKind, FinishReason,
    ToolCall,
};
use tower_chat_testkit::{answer, calls, model, within, Chat, Delivery, Items, Model};
use tower_chat_wire::extensions::{ResponseHeaders, TurnContext};
use tower_chat_wire::{ApiError, ApprovalNotices, InboundRoute, RequestLimits, WireRouter};

/// A chat service answering every request with `reply`'s items, and what it was sent.
fn service(reply: impl Fn() -> Items + Send + Sync + 'static) -> (Chat, Model) {
    model(Delivery::OneByOne, move |_| reply())
}

fn answering(text: &'static str) -> (Chat, Model) {
    service(move || answer(text).into_iter().map(Ok).collect())
}

/// The app: its own `GET /health` and state, the wire routes beside it, served on a loopback port.
async fn serve(routes: axum::Router<&'static str>) -> String {
    let app = axum::Router::new()
        .route(
            "/health",
            get(|state: axum::extract::State<&'static str>| async move { *state }),
        )
        .merge(routes)
        .with_state("healthy");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `data:` payloads of an SSE body, in order.
    fn data(&self) -> Vec<String> {
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(str::to_owned)
            .collect()
    }
}

async fn send(url: &str, body: impl Into<Bytes>, headers: &[(&str, &str)]) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = http::Request::post(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(body.into())).unwrap();
    within("an answer", async {
        let response = client.request(request).await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    })
    .await
}

async fn post(url: &str, body: &Value) -> Answer {
    send(url, body.to_string(), &[]).await
}

/// Each format's request for `text`, streamed or not, with the route it goes to.
fn requests(stream: bool) -> [(&'static str, Value); 3] {
    [
        (
            "/v1/chat/completions",
            json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "m", "stream": stream, "max_tokens": 16,
                   "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "m", "stream": stream, "input": "hi"}),
        ),
    ]
}

#[tokio::test]
async fn every_format_answers_whole_and_streamed_beside_the_apps_own_route() {
    let (chat, sent) = answering("hello there");
    let base = serve(WireRouter::new(chat).all()).await;
    let health = send(&format!("{base}/health"), "", &[]).await;
    assert_eq!((health.status, health.body.as_str()), (405, ""), "GET only");
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let health = client
        .get(format!("{base}/health").parse().unwrap())
        .await
        .unwrap();
    let body = health.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"healthy");

    let [chat, messages, responses] = requests(false);
    let whole = post(&format!("{base}{}", chat.0), &chat.1).await;
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert_eq!(
        whole.json()["choices"][0]["message"]["content"],
        "hello there"
    );
    assert_eq!(whole.json()["usage"]["prompt_tokens"], 20);
    let whole = post(&format!("{base}{}", messages.0), &messages.1).await;
    assert_eq!(
        whole.json()["content"][0]["text"],
        "hello there",
        "{}",
        whole.body
    );
    assert_eq!(whole.json()["stop_reason"], "end_turn");
    let whole = post(&format!("{base}{}", responses.0), &responses.1).await;
    assert_eq!(
        whole.json()["output"][0]["content"][0]["text"],
        "hello there",
        "{}",
        whole.body
    );
    assert_eq!(whole.json()["status"], "completed");
    // Nothing is kept for a later `previous_response_id`, and the answer says so.
    assert_eq!(whole.json()["store"], false, "{}", whole.body);

    for (path, body) in requests(true) {
        let streamed = post(&format!("{base}{path}"), &body).await;
        assert_eq!(streamed.status, 200, "{path}: {}", streamed.body);
        assert_eq!(
            streamed.headers["content-type"], "text/event-stream",
            "{path}"
        );
        let text: String = streamed
            .data()
            .iter()
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .filter_map(|event| {
                let delta = match path {
                    "/v1/chat/completions" => &event["choices"][0]["delta"]["content"],
                    "/v1/messages" => &event["delta"]["text"],
                    _ if event["type"] == "response.output_text.delta" => &event["delta"],
                    _ => return None,
                };
                delta.as_str().map(str::to_owned)
            })
            .collect();
        assert_eq!(text, "hello there", "{path}: {}", streamed.body);
        let last = streamed.data().last().cloned().unwrap();
        match path {
            "/v1/chat/completions" => assert_eq!(last, "[DONE]"),
            "/v1/messages" => assert!(last.contains("message_stop"), "{last}"),
            _ => assert!(last.contains("response.completed"), "{last}"),
        }
    }
    // The service saw each route's request, streamed when the client streamed.
    let requests = sent.requests();
    let routes: Vec<_> = requests
        .iter()
        .map(|r| {
            (
                r.extensions.get::<InboundRoute>().copied().unwrap(),
                r.options.stream,
            )
        })
        .collect();
    assert_eq!(
        routes,
        [
            (InboundRoute::ChatCompletions, false),
            (InboundRoute::Messages, false),
            (InboundRoute::Responses, false),
            (InboundRoute::ChatCompletions, true),
            (InboundRoute::Messages, true),
            (InboundRoute::Responses, true),
        ]
    );
}

#[tokio::test]
async fn a_malformed_body_is_each_formats_own_400() {
    let (chat, sent) = answering("unused");
    let base = serve(WireRouter::new(chat).all()).await;
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let refused = send(&format!("{base}{path}"), "{\"model\": ", &[]).await;
        assert_eq!(refused.status, 400, "{path}");
        let error = &refused.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{path}");
        assert_eq!(error["code"], "invalid_json", "{path}");
    }
    let refused = send(&format!("{base}/v1/messages"), "{\"model\": ", &[]).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["type"], "error");
    assert_eq!(refused.json()["error"]["type"], "invalid_request_error");
    assert_eq!(refused.json()["error"]["code"], "invalid_json");
    // A schema violation says where.
    let misplaced = post(
        &format!("{base}/v1/chat/completions"),
        &json!({"model": "m", "messages": [{"role": "user", "content": 7}]}),
    )
    .await;
    assert_eq!(misplaced.json()["error"]["code"], "invalid_request_schema");
    assert!(
        misplaced.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages[0]"),
        "{}",
        misplaced.body
    );
    assert_eq!(sent.calls(), 0, "nothing malformed reaches the service");
}

#[tokio::test]
async fn the_services_errors_keep_the_gateways_statuses_in_each_shape() {
    let rate_limited = || {
        vec![Err(ChatError::new(
            ErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(3)),
            },
            "slow down",
        ))]
    };
    let (chat, _) = service(rate_limited);
    let base = serve(WireRouter::new(chat).all()).await;
    for stream in [false, true] {
        for (path, body) in requests(stream) {
            let refused = post(&format!("{base}{path}"), &body).await;
            assert_eq!(refused.status, 429, "{path} {stream}: {}", refused.body);
            assert_eq!(refused.headers["retry-after"], "3", "{path}");
            let kind = if path == "/v1/messages" {
                assert_eq!(refused.json()["type"], "error");
                refused.json()["error"]["type"].clone()
            } else {
                refused.json()["error"]["type"].clone()
            };
            assert_eq!(kind, "rate_limit_error", "{path}");
        }
    }
    let (chat, _) = service(|| vec![Err(ChatError::new(ErrorKind::Upstream, "upstream 500"))]);
    let base = serve(WireRouter::new(chat).all()).await;
    let failed = post(&format!("{base}/v1/messages"), &requests(false)[1].1).await;
    assert_eq!(failed.status, 502);
    assert_eq!(failed.json()["error"]["type"], "api_error");
    assert_eq!(failed.json()["error"]["code"], "upstream_failed");
    let (chat, _) = service(|| vec![Err(ChatError::new(ErrorKind::InvalidRequest, "bad"))]);
    let base = serve(WireRouter::new(chat).all()).await;
    let refused = post(
        &format!("{base}/v1/chat/completions"),
        &requests(false)[0].1,
    )
    .await;
    assert_eq!(
        (refused.status, refused.json()["error"]["code"].clone()),
        (400, json!("invalid_request"))
    );
}

#[tokio::test]
async fn a_stream_that_fails_after_it_started_ends_with_the_formats_error_event() {
    let (chat, _) = service(|| {
        vec![
            Ok(ChatEvent::text("partial")),
            Err(ChatError::new(ErrorKind::Connection, "connection reset")),
        ]
    });
    let base = serve(WireRouter::new(chat).all()).await;
    let [chat, messages, _] = requests(true);
    let streamed = post(&format!("{base}{}", chat.0), &chat.1).await;
    assert_eq!(streamed.status, 200);
    let last: Value = serde_json::from_str(streamed.data().last().unwrap()).unwrap();
    assert_eq!(
        last["error"]["code"], "upstream_unreachable",
        "{}",
        streamed.body
    );
    let streamed = post(&format!("{base}{}", messages.0), &messages.1).await;
    assert!(streamed.body.contains("event: error"), "{}", streamed.body);
}

#[tokio::test]
async fn the_client_sees_its_own_tool_calls_and_not_the_services() {
    let (chat, _) = service(|| {
        calls(&[
            ("call_1", "lookup", json!({"q": "x"})),
            ("call_2", "weather", json!({"city": "Oslo"})),
        ])
        .into_iter()
        .map(Ok)
        .collect()
    });
    let base = serve(WireRouter::new(chat).chat_completions()).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "weather?"}],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]});
    let whole = post(&format!("{base}/v1/chat/completions"), &body).await;
    let choice = &whole.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{}", whole.body);
    let shown = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(shown.len(), 1, "{}", whole.body);
    assert_eq!(shown[0]["id"], "call_2");
    assert_eq!(shown[0]["function"]["name"], "weather");
    assert_eq!(
        serde_json::from_str::<Value>(shown[0]["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Oslo"})
    );
}

#[tokio::test]
async fn the_apps_caller_and_the_conversation_header_reach_the_service() {
    let (chat, sent) = answering("ok");
    // The app's own authentication puts the caller in the request's extensions.
    let routes = WireRouter::new(chat)
        .chat_completions()
        .layer(axum::middleware::from_fn(
            |mut request: axum::extract::Request, next: axum::middleware::Next| async move {
                request
                    .extensions_mut()
                    .insert(CallerIdentity::new("alice"));
                next.run(request).await
            },
        ));
    let base = serve(routes).await;
    let url = format!("{base}/v1/chat/completions");
    let answer = send(
        &url,
        requests(false)[0].1.to_string(),
        &[("x-conversation-id", "trip-1")],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let request = sent.last_request();
    assert_eq!(
        request.extensions.get::<CallerIdentity>().unwrap().as_str(),
        "alice"
    );
    assert_eq!(
        request.extensions.get::<ConversationId>().unwrap().as_str(),
        "alice/trip-1"
    );
    let bad = send(
        &url,
        requests(false)[0].1.to_string(),
        &[("x-conversation-id", "a b")],
    )
    .await;
    assert_eq!(
        (bad.status, bad.json()["error"]["code"].clone()),
        (400, json!("limit_exceeded"))
    );
}

#[tokio::test]
async fn what_needs_a_store_is_refused_with_a_typed_error() {
    let (chat, sent) = answering("unused");
    let base = serve(WireRouter::new(chat).all()).await;
    let resume = post(
        &format!("{base}/v1/chat/completions"),
        &json!({"model": "m", "messages": [{"role": "user", "content": "go"}],
                "tower_chat": {"approvals": [{"id": "apr_1", "approved": true}]}}),
    )
    .await;
    assert_eq!(
        (resume.status, resume.json()["error"]["code"].clone()),
        (400, json!("approvals_unavailable"))
    );
    let previous = post(
        &format!("{base}/v1/responses"),
        &json!({"model": "m", "input": "more", "previous_response_id": "resp_1"}),
    )
    .await;
    assert_eq!(
        (previous.status, previous.json()["error"]["code"].clone()),
        (400, json!("previous_response_unavailable"))
    );
    assert_eq!(sent.calls(), 0);
}

#[tokio::test]
async fn limits_and_the_body_limit_are_the_embedders_to_set() {
    let (chat, sent) = answering("unused");
    let routes = WireRouter::new(chat)
        .limits(RequestLimits {
            max_messages: 1,
            ..RequestLimits::DEFAULT
        })
        .body_limit(2048)
        .all();
    let base = serve(routes).await;
    let two = json!({"model": "m", "messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]});
    let refused = post(&format!("{base}/v1/chat/completions"), &two).await;
    assert_eq!(
        (refused.status, refused.json()["error"]["code"].clone()),
        (400, json!("limit_exceeded"))
    );
    // The error names the setting the embedder controls, not a gateway flag.
    let message = refused.json()["error"]["message"].clone();
    assert!(
        message.as_str().unwrap().ends_with("(max_messages)"),
        "{message}"
    );
    let long = json!({"model": "m", "max_tokens": 8,
        "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let refused = post(&format!("{base}/v1/messages"), &long).await;
    assert_eq!(refused.status, 413, "{}", refused.body);
    assert_eq!(refused.json()["error"]["type"], "request_too_large");
    let message = refused.json()["error"]["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .ends_with("the limit is 2048 (body_limit)"),
        "{message}"
    );
    assert_eq!(sent.calls(), 0);
    // The finish reason of a turn the service paused reaches the client, without a notice to resume it by.
    let (chat, _) = service(|| vec![Ok(ChatEvent::finish(FinishReason::AwaitingApproval))]);
    let base = serve(WireRouter::new(chat).chat_completions()).await;
    let paused = post(
        &format!("{base}/v1/chat/completions"),
        &requests(false)[0].1,
    )
    .await;
    assert_eq!(
        paused.json()["tower_chat"]["finish_reason"],
        "awaiting_approval",
        "{}",
        paused.body
    );
}

/// A paused turn of a service that issued `apr_service` for a `write_file` call, and what it was sent; the
/// service adds `x-added: yes` to the answer's head.
fn pausing() -> (Chat, Model) {
    model(Delivery::OneByOne, |request| {
        if let Some(added) = request.extensions.get::<ResponseHeaders>() {
            added.insert(
                http::HeaderName::from_static("x-added"),
                http::HeaderValue::from_static("yes"),
            );
        }
        let request = ApprovalRequest {
            id: "apr_service".into(),
            call: ToolCall::new("call_1", "write_file", json!({"path": "a"})),
            reason: None,
        };
        vec![
            Ok(ChatEvent::ApprovalRequest {
                request: Box::new(request),
            }),
            Ok(ChatEvent::finish(FinishReason::AwaitingApproval)),
        ]
    })
}

#[tokio::test]
async fn a_router_that_keeps_turns_hands_the_service_the_turn_and_names_its_pauses() {
    let (chat, sent) = pausing();
    let base = serve(
        WireRouter::new(chat)
            .keeps_turns(ApprovalNotices::ClientDecides)
            .all(),
    )
    .await;
    let resume = json!({"model": "m", "messages": [{"role": "user", "content": "go"}],
        "tower_chat": {"approvals": [{"id": "apr_0", "approved": true}]}});
    for stream in [false, true] {
        let mut body = resume.clone();
        body["stream"] = json!(stream);
        let paused = send(
            &format!("{base}/v1/chat/completions"),
            body.to_string(),
            &[("x-client", "v")],
        )
        .await;
        assert_eq!(paused.status, 200, "{}", paused.body);
        assert_eq!(paused.headers["x-added"], "yes");
        // The notice names the id the service issued, and the text tells the client to answer it.
        assert!(paused.body.contains("apr_service"), "{}", paused.body);
        let context = sent.last_request().extensions.get::<TurnContext>().cloned();
        let context = context.expect("the turn's context goes along");
        assert_eq!(context.approvals[0].id, "apr_0");
        assert_eq!(context.headers["x-client"], "v");
    }
    let whole = post(&format!("{base}/v1/chat/completions"), &resume).await;
    assert_eq!(
        whole.json()["tower_chat"]["approval_requests"][0]["id"],
        "apr_service",
        "{}",
        whole.body
    );
    // A stored response is the service's to find; the answer says it is stored, under the id it names.
    let more = post(
        &format!("{base}/v1/responses"),
        &json!({"model": "m", "input": "more", "previous_response_id": "resp_1"}),
    )
    .await;
    assert_eq!(more.json()["store"], true, "{}", more.body);
    let context = sent.last_request().extensions.get::<TurnContext>().cloned();
    let context = context.expect("the turn's context goes along");
    assert_eq!(context.previous_response_id.as_deref(), Some("resp_1"));
    assert_eq!(
        context.record_id.as_deref(),
        more.json()["id"].as_str(),
        "{}",
        more.body
    );
}

#[tokio::test]
async fn an_error_the_service_words_itself_is_answered_as_it_is() {
    let (chat, _) = service(|| {
        let own = ApiError::new(
            http::StatusCode::CONFLICT,
            "invalid_request_error",
            "turn_taken",
            "another request resumed this turn".into(),
        );
        vec![Err(own.into_chat())]
    });
    let base = serve(WireRouter::new(chat).all()).await;
    for (route, body) in requests(false) {
        let refused = post(&format!("{base}{route}"), &body).await;
        assert_eq!(refused.status, 409, "{route}: {}", refused.body);
        assert!(
            refused.body.contains("another request resumed this turn"),
            "{}",
            refused.body
        );
    }
}

#[tokio::test]
async fn a_cut_ends_what_still_waits_with_shutting_down() {
    // One text event, then nothing: a stream still waiting when the server's drain time is over.
    let chat = tower::service_fn(|_request: tower_chat::ChatRequest| async {
        let first = futures_util::stream::iter([Ok(ChatEvent::text("partial"))]);
        Ok::<tower_chat::ChatStream, ChatError>(Box::pin(futures_util::StreamExt::chain(
            first,
            futures_util::stream::pending(),
        )))
    });
    let cut = tower_chat::CancellationToken::new();
    let base = serve(WireRouter::new(chat).cut(cut.clone()).all()).await;
    cut.cancel();
    let (route, body) = &requests(false)[0];
    let whole = post(&format!("{base}{route}"), body).await;
    assert_eq!(
        (whole.status, whole.json()["error"]["code"].clone()),
        (503, json!("shutting_down"))
    );
    let (route, body) = &requests(true)[0];
    let streamed = post(&format!("{base}{route}"), body).await;
    assert_eq!(streamed.status, 200);
    assert!(streamed.body.contains("partial"), "{}", streamed.body);
    assert!(streamed.body.contains("shutting_down"), "{}", streamed.body);
}
