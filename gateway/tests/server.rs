//! Gateway keys, health checks and graceful shutdown.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{get, post, request, Harness};
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
    let _in_flight = tokio::spawn(async move { post(&url, body, &[]).await });
    tokio::time::timeout(Duration::from_secs(10), received.notified())
        .await
        .expect("the request reaches the upstream");
    let started = Instant::now();
    gw.shutdown();
    let server = gw.server.take().unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("bounded drain")
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "{took:?}"
    );
}
