//! FallbackLayer over mixed OpenAI / Anthropic targets, against scripted providers over loopback HTTP.

mod common;

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tower::{Layer, ServiceExt};
use tower_chat::{ChatEvent, ChatRequest, ChatStreamExt, ErrorKind, Message};
use tower_chat_resilience::{
    AllTargetsFailed, AnsweredBy, Backoff, Fallback, FallbackLayer, Jitter, RetryLayer, Target,
};

use common::*;

fn request(stream: bool) -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
        .stream(stream)
        .model("what-the-client-asked")
}

#[tokio::test(start_paused = true)]
async fn a_failing_openai_primary_falls_back_to_an_anthropic_target() {
    let primary = scripted(vec![status(503)]).await;
    let backup = scripted(vec![anthropic_text("claude-sonnet-4-5", "Hi from Claude")]).await;
    let events = Events::default();
    let chat = FallbackLayer::new()
        .target(Target::new(
            "claude",
            anthropic(&backup, "claude-sonnet-4-5"),
        ))
        .observer(events.observer())
        .layer(openai(&primary, "gpt-4o"));
    let answered = AnsweredBy::new();
    let response = chat
        .oneshot(request(true).with_extension(answered.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "Hi from Claude");
    assert_eq!(response.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(primary.requests().len(), 1);
    assert_eq!(backup.requests().len(), 1);
    // Each target gets its own model, not the client's.
    assert_eq!(primary.requests()[0].body["model"], "gpt-4o");
    assert_eq!(backup.requests()[0].body["model"], "claude-sonnet-4-5");
    let answer = answered.get().unwrap();
    assert_eq!(answer.target, "claude");
    assert_eq!(answer.metadata.provider, "anthropic");
    assert_eq!(answer.skipped, vec!["openai/gpt-4o".to_owned()]);
    assert_eq!(events.take(), vec!["fallback openai/gpt-4o -> claude"]);
}

#[tokio::test(start_paused = true)]
async fn a_healthy_primary_answers_alone_both_ways() {
    for stream in [true, false] {
        let primary = scripted(vec![ok_reply(stream, "primary")]).await;
        let backup = scripted(vec![ok_reply(stream, "backup")]).await;
        let chat = Fallback::new(vec![
            Target::new("a", openai(&primary, "m1")),
            Target::new("b", openai(&backup, "m2")),
        ]);
        let answered = AnsweredBy::new();
        let response = chat
            .oneshot(request(stream).with_extension(answered.clone()))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "primary");
        assert_eq!((primary.requests().len(), backup.requests().len()), (1, 0));
        assert_eq!(answered.get().unwrap().target, "a");
    }
}

#[tokio::test(start_paused = true)]
async fn non_streaming_calls_fall_back_too() {
    let primary = scripted(vec![status(500)]).await;
    let backup = scripted(vec![openai_completion("from b")]).await;
    let chat = Fallback::new(vec![
        Target::new("a", openai(&primary, "m1")),
        Target::new("b", openai(&backup, "m2")),
    ]);
    let response = chat
        .oneshot(request(false))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "from b");
    assert_eq!((primary.requests().len(), backup.requests().len()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn every_target_down_gives_one_error_listing_each_attempt() {
    let a = scripted(vec![status(500)]).await;
    let b = scripted(vec![status(429).header("retry-after", "3")]).await;
    // A port nobody listens on: the connection is refused.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let dead = tower_chat::openai::OpenAiChat::builder()
        .base_url(format!("http://127.0.0.1:{closed}/v1"))
        .model("m3")
        .timeouts(no_timeouts())
        .build()
        .unwrap();
    let chat = Fallback::new(vec![
        Target::new("a", openai(&a, "m1")),
        Target::new("b", openai(&b, "m2")),
        Target::new("c", dead),
    ]);
    let error = chat.oneshot(request(true)).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Connection, "{error}");
    let all = std::error::Error::source(&error)
        .and_then(|s| s.downcast_ref::<AllTargetsFailed>())
        .expect("the source lists the attempts");
    let listed: Vec<(&str, &ErrorKind)> = all
        .attempts()
        .iter()
        .map(|a| (a.target.as_str(), a.error.kind()))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("a", &ErrorKind::Upstream),
            (
                "b",
                &ErrorKind::RateLimited {
                    retry_after: Some(Duration::from_secs(3))
                }
            ),
            ("c", &ErrorKind::Connection),
        ]
    );
    let message = error.message();
    assert!(
        message.starts_with("all 3 targets failed: a: upstream (HTTP 500)"),
        "{message}"
    );
    assert!(
        message.contains("; b: rate_limited (HTTP 429)"),
        "{message}"
    );
    assert!(message.contains("; c: connection"), "{message}");
    assert_eq!((a.requests().len(), b.requests().len()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_cut_before_the_first_token_falls_back_and_a_cut_after_it_does_not() {
    let primary = scripted(vec![cut_before_first_token(), cut_after_first_token("Par")]).await;
    let backup = scripted(vec![Reply::openai_text("backup answer")]).await;
    let chat = Fallback::new(vec![
        Target::new("a", openai(&primary, "m1")),
        Target::new("b", openai(&backup, "m2")),
    ]);
    let response = chat
        .clone()
        .oneshot(request(true))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "backup answer");
    assert_eq!((primary.requests().len(), backup.requests().len()), (1, 1));

    // Second call: text reached the caller, so the cut is the caller's error and the backup is not called.
    let items: Vec<_> = chat.oneshot(request(true)).await.unwrap().collect().await;
    let text: String = items
        .iter()
        .filter_map(|i| match i {
            Ok(ChatEvent::TextDelta { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Par");
    assert_eq!(
        items.last().unwrap().as_ref().unwrap_err().kind(),
        &ErrorKind::Connection
    );
    assert_eq!((primary.requests().len(), backup.requests().len()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn a_malformed_request_does_not_fall_back() {
    let primary = scripted(vec![status(400)]).await;
    let backup = scripted(vec![Reply::openai_text("never")]).await;
    let chat = Fallback::new(vec![
        Target::new("a", openai(&primary, "m1")),
        Target::new("b", openai(&backup, "m2")),
    ]);
    let error = chat.oneshot(request(true)).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
    assert_eq!(backup.requests().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_stream_names_the_target_model_when_the_provider_does_not() {
    // An OpenAI-compatible server that sends neither id nor model.
    let anonymous = Reply::openai_stream(&[
        json!({"choices": [{"index": 0, "delta": {"content": "anon"}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]);
    let primary = scripted(vec![status(502)]).await;
    let backup = scripted(vec![anonymous]).await;
    let chat = Fallback::new(vec![
        Target::new("a", openai(&primary, "m1")),
        Target::new("b", openai(&backup, "local-llama")),
    ]);
    let first = chat
        .oneshot(request(true))
        .await
        .unwrap()
        .next()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first,
        ChatEvent::ResponseMetadata {
            id: None,
            model: Some("local-llama".into())
        }
    );
}

#[tokio::test(start_paused = true)]
async fn retry_around_fallback_with_retrying_targets_counts_requests_exactly() {
    let a = scripted(vec![status(503)]).await;
    let b = scripted(vec![status(503)]).await;
    let quick = Backoff {
        base: Duration::from_millis(1),
        max: Duration::from_millis(1),
        jitter: Jitter::None,
    };
    // The inner retry layer sees the outer one's mark and calls once.
    let inner_retry = RetryLayer::new().max_attempts(3).backoff(quick);
    let chat = RetryLayer::new()
        .max_attempts(2)
        .backoff(quick)
        .layer(Fallback::new(vec![
            Target::new("a", inner_retry.layer(openai(&a, "m1"))),
            Target::new("b", openai(&b, "m2")),
        ]));
    let error = chat.oneshot(request(true)).await.err().unwrap();
    assert_eq!(error.kind(), &ErrorKind::Upstream);
    // Two outer attempts, each trying a then b once: not 2 x 3 on a.
    assert_eq!((a.requests().len(), b.requests().len()), (2, 2));
}
