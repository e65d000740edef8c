//! What the gateway records of the calls its content policy decided, over real HTTP: the policy sits outside the
//! records (it applies to a whole turn, a record is made per model round inside it), and still the call log
//! holds what the client saw — a redacted answer redacted, a blocked one withheld and marked blocked, a refused
//! request as a refusal with its verdict — and the withheld key is found by no search and is nowhere in the
//! database's files. The same for an answer a moderation service flagged, streamed or not.

use crate::common;

use std::time::Duration;

use common::{console_login, post, send, Harness};
use serde_json::json;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_persistence::{CallQuery, Store};

const KEY: &str = "AKIAIOSFODNN7EXAMPLE";
const OPS_KEY: &str = "sk-ops-carol-0123456789";

/// The upstream: a key when asked for one, an email when asked where to write; both cut across deltas.
fn upstream(request: &RecordedRequest, _index: usize) -> Reply {
    let last = request.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let text = if last.contains("key") {
        format!("The bucket key is {KEY} and it rotates")
    } else {
        "Write to ops@zanzibar.example today".to_owned()
    };
    let mut chunks = vec![json!({"id": "chatcmpl-scripted", "model": "scripted-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})];
    for piece in text.as_bytes().chunks(6) {
        let piece = std::str::from_utf8(piece).unwrap();
        chunks.push(json!({"choices": [{"index": 0, "delta": {"content": piece}}]}));
    }
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    chunks.push(json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}}));
    Reply::openai_stream(&chunks)
}

/// The call ids and outcomes of a call log page's rows, in order.
fn rows(page: &str) -> Vec<(String, String)> {
    page.split("<tr data-call-id=\"")
        .skip(1)
        .map(|rest| {
            let id = rest[..rest.find('"').unwrap()].to_owned();
            let status = rest.split("data-status=\"").nth(1).unwrap();
            (id, status[..status.find('"').unwrap()].to_owned())
        })
        .collect()
}

fn anywhere_in(dir: &std::path::Path, needle: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .filter(|path| {
            std::fs::read(path)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
        })
        .map(|path| path.display().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_policy_withheld_is_stored_searched_and_shown_withheld() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.path().join("clients"), dir.path().join("operators"));
    let file =
        ConfigFile::parse(common::GUARDRAIL_SECRETS_AND_PERSONAL_DATA, "gateway.toml").unwrap();
    let mut gw = Harness::start(upstream, move |c| {
        c.file = file;
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
    })
    .await;
    let chat = |conversation: &'static str, text: String, stream: bool| {
        let body = json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": text}]});
        let url = gw.url("/v1/chat/completions");
        async move {
            post(
                &url,
                body.to_string(),
                &[
                    ("authorization", "Bearer sk-alice"),
                    ("x-conversation-id", conversation),
                ],
            )
            .await
        }
    };

    let refused = chat("refused", format!("is {KEY} still valid?"), false).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let blocked = chat("blocked", "which key opens the bucket?".into(), true).await;
    assert_eq!(blocked.status, 200, "{}", blocked.body);
    assert!(blocked.body.contains("content_filter"), "{}", blocked.body);
    assert!(!blocked.body.contains("AKIA"), "{}", blocked.body);
    let redacted = chat("redacted", "where do I write?".into(), false).await;
    assert_eq!(redacted.status, 200, "{}", redacted.body);
    assert_eq!(
        redacted.json()["choices"][0]["message"]["content"],
        "Write to [REDACTED:email] today"
    );

    // A blocked answer's record is handed to the writer as the policy drops the stream, without waiting for it.
    let store = gw.records().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let calls = loop {
        let calls = store.call_summaries(&CallQuery::default()).await.unwrap();
        if calls.len() == 3 || tokio::time::Instant::now() > deadline {
            break calls;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(calls.len(), 3, "{calls:#?}");

    let cookie = console_login(&gw, OPS_KEY).await;
    let get = |path: String| {
        let (url, cookie) = (gw.url(&path), cookie.clone());
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let log = get("/console/calls".into()).await;
    assert_eq!(log.status, 200);
    let mut statuses: Vec<String> = rows(&log.body).into_iter().map(|(_, s)| s).collect();
    statuses.sort();
    assert_eq!(
        statuses,
        ["blocked", "completed", "refused"],
        "{}",
        log.body
    );
    assert!(log.body.contains("blocked by guardrail"), "{}", log.body);
    assert!(
        log.body.contains("refused by guardrail, not sent"),
        "{}",
        log.body
    );

    // The key is found by no search; the words around it are.
    for search in [KEY, "AKIAIOSFODNN7EXAMPLE rotates", "zanzibar"] {
        let page = get(format!("/console/calls?q={}", search.replace(' ', "+"))).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(rows(&page.body).is_empty(), "{search}: {}", page.body);
    }
    assert_eq!(
        rows(&get("/console/calls?q=bucket".into()).await.body).len(),
        1
    );
    assert_eq!(
        rows(&get("/console/calls?status=blocked".into()).await.body).len(),
        1
    );

    // The timelines show the verdicts, by offsets, never the text.
    for (conversation, verdict) in [
        ("blocked", "data-action=\"block\""),
        ("refused", "data-action=\"block\""),
        ("redacted", "data-action=\"redact\""),
    ] {
        let page = get(format!("/console/conversation?id=alice%2F{conversation}")).await;
        assert_eq!(page.status, 200, "{conversation}: {}", page.body);
        assert!(page.body.contains(verdict), "{conversation}: {}", page.body);
        assert!(!page.body.contains("AKIA"), "{conversation}: {}", page.body);
        assert!(
            !page.body.contains("zanzibar"),
            "{conversation}: {}",
            page.body
        );
    }

    drop(store);
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    assert_eq!(anywhere_in(gw.files.path(), KEY), Vec::<String>::new());
    assert_eq!(
        anywhere_in(gw.files.path(), "zanzibar"),
        Vec::<String>::new()
    );
}

/// What the moderation service flags, and the upstream says.
const MARKER: &str = "quokka-launch-code";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_moderation_blocked_is_stored_withheld_and_found_by_no_search() {
    let moderation = ScriptedProvider::start(|request, _i| {
        let flagged = request.body["input"]
            .as_str()
            .unwrap_or_default()
            .contains(MARKER);
        Reply::json(
            200,
            json!({"id": "modr-1", "results": [{"flagged": flagged,
                "categories": {"violence": flagged}}]}),
        )
    })
    .await;
    let config = format!(
        "[[guardrail.policy]]\n[[guardrail.policy.check]]\nkind = \"moderation\"\nendpoint = \"{}\"\n",
        moderation.base_url()
    );
    let file = ConfigFile::parse(&config, "gateway.toml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let operators = dir.path().join("operators");
    let mut gw = Harness::start(
        |_request: &RecordedRequest, _index: usize| {
            let text = format!("The code is {MARKER}, use it");
            let mut chunks = vec![json!({"id": "chatcmpl-scripted", "model": "scripted-model",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})];
            for piece in text.as_bytes().chunks(6) {
                let piece = std::str::from_utf8(piece).unwrap();
                chunks.push(json!({"choices": [{"index": 0, "delta": {"content": piece}}]}));
            }
            chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
            Reply::openai_stream(&chunks)
        },
        move |c| {
            c.file = file;
            c.operator_keys_file = Some(operators);
        },
    )
    .await;
    for stream in [true, false] {
        let body = json!({"model": "m", "stream": stream,
            "messages": [{"role": "user", "content": "what is the code?"}]});
        let answer = post(&gw.url("/v1/chat/completions"), body.to_string(), &[]).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(answer.body.contains("content_filter"), "{}", answer.body);
        assert!(!answer.body.contains(MARKER), "{}", answer.body);
    }
    // The request and the answer of each call, each asked once: the record took the guard's decision.
    assert_eq!(moderation.requests().len(), 4);

    let store = gw.records().await;
    let calls = store.call_summaries(&CallQuery::default()).await.unwrap();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    let cookie = console_login(&gw, OPS_KEY).await;
    let get = |path: String| {
        let (url, cookie) = (gw.url(&path), cookie.clone());
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let blocked = get("/console/calls?status=blocked".into()).await;
    assert_eq!(rows(&blocked.body).len(), 2, "{}", blocked.body);
    for search in [MARKER, "use it"] {
        let page = get(format!("/console/calls?q={}", search.replace(' ', "+"))).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(rows(&page.body).is_empty(), "{search}: {}", page.body);
    }

    drop(store);
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    assert_eq!(anywhere_in(gw.files.path(), MARKER), Vec::<String>::new());
}
