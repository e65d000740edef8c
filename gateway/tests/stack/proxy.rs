//! The gateway as a plain proxy (`--no-records --no-tracing`): answers as with the defaults, in both delivery
//! shapes, while no call is recorded and `/metrics` counts none; the defaults beside it record and count the
//! same requests, so each check fails if its switch stops leaving its layer out.

use crate::common;

use common::Harness;
use tower_chat::test_server::Reply;
use tower_chat_persistence::Store;

/// The calls in the gateway's store and the chat calls `/metrics` counted, after one plain and one streamed
/// request, each answered in full.
async fn recorded_and_counted(gw: &Harness) -> (usize, u64) {
    for stream in [false, true] {
        let answer = gw.chat(&common::request(stream, "hello")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.chat_text(stream), "hi there");
    }
    let calls = gw
        .records()
        .await
        .call_summaries(&tower_chat_persistence::CallQuery::default())
        .await
        .unwrap()
        .len();
    let scrape = common::get(&gw.url("/metrics")).await;
    let counted = scrape
        .body
        .lines()
        .filter(|line| line.starts_with("tower_chat_requests_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    (calls, counted)
}

#[tokio::test]
async fn the_proxy_profile_answers_alike_and_records_and_counts_nothing() {
    let defaults = Harness::start(|_, _| Reply::openai_text("hi there"), |_| {}).await;
    assert_eq!(recorded_and_counted(&defaults).await, (2, 2));
    let proxy = Harness::start(
        |_, _| Reply::openai_text("hi there"),
        |config| {
            config.record_calls = false;
            config.trace_calls = false;
        },
    )
    .await;
    assert_eq!(recorded_and_counted(&proxy).await, (0, 0));
}

#[tokio::test]
async fn without_records_a_previous_response_is_refused_not_looked_up() {
    let gw = Harness::start(
        |_, _| Reply::openai_text("hi there"),
        |config| config.record_calls = false,
    )
    .await;
    let answer = gw
        .post_json(
            "/v1/responses",
            &serde_json::json!({"model": "test-model", "input": "again",
                "previous_response_id": "resp_0123456789abcdef"}),
            &[],
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(
        answer.json()["error"]["code"],
        "previous_response_unavailable",
        "{}",
        answer.body
    );
}
