//! Pending approvals seen from every console page: the navigation's count and the tab title on every page,
//! kept live by the page's script (Chromium, with `axe-core`, at 1,400, 800 and 400 px); the call log's
//! "awaiting approval" filter lists the calls whose approval still waits and not those decided (SQLite and
//! PostgreSQL); the approval cards name the model whose answer made the call.

use crate::common;

use std::time::Duration;

use common::webdriver::{axe_core, Driver};
use common::{console_login, send, Harness};
use serde_json::json;

use super::console_calls::rows;
use super::console_cards::{call_row, gateway, pause_write, Paused};
use super::console_pages::problems;

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
const SAME: (&str, &str) = ("sec-fetch-site", "same-origin");

async fn pause(gw: &Harness, name: &str) -> Paused {
    pause_write(
        gw,
        name,
        json!({"path": format!("notes/{name}.txt"), "content": "later"}),
    )
    .await
}

/// The text between `marker` and the next `<` of `page`.
fn after<'a>(page: &'a str, marker: &str) -> &'a str {
    let at = page
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in {page}"))
        + marker.len();
    &page[at..at + page[at..].find('<').unwrap()]
}

/// `shared`: the database holds other tests' approvals and calls, so counts are at least ours.
async fn waiting_on(database_url: Option<String>) {
    let shared = database_url.is_some();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), database_url).await;
    let waits = pause(&gw, "waits").await;
    let decided = pause(&gw, "decided").await;
    let cookie = console_login(&gw, OPS_KEY).await;
    let get = |path: &str| {
        let (url, cookie) = (gw.url(path), cookie.clone());
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let inbox = get("/console").await.body;
    let csrf = after(&inbox, "name=\"csrf-token\" content=\"").to_owned();
    let csrf = &csrf[..64];
    let denied = send(
        "POST",
        &gw.url(&format!("/console/approvals/{}/decision", decided.id)),
        &[FORM, SAME, ("cookie", &cookie)],
        &format!("csrf={csrf}&decision=deny&reason=not+now"),
    )
    .await;
    assert_eq!(denied.status, 303, "{}", denied.body);

    // Every page counts what waits, in its navigation and its tab title.
    let count: usize = get("/console/api/waiting").await.json()["count"]
        .as_u64()
        .unwrap() as usize;
    if shared {
        assert!(count >= 1);
    } else {
        assert_eq!(count, 1);
    }
    for page in [
        "/console",
        "/console/calls",
        "/console/conversations",
        "/console/usage",
    ] {
        let body = get(page).await.body;
        assert!(
            after(&body, "<title>").starts_with(&format!("({count}) ")),
            "{page}: {}",
            after(&body, "<title>")
        );
        assert_eq!(
            after(&body, "id=\"nav-pending-count\">"),
            format!("({count})"),
            "{page}"
        );
    }

    // The call log's filter: the call whose approval waits, not the decided one.
    let listed = get("/console/calls?status=awaiting_approval").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let row = call_row(&listed.body, &waits.conversation);
    assert!(row.contains("data-status=\"awaiting_approval\""), "{row}");
    assert!(
        !listed
            .body
            .contains(&format!("alice%2F{}#call-", decided.conversation)),
        "{}",
        listed.body
    );
    assert!(
        listed
            .body
            .contains("<option value=\"awaiting_approval\" selected>awaiting approval</option>"),
        "{}",
        listed.body
    );
    let ours = rows(&listed.body);
    if !shared {
        assert_eq!(ours.len(), 1, "{}", listed.body);
    }
    let all = get("/console/calls").await.body;
    assert!(call_row(&all, &decided.conversation).contains("data-status=\"approval_decided\""));
    let refused = get("/console/calls?status=awaiting_approval&q=notes").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("do not combine"), "{}", refused.body);

    // The card names the model whose answer made the call: the model the call log shows for it.
    let model = after(row, "<td class=\"model\" data-label=\"Model\">").to_owned();
    assert_ne!(model, "—");
    let inbox = get("/console").await.body;
    let card = &inbox[inbox.find(&format!("data-id=\"{}\"", waits.id)).unwrap()..];
    assert_eq!(after(card, "<p class=\"model\">"), model);
}

#[tokio::test]
async fn every_page_counts_what_waits_and_the_call_log_filters_it_on_sqlite() {
    waiting_on(None).await;
}

#[tokio::test]
async fn every_page_counts_what_waits_and_the_call_log_filters_it_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    waiting_on(Some(url)).await;
}

/// A call pausing while the operator reads the call log: the page's navigation count and its tab title follow,
/// without a reload; the awaiting-approval list fits every width and passes `axe-core`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_count_of_what_waits_stays_live_on_every_page_in_a_browser() {
    let Some(axe) = axe_core() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), None).await;
    pause(&gw, "first").await;
    let base = format!("http://{}", gw.addr);
    let mut found = Vec::new();
    let mut waiting = 1;
    for (width, page) in [
        (1400, "/console/calls"),
        (800, "/console/conversations"),
        (400, "/console/usage"),
    ] {
        let Some(browser) = Driver::start_sized(&format!("waiting-{width}"), width, 900).await
        else {
            return;
        };
        browser.go(&format!("{base}/console/login")).await;
        let key = browser.find("#key", Duration::from_secs(5)).await;
        browser.type_into(&key, OPS_KEY).await;
        browser
            .click(&browser.find("#login", Duration::from_secs(5)).await)
            .await;
        browser.find("nav", Duration::from_secs(10)).await;
        browser.go(&format!("{base}{page}")).await;
        let count = browser
            .find("#nav-pending-count", Duration::from_secs(5))
            .await;
        assert_eq!(browser.text(&count).await, format!("({waiting})"));
        pause(&gw, &format!("more-{width}")).await;
        waiting += 1;
        browser
            .find_containing(
                "#nav-pending-count",
                &format!("({waiting})"),
                Duration::from_secs(10),
            )
            .await;
        let title = browser.execute("return document.title;", vec![]).await;
        assert!(
            title
                .as_str()
                .unwrap()
                .starts_with(&format!("({waiting}) ")),
            "{page} at {width}: {title}"
        );
        browser
            .go(&format!("{base}/console/calls?status=awaiting_approval"))
            .await;
        browser
            .find(
                "#calls tbody tr[data-status=\"awaiting_approval\"]",
                Duration::from_secs(5),
            )
            .await;
        found.extend(problems(&browser, &axe, &format!("awaiting approval at {width}")).await);
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
