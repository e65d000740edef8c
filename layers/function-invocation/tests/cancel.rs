//! Cancellation: dropping the stream or cancelling the request's token stops tool bodies and model calls.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::{CancellationToken, ChatError, ChatEvent, ChatRequest, ChatStream, ErrorKind};
use tower_chat_function_invocation::{
    tool_json, CompiledTool, FunctionInvocationLayer, ToolContext,
};

struct Probe {
    started: AtomicUsize,
    dropped: AtomicUsize,
    token_seen: AtomicUsize,
}

struct OnDrop(Arc<Probe>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// A tool that never finishes; it reports when it started, when its future was dropped, and when the context's
/// token fired in work it spawned.
fn hanging(probe: Arc<Probe>) -> CompiledTool {
    tool_json(
        "hang",
        "",
        json!({"type": "object"}),
        move |_v: Value, ctx: ToolContext| {
            let probe = probe.clone();
            async move {
                let _guard = OnDrop(probe.clone());
                probe.started.fetch_add(1, Ordering::SeqCst);
                let token = ctx.cancellation().clone();
                let spawned = probe.clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    spawned.token_seen.fetch_add(1, Ordering::SeqCst);
                });
                std::future::pending::<()>().await;
                Ok::<_, String>("never")
            }
        },
    )
    .compile()
    .unwrap()
}

fn probe() -> Arc<Probe> {
    Arc::new(Probe {
        started: AtomicUsize::new(0),
        dropped: AtomicUsize::new(0),
        token_seen: AtomicUsize::new(0),
    })
}

/// Poll the stream until the hanging tool has started.
async fn until_started(stream: &mut ChatStream, probe: &Probe) {
    for _ in 0..500 {
        if probe.started.load(Ordering::SeqCst) > 0 {
            return;
        }
        let _ = tokio::time::timeout(Duration::from_millis(2), stream.next()).await;
    }
    panic!("the tool never started");
}

async fn settle(probe: &Probe) {
    for _ in 0..500 {
        if probe.token_seen.load(Ordering::SeqCst) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test]
async fn dropping_the_stream_cancels_running_tools_and_calls_no_model() {
    for shape in SHAPES {
        let probe = probe();
        let (inner, script) = scripted(
            shape,
            vec![calls(&[("a", "hang", json!({}))]), answer("never")],
        );
        let service = stack(
            FunctionInvocationLayer::new()
                .tool(hanging(probe.clone()))
                .unwrap(),
            inner,
        );
        let mut stream = service.oneshot(user("x")).await.unwrap();
        until_started(&mut stream, &probe).await;
        assert_eq!(probe.dropped.load(Ordering::SeqCst), 0);
        drop(stream);
        assert_eq!(probe.dropped.load(Ordering::SeqCst), 1, "{shape:?}");
        settle(&probe).await;
        assert_eq!(probe.token_seen.load(Ordering::SeqCst), 1, "{shape:?}");
        assert_eq!(script.calls(), 1);
    }
}

#[tokio::test]
async fn cancelling_the_request_token_stops_tools_promptly() {
    for shape in SHAPES {
        let probe = probe();
        let (inner, script) = scripted(
            shape,
            vec![calls(&[("a", "hang", json!({}))]), answer("never")],
        );
        let service = stack(
            FunctionInvocationLayer::new()
                .tool(hanging(probe.clone()))
                .unwrap(),
            inner,
        );
        let token = CancellationToken::new();
        let request = user("x").with_extension(token.clone());
        let mut stream = service.oneshot(request).await.unwrap();
        until_started(&mut stream, &probe).await;
        token.cancel();
        let item = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("cancellation was not prompt");
        assert_eq!(item.unwrap().unwrap_err().kind(), &ErrorKind::Cancelled);
        assert!(stream.next().await.is_none());
        assert_eq!(probe.dropped.load(Ordering::SeqCst), 1, "{shape:?}");
        settle(&probe).await;
        assert_eq!(probe.token_seen.load(Ordering::SeqCst), 1);
        assert_eq!(script.calls(), 1, "no further model call");
    }
}

#[tokio::test]
async fn a_cancelled_request_never_reaches_the_model() {
    let (inner, script) = scripted(Delivery::AllAtOnce, vec![answer("x")]);
    let token = CancellationToken::new();
    token.cancel();
    let error = stack(FunctionInvocationLayer::new(), inner)
        .oneshot(user("x").with_extension(token))
        .await
        .err()
        .unwrap();
    assert_eq!(error.kind(), &ErrorKind::Cancelled);
    assert_eq!(script.calls(), 0);
}

#[tokio::test]
async fn cancelling_while_the_model_streams_ends_the_stream() {
    let inner = tower::service_fn(|_req: ChatRequest| async {
        let stream: ChatStream = Box::pin(
            futures_util::stream::iter(vec![Ok(ChatEvent::text("thinking"))])
                .chain(futures_util::stream::pending()),
        );
        Ok::<_, ChatError>(stream)
    });
    let token = CancellationToken::new();
    let service = tower::Layer::layer(&FunctionInvocationLayer::new(), inner);
    let mut stream = service
        .oneshot(user("x").with_extension(token.clone()))
        .await
        .unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ChatEvent::text("thinking")
    );
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        token.cancel();
    });
    let item = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("cancellation was not prompt");
    assert_eq!(item.unwrap().unwrap_err().kind(), &ErrorKind::Cancelled);
    canceller.await.unwrap();
}
