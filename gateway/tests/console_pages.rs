//! Every console page in headless Chromium at a desktop width (1,400 px) and a phone's (400 px): no page
//! scrolls sideways, every action (approve, deny, log out) is on screen, and `axe-core` finds no serious or
//! critical accessibility violation. The inbox says when it last heard from the gateway and when it cannot reach
//! it, and a decision that cannot reach the gateway is shown as failed and stays in its form. Needs Chromium, chromedriver and `npm ci --prefix gateway/tests/axe`;
//! without them it skips with a message, unless `CI` is set (then it fails).

mod common;

use std::path::Path;
use std::time::Duration;

use common::webdriver::{axe_core, Driver, ELEMENT_KEY};
use common::{post, write_file_then_answer, Harness};
use serde_json::json;
use tower_chat::test_server::RecordedRequest;

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const ALICE: (&str, &str) = ("authorization", "Bearer sk-alice");

fn write_then_answer(req: &RecordedRequest, _index: usize) -> tower_chat::test_server::Reply {
    let arguments =
        json!({"path": "notes/plan.txt", "content": "line one\nline two\n"}).to_string();
    write_file_then_answer(req, &arguments)
}

async fn gateway(dir: &Path) -> Harness {
    std::fs::write(dir.join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.join("clients"), dir.join("operators"));
    Harness::start(write_then_answer, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
    })
    .await
}

/// A call of alice's paused for approval, so the inbox, the conversations and a timeline have content.
async fn pause_a_call(gw: &Harness, conversation: &str) {
    let headers = [ALICE, ("x-conversation-id", conversation)];
    let body = json!({"model": "test-model", "messages": [
        {"role": "user", "content": "Write the plan to notes/plan.txt please"}
    ]});
    let answer = post(&gw.url("/v1/chat/completions"), body.to_string(), &headers).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["tower_chat"]["finish_reason"],
        "awaiting_approval"
    );
}

async fn log_in(browser: &Driver, base: &str) {
    browser.go(&format!("{base}/console/login")).await;
    let key = browser.find("#key", Duration::from_secs(5)).await;
    browser.type_into(&key, OPS_KEY).await;
    browser
        .click(&browser.find("#login", Duration::from_secs(5)).await)
        .await;
    browser
        .find("#approvals tbody tr[data-id]", Duration::from_secs(10))
        .await;
}

/// What is wrong with the page now: sideways scrolling, actions off screen, accessibility violations.
async fn problems(browser: &Driver, axe: &str, page: &str) -> Vec<String> {
    let mut found = Vec::new();
    if browser.scrolls_sideways().await {
        found.push(format!("{page}: scrolls sideways"));
    }
    for action in browser
        .off_screen("button, a.button, form.logout button, nav a")
        .await
    {
        found.push(format!("{page}: `{action}` is off screen"));
    }
    for violation in browser.axe_violations(axe).await {
        found.push(format!("{page}: {violation}"));
    }
    found
}

async fn every_page_at(width: u32) {
    let Some(axe) = axe_core() else {
        return;
    };
    let Some(browser) = Driver::start_sized(&format!("pages-{width}"), width, 900).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    pause_a_call(&gw, "plan-1").await;
    let base = format!("http://{}", gw.addr);

    let mut found = Vec::new();
    browser.go(&format!("{base}/console/login")).await;
    browser.find("#key", Duration::from_secs(5)).await;
    found.extend(problems(&browser, &axe, "login").await);
    log_in(&browser, &base).await;
    assert_eq!(
        browser
            .find_all("#approvals tr[data-id] td[data-label]")
            .await
            .len(),
        8,
        "each field of an approval names itself (the label a phone's card shows)"
    );
    browser.screenshot("inbox").await;
    found.extend(problems(&browser, &axe, "inbox").await);

    found.extend(call_log_at(&browser, &axe, &gw, &base).await);

    browser.go(&format!("{base}/console/conversations")).await;
    let link = browser
        .find("#conversations a.conversation", Duration::from_secs(5))
        .await;
    let timeline = browser.attribute(&link, "href").await.unwrap();
    browser.screenshot("conversations").await;
    found.extend(problems(&browser, &axe, "conversations").await);

    browser.go(&format!("{base}{timeline}")).await;
    browser.find("section.call", Duration::from_secs(5)).await;
    browser.screenshot("timeline").await;
    found.extend(problems(&browser, &axe, "timeline").await);

    for by in ["model", "caller"] {
        browser
            .go(&format!("{base}/console/usage?range=1h&by={by}"))
            .await;
        browser.find("#usage-totals", Duration::from_secs(5)).await;
        browser.screenshot(&format!("usage-by-{by}")).await;
        found.extend(problems(&browser, &axe, &format!("usage by {by}")).await);
    }

    assert!(found.is_empty(), "at {width} px:\n{}", found.join("\n"));

    // The check can fail: an image without a text alternative is reported.
    browser
        .execute(
            "document.querySelector('main').appendChild(document.createElement('img'));",
            vec![],
        )
        .await;
    let caught = browser.axe_violations(&axe).await;
    assert!(
        caught.iter().any(|v| v.starts_with("image-alt")),
        "{caught:?}"
    );
}

/// The call log: filtered through its form (a phone reaches every field and button), then a call made while it
/// is open appears on top without a reload; checked for fit and accessibility with the new row in place.
async fn call_log_at(browser: &Driver, axe: &str, gw: &Harness, base: &str) -> Vec<String> {
    let mut found = Vec::new();
    browser
        .go(&format!("{base}/console/calls?status=failed"))
        .await;
    browser
        .find("#no-calls:not(.hidden)", Duration::from_secs(5))
        .await;
    found.extend(problems(browser, axe, "call log, filtered to nothing").await);
    // The form: choose "any" outcome again, search the paused call's words, apply.
    browser
        .execute(
            "document.querySelector('#call-filters select[name=status]').value = '';",
            vec![],
        )
        .await;
    let search = browser
        .find("#call-filters input[name=q]", Duration::from_secs(5))
        .await;
    browser.type_into(&search, "plan notes").await;
    browser
        .click(
            &browser
                .find("#call-filters button[type=submit]", Duration::from_secs(5))
                .await,
        )
        .await;
    browser
        .find("#calls tbody tr[data-call-id]", Duration::from_secs(5))
        .await;
    assert!(
        browser.url().await.contains("q=plan+notes"),
        "{}",
        browser.url().await
    );

    browser.go(&format!("{base}/console/calls")).await;
    let before = browser
        .find_all("#calls tbody tr[data-call-id]")
        .await
        .len();
    assert!(before >= 1, "the paused call is listed");
    assert_eq!(
        browser
            .find_all("#calls tbody tr[data-call-id] td[data-label]")
            .await
            .len(),
        9 * before,
        "each cell names itself (the label a phone's card shows)"
    );
    // A mark on the page's window: it survives only if the page is not reloaded.
    browser
        .execute("window.stillTheSamePage = true;", vec![])
        .await;
    pause_a_call(gw, "plan-live").await;
    let arrived = browser
        .find(
            "#calls tbody tr[data-call-id]:first-child a[href*='plan-live']",
            Duration::from_secs(10),
        )
        .await;
    assert!(browser.text(&arrived).await.len() >= 19, "the call's time");
    assert_eq!(
        browser
            .find_all("#calls tbody tr[data-call-id]")
            .await
            .len(),
        before + 1
    );
    assert_eq!(
        browser
            .execute("return window.stillTheSamePage === true;", vec![])
            .await,
        true,
        "the new call came without a reload"
    );
    browser.screenshot("calls").await;
    found.extend(problems(browser, axe, "call log").await);
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_desktop_and_passes_axe() {
    every_page_at(1400).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_phone_and_passes_axe() {
    every_page_at(400).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_says_when_the_gateway_is_unreachable_and_keeps_a_failed_decision() {
    let Some(browser) = Driver::start("liveness").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut gw = gateway(dir.path()).await;
    pause_a_call(&gw, "plan-2").await;
    let base = format!("http://{}", gw.addr);
    log_in(&browser, &base).await;
    let liveness = browser
        .find("#liveness[data-state=live]", Duration::from_secs(5))
        .await;
    assert!(browser.text(&liveness).await.starts_with("Updated "));

    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    let down = browser
        .find("#liveness[data-state=unreachable]", Duration::from_secs(10))
        .await;
    assert!(
        browser.text(&down).await.contains("Gateway unreachable"),
        "{}",
        browser.text(&down).await
    );
    browser.screenshot("unreachable").await;

    // Deciding now fails visibly, and the operator's reason is still in the form.
    let reason = browser
        .find(
            "#approvals tr[data-id] input[name=reason]",
            Duration::from_secs(5),
        )
        .await;
    browser.type_into(&reason, "looks fine").await;
    let approve = browser
        .find(
            "#approvals tr[data-id] button.approve",
            Duration::from_secs(5),
        )
        .await;
    browser.click(&approve).await;
    let failed = browser
        .find("#decision-error:not(.hidden)", Duration::from_secs(10))
        .await;
    assert!(
        browser
            .text(&failed)
            .await
            .contains("did not reach the gateway"),
        "{}",
        browser.text(&failed).await
    );
    assert!(
        browser.url().await.ends_with("/console"),
        "{}",
        browser.url().await
    );
    let reason = browser
        .find(
            "#approvals tr[data-id] input[name=reason]",
            Duration::from_secs(1),
        )
        .await;
    let kept = browser
        .execute(
            "return arguments[0].value;",
            vec![json!({ELEMENT_KEY: reason})],
        )
        .await;
    assert_eq!(kept, "looks fine");
}
