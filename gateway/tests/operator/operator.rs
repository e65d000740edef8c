//! Operator decisions (`--operator-keys-file`): an operator approves or denies a client's paused call by its
//! approval id, the client learns it by long-polling and resumes by resending its conversation without
//! decisions; the audit log names the operator; only operators approve; the two key sets stay apart.

use crate::common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{post, request, send, send_from, write_file_then_answer, Answer, Harness};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat::ConversationId;
use tower_chat_approval::{ApprovalStore, AuditOutcome, SqliteApprovalStore};

const ALICE: [(&str, &str); 1] = [("authorization", "Bearer sk-alice")];
const BOB: [(&str, &str); 1] = [("authorization", "Bearer sk-bob")];
const OPS: [(&str, &str); 1] = [("authorization", "Bearer sk-ops-carol")];

fn write_then_answer(req: &RecordedRequest, _index: usize) -> Reply {
    write_file_then_answer(req, r#"{"path": "out/ops.txt", "content": "by the book"}"#)
}

/// A gateway with client keys alice and bob and operator carol, on SQLite or on the PostgreSQL `database_url`.
async fn gateway_on(dir: &Path, database_url: Option<String>) -> Harness {
    gateway_with(dir, move |c| c.database_url = database_url).await
}

/// The same on SQLite, `tweak` adjusting the config.
async fn gateway_with(
    dir: &Path,
    tweak: impl FnOnce(&mut tower_chat_gateway::Config) + Send + 'static,
) -> Harness {
    std::fs::write(dir.join("clients"), "alice:sk-alice\nbob:sk-bob\n").unwrap();
    std::fs::write(dir.join("operators"), "carol:sk-ops-carol\n").unwrap();
    let (clients, operators) = (dir.join("clients"), dir.join("operators"));
    Harness::start(write_then_answer, move |c| {
        c.api_keys_file = Some(clients);
        c.operator_keys_file = Some(operators);
        tweak(c);
    })
    .await
}

async fn gateway(dir: &Path) -> Harness {
    gateway_on(dir, None).await
}

async fn get(url: &str, headers: &[(&str, &str)]) -> Answer {
    send("GET", url, headers, "").await
}

/// Alice's paused turn: the approval id and the conversation as she resends it (ending with the notice).
async fn pause(gw: &Harness, conversation: &str) -> (String, Value) {
    let chat = gw.url("/v1/chat/completions");
    let headers = [ALICE[0], ("x-conversation-id", conversation)];
    let first = post(&chat, request(false, "write it").to_string(), &headers).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let body = first.json();
    assert_eq!(body["tower_chat"]["finish_reason"], "awaiting_approval");
    let notice = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        notice.contains("An operator decides") && notice.contains("GET /v1/approvals/"),
        "the notice tells the client to wait, not to decide: {notice}"
    );
    let id = body["tower_chat"]["approval_requests"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut resend = request(false, "write it");
    resend["messages"].as_array_mut().unwrap().push(json!({
        "role": "assistant",
        "content": body["choices"][0]["message"]["content"],
    }));
    (id, resend)
}

#[tokio::test]
async fn an_operator_approves_the_client_learns_it_and_resumes_and_the_audit_names_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let id = operator_approves(&gw, "c1").await;
    // The audit log: the approval crate's table in the gateway's SQLite file.
    let db = gw.records().await;
    let audit = SqliteApprovalStore::new(db)
        .await
        .unwrap()
        .audit_log(&ConversationId::new("alice/c1"))
        .await
        .unwrap();
    check_audit(&audit, &id);
}

#[tokio::test]
async fn the_same_on_postgresql() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_on(dir.path(), Some(url.clone())).await;
    // A conversation id of its own: the database outlives the test.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let conversation = format!("op-{}-{nanos}", std::process::id());
    let id = operator_approves(&gw, &conversation).await;
    let store = tower_chat_persistence::PostgresStore::connect(url)
        .await
        .unwrap();
    let audit = tower_chat_approval::PostgresApprovalStore::new(store)
        .await
        .unwrap()
        .audit_log(&ConversationId::new(format!("alice/{conversation}")))
        .await
        .unwrap();
    check_audit(&audit, &id);
}

/// The audit log of one operator approval of Alice's call: Carol is the approver.
fn check_audit(audit: &[tower_chat_approval::AuditRecord], id: &str) {
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].approval_id, id);
    assert_eq!(audit[0].outcome, AuditOutcome::Approved);
    assert_eq!(audit[0].approver.as_deref(), Some("operator:carol"));
    assert_eq!(audit[0].caller.as_ref().map(|c| c.as_str()), Some("alice"));
    assert_eq!(audit[0].reason.as_deref(), Some("looks fine"));
}

/// Alice's call paused, resent too early, waited on, approved by Carol, resumed; returns the approval id.
async fn operator_approves(gw: &Harness, conversation: &str) -> String {
    let chat = gw.url("/v1/chat/completions");
    let (id, resend) = pause(gw, conversation).await;
    let headers = [ALICE[0], ("x-conversation-id", conversation)];
    let decision_url = gw.url(&format!("/v1/approvals/{id}/decision"));
    let poll_url = gw.url(&format!("/v1/approvals/{id}"));

    // Before any decision: the poll says pending, and a resend is told to wait.
    let now = get(&poll_url, &ALICE).await;
    assert_eq!(now.status, 200, "{}", now.body);
    assert_eq!(now.json()["status"], "pending");
    let early = post(&chat, resend.to_string(), &headers).await;
    assert_eq!(early.status, 409, "{}", early.body);
    assert_eq!(early.json()["error"]["code"], "approval_pending");
    assert_eq!(gw.provider.requests().len(), 1, "nothing went upstream");

    // Keys stay apart: a client cannot decide, an operator cannot chat, another client cannot poll.
    let by_client = post(&decision_url, json!({"approved": true}).to_string(), &ALICE).await;
    assert_eq!(by_client.status, 401, "{}", by_client.body);
    let ops_chat = post(&chat, request(false, "hi").to_string(), &OPS).await;
    assert_eq!(ops_chat.status, 401, "{}", ops_chat.body);
    assert_eq!(get(&poll_url, &BOB).await.status, 404);
    let unknown = post(
        &gw.url("/v1/approvals/apr_made_up/decision"),
        json!({"approved": true}).to_string(),
        &OPS,
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    // Carol sees it in her list (an operator key only).
    let listed = get(&gw.url("/v1/approvals"), &OPS).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let listed = listed.json();
    let entry = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not listed: {listed}"))
        .clone();
    assert_eq!(entry["tool"], "write_file");
    assert_eq!(entry["arguments"]["path"], "out/ops.txt");
    assert_eq!(entry["caller"], "alice");
    assert_eq!(entry["conversation"], format!("alice/{conversation}"));
    assert_eq!(entry["status"], "pending");
    assert_eq!(get(&gw.url("/v1/approvals"), &ALICE).await.status, 401);

    // Alice long-polls; Carol approves while she waits; the poll answers with the decision.
    let waiting = tokio::spawn({
        let url = format!("{poll_url}?wait=30");
        async move { get(&url, &ALICE).await }
    });
    let decided = post(
        &decision_url,
        json!({"approved": true, "reason": "looks fine"}).to_string(),
        &OPS,
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.json()["approver"], "operator:carol");
    let learned = waiting.await.unwrap();
    assert_eq!(learned.status, 200, "{}", learned.body);
    let learned = learned.json();
    assert_eq!(learned["status"], "approved");
    assert_eq!(learned["approver"], "operator:carol");
    let again = post(&decision_url, json!({"approved": false}).to_string(), &OPS).await;
    assert_eq!(
        again.status, 409,
        "one decision per approval: {}",
        again.body
    );
    assert!(!gw.root().join("out/ops.txt").exists(), "nothing ran yet");

    // The resend without decisions picks Carol's up: the turn completes.
    let done = post(&chat, resend.to_string(), &headers).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(
        done.json()["choices"][0]["message"]["content"],
        "Result: wrote 11 bytes to out/ops.txt"
    );
    assert_eq!(
        std::fs::read_to_string(gw.root().join("out/ops.txt")).unwrap(),
        "by the book"
    );
    // Used: the decision is gone with the approval, and so is the list entry.
    assert_eq!(get(&poll_url, &ALICE).await.status, 404);
    let listed = get(&gw.url("/v1/approvals"), &OPS).await.json();
    assert!(
        !listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == id.as_str()),
        "{listed}"
    );
    id
}

#[tokio::test]
async fn an_operator_denial_reaches_the_model_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let (id, resend) = pause(&gw, "c2").await;
    let denied = post(
        &gw.url(&format!("/v1/approvals/{id}/decision")),
        json!({"approved": false, "reason": "not on a Friday"}).to_string(),
        &OPS,
    )
    .await;
    assert_eq!(denied.status, 200, "{}", denied.body);
    let poll = get(&gw.url(&format!("/v1/approvals/{id}?wait=5")), &ALICE).await;
    assert_eq!(poll.json()["status"], "denied");
    assert_eq!(poll.json()["reason"], "not on a Friday");
    let headers = [ALICE[0], ("x-conversation-id", "c2")];
    let done = post(
        &gw.url("/v1/chat/completions"),
        resend.to_string(),
        &headers,
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.body);
    let text = done.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("not approved") && text.contains("not on a Friday"),
        "{text}"
    );
    assert!(!gw.root().join("out/ops.txt").exists());
}

#[tokio::test]
async fn with_operators_configured_a_client_cannot_approve_its_own_call_but_can_deny_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let chat = gw.url("/v1/chat/completions");
    let headers = [ALICE[0], ("x-conversation-id", "c3")];
    let (id, mut resend) = pause(&gw, "c3").await;
    resend["tower_chat"] = json!({"approvals": [{"id": id, "approved": true}]});
    let refused = post(&chat, resend.to_string(), &headers).await;
    assert!(
        refused.status.is_client_error(),
        "{} {}",
        refused.status,
        refused.body
    );
    assert!(
        refused.body.contains("only an operator may approve"),
        "{}",
        refused.body
    );
    assert!(!gw.root().join("out/ops.txt").exists());

    // The refused resend used up the paused turn: a new one, denied by Alice herself.
    let (id, mut resend) = pause(&gw, "c4").await;
    resend["tower_chat"] =
        json!({"approvals": [{"id": id, "approved": false, "reason": "changed my mind"}]});
    let headers = [ALICE[0], ("x-conversation-id", "c4")];
    let denied = post(&chat, resend.to_string(), &headers).await;
    assert_eq!(denied.status, 200, "{}", denied.body);
    assert!(!gw.root().join("out/ops.txt").exists());
}

#[tokio::test]
async fn an_operator_key_that_is_also_a_client_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("clients"), "alice:sk-shared\n").unwrap();
    std::fs::write(dir.path().join("operators"), "carol:sk-shared\n").unwrap();
    let mut config = tower_chat_gateway::Config::new("http://127.0.0.1:9/v1");
    config.db = dir.path().join("gateway.db");
    config.api_keys_file = Some(dir.path().join("clients"));
    config.operator_keys_file = Some(dir.path().join("operators"));
    let error = tower_chat_gateway::Gateway::new(&config).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("operator keys must differ from client keys"),
        "{error}"
    );
}

/// A second gateway process on the database of `first` (its SQLite file, or the PostgreSQL `database_url`),
/// writing files to the same root: a replica behind the same load balancer, or `first` after a restart.
/// `keys` is the directory [`gateway_on`] wrote the key files to.
async fn replica_of(first: &Harness, keys: &Path, database_url: Option<String>) -> Harness {
    let (keys, files) = (keys.to_owned(), first.files.path().to_owned());
    Harness::start(write_then_answer, move |c| {
        c.api_keys_file = Some(keys.join("clients"));
        c.operator_keys_file = Some(keys.join("operators"));
        c.db = files.join("gateway.db");
        c.files = Some(files.join("root"));
        c.database_url = database_url;
    })
    .await
}

/// The entry of `id` in `gw`'s `GET /v1/approvals`, paging through with `next_after` (a shared database may
/// hold other tests' approvals before it).
async fn listed_entry(gw: &Harness, id: &str) -> Option<Value> {
    let mut url = gw.url("/v1/approvals?limit=50");
    loop {
        let answer = get(&url, &OPS).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let page = answer.json();
        assert!(page["data"].as_array().unwrap().len() <= 50);
        if let Some(entry) = page["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
        {
            return Some(entry.clone());
        }
        match page["next_after"].as_str() {
            Some(after) => url = gw.url(&format!("/v1/approvals?limit=50&after={after}")),
            None => return None,
        }
    }
}

/// Alice's call pauses in gateway A; gateway B (same database) lists it, Carol decides it there; Alice, waiting
/// on A, learns the decision, and her resend — to B, which never held the paused turn — completes it. The
/// decision is audited with Carol as the approver, and neither gateway lists the approval afterwards.
async fn a_replica_lists_and_decides_what_another_paused(
    a: &Harness,
    b: &Harness,
    conversation: &str,
) -> String {
    let (id, resend) = pause(a, conversation).await;
    let entry = listed_entry(b, &id)
        .await
        .unwrap_or_else(|| panic!("{id} not listed by the other gateway"));
    assert_eq!(entry["tool"], "write_file");
    assert_eq!(entry["arguments"]["path"], "out/ops.txt");
    assert_eq!(entry["caller"], "alice");
    assert_eq!(entry["conversation"], format!("alice/{conversation}"));
    assert_eq!(entry["status"], "pending");
    assert!(entry["expires_in"].as_u64().unwrap() > 0);
    assert!(entry["paused_at"].as_u64().unwrap() > 0);

    // Alice waits on A; Carol decides on B; A's long-poll sees the decision kept in the database.
    let waiting = tokio::spawn({
        let url = a.url(&format!("/v1/approvals/{id}?wait=30"));
        async move { get(&url, &ALICE).await }
    });
    let decided = post(
        &b.url(&format!("/v1/approvals/{id}/decision")),
        json!({"approved": true, "reason": "looks fine"}).to_string(),
        &OPS,
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let learned = waiting.await.unwrap();
    assert_eq!(learned.status, 200, "{}", learned.body);
    assert_eq!(learned.json()["status"], "approved", "{}", learned.body);
    assert_eq!(learned.json()["approver"], "operator:carol");
    // Decided once, whichever gateway is asked.
    let again = post(
        &a.url(&format!("/v1/approvals/{id}/decision")),
        json!({"approved": false}).to_string(),
        &OPS,
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(listed_entry(a, &id).await.unwrap()["status"], "approved");

    // The resend reaches B: the paused turn is rebuilt from the call records and completes.
    let headers = [ALICE[0], ("x-conversation-id", conversation)];
    let done = post(&b.url("/v1/chat/completions"), resend.to_string(), &headers).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(
        done.json()["choices"][0]["message"]["content"],
        "Result: wrote 11 bytes to out/ops.txt"
    );
    assert_eq!(
        std::fs::read_to_string(a.root().join("out/ops.txt")).unwrap(),
        "by the book"
    );
    assert!(listed_entry(a, &id).await.is_none());
    assert!(listed_entry(b, &id).await.is_none());
    // Used: a second resend to A is not resumed again.
    assert_eq!(
        get(&a.url(&format!("/v1/approvals/{id}")), &ALICE)
            .await
            .status,
        404
    );
    id
}

#[tokio::test]
async fn two_gateways_on_one_sqlite_file_share_the_inbox_and_the_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let a = gateway(dir.path()).await;
    let b = replica_of(&a, dir.path(), None).await;
    let id = a_replica_lists_and_decides_what_another_paused(&a, &b, "r1").await;
    let db = tower_chat_persistence::SqliteStore::open(a.files.path().join("gateway.db"))
        .await
        .unwrap();
    let audit = SqliteApprovalStore::new(db)
        .await
        .unwrap()
        .audit_log(&ConversationId::new("alice/r1"))
        .await
        .unwrap();
    check_audit(&audit, &id);
}

#[tokio::test]
async fn two_gateways_on_one_postgresql_database_share_the_inbox_and_the_decisions() {
    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = gateway_on(dir.path(), Some(url.clone())).await;
    let b = replica_of(&a, dir.path(), Some(url.clone())).await;
    let conversation = format!("replica-{}", uuid::Uuid::new_v4().simple());
    let id = a_replica_lists_and_decides_what_another_paused(&a, &b, &conversation).await;
    let store = tower_chat_persistence::PostgresStore::connect(url)
        .await
        .unwrap();
    let audit = tower_chat_approval::PostgresApprovalStore::new(store)
        .await
        .unwrap()
        .audit_log(&ConversationId::new(format!("alice/{conversation}")))
        .await
        .unwrap();
    check_audit(&audit, &id);
}

#[tokio::test]
async fn another_gateway_on_the_file_lists_what_waits_a_page_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let first = gateway(dir.path()).await;
    let (older, _) = pause(&first, "p1").await;
    let (newer, _) = pause(&first, "p2").await;
    // Another process on the same file (as after a restart): nothing of these turns in its memory.
    let second = replica_of(&first, dir.path(), None).await;
    let page = get(&second.url("/v1/approvals?limit=1"), &OPS).await.json();
    assert_eq!(page["data"][0]["id"], older.as_str(), "{page}");
    assert_eq!(page["has_more"], true);
    let after = page["next_after"].as_str().unwrap();
    let rest = get(
        &second.url(&format!("/v1/approvals?limit=1&after={after}")),
        &OPS,
    )
    .await
    .json();
    assert_eq!(rest["data"][0]["id"], newer.as_str(), "{rest}");
    assert_eq!(rest["has_more"], false);
    assert!(rest["next_after"].is_null());
    for (bad, code) in [
        ("limit=0", "invalid_limit"),
        ("limit=201", "invalid_limit"),
        ("limit=x", "invalid_query"),
        ("after=nonsense", "invalid_cursor"),
    ] {
        let refused = get(&second.url(&format!("/v1/approvals?{bad}")), &OPS).await;
        assert_eq!(refused.status, 400, "{bad}: {}", refused.body);
        assert_eq!(
            refused.json()["error"]["code"],
            code,
            "{bad}: {}",
            refused.body
        );
    }
    // A poll's wait that is not a number is refused, not read as no wait.
    let refused = get(
        &second.url(&format!("/v1/approvals/{older}?wait=soon")),
        &ALICE,
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert_eq!(
        refused.json()["error"]["code"],
        "invalid_query",
        "{}",
        refused.body
    );
    // A decision body of the wrong shape says what it should look like.
    let refused = post(
        &second.url(&format!("/v1/approvals/{older}/decision")),
        json!({"approved": "yes"}).to_string(),
        &OPS,
    )
    .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(
        refused.json()["error"]["code"],
        "invalid_body",
        "{}",
        refused.body
    );
    assert!(refused.body.contains("approved"), "{}", refused.body);
}

#[tokio::test]
async fn a_turn_no_process_can_rebuild_is_a_typed_error_and_the_approval_stays_pending_and_decided()
{
    let dir = tempfile::tempdir().unwrap();
    let a = gateway(dir.path()).await;
    let b = replica_of(&a, dir.path(), None).await;
    let (id, resend) = pause(&a, "lost").await;
    let decided = post(
        &b.url(&format!("/v1/approvals/{id}/decision")),
        json!({"approved": true, "reason": "looks fine"}).to_string(),
        &OPS,
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    // The call records of the paused turn are gone (say, pruned): B cannot rebuild what A holds in memory.
    let db = tower_chat_persistence::SqliteStore::open(a.files.path().join("gateway.db"))
        .await
        .unwrap();
    // A committed the records of the paused turn before its response ended; once they are deleted, nothing
    // brings them back.
    let recorded = db
        .run("count", |conn| {
            conn.query_row("SELECT COUNT(*) FROM chat_calls", [], |row| {
                row.get::<_, i64>(0)
            })
        })
        .await
        .unwrap();
    assert!(recorded > 0);
    db.run("forget the call records", |conn| {
        conn.execute_batch(
            "PRAGMA foreign_keys = OFF; DELETE FROM chat_messages; DELETE FROM chat_calls;",
        )
    })
    .await
    .unwrap();
    let headers = [ALICE[0], ("x-conversation-id", "lost")];
    let refused = post(&b.url("/v1/chat/completions"), resend.to_string(), &headers).await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "approval_turn_unavailable");
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the call records hold none of its conversation"),
        "{}",
        refused.body
    );
    assert_eq!(b.provider.requests().len(), 0, "nothing went upstream");
    // Nothing is lost: still listed, still decided, and the process that paused it resumes it.
    assert_eq!(listed_entry(&b, &id).await.unwrap()["status"], "approved");
    let done = post(&a.url("/v1/chat/completions"), resend.to_string(), &headers).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(
        done.json()["choices"][0]["message"]["content"],
        "Result: wrote 11 bytes to out/ops.txt"
    );
}

/// `GET url` from the local address `from` (any of 127.0.0.0/8 reaches the gateway on 127.0.0.1).
async fn get_from(from: &str, url: &str, headers: &[(&str, &str)]) -> Answer {
    send_from(from, "GET", url, headers, "").await
}

#[tokio::test]
async fn guessing_operator_keys_on_the_api_is_limited_like_console_logins() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let list = gw.url("/v1/approvals");
    for attempt in 0..5 {
        let key = format!("Bearer sk-guess-{attempt}");
        let wrong = get_from("127.0.0.3", &list, &[("authorization", &key)]).await;
        assert_eq!(wrong.status, 401, "attempt {attempt}: {}", wrong.body);
    }
    let limited = get_from("127.0.0.3", &list, &OPS).await;
    assert_eq!(
        limited.status, 429,
        "the right key is not even checked: {}",
        limited.body
    );
    assert_eq!(limited.json()["error"]["code"], "too_many_failed_logins");
    let retry_after: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=12).contains(&retry_after), "{retry_after}");
    // The console's login form shares the limit…
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_local_address(Some("127.0.0.3".parse().unwrap()));
    let client = Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector);
    let login = client
        .request(
            http::Request::post(gw.url("/console/login"))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("sec-fetch-site", "same-origin")
                .body(Full::new(Bytes::from("key=sk-ops-carol")))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(login.status(), 429);
    // …and another address is not held back.
    assert_eq!(get_from("127.0.0.4", &list, &OPS).await.status, 200);
}

/// The finding: five failed checks from one address — a client key sent to `/v1/approvals` counted too — locked
/// every operator at that address out, and one bad request every 12 s kept it so.
#[tokio::test]
async fn a_client_key_or_one_stale_key_locks_no_operator_out() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path()).await;
    let list = gw.url("/v1/approvals");
    // A client's key on the operator API, again and again: refused, never counted.
    for attempt in 0..10 {
        let refused = get_from("127.0.0.5", &list, &ALICE).await;
        assert_eq!(refused.status, 401, "attempt {attempt}: {}", refused.body);
        assert!(
            refused.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("client key"),
            "{}",
            refused.body
        );
    }
    assert_eq!(get_from("127.0.0.5", &list, &OPS).await.status, 200);
    // One stale key sent again and again: held back after five, and only it.
    let stale = [("authorization", "Bearer sk-ops-stale")];
    for attempt in 0..5 {
        let wrong = get_from("127.0.0.6", &list, &stale).await;
        assert_eq!(wrong.status, 401, "attempt {attempt}: {}", wrong.body);
    }
    let limited = get_from("127.0.0.6", &list, &stale).await;
    assert_eq!(limited.status, 429, "{}", limited.body);
    assert!(
        limited.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("this key failed too often from this address"),
        "{}",
        limited.body
    );
    let operator = get_from("127.0.0.6", &list, &OPS).await;
    assert_eq!(operator.status, 200, "{}", operator.body);
    // Requests without a key guess nothing either.
    for _ in 0..10 {
        assert_eq!(get_from("127.0.0.7", &list, &[]).await.status, 401);
    }
    assert_eq!(get_from("127.0.0.7", &list, &OPS).await.status, 200);
}

/// Behind a reverse proxy every operator shares the proxy's address; with `--trusted-proxy-header` the limit
/// counts the address the proxy reports — and only a configured proxy's word is taken.
#[tokio::test]
async fn behind_a_trusted_proxy_the_limit_counts_the_client_address_the_proxy_reports() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_with(dir.path(), |c| {
        c.trusted_proxies = Some(
            tower_chat_gateway::client_addr::TrustedProxies::new("x-forwarded-for", "127.0.0.1")
                .unwrap(),
        );
    })
    .await;
    let list = gw.url("/v1/approvals");
    let proxy = "127.0.0.1";
    // What the client wrote sits left of what the proxy appended.
    let guesser = ("x-forwarded-for", "198.51.100.1, 203.0.113.7");
    for attempt in 0..5 {
        let key = format!("Bearer sk-guess-{attempt}");
        let wrong = get_from(proxy, &list, &[guesser, ("authorization", &key)]).await;
        assert_eq!(wrong.status, 401, "attempt {attempt}: {}", wrong.body);
    }
    let limited = get_from(proxy, &list, &[guesser, OPS[0]]).await;
    assert_eq!(limited.status, 429, "{}", limited.body);
    // An operator behind the same proxy is not held back: by the API, nor by the console's login.
    let operator = ("x-forwarded-for", "198.51.100.1");
    let listed = get_from(proxy, &list, &[operator, OPS[0]]).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let login = send_from(
        proxy,
        "POST",
        &gw.url("/console/login"),
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("sec-fetch-site", "same-origin"),
            operator,
        ],
        "key=sk-ops-carol",
    )
    .await;
    assert_eq!(login.status, 303, "{}", login.body);
    // A client that is not a configured proxy is counted by its own address, whatever it writes in the header.
    for attempt in 0..5 {
        let key = format!("Bearer sk-guess-{attempt}");
        let spoofed = format!("192.0.2.{attempt}");
        let headers = [
            ("x-forwarded-for", spoofed.as_str()),
            ("authorization", &key),
        ];
        let wrong = get_from("127.0.0.9", &list, &headers).await;
        assert_eq!(wrong.status, 401, "attempt {attempt}: {}", wrong.body);
    }
    let spoofing = get_from(
        "127.0.0.9",
        &list,
        &[("x-forwarded-for", "192.0.2.99"), OPS[0]],
    )
    .await;
    assert_eq!(spoofing.status, 429, "{}", spoofing.body);
}

/// Long-polls are capped per key: one over `--max-polls-per-key` is refused at once (429, `Retry-After`, the
/// OpenAI error shape) while the others wait; another key is not held back; a slot frees when a poll answers.
#[tokio::test]
async fn long_polls_over_the_per_key_cap_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_with(dir.path(), |c| c.max_polls_per_key = 2).await;
    let (id, _) = pause(&gw, "polls").await;
    let poll_url = gw.url(&format!("/v1/approvals/{id}?wait=30"));
    let mut polls = tokio::task::JoinSet::new();
    for _ in 0..3 {
        let url = poll_url.clone();
        polls.spawn(async move { get(&url, &ALICE).await });
    }
    // Two wait for a decision; whichever came third is answered at once.
    let refused = tokio::time::timeout(Duration::from_secs(10), polls.join_next())
        .await
        .expect("a poll over the cap is answered at once")
        .unwrap()
        .unwrap();
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.headers["retry-after"], "1");
    let error = refused.json()["error"].clone();
    assert_eq!(error["code"], "too_many_polls", "{error}");
    assert_eq!(error["type"], "rate_limit_error", "{error}");
    // Bob's poll is not counted against Alice's (it is not his approval: 404, not 429).
    let bob = get(&poll_url, &BOB).await;
    assert_eq!(bob.status, 404, "{}", bob.body);
    let decided = post(
        &gw.url(&format!("/v1/approvals/{id}/decision")),
        json!({"approved": true}).to_string(),
        &OPS,
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    while let Some(answer) = polls.join_next().await {
        let answer = answer.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.json()["status"], "approved");
    }
    let again = get(&poll_url, &ALICE).await;
    assert_eq!(again.status, 200, "the slots came back: {}", again.body);
}
