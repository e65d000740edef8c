//! Two gateway stacks sharing one PostgreSQL store: a pause in one resumes in the other, an id is used once across
//! both, even when both try at the same moment. Needs `DATABASE_URL`; skipped (with a message) without it.

mod common;

use std::panic::AssertUnwindSafe;

use common::*;
use futures_util::FutureExt;
use tower_chat::{ApprovalDecision, ConversationId, ErrorKind, FinishReason, Message};
use tower_chat_approval::{ApprovalStore, AuditOutcome, PostgresApprovalStore, RefusalKind};
use tower_chat_persistence::PostgresStore;

/// A replica's own connection pool to the shared schema.
async fn replica(url: &str, schema: &str) -> PostgresApprovalStore {
    let store = PostgresStore::builder(url)
        .schema(schema)
        .connect()
        .await
        .expect("connect to PostgreSQL");
    PostgresApprovalStore::new(store)
        .await
        .expect("create the approval tables")
}

#[tokio::test]
async fn two_stacks_sharing_one_postgres_store() {
    let Some(url) = database_url() else { return };
    let schema = format!("tcapproval_{}", uuid::Uuid::new_v4().simple());
    let a = replica(&url, &schema).await;
    let b = replica(&url, &schema).await;
    let outcome = AssertUnwindSafe(scenario(a.clone(), b))
        .catch_unwind()
        .await;
    a.get_ref()
        .client()
        .await
        .unwrap()
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn scenario(store_a: PostgresApprovalStore, store_b: PostgresApprovalStore) {
    for (round, shape) in SHAPES.into_iter().enumerate() {
        let calls = vec![
            delete_call("c1", &format!("{round}.txt")),
            weather_call("c2"),
        ];
        let (runs_a, runs_b) = (Runs::new(), Runs::new());
        let (model_a, _) = model(shape, calls.clone());
        let (model_b, continued) = model(shape, calls);
        let a = stack(&flagged().store(store_a.clone()), &runs_a, model_a);
        let b = stack(&flagged().store(store_b.clone()), &runs_b, model_b);

        // Replica A pauses; replica B resumes.
        let (events, history) = pause(&a, vec![Message::user("clean up")]).await;
        let id = approvals(&events)[0].id.clone();
        assert_eq!(runs_a.weathers(), 1);
        let events = try_run(
            b.clone(),
            decide(
                request(history.clone()),
                vec![ApprovalDecision::approve(&id)],
            ),
        )
        .await
        .expect("resumed on the other replica");
        assert_eq!((runs_a.deletes(), runs_b.deletes()), (0, 1), "{shape:?}");
        assert_eq!(finish(&events), Some(FinishReason::Stop));
        assert_eq!(continued.calls(), 1);

        // The id is spent for both replicas.
        let error = try_run(
            a.clone(),
            decide(request(history), vec![ApprovalDecision::approve(&id)]),
        )
        .await
        .unwrap_err();
        assert_eq!(refusal_kinds(&error), vec![RefusalKind::Replayed]);
        assert_eq!(runs_a.deletes() + runs_b.deletes(), 1);
    }
    let log = store_b
        .audit_log(&ConversationId::new(CONVERSATION))
        .await
        .unwrap();
    let outcomes: Vec<AuditOutcome> = log.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            AuditOutcome::Approved,
            AuditOutcome::Refused(RefusalKind::Replayed)
        ]
        .repeat(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_replicas_racing_for_one_id_run_the_tool_once() {
    let Some(url) = database_url() else { return };
    let schema = format!("tcapproval_{}", uuid::Uuid::new_v4().simple());
    let store_a = replica(&url, &schema).await;
    let store_b = replica(&url, &schema).await;
    let outcome = AssertUnwindSafe(async {
        let runs = Runs::new();
        let (model_a, _) = model(Delivery::OneByOne, vec![delete_call("c1", "a.txt")]);
        let (model_b, _) = model(Delivery::OneByOne, vec![delete_call("c1", "a.txt")]);
        let a = stack(&flagged().store(store_a.clone()), &runs, model_a);
        let b = stack(&flagged().store(store_b.clone()), &runs, model_b);
        let (events, history) = pause(&a, vec![Message::user("x")]).await;
        let id = approvals(&events)[0].id.clone();
        let attempts: Vec<_> = (0..6)
            .map(|i| {
                let chat = if i % 2 == 0 { a.clone() } else { b.clone() };
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
            })
            .collect();
        let mut succeeded = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(_) => succeeded += 1,
                Err(error) => {
                    assert_eq!(error.kind(), &ErrorKind::Approval, "{error}");
                    assert!(matches!(
                        refusal_kinds(&error)[..],
                        [RefusalKind::Replayed] | [RefusalKind::Unknown]
                    ));
                }
            }
        }
        assert_eq!(succeeded, 1);
        assert_eq!(runs.deletes(), 1);
    })
    .catch_unwind()
    .await;
    store_a
        .get_ref()
        .client()
        .await
        .unwrap()
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
