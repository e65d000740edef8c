//! Changing managed keys and teams in the console, and deleting a team. Over HTTP, on SQLite and on PostgreSQL:
//! a key created with routes; its page's form, filled with its values, changes its limits as the admin API's
//! `PATCH` would (the API shows them next, the audit log has the change under the operator's name, the fields the
//! form left alone are kept); a refused form (a malformed limit, an unknown team) comes back with the operator's
//! input and the reason, with the API's status; a team's limits changed likewise; a team with a member in use
//! is not deleted (409 naming it), one whose members are revoked is, after a confirmation, audited and gone from
//! the list, while its revoked member's page still says which team it was in; a revoked key cannot be changed.

use serde_json::{json, Value};

use super::console_keys::{secret_of, start, unique, OPS_KEY};
use crate::common::console_forms::{csrf, text_after, Console};
use crate::common::{console_login, send, Answer};

/// `method path` on the admin API with the operator key.
async fn api(console: &Console<'_>, method: &str, path: &str, body: Value) -> Answer {
    send(
        method,
        &console.gw.url(path),
        &[
            ("authorization", &format!("Bearer {OPS_KEY}")),
            ("content-type", "application/json"),
        ],
        &body.to_string(),
    )
    .await
}

/// The audit entries of `target`, newest first.
async fn audit(console: &Console<'_>, target: &str) -> Vec<Value> {
    api(
        console,
        "GET",
        &format!("/admin/audit?target={target}"),
        json!({}),
    )
    .await
    .json()["data"]
        .as_array()
        .unwrap()
        .clone()
}

/// The `value` of the input with `id` in `html`.
fn value_of<'a>(html: &'a str, id: &str) -> &'a str {
    let input = text_after(html, &format!("id=\"{id}\""));
    let at = input
        .find("value=\"")
        .unwrap_or_else(|| panic!("no value in #{id}: {input}"))
        + 7;
    &input[at..at + input[at..].find('"').unwrap()]
}

async fn edits_on(database_url: Option<String>) {
    let (gw, _dir) = start(database_url).await;
    let console = Console {
        cookie: console_login(&gw, OPS_KEY).await,
        gw: &gw,
    };
    let token = csrf(&console.get("/console/keys").await.body);
    let team_name = unique("team");
    let made = console
        .form("/console/teams", &[("csrf", &token), ("name", &team_name)])
        .await;
    assert_eq!(made.status, 303, "{}", made.body);
    let team_page = made.headers["location"].to_str().unwrap().to_owned();
    let team_id = team_page.rsplit('/').next().unwrap().to_owned();

    // A key created with routes, as the API takes them.
    let key_name = unique("bot");
    let made = console
        .form(
            "/console/keys",
            &[
                ("csrf", &token),
                ("name", &key_name),
                ("team", &team_id),
                ("models", "test-*"),
                ("routes", "/v1/chat/*, /v1/embeddings"),
                ("requests_per_minute", "100"),
            ],
        )
        .await;
    let secret = secret_of(&made);
    let key_id = text_after(&made.body, "href=\"/console/keys/")
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let key_path = format!("/admin/keys/{key_id}");
    let shown = api(&console, "GET", &key_path, json!({})).await.json();
    assert_eq!(shown["routes"], json!(["/v1/chat/*", "/v1/embeddings"]));
    // Metadata the form does not show, set through the API: an edit must keep it.
    let tagged = api(
        &console,
        "PATCH",
        &key_path,
        json!({"metadata": {"owner": "ml"}}),
    )
    .await;
    assert_eq!(tagged.status, 200, "{}", tagged.body);

    // The edit form shows the key's values.
    let page = console.get(&format!("/console/keys/{key_id}")).await.body;
    assert_eq!(value_of(&page, "edit-rpm"), "100");
    assert_eq!(value_of(&page, "edit-models"), "test-*");
    assert_eq!(value_of(&page, "edit-routes"), "/v1/chat/*, /v1/embeddings");
    assert!(
        page.contains(&format!("<option value=\"{team_id}\" selected>")),
        "{page}"
    );
    assert!(
        !page.contains("id=\"edit-name\""),
        "the name is not a field"
    );

    // Its limits changed through the form: the API shows them next, the audit log has the change by carol.
    let edit = format!("/console/keys/{key_id}/edit");
    let changed = console
        .form(
            &edit,
            &[
                ("csrf", &token),
                ("team", &team_id),
                ("expires", ""),
                ("models", "test-*"),
                ("routes", "/v1/chat/*, /v1/embeddings"),
                ("cost_per_day_usd", "3"),
                ("requests_per_minute", "7"),
                ("requests_per_day", "50"),
            ],
        )
        .await;
    assert_eq!(changed.status, 303, "{}", changed.body);
    assert_eq!(
        changed.headers["location"],
        format!("/console/keys/{key_id}?done=updated").as_str()
    );
    let shown = api(&console, "GET", &key_path, json!({})).await.json();
    let limits = &shown["limits"];
    assert_eq!(limits["cost_per_day_usd"], 3.0, "{shown}");
    assert_eq!(limits["requests_per_minute"], 7, "{shown}");
    assert_eq!(limits["requests_per_day"], 50, "{shown}");
    assert_eq!(limits["cost_per_month_usd"], Value::Null, "{shown}");
    assert_eq!(shown["models"], json!(["test-*"]));
    assert_eq!(shown["team"], team_id.as_str());
    assert_eq!(shown["metadata"], json!({"owner": "ml"}), "kept");
    let entries = audit(&console, &key_id).await;
    assert_eq!(entries[0]["action"], "update");
    assert_eq!(entries[0]["actor"], "carol");
    assert_eq!(entries[0]["before"]["limits"]["requests_per_minute"], 100);
    assert_eq!(entries[0]["after"]["limits"]["requests_per_minute"], 7);
    assert!(!entries[0].to_string().contains(&secret[4..]), "no secret");
    let page = console
        .get(&format!("/console/keys/{key_id}?done=updated"))
        .await
        .body;
    assert!(page.contains("id=\"updated-notice\""), "{page}");
    assert_eq!(value_of(&page, "edit-rpd"), "50");

    // A malformed limit: nothing changes, the form comes back with what was typed and the reason beside it.
    let bad = console
        .form(
            &edit,
            &[
                ("csrf", &token),
                ("team", &team_id),
                ("models", "test-a, test-b"),
                ("cost_per_month_usd", "12.5"),
                ("requests_per_minute", "seven"),
            ],
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        text_after(
            &bad.body,
            "id=\"edit-key-error\" data-code=\"invalid_limits\">"
        )
        .contains("requests per minute"),
        "{}",
        bad.body
    );
    assert_eq!(value_of(&bad.body, "edit-rpm"), "seven");
    assert_eq!(value_of(&bad.body, "edit-cost-month"), "12.5");
    assert_eq!(value_of(&bad.body, "edit-models"), "test-a, test-b");
    assert!(
        !bad.body.contains(&secret[4..]),
        "no secret in a refused form"
    );
    let after = api(&console, "GET", &key_path, json!({})).await.json();
    assert_eq!(after["limits"]["requests_per_minute"], 7, "unchanged");
    assert_eq!(audit(&console, &key_id).await.len(), entries.len());
    // An unknown team is refused as the API refuses it.
    let unknown = console
        .form(
            &edit,
            &[("csrf", &token), ("team", "team_none"), ("concurrent", "2")],
        )
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(unknown.body.contains("data-code=\"team_not_found\""));
    assert_eq!(value_of(&unknown.body, "edit-concurrent"), "2");

    // A refused creation keeps the operator's input too.
    let other = unique("kept");
    let refused = console
        .form(
            "/console/keys",
            &[
                ("csrf", &token),
                ("name", &other),
                ("models", "m-*"),
                ("routes", "/v1/*"),
                ("cost_per_day_usd", "lots"),
            ],
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("id=\"create-key-error\""));
    assert_eq!(value_of(&refused.body, "key-name"), other);
    assert_eq!(value_of(&refused.body, "key-models"), "m-*");
    assert_eq!(value_of(&refused.body, "key-routes"), "/v1/*");
    assert_eq!(value_of(&refused.body, "key-cost-day"), "lots");
    let listed = api(&console, "GET", "/admin/keys", json!({})).await.json();
    assert!(!listed.to_string().contains(&other), "not created");
    let refused = console
        .form(
            "/console/teams",
            &[("csrf", &token), ("name", &team_name), ("concurrent", "3")],
        )
        .await;
    assert_eq!(refused.status, 409, "a taken name: {}", refused.body);
    assert!(refused.body.contains("id=\"create-team-error\""));
    assert_eq!(value_of(&refused.body, "team-name"), team_name);
    assert_eq!(value_of(&refused.body, "team-concurrent"), "3");

    // A team's limits changed through its page's form, and a malformed one refused with the input kept.
    let team_edit = format!("/console/teams/{team_id}/edit");
    let changed = console
        .form(&team_edit, &[("csrf", &token), ("requests_per_day", "9")])
        .await;
    assert_eq!(changed.status, 303, "{}", changed.body);
    let team = api(
        &console,
        "GET",
        &format!("/admin/teams/{team_id}"),
        json!({}),
    )
    .await
    .json();
    assert_eq!(team["limits"]["requests_per_day"], 9, "{team}");
    let entries = audit(&console, &team_id).await;
    assert_eq!(
        (&entries[0]["action"], &entries[0]["actor"]),
        (&json!("update"), &json!("carol"))
    );
    let bad = console
        .form(&team_edit, &[("csrf", &token), ("cost_per_day_usd", "-2")])
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("id=\"edit-team-error\""));
    assert_eq!(value_of(&bad.body, "edit-cost-day"), "-2");

    // Deleting the team: a confirmation first; refused while its member is in use, naming it.
    let delete = format!("/console/teams/{team_id}/delete");
    let asked = console.form(&delete, &[("csrf", &token)]).await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(
        asked
            .body
            .contains(&format!("Delete team {team_name}? This cannot be undone")),
        "{}",
        asked.body
    );
    let refused = console
        .form(&delete, &[("csrf", &token), ("confirm", "1")])
        .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(
        refused.body.contains(&format!("`{key_name}` ({key_id})")),
        "{}",
        refused.body
    );
    assert!(console
        .get("/console/teams")
        .await
        .body
        .contains(&format!("data-team=\"{team_id}\"")));

    // Its member revoked, the team is deleted: gone from the list, the deletion audited, the key's page readable.
    let revoked = api(&console, "POST", &format!("{key_path}/revoke"), json!({})).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let deleted = console
        .form(&delete, &[("csrf", &token), ("confirm", "1")])
        .await;
    assert_eq!(deleted.status, 303, "{}", deleted.body);
    let list = console
        .get(deleted.headers["location"].to_str().unwrap())
        .await
        .body;
    assert!(list.contains("id=\"deleted-notice\""), "{list}");
    assert!(
        !list.contains(&format!("data-team=\"{team_id}\"")),
        "{list}"
    );
    let entries = audit(&console, &team_id).await;
    assert_eq!(entries[0]["action"], "delete");
    assert_eq!(entries[0]["actor"], "carol");
    assert_eq!(entries[0]["before"]["name"], team_name.as_str());
    assert_eq!(entries[0]["after"], Value::Null);
    let page = console.get(&format!("/console/keys/{key_id}")).await.body;
    assert!(
        page.contains(&format!(
            "a deleted team (<a href=\"/console/audit?target={team_id}\">"
        )),
        "{page}"
    );
    assert!(
        !page.contains("id=\"edit-key\""),
        "a revoked key has no form"
    );
    let late = console
        .form(&edit, &[("csrf", &token), ("requests_per_minute", "1")])
        .await;
    assert_eq!(late.status, 409, "{}", late.body);
    assert!(
        late.body.contains("data-code=\"key_revoked\""),
        "{}",
        late.body
    );
    let gone = send(
        "GET",
        &gw.url(&team_page),
        &[("cookie", &console.cookie)],
        "",
    )
    .await;
    assert_eq!(gone.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_teams_are_changed_and_teams_deleted_in_the_console_on_sqlite() {
    edits_on(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_teams_are_changed_and_teams_deleted_in_the_console_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    edits_on(Some(url)).await;
}
