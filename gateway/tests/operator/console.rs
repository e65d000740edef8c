//! The operator console (`/console`): its security properties over plain HTTP, then the whole flow in headless
//! Chromium driven over the W3C WebDriver protocol (`/usr/bin/chromedriver`): log in, watch a real client's
//! paused call appear in the inbox without a reload, approve it, see the client's turn complete and the audit
//! row on the conversation's timeline, and the usage page's plots carry data. Screenshots of each page go to
//! `$CARGO_TARGET_TMPDIR/console-screenshots/` for a person to look at. Without Chromium the browser tests skip
//! with a message, unless `CI` is set (then they fail). `console_overhead` (ignored) measures chat latency with
//! and without a client refreshing the console every second.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::webdriver::Driver;
use common::{console_login, post, send, send_from, write_file_then_answer, Answer, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const ALICE: (&str, &str) = ("authorization", "Bearer sk-alice");
/// What the model asks to write: markup that must stay text on every page.
const HOSTILE_CONTENT: &str = "\"><img src=x onerror=alert(1)><script>alert(2)</script>";
/// The user's message, equally hostile.
const HOSTILE_MESSAGE: &str = "<script>alert(3)</script> please write the file";

fn write_then_answer(req: &RecordedRequest, _index: usize) -> Reply {
    let arguments = json!({"path": "out/console.txt", "content": HOSTILE_CONTENT}).to_string();
    write_file_then_answer(req, &arguments)
}

async fn gateway_on(dir: &Path, database_url: Option<String>) -> Harness {
    std::fs::write(dir.join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.join("clients"), dir.join("operators"));
    Harness::start(write_then_answer, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
        c.database_url = database_url;
    })
    .await
}

fn header<'a>(answer: &'a Answer, name: &str) -> &'a str {
    answer
        .headers
        .get(name)
        .map_or("", |v| v.to_str().unwrap_or(""))
}

/// The value of `<meta name="csrf-token" content="…">`.
fn csrf_of(page: &str) -> String {
    let marker = "name=\"csrf-token\" content=\"";
    let at = page.find(marker).expect("a csrf meta tag") + marker.len();
    page[at..at + 64].to_owned()
}

const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
const SAME: (&str, &str) = ("sec-fetch-site", "same-origin");

#[tokio::test]
async fn the_console_is_closed_without_a_session_and_refuses_forged_requests() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_on(dir.path(), None).await;
    // Nothing without a session, and every response carries the policy.
    for path in [
        "/console",
        "/console/conversations",
        "/console/conversation?id=x",
        "/console/usage",
    ] {
        let answer = send("GET", &gw.url(path), &[], "").await;
        assert_eq!(answer.status, 303, "{path}");
        assert_eq!(header(&answer, "location"), "/console/login", "{path}");
        assert!(
            header(&answer, "content-security-policy").contains("script-src 'self'"),
            "{path}"
        );
    }
    let api = send("GET", &gw.url("/console/api/approvals"), &[], "").await;
    assert_eq!(api.status, 401);
    let login = send("GET", &gw.url("/console/login"), &[], "").await;
    assert_eq!(login.status, 200);
    assert_eq!(
        header(&login, "content-security-policy"),
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    );
    assert_eq!(header(&login, "x-frame-options"), "DENY");
    assert_eq!(header(&login, "x-content-type-options"), "nosniff");

    // Login: only from the console's origin, only with an operator key.
    let key = format!("key={OPS_KEY}");
    let evil = send(
        "POST",
        &gw.url("/console/login"),
        &[FORM, ("origin", "http://evil.example")],
        &key,
    )
    .await;
    assert_eq!(evil.status, 403);
    let client_key = send(
        "POST",
        &gw.url("/console/login"),
        &[FORM, SAME],
        "key=sk-alice",
    )
    .await;
    assert_eq!(
        client_key.status, 401,
        "a client key does not open the console"
    );
    assert!(header(&client_key, "set-cookie").is_empty());
    let origin = format!("http://{}", gw.addr);
    let by_origin = send(
        "POST",
        &gw.url("/console/login"),
        &[FORM, ("origin", &origin)],
        &key,
    )
    .await;
    assert_eq!(
        by_origin.status, 303,
        "an Origin naming the Host is same-origin"
    );
    let cookie_header = header(&by_origin, "set-cookie");
    assert!(cookie_header.starts_with("tc_console="), "{cookie_header}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie_header.contains(attribute), "{cookie_header}");
    }
    assert!(
        !cookie_header.contains("Secure"),
        "plain HTTP on loopback: {cookie_header}"
    );
    let remote = send(
        "POST",
        &gw.url("/console/login"),
        &[
            FORM,
            ("host", "gw.example.com"),
            ("origin", "https://gw.example.com"),
        ],
        &key,
    )
    .await;
    let remote_cookie = header(&remote, "set-cookie");
    assert!(
        remote_cookie.starts_with("__Host-tc_console=") && remote_cookie.contains("; Secure"),
        "{remote_cookie}"
    );

    // Logged in: pages carry the CSRF token, no inline script or style.
    let cookie = console_login(&gw, OPS_KEY).await;
    let inbox = send("GET", &gw.url("/console"), &[("cookie", &cookie)], "").await;
    assert_eq!(inbox.status, 200, "{}", inbox.body);
    let csrf = csrf_of(&inbox.body);
    assert_eq!(
        inbox.body.matches("<script").count(),
        1,
        "the one script file only"
    );
    assert!(inbox
        .body
        .contains("<script src=\"/console/assets/console.js\" defer></script>"));
    assert!(!inbox.body.contains(" style=") && !inbox.body.contains("<style"));
    let script = send("GET", &gw.url("/console/assets/console.js"), &[], "").await;
    assert_eq!(script.status, 200);
    assert!(header(&script, "content-type").starts_with("text/javascript"));
    assert!(
        !script.body.contains("innerHTML"),
        "the script never parses values as HTML"
    );

    // Decisions: the CSRF token and the console's origin are both required.
    let url = gw.url("/console/approvals/apr_unknown/decision");
    let with = |token: &str| format!("csrf={token}&decision=approve&reason=ok");
    let no_token = send(
        "POST",
        &url,
        &[FORM, SAME, ("cookie", &cookie)],
        "decision=approve",
    )
    .await;
    assert_eq!(no_token.status, 403, "{}", no_token.body);
    let wrong = send(
        "POST",
        &url,
        &[FORM, SAME, ("cookie", &cookie)],
        &with(&"0".repeat(64)),
    )
    .await;
    assert_eq!(wrong.status, 403);
    let cross = send(
        "POST",
        &url,
        &[FORM, ("sec-fetch-site", "cross-site"), ("cookie", &cookie)],
        &with(&csrf),
    )
    .await;
    assert_eq!(cross.status, 403);
    let no_session = send("POST", &url, &[FORM, SAME], &with(&csrf)).await;
    assert_eq!(no_session.status, 403);
    let accepted = send(
        "POST",
        &url,
        &[FORM, SAME, ("cookie", &cookie)],
        &with(&csrf),
    )
    .await;
    assert_eq!(
        accepted.status, 404,
        "checks passed; nothing pending under that id: {}",
        accepted.body
    );
    assert!(accepted.body.contains("no pending approval `apr_unknown`"));
    let cross_read = send(
        "GET",
        &gw.url("/console/api/approvals"),
        &[
            ("cookie", &cookie),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "cors"),
        ],
        "",
    )
    .await;
    assert_eq!(
        cross_read.status, 403,
        "another site's script cannot read the inbox"
    );

    // Logout ends the session.
    let out = send(
        "POST",
        &gw.url("/console/logout"),
        &[FORM, SAME, ("cookie", &cookie)],
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(out.status, 303);
    assert!(header(&out, "set-cookie").contains("Max-Age=0"));
    let after = send("GET", &gw.url("/console"), &[("cookie", &cookie)], "").await;
    assert_eq!(after.status, 303, "the old cookie opens nothing");
}

/// A login form posted from the local address `from` (any of 127.0.0.0/8 reaches the gateway on 127.0.0.1).
async fn login_from(gw: &Harness, from: &str, key: &str) -> Answer {
    let form = format!("key={key}");
    send_from(
        from,
        "POST",
        &gw.url("/console/login"),
        &[FORM, SAME],
        &form,
    )
    .await
}

#[tokio::test]
async fn failed_logins_are_limited_per_address_without_locking_out_other_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_on(dir.path(), None).await;
    let guesser = "127.0.0.1";
    for attempt in 0..5 {
        let wrong = login_from(&gw, guesser, &format!("sk-guess-{attempt}")).await;
        assert_eq!(wrong.status, 401, "attempt {attempt}: {}", wrong.body);
    }
    let limited = login_from(&gw, guesser, "sk-guess-5").await;
    assert_eq!(limited.status, 429, "{}", limited.body);
    let retry_after: u64 = header(&limited, "retry-after").parse().unwrap();
    assert!((1..=12).contains(&retry_after), "{retry_after}");
    assert!(
        limited.body.contains("Too many failed logins"),
        "{}",
        limited.body
    );
    assert!(
        header(&limited, "content-security-policy").starts_with("default-src 'none'"),
        "the refusal is a console page like the others"
    );
    // Over the limit the key is not even looked at: the right one is refused too, and opens no session.
    let right_but_limited = login_from(&gw, guesser, OPS_KEY).await;
    assert_eq!(right_but_limited.status, 429);
    assert!(header(&right_but_limited, "set-cookie").is_empty());
    // Another address is not held back by the guesser's failures.
    let operator = login_from(&gw, "127.0.0.2", OPS_KEY).await;
    assert_eq!(operator.status, 303, "{}", operator.body);
    assert!(header(&operator, "set-cookie").starts_with("tc_console="));
}

/// Alice's call pauses in gateway A; Carol opens the console of gateway B (same SQLite file), sees it there —
/// its hostile arguments as text — and approves it; Alice, waiting on A, learns it and her resend completes.
#[tokio::test]
async fn the_console_of_one_gateway_lists_and_decides_what_another_paused() {
    let dir = tempfile::tempdir().unwrap();
    let a = gateway_on(dir.path(), None).await;
    let shared = a.files.path().to_owned();
    let (clients, operators) = (dir.path().join("clients"), dir.path().join("operators"));
    let b = Harness::start(write_then_answer, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
        c.db = shared.join("gateway.db");
        c.files = Some(shared.join("root"));
    })
    .await;
    let headers = [ALICE, ("x-conversation-id", "across")];
    let body =
        json!({"model": "test-model", "messages": [{"role": "user", "content": HOSTILE_MESSAGE}]});
    let first = post(&a.url("/v1/chat/completions"), body.to_string(), &headers).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let first = first.json();
    let id = first["tower_chat"]["approval_requests"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let cookie = console_login(&b, OPS_KEY).await;
    let inbox = send("GET", &b.url("/console"), &[("cookie", &cookie)], "").await;
    assert_eq!(inbox.status, 200, "{}", inbox.body);
    assert!(
        inbox.body.contains(&format!("data-id=\"{id}\"")),
        "{}",
        inbox.body
    );
    assert!(inbox.body.contains("alice/across"), "{}", inbox.body);
    assert!(
        !inbox.body.contains("<script>alert") && inbox.body.contains("&lt;script&gt;alert(2)"),
        "arguments are text: {}",
        inbox.body
    );
    assert!(inbox
        .body
        .contains("every gateway process on this database"));
    let api = send(
        "GET",
        &b.url("/console/api/approvals"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    let api = api.json();
    assert_eq!(api["data"][0]["id"], id.as_str(), "{api}");
    assert_eq!(api["has_more"], false);
    // B's timeline of the conversation shows the approval A's turn waits on.
    let timeline = send(
        "GET",
        &b.url("/console/conversation?id=alice%2Facross"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(timeline.status, 200, "{}", timeline.body);
    assert!(
        timeline.body.contains(&format!("data-id=\"{id}\"")),
        "{}",
        timeline.body
    );

    let csrf = csrf_of(&inbox.body);
    let decided = send(
        "POST",
        &b.url(&format!("/console/approvals/{id}/decision")),
        &[FORM, SAME, ("cookie", &cookie)],
        &format!("csrf={csrf}&decision=approve&reason=fine"),
    )
    .await;
    assert_eq!(decided.status, 303, "{}", decided.body);
    let learned = send(
        "GET",
        &a.url(&format!("/v1/approvals/{id}?wait=30")),
        &[ALICE],
        "",
    )
    .await;
    assert_eq!(learned.json()["status"], "approved", "{}", learned.body);
    assert_eq!(learned.json()["approver"], "operator:carol");
    let mut resend = body.clone();
    resend["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": first["choices"][0]["message"]["content"]}));
    let done = post(&a.url("/v1/chat/completions"), resend.to_string(), &headers).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with("Result: wrote"),
        "{}",
        done.body
    );
}

#[tokio::test]
async fn no_console_without_operators_or_with_no_console() {
    let gw = Harness::start(write_then_answer, |_| {}).await;
    assert_eq!(
        send("GET", &gw.url("/console/login"), &[], "").await.status,
        404
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let operators = dir.path().join("operators");
    let gw = Harness::start(write_then_answer, move |c| {
        c.operator_keys_file = Some(operators);
        c.console = false;
    })
    .await;
    assert_eq!(
        send("GET", &gw.url("/console/login"), &[], "").await.status,
        404
    );
}

/// A client's turn that pauses for approval, waits for the operator (long-poll) and resends; its final answer.
async fn client_turn(gw_url: String, conversation: String) -> Value {
    let chat = format!("{gw_url}/v1/chat/completions");
    let headers = [ALICE, ("x-conversation-id", conversation.as_str())];
    let body =
        json!({"model": "test-model", "messages": [{"role": "user", "content": HOSTILE_MESSAGE}]});
    let first = post(&chat, body.to_string(), &headers).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let first = first.json();
    assert_eq!(
        first["tower_chat"]["finish_reason"], "awaiting_approval",
        "{first}"
    );
    let id = first["tower_chat"]["approval_requests"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    loop {
        let poll = send(
            "GET",
            &format!("{gw_url}/v1/approvals/{id}?wait=30"),
            &[ALICE],
            "",
        )
        .await;
        assert_eq!(poll.status, 200, "{}", poll.body);
        if poll.json()["status"] != "pending" {
            break;
        }
    }
    let mut resend = body.clone();
    resend["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": first["choices"][0]["message"]["content"]}));
    let done = post(&chat, resend.to_string(), &headers).await;
    assert_eq!(done.status, 200, "{}", done.body);
    done.json()
}

/// The operator's flow in Chromium, against a gateway on SQLite (`None`) or PostgreSQL.
async fn in_chromium(database_url: Option<String>, label: &str) {
    let Some(browser) = Driver::start(label).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_on(dir.path(), database_url).await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let conversation = format!("browser-{label}-{nanos}");
    let base = format!("http://{}", gw.addr);

    // Nothing without logging in.
    browser.go(&format!("{base}/console")).await;
    assert!(
        browser.url().await.ends_with("/console/login"),
        "{}",
        browser.url().await
    );
    browser.screenshot("1-login").await;
    let key = browser.find("#key", Duration::from_secs(5)).await;
    browser.type_into(&key, "sk-alice").await;
    browser
        .click(&browser.find("#login", Duration::from_secs(5)).await)
        .await;
    let error = browser.find("#login-error", Duration::from_secs(5)).await;
    assert!(browser.text(&error).await.contains("not an operator key"));
    let key = browser.find("#key", Duration::from_secs(5)).await;
    browser.type_into(&key, OPS_KEY).await;
    browser
        .click(&browser.find("#login", Duration::from_secs(5)).await)
        .await;
    browser.find("#no-approvals", Duration::from_secs(10)).await;
    assert!(
        browser.url().await.ends_with("/console"),
        "{}",
        browser.url().await
    );
    let cookies = browser.cmd("GET", "/cookie", None).await;
    let session_cookie = cookies
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "tc_console")
        .unwrap_or_else(|| panic!("{cookies}"))
        .clone();
    assert_eq!(session_cookie["httpOnly"], true, "{session_cookie}");
    assert_eq!(session_cookie["sameSite"], "Strict", "{session_cookie}");

    // A real client request pauses; the open inbox shows it without a reload.
    let client = tokio::spawn(client_turn(gw.url(""), conversation.clone()));
    // Other tests' approvals on a shared database may replace the inbox's rows at any moment: rows are read
    // and acted on by selector, never by a reference held across a refresh.
    let row = browser
        .read_containing(
            "#approvals tbody tr[data-id]",
            &format!("alice/{conversation}"),
            Some("data-id"),
            Duration::from_secs(20),
        )
        .await;
    let approval_id = row.attribute.unwrap();
    let this_row = format!("#approvals tbody tr[data-id='{approval_id}']");
    let row_text = row.text;
    assert!(row_text.contains("write_file"), "{row_text}");
    assert!(row_text.contains("alice"), "{row_text}");
    assert!(
        row_text.contains(&format!("alice/{conversation}")),
        "{row_text}"
    );
    assert!(
        row_text.contains("<img src=x onerror=alert(1)>"),
        "the hostile argument shows as text: {row_text}"
    );
    assert!(
        browser.find_all("img").await.is_empty(),
        "no injected element"
    );
    assert_eq!(browser.find_all("script").await.len(), 1);
    browser.assert_no_alert().await;
    browser.screenshot("2-inbox-pending").await;

    // Approve it with a reason.
    browser
        .type_into_css(
            &format!("{this_row} input[name=reason]"),
            "checked by carol <b>ok</b>",
            Duration::from_secs(5),
        )
        .await;
    browser
        .click_css(
            &format!("{this_row} button.approve"),
            Duration::from_secs(5),
        )
        .await;
    // The banner names the tool, its target and the conversation (linked).
    let decided = browser.find("#decided", Duration::from_secs(10)).await;
    let banner = browser.text(&decided).await;
    assert!(
        banner.starts_with("Approved write_file on out/console.txt in conversation alice/"),
        "{banner}"
    );
    assert!(banner.contains(&conversation), "{banner}");
    browser
        .find("#decided a.conversation", Duration::from_secs(1))
        .await;

    // The client's turn completes.
    let done = tokio::time::timeout(Duration::from_secs(60), client)
        .await
        .expect("the client finishes")
        .unwrap();
    let answer = done["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(answer.starts_with("Result: wrote"), "{done}");
    assert_eq!(
        std::fs::read_to_string(gw.root().join("out/console.txt")).unwrap(),
        HOSTILE_CONTENT
    );
    // …and its row leaves the inbox by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !browser.find_all(&this_row).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the decided approval stays listed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    browser.screenshot("3-inbox-decided").await;

    // The conversation in the list, then its timeline with the audit row.
    browser.go(&format!("{base}/console/conversations")).await;
    let link = browser
        .find(
            &format!("#conversations a.conversation[href*='{}']", conversation),
            Duration::from_secs(5),
        )
        .await;
    let listed = browser
        .find_containing(
            "#conversations tbody tr",
            &conversation,
            Duration::from_secs(5),
        )
        .await;
    let listed_text = browser.text(&listed).await;
    assert!(listed_text.contains("alice"), "{listed_text}");
    browser.screenshot("4-conversations").await;
    browser.click(&link).await;
    let audit = browser
        .find("#audit tr[data-outcome=approved]", Duration::from_secs(10))
        .await;
    let audit_text = browser.text(&audit).await;
    assert!(audit_text.contains("operator:carol"), "{audit_text}");
    assert!(
        audit_text.contains("checked by carol <b>ok</b>"),
        "{audit_text}"
    );
    assert!(audit_text.contains(&approval_id), "{audit_text}");
    let calls = browser.find_all("section.call").await;
    assert!(
        calls.len() >= 2,
        "the paused call and the resumed one: {}",
        calls.len()
    );
    let timeline = browser
        .text(&browser.find("main", Duration::from_secs(1)).await)
        .await;
    for expected in [
        HOSTILE_MESSAGE,
        "write_file",
        "latency",
        "time to first token",
        "scripted-model",
        "completed",
    ] {
        assert!(
            timeline.contains(expected),
            "`{expected}` not in the timeline:\n{timeline}"
        );
    }
    assert!(browser.find_all("img").await.is_empty());
    assert!(browser
        .source()
        .await
        .contains("&lt;script&gt;alert(3)&lt;/script&gt;"));
    browser.assert_no_alert().await;
    browser.screenshot("5-timeline").await;

    // The usage page: its plots have data points.
    for by in ["model", "caller"] {
        browser
            .go(&format!("{base}/console/usage?range=1h&by={by}"))
            .await;
        for chart in ["calls", "errors", "error-rate", "tokens", "cost", "latency"] {
            let svg = browser
                .find(&format!("#{chart} svg"), Duration::from_secs(5))
                .await;
            let points: usize = browser
                .attribute(&svg, "data-points")
                .await
                .unwrap()
                .parse()
                .unwrap();
            assert!(points > 0, "{chart} by {by} has no points");
            assert!(!browser
                .find_all(&format!("#{chart} svg circle"))
                .await
                .is_empty());
            assert!(!browser
                .find_all(&format!("#{chart} svg polyline"))
                .await
                .is_empty());
        }
        let totals = browser
            .text(
                &browser
                    .find(&format!("#usage-by-{by}"), Duration::from_secs(1))
                    .await,
            )
            .await;
        assert!(
            totals.contains(if by == "model" {
                "scripted-model"
            } else {
                "alice"
            }),
            "{totals}"
        );
        browser.screenshot(&format!("6-usage-by-{by}")).await;
    }

    // The policy held: no violation reported by the browser.
    let log = browser.console_log().await;
    assert!(
        !log.iter()
            .any(|m| m.contains("Content Security Policy") || m.contains("Refused to")),
        "{log:?}"
    );

    // Log out: the console closes again.
    browser.go(&format!("{base}/console")).await;
    browser
        .click(
            &browser
                .find("form.logout button", Duration::from_secs(5))
                .await,
        )
        .await;
    browser.find("#key", Duration::from_secs(5)).await;
    browser.go(&format!("{base}/console/usage")).await;
    assert!(browser.url().await.ends_with("/console/login"));
    let _ = browser
        .raw("DELETE", &format!("/session/{}", browser.session), None)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_on_sqlite() {
    in_chromium(None, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    in_chromium(Some(url), "postgres").await;
}

/// Chat latency with and without an operator refreshing the console (inbox, conversations, usage)
/// every second. `cargo test -p tower-chat-gateway --test operator -- --ignored --nocapture console::console_overhead`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn console_overhead() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let operators = dir.path().join("operators");
    let gw = Harness::start(
        |_, _| Reply::openai_text("fine"),
        move |c| c.operator_keys_file = Some(operators),
    )
    .await;
    let cookie = console_login(&gw, OPS_KEY).await;
    let chat = gw.url("/v1/chat/completions");
    let body =
        json!({"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    // History for the console to read: 2,000 calls.
    for _ in 0..20 {
        let mut batch = Vec::new();
        for _ in 0..100 {
            let (chat, body) = (chat.clone(), body.clone());
            batch.push(tokio::spawn(
                async move { post(&chat, body, &[]).await.status },
            ));
        }
        for b in batch {
            assert_eq!(b.await.unwrap(), 200);
        }
    }
    let seconds: u64 = std::env::var("CONSOLE_OVERHEAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let run = |refresh: bool| {
        let (chat, body, cookie, gw_url) = (chat.clone(), body.clone(), cookie.clone(), gw.url(""));
        async move {
            let stop = Instant::now() + Duration::from_secs(seconds);
            let refresher = refresh.then(|| {
                tokio::spawn(async move {
                    let mut pages = 0u32;
                    let mut page_time = Duration::ZERO;
                    while Instant::now() < stop {
                        let started = Instant::now();
                        for path in [
                            "/console",
                            "/console/api/approvals",
                            "/console/conversations",
                            "/console/usage?range=24h",
                        ] {
                            let answer = send(
                                "GET",
                                &format!("{gw_url}{path}"),
                                &[("cookie", &cookie)],
                                "",
                            )
                            .await;
                            assert_eq!(answer.status, 200, "{path}");
                            pages += 1;
                        }
                        page_time += started.elapsed();
                        tokio::time::sleep(
                            Duration::from_secs(1).saturating_sub(started.elapsed()),
                        )
                        .await;
                    }
                    (pages, page_time)
                })
            });
            // 8 clients in a closed loop.
            let mut clients = Vec::new();
            for _ in 0..8 {
                let (chat, body) = (chat.clone(), body.clone());
                clients.push(tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    while Instant::now() < stop {
                        let started = Instant::now();
                        assert_eq!(post(&chat, body.clone(), &[]).await.status, 200);
                        latencies.push(started.elapsed());
                    }
                    latencies
                }));
            }
            let mut latencies = Vec::new();
            for c in clients {
                latencies.extend(c.await.unwrap());
            }
            latencies.sort();
            let pct = |p: f64| {
                latencies[((p / 100.0 * latencies.len() as f64).ceil() as usize)
                    .clamp(1, latencies.len())
                    - 1]
            };
            let refreshed = match refresher {
                Some(r) => Some(r.await.unwrap()),
                None => None,
            };
            (latencies.len(), pct(50.0), pct(99.0), refreshed)
        }
    };
    // Alternate to spread the machine's noise over both.
    for round in 0..2 {
        for refresh in [false, true] {
            let (n, p50, p99, refreshed) = run(refresh).await;
            println!(
                "round {round} console refresh {refresh}: {n} chat requests in {seconds} s, p50 {p50:?}, p99 {p99:?}{}",
                refreshed.map_or(String::new(), |(pages, time)| format!(
                    "; {pages} console pages, {:?} per refresh of 4",
                    time / (pages / 4).max(1)
                ))
            );
        }
    }
}

/// Wrong paths, refused decisions and bad queries answer HTML pages inside the console's frame (navigation
/// and icon included), never the API's JSON; values read as words and counts agree with their number.
#[tokio::test]
async fn errors_are_console_pages_and_labels_read_as_words() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_on(dir.path(), None).await;
    let headers = [ALICE, ("x-conversation-id", "labels")];
    let body =
        json!({"model": "test-model", "messages": [{"role": "user", "content": "write it"}]});
    let paused = post(&gw.url("/v1/chat/completions"), body.to_string(), &headers).await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    let id = paused.json()["tower_chat"]["approval_requests"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cookie = console_login(&gw, OPS_KEY).await;
    let get = |path: &str| {
        let (url, cookie) = (gw.url(path), cookie.clone());
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let csrf = csrf_of(&get("/console").await.body);
    let (url, form) = (
        gw.url(&format!("/console/approvals/{id}/decision")),
        format!("csrf={csrf}&decision=deny"),
    );
    let with_cookie = [FORM, SAME, ("cookie", cookie.as_str())];
    let decide = || send("POST", &url, &with_cookie, &form);
    assert_eq!(decide().await.status, 303);
    let again = decide().await;
    let pages = [
        (
            get("/console/nope").await,
            404,
            "There is no console page at /console/nope.",
        ),
        (
            get("/console/usage?range=2d").await,
            400,
            "Unknown range `2d`: choose 1h, 24h or 7d",
        ),
        (
            get("/console/usage?by=tool").await,
            400,
            "Unknown split `tool`",
        ),
        (again, 409, &id),
    ];
    for (page, status, says) in pages {
        assert_eq!(page.status, status, "{}", page.body);
        assert!(header(&page, "content-type").starts_with("text/html"));
        assert!(page.body.contains(says), "`{says}` not in {}", page.body);
        assert!(
            page.body.contains("<nav>"),
            "inside the frame: {}",
            page.body
        );
        assert!(page
            .body
            .contains("<link rel=\"icon\" type=\"image/svg+xml\" href=\"/console/favicon.svg\">"));
    }
    let api = get("/console/api/nope").await;
    assert_eq!(api.status, 404);
    assert!(api.json()["error"].is_string(), "{}", api.body);
    // The icon: an image, cached for a long time, served without a session.
    let icon = send("GET", &gw.url("/console/favicon.svg"), &[], "").await;
    assert_eq!(icon.status, 200);
    assert_eq!(header(&icon, "content-type"), "image/svg+xml");
    assert!(header(&icon, "cache-control").contains("max-age=31536000"));
    assert!(icon.body.starts_with("<svg"));
    // One paused call: "1 model call", and its finish as words.
    let timeline = get("/console/conversation?id=alice%2Flabels").await.body;
    assert!(timeline.contains("1 model call ·"), "{timeline}");
    assert!(!timeline.contains("1 model calls"), "{timeline}");
    assert!(
        timeline.contains("<dd class=\"fact\">awaiting approval</dd>")
            || timeline.contains("<dd class=\"fact\">tool calls</dd>"),
        "{timeline}"
    );
    let usage = get("/console/usage?range=1h").await.body;
    assert!(usage.contains("1 model call from"), "{usage}");
    assert!(usage.contains("Model calls by model"), "{usage}");
}
