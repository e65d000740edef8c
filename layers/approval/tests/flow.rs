//! The full pause / decide / resume flow through a real tool loop, on streaming and non-streaming models.

mod common;

use common::*;
use tower_chat::{
    ApprovalDecision, CallerIdentity, ConversationId, ErrorKind, FinishReason, Message, ToolMessage,
};
use tower_chat_approval::{
    ApprovalLayer, ApprovalStore, ApproverIdentity, AuditOutcome, MemoryApprovalStore, Verdict,
};

#[tokio::test]
async fn a_gated_call_pauses_with_a_stored_unguessable_id_while_the_rest_of_the_round_runs() {
    for shape in SHAPES {
        let store = MemoryApprovalStore::new();
        let runs = Runs::new();
        let (model, calls) = model(shape, vec![delete_call("c1", "a.txt"), weather_call("c2")]);
        let chat = stack(&flagged().store(store.clone()), &runs, model);

        let (events, history) = pause(&chat, vec![Message::user("clean up")]).await;
        assert_eq!(runs.deletes(), 0, "never without a decision");
        assert_eq!(
            runs.weathers(),
            1,
            "the ungated call ran at once ({shape:?})"
        );
        let requests = approvals(&events);
        assert_eq!(requests.len(), 1);
        let approval = &requests[0];
        assert!(
            approval.id.starts_with("apr_") && approval.id.len() == 36,
            "{}",
            approval.id
        );
        assert_ne!(approval.id, "c1", "the call id is not the approval id");
        assert_eq!(approval.call, delete_call("c1", "a.txt"));
        assert_eq!(approval.reason.as_deref(), Some("destructive"));
        assert_eq!(calls.calls(), 1);
        assert_eq!(tool_results(&events).len(), 1);

        // Recorded before it was reported, bound to the conversation and caller.
        let pending = store
            .get_pending(&approval.id)
            .await
            .unwrap()
            .expect("stored");
        assert_eq!(pending.conversation_id.as_str(), CONVERSATION);
        assert_eq!(pending.caller.as_ref().map(|c| c.as_str()), Some(CALLER));
        assert_eq!(pending.call, approval.call);
        assert!(pending.expires_at > pending.created_at);
        // Kept for the approver: the user's request, and what the model said in the round before the call
        // (the round's other call ran first).
        assert_eq!(pending.context.user_message.as_deref(), Some("clean up"));
        assert_eq!(
            pending.context.model_text.as_deref(),
            Some("Working on it.")
        );
        assert!(matches!(history.last(), Some(Message::Tool(t)) if t.call_id == "c2"));
    }
}

#[tokio::test]
async fn an_approved_call_runs_once_and_the_model_continues() {
    for shape in SHAPES {
        let store = MemoryApprovalStore::new();
        let runs = Runs::new();
        let (model, calls) = model(shape, vec![delete_call("c1", "a.txt"), weather_call("c2")]);
        let chat = stack(&flagged().store(store.clone()), &runs, model);
        let (events, history) = pause(&chat, vec![Message::user("clean up")]).await;
        let id = approvals(&events)[0].id.clone();

        let resume = decide(
            request(history.clone()),
            vec![ApprovalDecision::approve(&id)],
        );
        let events = try_run(chat.clone(), resume).await.expect("resumed");
        assert_eq!(runs.deletes(), 1, "{shape:?}");
        assert_eq!(runs.weathers(), 1, "the answered call is not run again");
        assert_eq!(
            tool_results(&events),
            vec![ToolMessage::success(
                "c1",
                "delete",
                r#"delete done with {"path":"a.txt"}"#
            )]
        );
        assert_eq!(finish(&events), Some(FinishReason::Stop));
        assert_eq!(calls.calls(), 2, "the model was called again");
        assert_eq!(
            text(&events),
            r#"Results: delete=delete done with {"path":"a.txt"}, weather=weather done with {"city":"Oslo"}"#
        );
        assert_eq!(store.pending_count(), 0, "taken");

        let log = store
            .audit_log(&ConversationId::new(CONVERSATION))
            .await
            .unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].approval_id, id);
        assert_eq!(log[0].outcome, AuditOutcome::Approved);
        assert_eq!(log[0].approver.as_deref(), Some(CALLER));
        assert_eq!(log[0].call, Some(delete_call("c1", "a.txt")));
    }
}

#[tokio::test]
async fn a_denied_call_never_runs_and_the_model_hears_why() {
    for shape in SHAPES {
        let store = MemoryApprovalStore::new();
        let runs = Runs::new();
        let (model, calls) = model(shape, vec![delete_call("c1", "a.txt")]);
        let chat = stack(&flagged().store(store.clone()), &runs, model);
        let (events, history) = pause(&chat, vec![Message::user("clean up")]).await;
        let id = approvals(&events)[0].id.clone();

        let resume = decide(
            request(history),
            vec![ApprovalDecision::deny(&id, "keep the file")],
        );
        let events = try_run(chat.clone(), resume).await.expect("resumed");
        assert_eq!(runs.deletes(), 0);
        let results = tool_results(&events);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].content, "not approved: keep the file");
        assert!(results[0].is_error);
        assert_eq!(calls.calls(), 2);
        let sent = calls.last_request().messages;
        assert!(
            matches!(sent.last(), Some(Message::Tool(t)) if t.content == "not approved: keep the file")
        );
        assert_eq!(finish(&events), Some(FinishReason::Stop));
        let log = store
            .audit_log(&ConversationId::new(CONVERSATION))
            .await
            .unwrap();
        assert_eq!(log[0].outcome, AuditOutcome::Denied);
        assert_eq!(log[0].reason.as_deref(), Some("keep the file"));
    }
}

#[tokio::test]
async fn a_mixed_round_runs_ungated_calls_and_decides_gated_ones_separately() {
    for shape in SHAPES {
        let store = MemoryApprovalStore::new();
        let runs = Runs::new();
        let (model, _calls) = model(
            shape,
            vec![
                delete_call("c1", "a.txt"),
                weather_call("c2"),
                delete_call("c3", "b.txt"),
            ],
        );
        let chat = stack(&flagged().store(store.clone()), &runs, model);
        let (events, history) = pause(&chat, vec![Message::user("clean up")]).await;
        let ids: Vec<String> = approvals(&events).into_iter().map(|a| a.id).collect();
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        assert_eq!(runs.weathers(), 1);

        // Approve the first only: it runs, the second is asked about again under a new id.
        let resume = decide(
            request(history.clone()),
            vec![ApprovalDecision::approve(&ids[0])],
        );
        let events = try_run(chat.clone(), resume).await.expect("resumed");
        assert_eq!(runs.deletes(), 1);
        assert_eq!(finish(&events), Some(FinishReason::AwaitingApproval));
        let again = approvals(&events);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].call.id, "c3");
        assert!(!ids.contains(&again[0].id), "a fresh id");
        let mut history = history;
        history.extend(messages(&events));

        // Deny the second with its new id: the model continues with both answers.
        let resume = decide(
            request(history),
            vec![ApprovalDecision::deny(&again[0].id, "no")],
        );
        let events = try_run(chat.clone(), resume).await.expect("resumed");
        assert_eq!(runs.deletes(), 1, "{shape:?}");
        assert_eq!(finish(&events), Some(FinishReason::Stop));
        assert!(
            text(&events).contains("delete=not approved: no"),
            "{}",
            text(&events)
        );
        // The old id of the re-asked call was never used and still names a call that is no longer pending.
        assert_eq!(store.pending_count(), 1);
    }
}

#[tokio::test]
async fn the_policy_sees_arguments_and_caller_and_can_allow_require_or_deny() {
    let layer = ApprovalLayer::new().policy(|input| {
        if input.tool_name() != "delete" {
            return input.default_verdict();
        }
        match input.caller().map(|c| c.as_str()) {
            Some("admin") => Verdict::Allow,
            Some("guest") => Verdict::deny("guests cannot delete"),
            _ => match input.arguments()["path"].as_str() {
                Some(path) if path.starts_with("./workspace/") => Verdict::Allow,
                _ => Verdict::require("outside ./workspace"),
            },
        }
    });
    for shape in SHAPES {
        // Inside the workspace: runs without asking.
        let runs = Runs::new();
        let (m, _) = model(shape, vec![delete_call("c1", "./workspace/x")]);
        let events = try_run(stack(&layer, &runs, m), request(vec![Message::user("x")]))
            .await
            .unwrap();
        assert_eq!(runs.deletes(), 1);
        assert_eq!(finish(&events), Some(FinishReason::Stop));

        // Outside: needs approval, with the policy's reason.
        let runs = Runs::new();
        let (m, _) = model(shape, vec![delete_call("c1", "/etc/passwd")]);
        let (events, _) = pause(&stack(&layer, &runs, m), vec![Message::user("x")]).await;
        assert_eq!(runs.deletes(), 0);
        assert_eq!(
            approvals(&events)[0].reason.as_deref(),
            Some("outside ./workspace")
        );

        // An admin may run it without asking.
        let runs = Runs::new();
        let (m, _) = model(shape, vec![delete_call("c1", "/etc/passwd")]);
        let admin = request(vec![Message::user("x")]).with_extension(CallerIdentity::new("admin"));
        let events = try_run(stack(&layer, &runs, m), admin).await.unwrap();
        assert_eq!(runs.deletes(), 1);
        assert!(approvals(&events).is_empty());

        // A guest is denied outright: the model is told, nothing runs, nobody is asked.
        let runs = Runs::new();
        let (m, _) = model(shape, vec![delete_call("c1", "./workspace/x")]);
        let guest = request(vec![Message::user("x")]).with_extension(CallerIdentity::new("guest"));
        let events = try_run(stack(&layer, &runs, m), guest).await.unwrap();
        assert_eq!(runs.deletes(), 0);
        assert!(approvals(&events).is_empty());
        assert_eq!(
            tool_results(&events)[0].content,
            "not approved: guests cannot delete"
        );
    }
}

#[tokio::test]
async fn an_operator_may_decide_on_a_users_conversation_and_is_audited_as_the_approver() {
    let store = MemoryApprovalStore::new();
    let layer = flagged()
        .store(store.clone())
        .approver_rule(|input| match input.approver() {
            Some(who) if who.starts_with("operator:") => Ok(()),
            other => Err(format!("{other:?} is not an operator")),
        });
    let runs = Runs::new();
    let (m, _) = model(SHAPES[0], vec![delete_call("c1", "a.txt")]);
    let chat = stack(&layer, &runs, m);
    let (events, history) = pause(&chat, vec![Message::user("x")]).await;
    let id = approvals(&events)[0].id.clone();
    let resume = decide(request(history), vec![ApprovalDecision::approve(&id)])
        .with_extension(ApproverIdentity::new("operator:bob"));
    try_run(chat.clone(), resume).await.unwrap();
    assert_eq!(runs.deletes(), 1);
    let log = store
        .audit_log(&ConversationId::new(CONVERSATION))
        .await
        .unwrap();
    assert_eq!(log[0].approver.as_deref(), Some("operator:bob"));
    assert_eq!(log[0].caller.as_ref().map(|c| c.as_str()), Some(CALLER));
}

#[tokio::test]
async fn a_gated_call_in_a_request_without_conversation_is_an_error_not_a_bypass() {
    let runs = Runs::new();
    let (m, _) = model(SHAPES[1], vec![delete_call("c1", "a.txt")]);
    let chat = stack(&flagged(), &runs, m);
    let anonymous = tower_chat::ChatRequest::new(vec![Message::user("x")]);
    let error = try_run(chat.clone(), anonymous).await.unwrap_err();
    assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
    assert!(error.message().contains("ConversationId"), "{error}");
    assert_eq!(runs.deletes(), 0);
}

#[tokio::test]
async fn requests_without_approvals_pass_through_unchanged() {
    for shape in SHAPES {
        let runs = Runs::new();
        let (m, calls) = model(shape, vec![weather_call("c1")]);
        let chat = stack(&flagged(), &runs, m);
        let events = try_run(chat.clone(), request(vec![Message::user("x")]))
            .await
            .unwrap();
        assert_eq!(runs.weathers(), 1);
        assert_eq!(finish(&events), Some(FinishReason::Stop));
        assert_eq!(calls.calls(), 2);
        assert_eq!(
            text(&events),
            r#"Working on it.Results: weather=weather done with {"city":"Oslo"}"#
        );
    }
}

/// A leaf that only knows its metadata.
#[derive(Clone, Debug)]
struct Described;

impl tower_chat::ModelInfo for Described {
    fn model_metadata(&self) -> tower_chat::ModelMetadata {
        tower_chat::ModelMetadata {
            provider: "scripted".into(),
            model_id: Some("m-1".into()),
            endpoint: None,
            supports_tools: true,
            supports_parallel_tool_calls: true,
            supports_streaming_usage: false,
            context_window: None,
        }
    }
}

#[test]
fn the_service_forwards_model_metadata_and_exposes_its_inner_service() {
    use tower::Layer;
    use tower_chat::ModelInfo;
    let layer = flagged().policy(|input| input.default_verdict());
    let debug = format!("{layer:?}");
    assert!(debug.contains("delete") && debug.contains("ttl"), "{debug}");
    let service = layer.layer(Described);
    assert_eq!(service.model_metadata().model_id.as_deref(), Some("m-1"));
    assert_eq!(service.get_ref().model_metadata().provider, "scripted");
    let _inner: Described = service.into_inner();
}
