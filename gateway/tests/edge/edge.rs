//! The edge middleware seen from a client: gzip on the console and the JSON lists, never on an event stream;
//! the request's `x-request-id` in every JSON error body and on the record of every call it made.

use crate::common;

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
    // An id too long to echo is replaced by a generated one, which is recorded.
    let long = "r".repeat(201);
    let replaced = chat(vec![("x-request-id", long.clone())]).await;
    assert_ne!(replaced, long);

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
    assert_eq!(recorded, {
        let mut expected = vec![
            Some(generated),
            Some(replaced),
            Some("req-from-client-7".to_owned()),
        ];
        expected.sort();
        expected
    });
}

/// The id the gateway answered with, in its header and in the JSON error body (a request without a key is a
/// 401), after sending `id` as `x-request-id`.
async fn answered_id(gw: &Harness, id: &[u8]) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = http::Request::post(gw.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("x-request-id", http::HeaderValue::from_bytes(id).unwrap())
        .body(Full::new(Bytes::from(request(false, "hi").to_string())))
        .unwrap();
    let answer = common::read(client.request(request).await.unwrap()).await;
    assert_eq!(answer.status, 401, "{}", answer.body);
    let sent = answer.headers["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(
        answer.json()["request_id"],
        sent.as_str(),
        "{}",
        answer.body
    );
    sent
}

/// An `x-request-id` the gateway would echo in a header, a body and a log line is at most 200 bytes of visible
/// ASCII; a longer, empty or unprintable one is replaced by a generated UUID.
#[tokio::test]
async fn an_over_long_empty_or_unprintable_request_id_is_replaced_by_a_generated_one() {
    let (_dir, gw) = gateway().await;
    let kept = "k".repeat(200);
    assert_eq!(answered_id(&gw, kept.as_bytes()).await, kept);
    assert_eq!(answered_id(&gw, b"req-edge-8").await, "req-edge-8");
    let huge = vec![b'r'; 60_000];
    for replaced in [
        &huge[..],
        &huge[..201],
        b"",
        b"req\tid",
        b"req id",
        b"req-\xe9t\xe9",
    ] {
        let answered = answered_id(&gw, replaced).await;
        assert_eq!(answered.len(), 36, "a UUID: {answered}");
        assert!(uuid_like(&answered), "{answered}");
    }
}

fn uuid_like(id: &str) -> bool {
    id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| {
            matches!(i, 8 | 13 | 18 | 23) == (b == b'-') && (b == b'-' || b.is_ascii_hexdigit())
        })
}

/// Send `head` (a request head, blank line included) over a fresh HTTP/1.1 connection and read the answer
/// until the gateway closes it or the status line and headers are in.
async fn raw_http1(gw: &Harness, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tcp.read(&mut buf).await.unwrap();
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        let whole = text.split_once("\r\n\r\n").is_some_and(|(head, body)| {
            head.lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .is_some_and(|n| body.len() >= n)
        });
        if n == 0 || whole {
            return text.into_owned();
        }
    }
}

/// RFC 9112 §3.2: a request with more than one `Host` line is answered 400, whichever route it names.
#[tokio::test]
async fn a_request_with_two_host_lines_is_a_400() {
    let (_dir, gw) = gateway().await;
    let own = gw.addr.to_string();
    let one = raw_http1(
        &gw,
        &format!("GET /healthz HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(one.starts_with("HTTP/1.1 200"), "{one}");
    for (path, hosts) in [
        ("/healthz", [own.as_str(), "evil.example"]),
        ("/v1/chat/completions", [own.as_str(), own.as_str()]),
        ("/console/login", ["evil.example", own.as_str()]),
    ] {
        let answer = raw_http1(
            &gw,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: {}\r\nHost: {}\r\nConnection: close\r\n\r\n",
                hosts[0], hosts[1]
            ),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
        assert!(answer.contains("duplicate_host"), "{path}: {answer}");
        assert!(answer.contains("Host"), "{path}: {answer}");
    }
}
