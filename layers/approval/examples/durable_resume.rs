//! A pause that outlives its store handle: the approval is recorded in SQLite, the store is closed, and a new
//! stack on a fresh store instance (as after a restart) resumes it once an operator approved.
//!
//! ```sh
//! cargo run -p tower-chat-approval --features sqlite --example durable_resume
//! ```

use futures_util::stream;
use serde_json::{json, Value};
use tower::{service_fn, util::BoxCloneService, Layer, ServiceExt};
use tower_chat::{
    ApprovalDecision, ApprovalDecisions, CallerIdentity, ChatError, ChatEvent, ChatRequest,
    ChatStream, ChatStreamExt, ConversationId, FinishReason, Message, ToolCall,
};
use tower_chat_approval::{ApprovalLayer, ApproverIdentity, SqliteApprovalStore, Verdict};
use tower_chat_function_invocation::{tool_json, FunctionInvocationLayer};
use tower_chat_persistence::SqliteStore;

type Chat = BoxCloneService<ChatRequest, ChatStream, ChatError>;

/// One gateway process: its own store handle on the shared database file.
async fn gateway(path: &std::path::Path) -> Result<Chat, Box<dyn std::error::Error>> {
    let store = SqliteApprovalStore::new(SqliteStore::open(path).await?).await?;
    let write_file = tool_json(
        "write_file",
        "Write a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        |args: Value, _ctx| async move { Ok::<_, String>(format!("wrote {}", args["path"])) },
    )
    .compile()?;
    // A stand-in model: it writes /etc/motd, then reports the tool's result.
    let model = service_fn(|request: ChatRequest| async move {
        let events = match request.messages.last() {
            Some(Message::Tool(result)) => vec![
                ChatEvent::text(format!("Done: {}", result.content)),
                ChatEvent::finish(FinishReason::Stop),
            ],
            _ => vec![
                ChatEvent::ToolCallEnd {
                    index: 0,
                    call: ToolCall::new("call-1", "write_file", json!({"path": "/etc/motd"})),
                },
                ChatEvent::finish(FinishReason::ToolCalls),
            ],
        };
        Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events.into_iter().map(Ok))))
    });
    let approvals = ApprovalLayer::new()
        .store(store)
        .policy(|input| match input.arguments()["path"].as_str() {
            Some(path)
                if input.tool_name() == "write_file" && !path.starts_with("./workspace/") =>
            {
                Verdict::require(format!("writes {path}, outside ./workspace"))
            }
            _ => input.default_verdict(),
        })
        .approver_rule(|input| match input.approver() {
            Some(who) if who.starts_with("operator:") => Ok(()),
            other => Err(format!("{other:?} is not an operator")),
        });
    let tool_loop = FunctionInvocationLayer::new()
        .tool(write_file)
        .unwrap()
        .layer(model);
    Ok(BoxCloneService::new(approvals.layer(tool_loop)))
}

fn request(history: Vec<Message>) -> ChatRequest {
    ChatRequest::new(history)
        .with_extension(ConversationId::new("conv-42"))
        .with_extension(CallerIdentity::new("alice"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("gateway.db");

    let first = gateway(&path).await?;
    let mut history = vec![Message::user("Put a greeting in the motd")];
    let paused = first
        .oneshot(request(history.clone()))
        .await?
        .collect_response()
        .await?;
    let approval = paused.approval_requests[0].clone();
    println!(
        "paused ({:?}): {} wants {} — {}",
        paused.finish_reason,
        approval.id,
        approval.call.name,
        approval.reason.as_deref().unwrap_or("")
    );
    history.extend(paused.messages);

    // "Restart": a new store instance and stack on the same file.
    let second = gateway(&path).await?;
    let resume = request(history.clone())
        .with_extension(ApproverIdentity::new("operator:bob"))
        .with_extension(ApprovalDecisions(vec![ApprovalDecision::approve(
            approval.id.clone(),
        )]));
    let done = second
        .clone()
        .oneshot(resume.clone())
        .await?
        .collect_response()
        .await?;
    println!("resumed: {}", done.text());

    // The id was used: the same decision again is refused before anything runs.
    let refused = second.oneshot(resume).await.err().expect("replay refused");
    println!("replay: {refused}");
    Ok(())
}
