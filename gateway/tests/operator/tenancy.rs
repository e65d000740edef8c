//! Tenant isolation across restarts: caller identities that do not move with the keys file, conversation ids
//! scoped to their caller, and approval arrays that cannot amplify.

use crate::common;

use std::path::Path;

use common::{post, request, write_file_then_answer, Answer};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::ConversationId;
use tower_chat_approval::{ApprovalStore, SqliteApprovalStore};
use tower_chat_gateway::{Config, Gateway};
use tower_chat_persistence::{SqliteStore, Store};

/// Asked to write: round 0 writes a file, the next round answers with the tool result it was sent.
/// Anything else is answered with plain text.
fn write_then_answer(req: &RecordedRequest, _index: usize) -> Reply {
    let messages = req.body["messages"].as_array().unwrap();
    if !messages[0]["content"]
        .as_str()
        .is_some_and(|c| c.contains("write"))
    {
        return Reply::openai_text("ok");
    }
    write_file_then_answer(req, r#"{"path": "out/hello.txt", "content": "hi there"}"#)
}

/// One gateway process: its URL, and a way to stop it (waiting until it has stopped and flushed).
struct Process {
    url: String,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Process {
    async fn start(config: &Config) -> Process {
        let gateway = Gateway::new(config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        );
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(gateway.serve(listener, async {
            let _ = rx.await;
        }));
        Process {
            url,
            stop: Some(tx),
            server,
        }
    }

    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.server.await.unwrap().unwrap();
    }

    async fn post(&self, body: &Value, headers: &[(&str, &str)]) -> Answer {
        post(&self.url, body.to_string(), headers).await
    }
}

fn config(provider: &ScriptedProvider, dir: &Path, keys: Option<&Path>) -> Config {
    std::fs::create_dir_all(dir.join("root")).unwrap();
    let mut config = Config::new(provider.base_url());
    config.files = Some(dir.join("root"));
    config.db = dir.join("gateway.db");
    config.no_upstream_key = true;
    config.api_keys_file = keys.map(Path::to_owned);
    config
}

/// The approval a paused (non-streaming) answer carries, and the assistant message the client keeps.
fn paused(answer: &Answer) -> (Value, Value) {
    assert_eq!(answer.status, 200, "{}", answer.body);
    let body = answer.json();
    assert_eq!(body["tower_chat"]["finish_reason"], "awaiting_approval");
    let message = body["choices"][0]["message"].clone();
    (
        body["tower_chat"]["approval_requests"][0].clone(),
        json!({"role": "assistant", "content": message["content"]}),
    )
}

fn resume(notice: &Value, decisions: Value) -> Value {
    let mut body = request(false, "write hello");
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(notice.clone());
    body["tower_chat"] = json!({ "approvals": decisions });
    body
}

/// Caller B sending any request with caller A's `x-conversation-id` must not break A's resume after a restart:
/// B's request lands in B's own conversation.
#[tokio::test]
async fn an_interfering_caller_does_not_disturb_a_resume_after_a_restart() {
    let provider = ScriptedProvider::start(write_then_answer).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, "alice:sk-alice\nbob:sk-bob\n").unwrap();
    let config = config(&provider, dir.path(), Some(&keys));
    let alice = [
        ("authorization", "Bearer sk-alice"),
        ("x-conversation-id", "conv-1"),
    ];
    let bob = [
        ("authorization", "Bearer sk-bob"),
        ("x-conversation-id", "conv-1"),
    ];

    let process = Process::start(&config).await;
    let first = process.post(&request(false, "write hello"), &alice).await;
    let (approval, notice) = paused(&first);
    // Bob, with Alice's conversation id: an ordinary request, answered for Bob.
    let interfering = process
        .post(&request(false, "something else entirely"), &bob)
        .await;
    assert_eq!(interfering.status, 200, "{}", interfering.body);
    process.stop().await;

    let process = Process::start(&config).await;
    let decision = json!([{"id": approval["id"], "approved": true}]);
    let second = process.post(&resume(&notice, decision), &alice).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(
        second.json()["choices"][0]["message"]["content"],
        "Result: wrote 8 bytes to out/hello.txt"
    );
    process.stop().await;

    // Each caller's records are in its own conversation.
    let store = SqliteStore::open(dir.path().join("gateway.db"))
        .await
        .unwrap();
    let alice_calls = store
        .conversation_calls(&ConversationId::new("alice/conv-1"))
        .await
        .unwrap();
    let bob_calls = store
        .conversation_calls(&ConversationId::new("bob/conv-1"))
        .await
        .unwrap();
    assert_eq!((alice_calls.len(), bob_calls.len()), (2, 1));
    assert!(alice_calls
        .iter()
        .all(|c| c.caller.as_ref().unwrap().as_str() == "alice"));
    let history = store
        .load_conversation(&ConversationId::new("alice/conv-1"))
        .await
        .unwrap();
    assert!(!format!("{history:?}").contains("something else entirely"));
}

/// A key rotation: line 4's key replaced by a new one. The new key may not approve the previous
/// holder's paused write, nor continue its conversation; the old key is gone.
#[tokio::test]
async fn a_rotated_key_inherits_no_approval_and_no_conversation() {
    let provider = ScriptedProvider::start(write_then_answer).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, "sk-a\nsk-b\n\nsk-old\n").unwrap();
    let config = config(&provider, dir.path(), Some(&keys));

    let process = Process::start(&config).await;
    let old = [
        ("authorization", "Bearer sk-old"),
        ("x-conversation-id", "conv-r"),
    ];
    let (approval, notice) = paused(&process.post(&request(false, "write hello"), &old).await);
    process.stop().await;

    std::fs::write(&keys, "sk-a\nsk-b\n\nsk-new\n").unwrap();
    let process = Process::start(&config).await;
    let new = [
        ("authorization", "Bearer sk-new"),
        ("x-conversation-id", "conv-r"),
    ];
    let decision = json!([{"id": approval["id"], "approved": true}]);
    let answer = process.post(&resume(&notice, decision.clone()), &new).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(!dir.path().join("root/out/hello.txt").exists());
    let gone = process.post(&resume(&notice, decision), &old).await;
    assert_eq!(gone.status, 401, "{}", gone.body);
    // The new key's request with the same conversation id starts a conversation of its own.
    let fresh = process.post(&request(false, "hello"), &new).await;
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    let sent = provider.requests().last().unwrap().body["messages"].clone();
    assert_eq!(
        sent.as_array().unwrap().len(),
        1,
        "nothing of the old conversation: {sent}"
    );
    process.stop().await;
}

/// One request with a real approval id and thousands of forged ones: refused as a whole before any is
/// looked up, with a short error and no audit row; within the cap, at most one audit row per decision.
#[tokio::test]
async fn approval_arrays_are_capped_deduplicated_and_do_not_amplify() {
    let provider = ScriptedProvider::start(write_then_answer).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(&provider, dir.path(), None);
    let process = Process::start(&config).await;
    let conv = [("x-conversation-id", "conv-f")];
    let (approval, notice) = paused(&process.post(&request(false, "write hello"), &conv).await);
    let real = approval["id"].as_str().unwrap().to_owned();
    let store = SqliteStore::open(dir.path().join("gateway.db"))
        .await
        .unwrap();
    let store = SqliteApprovalStore::new(store).await.unwrap();
    let audit_rows = || async {
        store
            .audit_log(&ConversationId::new("conv-f"))
            .await
            .unwrap()
            .len()
    };

    let mut forged: Vec<Value> = vec![json!({"id": real, "approved": true})];
    forged.extend((0..20_000).map(|i| json!({"id": format!("apr_forged_{i}"), "approved": true})));
    let answer = process.post(&resume(&notice, json!(forged)), &conv).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.json()["error"]["code"], "limit_exceeded");
    assert!(answer.body.len() < 1024, "{} bytes", answer.body.len());
    assert_eq!(audit_rows().await, 0);

    let copies: Vec<Value> = (0..50_000)
        .map(|_| json!({"id": real, "approved": true}))
        .collect();
    let answer = process.post(&resume(&notice, json!(copies)), &conv).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let twice = [
        json!({"id": real, "approved": true}),
        json!({"id": real, "approved": false}),
    ];
    let answer = process.post(&resume(&notice, json!(twice)), &conv).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(answer.body.contains("twice"), "{}", answer.body);
    assert_eq!(audit_rows().await, 0);

    // At the cap: the request is verified, and refused as a whole, with at most one row per decision.
    forged.truncate(64);
    let answer = process.post(&resume(&notice, json!(forged)), &conv).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(answer.body.len() < 8 * 1024, "{} bytes", answer.body.len());
    assert!(audit_rows().await <= 64);
    process.stop().await;
}
