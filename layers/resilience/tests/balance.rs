//! Balance across deployments of one model, against scripted providers over loopback HTTP.

mod common;

use std::time::Duration;

use tower::ServiceExt;
use tower_chat::{ChatRequest, ChatStreamExt, ConversationId, Message};
use tower_chat_resilience::{
    is_circuit_open, Balance, BreakerState, CircuitBreakerLayer, Deployment,
};

use common::*;

fn request() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hi")])
}

async fn call(balance: &Balance, request: ChatRequest) -> Result<String, tower_chat::ChatError> {
    let stream = balance.clone().oneshot(request).await?;
    Ok(stream.collect_response().await?.text().to_owned())
}

#[tokio::test]
async fn a_dead_deployment_is_skipped_once_its_circuit_opens() {
    let dead = scripted(vec![status(503)]).await;
    let alive = scripted(vec![Reply::openai_text("alive")]).await;
    let balance = Balance::builder()
        // Weighted so heavily that its failures alone (which raise its latency estimate) do not steer calls away:
        // the circuit does.
        .deployment(Deployment::new("dead", 1000, openai(&dead, "m")))
        .deployment(Deployment::new("alive", 1, openai(&alive, "m")))
        .breaker(CircuitBreakerLayer::new().consecutive_failures(2))
        .build()
        .unwrap();
    let mut failures = 0;
    for _ in 0..30 {
        if call(&balance, request()).await.is_err() {
            failures += 1;
        }
    }
    // The dead one got exactly the calls that opened its circuit, then none.
    assert_eq!(dead.requests().len(), 2);
    assert_eq!(failures, 2);
    assert_eq!(alive.requests().len(), 28);
    let states: Vec<BreakerState> = balance.breakers().iter().map(|b| b.state()).collect();
    assert_eq!(states, vec![BreakerState::Open, BreakerState::Closed]);
}

#[tokio::test]
async fn calls_go_to_the_faster_deployment() {
    let slow = scripted(vec![
        Reply::openai_text("slow").delayed(Duration::from_millis(40))
    ])
    .await;
    let fast = scripted(vec![Reply::openai_text("fast")]).await;
    let balance = Balance::builder()
        .deployment(Deployment::new("slow", 1, openai(&slow, "m")))
        .deployment(Deployment::new("fast", 1, openai(&fast, "m")))
        .default_rtt(Duration::from_millis(1))
        .build()
        .unwrap();
    for _ in 0..20 {
        call(&balance, request()).await.unwrap();
    }
    // Once measured, the slow one (40 ms to its first event) loses every comparison.
    assert!(slow.requests().len() <= 1, "{}", slow.requests().len());
    assert!(fast.requests().len() >= 19);
}

#[tokio::test]
async fn conversations_stick_to_their_deployment() {
    let providers = [
        scripted(vec![Reply::openai_text("a")]).await,
        scripted(vec![Reply::openai_text("b")]).await,
        scripted(vec![Reply::openai_text("c")]).await,
    ];
    let mut builder = Balance::builder().sticky(true);
    for (i, p) in providers.iter().enumerate() {
        builder = builder.deployment(Deployment::new(format!("d{i}"), 1, openai(p, "m")));
    }
    let balance = builder.build().unwrap();
    let mut used = std::collections::HashSet::new();
    for c in 0..12 {
        let mut answers = std::collections::HashSet::new();
        for _ in 0..3 {
            let request =
                request().with_extension(ConversationId::new(format!("conversation-{c}")));
            answers.insert(call(&balance, request).await.unwrap());
        }
        assert_eq!(answers.len(), 1, "conversation-{c} moved: {answers:?}");
        used.extend(answers);
    }
    assert!(used.len() >= 2, "{used:?}");
    assert_eq!(
        providers.iter().map(|p| p.requests().len()).sum::<usize>(),
        36
    );
}

#[tokio::test(start_paused = true)]
async fn every_circuit_open_fails_at_once() {
    let a = scripted(vec![status(500)]).await;
    let balance = Balance::builder()
        .deployment(Deployment::new("a", 1, openai(&a, "m")))
        .breaker(CircuitBreakerLayer::new().consecutive_failures(1))
        .build()
        .unwrap();
    assert!(!is_circuit_open(
        &call(&balance, request()).await.unwrap_err()
    ));
    let error = call(&balance, request()).await.unwrap_err();
    assert!(is_circuit_open(&error), "{error}");
    assert_eq!(a.requests().len(), 1);
}

#[test]
fn a_balancer_without_deployments_is_an_error_not_a_panic() {
    let Err(error) = Balance::builder().build() else {
        panic!("a balancer without deployments was built");
    };
    assert_eq!(error.kind(), &tower_chat::ErrorKind::InvalidRequest);
    assert!(
        error.to_string().contains("at least one deployment"),
        "{error}"
    );
}
