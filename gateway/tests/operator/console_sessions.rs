//! Console sessions live in the gateway's database: a login survives a restart of the gateway, a second gateway
//! on the same database (SQLite file or PostgreSQL) honours it, and a logout on one ends it on all.

use crate::common;

use std::path::{Path, PathBuf};

use common::{console_login, send, Harness};
use tower_chat::test_server::Reply;

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");
const SAME: (&str, &str) = ("sec-fetch-site", "same-origin");

/// A gateway with operator carol on the SQLite file `db`, or on PostgreSQL when `database_url` is given.
async fn gateway(keys: &Path, db: PathBuf, database_url: Option<String>) -> Harness {
    let operators = keys.join("operators");
    std::fs::write(&operators, format!("carol:{OPS_KEY}\n")).unwrap();
    Harness::start(
        |_, _| Reply::openai_text("ok"),
        move |c| {
            c.operator_keys_file = Some(operators);
            c.db = db;
            c.database_url = database_url;
        },
    )
    .await
}

async fn login(gw: &Harness) -> String {
    console_login(gw, OPS_KEY).await
}

/// Whether `cookie` opens the inbox (a page, not the redirect to the login form).
async fn opens_the_console(gw: &Harness, cookie: &str) -> bool {
    let answer = send("GET", &gw.url("/console"), &[("cookie", cookie)], "").await;
    match answer.status.as_u16() {
        200 => true,
        303 => false,
        status => panic!("unexpected {status}: {}", answer.body),
    }
}

/// The CSRF token of the inbox page, for the logout form.
async fn csrf(gw: &Harness, cookie: &str) -> String {
    let page = send("GET", &gw.url("/console"), &[("cookie", cookie)], "").await;
    let tag = page
        .body
        .split('<')
        .find(|tag| tag.starts_with("input") && tag.contains("name=\"csrf\""))
        .expect("a csrf field");
    let value = &tag[tag.find("value=\"").expect("a value") + 7..];
    value[..value.find('"').unwrap()].to_owned()
}

async fn logout(gw: &Harness, cookie: &str) {
    let token = csrf(gw, cookie).await;
    let out = send(
        "POST",
        &gw.url("/console/logout"),
        &[FORM, SAME, ("cookie", cookie)],
        &format!("csrf={token}"),
    )
    .await;
    assert_eq!(out.status, 303, "{}", out.body);
}

#[tokio::test]
async fn a_login_survives_a_restart_of_the_gateway() {
    let keys = tempfile::tempdir().unwrap();
    let db = keys.path().join("gateway.db");
    let mut first = gateway(keys.path(), db.clone(), None).await;
    let cookie = login(&first).await;
    assert!(opens_the_console(&first, &cookie).await);
    first.shutdown();
    first.server.take().unwrap().await.unwrap().unwrap();

    let restarted = gateway(keys.path(), db, None).await;
    assert!(
        opens_the_console(&restarted, &cookie).await,
        "the operator is still logged in after the restart"
    );
    logout(&restarted, &cookie).await;
    assert!(!opens_the_console(&restarted, &cookie).await);
}

#[tokio::test]
async fn two_gateways_on_one_sqlite_file_share_a_login_and_its_logout() {
    let keys = tempfile::tempdir().unwrap();
    let db = keys.path().join("gateway.db");
    let (a, b) = (
        gateway(keys.path(), db.clone(), None).await,
        gateway(keys.path(), db, None).await,
    );
    shared_login_and_logout(&a, &b).await;
}

#[tokio::test]
async fn two_gateways_on_one_postgresql_database_share_a_login_and_its_logout() {
    let Some(url) = tower_chat_testkit::database_url() else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let db = keys.path().join("unused.db");
    let (a, b) = (
        gateway(keys.path(), db.clone(), Some(url.clone())).await,
        gateway(keys.path(), db, Some(url)).await,
    );
    shared_login_and_logout(&a, &b).await;
}

async fn shared_login_and_logout(a: &Harness, b: &Harness) {
    let cookie = login(a).await;
    assert!(
        opens_the_console(b, &cookie).await,
        "the other replica knows the session"
    );
    logout(b, &cookie).await;
    assert!(
        !opens_the_console(a, &cookie).await,
        "a logout on one replica ends the session on all"
    );
}

const DAVE_KEY: &str = "sk-ops-dave-9876543210";

/// A gateway with client alice and the operators `operators` (lines of the keys file) on the SQLite file `db`;
/// its upstream asks to write a file, so each of alice's turns pauses for an operator.
async fn gateway_with_operators(dir: &Path, db: PathBuf, operators: &str) -> Harness {
    std::fs::write(dir.join("clients"), "alice:sk-alice\n").unwrap();
    std::fs::write(dir.join("operators"), operators).unwrap();
    let (clients, operators) = (dir.join("clients"), dir.join("operators"));
    Harness::start(
        |req, _| {
            common::write_file_then_answer(req, r#"{"path": "out/bound.txt", "content": "x"}"#)
        },
        move |c| {
            c.api_keys_file = Some(clients);
            c.operator_keys_file = Some(operators);
            c.db = db;
        },
    )
    .await
}

/// Alice's turn, paused: the id of the approval it waits on.
async fn paused_call(gw: &Harness, conversation: &str) -> String {
    let answer = common::post(
        &gw.url("/v1/chat/completions"),
        common::request(false, "write it").to_string(),
        &[
            ("authorization", "Bearer sk-alice"),
            ("x-conversation-id", conversation),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["tower_chat"]["approval_requests"][0]["id"]
        .as_str()
        .expect("an approval id")
        .to_owned()
}

/// Approve `id` with `cookie` and the form token `csrf`: the status of the answer.
async fn approve(gw: &Harness, cookie: &str, csrf: &str, id: &str) -> u16 {
    send(
        "POST",
        &gw.url(&format!("/console/approvals/{id}/decision")),
        &[FORM, SAME, ("cookie", cookie)],
        &format!("csrf={csrf}&decision=approve&reason=ok"),
    )
    .await
    .status
    .as_u16()
}

async fn restart(mut gw: Harness) {
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
}

/// Carol logs in, then the gateway restarts with her line gone from the keys file (and again with her name on a
/// new key): her old cookie opens nothing and cannot approve; Dave, whose key stayed, is still logged in.
#[tokio::test]
async fn a_session_ends_when_its_operator_key_leaves_the_keys_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gateway.db");
    let both = format!("carol:{OPS_KEY}\ndave:{DAVE_KEY}\n");
    for after in [
        format!("dave:{DAVE_KEY}\n"),
        format!("carol:sk-ops-carol-rotated-555\ndave:{DAVE_KEY}\n"),
    ] {
        let first = gateway_with_operators(dir.path(), db.clone(), &both).await;
        let carol = console_login(&first, OPS_KEY).await;
        let dave = console_login(&first, DAVE_KEY).await;
        let carol_csrf = csrf(&first, &carol).await;
        assert!(opens_the_console(&first, &carol).await);
        restart(first).await;

        let restarted = gateway_with_operators(dir.path(), db.clone(), &after).await;
        let id = paused_call(&restarted, "bound").await;
        assert!(
            !opens_the_console(&restarted, &carol).await,
            "carol's key is gone: {after}"
        );
        assert_eq!(
            approve(&restarted, &carol, &carol_csrf, &id).await,
            403,
            "an ended session cannot approve"
        );
        assert!(
            opens_the_console(&restarted, &dave).await,
            "dave's key stayed"
        );
        let dave_csrf = csrf(&restarted, &dave).await;
        assert_eq!(
            approve(&restarted, &dave, &dave_csrf, &id).await,
            303,
            "the call still waited for a decision"
        );
        restart(restarted).await;
    }
}
