//! The console's conversation timeline over HTTP: every model call of a turn is its own entry (model, latency,
//! time to first token, usage, cost, outcome), with the tool calls and the results the loop ran between them,
//! and the approval decisions beside the calls they decided; a call the response cache answered reads as cached,
//! guardrail verdicts sit with their call, and the usage page counts the cache's hits and what they saved.

use crate::common;

use std::time::SystemTime;

use common::{console_login, post, request, send, three_add_calls, tool_result, Harness};
use serde_json::json;
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat::{
    ChatOptions, ChatResponse, ConversationId, GuardrailAction, GuardrailStage, GuardrailVerdict,
    Message, Shared, TextSpan,
};
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_persistence::{CallId, CallOutcome, CallRecord, Store};

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const ALICE: (&str, &str) = ("authorization", "Bearer sk-alice");

/// `add` twice then the answer (three model calls), or, for `write`, `write_file` then the answer.
fn upstream(req: &RecordedRequest, index: usize) -> Reply {
    let messages = req.body["messages"].as_array().unwrap();
    if messages[0]["content"] == "write" {
        return match tool_result(messages, "call_write") {
            None => Reply::openai_tool_calls(&[(
                "call_write",
                "write_file",
                r#"{"path": "t.txt", "content": "t"}"#,
            )]),
            Some(result) => Reply::openai_text(&format!("Result: {result}")),
        };
    }
    three_add_calls(req, index)
}

/// The `dt` / `dd` pairs of a call section.
fn facts(section: &str) -> Vec<(String, String)> {
    section
        .split("<dt>")
        .skip(1)
        .map(|pair| {
            let (name, rest) = pair.split_once("</dt>").unwrap();
            let value = rest
                .strip_prefix("<dd class=\"fact\">")
                .and_then(|v| v.split_once("</dd>"))
                .unwrap()
                .0;
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

fn fact<'a>(facts: &'a [(String, String)], name: &str) -> &'a str {
    &facts.iter().find(|(n, _)| n == name).unwrap().1
}

fn position(page: &str, needle: &str) -> usize {
    page.find(needle)
        .unwrap_or_else(|| panic!("`{needle}` not in the timeline:\n{page}"))
}

#[tokio::test]
async fn the_timeline_shows_every_model_call_of_a_turn_with_the_tool_results_between_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.path().join("clients"), dir.path().join("operators"));
    let gw = Harness::start(upstream, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
        c.file.limits.prices.insert(
            "test-model".into(),
            tower_chat_gateway::limits::PriceEntry {
                input: 1.0,
                output: 2.0,
                ..Default::default()
            },
        );
    })
    .await;
    let chat = gw.url("/v1/chat/completions");
    let answer = post(
        &chat,
        request(true, "2+3, +4?").to_string(),
        &[
            ALICE,
            ("x-conversation-id", "sums"),
            ("x-request-id", "req-sums-1"),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // A paused write an operator approves: one turn, the approval beside the call it decided.
    let write_headers = [ALICE, ("x-conversation-id", "writes")];
    let first = post(&chat, request(false, "write").to_string(), &write_headers)
        .await
        .json();
    let message = &first["choices"][0]["message"];
    let approval = message["tower_chat_approvals"][0]["id"].as_str().unwrap();
    let mut resume = request(false, "write");
    resume["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": message["content"]}));
    // The operator approves; the client's resend (no approvals field) picks the decision up.
    let decided = post(
        &gw.url(&format!("/v1/approvals/{approval}/decision")),
        json!({"approved": true}).to_string(),
        &[("authorization", &format!("Bearer {OPS_KEY}"))],
    )
    .await;
    assert!(decided.status.is_success(), "{}", decided.body);
    let second = post(&chat, resume.to_string(), &write_headers).await;
    assert_eq!(second.status, 200, "{}", second.body);

    let cookie = console_login(&gw, OPS_KEY).await;

    let page = console_page(&gw, &cookie, "/console/conversation?id=alice%2Fsums").await;
    let sections = call_sections(&page);
    assert_eq!(sections.len(), 3, "one entry per model call:\n{page}");
    let expected = [
        ("20", "9", "$0.000038"),
        ("20", "9", "$0.000038"),
        ("12", "5", "$0.000022"),
    ];
    for (round, (section, (input, output, cost))) in sections.iter().zip(expected).enumerate() {
        assert!(
            section.contains(&format!("data-round=\"{round}\"")),
            "{section}"
        );
        let facts = facts(section);
        assert_eq!(
            fact(&facts, "model call"),
            format!("round {} of the turn", round + 1)
        );
        assert_eq!(fact(&facts, "model"), "scripted-model");
        // Every model call of the turn names the HTTP request it served.
        assert_eq!(fact(&facts, "request id"), "req-sums-1");
        assert_eq!(fact(&facts, "input tokens"), input);
        assert_eq!(fact(&facts, "output tokens"), output);
        assert_eq!(fact(&facts, "cost"), cost);
        assert_eq!(fact(&facts, "outcome"), "completed");
        assert!(fact(&facts, "latency").ends_with(" ms"), "{facts:?}");
        assert!(
            fact(&facts, "time to first token").ends_with(" ms"),
            "{facts:?}"
        );
    }
    // Each call, then the result of the tool it called, then the next call.
    let order = [
        "data-round=\"0\"",
        "<div class=\"tool-call\" data-call-id=\"call_add\"",
        "<div class=\"message tool\" data-call-id=\"call_add\"",
        "data-round=\"1\"",
        "<div class=\"tool-call\" data-call-id=\"call_add2\"",
        "<div class=\"message tool\" data-call-id=\"call_add2\"",
        "data-round=\"2\"",
        "The sum is 9",
    ];
    let at: Vec<usize> = order.iter().map(|n| position(&page, n)).collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "{order:?} at {at:?}:\n{page}"
    );
    assert_eq!(page.matches("<h3 class=\"turn\"").count(), 1, "{page}");
    assert!(page.contains("3 model calls"), "{page}");

    // The paused and the resumed call are one turn; the decision sits with the call it decided.
    let page = console_page(&gw, &cookie, "/console/conversation?id=alice%2Fwrites").await;
    assert_eq!(page.matches("<section class=\"call\"").count(), 2, "{page}");
    assert_eq!(page.matches("<h3 class=\"turn\"").count(), 1, "{page}");
    let decision = format!(
        "<p class=\"call-approval\" data-approval-id=\"{approval}\" data-outcome=\"approved\">"
    );
    assert!(
        position(&page, "data-round=\"0\"") < position(&page, &decision)
            && position(&page, &decision) < position(&page, "data-round=\"1\""),
        "{page}"
    );

    // The list counts model calls and sums their tokens and cost.
    let list = console_page(&gw, &cookie, "/console/conversations").await;
    let row = list
        .split("<tr>")
        .find(|row| row.contains("alice/sums"))
        .unwrap_or_else(|| panic!("{list}"));
    for cell in [
        "<td class=\"number\">3</td>",
        "<td class=\"number\">52</td>",
        "<td class=\"number\">23</td>",
        "$0.000098",
    ] {
        assert!(row.contains(cell), "`{cell}` not in {row}");
    }
}

/// One tool round per turn: `add` when the last message is the user's, then the answer once its result is in.
fn one_tool_round(req: &RecordedRequest, _index: usize) -> Reply {
    let messages = req.body["messages"].as_array().unwrap();
    if messages.last().unwrap()["role"] == "tool" {
        return Reply::openai_text("The sum is 5");
    }
    let id = format!("call_{}", messages.len());
    Reply::openai_tool_calls(&[(id.as_str(), "add", r#"{"a": 2, "b": 3}"#)])
}

/// A client that resends its history every turn, as clients do: its own messages and the answers, never the
/// tool rounds the gateway ran in between. The timeline still shows each message once, in order, each turn's
/// tool round where it happened, and stays small.
#[tokio::test]
async fn a_long_conversation_shows_each_message_once_however_the_client_resends_it() {
    const TURNS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let operators = dir.path().join("operators");
    let gw = Harness::start(one_tool_round, move |c| {
        c.operator_keys_file = Some(operators);
    })
    .await;
    let chat = gw.url("/v1/chat/completions");
    let mut history = Vec::new();
    for turn in 0..TURNS {
        history.push(json!({"role": "user", "content": format!("question {turn:02}")}));
        let mut body = request(false, "");
        body["messages"] = json!(history);
        let answer = post(&chat, body.to_string(), &[("x-conversation-id", "long")]).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let text = answer.json()["choices"][0]["message"]["content"].clone();
        assert_eq!(text, "The sum is 5");
        history.push(json!({"role": "assistant", "content": text}));
    }

    let cookie = console_login(&gw, OPS_KEY).await;
    let page = send(
        "GET",
        &gw.url("/console/conversation?id=long"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let page = page.body;
    eprintln!(
        "a {TURNS}-turn conversation's timeline: {} bytes",
        page.len()
    );
    let mut at = 0;
    for turn in 0..TURNS {
        let question = format!(">question {turn:02}</pre>");
        assert_eq!(page.matches(&question).count(), 1, "{question}:\n{page}");
        // The question, its call, the tool round, the call that answered: in that order, after the last turn.
        let order = [
            question,
            format!(
                "<div class=\"tool-call\" data-call-id=\"call_{}\"",
                2 * turn + 1
            ),
            format!(
                "<div class=\"message tool\" data-call-id=\"call_{}\"",
                2 * turn + 1
            ),
            "The sum is 5</pre>".to_owned(),
        ];
        for needle in order {
            let found = page[at..]
                .find(&needle)
                .unwrap_or_else(|| panic!("`{needle}` not after byte {at}:\n{page}"));
            at += found + needle.len();
        }
    }
    assert_eq!(page.matches("<section class=\"call\"").count(), 2 * TURNS);
    assert_eq!(page.matches("<h3 class=\"turn\"").count(), TURNS);
    assert_eq!(
        page.matches("The sum is 5</pre>").count(),
        TURNS,
        "each answer once"
    );
    assert!(
        page.len() <= 100 * 1024,
        "{} bytes for {TURNS} turns",
        page.len()
    );
}

/// A call the response cache answered is shown as cached (no upstream latency, no cost); the usage page counts
/// it as a hit and prices what it saved at the model's price. A call's guardrail verdicts are listed with it:
/// check, action, where and at which bytes, never the text they matched.
#[tokio::test]
async fn cached_calls_and_guardrail_verdicts_are_shown_and_the_cache_savings_counted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let operators = dir.path().join("operators");
    let gw = Harness::start(
        |_, _| Reply::openai_text("cached answer"),
        move |c| {
            c.file = ConfigFile::parse("[cache]\nttl_seconds = 600\n", "gateway.toml").unwrap();
            c.operator_keys_file = Some(operators);
            c.file.limits.prices.insert(
                "scripted-model".into(),
                tower_chat_gateway::limits::PriceEntry {
                    input: 1.0,
                    output: 2.0,
                    ..Default::default()
                },
            );
        },
    )
    .await;
    let chat = gw.url("/v1/chat/completions");
    for expected in ["miss", "hit"] {
        let answer = post(
            &chat,
            request(false, "2+2?").to_string(),
            &[("x-conversation-id", "cached")],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.headers["x-cache"], expected);
    }
    assert_eq!(gw.provider.requests().len(), 1);
    // A call a guardrail redacted (written to the gateway's own database, as the guardrail layer records it).
    let store = gw.records().await;
    let secret = "sk-live-0123456789abcdef";
    let redacted = CallRecord {
        call_id: CallId::generate(),
        conversation_id: ConversationId::new("guarded"),
        caller: None,
        request_id: None,
        team: None,
        round_index: 0,
        started_at: SystemTime::now(),
        first_token_at: None,
        ended_at: SystemTime::now(),
        provider: None,
        model: Some("scripted-model".into()),
        request: tower_chat_persistence::RecordedRequest {
            messages: Shared::new(vec![Message::user("my key is [redacted]")]),
            options: Shared::new(ChatOptions::default()),
            omitted: None,
        },
        response: ChatResponse {
            messages: vec![Message::assistant("noted")],
            ..ChatResponse::default()
        },
        outcome: CallOutcome::Completed,
        cost: None,
        usage_estimated: false,
        guardrail: vec![GuardrailVerdict {
            check: "secrets".into(),
            action: GuardrailAction::Redact,
            stage: GuardrailStage::Request,
            location: "messages[0]".into(),
            span: Some(TextSpan {
                start: 10,
                end: 10 + secret.len(),
            }),
            detail: Some("openai_key".into()),
        }],
    };
    store.write_calls(&[redacted]).await.unwrap();

    let cookie = console_login(&gw, OPS_KEY).await;
    let page = console_page(&gw, &cookie, "/console/conversation?id=cached").await;
    let sections = call_sections(&page);
    assert_eq!(sections.len(), 2, "{page}");
    let (first, replay) = (facts(sections[0]), facts(sections[1]));
    assert!(!sections[0].contains("data-cached"), "{}", sections[0]);
    assert_eq!(fact(&first, "answered by"), "upstream");
    assert_eq!(
        fact(&first, "cost"),
        "$0.000022",
        "12 input and 5 output tokens"
    );
    assert!(
        sections[1].contains("data-cached=\"true\""),
        "{}",
        sections[1]
    );
    assert_eq!(fact(&replay, "answered by"), "response cache");
    assert_eq!(
        fact(&replay, "latency"),
        "— (answered from the response cache)"
    );
    assert_eq!(fact(&replay, "time to first token"), "—");
    assert_eq!(fact(&replay, "cost"), "$0.000000 (cached)");
    assert_eq!(page.matches(">2+2?</pre>").count(), 1, "{page}");

    let page = console_page(&gw, &cookie, "/console/conversation?id=guarded").await;
    let verdict = page
        .split("<li class=\"verdict\"")
        .nth(1)
        .and_then(|v| v.split("</li>").next())
        .unwrap_or_else(|| panic!("no verdict:\n{page}"));
    assert!(
        verdict.contains("data-check=\"secrets\" data-action=\"redact\""),
        "{verdict}"
    );
    assert!(
        verdict.contains("redact at request, messages[0], bytes 10–34 (openai_key)"),
        "{verdict}"
    );
    assert!(!page.contains(secret), "the matched text is never shown");

    let usage = console_page(&gw, &cookie, "/console/usage?range=1h").await;
    let summary = usage
        .split("<p class=\"summary\" id=\"cache-summary\">")
        .nth(1)
        .and_then(|s| s.split("</p>").next())
        .unwrap_or_else(|| panic!("no cache summary:\n{usage}"));
    assert_eq!(
        summary,
        "Response cache: 1 of 3 (33 %) model calls answered from the cache, saving $0.000022 (their tokens \
         at the model's price)"
    );
}

/// A console page's HTML, fetched with the session `cookie`; it must answer 200.
async fn console_page(gw: &Harness, cookie: &str, path: &str) -> String {
    let page = send("GET", &gw.url(path), &[("cookie", cookie)], "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    page.body
}

/// The `<section class="call">` blocks of a timeline page, one per model call.
fn call_sections(page: &str) -> Vec<&str> {
    page.split("<section class=\"call\"")
        .skip(1)
        .map(|s| s.split("</section>").next().unwrap())
        .collect()
}
