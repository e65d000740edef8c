//! The call log searched the way incidents are reported: by the `x-request-id` a client received, by the
//! conversation id it sent (bare) or the gateway stored (qualified by its caller), by caller, by model and by the
//! beginning of a word (`zanzib` finds "Zanzibar"), on SQLite and PostgreSQL; a search that cannot find anything
//! is refused as malformed, not answered "no match"; each found call shows a snippet with the match marked and
//! links to the matching message on the timeline, marked and scrolled to (in Chromium at 1,400, 800 and 400 px,
//! with `axe-core`).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::webdriver::{axe_core, Driver};
use common::{console_login, post, send, Answer, Harness};
use serde_json::json;

use super::console_calls::{answer_in_the_requested_model, rows};
use super::console_pages::problems;

const OPS_KEY: &str = "sk-ops-carol-0123456789";

/// Unique per run: a PostgreSQL database outlives the test and holds other tests' calls.
fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos:x}")
}

/// Two clients, `alice<run>` and `bob<run>`, and an operator.
async fn gateway(dir: &Path, run: &str, database_url: Option<String>) -> Harness {
    std::fs::write(
        dir.join("clients"),
        format!("alice{run}:sk-alice\nbob{run}:sk-bob\n"),
    )
    .unwrap();
    std::fs::write(dir.join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let (clients, operators) = (dir.join("clients"), dir.join("operators"));
    Harness::start(answer_in_the_requested_model, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
        c.database_url = database_url;
    })
    .await
}

async fn chat(gw: &Harness, key: &str, conversation: &str, model: &str, text: &str) -> Answer {
    let body = json!({"model": model, "messages": [{"role": "user", "content": text}]});
    let auth = format!("Bearer {key}");
    let answer = post(
        &gw.url("/v1/chat/completions"),
        body.to_string(),
        &[
            ("authorization", &auth),
            ("x-conversation-id", conversation),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer
}

/// The `href` of the first snippet link on a call log page.
fn snippet_link(page: &str) -> String {
    let at = page.find("<p class=\"snippet\"><a href=\"").expect(page) + 28;
    page[at..at + page[at..].find('"').unwrap()].replace("&amp;", "&")
}

async fn search_on(database_url: Option<String>) {
    let run = unique();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &run, database_url).await;
    let (alice, bob) = (format!("alice{run}"), format!("bob{run}"));
    let isles = format!("isles-{run}");
    let asked = chat(
        &gw,
        "sk-alice",
        &isles,
        "model-a",
        "Is Zanzibar warm in March?",
    )
    .await;
    let request_id = asked.headers["x-request-id"].to_str().unwrap().to_owned();
    let booked_model = format!("model-{run}");
    chat(
        &gw,
        "sk-bob",
        &format!("hotel-{run}"),
        &booked_model,
        "Book a zany hotel in Stone Town",
    )
    .await;

    let cookie = console_login(&gw, OPS_KEY).await;
    let search = |q: String| {
        let (url, cookie) = (
            gw.url(&format!("/console/calls?q={}", q.replace('/', "%2F"))),
            cookie.clone(),
        );
        async move { send("GET", &url, &[("cookie", &cookie)], "").await }
    };
    let found = |page: &Answer| {
        assert_eq!(page.status, 200, "{}", page.body);
        rows(&page.body)
    };
    let by_request = search(request_id.clone()).await;
    let alice_call = found(&by_request);
    assert_eq!(alice_call.len(), 1, "{}", by_request.body);
    assert!(by_request.body.contains("Is Zanzibar warm in March?"));
    // The id the client sent, and the one the gateway stored for it.
    assert_eq!(found(&search(isles.clone()).await), alice_call);
    assert_eq!(found(&search(format!("{alice}/{isles}")).await), alice_call);
    assert_eq!(found(&search(alice.clone()).await), alice_call);
    let bob_call = found(&search(bob.clone()).await);
    assert_eq!(bob_call.len(), 1);
    assert_ne!(bob_call, alice_call);
    assert_eq!(found(&search(booked_model).await), bob_call);

    // The beginning of a word, with a snippet of the message that matched.
    let zanzib = send(
        "GET",
        &gw.url(&format!("/console/calls?q=zanzib&caller={alice}")),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(found(&zanzib), alice_call);
    assert!(
        zanzib
            .body
            .contains("<p class=\"snippet\"><a href=\"/console/conversation?id="),
        "{}",
        zanzib.body
    );
    assert!(
        zanzib
            .body
            .contains("Is <mark>Zanzibar</mark> warm in March?"),
        "{}",
        zanzib.body
    );
    let zan = send(
        "GET",
        &gw.url(&format!("/console/calls?q=ZAN&caller={bob}")),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(found(&zan), bob_call);
    assert!(zan.body.contains("<mark>zany</mark>"), "{}", zan.body);
    // No word begins with the middle of one.
    assert!(found(&search(format!("anzibar&caller={alice}")).await).is_empty());

    // The link opens the timeline at the matching message, marked.
    let link = snippet_link(&zanzib.body);
    let (path, anchor) = link.split_once('#').unwrap();
    assert_eq!(anchor, format!("m-{}-0", alice_call[0]).replace('/', "%2F"));
    let timeline = send("GET", &gw.url(path), &[("cookie", &cookie)], "").await;
    assert_eq!(timeline.status, 200, "{}", timeline.body);
    let hit = format!("class=\"message user hit\" id=\"m-{}-0\"", alice_call[0]);
    assert!(timeline.body.contains(&hit), "{}", timeline.body);
    assert_eq!(
        timeline.body.matches("<mark>").count(),
        1,
        "only the found message is marked: {}",
        timeline.body
    );

    // A search that cannot find anything says so.
    for (q, problem) in [
        ("--", "holds no word or id"),
        (&"w+".repeat(17)[..], "has 17 words"),
    ] {
        let refused = search(q.to_owned()).await;
        assert_eq!(refused.status, 400, "{q}: {}", refused.body);
        assert!(
            refused.body.contains("cannot find anything") && refused.body.contains(problem),
            "{q}: {}",
            refused.body
        );
    }
    let poll = send(
        "GET",
        &gw.url("/console/api/calls?q=%2A"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(poll.status, 400, "{}", poll.body);
    assert!(poll.json()["error"].as_str().unwrap().contains("no word"));
}

#[tokio::test]
async fn the_call_log_finds_calls_the_way_incidents_are_reported_on_sqlite() {
    search_on(None).await;
}

#[tokio::test]
async fn the_call_log_finds_calls_the_way_incidents_are_reported_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    search_on(Some(url)).await;
}

/// A long conversation whose 24th turn mentions Zanzibar: the search's snippet leads to that message, scrolled
/// into view and marked, at every width, and both pages pass `axe-core` without scrolling sideways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_result_opens_the_timeline_at_its_message_in_a_browser() {
    let Some(axe) = axe_core() else {
        return;
    };
    let run = unique();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &run, None).await;
    for turn in 1..=30 {
        let text = if turn == 24 {
            "Turn 24: is Zanzibar warm in March, and how long is the ferry from Dar es Salaam?"
                .to_owned()
        } else {
            format!("Turn {turn}: another question about the weather on the coast.")
        };
        chat(&gw, "sk-alice", "long-trip", "model-a", &text).await;
    }
    let base = format!("http://{}", gw.addr);
    let mut found = Vec::new();
    for width in [1400, 800, 400] {
        let Some(browser) = Driver::start_sized(&format!("search-{width}"), width, 900).await
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
        browser.go(&format!("{base}/console/calls?q=zanzib")).await;
        let link = browser
            .find("table.calls p.snippet a", Duration::from_secs(10))
            .await;
        assert!(browser.text(&link).await.contains("Zanzibar"));
        found.extend(problems(&browser, &axe, &format!("search at {width}")).await);
        browser.click(&link).await;
        let hit = browser
            .find(".message.hit mark", Duration::from_secs(10))
            .await;
        assert_eq!(browser.text(&hit).await, "Zanzibar");
        let placed = browser
            .execute(
                "const m = document.querySelector('.message.hit');
                 const box = m.getBoundingClientRect();
                 return [box.top >= 0 && box.top < window.innerHeight, window.scrollY > 0,
                         location.hash === '#' + encodeURIComponent(m.id)];",
                vec![],
            )
            .await;
        assert_eq!(placed, json!([true, true, true]), "at {width} px");
        found.extend(problems(&browser, &axe, &format!("timeline hit at {width}")).await);
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
