//! The gateway over HTTP/2 with prior knowledge (h2c), from hyper's HTTP/2 client: many streams on one
//! connection, a flood of streams opened and reset, a stream cancelled midway (recorded as cancelled), a
//! client that stops reading a stream (cut after the write timeout) beside one that reads slowly (never cut).

use crate::common;

use std::time::Duration;

use common::{http2, http2_request, request, Answer, Harness};
use serde_json::json;
use tower_chat::test_server::{Part, RecordedRequest, Reply};
use tower_chat::ConversationId;
use tower_chat_persistence::{CallOutcome, Store};
use tower_chat_testkit::within;

/// The stream flow-control window the reading tests' client grants: far less than their answers.
const SMALL_WINDOW: u32 = 16 * 1024;

/// An upstream whose stream starts and then hangs: each request stays in flight until the client leaves.
fn hanging(_: &RecordedRequest, _: usize) -> Reply {
    let first = json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial"}}]});
    Reply::sse_chunks([format!("data: {first}\n\n")]).then(Part::Hang)
}

fn chat_request(
    addr: std::net::SocketAddr,
    stream: bool,
    headers: &[(&str, &str)],
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    http2_request(
        addr,
        "POST",
        "/v1/chat/completions",
        &all,
        &request(stream, "hi").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_at_once_share_one_connection() {
    let gw = Harness::start(|_, _| Reply::openai_text("hello there"), |_| {}).await;
    let sender = http2(gw.addr).await;
    let calls = (0..16).map(|i| {
        let mut sender = sender.clone();
        let request = chat_request(gw.addr, i % 2 == 0, &[]);
        async move {
            let response = sender.send_request(request).await.expect("a stream");
            assert_eq!(response.version(), http::Version::HTTP_2);
            (i % 2 == 0, common::read(response).await)
        }
    });
    let answers: Vec<(bool, Answer)> = futures_util::future::join_all(calls).await;
    for (stream, answer) in answers {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.chat_text(stream), "hello there", "{}", answer.body);
    }
    assert_eq!(gw.provider.requests().len(), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_streams_opened_and_reset_leaves_the_gateway_up_and_its_slots_free() {
    let gw = Harness::start(hanging, |c| c.connections.max_in_flight = 4).await;
    // Each stream is opened (its head sent, its body to follow) and reset at once, as in CVE-2023-44487; on a
    // fresh connection whenever the gateway has closed the last one (hyper answers a flood of resets with
    // GOAWAY).
    let mut reset = 0;
    while reset < 500 {
        let tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let (client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
        tokio::spawn(connection);
        let mut client = client;
        for _ in 0..100 {
            client = match client.ready().await {
                Ok(client) => client,
                Err(_) => break,
            };
            let head = http::Request::post(format!("http://{}/v1/chat/completions", gw.addr))
                .header("content-type", "application/json")
                .body(())
                .unwrap();
            let Ok((_, mut body)) = client.send_request(head, false) else {
                break;
            };
            body.send_reset(h2::Reason::CANCEL);
            reset += 1;
        }
    }
    // All four slots come back: four streams are admitted at once, the fifth is shed.
    let sender = http2(gw.addr).await;
    let held = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let mut admitted = Vec::new();
            for _ in 0..4 {
                let mut sender = sender.clone();
                let response = sender
                    .send_request(chat_request(gw.addr, true, &[]))
                    .await
                    .expect("a stream");
                if response.status() == 200 {
                    admitted.push(response);
                }
            }
            if admitted.len() == 4 {
                break admitted;
            }
            drop(admitted);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the reset streams gave their slots back");
    let mut sender = sender.clone();
    let fifth = sender
        .send_request(chat_request(gw.addr, true, &[]))
        .await
        .unwrap();
    assert_eq!(fifth.status(), 503);
    assert_eq!(held.len(), 4);
    assert_eq!(
        common::get(&gw.url("/healthz")).await.status,
        200,
        "HTTP/1.1 is served beside"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cancelled_midway_is_recorded_as_cancelled() {
    use http_body_util::BodyExt;

    let mut gw = Harness::start(hanging, |_| {}).await;
    let mut sender = http2(gw.addr).await;
    let response = sender
        .send_request(chat_request(
            gw.addr,
            true,
            &[("x-conversation-id", "conv-h2-cancel")],
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("partial"),
        "{first:?}"
    );
    // Dropping the body resets the stream; the connection stays open.
    drop(body);
    gw.provider.hangups(1).await;
    assert!(sender.ready().await.is_ok(), "the connection is still open");
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    let store = gw.records().await;
    let calls = store
        .conversation_calls(&ConversationId::new("conv-h2-cancel"))
        .await
        .unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].outcome, CallOutcome::Cancelled);
    assert_eq!(calls[0].response.text(), "partial");
}

/// An upstream whose first answer streams `deltas` deltas of `size` bytes; later requests get a short answer.
fn streaming(deltas: usize, size: usize) -> impl Fn(&RecordedRequest, usize) -> Reply {
    move |_, index| {
        if index > 0 {
            return Reply::openai_text("small");
        }
        let delta = "x".repeat(size);
        let mut chunks = vec![
            json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        ];
        for _ in 0..deltas {
            chunks.push(json!({"choices": [{"index": 0, "delta": {"content": delta}}]}));
        }
        chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
        Reply::openai_stream(&chunks)
    }
}

/// An HTTP/2 connection whose client grants each stream [`SMALL_WINDOW`] and more only as its body is read;
/// the handle ends when the connection does.
async fn small_window_http2(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut builder =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .initial_stream_window_size(SMALL_WINDOW)
        .initial_connection_window_size(SMALL_WINDOW);
    let (sender, connection) = builder
        .handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .expect("HTTP/2 handshake");
    (sender, tokio::spawn(connection))
}

/// A client that reads a stream's head and then nothing: its window closes, the gateway can write no more, and
/// after the write timeout the connection is closed, the call recorded as cancelled, the in-flight slot given
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_an_http2_stream_loses_it_and_its_slot_after_the_write_timeout()
{
    // A megabyte: far more than the client's window, the gateway's buffers and hyper's.
    let mut gw = Harness::start(streaming(256, 4096), |c| {
        c.connections.write_timeout = Duration::from_secs(1);
        c.connections.max_in_flight = 1;
    })
    .await;
    let (mut sender, connection) = small_window_http2(gw.addr).await;
    let response = sender
        .send_request(chat_request(
            gw.addr,
            true,
            &[("x-conversation-id", "conv-h2-stalled")],
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // The body is held and never read.
    let unread = response;
    let ended = within("the gateway closing the stalled connection", connection).await;
    assert!(ended.is_ok(), "the client's connection task panicked");
    drop(unread);
    // The one in-flight slot comes back (once the stream has noticed the closed connection).
    let freed = within("the stalled stream giving its slot back", async {
        loop {
            let answer = gw.chat(&request(false, "hi")).await;
            if answer.status != 503 {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(freed.status, 200, "{}", freed.body);
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    let calls = gw
        .records()
        .await
        .conversation_calls(&ConversationId::new("conv-h2-stalled"))
        .await
        .unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].outcome, CallOutcome::Cancelled);
}

/// A client that reads a stream slowly, pausing after every frame for as long as its bytes take at 64 KiB/s,
/// for several write timeouts in all, gets it whole: each window update it sends lets the gateway write on.
/// Its events take longer than the write timeout to read: the gateway hands them over in pieces, each read in
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_http2_reader_is_never_cut() {
    use http_body_util::BodyExt;

    const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
    const BYTES_PER_SECOND: f64 = 64.0 * 1024.0;
    const DELTA: usize = 96 * 1024;
    const DELTAS: usize = 3;
    let gw = Harness::start(streaming(DELTAS, DELTA), |c| {
        c.connections.write_timeout = WRITE_TIMEOUT
    })
    .await;
    let (mut sender, _connection) = small_window_http2(gw.addr).await;
    let response = sender
        .send_request(chat_request(gw.addr, true, &[]))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(frame) = within("the next frame", body.frame()).await {
        let frame = frame.expect("the stream was cut");
        if let Ok(data) = frame.into_data() {
            text.extend_from_slice(&data);
            // What a slow reader does between reads.
            tokio::time::sleep(Duration::from_secs_f64(
                data.len() as f64 / BYTES_PER_SECOND,
            ))
            .await;
        }
    }
    assert!(
        Duration::from_secs_f64(text.len() as f64 / BYTES_PER_SECOND) > 2 * WRITE_TIMEOUT,
        "{} bytes: not slow for long enough to test anything",
        text.len()
    );
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "{}",
        &text[text.len().saturating_sub(200)..]
    );
    assert_eq!(text.matches(&"x".repeat(DELTA)).count(), DELTAS);
}
