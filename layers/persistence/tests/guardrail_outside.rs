//! A content policy outside the persistence layer (the gateway's order: the policy applies to a whole turn, the
//! records are made per model round inside it), in both stores: what is stored, indexed and read back is what the
//! client saw — a redacted answer redacted, a blocked one withheld and marked blocked — with the verdicts, and
//! the withheld text is nowhere in the database; a request the policy refused is recorded as refused. The same
//! holds for a check that judges the answer's text whole (moderation): a text it blocked is stored withheld,
//! one it redacted redacted, and the check is asked once for both the client and the record.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{answer, copy, found, moderation, scripted, verdicts, TestDb};
use futures_util::{FutureExt, StreamExt};
use tower::{Layer, ServiceExt};
use tower_chat::{
    ChatEvent, ChatRequest, ChatStreamExt, ConversationId, ErrorKind, FinishReason,
    GuardrailAction, GuardrailAudit, GuardrailStage, Message,
};
use tower_chat_guardrail::{Check, GuardrailLayer};
use tower_chat_persistence::{CallLogQuery, CallOutcome, CallRecord, PersistenceLayer};
use tower_chat_testkit::{scripted_stream, SHAPES};

both_stores!(
    an_answer_redacted_outside_is_stored_redacted,
    an_answer_blocked_outside_is_stored_withheld_and_marked_blocked,
    a_request_refused_outside_is_recorded_as_refused_with_its_verdict,
    an_answer_a_whole_text_check_blocked_outside_is_stored_withheld_and_marked_blocked,
    an_answer_a_whole_text_check_redacted_outside_is_stored_redacted,
    a_text_held_for_a_whole_text_check_is_not_kept_when_the_client_leaves,
);

const KEY: &str = "AKIAIOSFODNN7EXAMPLE";
/// What the moderation double flags.
const MARKER: &str = "quokka-launch-code";

fn policy() -> GuardrailLayer {
    GuardrailLayer::new()
        .check(Check::secrets())
        .check(Check::personal_data())
}

/// The policy around the recording layer around a model that says `text`; what the client read and the record.
async fn through_policy(
    db: &TestDb,
    layer: &PersistenceLayer,
    shape: tower_chat_testkit::Delivery,
    user: &str,
    text: &str,
) -> (String, CallRecord) {
    through(db, layer, policy(), shape, user, text).await
}

/// [`through_policy`] under `policy`.
async fn through(
    db: &TestDb,
    layer: &PersistenceLayer,
    policy: GuardrailLayer,
    shape: tower_chat_testkit::Delivery,
    user: &str,
    text: &str,
) -> (String, CallRecord) {
    let items = std::sync::Arc::new(answer(text));
    let chat = policy.layer(
        layer
            .clone()
            .layer(scripted(move |_| scripted_stream(shape, copy(&items)))),
    );
    let conversation = ConversationId::new(format!("conv-{}", common::uuid_simple()));
    let request = ChatRequest::new(vec![Message::user(user)]).with_extension(conversation.clone());
    let seen = chat
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    // A blocked answer's record is handed over when the policy drops the stream, without waiting for it.
    layer.flush().await.unwrap();
    let record = db
        .store
        .conversation_calls(&conversation)
        .await
        .unwrap()
        .remove(0);
    (seen.text().to_owned(), record)
}

async fn an_answer_redacted_outside_is_stored_redacted(db: &TestDb) {
    let layer = db.layer();
    for shape in SHAPES {
        let (seen, record) = through_policy(
            db,
            &layer,
            shape,
            "I am ann@example.net",
            "Mail ops@zanzibar.example today.",
        )
        .await;
        assert_eq!(seen, "Mail [REDACTED:email] today.", "{shape:?}");
        assert_eq!(record.text(), seen, "{shape:?}");
        assert_eq!(record.outcome, CallOutcome::Completed, "{shape:?}");
        assert_eq!(
            record.request.messages[0],
            Message::user("I am [REDACTED:email]")
        );
        assert_eq!(
            verdicts(&record),
            vec![
                (
                    GuardrailStage::Request,
                    GuardrailAction::Redact,
                    Some("email")
                ),
                (
                    GuardrailStage::Output,
                    GuardrailAction::Redact,
                    Some("email")
                ),
            ],
            "{shape:?}"
        );
        // Offsets in the stored answer's text, before redaction.
        assert_eq!(
            record.guardrail[1].span.map(|s| (s.start, s.end)),
            Some((5, 25))
        );
    }
    assert_eq!(found(db, "zanzibar").await, 0);
    assert_eq!(found(db, "today").await, SHAPES.len());
    assert!(!db.stored_anywhere("zanzibar").await);
    assert!(!db.stored_anywhere("ann@example").await);
}

async fn an_answer_blocked_outside_is_stored_withheld_and_marked_blocked(db: &TestDb) {
    let layer = db.layer();
    for shape in SHAPES {
        let (seen, record) = through_policy(
            db,
            &layer,
            shape,
            "Which key opens the bucket?",
            &format!("The key is {KEY} and the secret follows"),
        )
        .await;
        assert!(
            seen.starts_with("The key is \n\n[The rest of this answer was withheld"),
            "{seen}"
        );
        assert_eq!(record.text(), seen, "{shape:?}");
        assert_eq!(record.outcome, CallOutcome::Blocked, "{shape:?}");
        assert_eq!(record.finish_reason(), Some(&FinishReason::ContentFilter));
        assert_eq!(
            verdicts(&record),
            vec![(
                GuardrailStage::Output,
                GuardrailAction::Block,
                Some("aws_access_key")
            )],
            "{shape:?}"
        );
        assert!(!serde_json::to_string(&record).unwrap().contains("AKIA"));
    }
    // Blocked calls are a status of their own in the log's filter.
    let blocked = CallLogQuery {
        status: Some(tower_chat_persistence::CallStatus::Blocked),
        ..CallLogQuery::default()
    };
    assert_eq!(
        db.store.call_log(&blocked).await.unwrap().entries.len(),
        SHAPES.len()
    );
    assert_eq!(found(db, KEY).await, 0);
    assert_eq!(found(db, "withheld").await, SHAPES.len());
    assert!(!db.stored_anywhere(KEY).await);
    assert!(!db.stored_anywhere("secret follows").await);
}

async fn a_request_refused_outside_is_recorded_as_refused_with_its_verdict(db: &TestDb) {
    let layer = db.layer();
    let items = std::sync::Arc::new(answer("never sent"));
    let chat = policy().layer(
        layer
            .clone()
            .layer(scripted(move |_| scripted_stream(SHAPES[0], copy(&items)))),
    );
    let conversation = ConversationId::new(format!("conv-{}", common::uuid_simple()));
    let audit = GuardrailAudit::new();
    let request = ChatRequest::new(vec![Message::user(format!("use {KEY} please"))])
        .with_extension(conversation.clone())
        .with_extension(audit);
    let kept = request.clone();
    let error = chat.oneshot(request).await.err().unwrap();
    assert_eq!(
        error.kind(),
        &ErrorKind::PolicyBlocked {
            check: "secrets".into()
        }
    );
    // Nothing inside saw the request: the policy refused it before calling in.
    layer.flush().await.unwrap();
    assert!(db
        .store
        .conversation_calls(&conversation)
        .await
        .unwrap()
        .is_empty());

    layer.record_refused(kept, &error);
    layer.flush().await.unwrap();
    let record = db
        .store
        .conversation_calls(&conversation)
        .await
        .unwrap()
        .remove(0);
    assert!(
        matches!(&record.outcome, CallOutcome::Failed { error } if error.kind == "policy_blocked"),
        "{:?}",
        record.outcome
    );
    assert_eq!(record.request.omitted.map(|o| o.messages), Some(1));
    assert_eq!(
        verdicts(&record),
        vec![(
            GuardrailStage::Request,
            GuardrailAction::Block,
            Some("aws_access_key")
        )]
    );
    assert!(!db.stored_anywhere(KEY).await);
}

async fn an_answer_a_whole_text_check_blocked_outside_is_stored_withheld_and_marked_blocked(
    db: &TestDb,
) {
    let layer = db.layer();
    let asked = Arc::new(AtomicUsize::new(0));
    for shape in SHAPES {
        let policy = policy().check(moderation(MARKER, asked.clone()));
        let (seen, record) = through(
            db,
            &layer,
            policy,
            shape,
            "What is the code?",
            &format!("Mail ops@zanzibar.example: the code is {MARKER}, use it"),
        )
        .await;
        // The check judged the whole text at its end: none of it reached the client.
        assert_eq!(
            seen,
            "[The rest of this answer was withheld by the content policy (check `moderation`).]",
            "{shape:?}"
        );
        assert_eq!(record.text(), seen, "{shape:?}");
        assert_eq!(record.outcome, CallOutcome::Blocked, "{shape:?}");
        assert_eq!(record.finish_reason(), Some(&FinishReason::ContentFilter));
        assert_eq!(
            verdicts(&record),
            vec![
                (
                    GuardrailStage::Output,
                    GuardrailAction::Redact,
                    Some("email")
                ),
                (
                    GuardrailStage::Output,
                    GuardrailAction::Block,
                    Some("violence")
                ),
            ],
            "{shape:?}"
        );
        // The check saw the text as the pattern checks left it; its span is in that text.
        let redacted = "Mail [REDACTED:email]: the code is ";
        assert_eq!(
            record.guardrail[1].span.map(|s| (s.start, s.end)),
            Some((redacted.len(), redacted.len() + MARKER.len())),
            "{shape:?}"
        );
    }
    // Asked once per answer: the guard took the judgement the recorder had made.
    assert_eq!(asked.load(Ordering::SeqCst), SHAPES.len());
    for withheld in [MARKER, "zanzibar", "use it"] {
        assert_eq!(found(db, withheld).await, 0, "{withheld}");
        assert!(!db.stored_anywhere(withheld).await, "{withheld}");
    }
    assert_eq!(found(db, "withheld").await, SHAPES.len());
}

async fn an_answer_a_whole_text_check_redacted_outside_is_stored_redacted(db: &TestDb) {
    let layer = db.layer();
    let asked = Arc::new(AtomicUsize::new(0));
    for shape in SHAPES {
        let policy = policy().check(moderation(MARKER, asked.clone()).redact());
        let (seen, record) = through(
            db,
            &layer,
            policy,
            shape,
            "What is the code?",
            &format!("The code is {MARKER}, use it"),
        )
        .await;
        assert_eq!(seen, "The code is [REDACTED:violence], use it", "{shape:?}");
        assert_eq!(record.text(), seen, "{shape:?}");
        assert_eq!(record.outcome, CallOutcome::Completed, "{shape:?}");
        assert_eq!(record.finish_reason(), Some(&FinishReason::Stop));
        assert_eq!(
            verdicts(&record),
            vec![(
                GuardrailStage::Output,
                GuardrailAction::Redact,
                Some("violence")
            )],
            "{shape:?}"
        );
    }
    assert_eq!(asked.load(Ordering::SeqCst), SHAPES.len());
    assert_eq!(found(db, MARKER).await, 0);
    assert_eq!(found(db, "use it").await, SHAPES.len());
    assert!(!db.stored_anywhere(MARKER).await);
}

async fn a_text_held_for_a_whole_text_check_is_not_kept_when_the_client_leaves(db: &TestDb) {
    let layer = db.layer();
    let asked = Arc::new(AtomicUsize::new(0));
    // The model says the marker and then stalls: the text never ends, so it is never judged.
    let chat = policy()
        .check(moderation(MARKER, asked.clone()))
        .layer(layer.clone().layer(scripted(|_| {
            let said = vec![Ok(ChatEvent::text(format!("The code is {MARKER}")))];
            Box::pin(futures_util::stream::iter(said).chain(futures_util::stream::pending()))
        })));
    let conversation = ConversationId::new(format!("conv-{}", common::uuid_simple()));
    let request = ChatRequest::new(vec![Message::user("What is the code?")])
        .with_extension(conversation.clone());
    let mut stream = chat.oneshot(request).await.unwrap();
    // The guard holds the text for the check: the client has nothing yet, and leaves.
    assert!(stream.next().now_or_never().is_none());
    drop(stream);
    layer.flush().await.unwrap();
    let record = db
        .store
        .conversation_calls(&conversation)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(record.outcome, CallOutcome::Cancelled);
    assert_eq!(record.text(), "");
    assert!(record.guardrail.is_empty());
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    assert_eq!(found(db, MARKER).await, 0);
    assert!(!db.stored_anywhere(MARKER).await);
}
