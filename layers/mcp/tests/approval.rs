//! Approvals of MCP tool calls: by the server's policy (the tool's own flag) and by an approval layer's policy
//! reading MCP annotations. The demo server runs in-process over HTTP, so the tests see its notes.

mod common;

use common::*;
use serde_json::json;
use tower::Layer;
use tower_chat::{
    ApprovalDecision, CallerIdentity, ChatRequest, ConversationId, FinishReason, ToolMessage,
};
use tower_chat_approval::{ApprovalLayer, Verdict};
use tower_chat_function_invocation::FunctionInvocationLayer;
use tower_chat_mcp::{Approval, ServerPolicy};

/// Round 1 writes notes `a` and `b`; round 2 deletes `a`.
fn rounds() -> Vec<Vec<tower_chat::ToolCall>> {
    vec![
        vec![
            call("w1", "write_note", json!({"key": "a", "text": "alpha"})),
            call("w2", "write_note", json!({"key": "b", "text": "beta"})),
        ],
        vec![call("d1", "delete_note", json!({"key": "a"}))],
    ]
}

#[tokio::test]
async fn the_server_policy_pauses_destructive_calls_until_approved() {
    let (server, mcp) = http_demo("notes", |c| {
        c.policy(ServerPolicy::new(Approval::IfDestructive))
    })
    .await;
    assert!(mcp.tools().get("delete_note").unwrap().requires_approval());
    assert!(!mcp.tools().get("write_note").unwrap().requires_approval());

    let (model, _) = scripted_model(rounds());
    let chat = stack(&mcp, FunctionInvocationLayer::new(), model);
    let paused = respond(chat.clone(), user("tidy up")).await;
    assert_eq!(paused.finish_reason, Some(FinishReason::AwaitingApproval));
    assert_eq!(paused.approval_requests.len(), 1);
    assert_eq!(paused.approval_requests[0].call.name, "delete_note");
    assert_eq!(
        server.state().notes().len(),
        2,
        "nothing deleted without a decision"
    );

    let done = respond(
        chat,
        resume("tidy up", paused, ApprovalDecision::approve("d1")),
    )
    .await;
    assert_eq!(done.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        tool_messages(&done.messages),
        vec![ToolMessage::success("d1", "delete_note", "deleted a")]
    );
    assert_eq!(done.text(), "deleted a");
    assert_eq!(server.state().notes().keys().collect::<Vec<_>>(), vec!["b"]);
}

#[tokio::test]
async fn a_denied_call_never_reaches_the_server() {
    let policy = ServerPolicy::new(Approval::Always).tool("write_note", Approval::Never);
    let (server, mcp) = http_demo("notes", |c| c.policy(policy)).await;
    let (model, _) = scripted_model(rounds());
    let chat = stack(&mcp, FunctionInvocationLayer::new(), model);
    let paused = respond(chat.clone(), user("tidy up")).await;
    assert_eq!(paused.finish_reason, Some(FinishReason::AwaitingApproval));
    let calls_before = server.state().calls();

    let denied = ApprovalDecision::deny("d1", "keep it");
    let done = respond(chat, resume("tidy up", paused, denied)).await;
    assert!(tool_messages(&done.messages)[0].is_error);
    assert!(tool_messages(&done.messages)[0]
        .content
        .to_string()
        .contains("keep it"));
    assert_eq!(server.state().calls(), calls_before);
    assert_eq!(server.state().notes().len(), 2);
}

#[tokio::test]
async fn an_approval_layer_policy_sees_the_mcp_annotations() {
    // The server policy asks for nothing; the approval layer gates destructive MCP tools by their annotation.
    let (server, mcp) = http_demo("notes", |c| c).await;
    let approvals = ApprovalLayer::new().policy(|input| {
        let hints = input.tool().hints();
        if hints.source.as_deref() == Some("notes") && hints.destructive == Some(true) {
            Verdict::require("destructive MCP tool")
        } else {
            input.default_verdict()
        }
    });
    let (model, _) = scripted_model(rounds());
    let chat = Chat::new(approvals.layer(stack(&mcp, FunctionInvocationLayer::new(), model)));
    let context = |request: ChatRequest| {
        request
            .with_extension(ConversationId::new("conv-1"))
            .with_extension(CallerIdentity::new("alice"))
    };
    let paused = respond(chat.clone(), context(user("tidy up"))).await;
    assert_eq!(paused.finish_reason, Some(FinishReason::AwaitingApproval));
    let approval = &paused.approval_requests[0];
    assert!(approval.id.starts_with("apr_"), "{approval:?}");
    assert_eq!(approval.reason.as_deref(), Some("destructive MCP tool"));
    assert_eq!(server.state().notes().len(), 2);

    let approve = ApprovalDecision::approve(approval.id.clone());
    let done = respond(chat, context(resume("tidy up", paused.clone(), approve))).await;
    assert_eq!(done.text(), "deleted a");
    assert_eq!(server.state().notes().keys().collect::<Vec<_>>(), vec!["b"]);
}
