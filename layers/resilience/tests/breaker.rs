//! CircuitBreakerLayer against scripted providers over loopback HTTP, with Tokio's clock paused.

mod common;

use std::time::Duration;

use tower::{Layer, ServiceExt};
use tower_chat::{ChatRequest, ChatStreamExt, ErrorKind, Message};
use tower_chat_resilience::{is_circuit_open, BreakerState, CircuitBreakerLayer, Fallback, Target};

use common::*;

fn request(stream: bool) -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")]).stream(stream)
}

#[tokio::test(start_paused = true)]
async fn opens_after_consecutive_failures_skips_then_probes_and_closes_both_ways() {
    for stream in [true, false] {
        let provider = scripted(vec![
            status(500),
            status(502),
            status(503),
            ok_reply(stream, "back"),
        ])
        .await;
        let events = Events::default();
        let chat = CircuitBreakerLayer::new()
            .name("primary")
            .consecutive_failures(3)
            .open_for(Duration::from_secs(30))
            .observer(events.observer())
            .layer(openai(&provider, "gpt-4o"));
        let handle = chat.handle();
        for _ in 0..3 {
            let error = chat.clone().oneshot(request(stream)).await.err().unwrap();
            assert!(!is_circuit_open(&error));
        }
        assert_eq!(handle.state(), BreakerState::Open);
        // Open: refused at once, the provider is not called.
        for _ in 0..5 {
            let error = chat.clone().oneshot(request(stream)).await.err().unwrap();
            assert!(is_circuit_open(&error), "{error}");
            assert_eq!(error.kind(), &ErrorKind::Upstream);
        }
        assert_eq!(provider.requests().len(), 3);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(handle.state(), BreakerState::HalfOpen);
        // The probe succeeds: closed again.
        let response = chat
            .clone()
            .oneshot(request(stream))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "back");
        assert_eq!(handle.state(), BreakerState::Closed);
        assert_eq!(provider.requests().len(), 4);
        assert_eq!(
            events.take(),
            vec![
                "breaker primary open",
                "breaker primary half_open",
                "breaker primary closed"
            ]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_the_circuit() {
    let provider = scripted(vec![status(500)]).await;
    let chat = CircuitBreakerLayer::new()
        .consecutive_failures(2)
        .open_for(Duration::from_secs(10))
        .layer(openai(&provider, "gpt-4o"));
    for _ in 0..2 {
        chat.clone().oneshot(request(true)).await.err().unwrap();
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    let probe = chat.clone().oneshot(request(true)).await.err().unwrap();
    assert!(!is_circuit_open(&probe));
    assert_eq!(chat.handle().state(), BreakerState::Open);
    let refused = chat.clone().oneshot(request(true)).await.err().unwrap();
    assert!(is_circuit_open(&refused));
    assert_eq!(provider.requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn only_one_probe_goes_through_while_half_open() {
    let provider = scripted(vec![
        status(500),
        Reply::openai_text("slow probe").delayed(Duration::from_secs(5)),
    ])
    .await;
    let chat = CircuitBreakerLayer::new()
        .consecutive_failures(1)
        .open_for(Duration::from_secs(10))
        .layer(openai(&provider, "gpt-4o"));
    chat.clone().oneshot(request(true)).await.err().unwrap();
    tokio::time::advance(Duration::from_secs(10)).await;
    let probe = tokio::spawn(chat.clone().oneshot(request(true)));
    // Wait until the probe reached the provider.
    while provider.requests().len() < 2 {
        tokio::task::yield_now().await;
    }
    let refused = chat.clone().oneshot(request(true)).await.err().unwrap();
    assert!(is_circuit_open(&refused));
    let response = probe
        .await
        .unwrap()
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "slow probe");
    assert_eq!(chat.handle().state(), BreakerState::Closed);
    assert_eq!(provider.requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failure_ratio_in_the_window_opens_it() {
    let provider = scripted(vec![
        Reply::openai_text("1"),
        status(500),
        Reply::openai_text("3"),
        status(500),
        Reply::openai_text("never"),
    ])
    .await;
    let chat = CircuitBreakerLayer::new()
        .consecutive_failures(100)
        .failure_ratio(0.5, 4, Duration::from_secs(60))
        .layer(openai(&provider, "gpt-4o"));
    for _ in 0..4 {
        if let Ok(stream) = chat.clone().oneshot(request(true)).await {
            stream.collect_response().await.unwrap();
        }
    }
    assert_eq!(chat.handle().state(), BreakerState::Open);
    assert!(is_circuit_open(
        &chat.clone().oneshot(request(true)).await.err().unwrap()
    ));
    assert_eq!(provider.requests().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn failures_outside_the_window_are_forgotten() {
    let provider = scripted(vec![status(500), status(500), Reply::openai_text("ok")]).await;
    let chat = CircuitBreakerLayer::new()
        .consecutive_failures(100)
        .failure_ratio(0.5, 2, Duration::from_secs(10))
        .layer(openai(&provider, "gpt-4o"));
    chat.clone().oneshot(request(true)).await.err().unwrap();
    tokio::time::advance(Duration::from_secs(11)).await;
    // One failure in the window is not two.
    chat.clone().oneshot(request(true)).await.err().unwrap();
    assert_eq!(chat.handle().state(), BreakerState::Closed);
}

/// A target that keeps answering 429 is not broken, it asked to be left alone: once its rate limits open the
/// circuit, a call the circuit refuses is a rate limit too, waiting out the rest of the cool-down, so a client hears
/// what the upstream said (not a 502). A circuit opened by server errors still refuses as an upstream failure.
#[tokio::test(start_paused = true)]
async fn a_circuit_opened_by_rate_limits_refuses_with_the_rest_of_its_cool_down() {
    for stream in [true, false] {
        let provider = scripted(vec![status(429)]).await;
        let chat = CircuitBreakerLayer::new()
            .consecutive_failures(2)
            .open_for(Duration::from_secs(30))
            .layer(openai(&provider, "gpt-4o"));
        for _ in 0..2 {
            let error = chat.clone().oneshot(request(stream)).await.err().unwrap();
            assert!(
                matches!(error.kind(), ErrorKind::RateLimited { .. }),
                "{error}"
            );
        }
        assert_eq!(chat.handle().state(), BreakerState::Open);
        tokio::time::advance(Duration::from_secs(10)).await;
        let refused = chat.clone().oneshot(request(stream)).await.err().unwrap();
        assert!(is_circuit_open(&refused), "{refused}");
        let ErrorKind::RateLimited {
            retry_after: Some(wait),
        } = refused.kind()
        else {
            panic!("a circuit opened by rate limits refused with {refused:?}");
        };
        assert!(
            (Duration::from_secs(1)..=Duration::from_secs(20)).contains(wait),
            "{wait:?}"
        );
        assert_eq!(provider.requests().len(), 2);
    }
    // The same circuit opened by a server error after rate limits: the error that opened it decides.
    let provider = scripted(vec![status(429), status(500)]).await;
    let chat = CircuitBreakerLayer::new()
        .consecutive_failures(2)
        .layer(openai(&provider, "gpt-4o"));
    for _ in 0..2 {
        chat.clone().oneshot(request(true)).await.err().unwrap();
    }
    let refused = chat.clone().oneshot(request(true)).await.err().unwrap();
    assert!(is_circuit_open(&refused));
    assert_eq!(refused.kind(), &ErrorKind::Upstream);
}

#[tokio::test(start_paused = true)]
async fn refused_requests_do_not_count_against_the_target() {
    let provider = scripted(vec![status(400)]).await;
    let chat = CircuitBreakerLayer::new()
        .consecutive_failures(2)
        .layer(openai(&provider, "gpt-4o"));
    for _ in 0..5 {
        let error = chat.clone().oneshot(request(true)).await.err().unwrap();
        assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
    }
    assert_eq!(chat.handle().state(), BreakerState::Closed);
    assert_eq!(provider.requests().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_fallback_skips_an_open_circuit_without_calling_it() {
    let dead = scripted(vec![status(503)]).await;
    let backup = scripted(vec![Reply::openai_text("backup")]).await;
    let chat = Fallback::new(vec![
        Target::new(
            "dead",
            CircuitBreakerLayer::new()
                .consecutive_failures(3)
                .layer(openai(&dead, "m1")),
        ),
        Target::new("backup", openai(&backup, "m2")),
    ]);
    for _ in 0..8 {
        let response = chat
            .clone()
            .oneshot(request(true))
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "backup");
    }
    assert_eq!(dead.requests().len(), 3);
    assert_eq!(backup.requests().len(), 8);
}

#[tokio::test(start_paused = true)]
async fn a_target_breaker_driven_by_the_fallback_opens_skips_probes_and_closes() {
    for stream in [true, false] {
        let flaky = scripted(vec![
            status(503),
            status(503),
            ok_reply(stream, "primary again"),
        ])
        .await;
        let backup = scripted(vec![ok_reply(stream, "backup")]).await;
        let events = Events::default();
        let layer = CircuitBreakerLayer::new()
            .consecutive_failures(2)
            .open_for(Duration::from_secs(30))
            .observer(events.observer());
        let primary = Target::new("primary", openai(&flaky, "m1")).breaker(&layer);
        let handle = primary.breaker_handle().expect("a breaker");
        assert_eq!(handle.name(), "primary");
        let chat = Fallback::new(vec![primary, Target::new("backup", openai(&backup, "m2"))]);
        let text = |chat: &Fallback| {
            let chat = chat.clone();
            async move {
                let response = chat
                    .oneshot(request(stream))
                    .await
                    .unwrap()
                    .collect_response()
                    .await
                    .unwrap();
                response.text().to_owned()
            }
        };
        // Two failures open it; the next calls skip the primary without calling it.
        for _ in 0..5 {
            assert_eq!(text(&chat).await, "backup");
        }
        assert_eq!(handle.state(), BreakerState::Open);
        assert_eq!(flaky.requests().len(), 2);
        assert_eq!(backup.requests().len(), 5);
        // After the cool-down one probe goes through, succeeds, and closes it.
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(handle.state(), BreakerState::HalfOpen);
        assert_eq!(text(&chat).await, "primary again");
        assert_eq!(handle.state(), BreakerState::Closed);
        assert_eq!(flaky.requests().len(), 3);
        assert_eq!(
            events.take(),
            [
                "breaker primary open",
                "breaker primary half_open",
                "breaker primary closed"
            ]
        );
    }
}

/// Only failures in a row open the circuit: a success between them starts the count again. (A success on a
/// closed circuit with nothing counted skips the breaker's lock; this checks one after failures does not.)
#[tokio::test(start_paused = true)]
async fn a_success_between_failures_starts_the_count_again() {
    let provider = scripted(vec![
        status(500),
        status(500),
        ok_reply(true, "ok"),
        status(500),
        status(500),
        ok_reply(true, "still"),
    ])
    .await;
    let chat = CircuitBreakerLayer::new()
        .consecutive_failures(3)
        .open_for(Duration::from_secs(30))
        .layer(openai(&provider, "gpt-4o"));
    let handle = chat.handle();
    for _ in 0..2 {
        chat.clone().oneshot(request(true)).await.err().unwrap();
    }
    let answer = chat.clone().oneshot(request(true)).await.unwrap();
    assert_eq!(answer.collect_response().await.unwrap().text(), "ok");
    for _ in 0..2 {
        chat.clone().oneshot(request(true)).await.err().unwrap();
    }
    assert_eq!(handle.state(), BreakerState::Closed);
    let answer = chat.clone().oneshot(request(true)).await.unwrap();
    assert_eq!(answer.collect_response().await.unwrap().text(), "still");
    assert_eq!(provider.requests().len(), 6);
}
