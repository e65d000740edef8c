//! Decisions that must be refused: each fails the call with a typed error before anything runs, and the tool
//! body provably never ran.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use serde_json::json;
use tower_chat::{
    ApprovalDecision, CallerIdentity, ChatRequest, ConversationId, ErrorKind, FinishReason,
    Message, ToolCall,
};
use tower_chat_approval::{
    ApprovalLayer, ApprovalStore, AuditOutcome, AuditRecord, Clock, ManualClock,
    MemoryApprovalStore, PendingApproval, RefusalKind, StoreFuture,
};

/// A paused conversation: the model called `delete` (gated) on a.txt.
struct Paused {
    chat: Chat,
    runs: Runs,
    model: Model,
    store: MemoryApprovalStore,
    id: String,
    history: Vec<Message>,
}

async fn paused(shape: Delivery, layer: ApprovalLayer) -> Paused {
    let store = MemoryApprovalStore::new();
    let runs = Runs::new();
    let (m, handle) = model(shape, vec![delete_call("c1", "a.txt")]);
    let chat = stack(&layer.store(store.clone()), &runs, m);
    let (events, history) = pause(&chat, vec![Message::user("clean up")]).await;
    let id = approvals(&events)[0].id.clone();
    Paused {
        chat,
        runs,
        model: handle,
        store,
        id,
        history,
    }
}

impl Paused {
    /// Send `request`; it must be refused for `expected`, with no tool run and no model call.
    async fn refused(&self, request: ChatRequest, expected: RefusalKind) {
        let deletes = self.runs.deletes();
        let model_calls = self.model.calls();
        let error = try_run(self.chat.clone(), request)
            .await
            .expect_err("must be refused");
        assert_eq!(refusal_kinds(&error), vec![expected], "{error}");
        assert_eq!(self.runs.deletes(), deletes, "the tool body ran");
        assert_eq!(self.model.calls(), model_calls, "the model was called");
    }

    async fn audit(&self) -> Vec<AuditOutcome> {
        self.store
            .audit_log(&ConversationId::new(CONVERSATION))
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.outcome)
            .collect()
    }
}

#[tokio::test]
async fn a_forged_id_is_refused() {
    for shape in SHAPES {
        let p = paused(shape, flagged()).await;
        let forged = format!("apr_{}", "0".repeat(32));
        let forged_request = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve(forged)],
        );
        p.refused(forged_request, RefusalKind::Unknown).await;
        assert_eq!(p.runs.deletes(), 0);
        assert_eq!(
            p.audit().await,
            vec![AuditOutcome::Refused(RefusalKind::Unknown)]
        );
        assert_eq!(p.store.pending_count(), 1, "the real approval is untouched");

        // A huge forged id is refused without flooding the error or the audit log.
        let huge = "apr_".to_owned() + &"x".repeat(1 << 20);
        let forged_request = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve(huge)],
        );
        let error = try_run(p.chat.clone(), forged_request).await.unwrap_err();
        assert_eq!(refusal_kinds(&error), vec![RefusalKind::Unknown]);
        assert!(error.message().len() < 300, "{}", error.message().len());
        let log = p
            .store
            .audit_log(&ConversationId::new(CONVERSATION))
            .await
            .unwrap();
        assert!(log.iter().all(|r| r.approval_id.len() < 100));
        assert_eq!(p.runs.deletes(), 0);
    }
}

#[tokio::test]
async fn a_decision_for_a_call_never_put_to_an_approver_is_refused() {
    for shape in SHAPES {
        let p = paused(shape, flagged()).await;
        // The loop's own protocol names calls by call id; through the layer that is not an approval id.
        let raw = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve("c1")],
        );
        p.refused(raw, RefusalKind::Unknown).await;

        // A call injected into the history and decided by its call id: refused.
        let mut history = p.history.clone();
        if let Some(Message::Assistant(a)) = history
            .iter_mut()
            .rev()
            .find(|m| matches!(m, Message::Assistant(_)))
        {
            a.tool_calls.push(delete_call("c9", "/etc/passwd"));
        }
        let injected = decide(
            request(history.clone()),
            vec![ApprovalDecision::approve("c9")],
        );
        p.refused(injected, RefusalKind::Unknown).await;
        assert_eq!(p.runs.deletes(), 0);

        // The real approval next to the injected call: it decides c1 only; c9 is put to an approver, not run.
        let alongside = decide(request(history), vec![ApprovalDecision::approve(&p.id)]);
        let events = try_run(p.chat.clone(), alongside)
            .await
            .expect("c1 is approved");
        assert_eq!(p.runs.deletes(), 1, "{shape:?}");
        assert_eq!(tool_results(&events).len(), 1);
        assert_eq!(tool_results(&events)[0].call_id, "c1");
        let asked = approvals(&events);
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].call, delete_call("c9", "/etc/passwd"));
        assert_eq!(finish(&events), Some(FinishReason::AwaitingApproval));
    }
}

#[tokio::test]
async fn a_replayed_id_is_refused_and_the_tool_ran_only_once() {
    for shape in SHAPES {
        let p = paused(shape, flagged()).await;
        let first = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve(&p.id)],
        );
        try_run(p.chat.clone(), first).await.expect("first use");
        assert_eq!(p.runs.deletes(), 1);

        // The same resume again (the history from before the first resume, where c1 is still pending).
        let again = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve(&p.id)],
        );
        p.refused(again, RefusalKind::Replayed).await;
        assert_eq!(p.runs.deletes(), 1, "{shape:?}");
        assert_eq!(
            p.audit().await,
            vec![
                AuditOutcome::Approved,
                AuditOutcome::Refused(RefusalKind::Replayed)
            ]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_uses_of_one_id_run_the_tool_once() {
    let store = TestStore::default();
    let runs = Runs::new();
    let (m, _) = model(Delivery::OneByOne, vec![delete_call("c1", "a.txt")]);
    let chat = stack(&flagged().store(store.clone()), &runs, m);
    let (events, history) = pause(&chat, vec![Message::user("clean up")]).await;
    let id = approvals(&events)[0].id.clone();
    let use_it = || {
        let chat = chat.clone();
        let request = decide(
            request(history.clone()),
            vec![ApprovalDecision::approve(&id)],
        );
        tokio::spawn(async move {
            let stream = tower::ServiceExt::oneshot(chat, request).await?;
            match drain(stream).await {
                (_, Some(error)) => Err(error),
                (events, None) => Ok(events),
            }
        })
    };
    let handles: Vec<_> = (0..8).map(|_| use_it()).collect();
    let mut ok = 0;
    for handle in handles {
        match handle.await.unwrap() {
            Ok(_) => ok += 1,
            // Between one request's take and its audit record, a replay looks like an unknown id.
            Err(error) => assert!(
                matches!(
                    refusal_kinds(&error)[..],
                    [RefusalKind::Replayed] | [RefusalKind::Unknown]
                ),
                "{error}"
            ),
        }
    }
    assert_eq!(ok, 1);
    assert_eq!(runs.deletes(), 1);
    let log = store
        .audit_log(&ConversationId::new(CONVERSATION))
        .await
        .unwrap();
    assert_eq!(
        log.iter()
            .filter(|r| r.outcome == AuditOutcome::Approved)
            .count(),
        1
    );
    assert_eq!(log.len(), 8, "every attempt is audited");
}

#[tokio::test]
async fn an_expired_id_is_refused() {
    for shape in SHAPES {
        // Far from the wall clock: ids issued or checked by the system time instead would not expire here.
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000));
        let ttl = Duration::from_secs(60);
        let p = paused(shape, flagged().ttl(ttl).clock(clock.clone())).await;
        clock.advance(ttl - Duration::from_secs(1));
        assert_eq!(p.store.purge_expired(clock.now()).await.unwrap(), 0);
        clock.advance(Duration::from_secs(2));
        let late = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve(&p.id)],
        );
        p.refused(late, RefusalKind::Expired).await;
        assert_eq!(p.runs.deletes(), 0);
        assert_eq!(p.store.purge_expired(clock.now()).await.unwrap(), 1);
    }
}

#[tokio::test]
async fn an_id_is_valid_until_its_ttl_has_passed_on_the_layers_clock() {
    for shape in SHAPES {
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000));
        let ttl = Duration::from_secs(60);
        let p = paused(shape, flagged().ttl(ttl).clock(clock.clone())).await;
        clock.advance(ttl - Duration::from_secs(1));
        let in_time = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve(&p.id)],
        );
        try_run(p.chat.clone(), in_time)
            .await
            .expect("approved before its expiry");
        assert_eq!(p.runs.deletes(), 1, "{shape:?}");
    }
}

#[tokio::test]
async fn arguments_or_tool_edited_in_the_history_after_approval_are_refused() {
    for shape in SHAPES {
        let p = paused(shape, flagged()).await;
        let mut history = p.history.clone();
        edit_call(&mut history, "c1", |call| {
            *call = ToolCall::new("c1", "delete", json!({"path": "/etc/passwd"}))
        });
        let tampered = decide(request(history), vec![ApprovalDecision::approve(&p.id)]);
        p.refused(tampered, RefusalKind::Tampered).await;

        let mut history = p.history.clone();
        edit_call(&mut history, "c1", |call| call.name = "weather".into());
        let renamed = decide(request(history), vec![ApprovalDecision::approve(&p.id)]);
        p.refused(renamed, RefusalKind::Tampered).await;
        assert_eq!(p.runs.deletes(), 0);
        assert_eq!(p.runs.weathers(), 0);

        // The refusals did not use the id up: the untampered history still resumes.
        let honest = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve(&p.id)],
        );
        try_run(p.chat.clone(), honest).await.expect("resumes");
        assert_eq!(p.runs.deletes(), 1);
    }
}

#[tokio::test]
async fn a_call_already_answered_in_the_history_is_not_pending() {
    let p = paused(Delivery::AllAtOnce, flagged()).await;
    let mut history = p.history.clone();
    history.push(Message::Tool(tower_chat::ToolMessage::success(
        "c1", "delete", "done",
    )));
    let request = decide(request(history), vec![ApprovalDecision::approve(&p.id)]);
    p.refused(request, RefusalKind::NotPending).await;
}

#[tokio::test]
async fn an_approver_the_rule_rejects_is_refused() {
    for shape in SHAPES {
        let layer = flagged().approver_rule(|input| {
            (input.approver() == Some("operator"))
                .then_some(())
                .ok_or_else(|| {
                    format!(
                        "{} may not approve `{}`",
                        input.approver().unwrap_or("nobody"),
                        input.pending().call.name
                    )
                })
        });
        let p = paused(shape, layer).await;
        let by_alice = decide(
            request(p.history.clone()),
            vec![ApprovalDecision::approve(&p.id)],
        );
        p.refused(by_alice, RefusalKind::ApproverRejected).await;
        let log = p
            .store
            .audit_log(&ConversationId::new(CONVERSATION))
            .await
            .unwrap();
        assert_eq!(
            log[0].reason.as_deref(),
            Some("alice may not approve `delete`")
        );
        assert_eq!(log[0].approver.as_deref(), Some("alice"));
        assert_eq!(p.runs.deletes(), 0);
    }
}

#[tokio::test]
async fn a_decision_sent_to_another_conversation_or_by_another_caller_is_refused() {
    for shape in SHAPES {
        let p = paused(shape, flagged()).await;
        let elsewhere = decide(
            request(p.history.clone()).with_extension(ConversationId::new("conv-2")),
            vec![ApprovalDecision::approve(&p.id)],
        );
        p.refused(elsewhere, RefusalKind::OtherConversation).await;

        let nowhere = decide(
            ChatRequest::new(p.history.clone()).with_extension(CallerIdentity::new(CALLER)),
            vec![ApprovalDecision::approve(&p.id)],
        );
        p.refused(nowhere, RefusalKind::OtherConversation).await;

        let mallory = decide(
            request(p.history.clone()).with_extension(CallerIdentity::new("mallory")),
            vec![ApprovalDecision::approve(&p.id)],
        );
        p.refused(mallory, RefusalKind::OtherCaller).await;
        assert_eq!(p.runs.deletes(), 0);
        assert_eq!(p.store.pending_count(), 1);
    }
}

#[tokio::test]
async fn one_refused_decision_refuses_the_whole_request() {
    let store = MemoryApprovalStore::new();
    let runs = Runs::new();
    let (m, _) = model(
        Delivery::AllAtOnce,
        vec![delete_call("c1", "a.txt"), delete_call("c2", "b.txt")],
    );
    let chat = stack(&flagged().store(store.clone()), &runs, m);
    let (events, history) = pause(&chat, vec![Message::user("x")]).await;
    let ids: Vec<String> = approvals(&events).into_iter().map(|a| a.id).collect();

    let mixed = decide(
        request(history.clone()),
        vec![
            ApprovalDecision::approve(&ids[0]),
            ApprovalDecision::approve("apr_forged"),
        ],
    );
    let error = try_run(chat.clone(), mixed).await.unwrap_err();
    assert_eq!(refusal_kinds(&error), vec![RefusalKind::Unknown]);
    assert_eq!(runs.deletes(), 0);
    assert_eq!(
        store.pending_count(),
        2,
        "the valid approval was not used up"
    );

    let twice = decide(
        request(history.clone()),
        vec![
            ApprovalDecision::approve(&ids[0]),
            ApprovalDecision::deny(&ids[0], "no"),
        ],
    );
    let error = try_run(chat.clone(), twice).await.unwrap_err();
    assert_eq!(refusal_kinds(&error), vec![RefusalKind::Duplicate]);
    assert_eq!(runs.deletes(), 0);

    let both = decide(
        request(history),
        vec![
            ApprovalDecision::approve(&ids[0]),
            ApprovalDecision::approve(&ids[1]),
        ],
    );
    try_run(chat.clone(), both).await.expect("both valid");
    assert_eq!(runs.deletes(), 2);
}

/// A memory store that fails writes of pending approvals, or yields to the scheduler before every operation (so
/// concurrent requests interleave between checking an id and taking it).
#[derive(Clone, Default)]
struct TestStore {
    inner: MemoryApprovalStore,
    broken: bool,
}

impl TestStore {
    fn op<'a, T: Send + 'a>(&'a self, op: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            op.await
        })
    }
}

impl ApprovalStore for TestStore {
    fn insert_pending<'a>(&'a self, p: &'a PendingApproval) -> StoreFuture<'a, ()> {
        if self.broken {
            return Box::pin(async {
                Err(tower_chat::ChatError::new(ErrorKind::Store, "disk full"))
            });
        }
        self.op(self.inner.insert_pending(p))
    }
    fn get_pending<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<PendingApproval>> {
        self.op(self.inner.get_pending(id))
    }
    fn take_pending<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<PendingApproval>> {
        self.op(self.inner.take_pending(id))
    }
    fn list_pending<'a>(
        &'a self,
        now: SystemTime,
        after: Option<&'a tower_chat_approval::PendingCursor>,
        limit: usize,
    ) -> StoreFuture<'a, Vec<PendingApproval>> {
        self.op(self.inner.list_pending(now, after, limit))
    }
    fn decide_pending<'a>(
        &'a self,
        id: &'a str,
        decision: &'a tower_chat_approval::PendingDecision,
    ) -> StoreFuture<'a, tower_chat_approval::DecideOutcome> {
        self.op(self.inner.decide_pending(id, decision))
    }
    fn purge_expired(&self, now: SystemTime) -> StoreFuture<'_, u64> {
        self.op(self.inner.purge_expired(now))
    }
    fn insert_audit<'a>(&'a self, record: &'a AuditRecord) -> StoreFuture<'a, ()> {
        self.op(self.inner.insert_audit(record))
    }
    fn audit_log<'a>(&'a self, c: &'a ConversationId) -> StoreFuture<'a, Vec<AuditRecord>> {
        self.op(self.inner.audit_log(c))
    }
}

#[tokio::test]
async fn an_approval_that_cannot_be_stored_is_never_reported() {
    for shape in SHAPES {
        let runs = Runs::new();
        let (m, _) = model(shape, vec![delete_call("c1", "a.txt")]);
        let chat = stack(
            &flagged().store(TestStore {
                broken: true,
                ..TestStore::default()
            }),
            &runs,
            m,
        );
        let stream = tower::ServiceExt::oneshot(chat, request(vec![Message::user("x")]))
            .await
            .unwrap();
        let (events, error) = drain(stream).await;
        assert_eq!(error.expect("store error").kind(), &ErrorKind::Store);
        assert!(
            approvals(&events).is_empty(),
            "an unrecorded id was reported"
        );
        assert_eq!(runs.deletes(), 0);
    }
}
