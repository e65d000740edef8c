//! Calls the limits refused before they reached any provider, as the console shows them (rendered HTML over
//! plain HTTP; a browser adds nothing to reading text): "refused by limits, not sent" with the limit in dollars
//! and the time to retry at, no upstream named as the answerer, and the usage page counting refusals apart
//! from upstream errors.

use crate::common;

use common::{console_login, post, send, Harness};
use serde_json::json;
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config_file::ConfigFile;

const OPS_KEY: &str = "sk-ops-carol-0123456789";

/// A $0.50 daily budget at $1 per million tokens: the first call's reported 600,000 input tokens ($0.60) spend
/// it, the second is refused.
const LIMITS: &str = r#"
[limits.default]
cost_per_day_usd = 0.5

[limits.prices."test-model"]
input = 1.0
output = 1.0
"#;

fn expensive(_request: &RecordedRequest, _index: usize) -> Reply {
    Reply::openai_stream(&[
        json!({"id": "chatcmpl-1", "model": "test-model", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a long read"}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 600000, "completion_tokens": 3, "total_tokens": 600003}}),
    ])
}

fn row_of<'a>(page: &'a str, status: &str) -> &'a str {
    let marker = format!("data-status=\"{status}\"");
    let start = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no {status} row: {page}"));
    let rest = &page[start..];
    &rest[..rest.find("</tr>").unwrap()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_the_limits_reads_as_not_sent_in_dollars_with_a_time_to_retry() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.path().join("clients"), dir.path().join("operators"));
    let file = ConfigFile::parse(LIMITS, "gateway.toml").unwrap();
    let gw = Harness::start(expensive, move |c| {
        c.file = file;
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
    })
    .await;
    let body = json!({"model": "test-model", "max_tokens": 10,
        "messages": [{"role": "user", "content": "read me the report"}]});
    let url = gw.url("/v1/chat/completions");
    let ask = || {
        post(
            &url,
            body.to_string(),
            &[
                ("authorization", "Bearer sk-alice"),
                ("x-conversation-id", "budget"),
            ],
        )
    };
    let first = ask().await;
    assert_eq!(first.status, 200, "{}", first.body);
    let refused = ask().await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(gw.provider.requests().len(), 1, "the refusal was not sent");

    let cookie = console_login(&gw, OPS_KEY).await;
    let get = |path: &str| {
        let (url, cookie) = (gw.url(path), cookie.clone());
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let log = get("/console/calls").await;
    assert_eq!(log.status, 200);
    let row = row_of(&log.body, "refused");
    assert!(row.contains("refused by limits, not sent"), "{row}");
    assert!(row.contains("limit of $0.50"), "{row}");
    assert!(
        row.contains("retry at ") && row.contains(" GMT (in "),
        "{row}"
    );
    assert!(
        !row.contains("retry after") && !row.contains("500000000"),
        "{row}"
    );
    assert!(
        !row.contains("class=\"failed\""),
        "a refusal is not an upstream error: {row}"
    );

    let timeline = get("/console/conversation?id=alice%2Fbudget").await;
    assert_eq!(timeline.status, 200);
    assert!(
        timeline.body.contains("nobody (not sent)"),
        "{}",
        timeline.body
    );

    let usage = get("/console/usage").await;
    assert_eq!(usage.status, 200);
    assert!(usage.body.contains("refused, not sent"), "{}", usage.body);
    let all = &usage.body[usage.body.rfind(">all<").expect("the all row")..];
    assert!(
        all.contains("data-label=\"errors\">0<")
            && all.contains("data-label=\"refused, not sent\">1<"),
        "{all}"
    );
}
