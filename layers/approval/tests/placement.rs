//! A misplaced approval layer fails the first call with a typed error naming the fix; nothing runs unapproved.
//! Both wrong orders (inside the tool loop; over no loop at all) and the right ones (directly outside, with
//! middleware in between, nested approval layers) are covered.

mod common;

use std::error::Error as _;

use common::*;
use tower::{Layer, ServiceExt};
use tower_chat::{ChatError, ErrorKind, FinishReason, Message};
use tower_chat_approval::ApprovalMisplaced;

fn misplaced(error: &ChatError) -> ApprovalMisplaced {
    assert_eq!(error.kind(), &ErrorKind::Approval, "{error}");
    assert!(
        error
            .to_string()
            .contains("outside (above) the FunctionInvocationLayer"),
        "the error names the fix: {error}"
    );
    *error
        .source()
        .and_then(|source| source.downcast_ref::<ApprovalMisplaced>())
        .expect("an ApprovalMisplaced source")
}

#[tokio::test]
async fn inside_the_tool_loop_the_first_call_fails_and_no_tool_runs() {
    let runs = Runs::new();
    let (m, model) = model(Delivery::AllAtOnce, vec![delete_call("c1", "a.txt")]);
    let approval_inside = Chat::new(flagged().layer(m));
    let chat = tool_loop(&runs, approval_inside);
    let error = try_run(chat.clone(), request(vec![Message::user("clean up")]))
        .await
        .unwrap_err();
    assert_eq!(misplaced(&error), ApprovalMisplaced::InsideToolLoop);
    assert_eq!(runs.deletes(), 0);
    assert_eq!(model.calls(), 0, "refused before the model was called");
}

#[tokio::test]
async fn over_no_tool_loop_the_first_call_fails() {
    let (m, _model) = model(Delivery::OneByOne, vec![delete_call("c1", "a.txt")]);
    let chat = Chat::new(flagged().layer(m));
    let error = try_run(chat.clone(), request(vec![Message::user("clean up")]))
        .await
        .unwrap_err();
    assert_eq!(misplaced(&error), ApprovalMisplaced::NoToolLoop);
}

#[tokio::test]
async fn outside_the_loop_with_middleware_between_and_nested_layers_it_gates() {
    let runs = Runs::new();
    let (m, _model) = model(Delivery::OneByOne, vec![delete_call("c1", "a.txt")]);
    // tower middleware between the approval layer and the loop, and a second approval layer outside.
    let between =
        Chat::new(tool_loop(&runs, m).map_request(|request: tower_chat::ChatRequest| request));
    let inner = Chat::new(flagged().layer(between));
    let chat: Chat = Chat::new(
        tower_chat_approval::ApprovalLayer::new()
            .require_approval("weather")
            .layer(inner),
    );
    let events = try_run(chat.clone(), request(vec![Message::user("clean up")]))
        .await
        .unwrap();
    assert_eq!(finish(&events), Some(FinishReason::AwaitingApproval));
    assert_eq!(approvals(&events).len(), 1);
    assert_eq!(runs.deletes(), 0);
}
