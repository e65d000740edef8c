//! What a cache hit costs beside a miss: the OpenAI-compatible leaf against the scripted provider on loopback
//! (the fast upstream) bare, behind `CacheLayer` with every call a miss (`CacheControl::NoCache`: the upstream
//! call, the flight and the store write), and behind it with every call a hit, streamed and whole, from the
//! in-process store and (feature `redis`, `REDIS_URL`) from Redis.
//!
//! Criterion: `cargo bench -p tower-chat-cache --features redis --bench hit`.
//!
//! Counting mode, for callgrind (instructions per call are the slope between two call counts):
//! `CACHE_COUNT_VARIANT=upstream|miss|hit_streamed|hit_whole|hit_redis CACHE_COUNT_CALLS=N <binary>`.

use std::hint::black_box;

use criterion::{criterion_group, Criterion};
use futures_util::StreamExt;
use tower::{Layer, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{CallerIdentity, ChatError, ChatRequest, ChatStream, Message};
use tower_chat_cache::{CacheControl, CacheLayer, CacheOutcome, CacheStatus};

/// A typical short answer: eleven words (thirteen events with the usage and the finish).
const ANSWER: &str = "The capital of France is Paris, on the Seine, since the tenth century.";

fn request(streamed: bool) -> ChatRequest {
    ChatRequest::new(vec![Message::user("What is the capital of France?")])
        .with_extension(CallerIdentity::new("alice"))
        .stream(streamed)
}

async fn call<S>(service: S, request: ChatRequest)
where
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    let mut stream = service.oneshot(request).await.unwrap();
    while let Some(event) = stream.next().await {
        black_box(event.unwrap());
    }
}

async fn leaf() -> (ScriptedProvider, OpenAiChat) {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text(ANSWER)).await;
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .api_key("sk-bench")
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    (provider, leaf)
}

fn redis_layer() -> Option<CacheLayer> {
    #[cfg(feature = "redis")]
    if let Ok(url) = std::env::var("REDIS_URL") {
        let store = tower_chat_cache::RedisCacheStore::builder(url)
            .prefix(format!("tower-chat-bench:cache:{}:", std::process::id()))
            .build()
            .unwrap();
        return Some(CacheLayer::new().store(store));
    }
    None
}

/// Fill the cache and check that the next call is a hit.
async fn warm<S>(service: &S)
where
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone,
{
    call(service.clone(), request(true)).await;
    let outcome = CacheOutcome::new();
    call(
        service.clone(),
        request(true).with_extension(outcome.clone()),
    )
    .await;
    assert_eq!(outcome.get(), Some(CacheStatus::Hit));
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_provider, leaf) = runtime.block_on(leaf());
    let mut group = c.benchmark_group("cache");
    group.bench_function("upstream", |b| {
        b.iter(|| runtime.block_on(call(leaf.clone(), request(true))))
    });
    let cached = runtime.block_on(async { CacheLayer::new().layer(leaf.clone()) });
    group.bench_function("miss", |b| {
        b.iter(|| {
            runtime.block_on(call(
                cached.clone(),
                request(true).with_extension(CacheControl::NoCache),
            ))
        })
    });
    runtime.block_on(warm(&cached));
    group.bench_function("hit_streamed", |b| {
        b.iter(|| runtime.block_on(call(cached.clone(), request(true))))
    });
    group.bench_function("hit_whole", |b| {
        b.iter(|| runtime.block_on(call(cached.clone(), request(false))))
    });
    if let Some(layer) = runtime.block_on(async { redis_layer() }) {
        let redis = layer.layer(leaf.clone());
        runtime.block_on(warm(&redis));
        group.bench_function("hit_redis", |b| {
            b.iter(|| runtime.block_on(call(redis.clone(), request(true))))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);

/// Run `CACHE_COUNT_CALLS` calls of one variant and exit (for callgrind).
fn count(variant: &str) {
    let calls: usize = std::env::var("CACHE_COUNT_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (_provider, leaf) = leaf().await;
        let memory = CacheLayer::new().layer(leaf.clone());
        match variant {
            "upstream" => {
                for _ in 0..calls {
                    call(leaf.clone(), request(true)).await;
                }
            }
            "miss" => {
                for _ in 0..calls {
                    let refresh = request(true).with_extension(CacheControl::NoCache);
                    call(memory.clone(), refresh).await;
                }
            }
            "hit_streamed" | "hit_whole" => {
                warm(&memory).await;
                for _ in 0..calls {
                    call(memory.clone(), request(variant == "hit_streamed")).await;
                }
            }
            "hit_redis" => {
                let redis = redis_layer()
                    .expect("REDIS_URL and the redis feature")
                    .layer(leaf);
                warm(&redis).await;
                for _ in 0..calls {
                    call(redis.clone(), request(true)).await;
                }
            }
            other => panic!("unknown CACHE_COUNT_VARIANT {other}"),
        }
    });
}

fn main() {
    if let Ok(variant) = std::env::var("CACHE_COUNT_VARIANT") {
        count(&variant);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
