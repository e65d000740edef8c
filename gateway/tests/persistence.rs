//! Every call is recorded through the persistence layer (SQLite, `--db`), whole turns with their tool rounds.

mod common;

use common::{post, request, tool_result, Harness};
use tower_chat::test_server::Reply;
use tower_chat::{ConversationId, Message};
use tower_chat_persistence::{SqliteStore, Store};

#[tokio::test]
async fn every_turn_is_recorded_with_its_tool_rounds_and_caller() {
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "recorder:sk-recorded\n").unwrap();
    let keys_path = keys.path().to_owned();
    let mut gw = Harness::start(
        |req, _| {
            let messages = req.body["messages"].as_array().unwrap();
            match tool_result(messages, "call_add") {
                None => Reply::openai_tool_calls(&[("call_add", "add", r#"{"a": 2, "b": 3}"#)]),
                Some(sum) => Reply::openai_text(&format!("The sum is {sum}")),
            }
        },
        move |c| c.api_keys_file = Some(keys_path),
    )
    .await;
    let url = gw.url("/v1/chat/completions");
    for stream in [false, true] {
        let answer = post(
            &url,
            request(stream, "2+3?").to_string(),
            &[
                ("authorization", "Bearer sk-recorded"),
                ("x-conversation-id", "conv-gateway"),
            ],
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    // Shutdown flushes the writer.
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let store = SqliteStore::open(gw.files.path().join("gateway.db"))
        .await
        .unwrap();
    // With gateway keys a conversation id is scoped to its caller.
    let conversation = ConversationId::new("recorder/conv-gateway");
    let calls = store.conversation_calls(&conversation).await.unwrap();
    assert_eq!(calls.len(), 2, "one record per client request");
    for call in &calls {
        assert_eq!(call.caller.as_ref().unwrap().as_str(), "recorder");
        assert_eq!(call.provider.as_deref(), Some("openai"));
        // The model that answered, as the upstream named it.
        assert_eq!(call.model.as_deref(), Some("scripted-model"));
        assert_eq!(call.usage().input_tokens, 20 + 12);
    }
    let history = store.load_conversation(&conversation).await.unwrap();
    assert_eq!(history.len(), 4, "{history:?}");
    assert_eq!(history[0], Message::user("2+3?"));
    assert!(matches!(&history[1], Message::Assistant(a) if a.tool_calls[0].name == "add"));
    assert!(matches!(&history[2], Message::Tool(t) if t.content == "5"));
    assert_eq!(history[3], Message::assistant("The sum is 5"));
}

#[tokio::test]
async fn a_client_hanging_up_mid_stream_is_recorded_as_cancelled_with_the_partial_output() {
    use tower_chat::test_server::Part;
    use tower_chat_persistence::CallOutcome;

    let mut gw = Harness::start(
        |_, _| {
            Reply::sse_chunks([
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n",
            ])
            .then(Part::Hang)
        },
        |_| {},
    )
    .await;
    // A raw connection, so the test controls exactly when the client goes away.
    let mut socket = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let body = request(true, "hi").to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-conversation-id: conv-hangup\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut socket, head.as_bytes())
        .await
        .unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("partial") {
        let mut buf = [0u8; 4096];
        let n = tokio::io::AsyncReadExt::read(&mut socket, &mut buf)
            .await
            .unwrap();
        assert!(n > 0, "connection closed early");
        seen.extend_from_slice(&buf[..n]);
    }
    drop(socket);
    // The gateway noticed the hang-up when it dropped the upstream stream: the persistence layer handed the
    // record to its writer before that (in the recording stream's drop), and shutdown flushes the writer.
    gw.provider.hangups(1).await;
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let store = SqliteStore::open(gw.files.path().join("gateway.db"))
        .await
        .unwrap();
    let calls = store
        .conversation_calls(&ConversationId::new("conv-hangup"))
        .await
        .unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].outcome,
        CallOutcome::Cancelled,
        "{:?}",
        calls[0].outcome
    );
    assert_eq!(calls[0].response.text(), "partial");
}

#[tokio::test]
async fn with_database_url_calls_and_approvals_go_to_postgresql() {
    use tower_chat_persistence::PostgresStore;

    let Some(url) = tower_chat::test_server::service_url("DATABASE_URL") else {
        return;
    };
    let database_url = url.clone();
    let mut gw = Harness::start(
        |req, _| {
            let messages = req.body["messages"].as_array().unwrap();
            match tool_result(messages, "call_write") {
                None => Reply::openai_tool_calls(&[(
                    "call_write",
                    "write_file",
                    r#"{"path": "pg.txt", "content": "pg"}"#,
                )]),
                Some(result) => Reply::openai_text(&format!("done: {result}")),
            }
        },
        move |c| c.database_url = Some(database_url),
    )
    .await;
    // Unique per run: the database outlives the test.
    let conversation = format!("conv-pg-{}", uuid::Uuid::new_v4().simple());
    let url_chat = gw.url("/v1/chat/completions");
    let headers = [("x-conversation-id", conversation.as_str())];
    let first = post(&url_chat, request(false, "write pg").to_string(), &headers)
        .await
        .json();
    let message = &first["choices"][0]["message"];
    let id = message["tower_chat_approvals"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let store = PostgresStore::connect(url).await.unwrap();
    let approvals = tower_chat_approval::PostgresApprovalStore::new(store.clone())
        .await
        .unwrap();
    let pending = tower_chat_approval::ApprovalStore::get_pending(&approvals, &id)
        .await
        .unwrap()
        .expect("the approval is pending in PostgreSQL");
    assert_eq!(pending.conversation_id.as_str(), conversation);

    let mut resume = request(false, "write pg");
    resume["messages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"role": "assistant", "content": message["content"]}));
    resume["tower_chat"] = serde_json::json!({"approvals": [{"id": id, "approved": true}]});
    let second = post(&url_chat, resume.to_string(), &headers).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(
        std::fs::read_to_string(gw.root().join("pg.txt")).unwrap(),
        "pg"
    );
    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();

    let conversation = ConversationId::new(conversation);
    assert_eq!(
        store.conversation_calls(&conversation).await.unwrap().len(),
        2
    );
    let history = store.load_conversation(&conversation).await.unwrap();
    assert_eq!(
        history.last(),
        Some(&Message::assistant("done: wrote 2 bytes to pg.txt"))
    );
}
