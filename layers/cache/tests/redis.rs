//! The Redis store against a real Redis (`REDIS_URL`; skipped with a message when unset, a failure under CI),
//! and an unreachable one (a closed port): a miss, never an error.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use tower::ServiceExt;
use tower_chat::ChatStreamExt;
use tower_chat_cache::{
    CacheKey, CacheLayer, CacheOutcome, CacheScope, CacheStatus, RedisCacheStore,
};

/// A key prefix of this test's own, so that tests running at once never share entries.
fn prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("tower-chat-test:cache:{test}:{nanos}:")
}

async fn status_of<S>(service: &S, request: tower_chat::ChatRequest) -> (CacheStatus, String)
where
    S: tower::Service<
            tower_chat::ChatRequest,
            Response = tower_chat::ChatStream,
            Error = tower_chat::ChatError,
        > + Clone,
{
    let outcome = CacheOutcome::new();
    let response = service
        .clone()
        .oneshot(request.with_extension(outcome.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    (outcome.get().unwrap(), response.text().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_answers_kept_compressed_with_their_time_to_live() {
    let Some(url) = redis_url() else { return };
    let prefix = prefix("replicas");
    let replica = || {
        let store = RedisCacheStore::builder(url.as_str())
            .prefix(prefix.as_str())
            .build()
            .unwrap();
        CacheLayer::new()
            .store(store)
            .model_ttl(MODEL, Duration::from_secs(90))
    };
    let (one, two) = (replica(), replica());
    let long = "All work and no play makes a dull answer. ".repeat(40);
    let (first, model_one) = cached_answer(&one, Delivery::OneByOne, answer(&long));
    let (second, model_two) = cached_answer(&two, Delivery::OneByOne, answer(&long));

    assert_eq!(
        status_of(&first, ask("alice", "Hi")).await.0,
        CacheStatus::Miss
    );
    until("stored", || async { one.stats().stored == 1 }).await;
    let (status, text) = status_of(&second, ask("alice", "Hi").stream(false)).await;
    assert_eq!((status, text.as_str()), (CacheStatus::Hit, long.as_str()));
    assert_eq!((model_one.calls(), model_two.calls()), (1, 0));
    // Another caller of the other replica does not see it.
    assert_eq!(
        status_of(&second, ask("bob", "Hi")).await.0,
        CacheStatus::Miss
    );

    // The entry: LZ4 of the answer's JSON, expiring within the model's time to live.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let key = CacheKey::of(&ask("alice", "Hi"), Some(MODEL), &CacheScope::Caller);
    let redis_key = format!("{prefix}{key}");
    let bytes: Vec<u8> = redis::cmd("GET")
        .arg(&redis_key)
        .query_async(&mut connection)
        .await
        .unwrap();
    let json = lz4_flex::block::decompress_size_prepended(&bytes).unwrap();
    assert!(
        bytes.len() * 4 < json.len(),
        "{} compressed from {}",
        bytes.len(),
        json.len()
    );
    let events: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(events.as_array().unwrap().last().unwrap()["type"], "finish");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&redis_key)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!((1..=90_000).contains(&ttl), "{ttl}");
}

#[tokio::test]
async fn an_entry_that_is_not_an_answer_is_a_miss() {
    let Some(url) = redis_url() else { return };
    let prefix = prefix("garbage");
    let store = RedisCacheStore::builder(url.as_str())
        .prefix(prefix.as_str())
        .build()
        .unwrap();
    let layer = CacheLayer::new().store(store);
    let (cache, model) = cached_answer(&layer, Delivery::OneByOne, answer("Hello!"));
    let key = CacheKey::of(&ask("alice", "Hi"), Some(MODEL), &CacheScope::Caller);
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("SET")
        .arg(format!("{prefix}{key}"))
        .arg(b"\x05\x00\x00\x00garbage".as_slice())
        .arg("PX")
        .arg(60_000)
        .query_async(&mut connection)
        .await
        .unwrap();
    let (status, text) = status_of(&cache, ask("alice", "Hi")).await;
    assert_eq!((status, text.as_str()), (CacheStatus::Miss, "Hello!"));
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn a_redis_that_refuses_connections_is_a_miss_not_an_error() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let store = RedisCacheStore::new("redis://127.0.0.1:1").unwrap();
    let layer = CacheLayer::new().store(store);
    let (cache, model) = cached_answer(&layer, Delivery::OneByOne, answer("Hello!"));
    for _ in 0..2 {
        let (status, text) = status_of(&cache, ask("alice", "Hi")).await;
        assert_eq!((status, text.as_str()), (CacheStatus::Miss, "Hello!"));
        until("the call in flight ends", || async {
            layer.stats().in_flight == 0
        })
        .await;
    }
    assert_eq!(model.calls(), 2);
    assert_eq!(layer.stats().store_errors, 4, "two reads, two writes");
}

#[test]
fn a_url_that_is_not_redis_is_refused_when_built() {
    let error = RedisCacheStore::new("http://127.0.0.1:6379").unwrap_err();
    assert!(error.to_string().contains("bad Redis URL"), "{error}");
}
