//! Long timelines: a 40-turn conversation shows each turn as a one-line summary (native `<details>`), its last
//! turn open, an index of its turns to jump to, and a prompt repeated word for word marked with the turn it
//! repeats; the audit table fits at 800 and 400 px; a GET on a decision's URL is an HTML page and an unknown
//! conversation a 404 page. In Chromium at 1,400, 800 and 400 px with `axe-core`, and the page weight of the
//! collapsed 40-turn timeline (HTML, stylesheet and script) printed and held under its limit.

use crate::common;

use std::time::Duration;

use common::webdriver::{axe_core, Driver};
use common::{console_login, post, send, Harness};
use serde_json::json;

use super::console_calls::answer_in_the_requested_model;
use super::console_cards::{gateway as cards_gateway, pause_write};
use super::console_pages::problems;

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
const SAME: (&str, &str) = ("sec-fetch-site", "same-origin");

/// The most bytes the collapsed 40-turn timeline may weigh, HTML, stylesheet and script together.
const MAX_PAGE_BYTES: usize = 160 * 1024;

/// Turns 7 and 19 ask the same question.
const REPEATED: &str = "Is the night ferry to Pemba still running?";

async fn long_conversation() -> (tempfile::TempDir, Harness) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.path().join("clients"), dir.path().join("operators"));
    let gw = Harness::start(answer_in_the_requested_model, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
    })
    .await;
    for turn in 1..=40 {
        let text = match turn {
            7 | 19 => REPEATED.to_owned(),
            _ => format!("Turn {turn}: what is the weather on the coast at hour {turn}?"),
        };
        let body = json!({"model": "model-a", "messages": [{"role": "user", "content": text}]});
        let answer = post(
            &gw.url("/v1/chat/completions"),
            body.to_string(),
            &[
                ("authorization", "Bearer sk-alice"),
                ("x-conversation-id", "voyage"),
            ],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    (dir, gw)
}

#[tokio::test]
async fn a_long_timeline_collapses_its_turns_indexes_them_and_marks_repeated_prompts() {
    let (_dir, gw) = long_conversation().await;
    let cookie = console_login(&gw, OPS_KEY).await;
    let get = |path: &str| {
        let (url, cookie) = (gw.url(path), cookie.clone());
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let page = get("/console/conversation?id=alice%2Fvoyage").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let html = &page.body;
    assert_eq!(html.matches("<details class=\"turn\"").count(), 40);
    assert_eq!(
        html.matches(" open>").count(),
        1,
        "only the last turn is open"
    );
    assert!(html.contains("id=\"turn-40\" open>"), "{html}");
    assert!(html.contains("<nav class=\"turn-index\" aria-label=\"Turns\">"));
    assert_eq!(html.matches("<a href=\"#turn-").count(), 40);
    assert!(
        html.contains("id=\"turn-19\" data-repeats=\"7\""),
        "turn 19 repeats turn 7"
    );
    assert!(html.contains("<span class=\"repeat\" data-repeats=\"7\">repeats turn 7</span>"));
    assert_eq!(html.matches("data-repeats=\"7\"").count(), 2, "{html}");

    // The page weight: what a browser fetches to show it (the favicon is cached for a year).
    let css = get("/console/assets/console.css").await.body.len();
    let js = get("/console/assets/console.js").await.body.len();
    let total = html.len() + css + js;
    println!(
        "page weight of a 40-turn timeline, collapsed: {} bytes HTML + {css} CSS + {js} JS = {total} bytes",
        html.len()
    );
    assert!(total <= MAX_PAGE_BYTES, "{total} bytes");

    // An unknown conversation is a 404 page, not an empty timeline.
    let unknown = get("/console/conversation?id=alice%2Fnever-seen").await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.headers["content-type"], "text/html; charset=utf-8");
    assert!(
        unknown
            .body
            .contains("No conversation &quot;alice/never-seen&quot; is recorded"),
        "{}",
        unknown.body
    );
}

#[tokio::test]
async fn a_decision_url_opened_as_a_page_shows_the_approval() {
    let dir = tempfile::tempdir().unwrap();
    let gw = cards_gateway(dir.path(), None).await;
    let paused = pause_write(
        &gw,
        "opened",
        json!({"path": "notes/opened.txt", "content": "x"}),
    )
    .await;
    let cookie = console_login(&gw, OPS_KEY).await;
    let url = gw.url(&format!("/console/approvals/{}/decision", paused.id));
    let page = send("GET", &url, &[("cookie", &cookie)], "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
    assert!(page.body.contains(&format!(
        "tr data-id=\"{}\" data-status=\"pending\"",
        paused.id
    )));
    assert!(page.body.contains("This approval waits for a decision."));
    assert!(page.body.contains("class=\"approve\""));
    let unknown = send(
        "GET",
        &gw.url("/console/approvals/apr_unknown/decision"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.headers["content-type"], "text/html; charset=utf-8");
    assert!(
        unknown
            .body
            .contains("No approval &quot;apr_unknown&quot; is listed"),
        "{}",
        unknown.body
    );
}

/// Opens `path` logged in, at `width`.
async fn browser_at(base: &str, width: u32, label: &str) -> Option<Driver> {
    let browser = Driver::start_sized(&format!("{label}-{width}"), width, 900).await?;
    browser.go(&format!("{base}/console/login")).await;
    let key = browser.find("#key", Duration::from_secs(5)).await;
    browser.type_into(&key, OPS_KEY).await;
    browser
        .click(&browser.find("#login", Duration::from_secs(5)).await)
        .await;
    browser.find("nav", Duration::from_secs(10)).await;
    Some(browser)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_timeline_and_its_audit_fit_every_width_in_a_browser() {
    let Some(axe) = axe_core() else {
        return;
    };
    let (_dir, gw) = long_conversation().await;
    let base = format!("http://{}", gw.addr);
    // A decided approval, its client resumed: the conversation's audit has a row.
    let cards_dir = tempfile::tempdir().unwrap();
    let cards = cards_gateway(cards_dir.path(), None).await;
    let long_path = format!("notes/{}.txt", "a-long-file-name-".repeat(6));
    let paused = pause_write(
        &cards,
        "audited",
        json!({"path": long_path, "content": "x"}),
    )
    .await;
    let cookie = console_login(&cards, OPS_KEY).await;
    let inbox = send("GET", &cards.url("/console"), &[("cookie", &cookie)], "")
        .await
        .body;
    let marker = "name=\"csrf-token\" content=\"";
    let at = inbox.find(marker).unwrap() + marker.len();
    let csrf = &inbox[at..at + 64];
    let denied = send(
        "POST",
        &cards.url(&format!("/console/approvals/{}/decision", paused.id)),
        &[FORM, SAME, ("cookie", &cookie)],
        &format!(
            "csrf={csrf}&decision=deny&reason=the+path+is+too+long+to+review+{}",
            "x".repeat(60)
        ),
    )
    .await;
    assert_eq!(denied.status, 303, "{}", denied.body);
    let resumed = post(
        &cards.url("/v1/chat/completions"),
        paused.resend.to_string(),
        &[
            ("authorization", "Bearer sk-alice"),
            ("x-conversation-id", &paused.conversation),
        ],
    )
    .await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    let cards_base = format!("http://{}", cards.addr);

    let mut found = Vec::new();
    for width in [1400, 800, 400] {
        let Some(browser) = browser_at(&base, width, "long").await else {
            return;
        };
        browser
            .go(&format!("{base}/console/conversation?id=alice%2Fvoyage"))
            .await;
        browser.find("nav.turn-index", Duration::from_secs(5)).await;
        let closed = browser
            .execute(
                "return document.querySelectorAll('details.turn:not([open])').length;",
                vec![],
            )
            .await;
        assert_eq!(closed, json!(39), "at {width}");
        found.extend(problems(&browser, &axe, &format!("40-turn timeline at {width}")).await);
        // The index jumps to a collapsed turn and opens it.
        let jump = browser
            .find(
                "nav.turn-index a[href=\"#turn-24\"]",
                Duration::from_secs(5),
            )
            .await;
        browser.click(&jump).await;
        let opened = browser
            .execute(
                "const t = document.getElementById('turn-24');
                 const box = t.getBoundingClientRect();
                 return [t.open, box.bottom > 0 && box.top < window.innerHeight, box.top, window.scrollY];",
                vec![],
            )
            .await;
        assert_eq!(
            opened.as_array().unwrap()[..2],
            [json!(true), json!(true)],
            "at {width}: {opened}"
        );
        let repeat = browser
            .find("#turn-19 summary .repeat", Duration::from_secs(5))
            .await;
        assert_eq!(browser.text(&repeat).await, "repeats turn 7");

        let Some(operator) = browser_at(&cards_base, width, "audit").await else {
            return;
        };
        operator
            .go(&format!(
                "{cards_base}/console/conversation?id=alice%2F{}",
                paused.conversation
            ))
            .await;
        operator
            .find("table#audit tr[data-outcome]", Duration::from_secs(5))
            .await;
        found.extend(problems(&operator, &axe, &format!("audit at {width}")).await);
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
