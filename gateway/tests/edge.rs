//! The edge middleware seen from a client: gzip on the console and the JSON lists, never on an event stream;
//! the request's `x-request-id` in every JSON error body and on the record of every call it made.

mod common;

use bytes::Bytes;
use common::{request, send, Harness};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tower_chat::test_server::Reply;
use tower_chat_persistence::Store;

const OPS_KEY: &str = "ops-key-edge";

async fn gateway() -> (tempfile::TempDir, Harness) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.path().join("clients"), dir.path().join("operators"));
    let gw = Harness::start(
        |_, _| Reply::openai_text("hello there, a streamed answer long enough to compress well"),
        move |c| {
            c.api_keys_file = Some(clients);
            c.operator_keys_file = Some(operators);
        },
    )
    .await;
    (dir, gw)
}

/// Status, headers and the raw bytes of the body (a compressed body is not text).
async fn raw(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (http::StatusCode, http::HeaderMap, Bytes) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut built = http::Request::builder().method(method).uri(url);
    for (name, value) in headers {
        built = built.header(*name, *value);
    }
    let response = client
        .request(built.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

#[tokio::test]
async fn console_pages_are_gzipped_and_event_streams_never_are() {
    let (_dir, gw) = gateway().await;
    let gzip = ("accept-encoding", "gzip");
    let (status, headers, body) = raw("GET", &gw.url("/console/login"), &[gzip], "").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-encoding"], "gzip");
    assert_eq!(body[..2], GZIP_MAGIC);
    let (_, headers, body) = raw("GET", &gw.url("/console/login"), &[], "").await;
    assert!(!headers.contains_key("content-encoding"), "not asked for");
    assert!(String::from_utf8_lossy(&body).contains("<html"), "plain");

    let question = request(true, "hi").to_string();
    let (status, headers, body) = raw(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[
            gzip,
            ("authorization", "Bearer sk-alice"),
            ("content-type", "application/json"),
        ],
        &question,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    assert!(
        !headers.contains_key("content-encoding"),
        "{:?}",
        headers.get("content-encoding")
    );
    let text = String::from_utf8(body.to_vec()).expect("plain text");
    assert!(text.starts_with("data: "), "{text}");
    assert!(text.contains("[DONE]"), "{text}");
}

/// Method, URL, headers, body, and the status the gateway refuses it with.
type ErrorCase<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, String, u16);

#[tokio::test]
async fn every_json_error_names_its_request_id() {
    let (_dir, gw) = gateway().await;
    let auth = ("authorization", "Bearer sk-alice");
    let json = ("content-type", "application/json");
    let chat = request(false, "hi").to_string();
    let cases: Vec<ErrorCase> = vec![
        ("GET", gw.url("/nowhere"), vec![], String::new(), 404),
        (
            "GET",
            gw.url("/v1/chat/completions"),
            vec![],
            String::new(),
            405,
        ),
        (
            "POST",
            gw.url("/v1/chat/completions"),
            vec![json],
            chat.clone(),
            401,
        ),
        (
            "POST",
            gw.url("/v1/messages"),
            vec![json],
            chat.clone(),
            401,
        ),
        (
            "POST",
            gw.url("/v1/chat/completions"),
            vec![json, auth],
            "{".into(),
            400,
        ),
        (
            "POST",
            gw.url("/v1/chat/completions"),
            vec![auth],
            chat.clone(),
            415,
        ),
        (
            "GET",
            gw.url("/v1/approvals"),
            vec![auth],
            String::new(),
            401,
        ),
    ];
    for (method, url, headers, body, status) in cases {
        for given in [Some("req-edge-7"), None] {
            let mut headers = headers.clone();
            if let Some(id) = given {
                headers.push(("x-request-id", id));
            }
            let answer = send(method, &url, &headers, &body).await;
            assert_eq!(answer.status, status, "{method} {url}: {}", answer.body);
            let sent = answer.headers["x-request-id"].to_str().unwrap().to_owned();
            if let Some(id) = given {
                assert_eq!(sent, id, "the client's id is kept");
            }
            let error: Value = serde_json::from_str(&answer.body).unwrap();
            assert_eq!(error["request_id"], sent, "{method} {url}: {error}");
            assert!(
                error["error"].is_object(),
                "the error shape is kept: {error}"
            );
        }
    }
}

#[tokio::test]
async fn each_call_record_names_the_request_it_served() {
    let (_dir, gw) = gateway().await;
    let url = gw.url("/v1/chat/completions");
    let body = request(false, "hi").to_string();
    let auth = ("authorization", "Bearer sk-alice");
    let json = ("content-type", "application/json");
    let chat = |headers: Vec<(&'static str, String)>| {
        let (url, body) = (url.clone(), body.clone());
        async move {
            let mut all = vec![auth, json];
            all.extend(headers.iter().map(|(name, value)| (*name, value.as_str())));
            let answer = send("POST", &url, &all, &body).await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            answer.headers["x-request-id"].to_str().unwrap().to_owned()
        }
    };
    // The client's own id, passed through; then one the edge generates.
    chat(vec![("x-request-id", "req-from-client-7".into())]).await;
    let generated = chat(Vec::new()).await;
    // An id too long to keep is passed back but not recorded.
    let long = "r".repeat(201);
    assert_eq!(chat(vec![("x-request-id", long.clone())]).await, long);

    let store = gw.records().await;
    let mut recorded = Vec::new();
    for summary in store
        .call_summaries(&tower_chat_persistence::CallQuery::default())
        .await
        .unwrap()
    {
        let call = store.call(&summary.call_id).await.unwrap().unwrap();
        recorded.push(call.request_id.map(|id| id.as_str().to_owned()));
    }
    recorded.sort();
    assert_eq!(
        recorded,
        vec![None, Some(generated), Some("req-from-client-7".to_owned())]
    );
}
