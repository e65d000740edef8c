//! The console's call log over plain HTTP: real calls of two clients through the gateway, then the page's
//! filters (caller, model, outcome, time range), search (by id, by message words), cursor paging, refusals of
//! bad filters as console error pages, and the JSON poll that the page's script adds new calls from.

use crate::common;

use std::path::Path;

use common::{console_login, post, send, Answer, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const ALICE: (&str, &str) = ("authorization", "Bearer sk-alice");
const BOB: (&str, &str) = ("authorization", "Bearer sk-bob");

/// Answers in the model the request named; a request whose last message says "fail" is refused upstream.
pub(crate) fn answer_in_the_requested_model(req: &RecordedRequest, _index: usize) -> Reply {
    let model = req.body["model"].as_str().unwrap_or("unnamed").to_owned();
    let last = req.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    if last.contains("fail") {
        return Reply::json(
            400,
            json!({"error": {"message": "the upstream refuses this", "type": "invalid_request_error"}}),
        );
    }
    Reply::openai_stream(&[
        json!({"id": "chatcmpl-log", "model": model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Noted: "}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": last}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}),
    ])
}

async fn gateway(dir: &Path) -> Harness {
    std::fs::write(dir.join("clients"), "alice:sk-alice\nbob:sk-bob\n").unwrap();
    std::fs::write(dir.join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.join("clients"), dir.join("operators"));
    Harness::start(answer_in_the_requested_model, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
    })
    .await
}

async fn chat(
    gw: &Harness,
    who: (&str, &str),
    conversation: &str,
    model: &str,
    text: &str,
) -> Answer {
    let body = json!({"model": model, "messages": [{"role": "user", "content": text}]});
    post(
        &gw.url("/v1/chat/completions"),
        body.to_string(),
        &[who, ("x-conversation-id", conversation)],
    )
    .await
}

/// The call ids of a page's rows, in order.
pub(crate) fn rows(page: &str) -> Vec<String> {
    page.split("<tr data-call-id=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

#[tokio::test]
async fn the_call_log_filters_searches_pages_and_serves_new_calls_to_its_poll() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let first = chat(
        &gw,
        ALICE,
        "fjords",
        "model-a",
        "Which fjords of Norway are best?",
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let second = chat(
        &gw,
        BOB,
        "report",
        "model-b",
        "Summarise the quarterly report",
    )
    .await;
    assert_eq!(second.status, 200, "{}", second.body);
    let failed = chat(&gw, ALICE, "broken", "model-a", "please fail now").await;
    assert!(failed.status.as_u16() >= 400, "{}", failed.body);

    let cookie = console_login(&gw, OPS_KEY).await;
    let get = |path: &str| {
        let (url, cookie) = (gw.url(path), cookie.clone());
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let page = get("/console/calls").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let all = rows(&page.body);
    assert_eq!(all.len(), 3, "{}", page.body);
    for column in [
        "Time (UTC)",
        "Caller",
        "Model",
        "Outcome",
        "First message",
        "Tokens",
        "Cost",
        "Latency",
        "Time to first token",
    ] {
        assert!(
            page.body.contains(&format!("<th>{column}</th>")),
            "{column}"
        );
    }
    // Newest first; the failure says so in words, and every row links to its call on the timeline.
    assert!(page.body.contains("class=\"failed\""), "{}", page.body);
    assert!(
        page.body
            .contains("<strong class=\"outcome-error\">Error: failed ("),
        "{}",
        page.body
    );
    assert!(page.body.contains("Which fjords of Norway are best?"));
    assert!(page.body.contains("12 in / 5 out"));
    assert!(page.body.contains(&format!(
        "/console/conversation?id=alice%2Ffjords#call-{}",
        all[2]
    )));
    assert!(page.body.contains("data-poll=\"/console/api/calls\""));
    let timeline = get("/console/conversation?id=alice%2Ffjords").await;
    assert!(
        timeline.body.contains(&format!("id=\"call-{}\"", all[2])),
        "{}",
        timeline.body
    );

    // Filters, alone and together; the poll keeps them.
    let bob = get("/console/calls?caller=bob").await.body;
    assert_eq!(rows(&bob), [all[1].clone()]);
    assert!(
        bob.contains("data-poll=\"/console/api/calls?caller=bob\""),
        "{bob}"
    );
    assert_eq!(
        rows(&get("/console/calls?model=model-a").await.body),
        [all[0].clone(), all[2].clone()]
    );
    assert_eq!(
        rows(&get("/console/calls?status=failed").await.body),
        [all[0].clone()]
    );
    assert_eq!(
        rows(
            &get("/console/calls?status=completed&caller=alice")
                .await
                .body
        ),
        [all[2].clone()]
    );
    assert_eq!(
        rows(
            &get("/console/calls?q=&caller=&model=&status=&since=&until=")
                .await
                .body
        ),
        all,
        "empty form fields filter nothing"
    );
    let future = get("/console/calls?since=2999-01-01T00:00").await.body;
    assert!(rows(&future).is_empty());
    assert!(
        future.contains("No recorded call matches these filters."),
        "{future}"
    );
    assert_eq!(
        rows(
            &get("/console/calls?since=2000-01-01T00:00&until=2999-01-01T00:00:00")
                .await
                .body
        )
        .len(),
        3
    );
    // Search: message words (full-text), a call id, a conversation id.
    assert_eq!(
        rows(&get("/console/calls?q=norway+FJORDS").await.body),
        [all[2].clone()]
    );
    assert_eq!(
        rows(&get("/console/calls?q=quarterly").await.body),
        [all[1].clone()]
    );
    assert_eq!(
        rows(&get(&format!("/console/calls?q={}", all[1])).await.body),
        [all[1].clone()]
    );
    assert_eq!(
        rows(&get("/console/calls?q=alice%2Fbroken").await.body),
        [all[0].clone()]
    );
    assert!(rows(&get("/console/calls?q=kangaroo").await.body).is_empty());

    // Bad filters are the console's error pages, never a silent default.
    for (path, says) in [
        ("/console/calls?status=error", "unknown call status"),
        ("/console/calls?since=yesterday", "`since` is not a time"),
        (
            "/console/calls?since=2024-02-01T00:00&until=2024-01-01T00:00",
            "`since` must be before `until`",
        ),
        (
            "/console/calls?before=not-a-cursor",
            "invalid call log cursor",
        ),
        (
            "/console/calls?after=1.61",
            "`after` is for /console/api/calls",
        ),
    ] {
        let refused = get(path).await;
        assert_eq!(refused.status, 400, "{path}: {}", refused.body);
        assert!(refused.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
        assert!(refused.body.contains(says), "{path}: {}", refused.body);
        assert!(refused.body.contains("<nav>"), "inside the console's frame");
    }

    // The poll: nothing newer yet, then the call made since, with the page's filters applied.
    let poll = |query: String| async move {
        let answer = get(&format!("/console/api/calls?{query}")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.json()
    };
    let latest = poll(String::new()).await;
    let newest = latest["newest"].as_str().unwrap().to_owned();
    assert_eq!(latest["data"][0]["call_id"], all[0]);
    let quiet = poll(format!("after={newest}")).await;
    assert_eq!(quiet["data"], json!([]));
    assert_eq!(quiet["newest"], newest.as_str());
    // Older than the newest: the page below it, without a poll.
    let older = get(&format!("/console/calls?before={newest}")).await.body;
    assert_eq!(rows(&older), [all[1].clone(), all[2].clone()]);
    assert!(!older.contains("data-poll"), "{older}");
    assert!(older.contains("id=\"newest-calls\""), "{older}");

    let again = chat(
        &gw,
        ALICE,
        "fjords",
        "model-a",
        "And the best month to visit?",
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    let arrived = poll(format!("after={newest}")).await;
    let data = arrived["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{arrived}");
    let row: &Value = &data[0];
    assert_eq!(row["caller"], "alice");
    assert_eq!(row["model"], "model-a");
    assert_eq!(row["outcome"], "completed");
    assert_eq!(row["first_message"], "And the best month to visit?");
    assert_eq!(row["tokens"], "12 in / 5 out");
    assert!(row["timeline"]
        .as_str()
        .unwrap()
        .starts_with("/console/conversation?id=alice%2Ffjords#call-"));
    assert_ne!(arrived["newest"], newest.as_str());
    assert_eq!(
        poll(format!("caller=bob&after={newest}")).await["data"],
        json!([])
    );
    assert_eq!(
        poll(format!("q=month+visit&after={newest}")).await["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // The poll's refusals are JSON, like the console's other API.
    for query in ["after=junk", "status=error", "before=1.61"] {
        let refused = get(&format!("/console/api/calls?{query}")).await;
        assert_eq!(refused.status, 400, "{query}");
        assert!(
            refused.json()["error"].is_string(),
            "{query}: {}",
            refused.body
        );
    }
    // Nothing without a session.
    assert_eq!(
        send("GET", &gw.url("/console/api/calls"), &[], "")
            .await
            .status,
        401
    );
    let page = send("GET", &gw.url("/console/calls"), &[], "").await;
    assert_eq!(page.status, 303);
}
