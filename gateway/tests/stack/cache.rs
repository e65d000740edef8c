//! The response cache at the gateway (`[cache]`): an identical request is answered from the cache, streamed or
//! not whichever way the first was asked, with `x-cache: hit` and without calling the upstream; the hit is
//! recorded as a call marked cached; `Cache-Control: no-store` bypasses the cache and `no-cache` refreshes it;
//! without `[cache]` nothing is cached and no `x-cache` is sent; identical requests in flight together reach the
//! upstream once.

use crate::common;

use std::time::Duration;

use serde_json::json;
use tower_chat::test_server::Reply;
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_persistence::{CallQuery, Store};

use common::{request, Harness};

async fn gateway(cache: Option<&str>) -> Harness {
    let file = ConfigFile::parse(cache.unwrap_or(""), "gateway.toml").unwrap();
    Harness::start(
        |_, index| Reply::openai_text(&format!("answer {index}")),
        |config| config.file = file,
    )
    .await
}

fn x_cache(answer: &common::Answer) -> Option<&str> {
    answer.headers.get("x-cache").map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn an_identical_request_is_answered_from_the_cache_in_either_shape() {
    let gw = gateway(Some("[cache]\nttl_seconds = 600\n")).await;
    let first = gw.chat(&request(false, "What is 2 + 2?")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(x_cache(&first), Some("miss"));
    assert_eq!(first.chat_text(false), "answer 0");
    for stream in [true, false] {
        let again = gw.chat(&request(stream, "What is 2 + 2?")).await;
        assert_eq!(again.status, 200, "{}", again.body);
        assert_eq!(x_cache(&again), Some("hit"), "stream={stream}");
        assert_eq!(again.chat_text(stream), "answer 0", "stream={stream}");
    }
    assert_eq!(gw.provider.requests().len(), 1, "one upstream call");

    // Another question is a miss; `no-store` goes to the upstream and leaves the cache alone; `no-cache` asks
    // the upstream and replaces the stored answer.
    let other = gw.chat(&request(false, "What is 3 + 3?")).await;
    assert_eq!(x_cache(&other), Some("miss"));
    let bypass = gw
        .post_json(
            "/v1/chat/completions",
            &request(false, "What is 2 + 2?"),
            &[("cache-control", "no-store")],
        )
        .await;
    assert_eq!(x_cache(&bypass), Some("bypass"));
    assert_eq!(bypass.chat_text(false), "answer 2");
    let refreshed = gw
        .post_json(
            "/v1/chat/completions",
            &request(false, "What is 2 + 2?"),
            &[("cache-control", "no-cache")],
        )
        .await;
    assert_eq!(refreshed.chat_text(false), "answer 3");
    let after = gw.chat(&request(false, "What is 2 + 2?")).await;
    assert_eq!(x_cache(&after), Some("hit"));
    assert_eq!(after.chat_text(false), "answer 3", "the refreshed answer");
    assert_eq!(gw.provider.requests().len(), 4);

    // Every answer is recorded; the hits as cached.
    let store = gw.records().await;
    let calls = store.call_summaries(&CallQuery::default()).await.unwrap();
    assert_eq!(calls.len(), 7, "{calls:#?}");
    let mut cached = 0;
    for call in &calls {
        let record = store.call(&call.call_id).await.unwrap().unwrap();
        cached += usize::from(record.from_response_cache());
    }
    assert_eq!(cached, 3, "the three hits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_identical_concurrent_requests_reach_the_upstream_once() {
    let file = ConfigFile::parse("[cache]\nttl_seconds = 600\n", "gateway.toml").unwrap();
    // The upstream takes its time, so every request arrives while the first is still in flight.
    let gw = Harness::start(
        |_, index| {
            Reply::openai_text(&format!("answer {index}")).delayed(Duration::from_millis(400))
        },
        |config| config.file = file,
    )
    .await;
    let body = request(true, "What is 2 + 2?");
    let answers = futures_util::future::join_all((0..100).map(|_| gw.chat(&body))).await;
    let mut misses = 0;
    for answer in &answers {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.chat_text(true), "answer 0");
        misses += usize::from(x_cache(answer) == Some("miss"));
    }
    assert_eq!(misses, 1, "one request called the model, 99 followed it");
    assert_eq!(gw.provider.requests().len(), 1, "one upstream call");
}

#[tokio::test]
async fn a_routes_time_to_live_overrides_the_default() {
    let gw = gateway(Some(
        "[cache]\nttl_seconds = 600\n\n[cache.routes]\nresponses = 0\n",
    ))
    .await;
    let responses = json!({"model": "test-model", "input": "What is 2 + 2?"});
    for _ in 0..2 {
        let answer = gw.post_json("/v1/responses", &responses, &[]).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(
            x_cache(&answer),
            Some("bypass"),
            "never cached on this route"
        );
    }
    for expected in ["miss", "hit"] {
        let answer = gw.chat(&request(false, "What is 2 + 2?")).await;
        assert_eq!(
            x_cache(&answer),
            Some(expected),
            "the default on the others"
        );
    }
    assert_eq!(gw.provider.requests().len(), 3);
}

#[tokio::test]
async fn without_a_cache_table_nothing_is_cached() {
    let gw = gateway(None).await;
    for _ in 0..2 {
        let answer = gw.chat(&request(false, "What is 2 + 2?")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(x_cache(&answer), None);
    }
    assert_eq!(gw.provider.requests().len(), 2);
}

#[tokio::test]
async fn a_redis_cache_is_shared_by_two_gateways() {
    let Some(url) = tower_chat_testkit::redis_url() else {
        return;
    };
    std::env::set_var("TOWER_CHAT_GATEWAY_TEST_CACHE_REDIS", &url);
    // A question of its own, so earlier runs' entries cannot answer it.
    let question = format!("What is 2 + 2? ({})", uuid_like());
    let toml =
        "[cache]\nstore = \"redis\"\nredis_url_env = \"TOWER_CHAT_GATEWAY_TEST_CACHE_REDIS\"\n";
    let (a, b) = (gateway(Some(toml)).await, gateway(Some(toml)).await);
    let first = a.chat(&request(true, &question)).await;
    assert_eq!(x_cache(&first), Some("miss"), "{}", first.body);
    let second = b.chat(&request(false, &question)).await;
    assert_eq!(x_cache(&second), Some("hit"), "{}", second.body);
    assert_eq!(second.chat_text(false), "answer 0");
    assert_eq!(
        b.provider.requests().len(),
        0,
        "the second gateway's upstream is not called"
    );
}

/// A value no earlier run used.
fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}
