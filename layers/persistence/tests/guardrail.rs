//! A content policy's verdicts recorded with the call, in both stores: spans by offsets and never the matched
//! text; a redacted request recorded as it was sent; a blocked one not recorded at all beyond its size.

#[macro_use]
mod common;

use common::{answer, copy, scripted, TestDb};
use tower::{Layer, ServiceExt};
use tower_chat::{
    ChatRequest, ChatStreamExt, ConversationId, ErrorKind, FinishReason, GuardrailAction,
    GuardrailAudit, GuardrailStage, Message, TextSpan,
};
use tower_chat_guardrail::{Check, GuardrailLayer};
use tower_chat_persistence::CallOutcome;
use tower_chat_testkit::{scripted_stream, SHAPES};

both_stores!(
    verdicts_are_recorded_with_the_call_without_the_text_they_found,
    a_blocked_request_is_recorded_without_its_text,
);

fn policy() -> GuardrailLayer {
    GuardrailLayer::new()
        .check(Check::secrets())
        .check(Check::personal_data())
}

async fn verdicts_are_recorded_with_the_call_without_the_text_they_found(db: &TestDb) {
    for shape in SHAPES {
        let items = std::sync::Arc::new(answer("Mail ops@corp.example today."));
        let chat = db
            .layer()
            .layer(policy().layer(scripted(move |_| scripted_stream(shape, copy(&items)))));
        let conversation = ConversationId::new(format!("conv-{}", common::uuid_simple()));
        // An audit from outside (a gateway's) sees the same verdicts.
        let outer = GuardrailAudit::new();
        let request = ChatRequest::new(vec![Message::user("I am ann@example.net")])
            .with_extension(conversation.clone())
            .with_extension(outer.clone());
        let answer = chat
            .oneshot(request)
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(answer.text(), "Mail [REDACTED:email] today.");

        let record = db
            .store
            .conversation_calls(&conversation)
            .await
            .unwrap()
            .remove(0);
        assert_eq!(record.outcome, CallOutcome::Completed, "{shape:?}");
        assert_eq!(record.text(), "Mail [REDACTED:email] today.");
        assert_eq!(
            record.request.messages[0],
            Message::user("I am [REDACTED:email]")
        );
        let found: Vec<_> = record
            .guardrail
            .iter()
            .map(|v| {
                (
                    v.stage,
                    v.action,
                    v.location.as_str(),
                    v.span,
                    v.detail.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    GuardrailStage::Request,
                    GuardrailAction::Redact,
                    "messages[0]",
                    Some(TextSpan { start: 5, end: 20 }),
                    Some("email")
                ),
                (
                    GuardrailStage::Output,
                    GuardrailAction::Redact,
                    "output",
                    Some(TextSpan { start: 5, end: 21 }),
                    Some("email")
                ),
            ],
            "{shape:?}"
        );
        assert_eq!(outer.verdicts(), record.guardrail);
        let stored = serde_json::to_string(&record).unwrap();
        assert!(
            !stored.contains("ann@example.net") && !stored.contains("ops@corp"),
            "{stored}"
        );
    }
}

async fn a_blocked_request_is_recorded_without_its_text(db: &TestDb) {
    let items = std::sync::Arc::new(answer("never sent"));
    let layer = db.layer();
    let chat = layer
        .clone()
        .layer(policy().layer(scripted(move |_| scripted_stream(SHAPES[0], copy(&items)))));
    let conversation = ConversationId::new(format!("conv-{}", common::uuid_simple()));
    let request = ChatRequest::new(vec![Message::user("key AKIAIOSFODNN7EXAMPLE")])
        .with_extension(conversation.clone());
    let error = chat.oneshot(request).await.err().unwrap();
    assert_eq!(
        error.kind(),
        &ErrorKind::PolicyBlocked {
            check: "secrets".into()
        }
    );
    layer.flush().await.unwrap();
    let record = db
        .store
        .conversation_calls(&conversation)
        .await
        .unwrap()
        .remove(0);
    assert!(
        matches!(record.outcome, CallOutcome::Failed { ref error } if error.kind == "policy_blocked")
    );
    assert!(record.request.messages.is_empty());
    assert_eq!(record.request.omitted.map(|o| o.messages), Some(1));
    assert_eq!(record.guardrail.len(), 1);
    assert_eq!(
        record.guardrail[0].detail.as_deref(),
        Some("aws_access_key")
    );
    assert_eq!(record.finish_reason(), None::<&FinishReason>);
    assert!(!serde_json::to_string(&record).unwrap().contains("AKIA"));
}
