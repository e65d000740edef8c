//! Every call is recorded through the persistence layer (SQLite, `--db`), whole turns with their tool rounds.

mod common;

use common::{post, request, tool_result, Harness};
use tower_chat::test_server::Reply;
use tower_chat::{ConversationId, Message};
use tower_chat_persistence::{SqliteStore, Store};

#[tokio::test]
async fn every_turn_is_recorded_with_its_tool_rounds_and_caller() {
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "sk-recorded\n").unwrap();
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
    let conversation = ConversationId::new("conv-gateway");
    let calls = store.conversation_calls(&conversation).await.unwrap();
    assert_eq!(calls.len(), 2, "one record per client request");
    for call in &calls {
        assert_eq!(call.caller.as_ref().unwrap().as_str(), "key-1");
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
