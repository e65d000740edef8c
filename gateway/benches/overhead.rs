//! The gateway's overhead per request, over loopback against a scripted upstream:
//!
//! - `leaf_direct`: `OpenAiChat` straight to the scripted provider (one HTTP hop), response collected;
//! - `stack_without_stores`: tracing + tool loop, no persistence or approval layer, without HTTP in front;
//! - `stack_in_process`: the gateway's stack (tracing + persistence to SQLite + approvals + tool loop with the
//!   three tools) without HTTP in front;
//! - `gateway_non_streaming` / `gateway_streaming`: an HTTP client → the gateway → the scripted provider, the
//!   answer read whole (two HTTP hops, parsing, the stack, the OpenAI response encoding);
//! - `messages_non_streaming` / `messages_streaming`, `responses_non_streaming` / `responses_streaming`: the
//!   same through `/v1/messages` (Anthropic) and `/v1/responses` (OpenAI Responses), so the formats' parsing and
//!   encoding can be compared with Chat Completions'.
//!
//! Gateway overhead per request = gateway − leaf_direct. The same 20-word answer in every case.

use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use tower::ServiceExt;
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{ChatRequest, ChatStreamExt, Message};
use tower_chat_gateway::{Config, Gateway};

const ANSWER: &str =
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen \
                      fifteen sixteen seventeen eighteen nineteen twenty";

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let files = tempfile::tempdir().unwrap();
    let (provider, addr, leaf, bare_stack, stack) = runtime.block_on(async {
        let provider = ScriptedProvider::start(|_, _| Reply::openai_text(ANSWER)).await;
        let mut config = Config::new(provider.base_url());
        config.files = Some(files.path().to_owned());
        config.no_upstream_key = true;
        config.db = files.path().join("bench.db");
        let gateway = Gateway::new(&config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(gateway.serve(listener, std::future::pending()));
        let leaf = OpenAiChat::builder()
            .base_url(provider.base_url())
            .build()
            .unwrap();
        let upstream = tower_chat_gateway::Upstream::OpenAi(leaf.clone());
        let bare_stack = tower_chat_gateway::stack(
            &config,
            upstream.clone(),
            tower_chat_gateway::StackOptions::default(),
        )
        .unwrap();
        // The same stack the gateway runs, persistence included (a second store file).
        config.db = files.path().join("bench-stack.db");
        let stores = tower_chat_gateway::stores(&config).await.unwrap();
        let stack = tower_chat_gateway::stack(
            &config,
            upstream,
            tower_chat_gateway::StackOptions {
                persistence: Some(&stores.persistence),
                approvals: Some(&stores.approvals),
                ..Default::default()
            },
        )
        .unwrap();
        (provider, addr, leaf, bare_stack, stack)
    });
    let request = || ChatRequest::new(vec![Message::user("count to twenty")]).model("test-model");
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let url = format!("http://{addr}/v1/chat/completions");
    let body = |stream: bool| {
        Bytes::from(
            json!({"model": "test-model", "stream": stream,
                "messages": [{"role": "user", "content": "count to twenty"}]})
            .to_string(),
        )
    };

    let mut group = c.benchmark_group("gateway");
    group.bench_function("leaf_direct", |b| {
        b.to_async(&runtime).iter(|| async {
            let response = leaf
                .clone()
                .oneshot(request())
                .await
                .unwrap()
                .collect_response()
                .await
                .unwrap();
            assert_eq!(response.text(), ANSWER);
        })
    });
    for (name, stack) in [
        ("stack_without_stores", &bare_stack),
        ("stack_in_process", &stack),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let response = stack
                    .clone()
                    .oneshot(request())
                    .await
                    .unwrap()
                    .collect_response()
                    .await
                    .unwrap();
                assert_eq!(response.text(), ANSWER);
            })
        });
    }
    let messages_url = format!("http://{addr}/v1/messages");
    let messages_body = |stream: bool| {
        Bytes::from(
            json!({"model": "test-model", "stream": stream, "max_tokens": 256,
                "messages": [{"role": "user", "content": "count to twenty"}]})
            .to_string(),
        )
    };
    let responses_url = format!("http://{addr}/v1/responses");
    let responses_body = |stream: bool| {
        Bytes::from(
            json!({"model": "test-model", "stream": stream, "input": "count to twenty"})
                .to_string(),
        )
    };
    type Body = fn(bool) -> Bytes;
    let cases: [(&str, &str, Body, bool); 6] = [
        ("gateway_non_streaming", &url, body, false),
        ("gateway_streaming", &url, body, true),
        (
            "messages_non_streaming",
            &messages_url,
            messages_body,
            false,
        ),
        ("messages_streaming", &messages_url, messages_body, true),
        (
            "responses_non_streaming",
            &responses_url,
            responses_body,
            false,
        ),
        ("responses_streaming", &responses_url, responses_body, true),
    ];
    for (name, url, body, stream) in cases {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| async {
                let request = http::Request::post(url)
                    .header("content-type", "application/json")
                    .body(Full::new(body(stream)))
                    .unwrap();
                let response = client.request(request).await.unwrap();
                assert_eq!(response.status(), 200);
                let bytes = response.into_body().collect().await.unwrap().to_bytes();
                assert!(bytes.len() > ANSWER.len());
            })
        });
    }
    group.finish();
    drop(provider);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
