//! The README's chain, run: tracing + approvals + the tool loop + persistence over the OpenAI-compatible leaf
//! talking to a scripted provider over loopback. A gated tool pauses the turn, an approval resumes it, and every
//! model round trip is on record.

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat_stack::approval::ApproverIdentity;
use tower_chat_stack::prelude::*;
use tower_chat_stack::{ApprovalDecision, ApprovalDecisions};

fn upstream(request: &RecordedRequest, _index: usize) -> Reply {
    let answered = request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["role"] == "tool");
    if answered {
        Reply::openai_text("It is sunny in Oslo")
    } else {
        Reply::openai_tool_calls(&[("call_1", "get_weather", r#"{"city": "Oslo"}"#)])
    }
}

#[tokio::test]
async fn the_readme_chain_pauses_resumes_and_records() {
    let provider = ScriptedProvider::start(upstream).await;
    let weather = tool_json(
        "get_weather",
        "Weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |_args: Value, _ctx| async { Ok::<_, String>("sunny".to_owned()) },
    )
    .compile()
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("chat.db")).await.unwrap();

    let chat = ServiceBuilder::new()
        .chat_tracing()
        .approvals(ApprovalLayer::new().require_approval("get_weather"))
        .tool_loop([weather])
        .unwrap()
        .persist(PersistenceLayer::new(store.clone()))
        .service(
            OpenAiChat::builder()
                .base_url(provider.base_url())
                .model("gpt-4o-mini")
                .build()
                .unwrap(),
        );
    assert_eq!(chat.model_metadata().provider, "openai");

    let conversation = ConversationId::new("conv-stack");
    let mut history = vec![Message::user("Weather in Oslo?")];
    let paused = chat
        .clone()
        .oneshot(ChatRequest::new(history.clone()).with_extension(conversation.clone()))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(paused.finish_reason, Some(FinishReason::AwaitingApproval));
    let approval = paused.approval_requests[0].id.clone();

    history.extend(paused.messages);
    let resumed = chat
        .oneshot(
            ChatRequest::new(history)
                .with_extension(conversation.clone())
                .with_extension(ApproverIdentity::new("operator"))
                .with_extension(ApprovalDecisions(vec![ApprovalDecision::approve(approval)])),
        )
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(resumed.text(), "It is sunny in Oslo");
    assert_eq!(provider.requests().len(), 2);
    // Persistence sits inside the loop: one record per model round trip.
    let calls = store.conversation_calls(&conversation).await.unwrap();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1].text(), "It is sunny in Oslo");
}
