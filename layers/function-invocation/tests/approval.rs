//! Approval-required tools: pausing, resuming with decisions, and the policy hook.

mod common;

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use common::*;
use serde_json::{json, Value};
use tower_chat::{
    ApprovalDecision, ApprovalDecisions, ApprovalRequest, ChatEvent, ChatRequest, FinishReason,
    Message, ToolMessage,
};
use tower_chat_function_invocation::{
    ApprovalPolicy, ApprovalVerdict, CompiledTool, FunctionInvocationLayer,
};

fn delete(runs: Arc<AtomicUsize>) -> CompiledTool {
    counting("delete", runs, Ok("deleted"))
}

fn guarded_delete(runs: Arc<AtomicUsize>) -> CompiledTool {
    tower_chat_function_invocation::tool_json(
        "delete",
        "Deletes a file",
        json!({"type": "object"}),
        move |_v: Value, _c| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, String>("deleted")
            }
        },
    )
    .with_approval()
    .compile()
    .unwrap()
}

/// The first leg: the model calls `delete` (gated) and `weather` (not) in one round.
async fn first_leg(
    shape: Delivery,
    layer: &FunctionInvocationLayer,
    request: ChatRequest,
) -> (Vec<ChatEvent>, Vec<Message>) {
    let (inner, script) = scripted(
        shape,
        vec![calls(&[
            ("a", "delete", json!({})),
            ("b", "weather", json!({"city": "Oslo"})),
        ])],
    );
    let history = request.messages.to_vec();
    let (events, error) = run(stack(layer.clone(), inner), request).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(script.calls(), 1);
    let mut history = history;
    history.extend(messages(&events));
    (events, history)
}

#[tokio::test]
async fn gated_calls_wait_while_the_rest_of_the_round_runs() {
    for shape in SHAPES {
        let deletes = counter();
        let weathers = counter();
        let layer = FunctionInvocationLayer::new()
            .tool(guarded_delete(deletes.clone()))
            .unwrap()
            .tool(weather(weathers.clone()))
            .unwrap();
        let (events, history) = first_leg(shape, &layer, user("clean up")).await;
        assert_eq!(count(&deletes), 0, "never without a decision");
        assert_eq!(count(&weathers), 1, "the ungated call ran at once");
        assert_eq!(
            approvals(&events),
            vec![ApprovalRequest {
                id: "a".into(),
                call: call("a", "delete", json!({})),
                reason: None,
            }]
        );
        assert_eq!(
            finish_reasons(&events),
            vec![FinishReason::AwaitingApproval]
        );
        assert_eq!(usages(&events).len(), 1);
        assert_eq!(
            tool_messages(&history),
            vec![ToolMessage::success("b", "weather", "sunny in Oslo")]
        );
    }
}

#[tokio::test]
async fn an_approved_call_runs_on_resume_and_the_model_sees_results_in_call_order() {
    for shape in SHAPES {
        let deletes = counter();
        let layer = FunctionInvocationLayer::new()
            .tool(guarded_delete(deletes.clone()))
            .unwrap()
            .tool(weather(counter()))
            .unwrap();
        let (_, history) = first_leg(shape, &layer, user("clean up")).await;

        let (inner, script) = scripted(shape, vec![answer("All done.")]);
        let resume = ChatRequest::new(history.clone())
            .with_extension(ApprovalDecisions(vec![ApprovalDecision::approve("a")]));
        let (events, error) = run(stack(layer, inner), resume).await;
        assert!(error.is_none());
        assert_eq!(count(&deletes), 1, "{shape:?}");
        assert_eq!(
            tool_results(&events),
            vec![ToolMessage::success("a", "delete", "deleted")]
        );
        assert_eq!(finish_reasons(&events), vec![FinishReason::Stop]);
        let sent = script.sent(0);
        assert_eq!(sent.len(), 4);
        assert_eq!(sent[..2], history[..2]);
        let ids: Vec<String> = tool_messages(&sent)
            .into_iter()
            .map(|m| m.call_id)
            .collect();
        assert_eq!(ids, ["a", "b"]);
        assert!(
            script.requests()[0]
                .extensions
                .get::<ApprovalDecisions>()
                .is_none(),
            "decisions are consumed by the loop"
        );
    }
}

#[tokio::test]
async fn a_denied_call_is_answered_not_approved_and_never_runs() {
    for shape in SHAPES {
        let deletes = counter();
        let layer = FunctionInvocationLayer::new()
            .tool(guarded_delete(deletes.clone()))
            .unwrap()
            .tool(weather(counter()))
            .unwrap();
        let (_, history) = first_leg(shape, &layer, user("clean up")).await;
        let (inner, script) = scripted(shape, vec![answer("Understood.")]);
        let resume = ChatRequest::new(history).with_extension(ApprovalDecisions(vec![
            ApprovalDecision::deny("a", "too risky"),
        ]));
        let (events, _) = run(stack(layer, inner), resume).await;
        assert_eq!(count(&deletes), 0);
        assert_eq!(
            tool_results(&events),
            vec![ToolMessage::error("a", "delete", "not approved: too risky")]
        );
        assert_eq!(
            tool_messages(&script.sent(0))[0].content,
            "not approved: too risky"
        );
    }
}

#[tokio::test]
async fn decisions_only_count_for_calls_pending_in_the_history() {
    for shape in SHAPES {
        // A decision sent ahead of time for an id the model will use does not pre-approve the call.
        let deletes = counter();
        let layer = FunctionInvocationLayer::new()
            .tool(guarded_delete(deletes.clone()))
            .unwrap()
            .tool(weather(counter()))
            .unwrap();
        let eager = user("clean up")
            .with_extension(ApprovalDecisions(vec![ApprovalDecision::approve("a")]));
        let (events, _) = first_leg(shape, &layer, eager).await;
        assert_eq!(count(&deletes), 0, "{shape:?}");
        assert_eq!(
            finish_reasons(&events),
            vec![FinishReason::AwaitingApproval]
        );

        // Two gated calls pending, a decision for one: it runs, the other is asked about again.
        let (inner, _) = scripted(
            shape,
            vec![calls(&[
                ("a", "delete", json!({})),
                ("b", "delete", json!({})),
            ])],
        );
        let (events, _) = run(stack(layer.clone(), inner), user("two")).await;
        let mut history = vec![Message::user("two")];
        history.extend(messages(&events));
        let (inner, script) = scripted(shape, vec![]);
        let resume = ChatRequest::new(history).with_extension(ApprovalDecisions(vec![
            ApprovalDecision::approve("b"),
            ApprovalDecision::approve("zzz"),
        ]));
        let (events, error) = run(stack(layer.clone(), inner), resume).await;
        assert!(error.is_none());
        assert_eq!(count(&deletes), 1);
        assert_eq!(script.calls(), 0, "still waiting: no model call");
        let asked: Vec<String> = approvals(&events).into_iter().map(|r| r.id).collect();
        assert_eq!(asked, ["a"]);
        assert_eq!(
            finish_reasons(&events),
            vec![FinishReason::AwaitingApproval]
        );
        assert_eq!(tool_results(&events)[0].call_id, "b");
    }
}

#[tokio::test]
async fn policies_can_require_approval_or_deny_but_never_waive_it() {
    for shape in SHAPES {
        let weathers = counter();
        let deletes = counter();
        let layer = FunctionInvocationLayer::new()
            .tool(guarded_delete(deletes.clone()))
            .unwrap()
            .tool(weather(weathers.clone()))
            // A layer policy with no opinion does not lift the tool's own guard.
            .unwrap()
            .approval_policy(ApprovalPolicy::new(|_, _, _| ApprovalVerdict::Default));
        let policy = ApprovalPolicy::new(|call, tool, _extensions| {
            let city = call
                .arguments
                .json()
                .and_then(|v| v["city"].as_str())
                .unwrap_or("");
            match (tool.name(), city) {
                ("weather", "Pyongyang") => ApprovalVerdict::Require {
                    reason: Some("sensitive location".into()),
                },
                ("weather", "Nowhere") => ApprovalVerdict::Deny {
                    reason: "no such place".into(),
                },
                _ => ApprovalVerdict::Default,
            }
        });
        let (inner, script) = scripted(
            shape,
            vec![calls(&[
                ("a", "weather", json!({"city": "Pyongyang"})),
                ("b", "weather", json!({"city": "Nowhere"})),
                ("c", "weather", json!({"city": "Oslo"})),
                ("d", "delete", json!({})),
            ])],
        );
        let request = user("x").with_extension(policy.clone());
        let (events, _) = run(stack(layer.clone(), inner), request).await;
        assert_eq!(script.calls(), 1);
        let asked: Vec<(String, Option<String>)> = approvals(&events)
            .into_iter()
            .map(|r| (r.id, r.reason))
            .collect();
        assert_eq!(
            asked,
            [
                ("a".to_owned(), Some("sensitive location".to_owned())),
                ("d".to_owned(), None)
            ]
        );
        assert_eq!(count(&weathers), 1, "only Oslo ran");
        let results = tool_results(&events);
        assert_eq!(
            results[0],
            ToolMessage::error("b", "weather", "not approved: no such place")
        );
        assert_eq!(results[1].call_id, "c");

        // On resume the policy still applies: a Deny beats an approval.
        let mut history = vec![Message::user("x")];
        history.extend(messages(&events));
        let deny_all = ApprovalPolicy::new(|_, tool, _| {
            if tool.name() == "delete" {
                ApprovalVerdict::Deny {
                    reason: "frozen".into(),
                }
            } else {
                ApprovalVerdict::Default
            }
        });
        let (inner, script) = scripted(shape, vec![answer("ok")]);
        let resume = ChatRequest::new(history)
            .with_extension(ApprovalDecisions(vec![
                ApprovalDecision::approve("a"),
                ApprovalDecision::approve("d"),
            ]))
            .with_extension(deny_all);
        let (events, error) = run(stack(layer, inner), resume).await;
        assert!(error.is_none());
        assert_eq!(count(&deletes), 0);
        assert_eq!(count(&weathers), 2);
        let sent = tool_messages(&script.sent(0));
        let ids: Vec<&str> = sent.iter().map(|m| m.call_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
        assert_eq!(sent[3].content, "not approved: frozen");
        assert_eq!(finish_reasons(&events), vec![FinishReason::Stop]);
    }
}

#[tokio::test]
async fn without_decisions_pending_calls_are_left_alone() {
    // A history ending in an unanswered call, but no decisions: the loop does not run it on its own.
    let deletes = counter();
    let layer = FunctionInvocationLayer::new()
        .tool(delete(deletes.clone()))
        .unwrap();
    let history = vec![
        Message::user("x"),
        Message::Assistant(tower_chat::AssistantMessage {
            tool_calls: vec![call("a", "delete", json!({}))],
            ..Default::default()
        }),
    ];
    let (inner, script) = scripted(Delivery::AllAtOnce, vec![answer("hm")]);
    let (_, error) = run(stack(layer, inner), ChatRequest::new(history)).await;
    assert!(error.is_none());
    assert_eq!(count(&deletes), 0);
    assert_eq!(script.calls(), 1);
}
