//! The approval flow over the OpenAI wire format: `write_file` pauses the turn, the client resumes it with
//! `tower_chat.approvals`, in both shapes; denials, replays and foreign ids.

use crate::common;

use common::{post, request, write_file_then_answer, Harness};
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};

/// Round 0 writes a file; the next round answers with the tool result it was sent.
fn write_then_answer(req: &RecordedRequest, _index: usize) -> Reply {
    write_file_then_answer(req, r#"{"path": "out/hello.txt", "content": "hi there"}"#)
}

/// The pending approval of a paused answer, and the assistant message the client keeps.
fn paused(answer: &common::Answer, stream: bool) -> (Value, Value) {
    assert_eq!(answer.status, 200, "{}", answer.body);
    if stream {
        let chunks = answer.chunks();
        let finish = chunks
            .iter()
            .find(|c| c["choices"][0]["finish_reason"].is_string())
            .unwrap();
        assert_eq!(finish["choices"][0]["finish_reason"], "stop");
        assert_eq!(finish["tower_chat"]["finish_reason"], "awaiting_approval");
        let approval = finish["tower_chat"]["approval_requests"][0].clone();
        let text = answer.streamed_text();
        assert!(text.contains("[approval required]"), "{text}");
        (approval, json!({"role": "assistant", "content": text}))
    } else {
        let body = answer.json();
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["tower_chat"]["finish_reason"], "awaiting_approval");
        let message = body["choices"][0]["message"].clone();
        assert!(message["content"]
            .as_str()
            .unwrap()
            .contains("[approval required]"));
        let approval = message["tower_chat_approvals"][0].clone();
        assert_eq!(approval, body["tower_chat"]["approval_requests"][0]);
        (
            approval,
            json!({"role": "assistant", "content": message["content"]}),
        )
    }
}

#[tokio::test]
async fn write_file_waits_for_approval_and_runs_once_approved() {
    for stream in [false, true] {
        let gw = Harness::start(write_then_answer, |_| {}).await;
        let target = gw.root().join("out/hello.txt");
        let first = gw.chat(&request(stream, "write hello")).await;
        let (approval, notice) = paused(&first, stream);
        assert_eq!(approval["tool"], "write_file");
        assert_eq!(approval["arguments"]["path"], "out/hello.txt");
        let id = approval["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("apr_"), "{id}");
        assert!(!target.exists(), "nothing is written before the approval");
        assert_eq!(gw.provider.requests().len(), 1);

        // The client resends the conversation as it has it, with its decision.
        let mut resume = request(stream, "write hello");
        resume["messages"]
            .as_array_mut()
            .unwrap()
            .push(notice.clone());
        resume["tower_chat"] = json!({"approvals": [{"id": id, "approved": true}]});
        let second = gw.chat(&resume).await;
        assert_eq!(second.status, 200, "{}", second.body);
        let text = if stream {
            second.streamed_text()
        } else {
            second.json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(text, "Result: wrote 8 bytes to out/hello.txt");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "hi there");
        // The model saw its own call and the result, not the client's notice.
        let sent = gw.upstream_messages(1);
        assert_eq!(sent.len(), 3, "{sent:?}");
        assert_eq!(sent[1]["tool_calls"][0]["id"], "call_write");
        assert!(!sent.iter().any(|m| m["content"]
            .as_str()
            .is_some_and(|c| c.contains("[approval required]"))));

        // Approval ids are single-use.
        let replay = gw.chat(&resume).await;
        assert_eq!(replay.status, 400);
        assert_eq!(replay.json()["error"]["code"], "invalid_approval");
        assert_eq!(gw.provider.requests().len(), 2);
    }
}

#[tokio::test]
async fn a_denied_write_is_not_run_and_the_model_is_told_why() {
    let gw = Harness::start(write_then_answer, |_| {}).await;
    let first = gw.chat(&request(false, "write hello")).await;
    let (approval, notice) = paused(&first, false);
    let mut resume = request(false, "write hello");
    resume["messages"].as_array_mut().unwrap().push(notice);
    resume["tower_chat"] =
        json!({"approvals": [{"id": approval["id"], "approved": false, "reason": "not today"}]});
    let second = gw.chat(&resume).await.json();
    let text = second["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        text.contains("not approved") && text.contains("not today"),
        "{text}"
    );
    assert!(!gw.root().join("out/hello.txt").exists());
}

#[tokio::test]
async fn clients_that_ignore_approvals_just_see_a_finished_answer_and_can_go_on() {
    let gw = Harness::start(
        |req, _| {
            let messages = req.body["messages"].as_array().unwrap();
            if messages.len() == 1 {
                Reply::openai_tool_calls(&[(
                    "call_write",
                    "write_file",
                    r#"{"path": "x.txt", "content": "x"}"#,
                )])
            } else {
                Reply::openai_text("ok, moving on")
            }
        },
        |_| {},
    )
    .await;
    let first = gw.chat(&request(false, "write x")).await;
    let (_, notice) = paused(&first, false);
    // A standard client appends the answer and asks something else; no decision, nothing written.
    let mut next = request(false, "write x");
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(notice);
    messages.push(json!({"role": "user", "content": "never mind"}));
    let second = gw.chat(&next).await;
    assert_eq!(
        second.json()["choices"][0]["message"]["content"],
        "ok, moving on"
    );
    assert!(!gw.root().join("x.txt").exists());
}

#[tokio::test]
async fn unknown_approval_ids_and_other_callers_ids_are_refused() {
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "sk-alice\nsk-bob\n").unwrap();
    let keys_path = keys.path().to_owned();
    let gw = Harness::start(write_then_answer, move |c| {
        c.api_keys_file = Some(keys_path)
    })
    .await;
    let url = gw.url("/v1/chat/completions");
    let alice = [("authorization", "Bearer sk-alice")];
    let bob = [("authorization", "Bearer sk-bob")];
    let first = post(&url, request(false, "write").to_string(), &alice).await;
    let (approval, notice) = paused(&first, false);
    let mut resume = request(false, "write");
    resume["messages"].as_array_mut().unwrap().push(notice);
    resume["tower_chat"] = json!({"approvals": [{"id": "apr_made_up", "approved": true}]});
    let answer = post(&url, resume.to_string(), &alice).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["error"]["code"], "invalid_approval");
    resume["tower_chat"] = json!({"approvals": [{"id": approval["id"], "approved": true}]});
    let answer = post(&url, resume.to_string(), &bob).await;
    assert_eq!(answer.status, 400, "bob cannot approve alice's call");
    assert!(!gw.root().join("out/hello.txt").exists());
    // Alice still can.
    let answer = post(&url, resume.to_string(), &alice).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(gw.root().join("out/hello.txt").exists());
}

#[tokio::test]
async fn a_paused_turn_resumes_after_a_restart_from_the_database() {
    use tower_chat::test_server::ScriptedProvider;
    use tower_chat_gateway::{Config, Gateway};

    let provider = ScriptedProvider::start(write_then_answer).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    let mut config = Config::new(provider.base_url());
    config.files = Some(dir.path().join("root"));
    config.db = dir.path().join("gateway.db");
    config.no_upstream_key = true;
    let start = |config: Config| async move {
        let gateway = Gateway::new(&config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(gateway.serve(listener, async {
            let _ = rx.await;
        }));
        (url, tx, server)
    };

    let (url, stop, server) = start(config.clone()).await;
    let first = post(&url, request(false, "write hello").to_string(), &[]).await;
    let (approval, notice) = paused(&first, false);
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();

    // A new process: nothing in memory, the same database.
    let (url, _stop, _server) = start(config).await;
    let mut resume = request(false, "write hello");
    resume["messages"].as_array_mut().unwrap().push(notice);
    resume["tower_chat"] = json!({"approvals": [{"id": approval["id"], "approved": true}]});
    let second = post(&url, resume.to_string(), &[]).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(
        second.json()["choices"][0]["message"]["content"],
        "Result: wrote 8 bytes to out/hello.txt"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("root/out/hello.txt")).unwrap(),
        "hi there"
    );
    // Still single-use across processes: the approval layer took it from the database.
    let replay = post(&url, resume.to_string(), &[]).await;
    assert_eq!(replay.status, 400, "{}", replay.body);
}
