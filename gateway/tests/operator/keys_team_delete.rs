//! Deleting a managed team through the admin API (`DELETE /admin/teams/{id}`): refused while a member key is
//! not revoked (409 naming it), then done once it is, audited with the team as it was, and gone from the list
//! and from the limits; a revoked key cannot be changed any more. On PostgreSQL, a deletion made through one
//! gateway reaches another by `NOTIFY` alone, as an update does.

use serde_json::{json, Value};
use tower_chat::test_server::Reply;
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_testkit::until;

use super::keys::{admin, call, created, gateway, key_files, unique};
use crate::common::Harness;

#[tokio::test]
async fn a_team_is_deleted_once_no_member_key_is_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let base = gw.url("");
    let team_name = unique("doomed");
    let team = admin(
        &base,
        "POST",
        "/admin/teams",
        json!({"name": team_name, "limits": {"requests_per_day": 1}}),
    )
    .await;
    assert_eq!(team.status, 201, "{}", team.body);
    let team_id = team.json()["id"].as_str().unwrap().to_owned();
    let team_path = format!("/admin/teams/{team_id}");
    let member = unique("member");
    let (member_id, member_secret) = created(
        &admin(
            &base,
            "POST",
            "/admin/keys",
            json!({"name": member, "team": team_id}),
        )
        .await,
    );
    let (mover_id, mover_secret) = created(
        &admin(
            &base,
            "POST",
            "/admin/keys",
            json!({"name": unique("mover"), "team": team_id}),
        )
        .await,
    );
    // The team's one request a day, used up by its member.
    assert_eq!(call(&base, &member_secret).await.status, 200);
    assert_eq!(call(&base, &mover_secret).await.status, 429);

    let refused = admin(&base, "DELETE", &team_path, json!({})).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    let error = refused.json()["error"].clone();
    assert_eq!(error["code"], "team_has_members");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("`{member}` ({member_id})")),
        "{message}"
    );
    assert!(message.contains(&mover_id), "{message}");

    // One member revoked, the other moved out: the team goes, and its limit with it.
    let revoked = admin(
        &base,
        "POST",
        &format!("/admin/keys/{member_id}/revoke"),
        json!({}),
    )
    .await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let moved = admin(
        &base,
        "PATCH",
        &format!("/admin/keys/{mover_id}"),
        json!({"team": null}),
    )
    .await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    let deleted = admin(&base, "DELETE", &team_path, json!({})).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let deleted = deleted.json();
    assert_eq!(
        (&deleted["id"], &deleted["name"], &deleted["deleted"]),
        (&json!(team_id), &json!(team_name), &json!(true))
    );
    assert_eq!(call(&base, &mover_secret).await.status, 200);
    let gone = admin(&base, "GET", &team_path, json!({})).await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert_eq!(gone.json()["error"]["code"], "team_not_found");
    let listed = admin(&base, "GET", "/admin/teams", json!({})).await.json();
    assert!(
        !listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == team_id.as_str()),
        "{listed}"
    );
    let again = admin(&base, "DELETE", &team_path, json!({})).await;
    assert_eq!(again.status, 404, "{}", again.body);

    // The audit log keeps the team's history, the deletion last, by carol; the revoked member keeps its team id.
    let audit = admin(
        &base,
        "GET",
        &format!("/admin/audit?target={team_id}"),
        json!({}),
    )
    .await
    .json();
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["delete", "create"]);
    let entry = &audit["data"][0];
    assert_eq!(entry["actor"], "carol");
    assert_eq!(entry["before"]["name"], team_name.as_str());
    assert_eq!(entry["before"]["limits"]["requests_per_day"], 1);
    assert_eq!(entry["after"], Value::Null);
    let shown = admin(&base, "GET", &format!("/admin/keys/{member_id}"), json!({}))
        .await
        .json();
    assert_eq!(shown["team"], team_id.as_str(), "{shown}");
    // A revoked key is not changed any more, as it is not rotated.
    let late = admin(
        &base,
        "PATCH",
        &format!("/admin/keys/{member_id}"),
        json!({"team": null}),
    )
    .await;
    assert_eq!(late.status, 409, "{}", late.body);
    assert_eq!(late.json()["error"]["code"], "key_revoked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_deleted_through_one_gateway_is_gone_from_another_on_postgresql() {
    let Some(url) = tower_chat_testkit::database_url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (clients, operators) = key_files(dir.path());
    // An hour between the backstop's checks: within the wait below only a `NOTIFY` tells the other gateway.
    let start = || {
        let (clients, operators, url) = (clients.clone(), operators.clone(), url.clone());
        Harness::start(
            |_, _| Reply::openai_text("unused"),
            move |c| {
                c.file =
                    ConfigFile::parse("[keys]\nrecheck_seconds = 3600\n", "gateway.toml").unwrap();
                c.api_keys_file = Some(clients);
                c.operator_keys_file = Some(operators);
                c.database_url = Some(url);
            },
        )
    };
    let (a, b) = (start().await, start().await);
    let team = admin(
        &a.url(""),
        "POST",
        "/admin/teams",
        json!({"name": unique("replicated")}),
    )
    .await;
    assert_eq!(team.status, 201, "{}", team.body);
    let team_path = format!("/admin/teams/{}", team.json()["id"].as_str().unwrap());
    until("the team known to the other gateway", || async {
        admin(&b.url(""), "GET", &team_path, json!({})).await.status == 200
    })
    .await;
    let deleted = admin(&a.url(""), "DELETE", &team_path, json!({})).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    until("the team gone from the other gateway", || async {
        admin(&b.url(""), "GET", &team_path, json!({})).await.status == 404
    })
    .await;
}
