//! Managed keys: issued, rotated and revoked through the admin API (operator keys only), used by the official
//! `openai` client, refused once revoked or past a rotation's grace, held to their model and route lists, every
//! change in the audit log, never a secret in the database; on SQLite in one gateway, and on PostgreSQL in
//! three gateway processes that each refuse a key revoked through another, told by `NOTIFY` alone.

use crate::common;

use std::path::Path;

use common::process::GatewayProcess;
use common::{post, request, send, Answer, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat_testkit::until;

const OPS: &str = "sk-ops-carol";

pub(super) fn unique(label: &str) -> String {
    format!("{label}-{}", uuid::Uuid::new_v4().simple())
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// Write the keys files a gateway of these tests reads: client alice, operator carol.
pub(super) fn key_files(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    std::fs::write(dir.join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.join("operators"), format!("carol:{OPS}\n")).unwrap();
    (dir.join("clients"), dir.join("operators"))
}

pub(super) async fn gateway(dir: &Path) -> Harness {
    let (clients, operators) = key_files(dir);
    Harness::start(
        |_, _| Reply::openai_text("Hello from upstream"),
        move |c| {
            c.api_keys_file = Some(clients);
            c.operator_keys_file = Some(operators);
        },
    )
    .await
}

/// `method path` on the admin API of the gateway at `base` with the operator key.
pub(super) async fn admin(base: &str, method: &str, path: &str, body: Value) -> Answer {
    let auth = bearer(OPS);
    send(
        method,
        &format!("{base}{path}"),
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        &body.to_string(),
    )
    .await
}

/// One chat completion with `key` for `model` at `path`.
async fn call_with(base: &str, key: &str, model: &str, path: &str) -> Answer {
    let mut body = if path == "/v1/responses" {
        json!({"input": "Hello"})
    } else {
        request(false, "Hello")
    };
    body["model"] = json!(model);
    let auth = bearer(key);
    post(
        &format!("{base}{path}"),
        body.to_string(),
        &[("authorization", auth.as_str())],
    )
    .await
}

pub(super) async fn call(base: &str, key: &str) -> Answer {
    call_with(base, key, "test-model", "/v1/chat/completions").await
}

async fn python(base: &str, key: &str, expect: &str) {
    common::run_python(
        "keys_client.py",
        &[format!("{base}/v1"), key.to_owned(), expect.to_owned()],
        &[&format!("ok {expect}")],
    )
    .await;
}

pub(super) fn created(answer: &Answer) -> (String, String) {
    assert_eq!(answer.status, 201, "{}", answer.body);
    let body = answer.json();
    let secret = body["key"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("tcg_") && secret.len() == 68, "{secret}");
    (body["id"].as_str().unwrap().to_owned(), secret)
}

/// Every byte of the files in `dir` (the SQLite database, its WAL and shared memory).
fn bytes_of(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            all.extend(std::fs::read(&path).unwrap());
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_managed_key_works_for_the_official_client_until_revoked_and_only_operators_manage_keys()
{
    if !tower_chat_testkit::python_package("managed key with the openai client", "openai") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let base = gw.url("");
    // Only operator keys reach the admin API.
    for auth in [None, Some("Bearer sk-alice"), Some("Bearer sk-wrong")] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let answer = send("GET", &gw.url("/admin/keys"), &headers, "").await;
        assert_eq!(answer.status, 401, "{auth:?}: {}", answer.body);
    }
    let name = unique("bot");
    let (id, secret) = created(&admin(&base, "POST", "/admin/keys", json!({"name": name})).await);
    python(&base, &secret, "answered").await;
    let listed = admin(&base, "GET", "/admin/keys", json!({})).await.json();
    let mine = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == id.as_str())
        .unwrap();
    assert_eq!(mine["status"], "active");
    assert!(
        !listed.to_string().contains(&secret),
        "a list never shows a secret"
    );
    let shown = admin(&base, "GET", &format!("/admin/keys/{id}"), json!({})).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.json()["name"], name.as_str());
    assert!(shown.json().get("key").is_none());
    // The caller a record is bound to is the key's name.
    let revoked = admin(
        &base,
        "POST",
        &format!("/admin/keys/{id}/revoke"),
        json!({}),
    )
    .await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert_eq!(revoked.json()["status"], "revoked");
    python(&base, &secret, "refused").await;
    let again = admin(
        &base,
        "POST",
        &format!("/admin/keys/{id}/revoke"),
        json!({}),
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.body);
    // The file's keys work beside the managed ones, and a managed key may not take a file key's name.
    assert_eq!(call(&base, "sk-alice").await.status, 200);
    let taken = admin(&base, "POST", "/admin/keys", json!({"name": "alice"})).await;
    assert_eq!(
        (taken.status.as_u16(), taken.json()["error"]["code"].clone()),
        (409, json!("name_taken"))
    );
    let twice = admin(&base, "POST", "/admin/keys", json!({"name": name})).await;
    assert_eq!(twice.status, 409, "{}", twice.body);
    let bad = admin(
        &base,
        "POST",
        "/admin/keys",
        json!({"name": "x", "colour": 1}),
    )
    .await;
    assert_eq!(
        (bad.status.as_u16(), bad.json()["error"]["code"].clone()),
        (400, json!("invalid_body"))
    );
    let openapi = admin(&base, "GET", "/admin/openapi.json", json!({})).await;
    assert_eq!(openapi.status, 200);
    assert!(openapi.json()["paths"]["/admin/keys/{id}/rotate"]["post"].is_object());
}

#[tokio::test]
async fn a_rotated_key_keeps_its_old_secret_for_the_grace_period_only() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let base = gw.url("");
    let (id, first) =
        created(&admin(&base, "POST", "/admin/keys", json!({"name": unique("rot")})).await);
    let rotate = |grace: u64| {
        let base = base.clone();
        let id = id.clone();
        async move {
            let answer = admin(
                &base,
                "POST",
                &format!("/admin/keys/{id}/rotate"),
                json!({"grace_seconds": grace}),
            )
            .await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            answer.json()["key"].as_str().unwrap().to_owned()
        }
    };
    // Within an hour's grace both secrets work.
    let second = rotate(3600).await;
    assert_ne!(first, second);
    assert_eq!(
        call(&base, &second).await.status,
        200,
        "the new secret works"
    );
    assert_eq!(
        call(&base, &first).await.status,
        200,
        "the old one, within its grace"
    );
    // With a grace of one second, the secret before is refused once that second is over.
    let third = rotate(1).await;
    until("the old secret refused after its grace", || async {
        call(&base, &second).await.status == 401
    })
    .await;
    assert_eq!(call(&base, &first).await.status, 401, "two rotations ago");
    let refused = call(&base, &second).await;
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("grace"),
        "{}",
        refused.body
    );
    // A rotation without a grace ends the secret before at once.
    assert_eq!(call(&base, &third).await.status, 200);
    let fourth = rotate(0).await;
    assert_eq!(
        call(&base, &third).await.status,
        401,
        "no grace: refused at once"
    );
    assert_eq!(call(&base, &fourth).await.status, 200);
    let too_long = admin(
        &base,
        "POST",
        &format!("/admin/keys/{id}/rotate"),
        json!({"grace_seconds": 8 * 86_400}),
    )
    .await;
    assert_eq!(too_long.status, 400, "{}", too_long.body);
    // Every change is in the audit log, by operator, without a secret.
    let audit = admin(
        &base,
        "GET",
        &format!("/admin/audit?target={id}"),
        json!({}),
    )
    .await;
    assert_eq!(audit.status, 200, "{}", audit.body);
    let entries = audit.json()["data"].as_array().unwrap().clone();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["rotate", "rotate", "rotate", "create"]);
    assert!(entries.iter().all(|e| e["actor"] == "carol"));
    assert!(entries[3]["before"].is_null() && entries[3]["after"]["id"] == id.as_str());
    for secret in [&first, &second, &third, &fourth] {
        assert!(!audit.body.contains(secret.as_str()));
    }
    // Nothing in the database file, its WAL or its shared memory holds a secret (only their digests).
    let stored = bytes_of(gw.files.path());
    for secret in [&first, &second, &third, &fourth] {
        assert!(!contains(&stored, secret));
    }
    let digest = tower_chat_gateway_digest(&fourth);
    assert!(contains(&stored, &digest), "the test reads the right file");
}

/// The SHA-256 of `secret` in hex, as the store keeps it.
fn tower_chat_gateway_digest(secret: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn models_routes_expiry_and_teams_are_enforced_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let base = gw.url("");
    let team = admin(
        &base,
        "POST",
        "/admin/teams",
        json!({"name": unique("team"), "limits": {"requests_per_day": 500}, "metadata": {"cc": "42"}}),
    )
    .await;
    assert_eq!(team.status, 201, "{}", team.body);
    let team_id = team.json()["id"].as_str().unwrap().to_owned();
    let (id, secret) = created(
        &admin(
            &base,
            "POST",
            "/admin/keys",
            json!({"name": unique("scoped"), "team": team_id, "models": ["test-*"],
                   "routes": ["/v1/chat/completions"], "limits": {"requests_per_minute": 10},
                   "metadata": {"owner": "ml"}}),
        )
        .await,
    );
    assert_eq!(call(&base, &secret).await.status, 200);
    let model = call_with(&base, &secret, "other-model", "/v1/chat/completions").await;
    assert_eq!(model.status, 403, "{}", model.body);
    assert_eq!(model.json()["error"]["code"], "model_not_allowed");
    let route = call_with(&base, &secret, "test-model", "/v1/responses").await;
    assert_eq!(route.status, 403, "{}", route.body);
    assert_eq!(route.json()["error"]["code"], "route_not_allowed");
    let unknown_team = admin(
        &base,
        "POST",
        "/admin/keys",
        json!({"name": unique("orphan"), "team": "team_none"}),
    )
    .await;
    assert_eq!(unknown_team.status, 404, "{}", unknown_team.body);
    // A wider list applies to the next call; an expiry in the past refuses it.
    let widened = admin(
        &base,
        "PATCH",
        &format!("/admin/keys/{id}"),
        json!({"models": ["*"], "routes": []}),
    )
    .await;
    assert_eq!(widened.status, 200, "{}", widened.body);
    assert_eq!(
        call_with(&base, &secret, "other-model", "/v1/responses")
            .await
            .status,
        200
    );
    let expired = admin(
        &base,
        "PATCH",
        &format!("/admin/keys/{id}"),
        json!({"expires_at": 1}),
    )
    .await;
    assert_eq!(expired.json()["status"], "expired");
    let refused = call(&base, &secret).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(refused.body.contains("expired"));
    let cleared = admin(
        &base,
        "PATCH",
        &format!("/admin/keys/{id}"),
        json!({"expires_at": null}),
    )
    .await;
    assert_eq!(cleared.json()["status"], "active");
    assert_eq!(call(&base, &secret).await.status, 200);
    let shown = admin(&base, "GET", &format!("/admin/teams/{team_id}"), json!({})).await;
    assert_eq!(shown.json()["keys"][0]["id"], id.as_str());
    assert_eq!(shown.json()["limits"]["requests_per_day"], 500);
    let audit = admin(
        &base,
        "GET",
        &format!("/admin/audit?target={team_id}"),
        json!({}),
    )
    .await;
    assert_eq!(audit.json()["data"][0]["action"], "create");
}

#[tokio::test]
async fn the_limits_of_managed_keys_and_teams_are_enforced_and_a_change_applies_to_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    // No `[limits]` in the configuration: the limits come from the keys and teams alone.
    let gw = gateway(dir.path()).await;
    let base = gw.url("");
    let team_name = unique("capped");
    let team = admin(
        &base,
        "POST",
        "/admin/teams",
        json!({"name": team_name, "limits": {"requests_per_day": 1}}),
    )
    .await;
    assert_eq!(team.status, 201, "{}", team.body);
    let team_id = team.json()["id"].as_str().unwrap().to_owned();
    let (_, first) = created(
        &admin(
            &base,
            "POST",
            "/admin/keys",
            json!({"name": unique("member-a"), "team": team_id}),
        )
        .await,
    );
    let (_, second) = created(
        &admin(
            &base,
            "POST",
            "/admin/keys",
            json!({"name": unique("member-b"), "team": team_id}),
        )
        .await,
    );
    // The team's one request a day is shared by its members.
    assert_eq!(call(&base, &first).await.status, 200);
    let refused = call(&base, &second).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(
        refused.body.contains(&format!("team {team_name}")),
        "{}",
        refused.body
    );
    // A raised budget applies to the next call, without a restart.
    let raised = admin(
        &base,
        "PATCH",
        &format!("/admin/teams/{team_id}"),
        json!({"limits": {"requests_per_day": 3}}),
    )
    .await;
    assert_eq!(raised.status, 200, "{}", raised.body);
    assert_eq!(call(&base, &second).await.status, 200);
    // The team's spend against its limits, shown and listed like a key's: both members' calls in one counter
    // (the refused call is not counted).
    let requests_of = |team: &Value| {
        let scopes = team["usage"]["scopes"].as_array().unwrap().clone();
        assert_eq!(scopes.len(), 1, "{team}");
        assert_eq!(scopes[0]["team"], team_name.as_str(), "{team}");
        let counter = scopes[0]["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["kind"] == "requests")
            .unwrap_or_else(|| panic!("no requests counter in {team}"))
            .clone();
        (
            counter["used"].as_u64().unwrap(),
            counter["limit"].as_u64().unwrap(),
        )
    };
    let shown = admin(&base, "GET", &format!("/admin/teams/{team_id}"), json!({})).await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    let shown = shown.json();
    assert_eq!(requests_of(&shown), (2, 3));
    assert_eq!(shown["usage"]["caller"], team_name.as_str());
    assert_eq!(shown["keys"].as_array().unwrap().len(), 2, "{shown}");
    let listed = admin(&base, "GET", "/admin/teams", json!({})).await.json();
    let mine = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == team_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(requests_of(&mine), (2, 3));
    assert_eq!(mine["keys"], 2);
    // A team without limits has no counters, in the same shape.
    let free = admin(
        &base,
        "POST",
        "/admin/teams",
        json!({"name": unique("free")}),
    )
    .await;
    let free_id = free.json()["id"].as_str().unwrap().to_owned();
    let free = admin(&base, "GET", &format!("/admin/teams/{free_id}"), json!({}))
        .await
        .json();
    assert_eq!(free["usage"]["scopes"], json!([]), "{free}");
    // A key's own limit applies beside its team's.
    let (own_id, own) = created(
        &admin(
            &base,
            "POST",
            "/admin/keys",
            json!({"name": unique("own"), "limits": {"requests_per_day": 1}}),
        )
        .await,
    );
    assert_eq!(call(&base, &own).await.status, 200);
    assert_eq!(call(&base, &own).await.status, 429);
    let lifted = admin(
        &base,
        "PATCH",
        &format!("/admin/keys/{own_id}"),
        json!({"limits": {}}),
    )
    .await;
    assert_eq!(lifted.status, 200, "{}", lifted.body);
    assert_eq!(call(&base, &own).await.status, 200);
}

#[tokio::test]
async fn a_managed_key_named_like_a_line_of_the_keys_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let name = unique("twin");
    created(&admin(&gw.url(""), "POST", "/admin/keys", json!({"name": name})).await);
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("unused")).await;
    let mut config = tower_chat_gateway::Config::new(provider.base_url());
    config.no_upstream_key = true;
    config.db = gw.files.path().join("gateway.db");
    std::fs::write(dir.path().join("twin"), format!("{name}:sk-twin\n")).unwrap();
    config.api_keys_file = Some(dir.path().join("twin"));
    config.operator_keys_file = Some(dir.path().join("operators"));
    let error = tower_chat_gateway::Gateway::new(&config)
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains(&format!("`{name}`")) && error.contains("--api-keys-file"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateway_processes_on_postgresql_refuse_a_key_revoked_through_one() {
    let Some(url) = tower_chat_testkit::database_url() else {
        return;
    };
    if !tower_chat_testkit::python_package("managed keys on three processes", "openai") {
        return;
    }
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hello from upstream")).await;
    let dir = tempfile::tempdir().unwrap();
    let (clients, operators) = key_files(dir.path());
    // The backstop comparing the key store's counter made an hour: within the bound the checks below wait, only
    // a `NOTIFY` can make another replica see a change (on the default 5 s backstop a revocation would be seen
    // without one).
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, "[keys]\nrecheck_seconds = 3600\n").unwrap();
    let args = |db: &str| {
        vec![
            "--config".to_owned(),
            config.display().to_string(),
            "--upstream".to_owned(),
            provider.base_url(),
            "--no-upstream-key".to_owned(),
            "--database-url".to_owned(),
            url.clone(),
            "--db".to_owned(),
            dir.path().join(db).display().to_string(),
            "--api-keys-file".to_owned(),
            clients.display().to_string(),
            "--operator-keys-file".to_owned(),
            operators.display().to_string(),
        ]
    };
    let a = GatewayProcess::start(dir.path(), "a", &args("a.db")).await;
    let b = GatewayProcess::start(dir.path(), "b", &args("b.db")).await;
    let c = GatewayProcess::start(dir.path(), "c", &args("c.db")).await;
    let name = unique("replica");
    let (id, secret) =
        created(&admin(&a.url(""), "POST", "/admin/keys", json!({"name": name})).await);
    // Created through A, used through B (and C) as soon as their tables have it.
    for other in [&b, &c] {
        until("the new key known to every replica", || async {
            call(&other.url(""), &secret).await.status == 200
        })
        .await;
    }
    python(&b.url(""), &secret, "answered").await;
    let revoked = admin(
        &a.url(""),
        "POST",
        &format!("/admin/keys/{id}/revoke"),
        json!({}),
    )
    .await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert_eq!(
        call(&a.url(""), &secret).await.status,
        401,
        "at once where revoked"
    );
    for other in [&b, &c] {
        until("the revoked key refused by every replica", || async {
            call(&other.url(""), &secret).await.status == 401
        })
        .await;
    }
    python(&c.url(""), &secret, "refused").await;
    // The rows hold the digest, never the secret.
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT k.id || k.name || k.digest || coalesce(k.previous_digest, '') || k.doc \
             FROM tower_chat_keys k WHERE k.id = $1 \
             UNION ALL SELECT a.id || coalesce(a.before_doc, '') || coalesce(a.after_doc, '') \
             FROM tower_chat_key_audit a WHERE a.target_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3, "the key and its two audit entries");
    for row in &rows {
        let text: String = row.get(0);
        assert!(!text.contains(&secret), "{text}");
    }
    let digest: String = client
        .query_one("SELECT digest FROM tower_chat_keys WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(digest, tower_chat_gateway_digest(&secret));
}
