//! RetryLayer against fault-injecting scripted providers over loopback HTTP, with Tokio's clock paused.

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tower::retry::budget::TpsBudget;
use tower::{Layer, ServiceExt};
use tower_chat::{
    CancellationToken, ChatEvent, ChatRequest, ChatStreamExt, ErrorKind, Message, TimeoutPhase,
};
use tower_chat_resilience::{Backoff, Jitter, RetryLayer};

use common::*;

fn request(stream: bool) -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")]).stream(stream)
}

fn exact(base: Duration) -> Backoff {
    Backoff {
        base,
        max: Duration::from_secs(60),
        jitter: Jitter::None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_is_waited_out_then_answered() {
    for (header, value, wait) in [
        ("retry-after", "7", Duration::from_secs(7)),
        ("retry-after-ms", "1500", Duration::from_millis(1500)),
    ] {
        let provider = scripted(vec![
            status(429).header(header, value),
            Reply::openai_text("Hello world"),
        ])
        .await;
        let events = Events::default();
        let chat = RetryLayer::new()
            .observer(events.observer())
            .layer(openai(&provider, "gpt-4o"));
        let start = Instant::now();
        let response = chat
            .oneshot(request(true))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        let waited = start.elapsed();
        assert_eq!(response.text(), "Hello world");
        assert_eq!(provider.requests().len(), 2);
        // The provider's wait, not the (shorter, jittered) backoff.
        assert!(
            waited >= wait && waited < wait + Duration::from_millis(100),
            "{waited:?}"
        );
        assert_eq!(
            events.take(),
            vec![format!("retry 1 after {}ms", wait.as_millis())]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_500_then_success_is_retried_after_the_backoff_both_ways() {
    for stream in [true, false] {
        let provider = scripted(vec![status(500), ok_reply(stream, "recovered")]).await;
        let chat = RetryLayer::new()
            .backoff(exact(Duration::from_secs(2)))
            .layer(openai(&provider, "gpt-4o"));
        let start = Instant::now();
        let response = chat
            .oneshot(request(stream))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "recovered");
        assert_eq!(provider.requests().len(), 2, "stream: {stream}");
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(2100),
            "{waited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn full_jitter_waits_at_most_the_ceiling() {
    let provider = scripted(vec![status(503), status(503), Reply::openai_text("ok")]).await;
    let chat = RetryLayer::new()
        .backoff(Backoff {
            base: Duration::from_secs(4),
            max: Duration::from_secs(60),
            jitter: Jitter::Full,
        })
        .layer(openai(&provider, "gpt-4o"));
    let start = Instant::now();
    drop(chat.oneshot(request(true)).await.unwrap());
    assert_eq!(provider.requests().len(), 3);
    // At most 4 s + 8 s.
    assert!(
        start.elapsed() <= Duration::from_millis(12_100),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_before_its_first_token_is_retried_without_repeating_anything() {
    let provider = scripted(vec![
        cut_before_first_token(),
        Reply::openai_text("whole answer"),
    ])
    .await;
    let chat = RetryLayer::new()
        .backoff(exact(Duration::from_millis(10)))
        .layer(openai(&provider, "gpt-4o"));
    let events: Vec<ChatEvent> = chat
        .oneshot(request(true))
        .await
        .unwrap()
        .map(|item| item.unwrap())
        .collect()
        .await;
    assert_eq!(provider.requests().len(), 2);
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "whole answer");
    // One metadata event: the cut attempt's was dropped with it.
    let metadata = events
        .iter()
        .filter(|e| matches!(e, ChatEvent::ResponseMetadata { .. }))
        .count();
    assert_eq!(metadata, 1);
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_its_first_token_is_a_typed_error_and_not_retried() {
    let provider = scripted(vec![
        cut_after_first_token("Hel"),
        Reply::openai_text("never"),
    ])
    .await;
    let chat = RetryLayer::new()
        .backoff(exact(Duration::from_millis(10)))
        .layer(openai(&provider, "gpt-4o"));
    let mut stream = chat.oneshot(request(true)).await.unwrap();
    let mut text = String::new();
    let error = loop {
        match stream.next().await.expect("an error item ends the stream") {
            Ok(ChatEvent::TextDelta { text: t }) => text.push_str(&t),
            Ok(_) => {}
            Err(error) => break error,
        }
    };
    assert_eq!(text, "Hel");
    assert_eq!(error.kind(), &ErrorKind::Connection, "{error}");
    assert!(stream.next().await.is_none());
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn requests_the_provider_refused_are_never_retried() {
    for (code, kind) in [
        (400, ErrorKind::InvalidRequest),
        (401, ErrorKind::Authentication),
        (404, ErrorKind::InvalidRequest),
    ] {
        let provider = scripted(vec![status(code), Reply::openai_text("never")]).await;
        let chat = RetryLayer::new().layer(openai(&provider, "gpt-4o"));
        let error = chat.oneshot(request(true)).await.err().unwrap();
        assert_eq!(error.kind(), &kind);
        assert_eq!(provider.requests().len(), 1, "HTTP {code}");
    }
}

#[tokio::test(start_paused = true)]
async fn conflicts_and_request_timeouts_are_retried() {
    for code in [408, 409, 529] {
        let provider = scripted(vec![status(code), Reply::openai_text("ok")]).await;
        let chat = RetryLayer::new()
            .backoff(exact(Duration::from_millis(1)))
            .layer(openai(&provider, "gpt-4o"));
        drop(chat.oneshot(request(true)).await.unwrap());
        assert_eq!(provider.requests().len(), 2, "HTTP {code}");
    }
}

#[tokio::test(start_paused = true)]
async fn attempts_stop_at_max_attempts_with_the_last_error() {
    let provider = scripted(vec![status(503)]).await;
    let chat = RetryLayer::new()
        .max_attempts(4)
        .backoff(exact(Duration::from_millis(1)))
        .layer(openai(&provider, "gpt-4o"));
    let error = chat.oneshot(request(true)).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Upstream);
    assert_eq!(error.status().map(|s| s.as_u16()), Some(503));
    assert_eq!(provider.requests().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn nested_retry_layers_do_not_multiply_attempts() {
    for stream in [true, false] {
        let provider = scripted(vec![status(503)]).await;
        let inner = RetryLayer::new()
            .max_attempts(3)
            .backoff(exact(Duration::from_millis(1)));
        let outer = RetryLayer::new()
            .max_attempts(3)
            .backoff(exact(Duration::from_millis(1)));
        let chat = outer.layer(inner.layer(openai(&provider, "gpt-4o")));
        chat.oneshot(request(stream)).await.err().unwrap();
        // 3, not 3 x 3.
        assert_eq!(provider.requests().len(), 3, "stream: {stream}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_budget_stops_retries_for_every_clone() {
    let provider = scripted(vec![status(503)]).await;
    // No deposits count (0 %), and a reserve of exactly one retry per second.
    let chat = RetryLayer::new()
        .max_attempts(5)
        .backoff(exact(Duration::from_millis(1)))
        .budget(TpsBudget::new(Duration::from_secs(1), 1, 0.0))
        .layer(openai(&provider, "gpt-4o"));
    chat.clone().oneshot(request(true)).await.err().unwrap();
    assert_eq!(provider.requests().len(), 2, "one retry from the reserve");
    chat.clone().oneshot(request(true)).await.err().unwrap();
    assert_eq!(
        provider.requests().len(),
        3,
        "the clone finds the budget spent"
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_during_a_backoff_ends_the_call_at_once() {
    let provider = scripted(vec![
        status(429).header("retry-after", "30"),
        Reply::openai_text("never"),
    ])
    .await;
    let backing_off = Arc::new(tokio::sync::Notify::new());
    let signal = backing_off.clone();
    let chat = RetryLayer::new()
        .observer(move |_: &tower_chat_resilience::ResilienceEvent<'_>| signal.notify_one())
        .layer(openai(&provider, "gpt-4o"));
    let token = CancellationToken::new();
    let start = Instant::now();
    let call = tokio::spawn(chat.oneshot(request(true).with_extension(token.clone())));
    backing_off.notified().await;
    token.cancel();
    let error = call.await.unwrap().err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Cancelled);
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    // Let any stray timer run: no second request follows.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_cap_fails_at_once() {
    let provider = scripted(vec![
        status(429).header("retry-after", "120"),
        Reply::openai_text("never"),
    ])
    .await;
    let chat = RetryLayer::new()
        .retry_after_cap(Duration::from_secs(60))
        .layer(openai(&provider, "gpt-4o"));
    let start = Instant::now();
    let error = chat.oneshot(request(true)).await.err().unwrap();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(120)));
    assert_eq!(provider.requests().len(), 1);
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_waits_and_attempts() {
    // 503 at t=0, wait 2 s, 503 at t=2: the next wait (4 s) would end past the 5 s deadline.
    let provider = scripted(vec![status(503)]).await;
    let chat = RetryLayer::new()
        .max_attempts(10)
        .backoff(exact(Duration::from_secs(2)))
        .deadline(Duration::from_secs(5))
        .layer(openai(&provider, "gpt-4o"));
    let error = chat.oneshot(request(true)).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Upstream);
    assert_eq!(provider.requests().len(), 2);

    // A provider that does not answer: the attempt is cut at the deadline.
    let slow = scripted(vec![
        Reply::openai_text("late").delayed(Duration::from_secs(60))
    ])
    .await;
    let chat = RetryLayer::new()
        .deadline(Duration::from_secs(5))
        .layer(openai(&slow, "gpt-4o"));
    let start = Instant::now();
    let error = chat.oneshot(request(true)).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Timeout(TimeoutPhase::Total));
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(slow.requests().len(), 1);
}
