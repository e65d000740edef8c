//! The whole stack composed with `tower::ServiceBuilder` over the real OpenAI-compatible leaf on loopback:
//! tracing outside, the tool loop, persistence inside it (one record per model round trip), SQLite on disk.

use serde_json::json;
use tower::{ServiceBuilder, ServiceExt};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{ChatRequest, ChatStreamExt, ConversationId, FinishReason, Message, ModelInfo};
use tower_chat_stack::persistence::{CallOutcome, PersistenceLayer, SqliteStore, Store};
use tower_chat_stack::tools::{tool_json, FunctionInvocationLayer};
use tower_chat_stack::tracing::TracingLayer;

#[tokio::test]
async fn tracing_tool_loop_and_persistence_compose_over_the_http_leaf() {
    let provider = ScriptedProvider::start(|request, _| {
        let answered = request.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool");
        if answered {
            Reply::openai_text("It is 4°C in Oslo.")
        } else {
            Reply::openai_tool_calls(&[("call_w", "weather", r#"{"city":"Oslo"}"#)])
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("chat.db")).await.unwrap();
    let weather = tool_json(
        "weather",
        "Current weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args, _ctx| async move {
            Ok::<_, String>(format!("4°C in {}", args["city"].as_str().unwrap_or("?")))
        },
    )
    .compile()
    .unwrap();
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("scripted-model")
        .build()
        .unwrap();

    let chat = ServiceBuilder::new()
        .layer(TracingLayer::new())
        .layer(FunctionInvocationLayer::new().tool(weather).unwrap())
        .layer(PersistenceLayer::new(store.clone()))
        .service(leaf);
    assert_eq!(
        chat.model_metadata().model_id.as_deref(),
        Some("scripted-model")
    );
    assert_eq!(
        chat.get_ref().get_ref().get_ref().endpoint().path(),
        "/v1/chat/completions"
    );

    let conversation = ConversationId::new("conv-full-stack");
    let request = ChatRequest::new(vec![Message::user("Weather in Oslo?")])
        .with_extension(conversation.clone());
    let response = chat
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "It is 4°C in Oslo.");
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));

    // Fail-closed persistence: the records are stored before the final events were delivered.
    let calls = store.conversation_calls(&conversation).await.unwrap();
    assert_eq!(calls.len(), 2, "one record per model round trip");
    assert_eq!((calls[0].round_index, calls[1].round_index), (0, 1));
    assert!(calls.iter().all(|c| c.outcome == CallOutcome::Completed));
    assert_eq!(calls[0].finish_reason(), Some(&FinishReason::ToolCalls));
    assert_eq!(calls[1].response.text(), "It is 4°C in Oslo.");
    let history = store.load_conversation(&conversation).await.unwrap();
    assert_eq!(history.len(), 4, "user, assistant(call), tool, assistant");
}
