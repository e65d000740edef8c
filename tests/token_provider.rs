//! Bearer tokens from a token provider over loopback: sent instead of a key, cached between calls, a failing
//! provider a typed error before anything is sent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower::ServiceExt;
use tower_chat::leaf::{AccessToken, TokenFuture, TokenProvider};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{ChatError, ChatRequest, ChatStreamExt, ErrorKind, Message};

/// Hands out `entra-token-N`, valid for an hour, counting fetches (shared with the test through an `Arc`).
#[derive(Debug, Clone)]
struct Counting(Arc<AtomicUsize>);

impl TokenProvider for Counting {
    fn fetch_token(&self) -> TokenFuture<'_> {
        Box::pin(async move {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            Ok(AccessToken::new(
                format!("entra-token-{n}"),
                Some(Duration::from_secs(3600)),
            ))
        })
    }
}

#[derive(Debug)]
struct Unreachable;

impl TokenProvider for Unreachable {
    fn fetch_token(&self) -> TokenFuture<'_> {
        Box::pin(async {
            Err(ChatError::new(
                ErrorKind::Connection,
                "the token endpoint could not be reached",
            ))
        })
    }
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Hi")])
}

#[tokio::test]
async fn tokens_go_as_bearer_and_are_fetched_once_while_fresh() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hello")).await;
    let fetches = Arc::new(AtomicUsize::new(0));
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("gpt-4o-mini")
        .token_provider(Counting(fetches.clone()))
        .build()
        .unwrap();
    for _ in 0..3 {
        let reply = leaf
            .clone()
            .oneshot(request())
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(reply.text(), "Hello");
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 1);
    for recorded in provider.requests() {
        assert_eq!(
            recorded.headers["authorization"].to_str().unwrap(),
            "Bearer entra-token-0"
        );
    }
    let debug = format!("{leaf:?}");
    assert!(!debug.contains("entra-token"), "{debug}");
}

#[tokio::test]
async fn a_failing_token_provider_fails_the_call_before_sending() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hello")).await;
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("gpt-4o-mini")
        .token_provider(Unreachable)
        .build()
        .unwrap();
    let err = leaf.oneshot(request()).await.err().expect("an error");
    assert_eq!(err.kind(), &ErrorKind::Connection);
    assert!(provider.requests().is_empty());
}

#[test]
fn a_key_and_a_token_provider_together_are_refused_at_build_time() {
    let err = OpenAiChat::builder()
        .api_key("sk-1")
        .token_provider(Unreachable)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
}
