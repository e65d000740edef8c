//! The console's managed keys, teams and audit pages. Over HTTP, on SQLite and on PostgreSQL: an operator
//! creates a team and a key with the pages' forms, the key's secret is shown once (`no-store`) and works for a
//! chat call, whose spend the key's, the list's and the team's pages show against their budgets (for a key
//! without budgets, the list shows the spend its call records hold); a rotation and a revocation each take a
//! confirmation first, the old secret works during the grace period, a revoked one is refused; every change is
//! in the admin API's audit log under the operator's name, and no page but the one-time answer holds a secret.
//! In Chromium at 1,400 and 400 px: the same steps through the forms (and a change of the key's limits), every
//! page without a serious axe-core violation and without sideways scrolling.

use crate::common;

use std::time::Duration;

use common::console_forms::{csrf, text_after, Console};
use common::webdriver::{axe_core, Driver};
use common::{console_login, post, request, send, Answer, Harness};
use serde_json::json;
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config_file::ConfigFile;

pub(super) const OPS_KEY: &str = "sk-ops-carol-0123456789";
const WAIT: Duration = Duration::from_secs(10);

/// 600,000 input and 3 output tokens at $1 per million each: $0.600003 a call.
fn priced(_request: &RecordedRequest, _index: usize) -> Reply {
    Reply::openai_stream(&[
        json!({"id": "chatcmpl-1", "model": "test-model", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 600000, "completion_tokens": 3, "total_tokens": 600003}}),
    ])
}

pub(super) fn unique(label: &str) -> String {
    format!(
        "{label}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A gateway managing keys (clients file, operator carol, a database) with test-model priced.
pub(super) async fn start(database_url: Option<String>) -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("clients"), "alice:sk-alice-console-keys\n").unwrap();
    std::fs::write(dir.path().join("operators"), format!("carol:{OPS_KEY}\n")).unwrap();
    let file = ConfigFile::parse(
        "[limits.prices.\"test-model\"]\ninput = 1.0\noutput = 1.0\n",
        "gateway.toml",
    )
    .unwrap();
    let (clients, operators) = (dir.path().join("clients"), dir.path().join("operators"));
    let gw = Harness::start(priced, move |c| {
        c.file = file;
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
        c.database_url = database_url;
    })
    .await;
    (gw, dir)
}

pub(super) async fn chat(gw: &Harness, secret: &str) -> Answer {
    post(
        &gw.url("/v1/chat/completions"),
        request(false, "Hello").to_string(),
        &[("authorization", &format!("Bearer {secret}"))],
    )
    .await
}

/// The secret of a one-time answer page.
pub(super) fn secret_of(answer: &Answer) -> String {
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.headers["cache-control"], "no-store");
    assert!(
        answer.body.contains("it will not be shown again"),
        "{}",
        answer.body
    );
    let secret = text_after(&answer.body, "id=\"new-secret\" tabindex=\"0\">").to_owned();
    assert!(secret.starts_with("tcg_") && secret.len() == 68, "{secret}");
    secret
}

/// The HTML of a table row of `html` holding `marker` (up to the next row).
pub(super) fn row<'a>(html: &'a str, marker: &str) -> &'a str {
    html.split("<tr")
        .find(|tr| tr.contains(marker))
        .unwrap_or_else(|| panic!("no row with {marker} in {html}"))
}

async fn over_http_on(database_url: Option<String>) {
    let sqlite = database_url.is_none();
    let (gw, _dir) = start(database_url).await;
    let console = Console {
        cookie: console_login(&gw, OPS_KEY).await,
        gw: &gw,
    };
    let token = csrf(&console.get("/console/keys").await.body);

    // A team with a daily budget.
    let team_name = unique("team");
    let made = console
        .form(
            "/console/teams",
            &[
                ("csrf", &token),
                ("name", &team_name),
                ("cost_per_day_usd", "5"),
            ],
        )
        .await;
    assert_eq!(made.status, 303, "{}", made.body);
    let team_page = made.headers["location"].to_str().unwrap().to_owned();
    let team_id = team_page
        .strip_prefix("/console/teams/")
        .unwrap()
        .to_owned();

    // A key of the team, its secret shown once.
    let key_name = unique("bot");
    let fields = [
        ("csrf", token.as_str()),
        ("name", &key_name),
        ("team", &team_id),
        ("expires", ""),
        ("models", "test-*"),
        ("cost_per_day_usd", "2"),
        ("cost_per_month_usd", "40"),
        ("requests_per_minute", "100"),
    ];
    let made = console.form("/console/keys", &fields).await;
    let first = secret_of(&made);
    let key_id = text_after(&made.body, "href=\"/console/keys/")
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    // The same name again is refused as the admin API refuses it.
    let again = console.form("/console/keys", &fields).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("exists already"), "{}", again.body);
    // A form without the session's CSRF token changes nothing.
    let forged = console
        .form(
            &format!("/console/keys/{key_id}/revoke"),
            &[("csrf", "x"), ("confirm", "1")],
        )
        .await;
    assert_eq!(forged.status, 403, "{}", forged.body);

    // The secret works; its spend shows against the key's and the team's budgets.
    let answered = chat(&gw, &first).await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    let key_page = console.get(&format!("/console/keys/{key_id}")).await;
    let today = row(&key_page.body, "data-counter=\"cost_per_day\"");
    assert!(today.contains(">own</th>"), "{today}");
    assert!(today.contains("data-label=\"used\">$0.600003<"), "{today}");
    assert!(today.contains("data-label=\"limit\">$2.00<"), "{today}");
    assert!(key_page.body.contains("id=\"key-status\">active<"));
    let list = console.get("/console/keys").await;
    let listed = row(&list.body, &format!("data-key=\"{key_id}\""));
    assert!(
        listed.contains("data-label=\"today\">$0.600003 of $2.00<"),
        "{listed}"
    );
    assert!(
        listed.contains("data-label=\"this month\">$0.600003 of $40.00<"),
        "{listed}"
    );
    assert!(listed.contains(&format!(">{team_name}</a>")), "{listed}");
    assert!(listed.contains("data-label=\"models\">test-*<"), "{listed}");
    // A key without budgets: the list shows what the call records say it spent.
    if sqlite {
        let free_name = unique("free");
        let free = console
            .form("/console/keys", &[("csrf", &token), ("name", &free_name)])
            .await;
        let free_secret = secret_of(&free);
        assert_eq!(chat(&gw, &free_secret).await.status, 200);
        let marker = format!(">{free_name}</a>");
        tower_chat_testkit::until("the key's spend in the list", || {
            let (console, marker) = (&console, &marker);
            async move {
                let list = console.get("/console/keys").await;
                row(&list.body, marker).contains("data-label=\"today\">$0.600003 (no budget)<")
            }
        })
        .await;
        let list = console.get("/console/keys").await;
        let listed = row(&list.body, &marker);
        assert!(
            listed.contains("data-label=\"this month\">$0.600003 (no budget)<"),
            "{listed}"
        );
        assert!(
            listed.contains("data-label=\"requests\">no limit<"),
            "{listed}"
        );
    }
    let team = console.get(&team_page).await;
    let shared = row(&team.body, "data-counter=\"cost_per_day\"");
    assert!(
        shared.contains(&format!(">team {team_name}</th>")),
        "{shared}"
    );
    assert!(
        shared.contains("data-label=\"used\">$0.600003<"),
        "{shared}"
    );
    assert!(shared.contains("data-label=\"limit\">$5.00<"), "{shared}");
    assert!(
        team.body.contains(&format!(">{key_name}</a>")),
        "{}",
        team.body
    );

    // Rotation: a confirmation first (nothing changes), then the new secret, once; the old one works in its grace.
    let rotate = format!("/console/keys/{key_id}/rotate");
    let asked = console
        .form(&rotate, &[("csrf", &token), ("grace_seconds", "3600")])
        .await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(
        asked.body.contains(&format!("Rotate key {key_name}?")),
        "{}",
        asked.body
    );
    assert!(asked.body.contains("name=\"confirm\" value=\"1\""));
    assert!(!asked.body.contains("new-secret"));
    let rotated = console
        .form(
            &rotate,
            &[
                ("csrf", &token),
                ("grace_seconds", "3600"),
                ("confirm", "1"),
            ],
        )
        .await;
    let second = secret_of(&rotated);
    assert_ne!(first, second);
    assert!(rotated
        .body
        .contains("The previous secret stays valid until"));
    assert_eq!(
        chat(&gw, &first).await.status,
        200,
        "the old secret, in its grace"
    );
    assert_eq!(chat(&gw, &second).await.status, 200);
    let key_page = console.get(&format!("/console/keys/{key_id}")).await;
    assert!(
        key_page.body.contains("id=\"key-status\">rotating<"),
        "{}",
        key_page.body
    );

    // Revocation: "cannot be undone" first, then refused from the next call.
    let revoke = format!("/console/keys/{key_id}/revoke");
    let asked = console.form(&revoke, &[("csrf", &token)]).await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(asked
        .body
        .contains(&format!("Revoke key {key_name}? This cannot be undone")));
    assert_eq!(
        chat(&gw, &second).await.status,
        200,
        "not revoked before confirming"
    );
    let revoked = console
        .form(&revoke, &[("csrf", &token), ("confirm", "1")])
        .await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);
    assert_eq!(
        revoked.headers["location"],
        format!("/console/keys/{key_id}?done=revoked").as_str()
    );
    assert_eq!(chat(&gw, &second).await.status, 401);
    assert_eq!(chat(&gw, &first).await.status, 401);

    // Every change in the admin API's audit log, under the operator's name, as an API change would be.
    let auth = format!("Bearer {OPS_KEY}");
    let audit = send(
        "GET",
        &gw.url(&format!("/admin/audit?target={key_id}")),
        &[("authorization", &auth)],
        "",
    )
    .await
    .json();
    let entries: Vec<(String, String)> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["actor"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let carol = |action: &str| (action.to_owned(), "carol".to_owned());
    assert_eq!(entries, [carol("revoke"), carol("rotate"), carol("create")]);
    let team_audit = send(
        "GET",
        &gw.url(&format!("/admin/audit?target={team_id}")),
        &[("authorization", &auth)],
        "",
    )
    .await
    .json();
    assert_eq!(team_audit["data"][0]["action"], "create");
    assert_eq!(team_audit["data"][0]["actor"], "carol");
    // The console's audit page shows them, newest first.
    let page = console
        .get(&format!("/console/audit?target={key_id}"))
        .await;
    let actions: Vec<&str> = page
        .body
        .split("data-action=\"")
        .skip(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect();
    assert_eq!(actions, ["revoke", "rotate", "create"], "{}", page.body);
    assert!(row(&page.body, "data-action=\"revoke\"").contains("data-label=\"who\">carol<"));

    // No page but the one-time answers holds a secret, whole or its hex.
    let mut pages = Vec::new();
    for path in [
        "/console/keys".to_owned(),
        format!("/console/keys/{key_id}"),
        "/console/teams".to_owned(),
        team_page.clone(),
        "/console/audit".to_owned(),
        format!("/console/audit?target={key_id}"),
    ] {
        pages.push((path.clone(), console.get(&path).await.body));
    }
    for (path, html) in &pages {
        for secret in [&first, &second] {
            assert!(!html.contains(secret.as_str()), "{path} shows a secret");
            assert!(!html.contains(&secret[4..]), "{path} shows a secret's hex");
        }
    }
    if sqlite {
        let mut stored = Vec::new();
        for entry in std::fs::read_dir(gw.files.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                stored.extend(std::fs::read(&path).unwrap());
            }
        }
        for secret in [&first, &second] {
            assert!(
                !stored.windows(64).any(|w| w == &secret.as_bytes()[4..]),
                "a secret in the database"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_teams_and_audit_pages_over_http_on_sqlite() {
    over_http_on(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_teams_and_audit_pages_over_http_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    over_http_on(Some(url)).await;
}

/// The page in the browser now: no sideways scrolling, no serious axe-core violation (each as a finding).
async fn check(browser: &Driver, axe: &str, label: &str, found: &mut Vec<String>) {
    if browser.scrolls_sideways().await {
        found.push(format!("{label}: scrolls sideways"));
    }
    for violation in browser.axe_violations(axe).await {
        found.push(format!("{label}: {violation}"));
    }
}

async fn in_chromium_at(width: u32) {
    let Some(axe) = axe_core() else {
        return;
    };
    let Some(browser) = Driver::start_sized(&format!("keys-{width}"), width, 900).await else {
        return;
    };
    let (gw, _dir) = start(None).await;
    let base = format!("http://{}", gw.addr);
    let mut found = Vec::new();
    browser.go(&format!("{base}/console/login")).await;
    browser.type_into_css("#key", OPS_KEY, WAIT).await;
    browser.click_css("#login", WAIT).await;
    browser.find("nav", WAIT).await;

    // A team, through its form.
    browser.go(&format!("{base}/console/teams")).await;
    check(
        &browser,
        &axe,
        &format!("teams (empty) at {width}"),
        &mut found,
    )
    .await;
    let team_name = unique("team");
    browser.type_into_css("#team-name", &team_name, WAIT).await;
    browser.type_into_css("#team-cost-day", "5", WAIT).await;
    browser.click_css("#create-team-button", WAIT).await;
    browser
        .find_containing("#shown-team-name", &team_name, WAIT)
        .await;
    let team_id = browser.url().await.rsplit('/').next().unwrap().to_owned();
    check(&browser, &axe, &format!("team at {width}"), &mut found).await;

    // A key of the team, its secret read from the one page that shows it.
    browser.go(&format!("{base}/console/keys")).await;
    check(
        &browser,
        &axe,
        &format!("keys (empty) at {width}"),
        &mut found,
    )
    .await;
    let key_name = unique("bot");
    browser.type_into_css("#key-name", &key_name, WAIT).await;
    browser
        .execute(
            "document.querySelector('#key-team').value = arguments[0];",
            vec![json!(team_id)],
        )
        .await;
    browser.type_into_css("#key-cost-day", "2", WAIT).await;
    browser.type_into_css("#key-cost-month", "40", WAIT).await;
    browser.type_into_css("#key-rpm", "100", WAIT).await;
    browser.click_css("#create-key-button", WAIT).await;
    let first = browser.text_of("#new-secret", WAIT).await;
    assert!(first.starts_with("tcg_") && first.len() == 68, "{first}");
    check(
        &browser,
        &axe,
        &format!("new secret at {width}"),
        &mut found,
    )
    .await;
    assert_eq!(chat(&gw, &first).await.status, 200);

    // Its page: the spend against the budget.
    browser.click_css("#to-key", WAIT).await;
    browser
        .find_containing(
            "#key-usage tr[data-counter=cost_per_day]",
            "$0.600003",
            WAIT,
        )
        .await;
    check(&browser, &axe, &format!("key at {width}"), &mut found).await;
    let key_id = browser.url().await.rsplit('/').next().unwrap().to_owned();
    // Its requests per minute changed in the form its page fills with its values.
    let rpm = browser.find("#edit-rpm", WAIT).await;
    assert_eq!(
        browser.attribute(&rpm, "value").await.as_deref(),
        Some("100")
    );
    browser
        .execute("document.querySelector('#edit-rpm').value = '';", vec![])
        .await;
    browser.type_into_css("#edit-rpm", "50", WAIT).await;
    browser.click_css("#edit-key-button", WAIT).await;
    browser.find("#updated-notice", WAIT).await;
    let rpm = browser.find("#edit-rpm", WAIT).await;
    assert_eq!(
        browser.attribute(&rpm, "value").await.as_deref(),
        Some("50")
    );

    // Rotate, confirmed; the old secret still works.
    browser.click_css("#rotate-button", WAIT).await;
    browser
        .find_containing(
            "#confirm-question",
            &format!("Rotate key {key_name}?"),
            WAIT,
        )
        .await;
    check(
        &browser,
        &axe,
        &format!("rotate confirmation at {width}"),
        &mut found,
    )
    .await;
    browser.click_css("#confirm-button", WAIT).await;
    let second = browser.text_of("#new-secret", WAIT).await;
    assert!(second.starts_with("tcg_") && second != first, "{second}");
    assert_eq!(chat(&gw, &first).await.status, 200, "in its grace");
    assert_eq!(chat(&gw, &second).await.status, 200);

    // Revoke, confirmed; the key is refused.
    browser.go(&format!("{base}/console/keys/{key_id}")).await;
    browser.click_css("#revoke-button", WAIT).await;
    browser
        .find_containing("#confirm-question", "This cannot be undone", WAIT)
        .await;
    check(
        &browser,
        &axe,
        &format!("revoke confirmation at {width}"),
        &mut found,
    )
    .await;
    browser.click_css("#confirm-button", WAIT).await;
    browser.find("#revoked-notice", WAIT).await;
    assert_eq!(browser.text_of("#key-status", WAIT).await, "revoked");
    assert_eq!(chat(&gw, &second).await.status, 401);

    // The lists, and the audit log with each step, by carol.
    browser.go(&format!("{base}/console/keys")).await;
    browser
        .find_containing(
            &format!("#keys tr[data-key='{key_id}'] td.status"),
            "revoked",
            WAIT,
        )
        .await;
    check(&browser, &axe, &format!("keys at {width}"), &mut found).await;
    browser.go(&format!("{base}/console/teams")).await;
    browser
        .find_containing("#teams th a", &team_name, WAIT)
        .await;
    check(&browser, &axe, &format!("teams at {width}"), &mut found).await;
    browser
        .click_css("nav a[href='/console/audit']", WAIT)
        .await;
    for action in ["create", "rotate", "revoke"] {
        let entry = browser
            .find(
                &format!("#key-audit tr[data-target='{key_id}'][data-action='{action}']"),
                WAIT,
            )
            .await;
        assert!(browser.text(&entry).await.contains("carol"), "{action}");
    }
    browser
        .find(
            &format!("#key-audit tr[data-target='{team_id}'][data-action='create']"),
            WAIT,
        )
        .await;
    check(&browser, &axe, &format!("audit at {width}"), &mut found).await;
    let audit = browser.source().await;
    assert!(!audit.contains(&first[4..]) && !audit.contains(&second[4..]));
    assert!(found.is_empty(), "{found:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_pages_in_chromium_at_desktop_width() {
    in_chromium_at(1400).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_pages_in_chromium_at_phone_width() {
    in_chromium_at(400).await;
}
